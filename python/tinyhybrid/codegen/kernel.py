"""The kernel IR's shared vocabulary for its passes (opt.py's actions, tc.py's tensor cores, the expander, the GPU
mapping, the heuristics and the search): the actions (Opt, OptOps), a lowered kernel taken apart (KernelParts) and
what is asked of its ranges. A lowered kernel is SINK(END(STORE(INDEX(PARAM 0, idx), value), *loops)): `loops` are
the loop nest, outermost first; `value` holds at most one REDUCE(body, *reduce ranges), whose body may hold inner sums:
REDUCEs whose loops run inside its loop (schedule/kernelize._inner_sums)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import Enum, auto

from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp

IDX = dtypes.weakint
LANES = (AxisType.UPCAST, AxisType.UNROLL)
MAX_UPCAST = 512   # values of an output tile: past this the accumulators spill out of the registers
MAX_LANES = 4096   # upcast times unrolled lanes: past this the kernel's source explodes


class OptOps(Enum):
  UPCAST = auto()  # split an output axis: its inner part becomes vector lanes / registers (register tiling)
  UNROLL = auto()  # the same for a reduce axis: several reduce steps per iteration
  THREAD = auto()  # this output loop is split across the cores
  # a reduce split among workers whose partial results are then combined (a two-stage reduce): on the CPU this reduce
  # loop across the cores (arg 0); on a GPU `arg` work-items of a work-group, each taking every arg-th step, combined
  # through local memory
  GROUP = auto()
  BLOCK = auto()   # cache blocking of a reduce axis: its outer part is the outermost loop, accumulating in the output
  SWAP = auto()    # exchange two loops of the nest
  LOCAL = auto()   # GPU: split an output axis: its inner part (arg) is work-items of one work-group (local tiling)
  GROUPTOP = auto()  # GPU: GROUP where each of the arg work-items reduces a contiguous part of the loop
  # GPU: a matmul on the tensor cores (codegen/tc.py); axis numbers the (m, n, k) choices, arg picks the tensor core
  # (-1: the first that fits). It comes first, on a kernel no other action has touched
  TC = auto()


@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int
  arg: int = 0
  def __repr__(self) -> str: return f"Opt({self.op.name}, {self.axis}, {self.arg})"


class KernelOptError(ValueError):
  """An Opt that does not apply to this kernel (the search skips it; anywhere else it is a bug)."""


def index_const(v: int) -> UOp: return UOp.const(IDX, v)


def rng(size: int, axis: int, kind: AxisType) -> UOp: return UOp(Ops.RANGE, IDX, (index_const(size),), (axis, kind))
def rsize(r: UOp) -> int:
  """A range's trip count; 1 for a loop of a variable's length, which takes no optimization (see apply_opt), so that
  the heuristics pass it over."""
  return r.src[0].arg if r.src[0].op is Ops.CONST else 1
def rkind(r: UOp) -> AxisType: return r.arg[1]


@dataclass
class KernelParts:
  """A lowered kernel taken apart: the store's index and value, the loop nest, and its reduce (if any)."""
  out: UOp          # the INDEX the value is stored to
  value: UOp
  loops: list[UOp]
  reduce: UOp | None
  also: list[UOp] = field(default_factory=list)  # more INDEXes the same value is stored to (lower.py: an item's `also`)

  @staticmethod
  def of(ast: UOp) -> KernelParts:
    end = ast.src[0]
    body, loops = (end.src[0], list(end.src[1:])) if end.op is Ops.END else (end, [])
    stores = list(body.src) if body.op is Ops.GROUP else [body]
    # the kernel's reduce is the outermost one (an inner sum comes before it in toposort order)
    red = [u for u in stores[0].src[1].toposort() if u.op is Ops.REDUCE]
    return KernelParts(stores[0].src[0], stores[0].src[1], loops, red[-1] if red else None, [st.src[0] for st in stores[1:]])

  def build(self) -> UOp:
    stores = [UOp(Ops.STORE, dtypes.void, (ix, self.value)) for ix in (self.out, *self.also)]
    body = stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))
    return UOp.sink(UOp(Ops.END, dtypes.void, (body, *self.loops)))

  def move_outs(self, subs: dict[UOp, UOp]) -> None:
    """Every store's index with subs applied."""
    def moved(ix: UOp) -> UOp: return UOp(Ops.INDEX, ix.dtype, (ix.src[0], ix.src[1].substitute(subs).simplify()))
    self.out, self.also = moved(self.out), [moved(ix) for ix in self.also]

  @property
  def reduce_ranges(self) -> list[UOp]: return list(self.reduce.src[1:]) if self.reduce is not None else []
  @property
  def inner_sums(self) -> list[UOp]:
    """The REDUCEs inside the reduce's body, whose loops run inside its loop (schedule/kernelize._inner_sums)."""
    return [u for u in self.reduce.src[0].toposort() if u.op is Ops.REDUCE] if self.reduce is not None else []
  @property
  def inner_ranges(self) -> list[UOp]: return list(dict.fromkeys(r for u in self.inner_sums for r in u.src[1:]))
  def all_ranges(self) -> list[UOp]: return self.loops + self.reduce_ranges

  def find(self, axis: int) -> UOp:
    for r in self.all_ranges():
      if r.arg[0] == axis: return r
    raise KernelOptError(f"no axis {axis}")

  def replace(self, old: UOp, new: UOp, expr: UOp, inner: UOp | None = None) -> None:
    """Puts `new` where range `old` was (in the loop nest or the reduce), followed by `inner` if given, and `expr`
    for every use of it."""
    subs = {old: expr}
    if self.reduce is not None:
      body = self.reduce.src[0].substitute(subs).simplify()
      rr = [x for r in self.reduce_ranges for x in ((new, inner) if r is old and inner is not None else (new if r is old else r,))]
      red = UOp(Ops.REDUCE, self.reduce.dtype, (body, *rr), self.reduce.arg)
      subs[self.reduce] = red
      self.reduce = red
    self.value = self.value.substitute(subs).simplify()
    self.move_outs({old: expr})
    self.loops = [x for r in self.loops for x in ((new, inner) if r is old and inner is not None else (new if r is old else r,))]


@functools.lru_cache(maxsize=1024)
def stride(idx: UOp, r: UOp) -> int | None:
  """How far the index moves per step of range r (None when it does not move by a constant). Heuristics and search
  ask this of the same accesses again and again while they plan a kernel, so answers are kept, for the last 1024
  asked: the kept keys hold their index nodes alive (65536 of them held 1 MiB more after a 0.5B LLM's warm-up,
  whose 12.6k questions hit as often: 8820 against 8880 times)."""
  if (one := idx.substitute({r: index_const(1)})) is idx: return 0
  d = (one - idx.substitute({r: index_const(0)})).simplify()
  return d.arg if d.op is Ops.CONST else None

