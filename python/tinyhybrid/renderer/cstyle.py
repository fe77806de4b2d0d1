"""Rendering the expanded kernel IR (see codegen/expand.py) to C-family source. `CStyleWriter` is what the C-family
languages share: where each node goes (at the depth of the innermost loop it depends on), naming, expressions, the
reduce section and the stores. A language supplies its spellings (types, vectors, loads and stores, casts, math) and
its kernel's frame (signature, how a loop of each kind opens, how partial results combine): C for the CPU below,
OpenCL in renderer/opencl.py over the GPU frame of renderer/gpu.py.

The CPU's kernel is `void name(const unsigned long long* args, unsigned core_id, unsigned num_cores)`: args holds the
buffer addresses, then the values of the kernel's variables (LoweredKernel.vars, each a DEFINE_VAR, read as a signed
64-bit value); the THREAD loop (or the GROUP_REDUCE reduce loop) is split between the cores that call it, every other
loop runs whole on each core. Vectors are clang's ext_vector_type."""
from __future__ import annotations

import functools
import math
import re
from dataclasses import replace
from typing import Any

from tinyhybrid.codegen.expand import csize, mask_size
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen.decomp.transcendental import decompose_transcendentals, transcendental_dtypes
from tinyhybrid.dtype import DType, dtypes, fp8_decode
from tinyhybrid.renderer import Renderer
from tinyhybrid.runtime.host import cache_sizes
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element
from tinyhybrid.uop.spec import spec_check_linear

# bfloat16 values are computed as float and stored as their top 16 bits, the OCP fp8s computed as float and stored as
# their byte
_CTYPES = {"__bf16": "float", "float8_e4m3": "float", "float8_e5m2": "float", "float8_e4m3fnuz": "float", "float8_e5m2fnuz": "float", "bool": "bool", "signed char": "signed char",
           "unsigned char": "unsigned char", "short": "short", "unsigned short": "unsigned short", "int": "int", "unsigned int": "unsigned int", "long": "long long",
           "unsigned long": "unsigned long long", "weakint": "long long", "half": "th_half", "float": "float",
           "double": "double", "weakfloat": "double"}
_MASK_INT = {1: "char", 2: "short", 4: "int", 8: "long"}  # what clang gives a vector comparison

def floor_div_helpers(qual: str, i64: str, u64: str) -> str:
  """Python's floor division and modulo of signed integers, in a C dialect (qualifier and 64-bit type names)."""
  return f"""/* an integer division by 0 gives 0 instead of a trap (it is computed even for lanes whose result is masked out),
   and the one quotient that overflows, the most negative value by -1, wraps as two's complement does */
{qual}{i64} th_fdiv({i64} a, {i64} b) {{
  if (b == 0) return 0;
  if (b == -1) return ({i64})(({u64})0 - ({u64})a);
  {i64} q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}}
{qual}{i64} th_fmod({i64} a, {i64} b) {{
  if (b == 0 || b == -1) return 0;
  {i64} r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}}
"""


# The fp8 formats: the OCP ones (https://www.opencompute.org/documents/ocp-8-bit-floating-point-specification-ofp8-revision-1-0-2023-12-01-pdf-1)
# and AMD's fnuz ones. dtype -> (name, mantissa bits, exponent bias, kind). Kind FP8_FN (E4M3FN): no infinities, one
# NaN per sign (all ones); FP8_IEEE (E5M2): laid out as IEEE's formats are; FP8_FNUZ: no infinities, no -0, and 0x80
# their one NaN.
FP8_FN, FP8_IEEE, FP8_FNUZ = 0, 1, 2
FP8_FORMATS = {dtypes.fp8e4m3: ("e4m3", 3, 7, FP8_FN), dtypes.fp8e5m2: ("e5m2", 2, 15, FP8_IEEE),
               dtypes.fp8e4m3fnuz: ("e4m3fnuz", 3, 8, FP8_FNUZ), dtypes.fp8e5m2fnuz: ("e5m2fnuz", 2, 16, FP8_FNUZ)}


@functools.cache
def _fp8_table(dt: DType) -> str:
  """dt's 256 values as a C initializer (hex floats, NAN and INFINITY from math.h)."""
  def lit(v: float) -> str:
    if math.isnan(v): return "-NAN" if math.copysign(1.0, v) < 0 else "NAN"
    return ("-INFINITY" if v < 0 else "INFINITY") if math.isinf(v) else re.sub(r"\.?0*p", "p", float.hex(v)) + "f"
  return "{" + ", ".join(lit(float(v)) for v in fp8_decode(list(range(256)), dt)) + "}"


