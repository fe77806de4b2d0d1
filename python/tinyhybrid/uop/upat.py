"""UPat, PatternMatcher and graph_rewrite with tinygrad's vocabulary. A UPat is plain data here; it is compiled
once, when a PatternMatcher is built, into C++ matching programs. Matching and traversal run in C++; a Python
callback runs only after its pattern matched."""
from __future__ import annotations

import inspect
import pickle
import sys
import types
from typing import Any, Callable, Iterable, Mapping, Sequence

from tinyhybrid import _core
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, deconstruct_function

# how a UPat's src constrains the node's sources (values shared with the C++ Pattern::Src)
_SRC_ANY, _SRC_ORDERED, _SRC_PERMUTE, _SRC_REPEAT = 0, 1, 2, 3


class UPat:
  """A pattern over UOps: UPat(op, dtype, src, arg, name, allow_any_len).

  op and dtype may be one value or a set/tuple of them. src: a tuple matches the sources in order, a list
  matches any ordering of them, a single UPat matches every source, None ignores them. arg None matches any arg.
  name captures the node for the callback (a repeated name must be the same node)."""
  __slots__ = ("op", "match_dtype", "arg", "name", "src", "src_mode", "allow_any_len", "is_any", "location")
  src: tuple[UPat, ...]

  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, is_any: bool = False):
    if name == "ctx": raise ValueError("a UPat can't be named ctx: the name is reserved for the rewrite context")
    self.op: tuple[Ops, ...] | None = None if op is None else (op,) if isinstance(op, Ops) else tuple(op)
    self.match_dtype: tuple[DType, ...] | None = None if dtype is None else (dtype,) if isinstance(dtype, DType) else tuple(dtype)
    if self.match_dtype is not None and not all(isinstance(d, DType) for d in self.match_dtype):
      raise TypeError(f"UPat: dtype must be a DType or a collection of DTypes, got {dtype!r}")
    self.arg, self.name, self.allow_any_len, self.is_any = arg, name, allow_any_len, is_any
    if src is None: self.src_mode, self.src = _SRC_ANY, ()
    elif isinstance(src, UPat): self.src_mode, self.src = _SRC_REPEAT, (src,)
    elif isinstance(src, list): self.src_mode, self.src = _SRC_PERMUTE, tuple(src)
    elif isinstance(src, tuple): self.src_mode, self.src = _SRC_ORDERED, src
    else: raise TypeError(f"UPat: src must be a tuple, list, UPat or None, got {type(src).__name__}")
    if not all(isinstance(s, UPat) for s in self.src): raise TypeError("UPat: every src must be a UPat")
    self.location = _caller_location()

  @property
  def dtype(self) -> DType: return self.match_dtype[0] if self.match_dtype is not None else dtypes.void

  def compiled(self) -> tuple:
    """The nested-tuple form the C++ pattern compiler reads."""
    return (None if self.op is None else tuple(int(o) for o in self.op), self.match_dtype, self.arg is not None, self.arg,
            self.name, self.src_mode, tuple(s.compiled() for s in self.src), self.allow_any_len, self.is_any)

  def __repr__(self) -> str:
    if self.is_any: return f"UPat.any({', '.join(map(repr, self.src))})"
    parts = [repr(self.op[0]) if self.op and len(self.op) == 1 else repr(self.op)]
    if self.match_dtype is not None: parts.append(f"dtype={self.match_dtype[0] if len(self.match_dtype) == 1 else self.match_dtype}")
    if self.arg is not None: parts.append(f"arg={self.arg!r}")
    if self.name is not None: parts.append(f"name={self.name!r}")
    if self.src_mode == _SRC_ORDERED: parts.append(f"src={self.src!r}")
    elif self.src_mode == _SRC_PERMUTE: parts.append(f"src={list(self.src)!r}")
    elif self.src_mode == _SRC_REPEAT: parts.append(f"src={self.src[0]!r}")
    return f"UPat({', '.join(parts)})"

  def __reduce__(self):
    src = None if self.src_mode == _SRC_ANY else self.src[0] if self.src_mode == _SRC_REPEAT else \
      list(self.src) if self.src_mode == _SRC_PERMUTE else self.src
    return UPat, (self.op, self.match_dtype, src, self.arg, self.name, self.allow_any_len, self.is_any)

  # ** builders **
  def named(self, name: str) -> UPat:
    c = UPat.__new__(UPat)
    for k in UPat.__slots__: setattr(c, k, getattr(self, k))
    c.name = name
    return c

  @staticmethod
  def any(*src: UPat) -> UPat:
    """Matches when any of the patterns matches (tried in order)."""
    return UPat(src=src, is_any=True)
  @staticmethod
  def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None, arg: Any = None) -> UPat:
    return UPat(Ops.CONST, dtype, name=name, arg=arg)
  @staticmethod
  def const(dtype: DType | Iterable[DType] | None, b: Any) -> UPat:
    # tinygrad has both argument orders in its history; a DType names which is which
    if not isinstance(dtype, (DType, tuple, set, type(None))): dtype, b = b, dtype
    return UPat(Ops.CONST, dtype=dtype, arg=b)
  def or_casted(self, name: str | None = None) -> UPat:
    return UPat.any(self if name is None else self.named(name), UPat(Ops.CAST, name=name, src=(self,)))
  def f(self, op: Ops, **kwargs: Any) -> UPat: return UPat(op, src=(self,), **kwargs)
  def sink(*srcs: UPat | None, **kwargs: Any) -> UPat:  # noqa: N805 (usable as UPat.sink(a, b) and a.sink(b))
    return UPat(Ops.SINK, src=tuple(x for x in srcs if x is not None), **kwargs)
  def cast(self, dtype: DType | None = None, **kwargs: Any) -> UPat: return UPat(Ops.CAST, dtype, (self,), **kwargs)
  def bitcast(self, dtype: DType | None = None) -> UPat: return UPat(Ops.BITCAST, dtype, (self,))
  def load(self, *src: UPat, **kwargs: Any) -> UPat: return UPat(Ops.LOAD, src=(self,) + src, **kwargs)
  def store(self, *src: UPat, **kwargs: Any) -> UPat: return UPat(Ops.STORE, src=(self,) + src, **kwargs)
  def index(self, *src: UPat | None, **kwargs: Any) -> UPat:
    return UPat(Ops.INDEX, src=(self,) + tuple(x for x in src if x is not None), **kwargs)
  def where(self, a: UPat | Any, b: UPat | Any) -> UPat: return self.alu(Ops.WHERE, self._fix(a), self._fix(b))

  def alu(self, op: Ops, *src: UPat) -> UPat:
    asrc = (self,) + src
    dt = dtypes.bool if op in GroupOp.Comparison else asrc[-1].match_dtype
    return UPat(op, dt, list(asrc) if op in GroupOp.Commutative else asrc)

  @staticmethod
  def _fix(x: UPat | Any) -> UPat: return x if isinstance(x, UPat) else UPat.cvar(arg=x)
  def _bin(self, op: Ops, x: Any, reverse: bool = False) -> UPat:
    a, b = self, UPat._fix(x)
    return (b if reverse else a).alu(op, a if reverse else b)
  def __add__(self, x: Any) -> UPat: return self._bin(Ops.ADD, x)
  def __radd__(self, x: Any) -> UPat: return self._bin(Ops.ADD, x, True)
  def __mul__(self, x: Any) -> UPat: return self._bin(Ops.MUL, x)
  def __rmul__(self, x: Any) -> UPat: return self._bin(Ops.MUL, x, True)
  def __floordiv__(self, x: Any) -> UPat: return self._bin(Ops.FLOORDIV, x)
  def __mod__(self, x: Any) -> UPat: return self._bin(Ops.FLOORMOD, x)
  def __and__(self, x: Any) -> UPat: return self._bin(Ops.AND, x)
  def __or__(self, x: Any) -> UPat: return self._bin(Ops.OR, x)
  def __xor__(self, x: Any) -> UPat: return self._bin(Ops.XOR, x)
  def __lshift__(self, x: Any) -> UPat: return self._bin(Ops.SHL, x)
  def __rshift__(self, x: Any) -> UPat: return self._bin(Ops.SHR, x)
  def __lt__(self, x: Any) -> UPat: return self._bin(Ops.CMPLT, x)
  def __ne__(self, x: Any) -> UPat: return self._bin(Ops.CMPNE, x)  # type: ignore[override]
  def eq(self, x: Any) -> UPat: return self._bin(Ops.CMPEQ, x)
  def ne(self, x: Any) -> UPat: return self._bin(Ops.CMPNE, x)
  def lt(self, x: Any) -> UPat: return self._bin(Ops.CMPLT, x)
  def maximum(self, x: Any) -> UPat: return self._bin(Ops.MAX, x)
  def cdiv(self, x: Any) -> UPat: return self._bin(Ops.CDIV, x)
  def cmod(self, x: Any) -> UPat: return self._bin(Ops.CMOD, x)
  def reciprocal(self) -> UPat: return self.alu(Ops.RECIPROCAL)
  def sqrt(self) -> UPat: return self.alu(Ops.SQRT)
  def __neg__(self) -> UPat: return self * -1
  __hash__ = object.__hash__


