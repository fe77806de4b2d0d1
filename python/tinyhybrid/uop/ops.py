"""The Python UOp class: the C++ node type, plus tinygrad's Python-side conveniences."""
from __future__ import annotations

import dataclasses
import functools
import operator
import types
from typing import Any, Callable

from tinyhybrid import _core
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import AddrSpace, AxisType, GroupOp, Ops  # noqa: F401 (AxisType: tinygrad's import path)
from tinyhybrid.uop.factors import FactorMixin
from tinyhybrid.uop.kernel_dsl import KernelDSL
from tinyhybrid.digest import sha256


class NotANumber(ValueError, TypeError):
  """int() or float() of a symbolic expression whose value depends on its variables: a ValueError as in tinygrad, and a
  TypeError as for any other non-number, so `try: int(x) except TypeError:` still tells sints from ints."""


# Misused Variables: tinygrad asserts, so these are AssertionErrors as well as the types the message calls for.
def identity_element(op: Ops, dtype: DType) -> Any:
  """What a reduce of op over nothing leaves, the value op leaves its other operand by: 0, 1, or the dtype's least
  value for max (tinygrad's identity_element)."""
  return {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(dtype)}[op]


class VariableTypeError(TypeError, AssertionError): pass
class VariableRangeError(ValueError, AssertionError): pass