def fp8_helpers(qual: str, memcpy: str) -> str:
  """What every fp8 format's conversions share, in a C dialect (function qualifier, memcpy's name), in 32-bit integers:
  th_fp8_dec(byte, ...) is exact; th_fp8_enc(float, ...) rounds to nearest even. Past the largest finite, E4M3FN
  saturates to +-448 (infinities too: a number never becomes its NaN) and E5M2 gives +-inf, as torch's casts do, and
  the fnuz formats saturate as tinygrad's do (an infinity is their NaN); a NaN becomes the format's NaN. A double reaches th_fp8_enc through
  th_fp8_d2f, rounded to odd, so that it rounds once. kind: FP8_FN, FP8_IEEE or FP8_FNUZ."""
  return f"""{qual}float th_fp8_dec(unsigned int x, int m, int b, int kind) {{
  unsigned int s = (x & 0x80u) << 24, e = (x & 0x7fu) >> m, f = x & ((1u << m) - 1u), u;
  if (kind == {FP8_FNUZ} && x == 0x80u) u = 0x7fc00000u;                                /* NaN */
  else if (kind == {FP8_IEEE} && e == (0x7fu >> m)) u = s | 0x7f800000u | (f ? 0x400000u : 0u);  /* inf, NaN */
  else if (kind == {FP8_FN} && (x & 0x7fu) == 0x7fu) u = s | 0x7fc00000u;                /* NaN */
  else if (e == 0) {{ float r = (float)f / (float)(1u << (b + m - 1)); return s ? -r : r; }}  /* zero, subnormal */
  else u = s | ((e + 127u - (unsigned int)b) << 23) | (f << (23 - m));
  float r; {memcpy}(&r, &u, sizeof(r)); return r;
}}
{qual}unsigned char th_fp8_enc(float x, int m, int b, int kind) {{
  unsigned int u, a, q, rem, sh; {memcpy}(&u, &x, sizeof(u));
  unsigned int s = (u >> 24) & 0x80u;
  a = u & 0x7fffffffu;
  if (kind == {FP8_FNUZ} && a >= 0x7f800000u) return 0x80u;  /* NaN, and an infinity, which fnuz lacks */
  if (a > 0x7f800000u) return (unsigned char)(s | 0x7fu);  /* NaN */
  int e = (int)(a >> 23);
  if (e - 127 >= 1 - b) {{  /* a normal number of the format (or past it): keep m bits, rebias the exponent */
    sh = 23u - (unsigned int)m;
    q = (a >> sh) - ((unsigned int)(127 - b) << m);
  }} else {{  /* a subnormal of the format: the significand in units of its smallest, 2^(1-b-m) */
    int t = 151 - b - m - e;
    sh = t > 31 ? 31u : (unsigned int)t;
    a = (a & 0x7fffffu) | (e ? 0x800000u : 0u);
    q = a >> sh;
  }}
  rem = a & ((1u << sh) - 1u);
  if (rem > (1u << (sh - 1u)) || (rem == (1u << (sh - 1u)) && (q & 1u))) q++;  /* nearest, ties to even */
  if (kind == {FP8_IEEE}) {{ if (q > 0x7bu) q = 0x7cu; }}  /* inf */
  else if (kind == {FP8_FN}) {{ if (q > 0x7eu) q = 0x7eu; }}  /* its largest, 448 */
  else {{ if (q > 0x7fu) q = 0x7fu; if (q == 0u) return 0u; }}  /* its largest; no -0 */
  return (unsigned char)(s | q);
}}
{qual}float th_fp8_d2f(double d) {{  /* rounded to odd: the rounding on to fp8 is then the only one that counts */
  float f = (float)d; unsigned int u; {memcpy}(&u, &f, sizeof(u));
  if ((double)f != d && d == d) {{ if (((double)f < 0.0 ? -(double)f : (double)f) > (d < 0.0 ? -d : d)) u -= 1u; u |= 1u; }}
  {memcpy}(&f, &u, sizeof(f)); return f;
}}"""


def fp8_format_helpers(dt: DType, qual: str, table: bool = False) -> str:
  """One fp8 format's conversions (after fp8_helpers): th_<fmt>2f(byte) -> float, th_f2<fmt>(float) -> byte, and
  th_round_<fmt>(float), the value rounded to the format. With `table`, th_<fmt>2f looks the byte up in a table of
  the 256 values (the CPU's choice: a kernel may decode hundreds of values, and the compiler inlines each decode)."""
  name, m, b, kind = FP8_FORMATS[dt]
  out = f"static const float th_{name}_values[256] = {_fp8_table(dt)};\n" if table else ""
  dec = f"th_{name}_values[x]" if table else f"th_fp8_dec(x, {m}, {b}, {kind})"
  return out + (f"{qual}float th_{name}2f(unsigned char x) {{ return {dec}; }}\n"
                f"{qual}unsigned char th_f2{name}(float x) {{ return th_fp8_enc(x, {m}, {b}, {kind}); }}\n"
                f"{qual}float th_round_{name}(float x) {{ return th_{name}2f(th_f2{name}(x)); }}")


# Sources are self-contained, and several can be compiled as one file (runtime/compiler.py builds a schedule's
# kernels together): the prelude, vector types and helpers are guarded, and a kernel's state lives inside its function.
PRELUDE = """#ifndef TH_PRELUDE
#define TH_PRELUDE
#include <math.h>
#include <stdbool.h>
/* half: _Float16 where the compiler has it; otherwise (clang before 15 on x86 without AVX512-FP16) the storage type
   __fp16, whose arithmetic runs in float and rounds on every assignment, which gives the same results */
#ifdef __FLT16_MAX__
typedef _Float16 th_half;
#else
typedef __fp16 th_half;
#endif
#ifdef __clang__
#define TH_CONTRACT _Pragma("clang fp contract(fast)")
#else
#define TH_CONTRACT
#endif
""" + floor_div_helpers("static inline ", "long long", "unsigned long long") + """static inline float th_bf2f(unsigned short b) { union { unsigned int u; float f; } v; v.u = (unsigned int)b << 16; return v.f; }
static inline unsigned short th_f2bf(float f) {
  union { float f; unsigned int u; } v; v.f = f;
  if ((v.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((v.u >> 16) | 0x40u);  /* keep NaN a NaN */
  return (unsigned short)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float th_round_bf16(float f) { return th_bf2f(th_f2bf(f)); }
/* double to float rounded to odd, so that the conversion on to half is the only rounding that counts (a direct
   double to __fp16 conversion is miscompiled by some clangs, and __fp16 can't be a return type) */
static inline float th_d2f_odd(double d) {
  union { float f; unsigned int u; } v; v.f = (float)d;
  if ((double)v.f != d && d == d) { if (fabs((double)v.f) > fabs(d)) v.u -= 1; v.u |= 1u; }
  return v.f;
}
#endif
"""

# AVX-512 masked loads by (C type, lanes): a masked-off lane is never read, so a vector may overhang padding
_MASKED = {("float", 16): "_mm512_maskz_loadu_ps", ("float", 8): "_mm256_maskz_loadu_ps", ("float", 4): "_mm_maskz_loadu_ps",
           ("double", 8): "_mm512_maskz_loadu_pd", ("double", 4): "_mm256_maskz_loadu_pd", ("int", 16): "_mm512_maskz_loadu_epi32",
           ("unsigned int", 16): "_mm512_maskz_loadu_epi32", ("int", 8): "_mm256_maskz_loadu_epi32", ("long long", 8): "_mm512_maskz_loadu_epi64"}

_INFIX = {Ops.ADD: "+", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|",
          Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.CDIV: "/", Ops.CMOD: "%", Ops.FDIV: "/", Ops.SUB: "-"}
