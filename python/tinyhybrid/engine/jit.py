"""TinyJit: run a function of Tensors once normally, capture the kernels of its second call, and from the third call
on replay them all as one pre-encoded batch, patching only the input buffers' addresses and the values of the bound
Variables the call passes (as arguments, or in the shapes of its inputs).

The rules are tinygrad's (its JIT "footguns" notes): inputs are the Tensors passed positionally, by keyword (in name
order) or directly inside a list, tuple or dict argument; each is read through its view of a buffer, and that view,
its dtype and device must stay the same (bound Variables in it may change). Other arguments and Python code run only
on the first two calls, and tensors made inside the function keep their capture-time contents, except random ones,
which are drawn anew on each call. Misuse is a JitError: one buffer passed twice, a Python scalar as an input,
reading a tensor's values (.numpy(), .item(), .tolist()) during the capture, a capture that runs no kernel or returns
something other than tensors, and changed inputs. A TinyJit capturing inside another's capture is a RuntimeError."""
from __future__ import annotations

import functools
import pickle
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from tinyhybrid.codegen.gpu import Launch
from tinyhybrid.device import Buffer, CompiledProgram, Device, ProfileEvent, Runner, profile_events
from tinyhybrid.dtype import dtypes
from tinyhybrid.engine import realize as engine
from tinyhybrid.engine.multi import batch_runners
from tinyhybrid.engine.realize import Capture, ExecItem, JitError, Transient, capturing, loaded_params, scalar_buffers
from tinyhybrid.helpers import JIT, PROFILE
from tinyhybrid.tensor import Tensor, _all_tensors
from tinyhybrid.uop.buffers import base_buffer, buffer_view, contiguous_buffer
from tinyhybrid.schedule.memory import share_by_lifetime
from tinyhybrid.schedule.multi import is_realized_multi
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, binds_of, map_binds, unbind_all, unbind_arg

__all__ = ["CapturedJit", "JitError", "TinyJit"]

ReturnType = TypeVar("ReturnType")


def _returned_tensors(ret: Any) -> list[Tensor]:
  if isinstance(ret, Tensor): return [ret]
  if isinstance(ret, (list, tuple)): return [x for r in ret for x in _returned_tensors(r)]
  if isinstance(ret, dict): return [x for r in ret.values() for x in _returned_tensors(r)]
  return []


def _check_returns(ret: Any) -> None:
  """A replay hands back the capture's return value: anything in it but tensors would be stale, so it is an error."""
  if ret is None or isinstance(ret, Tensor): return
  if isinstance(ret, (list, tuple, dict)):
    for r in (ret.values() if isinstance(ret, dict) else ret): _check_returns(r)
    return
  raise JitError(f"TinyJit: the function returned a {type(ret).__name__}; a jitted function returns only Tensors (in lists, "
                 "tuples or dicts), since a replay does not run its Python code")


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
  """A view with its variables unbound and its buffer replaced by its size: inputs with the same key are read by the
  same kernels (offsets included: a view at another offset is another input). Reshapes of a whole buffer see it
  compactly in the outermost one's shape, so there only that shape counts (the buffer's size follows the variables)."""
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


def _add_input(name: int | str | None, v: Tensor, bufs: list[Buffer], sig: list[tuple], var_vals: dict[UOp, int]) -> None:
  """An input: a lazy one is computed first (the captured kernels read memory). A whole buffer is keyed by its shape;
  any other view is read through, keyed by the view with its variables unbound."""
  if type(v.device) is tuple:  # sharded: each shard's buffer is an input
    if not is_realized_multi(v.uop) or not all(contiguous_buffer(x) is not None for x in v.uop.src): v.replace(v.contiguous().realize())
    bufs.extend(contiguous_buffer(x) for x in v.uop.src)  # type: ignore[misc]
    sig.append((name, v.shape, v.dtype, v.device, v.uop.arg[1]))
    return
  if (v.uop.op is Ops.CONST and not v.uop.src) or v.device is None:
    raise JitError(f"TinyJit: input {name!r} is a constant ({v.dtype}, on no device) with no buffer a replay could replace; "
                   "pass a tensor with memory (Tensor([x]), or .contiguous())")
  if not buffer_view(v.uop): v.replace(v.contiguous().realize())
  u = v.uop.src[0] if v.uop.op is Ops.AFTER else v.uop  # realized, with its history kept for autograd
  if (buf := contiguous_buffer(u)) is not None and len(u.src) <= 1:
    bufs.append(buf)  # type: ignore[arg-type]  # a realized tensor's buffer is a Buffer (slots are the scheduler's)
    sig.append((name, v.shape, u.dtype, v.device))
    return
  chain = _view_chain(u)
  if binds := _chain_binds(chain): _add_binds(var_vals, binds)
  bufs.append(chain[-1].arg)
  sig.append((name, _view_key(chain), v.dtype, v.device))