class UOp(KernelDSL, FactorMixin, _core.UOp):  # type: ignore[misc]  # (sink: a method and a static builder at once, as tinygrad's)
  """A node of the UOp graph: UOp(op, dtype=None, src=(), arg=None, tag=None).

  Nodes are interned: building the same (op, dtype, src, arg, tag) twice gives the same object."""
  __slots__ = ()

  def f(self, op: Ops, **kwargs: Any) -> UOp:
    return UOp(op, kwargs.pop("dtype", self.dtype), (self,), **kwargs)

  @staticmethod
  def param(slot: int, dtype: DType, shape: tuple[sint, ...] | None = None, device: str | tuple[str, ...] | None = None,
            name: str | None = None, axis: int | None = None) -> UOp:
    """The slot-th argument of a function body (Tensor.call, function): a placeholder of this dtype, shape and
    device that a call replaces by its argument. A device tuple is a sharded argument (split on axis, or replicated
    with axis None): one placeholder per device, stacked as a sharded value is."""
    if dtype in dtypes.weaks: raise RuntimeError(f"cannot create param for weak dtype {dtype}")
    if slot < 0: raise ValueError(f"param: slot must be >= 0, got {slot}")
    from tinyhybrid.device import Device
    shape = tuple(shape) if shape is not None else ()
    if not isinstance(device, tuple): return UOp(Ops.PARAM, dtype, (), ParamArg(slot, shape, Device.canonicalize(device), name))
    from tinyhybrid.uop.sharding import shard_bounds
    devices = tuple(Device.canonicalize(d) for d in device)
    def shard_shape(b: tuple[int, int]) -> tuple[sint, ...]:
      assert axis is not None
      return shape[:axis] + (b[1] - b[0],) + shape[axis + 1:]
    shapes = [shape] * len(devices) if axis is None else [shard_shape(b) for b in shard_bounds(int(shape[axis]), len(devices))]
    shards = tuple(UOp(Ops.PARAM, dtype, (), ParamArg(slot, s, d, name, i)) for i, (d, s) in enumerate(zip(devices, shapes)))
    return UOp(Ops.MSTACK, dtype, shards, (devices, axis))

  def bind(self, val: int) -> UOp:
    """This variable bound to a value: BIND(DEFINE_VAR, CONST). It stands for the value wherever it is used, and the
    kernels it reaches are compiled for the variable, so other values reuse them."""
    if self.op is not Ops.DEFINE_VAR: raise VariableTypeError(f"bind: only a Variable (DEFINE_VAR) can be bound, not {self.op}")
    try: val = operator.index(val)
    except TypeError: raise VariableTypeError(f"bind: Variable {self.arg[0]!r} takes an int, got {type(val).__name__}") from None
    name, lo, hi = self.arg
    if not lo <= val <= hi: raise VariableRangeError(f"bind: {val} is outside the range [{lo}, {hi}] of Variable {name!r}")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, val)))

  def unbind(self) -> tuple[UOp, int]:
    """A BIND as (its variable, its value)."""
    if self.op is not Ops.BIND: raise VariableTypeError(f"unbind: only a bound Variable (BIND) can be unbound, not {self.op}")
    return self.src[0], self.src[1].arg

  # ** tinygrad's Python face: what programs and tests read off a Variable or off Tensor.uop **
  @property
  def key(self) -> bytes:
    """A digest of the graph (each node's op, dtype, arg and its sources' digests): equal graphs, in this process or
    in one that unpickled them, have equal keys (tinygrad's)."""
    digest: dict[UOp, bytes] = {}
    for u in self.toposort():
      digest[u] = sha256(f"{u.op}|{u.dtype}|{u.arg!r}|{u.tag!r}".encode() + b"".join(digest[s] for s in u.src)).digest()
    return digest[self]

  @property
  def val(self) -> Any:
    """A CONST's value, or a bound Variable's (BIND) value."""
    if self.op is Ops.CONST: return self.arg
    if self.op is Ops.BIND: return self.src[1].arg
    raise VariableTypeError(f"val: only a CONST or a bound Variable (BIND) has a value, not {self.op}")

  def rtag(self, tag: Any = True) -> UOp:
    """This node with its tag set (a rule marks what it rewrote, so that it does not match it again)."""
    return self.replace(tag=tag)

  @property
  def tagstr(self) -> str: return f", tag={self.tag}" if self.tag is not None else ""

  @property
  def expr(self) -> str:
    """A Variable's name (of a bound one too)."""
    if self.op is Ops.DEFINE_VAR: return self.arg[0]
    if self.op is Ops.BIND: return self.src[0].arg[0]
    raise VariableTypeError(f"expr: only a Variable (DEFINE_VAR or BIND) has a name, not {self.op}")

  def variables(self) -> list[UOp]:
    """The Variables this expression uses (bound ones as their variable), ordered by (name, min, max)."""
    found = {u.src[0] if u.op is Ops.BIND else u for u in self.toposort() if u.op is Ops.DEFINE_VAR or u.op is Ops.BIND}
    return sorted(found, key=lambda v: v.arg)

  def unbind_all(self) -> tuple[UOp, dict[UOp, int]]:
    """This expression with its BINDs replaced by their variables, and {variable: value}."""
    vals: dict[UOp, int] = {}
    for b in binds_of(self):
      var, v = b.unbind()
      if vals.setdefault(var, v) != v: raise ValueError(f"unbind_all: Variable {var.arg[0]!r} is bound to both {vals[var]} and {v}")
    return unbind_all(self), vals  # type: ignore[return-value]  # a UOp's is a UOp

  def render(self, simplify: bool = True, pm: Any = None) -> str:  # type: ignore[override]
    """The expression as a string, simplified first (tinygrad's default); simplify=False prints the graph as built, as
    the errors here do, so that a message shows the expression the user wrote."""
    return super(UOp, self.simplify() if simplify and self.dtype is not dtypes.void else self).render()

  def _eval(self, kind: type) -> Any:
    # a value the expression takes for every value of its variables; a bound variable still ranges over [min, max]
    s = self.simplify()
    lo, hi = s.vmin, s.vmax
    if lo != hi: raise NotANumber(f"{kind.__name__}(): {s.render(simplify=False)} is not a single number, it ranges over [{lo}, {hi}]")
    return kind(lo)

  def __bool__(self) -> bool:
    # a comparison decided for every value of its variables gives that answer (`if start_pos > 0:` with a Variable whose
    # min is 1). tinygrad raises ValueError on an undecided one; here it stays true, as any object is: the shape code
    # (broadcast, expand, lowering) reads `d != 1` on a sint as "may differ" and must not raise
    s = self.simplify()
    lo, hi = s.vmin, s.vmax
    if lo != hi: raise ValueError(f"bool() of a UOp that is not one value: it ranges {lo} to {hi} in {s.render()}")
    return bool(lo)
  def __int__(self) -> int:
    if not (self.dtype._is_int or self.dtype is dtypes.bool): raise TypeError(f"int(): {self.dtype} UOp is not an int")
    return self._eval(int)
  def __float__(self) -> float: return self._eval(float)

  @property
  def shape(self) -> tuple[sint, ...] | None:
    """The shape of a tensor-graph node (None for nodes without one)."""
    from tinyhybrid.uop.shape import shape_of
    return shape_of(self)

  @property
  def size(self) -> sint: return ssimplify(prod(self.shape or ()))
  @property
  def ndim(self) -> int: return len(self.shape or ())

  @property
  def base(self) -> UOp:
    """The node under this one's movement (and DETACH) ops: what holds or computes the data."""
    u = self
    while u.op in GroupOp.Movement or u.op is Ops.DETACH: u = u.src[0]
    return u

  @property
  def buf_uop(self) -> UOp:
    """The memory under this node (tinygrad's buf_uop): the BUFFER or PARAM under its views and realized AFTERs (for
    a value still to be computed, the first node down its first sources that is one), an MSTACK's shards' memory."""
    if self.op is Ops.MSTACK: return UOp(Ops.MSTACK, self.dtype, tuple(x.buf_uop for x in self.src), self.arg)
    u = self
    while u.src and u.op not in (Ops.BUFFER, Ops.PARAM, Ops.MSTACK): u = u.src[0]
    return u

  @property
  def device(self) -> str | tuple[str, ...] | None:
    """The device of the memory this graph reads (None for a graph of constants only, which has no device); a tuple
    for a graph of a tensor sharded across devices (an MSTACK's)."""
    from tinyhybrid.device import Buffer
    if "_device" in (own := self.__dict__): return own["_device"]
    # kept on each node's wrapper (a node never changes), so asking again, or of a graph that grows this one, walks
    # only new nodes; a source whose wrapper was collected since (and its answer with it) is asked again
    nodes = list(self.toposort(gate=lambda n: "_device" not in n.__dict__))
    for u in nodes:
      if "_device" in (known := u.__dict__): continue
      if u.op is Ops.MSTACK: dev = u.arg[0]
      elif u.op is Ops.BUFFER: dev = u.arg.device if isinstance(u.arg, Buffer) else None
      elif (u.op is Ops.COPY or u.op is Ops.DEVICE) and isinstance(u.arg, (str, tuple)): dev = u.arg
      elif u.op is Ops.PARAM and isinstance(u.arg, ParamArg): dev = u.arg.device
      elif u.op is Ops.UNSHARD: dev = u.arg[0]  # pieces from any device, put together on arg[0]
      elif u.op is Ops.MSELECT: dev = u.arg[0][u.arg[1]]  # one shard of a sharded value, on its device
      else: dev = next((sd for s in u.src if (sd := s.device) is not None), None)
      known["_device"] = dev
    return own["_device"]

  @property
  def axis(self) -> int | None:
    """The sharded axis of a sharded tensor's graph: None for a replica on every device, and for a graph on one
    device (tinygrad's UOp.axis). An operation's axis follows its sources' (a movement moves it; a reduce over it,
    an allreduce, ends it)."""
    if self.op is Ops.MSTACK: return self.arg[1]
    if "_axis" in (own := self.__dict__): return own["_axis"]
    if type(devices := self.device) is not tuple: return None
    from tinyhybrid.uop.sharding import sharded_axes
    # kept on every node of the graph (a node never changes): an optimizer's assigns ask of graphs that share most nodes
    for u, axis in sharded_axes(self, len(devices)).items(): u.__dict__["_axis"] = axis
    return own["_axis"]

  @property
  def bounds(self) -> tuple[tuple[int, int], ...]:
    """Each device's [start, end) along the sharded axis of a sharded tensor's graph (tinygrad's UOp.bounds)."""
    if (axis := self.axis) is None: raise RuntimeError("bounds is not defined when axis is None")
    from tinyhybrid.uop.sharding import shard_bounds
    return tuple(shard_bounds(self.shape[axis], len(self.device)))  # type: ignore[index, arg-type]

  @property
  def shard_shape(self) -> tuple[sint, ...]:
    """The shape of one device's shard of a sharded tensor's graph, its whole shape when it is not split (tinygrad's
    UOp.shard_shape)."""
    if (axis := self.axis) is None: return self.shape  # type: ignore[return-value]
    lo, hi = self.bounds[0]
    return (*self.shape[:axis], hi - lo, *self.shape[axis + 1:])  # type: ignore[index, misc]

  def allreduce(self, op: Ops, device: tuple[str, ...]) -> UOp:
    """A graph sharded as this sharded one is, each device's shard `op` (ADD, MUL, MAX, ...) of all the shards: the
    allreduce that a reduce over the sharded axis is made of (tinygrad's UOp.allreduce)."""
    if type(self.device) is not tuple: raise RuntimeError(f"allreduce of a graph on one device ({self.device})")
    if tuple(device) != self.device: raise RuntimeError(f"allreduce across {tuple(device)} of a graph sharded across {self.device}")
    return UOp(Ops.ALLREDUCE, self.dtype, (self,), op)  # lowered by the scheduler (schedule/multi.py)

  def has_buffer_identity(self, after_ok: bool = False) -> bool:
    """Whether this node is a buffer's memory as a whole (a BUFFER, or a reshape of one)."""
    u = self
    while u.op is Ops.RESHAPE or (after_ok and u.op is Ops.AFTER): u = u.src[0]
    return u.op is Ops.BUFFER

  @property
  def buffer(self) -> Any:
    """The Buffer this node is (a BUFFER, or a reshape, contiguous, detach, pending assign or realized AFTER of one)."""
    from tinyhybrid.device import Buffer
    u = self
    while u.op in (Ops.RESHAPE, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.AFTER, Ops.STORE): u = u.src[0]
    if u.op is Ops.BUFFER and isinstance(u.arg, Buffer): return u.arg
    if u.op in GroupOp.Movement: raise RuntimeError(f"buffer: a {u.op.name} view is not a whole buffer (use a contiguous() copy)")
    raise RuntimeError(f"buffer: {u.op} is not a buffer (realize the tensor first)")

  @property
  def realized(self) -> Any:
    """The Buffer under this node's movement ops when it is allocated, else None."""
    from tinyhybrid.device import Buffer
    u = self
    while u.op in GroupOp.Movement or u.op is Ops.DETACH or u.op is Ops.AFTER: u = u.src[0]
    return u.arg if u.op is Ops.BUFFER and isinstance(u.arg, Buffer) and u.arg.is_allocated() else None

  @property
  def is_realized(self) -> bool: return self.realized is not None