_SPECIAL_INFIX = {Ops.CDIV, Ops.CMOD}  # an integer division guards against a divisor of 0
_INLINE = {Ops.CONST, Ops.GEP}  # nodes written where they are used, never named
_UNNAMED = {Ops.RANGE, Ops.PARAM, Ops.INDEX, Ops.STORE, Ops.SINK, Ops.END, Ops.GROUP, Ops.REDUCE, Ops.DEFINE_VAR}  # the frame writes them
MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
# The CPU kernel ABI's per-device state: a kernel whose source has a comment "STATE_MARK<stride>" takes, after its buffers
# and variables, the address of zeroed memory of state_bytes(stride, threads) that only its launches on one device use
# (those never overlap): a chunk counter, a count of cores done, and each core's partial results at 64 + core * stride.
# Static memory in the library instead would be shared by every device that loads it.
STATE_MARK = "th-state: "


def state_bytes(src: str, threads: int) -> int:
  """The bytes of per-device state a kernel's source asks for (0: none)."""
  if (at := src.find(STATE_MARK)) < 0: return 0
  return 64 + threads * int(src[at + len(STATE_MARK):src.index("\n", at)])


CHUNKS = 64       # pieces the outermost THREAD loop is handed out in


def storage_ctype(dt: DType) -> str:
  if dt.scalar() is dtypes.bfloat16: return "unsigned short"
  return "unsigned char" if dt.scalar() in FP8_FORMATS else ctype(dt)


def ctype(dt: DType) -> str:
  if (hit := _ctype_memo.get(dt)) is not None: return hit
  try: ret = _ctype_memo[dt] = _CTYPES[dt.scalar().name]
  except KeyError: raise NotImplementedError(f"the C renderer has no type for {dt}") from None
  return ret


_ctype_memo: dict[DType, str] = {}


def _guarded(name: str, decl: str) -> str:
  """A declaration that may appear in several kernels of one file: only the first counts."""
  return f"#ifndef TH_DEF_{name}\n#define TH_DEF_{name}\n{decl}\n#endif"


def var_name(v: UOp) -> str:
  """A DEFINE_VAR's C name: its own name with anything C does not take in an identifier replaced."""
  return "var_" + "".join(c if c.isalnum() else "_" for c in v.arg[0])


def inner_sums(order: list[UOp]) -> set[UOp]:
  """The REDUCEs that another REDUCE's terms read (the inner sums of schedule/kernelize._inner_sums)."""
  under: set[UOp] = set()
  inner: set[UOp] = set()
  for u in reversed(order):
    if u.op is Ops.REDUCE:
      if u in under: inner.add(u)
      under.update(u.src[:u.arg[1]])
    elif u in under: under.update(u.src)
  return inner


