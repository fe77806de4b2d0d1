"""Functions over tensors, as tinygrad's: a body written once over placeholder arguments (UOp.param,
Tensor.as_param) and called on tensors (Tensor.call), and the `function` decorator, which runs a Python function on
tensors and checks which tensors it reads besides its arguments.

tinygrad keeps a call as a CALL node that is scheduled once and replayed. Here a call is inlined: the body's
placeholders are replaced by the arguments' graphs, so the call is scheduled and fused with its surroundings like any
other graph, and the schedule and kernel caches give the reuse (the same body on tensors of the same shapes schedules
to the same kernels). A grad_fxn is the call's derivative rule: the backward pass uses it in place of the chain rule
through the body."""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, Generic, TypeVar, cast, overload

from tinyhybrid.device import Buffer
from tinyhybrid.gradient import grad_rule, outputs_grad_rule, with_gradient
from tinyhybrid.helpers import DEBUG
from tinyhybrid.nn.state import get_state_dict
from tinyhybrid.schedule.multi import select_shard
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop import Ops
from tinyhybrid.uop.buffers import buffer_uop, contiguous_buffer
from tinyhybrid.uop.ops import ParamArg, UOp, shape_eq

# grad_fxns by id, held so an id is never reused while a graph's tag names it (a tag holds constants only)
_grad_fxns: dict[int, Callable] = {}


class CallView:
  """What a grad_fxn gets as `call`: src[0] is the body and src[1:] the arguments (tensors here, as the gradient is)."""
  def __init__(self, body: UOp, args: tuple[Tensor, ...]): self.src: tuple[Any, ...] = (body, *args)


@grad_rule
def _grad_from_fxn(g: Tensor, out: Tensor, inputs: tuple[Tensor, ...], key: int, body: UOp) -> tuple[Tensor | None, ...]:
  return _checked_grads(_grad_fxns[key](g, CallView(body, inputs)), inputs)


def _checked_grads(got: Any, inputs: tuple[Tensor, ...]) -> tuple[Tensor | None, ...]:
  """What a grad_fxn returned: one gradient (a Tensor, a UOp or None) per argument."""
  if not isinstance(got, (tuple, list)) or len(got) != len(inputs):
    raise RuntimeError(f"grad_fxn must return one gradient per argument ({len(inputs)}), got {got!r}")
  return tuple(None if x is None else x if isinstance(x, Tensor) else Tensor(x, device=t.device) for x, t in zip(got, inputs))


@outputs_grad_rule
def _grad_from_kernel(gs: list[Tensor | None], out: Tensor, inputs: tuple[Tensor, ...], key: int, body: UOp,
                      written_only: tuple[tuple[int, tuple[int, ...], Any], ...]) -> tuple[Tensor | None, ...]:
  """_grad_from_fxn for a custom kernel, given the gradient of each output that has one, as tinygrad does: one is
  grad_fxn(g, call), several grad_fxn(*gs, call=call). Arguments the kernel only writes are not among `inputs`
  (nothing is computed from them): grad_fxn sees them as zeros of their shape, in their place."""
  real = [g for g in gs if g is not None]
  args, rest = list(inputs), dict((i, (shape, dtype)) for i, shape, dtype in written_only)
  full = tuple(Tensor.zeros(*rest[i][0], dtype=rest[i][1], device=real[0].device) if i in rest else args.pop(0) for i in range(len(inputs) + len(rest)))
  call = CallView(body, full)
  got = _grad_fxns[key](real[0], call) if len(real) == 1 else _grad_fxns[key](*real, call=call)
  grads = _checked_grads(got, full)
  return tuple(x for i, x in enumerate(grads) if i not in rest)


def params_of(body: UOp) -> list[UOp]:
  """The placeholders (UOp.param) a body reads, in graph order."""
  return [u for u in body.toposort() if u.op is Ops.PARAM and isinstance(u.arg, ParamArg)]


def call(body: UOp, args: tuple[Tensor, ...], grad_fxn: Callable | None = None) -> Tensor:
  """The body with each placeholder replaced by its argument (slot i: args[i]), as a tensor. A placeholder's dtype and
  shape must be its argument's."""
  subs: dict[UOp, UOp] = {}
  for p in params_of(body):
    a: ParamArg = p.arg
    if a.slot >= len(args): raise RuntimeError(f"call: the body reads argument {a.slot}, but {len(args)} were given")
    arg = args[a.slot]
    if p.dtype is not arg.dtype: raise RuntimeError(f"call: argument {a.slot} is {arg.dtype}, the body wants {p.dtype}")
    if a.shard is None: subs[p] = arg.uop
    else:
      if type(arg.device) is not tuple or len(arg.device) <= a.shard:
        raise RuntimeError(f"call: argument {a.slot} on {arg.device} is not sharded as the body wants")
      subs[p] = select_shard(arg.uop, arg.device, a.shard, arg.uop.axis)
    if a.shard is None and not shape_eq(tuple(a.shape), tuple(arg.shape)):
      raise RuntimeError(f"call: argument {a.slot} has shape {arg.shape}, the body wants {a.shape}")
  out = Tensor(body.substitute(subs) if subs else body)
  if grad_fxn is None: return out
  _grad_fxns.setdefault(id(grad_fxn), grad_fxn)
  return with_gradient(out, args, _grad_from_fxn, id(grad_fxn), body)


