"""Sharded tensors, lowered to one graph per device (tinygrad's multi-device rules).

A tensor sharded across devices is an MSTACK of per-device graphs, arg (devices, axis): axis None is a replica on
every device, an int splits that axis into equal consecutive shards. Tensor operations build the logical graph over
MSTACKs (so autograd sees one tensor); before running, `lower_multi` rewrites it into one graph per device: elementwise
work, movement and reduces run shard by shard, a replica meeting a sharded operand is sliced to each shard, and a
reduce over the sharded axis becomes an allreduce, made of COPY nodes (arg: the destination device) and the reduce's
ALU on each device. Realizing runs the COPYs as copy commands on the destination's queue, or, between CPU:N devices
(one host memory) where only arithmetic reads the copy, lets the kernel read the source in place (engine/multi.py).

The way back to one device is an MSELECT, arg (devices, i, axis): device i's shard of a sharded value, resharded to
axis (None: the whole value, gathered on device i), in a single-device graph. It is what a gradient of shard() takes
for each source and what to() of a sharded tensor copies from; `lower_selects` replaces each with its shard's graph."""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from tinyhybrid.helpers import ALL2ALL, DEBUG, RING, getenv, prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.buffers import buffer_view
from tinyhybrid.uop.ops import UOp, movement
from tinyhybrid.uop.shape import shape_of
from tinyhybrid.uop.sharding import LEAVES, PER_SHARD, node_axis, shard_bounds


class ShardingError(RuntimeError):
  """A sharded tensor used in a way its shards cannot carry out (tinygrad raises these as RuntimeError too)."""


@dataclass(frozen=True)
class Sharded:
  """A node lowered: its graph on each device, and the sharded axis (None: every device holds all of it). A graph of
  constants only (no device) is `free`: the same graph serves every device."""
  shards: tuple[UOp, ...]
  axis: int | None
  free: bool = False


def check_shardable(shape: tuple, axis: int, n: int) -> None:
  """tinygrad's rule: a sharded axis divides evenly across the devices."""
  if not isinstance(shape[axis], int): raise ShardingError(f"shard: axis {axis} of shape {shape} is symbolic")
  if shape[axis] % n != 0: raise ShardingError(f"multi axis uneven: shape[{axis}]={shape[axis]} does not divide across {n} devices")


def copy_to(u: UOp, device: str) -> UOp:
  """u's value on `device` (a COPY node; its source is a graph on another device)."""
  return UOp(Ops.COPY, u.dtype, (u,), device)


def select_shard(u: UOp, devices: tuple[str, ...], i: int, axis: int | None) -> UOp:
  """Device i's shard of the sharded value u (sharded across `devices` on `axis`; None: its whole value), a graph on
  that one device (an MSELECT node, arg (devices, i, axis); lower_selects turns it into the shard's graph)."""
  return UOp(Ops.MSELECT, u.dtype, (u,), (devices, i, axis))


def _shrink_axis(u: UOp, axis: int, bound: tuple[int, int]) -> UOp:
  shape = shape_of(u)
  assert shape is not None
  if bound == (0, shape[axis]): return u
  return movement(Ops.SHRINK, u, tuple(bound if i == axis else (0, s) for i, s in enumerate(shape)))


def _combine(op: Ops, parts: list[UOp]) -> UOp:
  return functools.reduce(lambda a, b: UOp(op, a.dtype, (a, b)), parts)


# the ALU that combines partial results of a reduce
_REDUCE_ALU = {Ops.ADD: Ops.ADD, Ops.MAX: Ops.MAX, Ops.MUL: Ops.MUL}