_core.register_uop_class(UOp)
sint = int | UOp


@dataclasses.dataclass(frozen=True)
class KernelInfo:
  """What a kernel's SINK says of it (tinygrad's): its name, the kinds of its axes, whether it may use local memory,
  the optimizations applied to it and those still to apply (None: the heuristics choose)."""
  name: str = "test"
  axis_types: tuple = ()
  dont_use_locals: bool = False
  applied_opts: tuple = ()
  opts_to_apply: tuple | None = None
  estimates: Any = None
  beam: int = 0  # a beam search of this width chooses its optimizations (engine.realize.pm_beam sets it); 0: BEAM's
  @property
  def function_name(self) -> str: return self.name


@dataclasses.dataclass(frozen=True)
class ProgramInfo:
  """What tinygrad's PROGRAM node says of a compiled kernel: its name, its grid (global and local sizes), its
  variables and which arguments are buffers (globals), written (outs) and read (ins). Here a compiled kernel is a
  CompiledProgram (device.py), which carries the same facts; this is the record tinygrad's scripts build."""
  name: str = "test"
  global_size: tuple = (1, 1, 1)
  local_size: tuple | None = None
  vars: tuple = ()
  globals: tuple[int, ...] = ()
  outs: tuple[int, ...] = ()
  ins: tuple[int, ...] = ()
  @property
  def function_name(self) -> str: return self.name


