"""The UOp IR: the Ops enum, op groups, and the UOp class (a C++ node with Python methods on top)."""
from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, cast

from tinyhybrid import _core


class _NativeEnum(IntEnum):
  """An IntEnum whose members print as `Ops.ADD`, whose values are the C++ enum's."""
  def __str__(self) -> str: return f"{type(self).__name__}.{self.name}"
  def __repr__(self) -> str: return str(self)


def _native_enum(name: str, kind: int) -> type[_NativeEnum]:
  # the functional API, on a subclass: typeshed reads _NativeEnum(...) as a member lookup
  cls = cast("type[_NativeEnum]", _NativeEnum(name, [(n, i) for i, n in enumerate(_core.enum_names(kind))]))  # type: ignore[call-arg, arg-type]
  cls.__module__ = __name__
  _core.register_enum(kind, cls)
  return cls


if TYPE_CHECKING:
  # the members as type checkers see them: the classes are made from the C++ enums at import, so a checker could not
  # know Ops.ADD. tests/test_lint.py checks these names and values against _core.enum_names.
  class Ops(_NativeEnum):
    SPECIAL = 0; BUFFER = 1; DEFINE_VAR = 2; UNIQUE = 3; DEVICE = 4; NOOP = 5; REWRITE_ERROR = 6; PARAM = 7
    FUNCTION = 8; CALL = 9; BIND = 10; PROGRAM = 11; LINEAR = 12; SOURCE = 13; BINARY = 14; SINK = 15; AFTER = 16
    GROUP = 17; STACK = 18; VECTORIZE = 19; GEP = 20; TUPLE = 21; GETTUPLE = 22; GETADDR = 23; INDEX = 24
    SHRINK = 25; LOAD = 26; STORE = 27; WMMA = 28; CAST = 29; BITCAST = 30; EXP2 = 31; LOG2 = 32; SIN = 33
    SQRT = 34; RECIPROCAL = 35; NEG = 36; TRUNC = 37; ADD = 38; MUL = 39; SHL = 40; SHR = 41; CDIV = 42; MAX = 43
    CMOD = 44; CMPLT = 45; CMPNE = 46; CMPEQ = 47; XOR = 48; OR = 49; AND = 50; THREEFRY = 51; SUB = 52; FDIV = 53
    POW = 54; FLOORDIV = 55; FLOORMOD = 56; WHERE = 57; MULACC = 58; BYTEDOT = 59; BARRIER = 60; RANGE = 61; IF = 62; END = 63
    ENDIF = 64; CONST = 65; CUSTOM = 66; CUSTOMI = 67; INS = 68; CONTIGUOUS = 69; CONTIGUOUS_BACKWARD = 70
    DETACH = 71; STAGE = 72; COPY = 73; MSELECT = 74; MSTACK = 75; CUSTOM_FUNCTION = 76; RESHAPE = 77; PERMUTE = 78
    EXPAND = 79; PAD = 80; FLIP = 81; UNSHARD = 82; REDUCE = 83; ALLREDUCE = 84; IOTA = 85; PYLITERAL = 86
  class AxisType(_NativeEnum):
    DEVICE = 0; GLOBAL = 1; WARP = 2; LOCAL = 3; WEAK = 4; GROUP_REDUCE = 5; REDUCE = 6; UPCAST = 7; UNROLL = 8
    THREAD = 9; PLACEHOLDER = 10; LOOP = 11
  class AddrSpace(_NativeEnum):
    GLOBAL = 0; LOCAL = 1; REG = 2; ALU = 3
else:
  Ops = _native_enum("Ops", 0)
  AxisType = _native_enum("AxisType", 1)
  AddrSpace = _native_enum("AddrSpace", 2)


class GroupOp:
  """Sets of ops that passes dispatch on (defined once, in the C++ core)."""
  Unary: set[Ops]; Binary: set[Ops]; Ternary: set[Ops]; ALU: set[Ops]; Elementwise: set[Ops]  # noqa: E702
  # tinygrad's ALU and Elementwise with the ALU ops tinygrad's IR lacks (BYTEDOT): what passes dispatch on
  AnyALU: set[Ops]; AnyElementwise: set[Ops]  # noqa: E702
  Movement: set[Ops]; Commutative: set[Ops]; Associative: set[Ops]; Idempotent: set[Ops]  # noqa: E702
  Comparison: set[Ops]; Reduce: set[Ops]; Defines: set[Ops]; Irreducible: set[Ops]  # noqa: E702
  All: set[Ops] = set(Ops)


for _name, _members in _core.op_groups().items(): setattr(GroupOp, _name, {Ops(v) for v in _members})
