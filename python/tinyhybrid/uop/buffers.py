"""Buffers in the graph: a BUFFER node's arg is a Buffer (realized memory) or a BufferSlot (a buffer by position, in a
normalized graph), and the logical shape is movement on top. These are the IR's facts about such views (which node is
memory, which buffer, which bytes), used by the scheduler, the engine and Tensor alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tinyhybrid.dtype import DType
from tinyhybrid.helpers import prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, movement, sint
from tinyhybrid.uop.shape import max_shape, shape_of

if TYPE_CHECKING:
  from tinyhybrid.device import Buffer

MOVEMENT = GroupOp.Movement


@dataclass(frozen=True)
class BufferSlot:
  """A buffer by position: inputs first (in graph order), then the buffers the schedule creates."""
  index: int
  size: int
  dtype: DType


def view_base(u: UOp) -> UOp:
  """The node under u's movement ops (an AFTER is its realized src[0])."""
  while u.op in MOVEMENT or u.op is Ops.AFTER: u = u.src[0]
  return u


def buffer_view(u: UOp) -> bool:
  """A node that is already memory: a BUFFER, or movement on top of one (an AFTER is its realized src[0])."""
  return view_base(u).op is Ops.BUFFER


def contiguous_buffer(u: UOp) -> Buffer | BufferSlot | None:
  """The buffer a node is all of, in order (a BUFFER, or a reshape of one; a realized AFTER is its view), or None."""
  if u.op is Ops.AFTER: u = u.src[0]
  if u.op is Ops.RESHAPE: u = u.src[0]
  return u.arg if u.op is Ops.BUFFER else None


def buffer_uop(buf: Buffer | BufferSlot, shape: tuple[sint, ...]) -> UOp:
  """The node for a realized buffer (or a slot) seen with `shape`. A symbolic shape's buffer is laid out in its max
  shape (uop/shape.py max_shape): the view is that shape shrunk to the symbolic one."""
  b = UOp(Ops.BUFFER, buf.dtype, (), buf)
  if type(sum(shape)) is int: return b if tuple(shape) == (buf.size,) else UOp(Ops.RESHAPE, buf.dtype, (b,), tuple(shape))
  big = max_shape(shape)
  if big != (buf.size,): b = UOp(Ops.RESHAPE, buf.dtype, (b,), big)
  return movement(Ops.SHRINK, b, tuple((0, d) for d in shape))


def base_buffer(u: UOp) -> UOp:
  """The BUFFER under a view (movement ops and realized AFTERs)."""
  if (u := view_base(u)).op is not Ops.BUFFER: raise ValueError("assign: the target is not a view of a buffer")
  return u


def byte_range(u: UOp) -> tuple[Buffer | BufferSlot, int, int] | None:
  """(buffer, byte offset, bytes) when u's elements, in order, are one ascending run of a realized buffer's memory
  (the whole of it, a slice, and any movement or same-size bitcast that keeps that order), else None."""
  if (view := strided_view(u, through_bitcasts=True)) is None: return None
  base, shape, strides, offset = view
  if base.op is not Ops.BUFFER or not _dense(shape, strides): return None
  return base.arg, (offset if prod(shape) else 0) * base.dtype.itemsize, prod(shape) * base.dtype.itemsize


def strided_view(u: UOp, through_bitcasts: bool = False) -> tuple[UOp, list[int], list[int], int] | None:
  """(base, shape, strides, offset in elements) when u reads the node under its movement ops (a BUFFER, or a result
  laid out row-major in its own shape) as one strided view, else None (a pad, a reshape that no strides express, a
  symbolic shape). through_bitcasts: a same-size bitcast is movement too."""
  chain: list[UOp] = []
  while u.op in MOVEMENT or u.op is Ops.AFTER or (through_bitcasts and u.op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize):
    if u.op in MOVEMENT:
      if len(u.src) > 1: return None  # a symbolic view
      chain.append(u)
    u = u.src[0]
  if u.op is Ops.BUFFER: shape = [u.arg.size]
  elif not concrete(base_shape := shape_of(u)): return None
  else: shape = list(base_shape)  # type: ignore[arg-type]
  strides, offset = _row_major(shape), 0
  for m in reversed(chain):
    if m.op is Ops.RESHAPE:
      if not concrete(m.arg) or (new := _reshape_strides(shape, strides, list(m.arg))) is None: return None
      shape, strides = list(m.arg), new
    elif m.op is Ops.SHRINK:
      offset += sum(b * s for (b, _), s in zip(m.arg, strides))
      shape = [e - b for b, e in m.arg]
    elif m.op is Ops.PERMUTE: shape, strides = [shape[i] for i in m.arg], [strides[i] for i in m.arg]
    elif m.op is Ops.EXPAND: shape, strides = list(m.arg), [s if n == d else 0 for n, d, s in zip(shape, m.arg, strides)]
    elif m.op is Ops.FLIP:  # a flipped axis runs backwards from its last element
      offset += sum((n - 1) * s for f, n, s in zip(m.arg, shape, strides) if f and n)
      strides = [-s if f else s for f, s in zip(m.arg, strides)]
    else: return None  # a pad
  return u, shape, strides, offset


def _reshape_strides(shape: list[int], strides: list[int], new: list[int]) -> list[int] | None:
  """Strides that walk the same elements in the same order with the shape `new`, when a strided view can (each run
  of old axes merged into new ones is contiguous in itself), else None."""
  if 0 in shape: return _row_major(new)
  old = [(n, s) for n, s in zip(shape, strides) if n != 1]
  out, i, j = [1] * len(new), 0, 0  # the next old and new axes
  while i < len(old):
    i0, j0, have, want = i, j, old[i][0], new[j]
    i, j = i + 1, j + 1
    while have != want:  # grow the smaller side until both cover the same elements
      if want < have: want, j = want * new[j], j + 1
      else: have, i = have * old[i][0], i + 1
    if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(i0, i - 1)): return None
    out[j - 1] = old[i - 1][1]
    for k in range(j - 1, j0, -1): out[k - 1] = out[k] * new[k]
  return out


def _row_major(shape: tuple[int, ...] | list[int]) -> list[int]:
  out, acc = [], 1
  for d in reversed(shape):
    out.append(acc)
    acc *= d
  return out[::-1]


def _dense(shape: list[int], strides: list[int]) -> bool:
  """Whether a strided view covers its elements in memory order with no gaps (axes of size 1 do not count)."""
  if 0 in shape: return True
  kept = [(n, s) for n, s in zip(shape, strides) if n != 1]
  return [s for _, s in kept] == _row_major([n for n, _ in kept])


def concrete(shape: tuple | None) -> bool:
  """Whether a shape has no symbolic dimension."""
  return all(type(d) is int for d in shape or ())


def strip_reshapes(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u
