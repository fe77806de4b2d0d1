"""The code generator: one kernel of a plan (schedule/kernelize.KernelItem in its local form) through its passes, in
order, to source for a renderer. Each pass takes the kernel's UOp graph and gives one back: a rule set run by the
rewrite engine (rules), whose every step VIZ=1 shows, or still a walk (walk), which VIZ shows as one step.

  lower           loops and stores laid out (walk); views to indices (rules: lower.pm_views); values to kernel IR
                  (rules: lower.pm_lower)
  merge loops     adjacent loops every access walks as one become one (rules: opt.pm_merge_loops)
  choose opts     the heuristics' actions, or BEAM's (search.choose_opts: heuristic.py, gpu.py)
  apply opts      ranges split into upcast, unrolled, local, grouped and threaded ones; tensor cores (walk: opt.py, tc.py)
  bytedot         8-bit dot products decomposed where the renderer has none (rules: decomp/op.pm_bytedot)
  grid            a GPU's output loops to the grid (rules: gpu.pm_fit_grid, gpu.pm_to_grid)
  transcendental  exp, log, sin... as polynomials where the renderer asks (rules: decomp/transcendental.py)
  expand          upcast and unrolled lanes to vectors (walk: expand.py)
  render          the renderer's program order (walk: late/linearizer.linearize), then its source

tinygrad's names: to_program (every pass), full_rewrite_to_sink (all but the rendering), linearize and line_rewrite
(the kernel as a list of nodes in program order)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from tinyhybrid import viz
from tinyhybrid.codegen.decomp.op import decompose_bytedot
from tinyhybrid.codegen.decomp.transcendental import decompose_transcendentals
from tinyhybrid.codegen.expand import VEC_DTYPES, cpu_lanes, expand
from tinyhybrid.codegen.gpu import check_local_memory, to_grid
from tinyhybrid.codegen.kernel import KernelParts, Opt, rkind, rsize
from tinyhybrid.codegen.late.linearizer import linearize  # noqa: F401 (tinygrad's codegen exports it too)
from tinyhybrid.codegen import lower as lowering  # (the module stays codegen.lower: its function is not bound there)
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen.opt import apply_opts, merge_loops
from tinyhybrid.codegen.search import SPLIT, choose_opts, has_variable_loops
from tinyhybrid.helpers import NOOPT
from tinyhybrid.renderer import Renderer
from tinyhybrid.schedule.kernelize import KernelItem
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.spec import spec_check
from tinyhybrid.uop.upat import PatternMatcher, UPat

# how a kernel's optimizations are chosen, given it with its loops merged: the heuristics' for the renderer unless one
# is given; the engine gives BEAM's, which times candidates on a device (search.on_device), so no pass here needs one
Chooser = Callable[[LoweredKernel], list[Opt]]


@dataclass(frozen=True)
class Program:
  """A kernel rendered for a renderer: its name, its source and the optimized kernel it was rendered from."""
  name: str
  src: str
  kernel: LoweredKernel

  @property
  def uops(self) -> list[UOp]: return linearize(self.kernel.ast)


def _through_passes(item: KernelItem, ren: Renderer, choose: Chooser | None, opt: bool) -> LoweredKernel:
  k = lowering.lower(item)
  return optimize(k, ren, choose) if opt else k


def to_program(item: KernelItem, renderer: Renderer, choose: Chooser | None = None) -> Program:
  """The kernel through every pass for this renderer: what a plan compiles. No device is touched, unless `choose`
  (the heuristics' optimizations when not given) times candidates on one."""
  k = _through_passes(item, renderer, choose, True)
  spec_check(k.ast, "lowered", "lower")  # SPEC=1: what the passes made is checked before the renderer reads it
  return Program(k.name, renderer.render(k), k)


def full_rewrite_to_sink(item: KernelItem, ren: Renderer, optimize: bool = True) -> UOp:
  """The kernel's SINK in kernel IR after every pass before rendering (optimize=False: lowered only)."""
  return _through_passes(item, ren, None, optimize).ast


def optimize(k: LoweredKernel, ren: Renderer | None = None, choose: Chooser | None = None) -> LoweredKernel:
  """A lowered kernel through the passes from merging its loops to expanding its lanes, for the renderer (None: the
  CPU's, one lane)."""
  if not has_variable_loops(k.ast) and not NOOPT.value: k = replace(k, ast=merge_loops(k.ast, max(ren.vec if ren is not None else 1, 1)))
  return finalize(k, choose(k) if choose is not None else choose_opts(k, None, ren), ren if ren is not None else 1)


def finalize(k: LoweredKernel, opts: list[Opt] | tuple[Opt, ...], ren: Renderer | int) -> LoweredKernel:
  """The passes after the optimizations are chosen: k with `opts` applied for the device `ren` renders for (an int:
  the CPU's, with vectors of that many lanes), mapped to its grid on a GPU-style device, and its lanes expanded: what
  the renderer takes. BEAM runs them on each candidate plan."""
  rdr: Renderer | None
  if isinstance(ren, int): rdr, vec = None, ren
  else: rdr, vec = ren, ren.vec
  ast = apply_opts(k.ast, opts, rdr)
  if viz.tracking(): viz.stage(f"apply opts {', '.join(map(str, opts)) or '(none)'}", k.ast, ast)
  if rdr is None or Ops.BYTEDOT not in rdr.code_for_op: ast = decompose_bytedot(ast)
  if rdr is not None and rdr.has_local:
    ast, launch = to_grid(ast, rdr)
    ex = expand(ast, vec)
    viz.stage("expand", ast, ex)
    check_local_memory(ex, launch, rdr)
    return replace(k, ast=ex, outer=1, opts=tuple(opts), launch=launch)
  split = [r for r in KernelParts.of(ast).all_ranges() if rkind(r) in SPLIT]
  if rdr is not None and rdr.vector_transcendentals: ast = decompose_transcendentals(ast, rdr.vector_transcendentals, vectors=True)
  vec_dtypes = rdr.vec_dtypes if rdr is not None and rdr.vec_dtypes is not None else VEC_DTYPES
  expanded = expand(ast, cpu_lanes(ast, vec, vec_dtypes), rdr is not None and rdr.half_loads, vec_dtypes,
                    rdr.vector_float_ops if rdr is not None else frozenset())
  viz.stage("expand", ast, expanded)
  return replace(k, ast=expanded, outer=rsize(split[0]) if split else 1, opts=tuple(opts))


def _no_control_flow(u: UOp) -> UOp:
  raise RuntimeError(f"{u.op.name} is not allowed in the kernel graph: control flow comes from its ranges and gates")


# what every linearized kernel is checked against (tinygrad's cleanups): IF/ENDIF exist only in rendered code
pm_linearize_cleanups = PatternMatcher([(UPat((Ops.IF, Ops.ENDIF), name="u"), _no_control_flow)])


def line_rewrite(lst: list[UOp], pm: PatternMatcher, ctx: Any = None) -> list[UOp]:
  """A rewrite of a linearized kernel, line by line: each node with its sources replaced by what they became is given
  to pm, whose rule returns a node (the line's replacement) or (node, lines) (lines in its place), or None."""
  out: list[UOp] = []
  became: dict[UOp, UOp] = {}
  for u in lst:
    nu = u.replace(src=tuple(became.get(s, s) for s in u.src)) if any(s in became for s in u.src) else u
    got = pm.rewrite(nu, ctx)
    node, lines = (got, [got]) if isinstance(got, UOp) else got if got is not None else (nu, [nu])
    became[u] = node
    out.extend(lines)
  return out