def allreduce(op: Ops, shards: list[UOp], devices: tuple[str, ...]) -> list[UOp]:
  """Every device's shard combined with op across devices, on every device (tinygrad's choice of algorithm: ring or
  all2all past RING_ALLREDUCE_THRESHOLD elements on more than 2 devices, or when RING=2 / ALL2ALL=2; else each device
  copies every other's shard). Partial results combine in device order, so every device gets the same bits."""
  n, shape = len(devices), shape_of(shards[0])
  assert shape is not None
  numel = prod(shape)
  big = n > 2 and isinstance(numel, int) and numel > getenv("RING_ALLREDUCE_THRESHOLD", 256_000)
  use_all2all = ALL2ALL >= 2 or (big and ALL2ALL >= 1)
  use_ring = not use_all2all and (RING >= 2 or (big and RING >= 1))
  if DEBUG >= 2: print(f"{'ALL2ALL' if use_all2all else 'RING' if use_ring else 'NAIVE'} ALLREDUCE {n}x{numel} | {shards[0].dtype}")
  alu = _REDUCE_ALU[op]
  if not use_all2all and not use_ring:
    return [_combine(alu, [s if j == d else copy_to(s, devices[d]) for j, s in enumerate(shards)]) for d in range(n)]
  # chunks of the flattened value, multiples of the largest of 32..2 that divides it, the remainder spread over the first
  factor = next((f for f in (32, 16, 8, 4, 2) if numel % f == 0), 1)
  base, left = divmod(numel // factor, n)
  sizes = [(base + 1) * factor] * left + [base * factor] * (n - left)
  chunks = list(itertools.pairwise(itertools.accumulate(sizes, initial=0)))
  flat = [UOp(Ops.RESHAPE, s.dtype, (s,), (numel,)) for s in shards]

  def piece(x: UOp, c: int) -> UOp: return movement(Ops.SHRINK, x, (chunks[c],))

  # reduce-scatter: each chunk reduced on one device
  reduced: list[UOp] = []
  for c in range(n):
    if chunks[c][0] == chunks[c][1]: reduced.append(piece(flat[c], c))
    elif use_all2all:
      reduced.append(_combine(alu, [piece(flat[j], c) if j == c else copy_to(piece(flat[j], c), devices[c]) for j in range(n)]))
    else:  # ring: the chunk travels c -> c+1 -> ..., each device adding its own piece
      acc, at = piece(flat[c], c), c
      for _ in range(n - 1):
        nxt = (at + 1) % n
        acc = UOp(alu, acc.dtype, (copy_to(acc, devices[nxt]), piece(flat[nxt], c)))
        at = nxt
      reduced.append(acc)
  # allgather: every device's result is the reduced chunks copied, from where they were reduced, into place
  return [UOp(Ops.RESHAPE, shards[d].dtype, (gather(reduced, devices[d], numel),), shape) for d in range(n)]


def gather(pieces: list[UOp], device: str, numel: int) -> UOp:
  """Flat pieces (on any devices) put one after another into memory on `device` (copies into place: engine/multi.py)."""
  return UOp(Ops.UNSHARD, pieces[0].dtype, tuple(p for p in pieces if shape_of(p) != (0,)), (device, numel))


class _Lowerer:
  def __init__(self, devices: tuple[str, ...]):
    self.devices, self.n = devices, len(devices)
    self.memo: dict[UOp, Sharded] = {}

  def free(self, u: UOp) -> Sharded: return Sharded((u,) * self.n, None, True)

  def replicate(self, x: Sharded) -> Sharded:
    """x on every device whole: each shard padded to its place, then summed across devices (tinygrad's unshard)."""
    if x.axis is None: return x
    return Sharded(tuple(allreduce(Ops.ADD, self._in_place(x, x.shards), self.devices)), None)

  def gather(self, x: Sharded, i: int) -> UOp:
    """x's whole value on device i alone: every other shard copied there, each padded to its place, and summed."""
    if x.axis is None: return x.shards[i]
    return _combine(Ops.ADD, self._in_place(x, [s if j == i else copy_to(s, self.devices[i]) for j, s in enumerate(x.shards)]))

  def _in_place(self, x: Sharded, shards: list[UOp] | tuple[UOp, ...]) -> list[UOp]:
    """Each of x's shards (or a copy of it) padded to its place along x's axis in the whole value."""
    shape = shape_of(x.shards[0])
    assert shape is not None and x.axis is not None
    full = shape[x.axis] * self.n
    return [movement(Ops.PAD, s, tuple((b[0], full - b[1]) if k == x.axis else (0, 0) for k in range(len(shape))))
            for s, b in zip(shards, shard_bounds(full, self.n))]

  def to_axis(self, x: Sharded, axis: int | None) -> Sharded:
    """x sharded on `axis` (None: replicated)."""
    if x.axis == axis or (x.free and shape_of(x.shards[0]) is None): return x  # (a UNIQUE has no shape to shard)
    if axis is None: return self.replicate(x)
    x = self.replicate(x)
    shape = shape_of(x.shards[0])
    assert shape is not None
    check_shardable(shape, axis, self.n)
    return Sharded(tuple(_shrink_axis(s, axis, b) for s, b in zip(x.shards, shard_bounds(shape[axis], self.n))), axis, x.free)

  def lower(self, root: UOp) -> Sharded:
    for u in root.toposort():
      if u not in self.memo: self.memo[u] = self._node(u)
    return self.memo[root]

  def _node(self, u: UOp) -> Sharded:
    op = u.op
    if op is Ops.MSTACK:
      if tuple(u.arg[0]) != self.devices:
        raise ShardingError(f"tensors sharded across different devices meet: {u.arg[0]} and {self.devices}")
      return Sharded(tuple(u.src), u.arg[1])
    # (a shard taken out of another sharded value belongs to a single-device graph: the shards of MSTACKs hold those)
    if op in LEAVES or op is Ops.MSELECT: return self.free(u)
    srcs = [self.memo[s] for s in u.src]
    axis, free = node_axis(u, [(s.axis, s.free) for s in srcs], self.n)  # the IR's rule (uop/sharding.py)
    if free: return self.free(u)
    if op is Ops.BUFFER or (op is Ops.COPY and u.arg not in self.devices):
      raise ShardingError(f"a tensor on {u.device} meets tensors sharded across {self.devices}; shard it or .to() it first")
    if op is Ops.AFTER: return srcs[0]
    if op in PER_SHARD or op is Ops.STORE:  # the other operands are sliced or resharded to the axis
      aligned = [self.to_axis(s, axis) for s in srcs]
      return Sharded(tuple(u.replace(src=tuple(a.shards[d] for a in aligned)) for d in range(self.n)), axis)
    if op is Ops.ALLREDUCE: return Sharded(tuple(allreduce(u.arg, list(srcs[0].shards), self.devices)), axis)
    if op is Ops.REDUCE:
      x = srcs[0]
      # a shard whose reduced axes have one item (the sharded axis itself, one row per device) is its own reduce
      red = tuple(s if all(shape_of(s)[i] == 1 for i in u.arg[1]) else u.replace(src=(s,)) for s in x.shards)  # type: ignore[index]
      if axis == x.axis: return Sharded(red, axis)
      return Sharded(tuple(allreduce(u.arg[0], list(red), self.devices)), None)  # a reduce over the sharded axis
    if op in GroupOp.Movement: return self._movement(u, srcs[0], axis)
    raise ShardingError(f"{op.name} is not supported on sharded tensors")

  def _movement(self, u: UOp, x: Sharded, axis: int | None) -> Sharded:
    """u on each shard of x, where u's axis is `axis`: a movement that mixes items of several shards runs on a replica."""
    if x.axis is not None and axis is None: x = self.replicate(x)
    op, arg, n = u.op, u.arg, self.n
    if x.axis is None: return Sharded(tuple(u.replace(src=(s, *u.src[1:])) for s in x.shards), None)
    in_shape = shape_of(u.src[0])
    assert in_shape is not None and axis is not None
    if op is Ops.PERMUTE or op is Ops.FLIP: return Sharded(tuple(u.replace(src=(s,)) for s in x.shards), axis)
    if op is Ops.EXPAND or op is Ops.RESHAPE:
      shard_arg = tuple(a // n if i == axis else a for i, a in enumerate(arg))
      return Sharded(tuple(movement(op, s, shard_arg) for s in x.shards), axis)
    if op is Ops.SHRINK or op is Ops.PAD:
      shard_arg = tuple((0, in_shape[axis] // n) if (i == axis and op is Ops.SHRINK) else a for i, a in enumerate(arg))
      return Sharded(tuple(movement(op, s, shard_arg) for s in x.shards), axis)
    raise ShardingError(f"{op.name} is not supported on sharded tensors")


def is_realized_multi(u: UOp) -> bool:
  """Whether u is a sharded tensor's memory: an MSTACK of buffer views."""
  return u.op is Ops.MSTACK and all(buffer_view(s) for s in u.src)


def multi_devices(u: UOp) -> tuple[str, ...] | None:
  """The devices of the sharded tensors in u's graph (None: it has none)."""
  return next((tuple(n.arg[0]) for n in u.toposort() if n.op is Ops.MSTACK), None)


def lower_multi(roots: list[UOp], devices: tuple[str, ...]) -> list[Sharded]:
  """Each root's graph on each device (see the module's notes)."""
  lw = _Lowerer(devices)
  return [lw.lower(r) for r in roots]


def lower_selects(roots: list[UOp]) -> list[UOp]:
  """Single-device graphs with every MSELECT replaced by the graph of the shard it takes, lowered as lower_multi does
  (its COPY nodes are then left to engine/multi.py). Inner ones first: the shards of a sharded value may hold MSELECTs
  of another one."""
  sels = [u for u in UOp.sink(*roots).toposort() if u.op is Ops.MSELECT]
  if not sels: return roots
  lowerers: dict[tuple[str, ...], _Lowerer] = {}
  subs: dict[UOp, UOp] = {}
  for u in sels:
    devices, i, axis = u.arg
    lw = lowerers.setdefault(devices, _Lowerer(devices))
    src = u.src[0].substitute(subs) if subs else u.src[0]
    x = lw.lower(src)
    # the whole value on one device: gathered there (not replicated on every device first)
    subs[u] = lw.gather(x, i) if axis is None else lw.to_axis(x, axis).shards[i]
  return [r.substitute(subs) for r in roots]
