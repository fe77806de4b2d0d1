"""The UOp IR: the Ops enum, op groups, and the UOp class (a C++ node with Python methods on top)."""
from __future__ import annotations

from enum import IntEnum

from tinyhybrid import _core


class _NativeEnum(IntEnum):
  """An IntEnum whose members print as `Ops.ADD`, whose values are the C++ enum's."""
  def __str__(self) -> str: return f"{type(self).__name__}.{self.name}"
  def __repr__(self) -> str: return str(self)


def _native_enum(name: str, kind: int) -> type[_NativeEnum]:
  cls = _NativeEnum(name, [(n, i) for i, n in enumerate(_core.enum_names(kind))])  # type: ignore[call-overload]
  cls.__module__ = __name__
  _core.register_enum(kind, cls)
  return cls


Ops = _native_enum("Ops", 0)
AxisType = _native_enum("AxisType", 1)
AddrSpace = _native_enum("AddrSpace", 2)


class GroupOp:
  """Sets of ops that passes dispatch on (defined once, in the C++ core)."""
  Unary: set[Ops]; Binary: set[Ops]; Ternary: set[Ops]; ALU: set[Ops]; Elementwise: set[Ops]  # noqa: E702
  Movement: set[Ops]; Commutative: set[Ops]; Associative: set[Ops]; Idempotent: set[Ops]  # noqa: E702
  Comparison: set[Ops]; Reduce: set[Ops]; Defines: set[Ops]; Irreducible: set[Ops]  # noqa: E702
  All: set[Ops] = set(Ops)


for _name, _members in _core.op_groups().items(): setattr(GroupOp, _name, {Ops(v) for v in _members})
