"""Shapes of tensor-graph UOps. A node's shape follows from its sources' shapes and its own arg; it is computed
once per Python object and kept in the object's __dict__ (iteratively, so deep graphs do not recurse). A dimension
is an int or, for a shape built from bound Variables, a simplified sint expression of their BINDs (interned: the same
expression is the same object; one built in another order, i+j and j+i, is told equal by uop.ops.shape_eq)."""
from __future__ import annotations

from tinyhybrid.helpers import prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, shape_eq, sint, ssimplify

_SAME_AS_SRC = GroupOp.AnyElementwise | {Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY, Ops.AFTER, Ops.DEVICE}
_VARIABLE = (Ops.BIND, Ops.DEFINE_VAR)


def _canon(shape: tuple) -> tuple:
  """A shape with its sints simplified (a shape of ints sums to an int)."""
  return shape if type(sum(shape)) is int else tuple(d if type(d) is int else d.ssimplify() for d in shape)


def _own_shape(u: UOp, src_shapes: list[tuple[int, ...] | None]) -> tuple[int, ...] | None:
  op = u.op
  if op is Ops.BUFFER: return (u.arg.size,)
  if op is Ops.CONST: return ()
  if op is Ops.IOTA: return (u.arg,)
  if op is Ops.PARAM: return None if type(u.arg) is int else u.arg.shape  # a function body's argument; a kernel's pointer has none
  if op in (Ops.RESHAPE, Ops.EXPAND): return u.arg
  if op in _VARIABLE: return ()  # a variable used as a value is a scalar
  s = src_shapes[0] if src_shapes else None
  if s is None: return None
  if op is Ops.PERMUTE: return tuple(s[i] for i in u.arg)
  if op is Ops.PAD: return _canon(tuple(d + b + a for d, (b, a) in zip(s, u.arg)))
  if op is Ops.SHRINK: return _canon(tuple(e - b for b, e in u.arg))
  if op is Ops.FLIP: return s
  if op is Ops.STORE or op is Ops.ALLREDUCE: return s
  if op is Ops.REDUCE: return tuple(1 if i in u.arg[1] else d for i, d in enumerate(s))
  if op is Ops.UNSHARD: return (u.arg[1],)  # flat pieces put together on one device (arg: device, items)
  if op is Ops.MSELECT:  # one device's shard of a sharded value (arg: devices, index, axis)
    axis = u.arg[2]
    return s if axis is None else s[:axis] + (s[axis] // len(u.arg[0]),) + s[axis + 1:]
  if op is Ops.MSTACK:  # one shard per device (arg: devices, axis): the whole tensor's shape
    axis = u.arg[1]
    return s if axis is None else s[:axis] + (s[axis] * len(u.src),) + s[axis + 1:]
  if op in _SAME_AS_SRC:
    if op in GroupOp.AnyALU:
      # a 0-d source broadcasts to the others' shape, as in tinygrad (a Python number in UOp arithmetic, `t.uop + 1`,
      # or a 0-d tensor's node given to .alu): codegen reads it at no index, its gradient is summed to 0-d. The Tensor
      # API broadcasts with EXPANDs itself
      shapes = [x for x in src_shapes if x is not None and x != ()] or [()]
      if any(x != shapes[0] for x in shapes) and not all(shape_eq(x, shapes[0]) for x in shapes): raise ValueError(f"{op.name}: sources have different shapes {shapes}")
      return shapes[0]
    return s
  return None


def shape_of(u: UOp) -> tuple[int, ...] | None:
  """The shape of a tensor-graph node (None for nodes without one)."""
  d = u.__dict__
  try: return d["_shape"]
  except KeyError: pass
  srcs = u.src
  try: shapes = [x.__dict__["_shape"] for x in srcs]
  except KeyError: pass
  else:  # every source's shape known: the common case, a node a tensor op just made
    d["_shape"], d["_srcs"] = ret = _own_shape(u, shapes), srcs
    return ret[0]
  # the list keeps every wrapper it holds (and so its cached shape) alive while the sources' shapes are read
  nodes = list(u.toposort(gate=lambda n: "_shape" not in n.__dict__))
  for n in nodes:
    srcs = n.src
    # the node's wrapper keeps its sources' wrappers, and so their cached shapes, alive as long as it lives: a later
    # shape_of on a new node built on this graph stops here instead of walking the whole graph below it again
    n.__dict__["_shape"], n.__dict__["_srcs"] = _own_shape(n, [_cached(x) for x in srcs]), srcs
  return u.__dict__["_shape"]


def _cached(x: UOp) -> tuple[int, ...] | None:
  # a source the walk skipped had its shape cached, but its wrapper (and the cache with it) may have been collected
  # since; then it is worked out again
  try: return x.__dict__["_shape"]
  except KeyError: return shape_of(x)


def numel(u: UOp) -> sint: return ssimplify(prod(shape_of(u) or ()))


def max_shape(shape: tuple) -> tuple[int, ...]:
  """The largest value of each dimension: a symbolic shape's buffer is laid out in it (as in tinygrad), so its data
  stays where it is whatever value its variables take."""
  return shape if type(sum(shape)) is int else tuple(d if type(d) is int else d.vmax for d in shape)
