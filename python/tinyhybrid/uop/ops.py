"""The Python UOp class: the C++ node type, plus tinygrad's Python-side conveniences."""
from __future__ import annotations

import operator
from typing import Any, Callable

from tinyhybrid import _core
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop import GroupOp, Ops


class UOp(_core.UOp):
  """A node of the UOp graph: UOp(op, dtype=None, src=(), arg=None, tag=None).

  Nodes are interned: building the same (op, dtype, src, arg, tag) twice gives the same object."""
  __slots__ = ()

  def f(self, op: Ops, **kwargs: Any) -> UOp:
    return UOp(op, kwargs.pop("dtype", self.dtype), (self,), **kwargs)

  def bind(self, val: int) -> UOp:
    """This variable bound to a value: BIND(DEFINE_VAR, CONST). It stands for the value wherever it is used, and the
    kernels it reaches are compiled for the variable, so other values reuse them."""
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"bind: only a Variable (DEFINE_VAR) can be bound, not {self.op}")
    try: val = operator.index(val)
    except TypeError: raise TypeError(f"bind: Variable {self.arg[0]!r} takes an int, got {type(val).__name__}") from None
    name, lo, hi = self.arg
    if not lo <= val <= hi: raise ValueError(f"bind: {val} is outside the range [{lo}, {hi}] of Variable {name!r}")
    return UOp(Ops.BIND, self.dtype, (self, UOp.const(self.dtype, val)))

  def unbind(self) -> tuple[UOp, int]:
    """A BIND as (its variable, its value)."""
    if self.op is not Ops.BIND: raise TypeError(f"unbind: only a bound Variable (BIND) can be unbound, not {self.op}")
    return self.src[0], self.src[1].arg


_core.register_uop_class(UOp)
sint = int | UOp


def Variable(name: str, min_val: int, max_val: int, dtype: DType = dtypes.weakint) -> UOp:  # noqa: N802 (tinygrad's name)
  """A named int in [min_val, max_val]. `.bind(v)` it to use it in shapes (`a[:, :vi]`, `a.reshape(3, vi)`) or as a
  value (`t + vi`, `Tensor(vi)`). Its dtype is weak by default, so in math it takes the other operand's type, as a
  Python int does."""
  if not isinstance(name, str) or not name: raise TypeError(f"Variable: the name must be a non-empty str, got {name!r}")
  if not all(isinstance(x, int) and not isinstance(x, bool) for x in (min_val, max_val)):
    raise TypeError(f"Variable {name!r}: min and max must be ints, got {min_val!r} and {max_val!r}")
  if not dtype._is_int: raise TypeError(f"Variable {name!r}: needs an int dtype, got {dtype}")
  return UOp.variable(name, min_val, max_val, dtype)


def ssimplify(x: sint) -> sint:
  """x simplified, as a Python int when it is constant (ints pass through)."""
  return x.ssimplify() if isinstance(x, UOp) else x


def sym_infer(x: sint, var_vals: dict) -> int:
  """The value of x with its variables set (ints pass through)."""
  return _core.sym_infer(x, var_vals) if isinstance(x, UOp) else x


# ** bound variables in tensor graphs **
# A movement node's arg may hold sint expressions of BINDs; the BINDs it uses are also its extra sources, so a walk
# over a graph's nodes (schedule normalize) sees them without reading every arg.

def bound_value(x: sint) -> int:
  """The value of x with every variable at its bound value; an unbound variable is an error."""
  if not isinstance(x, UOp): return x
  try: return _core.sym_infer(x, {})
  except ValueError as e: raise ValueError(f"{x.render()} has no value: every Variable in it must be bound ({e})") from None


def sint_eq(a: sint, b: sint) -> bool:
  """Whether two sizes are the same for every value of their variables (as far as simplification shows: i+j and j+i
  are, though they are different nodes)."""
  if type(a) is int and type(b) is int: return a == b
  return a is b or ssimplify(a - b) == 0  # type: ignore[operator]


def shape_eq(a: tuple, b: tuple) -> bool: return a == b or (len(a) == len(b) and all(sint_eq(x, y) for x, y in zip(a, b)))


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
      raise ValueError(f"{op.name}: {v.render()} has an unbound Variable; bind it to a value first (var.bind(n))")
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