def _prepare(args: tuple, kwargs: dict[str, Any], first: bool) -> tuple[list[Buffer], list[tuple], dict[UOp, int]]:
  """The input buffers, the call's signature (what must stay the same between calls) and the bound Variables' values.
  Inputs are the Tensors among the arguments (keywords in name order), then those directly inside list, tuple and
  dict arguments (not deeper: model weights are not inputs). first: a capture or warm-up call, which also refuses a
  realized Python scalar (a replay of one would work, but tinygrad refuses it)."""
  bufs: list[Buffer] = []
  sig: list[tuple] = []
  var_vals: dict[UOp, int] = {}
  containers: list[Any] = []
  for name, v in (enumerate(args) if not kwargs else [*enumerate(args), *sorted(kwargs.items())]):
    if isinstance(v, Tensor):
      u = v.uop
      # _add_input, inlined for the common case: a whole buffer, with no variable in its view
      if (buf := contiguous_buffer(u)) is not None and len(u.src) <= 1:
        bufs.append(buf)  # type: ignore[arg-type]
        sig.append((name, v.shape, u.dtype, v.device))
      else: _add_input(name, v, bufs, sig, var_vals)  # type: ignore[arg-type]  # an int or a str
    elif isinstance(v, UOp):
      _add_binds(var_vals, binds_of(v))
      sig.append((name, "var", unbind_all(v)))
    elif isinstance(v, (list, tuple, dict)): containers.append(v)
  if containers:
    seen = {id(v) for v in (*args, *kwargs.values()) if isinstance(v, Tensor)}
    for c in containers:
      for v in (c.values() if isinstance(c, dict) else c):
        if isinstance(v, Tensor) and id(v) not in seen:
          seen.add(id(v))
          _add_input(None, v, bufs, sig, var_vals)
  if len(bufs) > 1 and len(set(bufs)) != len(bufs):
    raise JitError("TinyJit: duplicate inputs: one buffer is passed twice (the same tensor, or two views of one buffer); "
                   "a replay patches each input on its own, so pass a .clone() of one")
  if first and any(b in scalar_buffers for b in bufs):
    raise JitError("TinyJit: an input is a realized Python scalar (Tensor(x).realize()), a constant a replay cannot replace; "
                   "pass Tensor([x]) or a .contiguous() copy")
  return bufs, sig, var_vals


def _rehome(runs: list[tuple[str, CompiledProgram, list[Buffer | Transient | UOp], int | Launch]]) \
    -> tuple[list[tuple[str, CompiledProgram, list[Buffer | UOp], int | Launch]], set[int]]:
  """The runs with a buffer for each Transient: itself while it lives, and the ids of the scratch buffers given to
  the others. Those that died live, for the replay, from the first run that uses them to the last; transients whose
  spans do not overlap share a scratch buffer (schedule/memory.share_by_lifetime). The plan reads only the runs, so
  it is the same whatever addresses the device's allocator gave. A live transient lends its memory to none: a run
  may write only part of it (an assign into a row of a cache), and the rest is the caller's."""
  span: dict[Transient, tuple[int, int]] = {}
  for i, (_, _, args, _) in enumerate(runs):
    for a in args:
      if isinstance(a, Transient): span[a] = (span[a][0] if a in span else i, i)
  dead = [t for t in span if t.ref() is None]
  home: dict[Transient, Buffer] = {}
  live = {id(b) for _, _, args, _ in runs for a in args if (b := a.ref() if isinstance(a, Transient) else a) is not None}
  for device in dict.fromkeys(t.device for t in dead):
    mine = [t for t in dead if t.device == device]
    for members in share_by_lifetime([(t.nbytes, *span[t]) for t in mine]):
      home.update(dict.fromkeys((mine[m] for m in members), _scratch_buffer(device, mine[members[0]].nbytes, live)))
  rehomed = [(dev, prg, [(home.get(a) or a.ref()) if isinstance(a, Transient) else a for a in args], threads) for dev, prg, args, threads in runs]
  return rehomed, set(map(id, home.values()))  # type: ignore[return-value]