@dataclasses.dataclass(frozen=True)
class ParamArg:
  """A function body's placeholder (UOp.param): which argument it stands for, and what that argument must be. shard is
  the device's index among a sharded argument's devices (None for one on a single device)."""
  slot: int
  shape: tuple[sint, ...]
  device: str
  name: str | None = None
  shard: int | None = None
  addrspace: AddrSpace = AddrSpace.GLOBAL  # REG: a custom kernel's register array (uop/kernel_dsl.py)


class _VariableType(type):
  # tinygrad programs both call Variable and use it as a type (`isinstance(tokens, Variable)`, `start_pos: Variable|int`;
  # tinygrad.uop.ops.Variable is UOp): every UOp is an instance, as there
  def __instancecheck__(cls, x: Any) -> bool: return isinstance(x, UOp)
  def __subclasscheck__(cls, c: type) -> bool: return issubclass(c, UOp)


class Variable(metaclass=_VariableType):
  """Variable(name, min_val, max_val): a named int in [min_val, max_val] (a DEFINE_VAR UOp). `.bind(v)` it to use it in
  shapes (`a[:, :vi]`, `a.reshape(3, vi)`) or as a value (`t + vi`, `Tensor(vi)`). Its dtype is weak by default, so in
  math it takes the other operand's type, as a Python int does."""
  def __new__(cls, name: str, min_val: int, max_val: int, dtype: DType = dtypes.weakint) -> UOp:  # type: ignore[misc]
    if not isinstance(name, str) or not name: raise TypeError(f"Variable: the name must be a non-empty str, got {name!r}")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (min_val, max_val)):
      raise TypeError(f"Variable {name!r}: min and max must be ints, got {min_val!r} and {max_val!r}")
    if not dtype._is_int: raise TypeError(f"Variable {name!r}: needs an int dtype, got {dtype}")
    if min_val > max_val: raise VariableRangeError(f"Variable {name!r}: min {min_val} exceeds max {max_val}")
    return UOp.variable(name, min_val, max_val, dtype)


