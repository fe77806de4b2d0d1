"""Rendering the kernel IR to C. A kernel is `void name(const unsigned long long* args, unsigned core_id, unsigned
num_cores)`: args holds buffer addresses, and the outermost loop is split between the cores that call it."""
from __future__ import annotations

import math
import struct

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp

# bfloat16 values are computed as float and stored as their top 16 bits
_CTYPES = {"__bf16": "float", "bool": "bool", "signed char": "signed char", "unsigned char": "unsigned char", "short": "short",
           "unsigned short": "unsigned short", "int": "int", "unsigned int": "unsigned int", "long": "long long",
           "unsigned long": "unsigned long long", "weakint": "long long", "half": "_Float16", "float": "float",
           "double": "double", "weakfloat": "double"}

PRELUDE = """#include <math.h>
#include <stdbool.h>
static inline long long th_fdiv(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline long long th_fmod(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline float th_bf2f(unsigned short b) { union { unsigned int u; float f; } v; v.u = (unsigned int)b << 16; return v.f; }
static inline unsigned short th_f2bf(float f) {
  union { float f; unsigned int u; } v; v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);  /* keep NaN a NaN */
  return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float th_round_bf16(float f) { return th_bf2f(th_f2bf(f)); }
"""

_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|",
          Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.CDIV: "/", Ops.CMOD: "%", Ops.FDIV: "/", Ops.SUB: "-"}
_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}


def storage_ctype(dt: DType) -> str: return "unsigned short" if dt.scalar() is dtypes.bfloat16 else ctype(dt)


def ctype(dt: DType) -> str:
  try: return _CTYPES[dt.scalar().name]
  except KeyError: raise NotImplementedError(f"the C renderer has no type for {dt}") from None


def _float_literal(v: float, dt: DType) -> str:
  if math.isnan(v): return "NAN" if dt is not dtypes.double else "(double)NAN"
  if math.isinf(v): return ("-" if v < 0 else "") + ("INFINITY" if dt is not dtypes.double else "(double)INFINITY")
  lit = float.hex(v)
  return {"float": f"{lit}f", "double": lit}.get(dt.name, f"(({ctype(dt)}){lit})")


def const_literal(v, dt: DType) -> str:
  if dt is dtypes.bool: return "1" if v else "0"
  if dt._is_float: return _float_literal(float(v), dt)
  if dt._is_unsigned: return f"{int(v)}ull" if dt.itemsize == 8 else f"{int(v)}u"
  if dt.itemsize == 8 or dt is dtypes.weakint: return f"{int(v)}ll" if int(v) != -2**63 else "(-9223372036854775807ll-1)"
  return str(int(v))


class CRenderer:
  def render(self, k: LoweredKernel) -> str:
    return _KernelWriter(k).write()