def custom_kernel(args: tuple[Tensor, ...], fxn: Callable[..., UOp], grad_fxn: Callable | None = None) -> list[Tensor]:
  """Runs fxn's kernel (tinygrad's kernel DSL over UOp.placeholder(shape, dtype, i) for args[i]) on the arguments'
  memory, each made a whole contiguous buffer first, and returns the arguments as the kernel left them. A sharded
  argument list runs the kernel on each device's shards. It runs when called (the kernel is its own step, and TinyJit
  captures it). grad_fxn(grad, call) gives each argument's gradient (call.src[1:] are the arguments)."""
  from tinyhybrid.engine.custom import run_custom_kernel
  if not args: raise RuntimeError("custom_kernel: no tensors to run the kernel on")
  sharded = [type(t.device) is tuple for t in args]
  if any(sharded) and not all(sharded): raise RuntimeError("custom_kernel: either every tensor is sharded or none is")
  if all(sharded):
    devices = args[0].device
    if any(t.device != devices for t in args): raise RuntimeError("custom_kernel: the sharded tensors must be on the same devices")
    shards = [custom_kernel(tuple(Tensor(select_shard(t.uop, t.device, i, t.uop.axis)) for t in args), fxn, grad_fxn) for i in range(len(devices))]
    return [Tensor(UOp(Ops.MSTACK, t.dtype, tuple(s[j].uop for s in shards), (devices, t.uop.axis))) for j, t in enumerate(args)]
  # (built before the realize below, which points the arguments at buffers: it still reads what they were computed from)
  # (an argument that is memory without contents yet, as Tensor.empty's, is only written: nothing is computed from it)
  fresh = {i for i, t in enumerate(args) if isinstance(b := contiguous_buffer(t.uop), Buffer) and not b.is_allocated()}
  read = tuple(Tensor(t.uop, device=t.device) for i, t in enumerate(args) if i not in fresh)
  anchor = functools.reduce(lambda a, b: a + b, [t.float().sum() * 0 for t in read], Tensor.zeros((), device=args[0].device))
  whole = [t if contiguous_buffer(t.uop) is not None else t.contiguous() for t in args]  # (an earlier kernel's output: its buffer)
  Tensor.realize(*whole)
  bufs = [contiguous_buffer(t.uop) for t in whole]
  sink = fxn(*[UOp.placeholder(tuple(t.shape), t.dtype, i) for i, t in enumerate(args)])
  if not isinstance(sink, UOp) or sink.op is not Ops.SINK:
    raise TypeError(f"custom_kernel: fxn must return the kernel's SINK (stores.sink(arg=KernelInfo(...))), not {type(sink).__name__}")
  run_custom_kernel(sink, bufs)  # type: ignore[arg-type]  # (realized: Buffers)
  # each output is its buffer with a history that reads the arguments (never computed: AFTER(view, history)), which
  # says what it was computed from (the function decorator's implicit inputs) and carries grad_fxn as its gradient
  if grad_fxn is not None: _grad_fxns.setdefault(id(grad_fxn), grad_fxn)
  written_only = tuple((i, tuple(args[i].shape), args[i].dtype) for i in sorted(fresh))
  def history(t: Tensor, j: int) -> Tensor:
    h = anchor.reshape((1,) * t.ndim).expand(t.shape).cast(t.dtype)
    return h if grad_fxn is None else with_gradient(h, read, _grad_from_kernel, id(grad_fxn), sink, written_only, j)
  return [Tensor(UOp(Ops.AFTER, t.dtype, (buffer_uop(b, tuple(t.shape)), history(t, j).uop)), device=t.device)  # type: ignore[arg-type]
          for j, (b, t) in enumerate(zip(bufs, args))]


