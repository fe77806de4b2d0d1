"""Realizing on a device that holds memory and runs no kernels (DISK, runtime/ops_disk.py), as tinygrad does: a
tensor there is a view of its memory, and the only work is moving bytes.
- A view that is one run of the memory in order (a slice, a reshape, a bitcast) realizes to that range itself, a
  buffer sharing the memory; any other view is an error (RuntimeError: "non-contiguous view is not supported").
- A value from another device (a COPY) is computed there and its bytes are copied in: into a new buffer (on DISK, the
  file from its start), or, for an assign, into the target's range.
- Anything to compute there is NotImplementedError: move the tensor to a device that runs kernels first.
check_assign() finds those errors when an assign is made, so a bad write never waits in the graph to fail later.

This layer works on UOps and never imports Tensor: realizing a value on its own device is handed in (tensor.py)."""
from __future__ import annotations

from typing import Callable

from tinyhybrid.device import Buffer, CopySpec
from tinyhybrid.dtype import DType
from tinyhybrid.helpers import prod
from tinyhybrid.engine.multi import copy_buffers
from tinyhybrid.uop.buffers import buffer_uop, buffer_view, byte_range, strip_reshapes
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

# realizes graphs, each on its device, into memory of their own, and returns their realized views
Realize = Callable[[list[UOp], list[str], bool], list[UOp]]

NOT_CONTIGUOUS = "non-contiguous view is not supported"


def _no_kernels(device: str, u: UOp) -> NotImplementedError:
  ops = sorted({n.op.name for n in u.toposort() if n.op not in GroupOp.Movement and n.op not in (Ops.BUFFER, Ops.AFTER)})
  return NotImplementedError(f"{device} runs no kernels, so it cannot compute {', '.join(ops) or 'this'} (shape {shape_of(u)}, "
                             f"{u.dtype}): move the tensor to a device first (.to('CPU'))")


def _check_view(device: str, u: UOp) -> None:
  if byte_range(u) is None:
    if buffer_view(u): raise RuntimeError(f"{device}: {NOT_CONTIGUOUS} (a view of shape {shape_of(u)} that is not one range of the memory)")
    raise _no_kernels(device, u)


def _moved(u: UOp) -> UOp | None:
  """The source of a value copied in from another device (a COPY, seen through same-size bitcasts and reshapes)."""
  while u.op is Ops.RESHAPE or (u.op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize): u = u.src[0]
  return u.src[0] if u.op is Ops.COPY else None


def check_assign(device: str, target: UOp, value: UOp) -> None:
  """Raises, as realizing it would, when an assign of value to target cannot run on a device without kernels: the
  target must be one range of memory, and the value one too, or a value from another device."""
  _check_view(device, target)
  if byte_range(value) is None and _moved(value) is None and value.device is not None: _check_view(device, value)


def realize_on_storage(device: str, roots: list[UOp], realize: Realize) -> dict[UOp, UOp]:
  """What each root on a device without kernels became once its bytes are in place (see the module's notes)."""
  becomes: dict[UOp, UOp] = {}
  for r in roots:
    r = r.substitute(becomes) if becomes else r
    base = strip_reshapes(r)
    if base.op is Ops.STORE:
      target, value = _in_memory(device, base.src[0], realize, becomes), base.src[1]
      check_assign(device, target, value)
      buf, at, nbytes = byte_range(target)  # type: ignore[misc]  # checked
      _copy_into(buf, at, nbytes, value, realize)  # type: ignore[arg-type]  # a realized graph's buffers are Buffers
      becomes[r] = target if base is r else UOp(Ops.RESHAPE, r.dtype, (target, *r.src[1:]), r.arg)
      continue
    # a contiguous copy (its UNIQUE source aside) of one range is that range: a new DISK buffer would be the file's start
    src = r.src[0] if r.op is Ops.CONTIGUOUS and all(s.op is Ops.UNIQUE for s in r.src[1:]) else r
    if _moved(src) is not None or src.device is None: becomes[r] = _new_buffer(device, src, realize)
    elif (rng := byte_range(src := _in_memory(device, src, realize, becomes))) is not None:  # the range itself
      buf, at, nbytes = rng
      becomes[r] = buffer_uop(buf.view(nbytes // r.dtype.itemsize, r.dtype, at), shape_of(r) or ())  # type: ignore[union-attr]
    else: _check_view(device, src)
  return becomes


def _new_buffer(device: str, value: UOp, realize: Realize) -> UOp:
  """value's bytes in a new buffer (on DISK: the file from its start)."""
  new = Buffer(device, _numel(value), value.dtype)
  _copy_into(new, 0, new.nbytes, value, realize)
  return buffer_uop(new, shape_of(value) or ())


def _in_memory(device: str, u: UOp, realize: Realize, becomes: dict[UOp, UOp]) -> UOp:
  """u, a view, with the value it views put in memory first when that is a copy from another device (as tinygrad
  realizes a tensor before it slices it); every tensor holding that copy is pointed at the memory too (becomes)."""
  base = u
  while base.op in GroupOp.Movement or base.op is Ops.AFTER or (base.op is Ops.BITCAST and base.dtype.itemsize == base.src[0].dtype.itemsize):
    base = base.src[0]
  if base is u or base.op is not Ops.COPY: return u
  becomes[base] = _new_buffer(device, base, realize)
  return u.substitute({base: becomes[base]})


def _numel(u: UOp) -> int: return prod(shape_of(u) or ())


def _copy_into(dst: Buffer, at: int, nbytes: int, value: UOp, realize: Realize) -> None:
  """value's bytes into dst from byte `at` on: read where they are (one range of memory), else computed on the device
  they come from (a constant: on the CPU) and copied from there."""
  if (rng := byte_range(value)) is None:
    src = _moved(value)
    if src is None: src = value  # a constant graph (no device)
    if (rng := byte_range(src)) is None:
      rng = byte_range(realize([src], [str(src.device) if src.device is not None else "CPU"], True)[0])
      assert rng is not None, "a realized value is a buffer"
  buf, offset, have = rng
  if have != nbytes: raise ValueError(f"{dst.device}: {have} bytes into a range of {nbytes}")
  copy_buffers([(dst, buf, CopySpec(nbytes, offset, at))])  # type: ignore[list-item]  # a realized graph's buffers are Buffers


def bitcast_view(device: str, u: UOp, dtype: DType) -> UOp:
  """u's memory seen as dtype (another item size rescales the last axis, as in tinygrad): a view of the same range,
  since there is no kernel to move the bytes through."""
  if (rng := byte_range(u)) is None:
    _check_view(device, u)
  buf, at, nbytes = rng  # type: ignore[misc]  # checked
  shape, isz, osz = shape_of(u) or (), u.dtype.itemsize, dtype.itemsize
  if isz != osz and (not shape or shape[-1] * isz % osz):
    raise RuntimeError(f"bitcast: {u.dtype} ({isz} bytes) to {dtype} ({osz} bytes) needs a last axis of whole {osz}-byte items, shape {shape}")
  new = (*shape[:-1], shape[-1] * isz // osz) if shape else ()
  return buffer_uop(buf.view(nbytes // osz, dtype, at), new)  # type: ignore[union-attr]  # a realized graph's buffers are Buffers