# The memory of every capture's plan, by device: a replay's intermediates are dead before it returns, so two captures
# may keep theirs in the same buffer. Their replays touch it in submission order (an HCQ device's dependency tracker
# orders submits by the memory they declare; the other queues run in order), so an LLM's prompt and decode captures
# hold one plan's memory, not three (a 0.5B Q4_K_M model: 42 -> 16 MiB). Weak: a buffer goes with the last capture
# that uses it. One capture's free_intermediates frees it for all: each takes memory again at its next call.
_scratch: dict[str, list[weakref.ref[Buffer]]] = {}
# one replay's submits at a time: two threads replaying captures that share scratch memory must not interleave their
# kernels on an in-order queue (OpenCL's, CUDA's) that no tracker orders by memory
_REPLAYS = threading.RLock()


def _scratch_buffer(device: str, nbytes: int, taken: set[int]) -> Buffer:
  """The smallest scratch buffer of device of at least nbytes that this plan does not use yet (taken: ids of the
  buffers it uses, which this one joins), else a new one that later plans may share."""
  pool = _scratch[device] = [r for r in _scratch.get(device, []) if r() is not None]
  fits = [b for r in pool if (b := r()) is not None and b.nbytes >= nbytes and id(b) not in taken]
  if fits: buf = min(fits, key=lambda b: b.nbytes)
  else: pool.append(weakref.ref(buf := Buffer(device, nbytes, dtypes.uint8)))
  taken.add(id(buf))
  return buf.ensure_allocated()


@dataclass(frozen=True)
class CapturedKernels:
  src: tuple[ExecItem, ...]


def graph_class(dev: Any) -> Any:
  """The device's graph runner class (tinygrad's name): None on every device here (see Compiled.graph)."""
  return dev.graph.func if isinstance(dev.graph, functools.partial) else dev.graph