def ssimplify(x: sint) -> sint:
  """x simplified, as a Python int when it is constant (ints pass through)."""
  return x.ssimplify() if isinstance(x, UOp) else x


def sym_infer(x: sint, var_vals: dict) -> int:
  """The value of x with its variables set (ints pass through)."""
  return _core.sym_infer(x, var_vals) if isinstance(x, UOp) else x


def resolve(x: UOp | bool, default: bool = True) -> bool:
  """A comparison's answer when it is the same for every value of its variables, else `default` (as in tinygrad)."""
  if not isinstance(x, UOp): return bool(x)
  if x.dtype is not dtypes.bool: raise TypeError(f"resolve: needs a bool UOp, got {x.dtype}")
  s = x.simplify()
  return bool(s.vmin) if s.vmin == s.vmax else default


def smax(*lst: Any) -> sint:
  """max that keeps sints symbolic (a MAX node) and gives ints for ints."""
  xs = tuple(lst[0]) if len(lst) == 1 and isinstance(lst[0], (tuple, list)) else lst
  if all(not isinstance(x, UOp) for x in xs): return max(xs)
  return ssimplify(functools.reduce(lambda a, b: (b if isinstance(b, UOp) else a).maximum(a if isinstance(b, UOp) else b), xs))


def smin(*lst: Any) -> sint:
  """min that keeps sints symbolic and gives ints for ints."""
  xs = tuple(lst[0]) if len(lst) == 1 and isinstance(lst[0], (tuple, list)) else lst
  if all(not isinstance(x, UOp) for x in xs): return min(xs)
  return ssimplify(functools.reduce(lambda a, b: (b if isinstance(b, UOp) else a).minimum(a if isinstance(b, UOp) else b), xs))


def srender(x: sint) -> str: return x.render(simplify=False) if isinstance(x, UOp) else str(x)


# ** bound variables in tensor graphs **
# A movement node's arg may hold sint expressions of BINDs; the BINDs it uses are also its extra sources, so a walk
# over a graph's nodes (schedule normalize) sees them without reading every arg.

def bound_value(x: sint) -> int:
  """The value of x with every variable at its bound value; an unbound variable is an error."""
  if not isinstance(x, UOp): return x
  try: return _core.sym_infer(x, {})
  except ValueError as e: raise ValueError(f"{x.render(simplify=False)} has no value: every Variable in it must be bound ({e})") from None


def sint_eq(a: sint, b: sint) -> bool:
  """Whether two sizes are the same for every value of their variables (as far as simplification shows: i+j and j+i
  are, though they are different nodes)."""
  if type(a) is int and type(b) is int: return a == b
  return a is b or ssimplify(a - b) == 0  # type: ignore[operator]


def shape_eq(a: tuple, b: tuple) -> bool: return a == b or (len(a) == len(b) and all(sint_eq(x, y) for x, y in zip(a, b)))


def check_shape(shape: tuple[Any, ...], what: str = "", unbound: bool = False) -> tuple[Any, ...]:
  """shape, if every dim is valid (valid_dim; with `unbound`, a Variable may be unbound yet, as a new tensor's may:
  it is bound before the tensor is realized). As in tinygrad, a float dim (2.0) is a RuntimeError; a negative one, or
  one that is no number (a nested tuple), is a ValueError."""
  for d in shape:
    if isinstance(d, float): raise RuntimeError(f"shape must be int, got {dtypes.from_py(d)} in {shape}")
    if not isinstance(d, (int, UOp)) or isinstance(d, bool): raise ValueError(f"{what}invalid shape {shape}")
    if not (valid_dim(d) if not unbound or not isinstance(d, UOp) else d.dtype._is_int and d.vmin >= 0): raise ValueError(f"{what}invalid shape {shape}")
  return shape