def _implicit_buffers(ret: list[UOp], inputs: list[UOp]) -> list[UOp]:
  """The buffers holding state that ret reads and its inputs do not (tinygrad's implicit inputs). What tinygrad still
  has to compute is not state: a pending assign or contiguous that does not depend on an input, and a tensor made
  from host data (Tensor([1, 2])), which tinygrad holds as a copy to run."""
  explicit: set[UOp] = set()
  for u in inputs: explicit.update(u.toposort())
  # which nodes read an input: one pass, sources first, instead of a walk under every pending assign
  reads_input: dict[UOp, bool] = {}
  for u in UOp.sink(*ret).toposort(): reads_input[u] = u in explicit or any(reads_input[s] for s in u.src)
  found: list[UOp] = []
  seen: set[UOp] = set()
  stack = list(ret)
  while stack:
    u = stack.pop()
    if u in seen or u in explicit: continue
    seen.add(u)
    if u.op is Ops.BUFFER:
      if not getattr(u.arg, "from_host", False): found.append(u)
    elif u.op in (Ops.AFTER, Ops.STORE, Ops.CONTIGUOUS) and not reads_input[u]: continue
    elif u.op is Ops.AFTER: stack.extend(u.src[1:])  # a view computed from the inputs (its history reads them) is not state
    else: stack.extend(u.src)
  return found


R = TypeVar("R")


class _function(Generic[R]):
  """A Python function over tensors, called as tinygrad's `function` calls one (see `function`)."""
  depth = 0  # how deep calls of functions are nested now

  def __init__(self, fxn: Callable[..., R], *, precompile: bool, precompile_backward: bool, allow_implicit: bool,
               grad_fxn: Callable | None):
    self.fxn, self.precompile, self.precompile_backward = fxn, precompile, precompile_backward
    self.allow_implicit, self.grad_fxn = allow_implicit, grad_fxn
    functools.update_wrapper(self, fxn)  # type: ignore[arg-type]  # a callable instance has no __name__ to take

  def __get__(self, obj: Any, objtype: Any = None) -> Any: return functools.partial(self.__call__, obj) if obj is not None else self

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    start = time.perf_counter()
    inputs = [t for t in get_state_dict((args, kwargs), tensor_type=(Tensor, UOp)).values() if isinstance(t, Tensor)]  # type: ignore[arg-type]
    _function.depth += 1
    try: ret = self.fxn(*args, **kwargs)
    finally: _function.depth -= 1
    outs = [ret] if isinstance(ret, Tensor) else list(ret) if isinstance(ret, tuple) and all(isinstance(x, Tensor) for x in ret) else None
    if outs is None: raise RuntimeError(f"function return type {type(ret)} not supported")
    name = getattr(self.fxn, "__qualname__", None) or type(self.fxn).__qualname__
    if not self.allow_implicit and (implicit := _implicit_buffers([t.uop for t in outs], [t.uop for t in inputs])):
      listed = "\n  ".join(f"{i}: dtype={b.dtype}, size={b.arg.size}, device={b.arg.device}" for i, b in enumerate(implicit))
      raise RuntimeError(f"function {name} has {len(implicit)} implicit buffer(s), but allow_implicit=False\n  {listed}")
    if self.grad_fxn is not None and isinstance(ret, Tensor):
      _grad_fxns.setdefault(id(self.grad_fxn), self.grad_fxn)
      ret = cast(R, with_gradient(ret, tuple(inputs), _grad_from_fxn, id(self.grad_fxn), ret.uop))
    if DEBUG >= 2: print("  " * _function.depth + f"function in {(time.perf_counter() - start) * 1000:8.2f} ms: {name}")
    return ret


@overload
def function(fxn: Callable[..., R], *, precompile: bool = False, precompile_backward: bool = False, allow_implicit: bool = False,
             grad_fxn: Callable | None = None) -> _function[R]: ...
@overload
def function(fxn: None = None, *, precompile: bool = False, precompile_backward: bool = False, allow_implicit: bool = False,
             grad_fxn: Callable | None = None) -> Callable[[Callable[..., R]], _function[R]]: ...
def function(fxn: Callable[..., R] | None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable | None = None) -> Any:
  """Decorates a Python function over tensors (`@function` or `@function(allow_implicit=True)`), as tinygrad's.

  Its arguments are every tensor reachable from the call's arguments (through lists, dicts and attributes, so a method
  reads its object's weights). Reading any other tensor that has memory is a RuntimeError naming it, unless
  allow_implicit=True. It returns a tensor or a tuple of tensors. grad_fxn(grad, call) gives the gradient of each
  argument (call.src[1:]) from the output's gradient, in place of the chain rule through the body (for a function
  with one output). precompile and precompile_backward are accepted: a call is compiled once per shape either way."""
  def make(f: Callable[..., R]) -> _function[R]:
    return _function(f, precompile=precompile, precompile_backward=precompile_backward, allow_implicit=allow_implicit, grad_fxn=grad_fxn)
  return make if fxn is None else make(fxn)
