"""Which axis of a sharded tensor's graph each node is split on (tinygrad's UOp.axis): the IR's rules for sharded values.
A node is `free` when it reads no device's memory (a graph of constants, which every device computes whole). The
scheduler's lowering (schedule/multi.py) follows these rules when it builds each device's graph, so the axis a node
reports is the one its shards have."""
from __future__ import annotations

from typing import Sequence

from tinyhybrid.helpers import prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

PER_SHARD = GroupOp.AnyElementwise | {Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH}
LEAVES = {Ops.CONST, Ops.UNIQUE, Ops.IOTA, Ops.BIND, Ops.DEFINE_VAR, Ops.NOOP}

Placement = tuple[int | None, bool]  # (sharded axis, free)


def shard_bounds(size: int, n: int) -> list[tuple[int, int]]:
  """Each device's [start, end) along a sharded axis of `size`: equal consecutive pieces."""
  sz = size // n
  return [(i * sz, (i + 1) * sz) for i in range(n)]


def reshape_axis(old: tuple, new: tuple, axis: int, n: int) -> int | None:
  """Where a sharded axis lands after a reshape that keeps every shard's items together (None: it does not)."""
  before = prod(old[:axis])
  per_shard = old[axis] // n * prod(old[axis + 1:])
  acc = 1
  for j, d in enumerate(new):
    if acc == before and isinstance(d, int) and d % n == 0 and per_shard == d // n * prod(new[j + 1:]): return j
    acc *= d
    if acc > before and not isinstance(acc, int): break
  return None


def node_axis(u: UOp, srcs: Sequence[Placement], n: int) -> Placement:
  """u's placement from its sources' over n devices: an elementwise op takes its first sharded operand's axis (a
  STORE its target's), a reduce over the sharded axis and a movement that mixes items of several shards (a reshape
  across them, a shrink, pad or flip of the axis) end it, an allreduce keeps it."""
  op = u.op
  if op is Ops.MSTACK: return u.arg[1], False
  if op in LEAVES or op is Ops.MSELECT or all(free for _, free in srcs): return None, True
  axes = [a for a, _ in srcs]
  if op is Ops.AFTER: return srcs[0]
  if op is Ops.STORE or op is Ops.ALLREDUCE: return axes[0], False
  if op in PER_SHARD: return next((a for a in axes if a is not None), None), False
  if op is Ops.REDUCE: return (None if axes[0] in u.arg[1] else axes[0]), False
  if op not in GroupOp.Movement or (axis := axes[0]) is None: return None, False
  if op is Ops.PERMUTE: return u.arg.index(axis), False
  if op is Ops.EXPAND: return axis, False
  in_shape = shape_of(u.src[0])
  assert in_shape is not None
  if op is Ops.RESHAPE: return reshape_axis(in_shape, u.arg, axis, n), False
  if op is Ops.SHRINK: return (axis if u.arg[axis] == (0, in_shape[axis]) else None), False
  if op is Ops.PAD: return (axis if u.arg[axis] == (0, 0) else None), False
  return (None if u.arg[axis] else axis), False  # FLIP


def sharded_axes(root: UOp, n: int) -> dict[UOp, int | None]:
  """The sharded axis of every node of root's graph over n devices."""
  placed: dict[UOp, Placement] = {}
  for u in root.toposort(): placed[u] = node_axis(u, [placed[s] for s in u.src], n)
  return {u: a for u, (a, _) in placed.items()}
