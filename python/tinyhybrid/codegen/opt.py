"""Optimization actions on a lowered kernel. An Opt is data: applying it rewrites the kernel IR's ranges (splitting
one into an outer loop and an inner UPCAST/UNROLL/LOCAL/GROUP_REDUCE range, marking the range split across cores,
hoisting part of a reduce out of the output loops, reordering loops). Later passes give the new ranges their meaning:
the expander turns UPCAST/UNROLL ranges into vector lanes; on the CPU the renderer splits the THREAD (or GROUP_REDUCE)
range across cores; on a GPU-style device (Renderer.has_local) codegen/gpu.py maps the output loops to the grid, LOCAL
ranges are work-items of a work-group, and a GROUP_REDUCE range splits a reduce among them, combined in local memory.
Which actions apply depends on the device: THREAD and BLOCK are the CPU's, LOCAL and GROUPTOP a GPU's.

The kernel's shared types (Opt, OptOps, KernelParts, ...) are in codegen/kernel.py; tinygrad's programs import Opt,
OptOps and KernelOptError from here."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite
from tinyhybrid.codegen.kernel import (MAX_LANES, MAX_UPCAST, LANES, KernelOptError, KernelParts, Opt, OptOps, rkind, rng,
                                       rsize)
from tinyhybrid.codegen.tc import apply_tc

if TYPE_CHECKING:
  from tinyhybrid.renderer import Renderer

def _split(k: KernelParts, r: UOp, amt: int, inner_kind: AxisType, next_axis: int) -> None:
  size = rsize(r)
  if amt < 2 or size % amt: raise KernelOptError(f"axis {r.arg[0]} of size {size} does not split by {amt}")
  inner = rng(amt, next_axis, inner_kind)
  if amt == size: k.replace(r, inner, inner)
  else:
    outer = rng(size // amt, r.arg[0], rkind(r))
    k.replace(r, outer, outer * amt + inner, inner)


GPU_ONLY = (OptOps.LOCAL, OptOps.GROUPTOP, OptOps.TC)
CPU_ONLY = (OptOps.THREAD, OptOps.BLOCK)
# a GPU's ranges over the work-items of a work-group (WARP: the lanes of a tensor core's warp, codegen/tc.py)
LOCALS = (AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)


def apply_opt(ast: UOp, opt: Opt, ren: Renderer | None = None) -> UOp:
  """ast with opt applied, for the device `ren` renders for (None: the CPU)."""
  k = KernelParts.of(ast)
  next_axis = max((x.arg[0] for x in k.all_ranges() + k.inner_ranges), default=-1) + 1
  if opt.op is OptOps.TC:
    if ren is None or not ren.has_local: raise KernelOptError("TC is not an action for this device")
    apply_tc(k, opt.axis, opt.arg, ren, next_axis)
    return k.build()
  r = k.find(opt.axis)
  kind = rkind(r)
  if r.src[0].op is not Ops.CONST and opt.op is not OptOps.SWAP: raise KernelOptError(f"axis {opt.axis} has a variable length")
  gpu = ren is not None and ren.has_local
  if opt.op in (GPU_ONLY if not gpu else CPU_ONLY): raise KernelOptError(f"{opt.op.name} is not an action for this device")
  if gpu and opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
    assert ren is not None
    _local(k, r, opt, next_axis)
    # in the order codegen/gpu.grid gives them dimensions: the innermost is dimension 0
    locals_ = [x for x in reversed(k.loops + k.reduce_ranges) if rkind(x) in LOCALS]
    if len(locals_) > len(ren.max_local): raise KernelOptError(f"more local dimensions than the device's {len(ren.max_local)}")
    if prod(rsize(x) for x in locals_) > ren.max_work_group or any(rsize(x) > m for x, m in zip(locals_, ren.max_local)):
      raise KernelOptError(f"a work-group of {[rsize(x) for x in locals_]} is past the device's limits")
  elif opt.op is OptOps.UPCAST:
    if r not in k.loops or kind not in (AxisType.LOOP, AxisType.THREAD): raise KernelOptError("UPCAST needs an output loop")
    _split(k, r, opt.arg, AxisType.UPCAST, next_axis)
  elif opt.op is OptOps.UNROLL:
    if r not in k.reduce_ranges or kind is not AxisType.REDUCE: raise KernelOptError("UNROLL needs a reduce loop")
    _split(k, r, opt.arg, AxisType.UNROLL, next_axis)
  elif opt.op in (OptOps.THREAD, OptOps.GROUP):
    if any(rkind(x) in (AxisType.THREAD, AxisType.GROUP_REDUCE) for x in k.all_ranges()): raise KernelOptError("one split across cores")
    if opt.op is OptOps.THREAD and (r not in k.loops or kind is not AxisType.LOOP): raise KernelOptError("THREAD needs an output loop")
    if opt.op is OptOps.GROUP and (r not in k.reduce_ranges or kind is not AxisType.REDUCE): raise KernelOptError("GROUP needs a reduce loop")
    if opt.op is OptOps.GROUP and any(rkind(x) is not AxisType.UPCAST for x in k.loops):
      raise KernelOptError("GROUP needs every output axis in registers")  # the cores' partials are combined per tile
    new = rng(rsize(r), opt.axis, AxisType.THREAD if opt.op is OptOps.THREAD else AxisType.GROUP_REDUCE)
    k.replace(r, new, new)
  elif opt.op is OptOps.BLOCK: _block(k, r, opt.arg, next_axis)
  elif opt.op is OptOps.SWAP:
    o = k.find(opt.arg)
    if r not in k.loops or o not in k.loops or r is o: raise KernelOptError("SWAP needs two loops")
    if AxisType.WARP in (kind, rkind(o)): raise KernelOptError("SWAP: a warp's lanes stay innermost")
    i, j = k.loops.index(r), k.loops.index(o)
    k.loops[i], k.loops[j] = o, r
  if prod(rsize(x) for x in k.loops if rkind(x) is AxisType.UPCAST) > MAX_UPCAST: raise KernelOptError("too many upcast lanes")
  if prod(rsize(x) for x in k.all_ranges() if rkind(x) in LANES) > MAX_LANES: raise KernelOptError("too many lanes")
  return k.build()


def _local(k: KernelParts, r: UOp, opt: Opt, next_axis: int) -> None:
  """LOCAL, GROUP and GROUPTOP on a GPU: the inner `arg` steps of r become work-items."""
  kind, amt, size = rkind(r), opt.arg, rsize(r)
  if r.src[0].op is not Ops.CONST or amt < 2 or size % amt: raise KernelOptError(f"axis {r.arg[0]} of size {size} does not split by {amt}")
  if opt.op is OptOps.LOCAL:
    if r not in k.loops or kind is not AxisType.LOOP: raise KernelOptError("LOCAL needs an output loop")
    _split(k, r, amt, AxisType.LOCAL, next_axis)
    return
  if any(rkind(x) is AxisType.WARP for x in k.loops): raise KernelOptError(f"{opt.op.name}: a tensor core's sum is not split")
  if r not in k.reduce_ranges or kind is not AxisType.REDUCE: raise KernelOptError(f"{opt.op.name} needs a reduce loop")
  if any(rkind(x) is AxisType.GROUP_REDUCE for x in k.reduce_ranges): raise KernelOptError("one grouped reduce axis")
  grp = rng(amt, next_axis, AxisType.GROUP_REDUCE)
  if amt == size: outer, expr = None, grp
  else:
    outer = rng(size // amt, r.arg[0], AxisType.REDUCE)
    # GROUP: work-item g takes steps g, g+amt, ... (neighbours read neighbours: coalesced); GROUPTOP: a block each
    expr = outer * amt + grp if opt.op is OptOps.GROUP else grp * (size // amt) + outer
  k.replace(r, grp, expr, outer)
  # the group's range goes first: it is the work-item's place, named before (and read after) the reduce's loops
  red = k.reduce
  assert red is not None
  rr = [grp] + [x for x in red.src[1:] if x is not grp]
  new = UOp(Ops.REDUCE, red.dtype, (red.src[0], *rr), red.arg)
  k.value, k.reduce = k.value.substitute({red: new}), new


def _block(k: KernelParts, r: UOp, amt: int, next_axis: int) -> None:
  red = k.reduce
  if red is None or red.arg not in (Ops.ADD, Ops.MAX) or r not in k.reduce_ranges or rkind(r) is not AxisType.REDUCE:
    raise KernelOptError("BLOCK needs a kernel that stores a sum or max")
  if k.value.dtype != red.dtype or k.also: raise KernelOptError("BLOCK keeps partial results in the output: not after a cast, in one buffer")
  if any(rkind(x) is AxisType.GROUP_REDUCE for x in k.reduce_ranges): raise KernelOptError("BLOCK and GROUP don't mix")
  if red.dtype.scalar() not in (dtypes.float, dtypes.double, dtypes.int, dtypes.long):
    raise KernelOptError(f"BLOCK keeps partial results in the output: not in {red.dtype}")  # they would be rounded
  size = rsize(r)
  if amt < 2 or amt >= size or size % amt: raise KernelOptError(f"axis {r.arg[0]} of size {size} does not block by {amt}")
  # the outer part is a loop of the nest, but a reduce one: it can't be split across cores or upcast
  outer, inner = rng(size // amt, next_axis, AxisType.REDUCE), rng(amt, r.arg[0], AxisType.REDUCE)
  k.replace(r, inner, outer * amt + inner)
  k.loops.insert(0, outer)
  ident = UOp.const(red.dtype, 0 if red.arg is Ops.ADD else red.dtype.min)
  prev = (outer < 1).where(ident, UOp(Ops.LOAD, red.dtype, (k.out,)))
  acc = UOp(red.arg, red.dtype, (prev, k.reduce))  # type: ignore[arg-type]  # the reduce is still there
  # an epilogue (bias, activation: relu(x @ w + b)) applies to the whole sum, in the last block; the others store the
  # partial sum. The epilogue's own loads are gated to the last block, so the other blocks do not read its buffers
  if k.value is k.reduce: k.value = acc
  else:
    last, own = outer >= size // amt - 1, set(acc.toposort())
    epilogue = k.value.substitute({k.reduce: acc})
    gated = {u: UOp(Ops.LOAD, u.dtype, (u.src[0], last if len(u.src) == 1 else u.src[1] & last))
             for u in epilogue.toposort() if u.op is Ops.LOAD and u not in own}
    k.value = last.where(epilogue.substitute(gated) if gated else epilogue, acc)


_DIVMOD = {Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD}


def merge_loops(ast: UOp, vec: int = 16) -> UOp:
  """Adjacent loops that every access walks as one (row-major: the outer index times the inner size plus the inner
  index) become one loop, a pair at a time by the rule on the kernel's END (pm_merge_loops): output loops first, a
  longer axis to vectorize and share (a 7x7 image as 49 positions), then the reduce's (a weight gradient summed over
  a batch's images and their tokens, 4 x 256, is one loop of 1024, which blocks and streams as a matrix product's:
  76 -> 162 GFLOPS for 768x3072). A pair merges when no division or modulo of the merged loop is left once the
  indices are simplified; output loops also when the merged loop cuts into `vec`-lane vectors at least as well (a
  14x14 image stays two loops: 196 splits only by 4, while a row of 14 is one vector of 16 with two dead lanes)."""
  return graph_rewrite(ast, pm_merge_loops, ctx=vec, name="merge loops")


def _merge_a_pair(ctx: int, e: UOp) -> UOp | None:
  k = KernelParts.of(UOp.sink(e))
  for a, b in zip(k.loops, k.loops[1:]):
    if (joined := _joined(a, b, AxisType.LOOP)) is None or not \
       ((size := rsize(a) * rsize(b)) % ctx == 0 or rsize(b) >= ctx or size <= 4 * ctx): continue
    m, subs = joined
    merged = KernelParts(k.out, k.value.substitute(subs).simplify(), [m if r is a else r for r in k.loops if r is not b], None, k.also)
    merged.move_outs(subs)
    if not _divides(m, merged.value, merged.out, *merged.also): return merged.build().src[0]
  if (red := k.reduce) is None: return None
  rs = list(red.src[1:])
  for a, b in zip(rs, rs[1:]):
    if (joined := _joined(a, b, AxisType.REDUCE)) is None: continue
    m, subs = joined
    if _divides(m, body := red.src[0].substitute(subs).simplify()): continue
    merged_red = UOp(Ops.REDUCE, red.dtype, (body, *[m if r is a else r for r in rs if r is not b]), red.arg)
    return KernelParts(k.out, k.value.substitute({red: merged_red}), k.loops, None, k.also).build().src[0]
  return None


pm_merge_loops = PatternMatcher([(UPat(Ops.END, name="e"), _merge_a_pair)])


def _joined(a: UOp, b: UOp, kind: AxisType) -> tuple[UOp, dict[UOp, UOp]] | None:
  """The loop that walks loops a then b (both of kind, of constant sizes) as one, and a and b as reads of it."""
  if not (rkind(a) is rkind(b) is kind and a.src[0].op is Ops.CONST and b.src[0].op is Ops.CONST): return None
  m = rng(rsize(a) * rsize(b), a.arg[0], kind)
  return m, {a: m // rsize(b), b: m % rsize(b)}


def _divides(m: UOp, *exprs: UOp) -> bool:
  """Whether a division or modulo of loop m is left in exprs (then the loops it joins do not walk as one)."""
  return any(u.op in _DIVMOD and m in u.toposort() for u in UOp.sink(*exprs).toposort())


def apply_opts(ast: UOp, opts: list[Opt] | tuple[Opt, ...], ren: Renderer | None = None) -> UOp:
  for o in opts: ast = apply_opt(ast, o, ren)
  return ast