class _KernelWriter:
  def __init__(self, k: LoweredKernel):
    self.k = k
    self.names: dict[UOp, str] = {}
    self.lines: list[str] = []
    self.counter = 0
    self.depth = 1

  def emit(self, line: str) -> None: self.lines.append("  " * self.depth + line)

  def expr(self, u: UOp) -> str:
    """The C expression of a node whose sources are already named."""
    s = [self.names[x] for x in u.src]
    op, dt = u.op, u.dtype
    if op is Ops.CONST: return const_literal(u.arg, dt)
    if op is Ops.INDEX: return f"{s[0]}[{s[1]}]"
    if op is Ops.LOAD:
      v = f"th_bf2f({s[0]})" if dt is dtypes.bfloat16 else s[0]
      return v if len(s) == 1 else f"({s[1]} ? {v} : ({ctype(dt)})0)"
    if op is Ops.CAST:
      if dt is dtypes.bool: return f"({s[0]} != 0)"
      return f"th_round_bf16((float){s[0]})" if dt is dtypes.bfloat16 else f"(({ctype(dt)}){s[0]})"
    if op is Ops.BITCAST and dtypes.bfloat16 in (dt, u.src[0].dtype):
      return f"th_bf2f((unsigned short){s[0]})" if dt is dtypes.bfloat16 else f"(({ctype(dt)})th_f2bf({s[0]}))"
    if op is Ops.BITCAST:
      return f"(__extension__({{ union {{ {ctype(u.src[0].dtype)} a; {ctype(dt)} b; }} th_u; th_u.a = {s[0]}; th_u.b; }}))"
    if op is Ops.WHERE: return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.MAX:
      if dt._is_float: return f"((({s[0]}) > ({s[1]}) || ({s[0]}) != ({s[0]})) ? {s[0]} : {s[1]})"
      return f"(({s[0]}) > ({s[1]}) ? {s[0]} : {s[1]})"
    if op is Ops.RECIPROCAL: return f"(({ctype(dt)})1 / {s[0]})"
    if op in _MATH:
      fn = _MATH[op] + ("" if dt is dtypes.double else "f")
      return f"{fn}({s[0]})" if dt in (dtypes.float, dtypes.double) else f"(({ctype(dt)}){fn}((float){s[0]}))"
    if op is Ops.NEG: return f"(-{s[0]})"
    if op is Ops.POW: return f"(({ctype(dt)})pow({s[0]}, {s[1]}))"
    if op in (Ops.FLOORDIV, Ops.FLOORMOD):
      a, b = u.src
      if a.vmin >= 0 and b.op is Ops.CONST and b.arg > 0: return f"({s[0]} {'/' if op is Ops.FLOORDIV else '%'} {s[1]})"
      return f"(({ctype(dt)}){'th_fdiv' if op is Ops.FLOORDIV else 'th_fmod'}({s[0]}, {s[1]}))"
    if op in _INFIX:
      e = f"({s[0]} {_INFIX[op]} {s[1]})"
      # C promotes small ints to int: narrow the result back to the node's type
      return f"(({ctype(dt)}){e})" if dt.itemsize < 4 and dt is not dtypes.bool and op not in GroupOp.Comparison else e
    raise NotImplementedError(f"the C renderer can't render {op}")

  def name(self, u: UOp) -> None:
    """Names a node: constants and loads of small things stay inline, anything else gets a local."""
    if u in self.names: return
    if u.op is Ops.CONST or u.op is Ops.INDEX:
      self.names[u] = self.expr(u)
      return
    self.counter += 1
    nm = f"v{self.counter}"
    e = self.expr(u)
    # bfloat16 math runs in float: round every result, as the hardware type would
    if u.dtype is dtypes.bfloat16 and u.op in GroupOp.ALU and u.op not in GroupOp.Comparison: e = f"th_round_bf16({e})"
    self.emit(f"{ctype(u.dtype)} {nm} = {e};")
    self.names[u] = nm

  def emit_all(self, nodes: list[UOp]) -> None:
    for u in nodes: self.name(u)

  def write(self) -> str:
    k = self.k
    sink = k.ast
    root = sink.src[0]
    store = root.src[0] if root.op is Ops.END else root
    ranges = list(root.src[1:]) if root.op is Ops.END else []
    header = f"void {k.name}(const unsigned long long* args, unsigned int core_id, unsigned int num_cores) {{"
    for i, b in enumerate(k.buffers):
      p = UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)
      self.names[p] = f"data{i}"
      self.emit(f"{storage_ctype(b.dtype)}* restrict data{i} = ({storage_ctype(b.dtype)}*)args[{i}];")
    order = list(store.toposort())
    depends: dict[UOp, frozenset[UOp]] = {}
    for u in order:
      depends[u] = frozenset([u]) if u.op is Ops.RANGE else frozenset().union(*[depends[s] for s in u.src]) if u.src else frozenset()
    reduce = store.src[1] if store.src[1].op is Ops.REDUCE else None
    red_ranges = frozenset(reduce.src[1:]) if reduce is not None else frozenset()
    if not ranges: self.emit("if (core_id != 0) return;")
    for n, r in enumerate(ranges):
      end = r.src[0].arg
      nm = f"ridx{r.arg[0]}"
      self.names[r] = nm
      if n == 0:
        self.emit(f"long long {nm}_lo = ({end}ll * core_id) / num_cores, {nm}_hi = ({end}ll * (core_id + 1)) / num_cores;")
        self.emit(f"for (long long {nm} = {nm}_lo; {nm} < {nm}_hi; {nm}++) {{")
      else:
        self.emit(f"for (long long {nm} = 0; {nm} < {end}; {nm}++) {{")
      self.depth += 1
    outer_nodes = [u for u in order if u.op not in (Ops.RANGE, Ops.PARAM, Ops.STORE, Ops.REDUCE) and u not in self.names
                   and not (depends[u] & red_ranges)]
    if reduce is not None:
      body = reduce.src[0]
      inner = [u for u in body.toposort() if u.op not in (Ops.RANGE, Ops.PARAM) and depends[u] & red_ranges]
      self.emit_all([u for u in outer_nodes if u in set(body.toposort())])
      acc = "acc"
      op = reduce.arg
      ident = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: reduce.dtype.min}[op]
      self.emit(f"{ctype(reduce.dtype)} {acc} = {const_literal(ident, reduce.dtype)};")
      for r in reduce.src[1:]:
        nm = f"ridx{r.arg[0]}"
        self.names[r] = nm
        self.emit(f"for (long long {nm} = 0; {nm} < {r.src[0].arg}; {nm}++) {{")
        self.depth += 1
      self.emit_all(inner)
      v = self.names[body]
      upd = {Ops.ADD: f"{acc} + {v}", Ops.MUL: f"{acc} * {v}"}.get(op)
      if op is Ops.MAX: upd = (f"(({v}) > {acc} || ({v}) != ({v})) ? ({v}) : {acc}" if reduce.dtype._is_float else f"({v}) > {acc} ? ({v}) : {acc}")
      if reduce.dtype.itemsize < 4 and reduce.dtype is not dtypes.bool: upd = f"({ctype(reduce.dtype)})({upd})"
      if reduce.dtype is dtypes.bool and op is Ops.ADD: upd = f"{acc} | {v}"
      self.emit(f"{acc} = {upd};")
      for _ in reduce.src[1:]:
        self.depth -= 1
        self.emit("}")
      self.names[reduce] = acc
    self.emit_all([u for u in outer_nodes if u not in self.names])
    val = self.names[store.src[1]]
    self.emit(f"{self.names[store.src[0]]} = {f'th_f2bf({val})' if store.src[1].dtype is dtypes.bfloat16 else val};")
    for _ in ranges:
      self.depth -= 1
      self.emit("}")
    return PRELUDE + header + "\n" + "\n".join(self.lines) + "\n}\n"
