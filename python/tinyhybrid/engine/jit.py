"""TinyJit: run a function of Tensors once normally, capture the kernels of its second call, and from the third call
on replay them all as one pre-encoded batch, patching only the input buffers' addresses."""
from __future__ import annotations

import functools
from typing import Any, Callable, Generic, TypeVar

from tinyhybrid.device import Buffer, Device
from tinyhybrid.engine import realize as engine
from tinyhybrid.helpers import JIT
from tinyhybrid.tensor import Tensor
from tinyhybrid.schedule.kernelize import contiguous_buffer

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
  """A jitted function was called with inputs that do not match what it captured."""


def _signature(ts: list[Tensor]) -> list[tuple]:
  return [(t.shape, t.dtype, t.device) for t in ts]


def _returned_tensors(ret: Any) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [x for r in ret for x in _returned_tensors(r)]
  if isinstance(ret, dict): return [x for r in ret.values() for x in _returned_tensors(r)]
  return []


class _Replay:
  """The captured kernels over numbered buffers; inputs are patched per call."""
  def __init__(self, runs: list[tuple[str, Any, list[Buffer], int]], inputs: list[Buffer]):
    slot_of: dict[int, int] = {}
    self.buffers: list[Buffer] = []  # slot -> buffer at capture (intermediates and outputs are reused as they are)
    for b in inputs + [b for _, _, bufs, _ in runs for b in bufs]:
      if id(b) not in slot_of:
        slot_of[id(b)] = len(self.buffers)
        self.buffers.append(b)
    self.inputs = inputs
    self.input_slots = [slot_of[id(b)] for b in inputs]
    items = [(prg, [slot_of[id(b)] for b in bufs], threads) for _, prg, bufs, threads in runs]
    devices = {d for d, _, _, _ in runs}
    self.runner = Device[devices.pop()].runner(items, len(self.buffers)) if len(devices) == 1 else None
    self.items = items
    self.addresses = [b.address for b in self.buffers]

  def __call__(self, inputs: list[Buffer]) -> None:
    addresses = self.addresses
    for slot, b in zip(self.input_slots, inputs): addresses[slot] = b.address
    if self.runner is not None: self.runner(addresses)
    else:
      for prg, slots, threads in self.items: prg.call([addresses[s] for s in slots], threads)


class TinyJit(Generic[ReturnType]):
  """@TinyJit on a function of Tensors: the first call runs it, the second captures its kernels, later calls replay
  them with the new inputs (same shapes and dtypes; a change raises JitError). Python code inside the function runs
  only on the first two calls. Returned tensors are the same objects on every replay, refilled in place. JIT=0 turns
  it off."""

  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn = fxn
    self.cnt = 0
    self.replay: _Replay | None = None
    self.ret: Any = None
    self.sig: list[tuple] | None = None
    functools.update_wrapper(self, fxn)

  def reset(self) -> None:
    self.cnt, self.replay, self.ret, self.sig = 0, None, None, None

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    return functools.partial(self.__call__, obj)  # jit a method: bind self

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if not JIT: return self.fxn(*args, **kwargs)
    inputs = [a for a in args if isinstance(a, Tensor)] + [a for a in kwargs.values() if isinstance(a, Tensor)]
    # the captured kernels read inputs from memory, so inputs are realized, contiguous buffers
    bufs = [_plain_buffer(t) for t in inputs]
    if self.cnt >= 2:
      replay = self.replay
      assert replay is not None and self.sig is not None
      if len(bufs) != len(replay.inputs) or any(b.size != s.size or b.dtype is not s.dtype or b.device != s.device
                                               for b, s in zip(bufs, replay.inputs)) or _signature(inputs) != self.sig:
        raise JitError(f"TinyJit: inputs changed from {self.sig} to {_signature(inputs)}; shapes, dtypes and devices must stay the same")
      replay(bufs)
      return self.ret
    if self.cnt == 0:
      ret = self.fxn(*args, **kwargs)
      if outs := _returned_tensors(ret): Tensor.realize(*outs)
      self.cnt = 1
      return ret
    engine.capturing.append([])
    try:
      ret = self.fxn(*args, **kwargs)
      outs = _returned_tensors(ret)
      if outs: Tensor.realize(*outs)
    finally:
      runs = engine.capturing.pop()
    self.sig = _signature(inputs)
    self.replay = _Replay(runs, bufs)
    self.ret, self.cnt = ret, 2
    return ret



def _plain_buffer(t: Tensor) -> Buffer:
  """The contiguous buffer holding t, realizing it into one first if it is lazy or a strided view."""
  if (buf := contiguous_buffer(t.uop)) is None: buf = contiguous_buffer(t.replace(t.contiguous().realize()).uop)
  return buf
