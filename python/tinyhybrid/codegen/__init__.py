"""The kernel pipeline, one pass after another: a schedule item (one kernel of a plan, schedule/kernelize.KernelItem
in its local form) lowered to loops over its buffers (codegen/lower.py), optimized for the renderer (merged loops,
then the heuristics' or BEAM's actions, the grid and the expansion: codegen/search.py), and rendered to source.
tinygrad's names for the stages: to_program (all of them), full_rewrite_to_sink (all but the rendering),
codegen.late.linearizer.linearize and line_rewrite (the kernel as a list of nodes in program order)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinyhybrid.codegen.late.linearizer import linearize  # noqa: F401 (tinygrad's codegen exports it too)
from tinyhybrid.codegen import lower as lowering  # (the module stays codegen.lower: its function is not bound there)
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen.search import optimize
from tinyhybrid.renderer import Renderer
from tinyhybrid.schedule.kernelize import KernelItem
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat


@dataclass(frozen=True)
class Program:
  """A kernel rendered for a renderer: its name, its source and the optimized kernel it was rendered from."""
  name: str
  src: str
  kernel: LoweredKernel

  @property
  def uops(self) -> list[UOp]: return linearize(self.kernel.ast)


def _lowered(item: KernelItem, ren: Renderer, opt: bool) -> LoweredKernel:
  k = lowering.lower(item)
  return optimize(k, None, ren) if opt else k


def full_rewrite_to_sink(item: KernelItem, ren: Renderer, optimize: bool = True) -> UOp:
  """The kernel's SINK in kernel IR after every pass before rendering (optimize=False: lowered only)."""
  return _lowered(item, ren, optimize).ast


def to_program(item: KernelItem, renderer: Renderer) -> Program:
  """The kernel through the whole pipeline for this renderer, with no device: what a plan compiles."""
  k = _lowered(item, renderer, True)
  return Program(k.name, renderer.render(k), k)


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