class CStyleWriter:
  """One kernel's source in a C-family language (see the module doc). Subclasses set the type names and spell what
  differs; this class places the nodes and writes everything else."""
  TYPES: dict[str, str] = _CTYPES         # scalar dtype name -> its type as computed in
  MASK_INT: dict[int, str] = _MASK_INT    # element size -> the integer type of a vector comparison's lane mask
  IDX = "long long"                       # the type of loop counters
  SUFFIX = ("ll", "ull")                  # the literal suffixes of 64-bit signed and unsigned ints
  # float dtypes it has no EXP2, LOG2 and SIN for: decomposed into other ops (codegen/decomp/transcendental.py)
  LACKS_TRANSCENDENTAL: frozenset[DType] = frozenset()
  HELPER_QUAL, MEMCPY = "static inline ", "__builtin_memcpy"  # how its helper functions are declared, memcpy's name
  FP8_TABLE = False  # whether fp8 values are decoded by a table look-up (see fp8_format_helpers)

  def __init__(self, k: LoweredKernel):
    if dts := transcendental_dtypes(self.LACKS_TRANSCENDENTAL): k = replace(k, ast=decompose_transcendentals(k.ast, dts))
    self.k = k
    end = k.ast.src[0]
    self.stores, self.loops = list(end.src[0].src), list(end.src[1:])
    self.order = list(k.ast.toposort())
    spec_check_linear(self.order, "linearize")
    # the kernel's accumulators, and inner sums: REDUCEs that an accumulator's terms read, whose loops run inside
    # the kernel's reduce loop (schedule/kernelize._inner_sums)
    self.inner = inner_sums(self.order)
    self.reduces = [u for u in self.order if u.op is Ops.REDUCE and u not in self.inner]
    self.rloops = list(self.reduces[0].src[self.reduces[0].arg[1]:]) if self.reduces else []
    self.depth_of: dict[UOp, int] = {}  # the depth of the innermost loop each node uses (write)
    self.names: dict[UOp, str] = {}
    self.types: dict[str, str] = {}    # vector typedefs
    self.helpers: dict[str, str] = {}  # helper functions by name
    self.statics: dict[str, str] = {}  # declarations at the top of the kernel's body (a GPU kernel's local arrays)
    # a kernel whose outermost loop is handed out in chunks, or that adds up its cores' partial results, keeps that
    # state in per-device memory the runtime passes (STATE_MARK); part_stride: the bytes of one core's partials
    self.stateful, self.part_stride = False, 0
    self.lines: list[str] = []
    self.counter = 0
    self.depth = 1
    self.vtypes: dict[DType, str] = {}  # vector dtype -> its type's name
    self.scalars: dict[DType, str] = {}

  def emit(self, line: str) -> None: self.lines.append("  " * self.depth + line)

  def stores_more_than(self, n: int) -> bool:
    """Whether the kernel's stores write more than n bytes in all (its vectors are then worth storing non-temporally)."""
    stored = sum(st.src[1].dtype.count * csize(st.src[1].dtype) for st in self.stores)
    return stored * math.prod(int(r.src[0].vmax) for r in self.loops) > n

  # ** spellings: types **

  def scalar(self, dt: DType) -> str:
    """The type a value of dt is computed in."""
    if (hit := self.scalars.get(dt)) is not None: return hit
    try: ret = self.scalars[dt] = self.TYPES[dt.scalar().name]
    except KeyError: raise NotImplementedError(f"{type(self).__name__} has no type for {dt}") from None
    return ret

  def vtype(self, scalar: str, n: int) -> str: raise NotImplementedError

  def ctype(self, u: UOp) -> str:
    dt = u.dtype
    if dt.count == 1: return self.scalar(dt)
    # a vector of bools is a lane mask as wide as the values it compares
    if dt.scalar() is dtypes.bool: return self.vtype(self.MASK_INT[mask_size(u) or 4], dt.count)
    if (hit := self.vtypes.get(dt)) is None: hit = self.vtypes[dt] = self.vtype(self.scalar(dt), dt.count)
    return hit

  def helper(self, name: str, body: str) -> str:
    self.helpers.setdefault(name, _guarded(name, body))
    return name

  def literal(self, v, dt: DType) -> str:
    if dt is dtypes.bool: return "1" if v else "0"
    if dt._is_float:
      v = float(v)
      if math.isnan(v) or math.isinf(v):
        # a 16-bit type's own: CUDA's half takes neither float nor double in a ?: without a cast
        special = ("-" if v < 0 else "") + ("NAN" if math.isnan(v) else "INFINITY")
        return special if dt is dtypes.float else f"(({self.scalar(dt)}){special})"
      lit = float.hex(v)
      return {"float": f"{lit}f", "double": lit}.get(dt.name) or f"(({self.scalar(dt)}){lit})"
    sll, ull = self.SUFFIX
    if dt._is_unsigned: return f"{int(v)}{ull}" if dt.itemsize == 8 else f"{int(v)}u"
    if dt.itemsize == 8 or dt is dtypes.weakint: return f"{int(v)}{sll}" if int(v) != -2**63 else f"(-9223372036854775807{sll}-1)"
    return str(int(v))

  # ** spellings: expressions a language writes its own way **

  def vec_literal(self, t: str, items: list[str]) -> str: return f"({t}){{{', '.join(items)}}}"
  def lane(self, x: str, i: int) -> str: return f"{x}[{i}]"
  def convert(self, x: str, t: str) -> str: return f"__builtin_convertvector({x}, {t})"
  def fma(self, t: str) -> str:
    return self.helper(f"th_fma_{t}", f"static inline {t} th_fma_{t}({t} a, {t} b, {t} c) {{ TH_CONTRACT return a * b + c; }}")
  def math(self, op: Ops, dt: DType, t: str, x: str) -> str:
    fn = MATH[op] + ("" if dt is dtypes.double else "f")
    return f"{fn}({x})" if dt in (dtypes.float, dtypes.double) else f"(({t}){fn}((float){x}))"
  def rounding(self, dt: DType) -> str | None:
    """The helper that rounds a result of dt computed in a wider type (bfloat16 and the fp8s run in float), None if
    none is."""
    if dt in FP8_FORMATS: return self.fp8(dt, "round")
    return "th_round_bf16" if dt is dtypes.bfloat16 else None

  def fp8(self, dt: DType, what: str) -> str:
    """The name of an fp8 helper of dt (see fp8_format_helpers): "dec" (byte -> float), "enc" (float -> byte) or
    "round"."""
    self.helper("th_fp8", fp8_helpers(self.HELPER_QUAL, self.MEMCPY))
    name = FP8_FORMATS[dt.scalar()][0]
    self.helper(f"th_fp8_{name}", fp8_format_helpers(dt.scalar(), self.HELPER_QUAL, self.FP8_TABLE))
    return {"dec": f"th_{name}2f", "enc": f"th_f2{name}", "round": f"th_round_{name}"}[what]

  def cast(self, u: UOp, t: str, x: str) -> str:
    dt = u.dtype
    if dt.count > 1: return self.convert(x, t)
    if dt is dtypes.bool: return f"({x} != 0)"
    if dt is dtypes.bfloat16: return f"th_round_bf16((float){x})"
    if dt in FP8_FORMATS: return self.fp8_cast(u, x)
    return f"(({t})th_d2f_odd({x}))" if dt is dtypes.half and u.src[0].dtype is dtypes.double else f"(({t}){x})"

  def fp8_cast(self, u: UOp, x: str) -> str:
    """A cast to an fp8: rounded once from the value (a double through th_fp8_d2f)."""
    return f"{self.fp8(u.dtype, 'round')}({'th_fp8_d2f' if self.scalar(u.src[0].dtype) == 'double' else '(float)'}({x}))"

  def fp8_bitcast(self, u: UOp, t: str, x: str) -> str | None:
    """A scalar bitcast from or to an fp8 (held as a float): through its byte. None where neither side is one."""
    src, dt = u.src[0].dtype, u.dtype
    if src not in FP8_FORMATS and dt not in FP8_FORMATS: return None
    byte = f"{self.fp8(src, 'enc')}({x})" if src in FP8_FORMATS else f"(unsigned char){x}"
    return f"{self.fp8(dt, 'dec')}({byte})" if dt in FP8_FORMATS else f"(({t}){byte})"

  def bitcast(self, u: UOp, t: str, x: str) -> str:
    if u.dtype.count > 1: return f"(({t}){x})"
    src = u.src[0].dtype
    if dtypes.bfloat16 in (u.dtype, src):  # through its 16 bits (a half's bits, not its value)
      if u.dtype is dtypes.bfloat16: return f"th_bf2f({x if src._is_int else self.reinterpret(self.scalar(src), 'unsigned short', x)})"
      return f"(({t})th_f2bf({x}))" if u.dtype._is_int else self.reinterpret("unsigned short", t, f"th_f2bf({x})")
    if (f8 := self.fp8_bitcast(u, t, x)) is not None: return f8
    return self.reinterpret(self.scalar(src), t, x)

  @staticmethod
  def reinterpret(a: str, b: str, x: str) -> str:
    """x's bits (C type a) as C type b, of the same size."""
    return f"(__extension__({{ union {{ {a} a; {b} b; }} th_u; th_u.a = {x}; th_u.b; }}))"

  def load_scalar(self, buf: str, idx: str, dt: DType) -> str:
    if dt in FP8_FORMATS: return f"{self.fp8(dt, 'dec')}({buf}[{idx}])"
    return f"th_bf2f({buf}[{idx}])" if dt is dtypes.bfloat16 else f"{buf}[{idx}]"

  def store_scalar(self, buf: str, idx: str, v: str, dt: DType) -> str:
    if dt in FP8_FORMATS: return f"{buf}[{idx}] = {self.fp8(dt, 'enc')}({v});"
    return f"{buf}[{idx}] = {f'th_f2bf({v})' if dt is dtypes.bfloat16 else v};"

  def vload(self, u: UOp, t: str, ptr: str) -> str: raise NotImplementedError
  def vstore(self, t: str, buf: str, idx: str, v: str, aligned: bool) -> str: raise NotImplementedError

  # ** expressions **

  def infix(self, op: Ops, dt: DType, t: str, s: list[str]) -> str:
    e = f"({s[0]} {_INFIX[op]} {s[1]})"
    # C promotes small ints to int: narrow the result back to the node's type
    return f"(({t}){e})" if dt.count == 1 and dt.itemsize < 4 and dt is not dtypes.bool and op not in GroupOp.Comparison else e

  def expr(self, u: UOp, t: str) -> str:
    """The expression of a node whose sources are already named; t is its type."""
    names = self.names
    s = [names.get(x, "") for x in u.src]  # an INDEX has no name: its LOAD reads its sources
    op, dt = u.op, u.dtype
    if op in _INFIX and op not in _SPECIAL_INFIX: return self.infix(op, dt, t, s)
    vec = dt.count > 1
    if op is Ops.CONST: return self.literal(u.arg, dt)
    if op is Ops.VECTORIZE:
      if dt.scalar() is dtypes.bool: return self.vec_literal(t, [f"-({x})" for x in s])
      return self.vec_literal(t, s)
    if op is Ops.GEP: return f"({self.lane(s[0], u.arg[0])} != 0)" if dt is dtypes.bool else self.lane(s[0], u.arg[0])  # a mask lane is -1
    if op is Ops.LOAD:
      buf, idx = (self.names[x] for x in u.src[0].src)
      if vec: return self.vload(u, t, f"{buf} + {idx}")
      v = self.load_scalar(buf, idx, dt)
      return v if len(s) == 1 else f"({s[1]} ? {v} : ({self.scalar(dt)})0)"
    if op is Ops.CAST: return self.cast(u, t, s[0])
    if op is Ops.BITCAST: return self.bitcast(u, t, s[0])
    if op is Ops.WHERE: return f"({s[0]} ? {s[1]} : {s[2]})"
    if op is Ops.MAX:
      if dt._is_float: return f"((({s[0]} > {s[1]}) | ({s[0]} != {s[0]})) ? {s[0]} : {s[1]})"
      return f"(({s[0]} > {s[1]}) ? {s[0]} : {s[1]})"
    if op is Ops.BYTEDOT: return self.bytedot(dt, t, s)
    if op is Ops.RECIPROCAL: return f"(({self.scalar(dt)})1 / {s[0]})"
    if op in MATH: return self.math(op, dt, t, s[0])
    if op is Ops.NEG: return f"(-{s[0]})"
    if op is Ops.POW: return f"(({t})pow({s[0]}, {s[1]}))"
    if op in (Ops.FLOORDIV, Ops.FLOORMOD):
      a, b = u.src
      # a nonnegative value by a positive one (an index by a variable's size too): floor is truncation, C's own
      if a.vmin >= 0 and (b.arg > 0 if b.op is Ops.CONST else b.vmin > 0): return f"({s[0]} {'/' if op is Ops.FLOORDIV else '%'} {s[1]})"
      # unsigned: floor is truncation, and the signed helpers would read values from 2**63 up as negative
      if not dtypes.is_unsigned(dt): return f"(({t}){'th_fdiv' if op is Ops.FLOORDIV else 'th_fmod'}({s[0]}, {s[1]}))"
      op = Ops.CDIV if op is Ops.FLOORDIV else Ops.CMOD
    if op in (Ops.CDIV, Ops.CMOD) and not dt._is_float: return self.trunc_div(op, u.src[1], dt, t, s)
    if op in _INFIX: return self.infix(op, dt, t, s)  # a division by a nonzero constant
    raise NotImplementedError(f"{type(self).__name__} can't render {op}")

  def bytedot(self, dt: DType, t: str, s: list[str]) -> str: raise NotImplementedError(f"{type(self).__name__} can't render BYTEDOT")

  def trunc_div(self, op: Ops, b: UOp, dt: DType, t: str, s: list[str]) -> str:
    """C's integer division or remainder, guarded: a divisor of 0 gives 0 (the lane may be masked out), and a signed
    quotient by -1 wraps (the most negative value by -1 traps on x86)."""
    if b.op is Ops.CONST and b.arg != 0 and (b.arg != -1 or dtypes.is_unsigned(dt)): return self.infix(op, dt, t, s)
    if dtypes.is_unsigned(dt): return f"({s[1]} == 0 ? ({t})0 : ({t})({s[0]} {_INFIX[op]} {s[1]}))"
    if op is Ops.CMOD: return f"(({s[1]} == 0 || {s[1]} == -1) ? ({t})0 : ({t})({s[0]} % {s[1]}))"
    u64 = self.scalar(dtypes.uint64)
    return f"({s[1]} == 0 ? ({t})0 : {s[1]} == -1 ? ({t})(({u64})0 - ({u64}){s[0]}) : ({t})({s[0]} / {s[1]}))"

  def name(self, u: UOp) -> None:
    """Names a node: constants and GEPs stay inline, anything else gets a local (an inner sum: its section)."""
    if u in self.names: return
    if u in self.inner: return self.inner_section(u)
    t = self.ctype(u)
    if u.op in _INLINE:
      self.names[u] = self.expr(u, t)
      return
    self.counter += 1
    nm = f"v{self.counter}"
    e = self.expr(u, t)
    # a type computed in a wider one (bfloat16 in float) rounds every result, as the hardware type would
    if u.op in GroupOp.ALU and u.op not in GroupOp.Comparison and (rnd := self.rounding(u.dtype)) is not None: e = f"{rnd}({e})"
    self.lines.append(f"{'  ' * self.depth}{t} {nm} = {e};")
    self.names[u] = nm

  def update(self, acc: UOp, term: UOp) -> str:
    """acc = acc op term, the step of a reduce."""
    a, op, dt = self.names[acc], acc.arg[0], acc.dtype.scalar()
    if term in self.fused: return f"{a} = {self.fma(self.ctype(acc))}({self.names[term.src[0]]}, {self.names[term.src[1]]}, {a});"
    v = self.names[term]
    if op is Ops.ADD: upd = f"{a} | {v}" if dt is dtypes.bool else f"{a} + {v}"
    elif op is Ops.MUL: upd = f"{a} * {v}"
    else: upd = f"(({v} > {a}) | ({v} != {v})) ? {v} : {a}" if dt._is_float else f"({v} > {a}) ? {v} : {a}"
    if acc.dtype.count == 1 and dt.itemsize < 4 and dt is not dtypes.bool: upd = f"({self.scalar(dt)})({upd})"
    return f"{a} = {upd};"

  # ** the frame: a language's kernel around the body **

  def params(self) -> None:
    """Names the buffers (PARAM i) and variables and emits whatever the body needs first."""
    raise NotImplementedError

  def open_loop(self, r: UOp, nm: str) -> None:
    self.names[r] = nm
    self.emit(f"for ({self.IDX} {nm} = 0; {nm} < {self.names[r.src[0]]}; {nm}++) {{")
    self.depth += 1

  def end_loop(self, r: UOp) -> None: self.close_loop()

  def close_loop(self) -> None:
    self.depth -= 1
    self.emit("}")

  def combine(self) -> None:
    """Combines the partial results of a reduce split by a GROUP_REDUCE range (how is the device's)."""
    raise NotImplementedError

  def after_stores(self) -> None: pass
  def finish(self) -> str: raise NotImplementedError

  # ** the body **

  def write(self) -> str:
    self.params()
    # where each node goes: the depth of the innermost loop it uses; a REDUCE (and what uses it) after its loops
    n_out = self.n_out = len(self.loops)
    written = {st.src[0].src[0] for st in self.stores}
    depth: dict[UOp, int] = {}
    post: set[UOp] = set()
    mul_uses: dict[UOp, int] = {}  # how often each product is used
    inner_depth = n_out + len(self.rloops)  # an inner sum's section is in the innermost loop of the kernel's reduce
    inner_loops = 0
    for u in self.order:
      op = u.op
      if op is Ops.RANGE:
        if u in self.loops: depth[u] = self.loops.index(u) + 1
        elif u in self.rloops: depth[u] = n_out + 1 + self.rloops.index(u)
        else:  # an inner sum's loop: deeper than the kernel's own, each at a depth of its own
          inner_loops += 1
          depth[u] = inner_depth + inner_loops
      elif op is Ops.REDUCE:
        depth[u] = inner_depth if u in self.inner else n_out
        if u not in self.inner: post.add(u)
        for x in u.src:
          if x.op is Ops.MUL: mul_uses[x] = mul_uses.get(x, 0) + 1
      else:
        d, after = 0, False
        for x in u.src:
          if depth[x] > d: d = depth[x]
          if x in post: after = True
          if x.op is Ops.MUL: mul_uses[x] = mul_uses.get(x, 0) + 1
        # a load of what this kernel stores (a blocked reduce's partial result) must stay after the stores of the loops around it
        depth[u] = n_out if op is Ops.LOAD and u.src[0].src[0] in written else d
        if after: post.add(u)
    # a float product only added into an accumulator becomes a fused multiply-add
    term_uses: dict[UOp, int] = {}
    for acc in self.reduces + list(self.inner):
      if acc.arg[0] is Ops.ADD:
        for t in acc.src[:acc.arg[1]]:
          if t.op is Ops.MUL and t.dtype.scalar()._is_float: term_uses[t] = term_uses.get(t, 0) + 1
    self.fused = {t for t, n in term_uses.items() if mul_uses[t] == n}
    # the nodes named at each depth, and after the reduce, in order (an inner sum names its section)
    self.at: dict[int | None, list[UOp]] = {}
    for u in self.order:
      if (u.op not in _UNNAMED or u in self.inner) and u not in self.fused: self.at.setdefault(None if u in post else depth[u], []).append(u)
    self.depth_of = depth
    self.level(0)
    return self.finish()

  def level(self, d: int) -> None:
    for u in self.at.get(d, ()): self.name(u)
    if d < self.n_out:
      r = self.loops[d]
      self.open_loop(r, f"ridx{d}")
      self.level(d + 1)
      self.end_loop(r)
      return
    if self.reduces: self.reduce_section()
    for u in self.at.get(None, ()): self.name(u)
    for st in self.stores: self.store(st)
    self.after_stores()

  def acc_init(self, acc: UOp) -> str:
    """The declaration of a reduce's accumulator, set to its op's identity."""
    t, dt = self.ctype(acc), acc.dtype.scalar()
    return f"{t} {self.names[acc]} = ({t})({self.literal(identity_element(acc.arg[0], dt), dt)});"

  def reduce_section(self) -> None:
    n_out = self.n_out
    for i, acc in enumerate(self.reduces):
      self.names[acc] = f"acc{i}"
      self.emit(self.acc_init(acc))
    for j, r in enumerate(self.rloops):
      self.open_loop(r, f"ridx{n_out + j}")
      for u in self.at.get(n_out + j + 1, ()): self.name(u)
    for acc in self.reduces:
      for term in acc.src[:acc.arg[1]]: self.emit(self.update(acc, term))
    for r in reversed(self.rloops): self.end_loop(r)
    if any(r.arg[1] is AxisType.GROUP_REDUCE for r in self.rloops): self.combine()

  def inner_section(self, acc: UOp) -> None:
    """The inner sums over acc's loops, in one loop: their accumulators, the loop, their updates. What their terms
    read outside the loop is named first, since the order may put it after acc."""
    loops = acc.src[acc.arg[1]:]
    group = [a for a in self.order if a in self.inner and a.src[a.arg[1]:] == loops]
    here = set(self.at.get(self.depth_of[acc], ()))
    for x in UOp.sink(*[t for a in group for t in a.src[:a.arg[1]]]).toposort():
      if x in here: self.name(x)
    for a in group: self.inner_begin(a)
    for r in loops:
      self.open_loop(r, f"ridx{self.depth_of[r] - 1}")
      for u in self.at.get(self.depth_of[r], ()): self.name(u)
    for a in group: self.inner_add(a)
    for r in reversed(loops): self.end_loop(r)
    for a in group: self.inner_end(a)

  # an inner sum's accumulator: declared, updated with its terms in its loop, and read after it
  def inner_begin(self, acc: UOp) -> None:
    self.counter += 1
    self.names[acc] = f"isum{self.counter}"
    self.emit(self.acc_init(acc))
  def inner_add(self, acc: UOp) -> None:
    for term in acc.src[:acc.arg[1]]: self.emit(self.update(acc, term))
  def inner_end(self, acc: UOp) -> None: pass

  def store(self, st: UOp) -> None:
    index, val = st.src
    buf, idx = (self.names[x] for x in index.src)
    v = self.names[val]
    if val.dtype.count > 1: self.emit(self.vstore(self.ctype(val), buf, idx, v, index.arg is True))
    else: self.emit(self.store_scalar(buf, idx, v, val.dtype))