def _caller_location() -> str:
  """"path:line" of the code that built a UPat: the first frame outside this file (the builders call UPat too). VIZ
  shows it for each rule that fired."""
  f: types.FrameType | None = sys._getframe(2)
  while f is not None and f.f_code.co_filename == __file__: f = f.f_back
  return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


def _rule_name(fn: Callable) -> str:
  code = getattr(fn, "__code__", None)
  where = f" ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code is not None else ""
  return f"{getattr(fn, '__qualname__', repr(fn))}{where}"


def _captures(p: UPat, out: list[str]) -> list[str]:
  if p.name is not None and p.name not in out: out.append(p.name)
  for s in p.src: _captures(s, out)
  return out


def _compile_rule(p: UPat, fn: Callable) -> tuple:
  names = _captures(p, [])
  params: Mapping[str, inspect.Parameter]
  try: params = inspect.signature(fn).parameters
  except (TypeError, ValueError): params = {}  # builtins: pass every capture
  takes_all = not params or any(v.kind is inspect.Parameter.VAR_KEYWORD for v in params.values())
  passed = tuple(n for n in names if takes_all or n in params)
  missing = [k for k, v in params.items() if k != "ctx" and k not in names and v.default is inspect.Parameter.empty
             and v.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
  if missing: raise ValueError(f"rule {_rule_name(fn)} takes {missing}, which its pattern {p!r} does not capture")
  return (p.compiled(), fn, _rule_name(fn), passed, "ctx" in params, p.location)


class PatternMatcher:
  """Rules [(UPat, fn), ...], tried in order for the node's op. fn gets the named captures (and ctx if it asks)
  and returns a UOp or None. Rule sets combine with +, native C++ sets and Python ones alike."""

  def __init__(self, patterns: Sequence[tuple[UPat, Callable]] | None = None, native: _core.PatternMatcher | None = None):
    # a rule's function may come as deconstruct_function's tuple (how an unpickled lambda arrives)
    self.patterns: list[tuple[UPat, Callable]] = [(r[0], types.FunctionType(*r[1])) if isinstance(r, (tuple, list)) and len(r) == 2 and
                                                  isinstance(r[1], tuple) else r for r in patterns or []]
    self._native_rules = native is not None  # rules compiled in C++ that self.patterns does not hold
    for i, rule in enumerate(self.patterns):
      if not (isinstance(rule, (tuple, list)) and len(rule) == 2 and isinstance(rule[0], UPat) and callable(rule[1])):
        raise TypeError(f"PatternMatcher: rule {i} is {rule!r}, not a (UPat, function) pair")
    self.native = native if native is not None else _core.PatternMatcher([_compile_rule(p, fn) for p, fn in self.patterns])

  def __add__(self, other: PatternMatcher) -> PatternMatcher:
    out = PatternMatcher(self.patterns + other.patterns, native=self.native + other.native)
    out._native_rules = self._native_rules or other._native_rules
    return out

  def __reduce__(self) -> tuple:
    if self._native_rules: raise pickle.PicklingError("a PatternMatcher holding C++ rules (such as symbolic's) is not picklable: import it by name")
    return PatternMatcher, ([(p, deconstruct_function(fn) if fn.__name__ == "<lambda>" else fn) for p, fn in self.patterns],)
  def __len__(self) -> int: return len(self.native)
  def rewrite(self, uop: UOp, ctx: Any = None) -> Any:
    """What the first matching rule returned for this one node, or None: a UOp, or any value where the rules are a
    dispatch table (a renderer's rules return strings). graph_rewrite takes only UOps from its rules."""
    return self.native.rewrite(uop, ctx)


def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  max_rewrites: int | None = None) -> UOp:
  """Rewrite the graph to a fixed point (in C++). Top-down: sources first, then the node, and each replacement
  again. bottom_up=True: each node to a fixed point before its sources. A rule set that loops raises RuntimeError
  naming the rule."""
  return _core.graph_rewrite(sink, pm.native, ctx, bottom_up, name, max_rewrites)
