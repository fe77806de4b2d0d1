"""TinyJit: run a function of Tensors once normally, capture the kernels of its second call, and from the third call
on replay them all as one pre-encoded batch, patching only the input buffers' addresses and the values of the bound
Variables the call passes (as arguments, or in the shapes of its inputs)."""
from __future__ import annotations

import functools
from typing import Any, Callable, Generic, TypeVar

from tinyhybrid.device import Buffer, Device, ProfileEvent, profile_events
from tinyhybrid.engine import realize as engine
from tinyhybrid.helpers import JIT, PROFILE
from tinyhybrid.tensor import Tensor
from tinyhybrid.schedule.kernelize import buffer_view, contiguous_buffer
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, binds_of, map_binds, unbind_all, unbind_arg

ReturnType = TypeVar("ReturnType")


class JitError(RuntimeError):
  """A jitted function was called with inputs that do not match what it captured."""


def _returned_tensors(ret: Any) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [x for r in ret for x in _returned_tensors(r)]
  if isinstance(ret, dict): return [x for r in ret.values() for x in _returned_tensors(r)]
  return []


def _view_chain(u: UOp) -> list[UOp]:
  """The movement nodes of a buffer view, outermost first (realized AFTERs skipped), then the BUFFER."""
  chain = []
  while u.op is not Ops.BUFFER:
    if u.op is not Ops.AFTER: chain.append(u)
    u = u.src[0]
  return chain + [u]


def _chain_binds(chain: list[UOp]) -> list[UOp]:
  return [s for n in chain[:-1] for s in n.src[1:] if s.op is Ops.BIND]


def _view_key(chain: list[UOp]) -> UOp:
  """A symbolic view with its variables unbound and its buffer replaced by its size: views with the same key are read
  by the same kernels. Reshapes of a whole buffer see it compactly in the outermost one's shape, so there only that
  shape counts (the buffer's size follows the variables' values)."""
  base = chain[-1]
  if all(n.op is Ops.RESHAPE for n in chain[:-1]): return UOp(Ops.RESHAPE, base.dtype, (UOp(Ops.NOOP, base.dtype),), unbind_arg(chain[0].arg))
  x = UOp(Ops.NOOP, base.dtype, (), base.arg.size)
  for n in reversed(chain[:-1]): x = UOp(n.op, n.dtype, (x,), unbind_arg(n.arg))
  return x


def _add_binds(var_vals: dict[UOp, int], binds: list[UOp]) -> None:
  for b in binds:
    var, val = b.unbind()
    if var_vals.setdefault(var, val) != val:
      raise JitError(f"TinyJit: Variable {var.arg[0]!r} is bound to both {var_vals[var]} and {val} in one call")


def _prepare(values: list[Any]) -> tuple[list[Buffer], list[tuple], dict[UOp, int]]:
  """The input buffers, the call's signature (what must stay the same between calls) and the bound Variables' values,
  from a call's arguments. A concrete input is made a contiguous buffer; a symbolic one (a view whose shape or
  offsets hold bound Variables) is read through its view, which the signature holds with its variables unbound."""
  bufs: list[Buffer] = []
  sig: list[tuple] = []
  var_vals: dict[UOp, int] = {}
  for v in values:
    if isinstance(v, UOp):
      _add_binds(var_vals, binds_of(v))
      sig.append(("var", unbind_all(v)))
      continue
    if not isinstance(v, Tensor): continue
    # the common case first: a whole buffer, with no variable in its view
    if (buf := contiguous_buffer(v.uop)) is not None and len(v.uop.src) <= 1:
      bufs.append(buf)
      sig.append((v.shape, v.dtype, v.device))
      continue
    # the captured kernels read inputs from memory, so a lazy input is computed first
    if not buffer_view(v.uop): v.replace(v.contiguous().realize())
    chain = _view_chain(v.uop)
    if binds := _chain_binds(chain):
      _add_binds(var_vals, binds)
      bufs.append(chain[-1].arg)
      sig.append((_view_key(chain), v.dtype, v.device))
    else:
      bufs.append(_plain_buffer(v))
      sig.append((v.shape, v.dtype, v.device))
  return bufs, sig, var_vals