def valid_dim(d: Any) -> bool:
  """An int >= 0, or a sint of bound Variables that is never negative (an unbound variable is an error)."""
  if isinstance(d, UOp):
    bound_value(d)
    return d.dtype._is_int and d.vmin >= 0
  return isinstance(d, int) and d >= 0


def binds_of(x: UOp) -> list[UOp]:
  """The BINDs in an expression, ordered by variable name."""
  return sorted((u for u in x.toposort() if u.op is Ops.BIND), key=lambda b: b.src[0].arg)


def arg_binds(op: Ops, arg: Any, strict: bool = False) -> tuple[UOp, ...]:
  """The BINDs a movement arg uses (a reshape/expand shape, shrink/pad pairs), in a fixed order; () for plain ints.
  strict: an unbound variable is an error (a tensor's shape needs values; a kernel's graph has only variables)."""
  if op is Ops.PERMUTE or op is Ops.FLIP: return ()
  flat = arg if op is Ops.RESHAPE or op is Ops.EXPAND else [v for p in arg for v in p]
  if all(type(v) is int for v in flat): return ()
  found: dict[UOp, None] = {}
  for v in flat:
    if not isinstance(v, UOp): continue
    for b in binds_of(v): found[b] = None
    if strict and v.op is not Ops.BIND and any(u.op is Ops.DEFINE_VAR for u in v.toposort(gate=lambda n: n.op is not Ops.BIND)):
      raise ValueError(f"{op.name}: {v.render(simplify=False)} has an unbound Variable; bind it to a value first (var.bind(n))")
  return tuple(found)


def movement(op: Ops, x: UOp, arg: Any, strict: bool = False) -> UOp:
  """A movement node; the BINDs its arg uses become extra sources."""
  return UOp(op, x.dtype, (x, *arg_binds(op, arg, strict)), arg)


def _map_arg(arg: Any, m: Callable[[UOp], UOp]) -> Any:
  if isinstance(arg, UOp): return arg.substitute({b: m(b) for b in binds_of(arg)}) if arg.op is not Ops.BIND else m(arg)
  if isinstance(arg, tuple): return tuple(_map_arg(a, m) for a in arg)
  return arg


def map_binds(root: UOp, fn: Callable[[UOp], UOp], subs: dict[UOp, UOp] | None = None) -> UOp:
  """root with every BIND b replaced by fn(b), in sources and in movement args, and the nodes in `subs` replaced."""
  new = dict(subs) if subs else {}
  for u in root.toposort():
    if u in new: continue
    if u.op is Ops.BIND:
      new[u] = fn(u)
      continue
    src = tuple(new.get(s, s) for s in u.src)
    arg = _map_arg(u.arg, fn) if u.op in GroupOp.Movement and len(u.src) > 1 else u.arg
    if arg is not u.arg or any(a is not b for a, b in zip(src, u.src)): new[u] = u.replace(src=src, arg=arg)
  return new.get(root, root)


def unbind_arg(arg: Any) -> Any:
  """A movement arg with its BINDs replaced by their variables."""
  return _map_arg(arg, lambda b: b.src[0])


def unbind_all(x: sint) -> sint:
  """x with its BINDs replaced by their variables."""
  return map_binds(x, lambda b: b.src[0]) if isinstance(x, UOp) else x


def deconstruct_function(fn: Callable) -> tuple:
  """fn as the arguments of types.FunctionType that rebuild it: its code, the globals its code names (nested code,
  such as a comprehension's, included), its name and its defaults. What a PatternMatcher's lambdas pickle as; a
  closure has cells that do not travel, and is refused."""
  if fn.__closure__: raise ValueError(f"deconstruct_function: {fn.__qualname__} is a closure (it reads {fn.__code__.co_freevars})")
  def names(code: types.CodeType) -> set[str]:
    return set(code.co_names).union(*(names(c) for c in code.co_consts if isinstance(c, types.CodeType)))
  used = names(fn.__code__)
  return fn.__code__, {k: v for k, v in fn.__globals__.items() if k in used}, fn.__name__, fn.__defaults__


def __getattr__(name: str) -> Any:
  # tinygrad's scripts import the rewrite API from tinygrad.uop.ops; ours is defined in uop/upat.py, which builds on
  # this module, so it is looked up when first asked for
  if name in ("UPat", "PatternMatcher", "graph_rewrite"):
    from tinyhybrid.uop import upat
    return getattr(upat, name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