class CapturedJit(Generic[ReturnType]):
  """The kernels of one capture over numbered argument slots (buffers, then variables' values); a call patches the
  inputs and the variables and runs them as one batch. jit_cache: one ExecItem per kernel a replay runs, in order."""

  @property
  def linear(self) -> CapturedKernels:
    """The kernels a replay runs, in order (tinygrad's captured.linear, read for its .src)."""
    return CapturedKernels(tuple(self.jit_cache))

  def __init__(self, ret: ReturnType, capture: Capture, inputs: list[Buffer], sig: list[tuple], prune: bool = False, name: str = "jit"):
    runs, scratch = _rehome(capture.runs)
    if prune:  # kernels that read no input, directly or through another kept kernel's buffers, ran once already
      needed, kept = {id(b) for b in inputs}, []
      for run in runs:
        bufs = {id(a) for a in run[2] if isinstance(a, Buffer)}
        if not needed.isdisjoint(bufs):
          kept.append(run)
          needed |= bufs
      runs = kept
    self.ret, self.sig, self.name = ret, sig, name
    slot_of: dict[Any, int] = {}
    self.objs: list[Buffer | UOp] = []  # what each slot held at capture (a variable: bound to its capture value)
    self.args: list[int] = []           # the argument words; intermediates and outputs are reused as they are

    def slot(a: Buffer | UOp) -> int:
      key = a.src[0] if isinstance(a, UOp) else id(a)  # a variable's slot is its DEFINE_VAR's
      if key not in slot_of:
        slot_of[key] = len(self.args)
        self.objs.append(a)
        self.args.append(a.src[1].arg & engine.U64_MASK if isinstance(a, UOp) else a.address)
      return slot_of[key]

    self.input_slots = [slot(b) for b in inputs]
    self.freed: list[int] = []  # the slots whose buffers free_intermediates freed
    self.jit_cache = [ExecItem(prg, [slot(a) for a in args], threads) for _, prg, args, threads in runs]
    self.shared = [i for i, b in enumerate(self.objs) if id(b) in scratch]  # another capture's free_intermediates may free them
    self.devices = [d for d, _, _, _ in runs]
    self.var_slots = {k: s for k, s in slot_of.items() if isinstance(k, UOp)}
    self.rng = [(b, redraw) for b, redraw in capture.rng if id(b) in slot_of]  # the random calls a kernel reads
    # buffers the kernels write (a kernel's first prg.outs arguments are its outputs) that are not inputs: an input that
    # is one of them (a returned tensor fed back in) is copied first, or a kernel would read what another already overwrote
    input_ids = {id(b) for b in inputs}
    self.written = {b for ei in self.jit_cache for sl in ei.slots[:ei.prg.outs] if isinstance(b := self.objs[sl], Buffer) and id(b) not in input_ids}
    # one pre-encoded batch per device where it can (engine/multi.py), else a runner per run of consecutive kernels
    # and copies on one device
    self.runners: list[Runner] = batch_runners(self.devices, [(ei.prg, ei.slots, ei.threads) for ei in self.jit_cache], len(self.args))
    self.ops, self.mem = sum(ei.prg.ops for ei in self.jit_cache), sum(ei.prg.mem for ei in self.jit_cache)
    # a returned realized view of a symbolic shape follows each call's values (in tinygrad it keeps the capture's)
    self.symbolic_outs = [t for t in _returned_tensors(ret) if buffer_view(t.uop) and _chain_binds(_view_chain(t.uop))]
    # a returned tensor on an input's memory (an assign into an argument) is on that call's input on every replay
    pos = {id(b): i for i, b in enumerate(inputs)}
    self.input_outs = [(t, t.uop, base, pos[id(base.arg)]) for t in _returned_tensors(ret) if buffer_view(t.uop) and id((base := base_buffer(t.uop)).arg) in pos]

  def __getstate__(self) -> dict[str, Any]:
    """What a pickle holds: the kernels (remade by the loading process's devices), the buffers with their contents, the
    returned tensors; not the argument words or the runners, which are this process's addresses."""
    if self.rng: raise pickle.PicklingError("TinyJit: a capture that draws random numbers inside it cannot be pickled")
    return {k: v for k, v in self.__dict__.items() if k not in ("args", "runners")}

  def __setstate__(self, state: dict[str, Any]) -> None:
    self.__dict__.update(state)
    self.args = [a.src[1].arg & engine.U64_MASK if isinstance(a, UOp) else a.ensure_allocated().address for a in self.objs]
    self.freed, self.shared = [], []  # a loaded capture's buffers are its own
    self.runners = batch_runners(self.devices, [(ei.prg, ei.slots, ei.threads) for ei in self.jit_cache], len(self.args))

  def free_intermediates(self) -> None:
    """Frees the memory of the buffers a replay fills before it reads them: its intermediates, and those of what it
    returns (tinygrad's). The next call allocates them again. Inputs, state a replay reads before it writes (a buffer
    updated in place, a model's weights) and buffers a live tensor outside holds keep theirs."""
    returned = {id(t) for t in _returned_tensors(self.ret)}
    held = {id(base_buffer(t.uop).arg) for t in list(_all_tensors) if id(t) not in returned and buffer_view(t.uop)}
    held |= {id(b._base) for b in self.objs if isinstance(b, Buffer) and b._base is not None}  # a view's base stays
    filled: set[int] = set()
    state: set[int] = set(self.input_slots)
    for ei in self.jit_cache:
      nbufs = ei.prg.bufs if ei.prg.bufs >= 0 else len(ei.slots)
      # the PARAMs a kernel loads from (a program without a kernel, a copy, reads all but its outputs)
      if (reads := ei.prg.reads) is None: reads = loaded_params(ast) if (ast := ei.prg.ast) is not None else frozenset(range(ei.prg.outs, nbufs))
      state |= {sl for i, sl in enumerate(ei.slots[:nbufs]) if i in reads and sl not in filled}
      filled |= set(ei.slots[:ei.prg.outs])
    for slot in sorted(filled - state):
      b = self.objs[slot]
      if isinstance(b, Buffer) and id(b) not in held and b._base is None and b.is_allocated():
        b.deallocate()
        self.freed.append(slot)

  def __call__(self, inputs: list[Buffer], var_vals: dict[UOp, int]) -> ReturnType:
    with _REPLAYS:
      first = len(profile_events)
      self._run(inputs, var_vals)
    if PROFILE:
      for d in dict.fromkeys(self.devices): Device[d].synchronize()  # the runs' events are recorded once they are done
    if PROFILE and (ran := profile_events[first:]):
      # the replay as one span around the kernels it ran, from their own (queue) timestamps
      profile_events.append(ProfileEvent(f"jit {self.name}", ran[0].device, min(e.start_ns for e in ran), max(e.end_ns for e in ran), kind="jit"))
    engine.count_runs(len(self.jit_cache), self.ops, self.mem)
    if capturing: self._record(inputs, var_vals)
    for t, u, base, i in self.input_outs: t.uop = u.substitute({base: UOp(Ops.BUFFER, base.dtype, (), inputs[i])})
    # a returned view of a symbolic shape follows this call's values
    for t in self.symbolic_outs: t.uop = map_binds(t.uop, lambda b: b.src[0].bind(var_vals[b.src[0]]) if b.src[0] in var_vals else b)
    return self.ret

  def _run(self, inputs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    """Patches the argument words for this call and submits the replay."""
    args, written = self.args, self.written
    for slot in (*self.freed, *self.shared):  # memory again for the buffers free_intermediates let go of
      args[slot] = self.objs[slot].ensure_allocated().address  # type: ignore[union-attr]
    self.freed.clear()
    for slot, b in zip(self.input_slots, inputs):
      if b in written:  # the copy takes its place in inputs (our own list), which keeps it alive through the run
        inputs[inputs.index(b)] = b = Buffer(b.device, b.size, b.dtype, initial=b.numpy())
      args[slot] = b.address
    for var, val in var_vals.items():
      if (slot := self.var_slots.get(var)) is not None: args[slot] = val & engine.U64_MASK  # type: ignore[assignment]
    for buf, redraw in self.rng:  # a random call made in the capture draws anew on every replay
      buf.copyin(base_buffer(redraw()).arg.numpy())
    for runner in self.runners: runner(args)

  def _record(self, inputs: list[Buffer], var_vals: dict[UOp, int]) -> None:
    """A replay inside another TinyJit's capture: its kernels become part of that capture, with this call's inputs."""
    objs = list(self.objs)
    for slot, b in zip(self.input_slots, inputs): objs[slot] = b
    for var, slot in self.var_slots.items():
      if var in var_vals: objs[slot] = var.bind(var_vals[var])
    for dev, ei in zip(self.devices, self.jit_cache): capturing[-1].record(dev, ei.prg, [objs[s] for s in ei.slots], ei.threads)
    capturing[-1].rng.extend(self.rng)


class TinyJit(Generic[ReturnType]):
  """@TinyJit (or @TinyJit(prune=True)) on a function of Tensors: the first call runs it, the second captures its
  kernels, later calls replay them with the new inputs (see the module's notes for what may change and what is an
  error). Returned tensors are the same objects on every replay, refilled in place. prune: kernels that read no
  input run only at the capture. JIT=0 turns it off."""

  def __new__(cls, fxn: Callable[..., ReturnType] | None = None, *, prune: bool = False) -> Any:
    if fxn is None: return lambda f: cls(f, prune=prune)  # the decorator form, @TinyJit(prune=True)
    return super().__new__(cls)

  def __init__(self, fxn: Callable[..., ReturnType], *, prune: bool = False):
    self.fxn, self.prune = fxn, prune
    self.cnt = 0
    self.captured: CapturedJit[ReturnType] | None = None
    functools.update_wrapper(self, fxn)

  def __reduce__(self) -> tuple:
    """Pickled as its capture (tinygrad's): the function is not kept, so the loaded one replays, and a call before a
    capture (or with other inputs) is an error."""
    return _loaded_jit, (self.captured, self.prune)

  def reset(self) -> None:
    """Forgets the capture: the next call is a warm-up again."""
    self.cnt, self.captured = 0, None

  def __get__(self, obj: Any, objtype: Any = None) -> Callable[..., ReturnType]:
    return functools.partial(self.__call__, obj)  # jit a method: bind self

  def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
    if self.fxn is None and self.captured is None: raise JitError("TinyJit: this one was unpickled without a capture, so it has nothing to run")
    bufs, sig, var_vals = _prepare(args, kwargs, self.cnt < 2)
    if self.cnt >= 2 and JIT:
      captured = self.captured
      assert captured is not None
      if sig != captured.sig: raise JitError(f"TinyJit: inputs changed from {captured.sig} to {sig}; their names, views, dtypes and devices must stay the same")
      return captured(bufs, var_vals)
    if self.cnt == 0 or not JIT:
      ret = self.fxn(*args, **kwargs)
      if outs := _returned_tensors(ret): Tensor.realize(*outs)
      if JIT: self.cnt = 1
      return ret
    if capturing: raise RuntimeError("having TinyJit inside another TinyJit is not supported (a capture inside another's)")
    capturing.append(frame := Capture(weak=not self.prune))  # pruned kernels' outputs are read, never written, by a replay
    try:
      ret = self.fxn(*args, **kwargs)
      if outs := _returned_tensors(ret): Tensor.realize(*outs)
    finally:
      capturing.pop()
    if not frame.runs: raise JitError("TinyJit: the capture ran no kernel, so there is nothing to replay (return the tensors it computes)")
    _check_returns(ret)
    self.captured, self.cnt = CapturedJit(ret, frame, bufs, sig, self.prune, getattr(self.fxn, "__qualname__", "jit")), 2
    return ret


def _loaded_jit(captured: CapturedJit | None, prune: bool) -> TinyJit:
  jit: TinyJit = TinyJit.__new__(TinyJit, _loaded_jit)  # (any function: __new__ only tells the decorator form apart)
  jit.fxn, jit.prune, jit.captured, jit.cnt = None, prune, captured, 2 if captured is not None else 0  # type: ignore[assignment]
  return jit