class _Replay:
  """The captured kernels over numbered argument slots (buffers, then variables' values); inputs and variables are
  patched per call."""
  def __init__(self, runs: list[tuple[str, Any, list[Buffer | UOp], int]], inputs: list[Buffer], name: str = "jit"):
    self.name = name
    slot_of: dict[Any, int] = {}
    self.buffers: list[Buffer] = []  # intermediates and outputs are reused as they are
    self.args: list[int] = []        # the argument words; a variable's slot starts with its value at capture

    def slot(a: Buffer | UOp) -> int:
      key = a.src[0] if isinstance(a, UOp) else id(a)  # a variable's slot is its DEFINE_VAR's
      if key not in slot_of:
        slot_of[key] = len(self.args)
        if isinstance(a, UOp): self.args.append(a.src[1].arg & engine.U64_MASK)
        else:
          self.buffers.append(a)
          self.args.append(a.address)
      return slot_of[key]

    self.input_slots = [slot(b) for b in inputs]
    self.items = [(prg, [slot(a) for a in args], threads) for _, prg, args, threads in runs]
    self.var_slots = {k: s for k, s in slot_of.items() if isinstance(k, UOp)}
    devices = {d for d, _, _, _ in runs}
    self.runner = Device[devices.pop()].runner(self.items, len(self.args)) if len(devices) == 1 else None
    self.ops, self.mem = sum(prg.ops for prg, _, _ in self.items), sum(prg.mem for prg, _, _ in self.items)

  def __call__(self, inputs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    args = self.args
    for slot, b in zip(self.input_slots, inputs): args[slot] = b.address
    for var, val in var_vals.items():
      if (slot := self.var_slots.get(var)) is not None: args[slot] = val & engine.U64_MASK
    first = len(profile_events)
    if self.runner is not None: self.runner(args)
    else:
      for prg, slots, threads in self.items: prg.call([args[s] for s in slots], threads)
    if PROFILE and (ran := profile_events[first:]):
      # the replay as one span around the kernels it ran, from their own (queue) timestamps
      profile_events.append(ProfileEvent(f"jit {self.name}", ran[0].device, min(e.start_ns for e in ran), max(e.end_ns for e in ran), kind="jit"))
    engine.count_runs(len(self.items), self.ops, self.mem)


class TinyJit(Generic[ReturnType]):
  """@TinyJit on a function of Tensors: the first call runs it, the second captures its kernels, later calls replay
  them with the new inputs (same shapes and dtypes; a change raises JitError). Bound Variables passed to it, or in
  its inputs' shapes, may take other values on each call: returned tensors of a symbolic shape follow them. Python
  code inside the function runs only on the first two calls. Returned tensors are the same objects on every replay,
  refilled in place. JIT=0 turns it off."""

  def __init__(self, fxn: Callable[..., ReturnType]):
    self.fxn = fxn
    self.cnt = 0
    self.replay: _Replay | None = None
    self.ret: Any = None
    self.sig: list[tuple] | None = None
    self.symbolic_outs: list[Tensor] = []
    functools.update_wrapper(self, fxn)

  def reset(self) -> None:
    self.cnt, self.replay, self.ret, self.sig, self.symbolic_outs = 0, None, None, None, []

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    return functools.partial(self.__call__, obj)  # jit a method: bind self

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if not JIT: return self.fxn(*args, **kwargs)
    bufs, sig, var_vals = _prepare([*args, *kwargs.values()])
    if self.cnt >= 2:
      assert self.replay is not None
      if sig != self.sig: raise JitError(f"TinyJit: inputs changed from {self.sig} to {sig}; shapes, dtypes and devices must stay the same")
      self.replay(bufs, var_vals)
      # a returned view of a symbolic shape follows this call's values
      for t in self.symbolic_outs: t.uop = map_binds(t.uop, lambda b: b.src[0].bind(var_vals[b.src[0]]) if b.src[0] in var_vals else b)
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
    self.sig = sig
    self.replay = _Replay(runs, bufs, getattr(self.fxn, "__qualname__", "jit"))
    self.symbolic_outs = [t for t in outs if buffer_view(t.uop) and _chain_binds(_view_chain(t.uop))]
    self.ret, self.cnt = ret, 2
    return ret


def _plain_buffer(t: Tensor) -> Buffer:
  """The contiguous buffer holding t, realizing it into one first if it is lazy or a strided view."""
  if (buf := contiguous_buffer(t.uop)) is None: buf = contiguous_buffer(t.replace(t.contiguous().realize()).uop)
  return buf