class CWriter(CStyleWriter):
  """C for the CPU device (see the module doc). A kernel that stores more than `stream_bytes` stores its aligned
  vectors non-temporally: what it writes would not stay in the cache anyway, and a plain store first reads the line
  it writes (an allreduce storing its sum to every device's result is a third faster)."""
  FP8_TABLE = True

  def __init__(self, k: LoweredKernel, stream_bytes: int):
    super().__init__(k)
    self.streaming = self.stores_more_than(stream_bytes)

  def vtype(self, scalar: str, n: int) -> str:
    name = f"{'' if scalar.startswith('th_') else 'th_'}{scalar.replace(' ', '_')}{n}"
    self.types.setdefault(name, _guarded(name, f"typedef {scalar} {name} __attribute__((ext_vector_type({n})));"))
    return name

  def vload(self, u: UOp, t: str, ptr: str) -> str:
    index = u.src[0]
    mask = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.uint), None)
    gate = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.bool), None)
    scalar, n = self.scalar(u.dtype), u.dtype.count
    intr = _MASKED.get((scalar, n))
    if gate is not None and intr is not None:
      # a gated load becomes a masked one: no branch, and a masked-off lane is never read
      mask, gate = f"({gate} ? {mask or f'{(1 << n) - 1}u'} : 0u)", None
    if mask is not None:
      fn = f"th_mld_{t}"
      fallback = f"{t} r = ({t})(0); for (int i = 0; i < {n}; i++) if ((m >> i) & 1u) r[i] = p[i]; return r;"
      if intr is not None:
        self.helpers.setdefault("#immintrin", "#ifdef __AVX512F__\n#include <immintrin.h>\n#endif")
        body = f"#ifdef __AVX512F__\n  return ({t}){intr}(m, p);\n#else\n  {fallback}\n#endif"
      else: body = f"  {fallback}"
      self.helper(fn, f"static inline {t} {fn}(const {scalar}* p, unsigned int m) {{\n{body}\n}}")
      ret = f"{fn}({ptr}, {mask})"
    elif index.arg is True: ret = f"(*({t}*)({ptr}))"
    else:
      fn = self.helper(f"th_ld_{t}", f"static inline {t} th_ld_{t}(const {scalar}* p) {{ {t} r; __builtin_memcpy(&r, p, sizeof(r)); return r; }}")
      ret = f"{fn}({ptr})"
    return ret if gate is None else f"({gate} ? {ret} : ({t})(0))"

  def bytedot(self, dt: DType, t: str, s: list[str]) -> str:
    """BYTEDOT as x86's pmaddubsw where the lanes fill a register the CPU has it for, else lane by lane in int."""
    one = self.helper("th_bytedot", "static inline short th_bytedot(unsigned short a, unsigned short b) {\n"
                      "  int s = (int)(a & 255) * (signed char)(b & 255) + (int)(a >> 8) * (signed char)(b >> 8);\n"
                      "  return (short)(s < -32768 ? -32768 : s > 32767 ? 32767 : s);\n}")
    if (n := dt.count) == 1: return f"{one}({s[0]}, {s[1]})"
    ut, fn = self.vtype("unsigned short", n), f"th_bytedot{n}"
    loop = f"{t} r; for (int i = 0; i < {n}; i++) r[i] = {one}(a[i], b[i]); return r;"
    if (isa := {8: ("__SSSE3__", "128"), 16: ("__AVX2__", "256"), 32: ("__AVX512BW__", "512")}.get(n)) is not None:
      bytes_t = f"th_bytes{2 * n}"
      self.types.setdefault(bytes_t, _guarded(bytes_t, f"typedef char {bytes_t} __attribute__((vector_size({2 * n})));"))
      loop = f"#if defined({isa[0]})\n  return ({t})__builtin_ia32_pmaddubsw{isa[1]}(({bytes_t})a, ({bytes_t})b);\n#else\n  {loop}\n#endif"
    self.helper(fn, f"static inline {t} {fn}({ut} a, {ut} b) {{\n  {loop}\n}}")
    return f"{fn}({s[0]}, {s[1]})"

  def vstore(self, t: str, buf: str, idx: str, v: str, aligned: bool) -> str:
    if aligned and self.streaming: return f"__builtin_nontemporal_store({v}, ({t}*)({buf} + {idx}));"
    return f"*({t}*)({buf} + {idx}) = {v};" if aligned else f"__builtin_memcpy({buf} + {idx}, &{v}, sizeof({t}));"

  def params(self) -> None:
    k = self.k
    for i, b in enumerate(k.buffers):
      p = UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)
      self.names[p] = f"data{i}"
      self.emit(f"{storage_ctype(b.dtype)}* restrict data{i} = ({storage_ctype(b.dtype)}*)args[{i}];")
    for i, v in enumerate(k.vars):
      self.names[v] = var_name(v)
      self.emit(f"long long {self.names[v]} = (long long)args[{len(k.buffers) + i}];")
    if not any(r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE) for r in self.loops + self.rloops): self.emit("if (core_id != 0) return;")

  def open_loop(self, r: UOp, nm: str) -> None:
    self.names[r] = nm
    end = self.names[r.src[0]]  # a constant, or an expression of the kernel's variables
    if r.arg[1] is AxisType.THREAD and r is self.loops[0]:
      # the outermost loop is handed out in chunks, a chunk to whichever core asks first: a core that shares its
      # time with other work does less of it instead of holding up the rest (a loop inside another, e.g. a blocked
      # reduce's, keeps its fixed share: the next step of the outer loop reads what this core wrote)
      self.stateful = True
      nch = min(r.src[0].arg, CHUNKS) if r.src[0].op is Ops.CONST else CHUNKS
      self.emit(f"for (long long th_c = __atomic_fetch_add(th_next, 1, __ATOMIC_RELAXED); th_c < {nch}; "
                f"th_c = __atomic_fetch_add(th_next, 1, __ATOMIC_RELAXED)) {{")
      self.depth += 1
      self.emit(f"long long {nm}_lo = ((long long){end} * th_c) / {nch}, {nm}_hi = ((long long){end} * (th_c + 1)) / {nch};")
      self.emit(f"for (long long {nm} = {nm}_lo; {nm} < {nm}_hi; {nm}++) {{")
    elif r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE):
      self.emit(f"long long {nm}_lo = ((long long){end} * core_id) / num_cores, {nm}_hi = ((long long){end} * (core_id + 1)) / num_cores;")
      self.emit(f"for (long long {nm} = {nm}_lo; {nm} < {nm}_hi; {nm}++) {{")
    else: self.emit(f"for (long long {nm} = 0; {nm} < {end}; {nm}++) {{")
    self.depth += 1

  def end_loop(self, r: UOp) -> None:
    self.close_loop()
    if r.arg[1] is AxisType.THREAD and r is self.loops[0]:
      self.close_loop()
      # the last core out resets the counters for the next launch (launches of a kernel on one device never overlap)
      self.emit("if (__atomic_add_fetch(th_left, 1u, __ATOMIC_ACQ_REL) == num_cores) "
                "{ __atomic_store_n(th_next, 0, __ATOMIC_RELAXED); __atomic_store_n(th_left, 0u, __ATOMIC_RELAXED); }")

  def finish(self) -> str:
    header = f"void {self.k.name}(const unsigned long long* args, unsigned int core_id, unsigned int num_cores) {{"
    statics = ["  " + line for v in self.statics.values() for line in v.split("\n")]
    if self.stateful:
      header = f"// {STATE_MARK}{self.part_stride}\n{header}"
      statics += [f"  unsigned char* th_state = (unsigned char*)args[{len(self.k.buffers) + len(self.k.vars)}];",
                  "  long long* th_next = (long long*)th_state; unsigned int* th_left = (unsigned int*)(th_state + 8);",
                  "  unsigned int* th_done = (unsigned int*)(th_state + 12); unsigned char* th_part = th_state + 64;"]
    # non-temporal stores are weakly ordered: they land before the kernel reports done
    fence = ["#ifdef __SSE2__", "  __builtin_ia32_sfence();", "#endif"] if any("nontemporal" in ln for ln in self.lines) else []
    return "\n".join([PRELUDE, *self.types.values(), *self.helpers.values(), header, *statics, *self.lines, *fence, "}\n"])

  def acc_bytes(self, acc: UOp) -> int:
    return acc.dtype.count * (4 if acc.dtype.scalar() is dtypes.bfloat16 or acc.dtype.scalar() in FP8_FORMATS else csize(acc.dtype))

  def combine(self) -> None:
    """Two-stage reduce: each core leaves its accumulators in its slot; the last core to finish adds up the others'
    and goes on to the store. Launches of one kernel never overlap (a queue runs commands in order)."""
    offs, off = [], 0
    for acc in self.reduces:
      offs.append(off)
      off += self.acc_bytes(acc)
    self.stateful, self.part_stride = True, -(-off // 64) * 64
    for acc, o in zip(self.reduces, offs): self.emit(f"__builtin_memcpy(th_part + core_id * {self.part_stride} + {o}, &{self.names[acc]}, sizeof({self.names[acc]}));")
    self.emit("if (__atomic_add_fetch(th_done, 1u, __ATOMIC_ACQ_REL) != num_cores) return;")
    self.emit("__atomic_store_n(th_done, 0u, __ATOMIC_RELAXED);")
    self.emit("for (unsigned int th_c = 0; th_c < num_cores; th_c++) {")
    self.depth += 1
    self.emit("if (th_c == core_id) continue;")
    for acc, o in zip(self.reduces, offs):
      t = self.ctype(acc)
      part = UOp(Ops.NOOP, acc.dtype, (), o)
      self.names[part] = f"th_p{o}"
      self.emit(f"{{ {t} th_p{o}; __builtin_memcpy(&th_p{o}, th_part + th_c * {self.part_stride} + {o}, sizeof(th_p{o})); {self.update(acc, part)} }}")
    self.close_loop()


@functools.cache
def last_level_cache() -> int:
  """Bytes of this host's largest CPU cache (32 MiB where the system does not say)."""
  return max(cache_sizes().values(), default=32 << 20)


class CStyleLanguage(Renderer):
  """The renderers that write C-family source (C, CUDA C, OpenCL C): tinygrad's base class of the same name, which its
  programs test for."""


class CRenderer(CStyleLanguage):
  """`vec`: the widest vector the compiler gets (1 renders scalar code only: ext_vector_type is clang's); `registers`:
  the vector registers of the CPU it is for. The defaults plan for AVX-512 (the NULL device's CPU)."""
  device = "CPU"
  inner_sums = True

  def __init__(self, vec: int = 16, stream_bytes: int | None = None, registers: int = 32):
    self.vec, self.registers = vec, registers
    self.stream_bytes = last_level_cache() if stream_bytes is None else stream_bytes  # see CWriter
    if vec > 1: self.vector_transcendentals = frozenset({dtypes.float32})  # libm's exp2f takes one lane per call
    self.half_loads = vec > 1

  @property
  def code_for_op(self) -> dict[Ops, None]: return dict.fromkeys(GroupOp.AnyALU)  # BYTEDOT too (CWriter.bytedot)

  def render(self, k: LoweredKernel) -> str: return CWriter(k, self.stream_bytes).write()


ClangRenderer = CRenderer  # tinygrad's name for it


def __getattr__(name: str) -> Any:
  # tinygrad's module holds its CUDA and OpenCL renderers too; ours build on this one, so they are looked up when asked
  if name == "CUDARenderer":
    from tinyhybrid.renderer.cuda import CUDARenderer
    return CUDARenderer
  if name == "OpenCLRenderer":
    from tinyhybrid.renderer.opencl import OpenCLRenderer
    return OpenCLRenderer
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
