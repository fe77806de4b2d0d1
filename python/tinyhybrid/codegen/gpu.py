"""GPU lowering: a kernel for a device that runs a grid of work-groups (Renderer.has_local: OpenCL here, CUDA and PTX
next). Every output loop of a fixed size becomes a GLOBAL range, the position of a work-group in the grid (at most
the device's dimensions: outer ones merge); LOCAL ranges (the LOCAL action) are a work-item's place in its group, and
a GROUP_REDUCE range (GROUP, GROUPTOP) splits a reduce among the work-items of a group, whose partial results the
renderer combines through local memory behind a barrier. Dimension 0 of the grid and of the group is the innermost
range, so neighbouring work-items touch neighbouring memory. A loop of a variable's length stays a loop in every
work-item. The default plan for such a device (gpu_optimizations) is here too; codegen/search.py searches the same
actions with BEAM."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tinyhybrid.codegen.expand import csize
from tinyhybrid.codegen.kernel import KernelOptError, KernelParts, Opt, OptOps, rkind, rng, rsize, stride
from tinyhybrid.codegen.opt import LOCALS, apply_opt
from tinyhybrid.codegen.tc import tc_choices
from tinyhybrid.helpers import NOLOCALS, TC, TC_SELECT, prod
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

if TYPE_CHECKING:
  from tinyhybrid.codegen.lower import LoweredKernel
  from tinyhybrid.renderer import Renderer

Launch = tuple[tuple[int, ...], tuple[int, ...]]  # (work-groups per dimension, work-items per group per dimension)


def grid(loops: list[UOp], rloops: list[UOp]) -> tuple[list[UOp], list[UOp]]:
  """The GLOBAL ranges and the local ones (LOCAL output ranges, then the GROUP_REDUCE one), each in dimension order."""
  return [r for r in reversed(loops) if rkind(r) is AxisType.GLOBAL], [r for r in reversed(loops + rloops) if rkind(r) in LOCALS]


def _fewer_loops(ctx: Renderer, e: UOp) -> UOp | None:
  """More output loops of fixed sizes than grid dimensions: the two outermost become one."""
  glob = [r for r in e.src[1:] if rkind(r) is AxisType.LOOP and r.src[0].op is Ops.CONST]
  if len(glob) <= len(ctx.max_global): return None
  a, b = glob[0], glob[1]
  m = rng(rsize(a) * rsize(b), a.arg[0], AxisType.LOOP)
  loops = [m if r is a else r for r in e.src[1:] if r is not b]
  return UOp(Ops.END, e.dtype, (e.src[0].substitute({a: m // rsize(b), b: m % rsize(b)}).simplify(), *loops))


# the work-item's position first: nothing depends on a loop around it; a warp's lanes stay innermost (threadIdx.x)
_NEST_ORDER = {AxisType.GLOBAL: 0, AxisType.LOCAL: 1, AxisType.WARP: 1}


def _grid_first(e: UOp) -> UOp | None:
  loops = sorted(e.src[1:], key=lambda r: _NEST_ORDER.get(rkind(r), 2))
  return None if loops == list(e.src[1:]) else e.replace(src=(e.src[0], *loops))


def _on_grid(r: UOp) -> UOp | None:
  return rng(rsize(r), r.arg[0], AxisType.GLOBAL) if rkind(r) is AxisType.LOOP and r.src[0].op is Ops.CONST else None


# a kernel's fixed-size output loops to the grid: first as many loops as the grid has dimensions (a rule on the kernel's
# END), then each one a GLOBAL range, first in the nest
pm_fit_grid = PatternMatcher([(UPat(Ops.END, name="e"), _fewer_loops)])
pm_to_grid = PatternMatcher([(UPat(Ops.RANGE, name="r"), _on_grid), (UPat(Ops.END, name="e"), _grid_first)])


def to_grid(ast: UOp, ren: Renderer) -> tuple[UOp, Launch]:
  """The kernel with its fixed-size output loops mapped to the grid (GLOBAL ranges first in the nest), and its launch."""
  ast = graph_rewrite(graph_rewrite(ast, pm_fit_grid, ctx=ren, name="fit the grid"), pm_to_grid, name="map to the grid")
  k = KernelParts.of(ast)
  gl, lo = grid(k.loops, k.reduce_ranges)
  if any(rsize(r) > m for r, m in zip(gl, ren.max_global)): raise KernelOptError(f"a grid of {[rsize(r) for r in gl]} is past the device's")
  return ast, (_dims(gl), _dims(lo))


def _dims(rs: list[UOp]) -> tuple[int, ...]: return tuple(rsize(r) for r in rs) + (1,) * (3 - len(rs))


def check_local_memory(expanded: UOp, launch: Launch, ren: Renderer) -> None:
  """A grouped reduce keeps every work-item's accumulators in local memory: they must fit the device's."""
  accs = [u for u in expanded.toposort() if u.op is Ops.REDUCE and any(rkind(r) is AxisType.GROUP_REDUCE for r in u.src[u.arg[1]:])]
  need = sum(csize(a.dtype) * a.dtype.count for a in accs) * prod(launch[1])
  if need > ren.local_mem: raise KernelOptError(f"{need} bytes of local memory, past the device's {ren.local_mem}")


# ** the default plan **

class _Plan:
  def __init__(self, ast: UOp, ren: Renderer):
    self.opts: list[Opt] = []
    self.ast, self.ren = ast, ren
    self.parts = KernelParts.of(ast)

  def apply(self, op: OptOps, axis: int, arg: int = 0) -> bool:
    try: self.ast = apply_opt(self.ast, o := Opt(op, axis, arg), self.ren)
    except KernelOptError: return False
    self.opts.append(o)
    self.parts = KernelParts.of(self.ast)
    return True

  def loops(self, kind: AxisType = AxisType.LOOP) -> list[UOp]: return [r for r in self.parts.loops if rkind(r) is kind and r.src[0].op is Ops.CONST]
  def lanes(self, kinds: tuple[AxisType, ...]) -> int: return prod(rsize(r) for r in self.parts.all_ranges() if rkind(r) in kinds)


def _loads(p: KernelParts) -> list[UOp]: return [u.src[0].src[1] for u in p.value.toposort() if u.op is Ops.LOAD and u.src[0] is not p.out]


GROUP_STEPS = 64      # reduce steps per work-item left from which a reduce is grouped
GROUP_OUTPUTS = 4096  # outputs below which a reduce is grouped: too few work-groups to fill the device otherwise
TILE_VECTORS = 16     # accumulator vectors of a register tile (of the device's width)


def tc_optimizations(plan: _Plan) -> list[Opt] | None:
  """A matmul on the tensor cores (tinygrad's TC path of the heuristics): the TC action, then a register tile of
  several instruction tiles per warp (a fragment of A serves a row of B's, one of B a column of A's), then a few
  warps per work-group along what is left. None when the kernel takes no TC action (the plain plan follows)."""
  if not any(plan.apply(OptOps.TC, i, int(TC_SELECT.value)) for i in range(len(tc_choices(plan.parts)))): return None
  for r in [r for r in plan.parts.loops if rkind(r) is AxisType.LOOP][::-1]:
    for amt in (4, 2):
      if rsize(r) % amt == 0 and rsize(r) // amt >= 2 and plan.apply(OptOps.UPCAST, r.arg[0], amt): break
  for r in [r for r in plan.parts.loops if rkind(r) is AxisType.LOOP][::-1]:
    if rsize(r) % 2 == 0 and rsize(r) // 2 >= 2: plan.apply(OptOps.LOCAL, r.arg[0], 2)
  return plan.opts


def gpu_optimizations(k: LoweredKernel, ren: Renderer) -> list[Opt]:
  """A plan for a GPU-style device (tinygrad's hand_coded_optimizations for GPUs): vectors along the output axis
  contiguous in memory (the device's width), or vector accumulators along such a reduce axis; a register tile along
  the output axes a load is reused across (matmul, convolution); a reduce with few outputs and many steps grouped
  among a work-group's items, each taking every n-th step (neighbouring items read neighbouring memory); and
  work-groups along the output loops that are left."""
  plan = _Plan(k.ast, ren)
  p = plan.parts
  if any(r.src[0].op is not Ops.CONST for r in p.all_ranges()): return []  # a loop of a variable's length: the grid only
  if TC and not NOLOCALS and ren.tensor_cores and (tc := tc_optimizations(plan)) is not None: return tc  # a warp is a group
  out_idx, loads, red, vec = p.out.src[1], _loads(p), p.reduce, ren.vec
  streamed = [ld for ld in loads if any(stride(ld, r) != 0 for r in p.reduce_ranges) and any(stride(ld, r) != 0 for r in p.loops)]
  reused = [r for r in p.loops if red is not None and any(stride(ld, r) == 0 for ld in streamed)]
  # 1. vectors along the output axis contiguous in memory, if every load is contiguous or the same along it (a gather
  # otherwise), else vector accumulators along a reduce axis contiguous in memory
  cont = next((r for r in reversed(p.loops) if stride(out_idx, r) == 1 and rsize(r) > 1 and
               (red is None or all(stride(ld, r) in (0, 1) for ld in loads))), None)
  if cont is not None and vec > 1:
    amt = next((a for a in ((2 * vec, vec) if cont in reused else (vec,)) if rsize(cont) % a == 0), 0)
    if not amt and vec // 4 <= rsize(cont) <= vec: amt = rsize(cont)  # the whole axis, in chunks of different widths
    if amt > 1: plan.apply(OptOps.UPCAST, cont.arg[0], amt)
  elif red is not None and vec > 1:
    rvec = next((r for r in reversed(p.reduce_ranges) if any(stride(ld, r) == 1 for ld in loads)), None)
    if rvec is not None and (amt := next((a for a in (vec, 8, 4) if rsize(rvec) % a == 0 and rsize(rvec) >= 2 * a), 0)):
      plan.apply(OptOps.UNROLL, rvec.arg[0], amt)
  # 2. register tile: upcast the other reused output axes while the accumulators fit
  for r in reused:
    if r is cont: continue
    for amt in (8, 4, 3, 2):
      if rsize(r) % amt == 0 and plan.lanes((AxisType.UPCAST,)) * amt <= TILE_VECTORS * vec and plan.apply(OptOps.UPCAST, r.arg[0], amt): break
  # 3. unroll a short reduce axis (a convolution's window), a tile's reduce a little
  for r in [r for r in plan.parts.reduce_ranges if rkind(r) is AxisType.REDUCE]:
    if rsize(r) <= 4: plan.apply(OptOps.UNROLL, r.arg[0], rsize(r))
    elif reused and rsize(r) % 4 == 0: plan.apply(OptOps.UNROLL, r.arg[0], 4)
  # 4. a reduce with many steps and few outputs: its longest loop split among the items of a group
  rloops = [r for r in plan.parts.reduce_ranges if rkind(r) is AxisType.REDUCE]
  if rloops and not reused and not NOLOCALS and prod(rsize(r) for r in plan.loops()) < GROUP_OUTPUTS:
    big = max(rloops, key=rsize)
    for g in (16, 8, 4):
      if rsize(big) % g == 0 and prod(rsize(r) for r in rloops) // g >= GROUP_STEPS and plan.apply(OptOps.GROUP, big.arg[0], g): break
  # 5. work-groups: local tiles along the output loops left, innermost first, keeping two groups per loop at least;
  # a group is square-ish where two loops are left (it shares a tile's loads both ways)
  loops = plan.loops() if not NOLOCALS else []  # NOLOCALS=1: a work-item per group
  for i, r in enumerate(reversed(loops)):
    have = plan.lanes(LOCALS)
    cap = ren.group_items // have if i + 1 == len(loops) else max(ren.group_items // have // 4, 1)
    for amt in (128, 64, 32, 16, 8, 4, 2):
      if amt <= cap and rsize(r) % amt == 0 and rsize(r) // amt >= 2 and plan.apply(OptOps.LOCAL, r.arg[0], amt): break
  return plan.opts
