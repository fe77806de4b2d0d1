"""EXP2, LOG2 and SIN of float64 and float32 written as plain ALU ops (adds, multiplies, one division, compares,
WHEREs, casts, bitcasts and 64-bit integer ops), for renderers without an instruction for them: PTX has ex2/lg2/sin
only as f32 approximations. As tinygrad's TRANSCENDENTAL: a renderer decomposes the dtypes it lacks (the writer's
LACKS_TRANSCENDENTAL, renderer/cstyle.py); TRANSCENDENTAL=2 decomposes every float dtype on every C-family renderer
(half, bfloat16 and the fp8s through float32).

The accuracy (about 1 ulp over the whole range, denormals and the edges included) comes from exact steps, not from
a fused multiply-add, which the IR has not: a value is split into high and low halves by masking low mantissa bits,
so that products of halves are exact, and double-length values are kept with two-sum. None of it breaks if a
compiler contracts a*b+c into an fma. The polynomials are Taylor series cut where their terms fall below the
dtype's precision: on these reduced ranges that is at most two terms more than a minimax fit.
  exp2: x = q + s, q an integer, |s| <= 1/2; 2^s = 1 + s*ln2 + s^2*R(s); times 2^q in two exact steps, so that a
        denormal result is rounded once.
  log2: x = 2^e * m, m in [sqrt(1/2), sqrt(2)]; log2(m) = 2/ln2 * atanh(f), f = (m-1)/(m+1), the division
        corrected by its exact remainder.
  sin:  |x| < 0.78 as it is; otherwise x * 2/pi mod 4 in 64-bit integer arithmetic (Payne-Hanek: the bits of 2/pi
        that matter at x's exponent times x's integer mantissa), exact for every finite x, gives the quadrant and
        the remainder r as a double-length number; then sin or cos of r."""
from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterable

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import TRANSCENDENTAL
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

U64 = dtypes.uint64
M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class FloatSpec:
  dt: DType
  it: DType       # the signed and unsigned integers of its size
  ut: DType
  mant: int       # explicit mantissa bits
  bias: int
  lim: int        # exp2 is inf or 0 past +-lim
  limbs: int      # 32-bit words of x * 2/pi mod 4 that sin computes
  piece: int      # bits per piece the reduced fraction is converted in (exact in dt)
  @property
  def bits(self) -> int: return 8 * self.dt.itemsize
  @property
  def half(self) -> int: return (self.mant + 1) // 2  # significant bits of a split's high part
  @property
  def eps(self) -> int: return self.mant + 8           # series terms are cut below 2^-eps


F64 = FloatSpec(dtypes.float64, dtypes.int64, dtypes.uint64, 52, 1023, 1100, 6, 32)
F32 = FloatSpec(dtypes.float32, dtypes.int32, dtypes.uint32, 23, 127, 160, 4, 16)
SPECS = {dtypes.float64: F64, dtypes.float32: F32}


# ** constants, exact in the dtype **

def _rnd(v: Fraction | float, f: FloatSpec) -> float: return float(v) if f is F64 else struct.unpack("<f", struct.pack("<f", float(v)))[0]


def _hi_lo(v: Fraction | float, f: FloatSpec) -> tuple[float, float]:
  """v as hi + lo: hi with f.half significant bits (its products with a split half are exact), lo the rest, rounded."""
  m, e = math.frexp(float(v))
  hi = math.ldexp(math.trunc(m * 2**f.half), e - f.half)
  return hi, _rnd(Fraction(v) - Fraction(hi), f)


def _atan_inv(n: int, one: int) -> int:
  """atan(1/n) * one, in integers."""
  total, term, k, sign = 0, one // n, 1, 1
  while term:
    total, term, k, sign = total + sign * (term // k), term // (n * n), k + 2, -sign
  return total


@functools.cache
def _pi(bits: int) -> Fraction:
  one = 1 << (bits + 32)
  return Fraction(4 * (4 * _atan_inv(5, one) - _atan_inv(239, one)), one)  # Machin


LN2 = sum((Fraction(2, (2 * k + 1) * 3**(2 * k + 1)) for k in range(70)), Fraction(0))  # 2 atanh(1/3), ~220 bits


@functools.cache
def two_over_pi_words(n: int) -> tuple[int, ...]:
  """A stream of n 32-bit words whose bit p (from the top of word 0) is the bit of 2/pi of weight 2^(63-p): 64 zero
  bits, then 2/pi's bits of weight 2^-1, 2^-2, ..."""
  v = Fraction(2) / _pi(32 * n + 64) * 2**(32 * n - 64)
  w = v.numerator // v.denominator
  return tuple((w >> (32 * (n - 1 - i))) & M32 for i in range(n))


def _series(coef: Callable[[int], Fraction], xmax: float, f: FloatSpec, start: int) -> list[float]:
  """coef(start), coef(start+1), ... while |coef(n)| * xmax^(n-start) >= 2^-eps."""
  out, n = [], start
  while n == start or abs(coef(n)) * Fraction(xmax) ** (n - start) >= Fraction(1, 2**f.eps):
    out.append(_rnd(coef(n), f))
    n += 1
  return out


@dataclass(frozen=True)
class _Consts:
  ln2: tuple[float, float]
  c1: tuple[float, float]     # 2/ln2
  pio2: tuple[float, float]   # pi/2 rounded, and the rest
  exp2: list[float]
  log2: list[float]
  sin: list[float]
  cos: list[float]


@functools.cache
def _consts(f: FloatSpec) -> _Consts:
  pio2, fact = _pi(256) / 2, math.factorial
  return _Consts(
    _hi_lo(LN2, f), _hi_lo(2 / LN2, f), (_rnd(pio2, f), _rnd(pio2 - Fraction(_rnd(pio2, f)), f)),
    _series(lambda n: LN2**n / fact(n), 0.5, f, 2),                       # R(s) = sum_{n>=2} ln2^n s^(n-2) / n!
    _series(lambda n: 2 / LN2 / (2 * n + 1), 0.0295, f, 1),               # log2(m) = 2/ln2 (f + f^3/3 + ...), f^2 <= 0.0295
    _series(lambda n: Fraction((-1)**n, fact(2 * n + 1)), 0.617, f, 1),   # sin r = r + r^3 S(r^2), r^2 <= 0.617
    _series(lambda n: Fraction((-1)**n, fact(2 * n)), 0.617, f, 2))       # cos r = 1 - r^2/2 + r^4 C(r^2)


# ** exact arithmetic on UOps **

def _split(x: UOp, f: FloatSpec) -> tuple[UOp, UOp]:
  """x = hi + lo exactly: hi with f.half significant bits (the low mantissa bits masked off), lo the rest."""
  hi = (x.bitcast(f.ut) & (((1 << f.bits) - 1) ^ ((1 << (f.mant + 1 - f.half)) - 1))).bitcast(f.dt)
  return hi, x - hi


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  bb = (s := a + b) - a
  return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:  # a + b as (s, e) exactly, for |a| >= |b|
  return (s := a + b), b - (s - a)


def _two_prod(a: UOp, b: UOp, f: FloatSpec) -> tuple[UOp, UOp]:
  """a * b as (p, e), exact but for the low halves' product (for float64: ~2^-105 relative)."""
  (ah, al), (bh, bl), p = _split(a, f), _split(b, f), a * b
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _mul_const(x: UOp, c: tuple[float, float], f: FloatSpec) -> tuple[UOp, UOp]:
  """x * (c[0] + c[1]) as (p, e), as _two_prod with c[0] split in advance."""
  (c1, c2), (xh, xl), p = _hi_lo(c[0], f), _split(x, f), x * c[0]
  return p, (((xh * c1 - p) + xh * c2 + xl * c1) + xl * c2) + x * c[1]


def _poly(x: UOp, coeffs: list[float]) -> UOp:
  acc = x.const_like(coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * x + c
  return acc


def _pow2(n: UOp, f: FloatSpec) -> UOp:
  """2^n for an integer n (of f.it) in the normal exponent range."""
  return ((n + f.bias) << f.mant).bitcast(f.dt)


# ** the functions **

def xexp2(d: UOp, f: FloatSpec) -> UOp:
  c = _consts(f)
  x = (d < f.lim).where((d > -f.lim).where(d, 0.0), 0.0)  # and NaN to 0: the result is replaced below
  magic = 1.5 * 2.0**f.mant
  q = (x + magic) - magic  # x rounded to an integer
  s = x - q
  (sh, sl), (l1, l2) = _split(s, f), c.ln2
  u, e = _fast_two_sum(x.const_like(1.0), sh * l1)
  u = u + (e + ((sl * l1 + s * l2) + s * s * _poly(s, c.exp2)))
  qi = q.cast(f.it)
  off = 1 << f.lim.bit_length()
  q1 = ((qi + off) >> 1) - off // 2
  y = u * _pow2(q1, f) * _pow2(qi - q1, f)
  return d.ne(d).where(math.nan, (d < f.lim).where((d > -f.lim).where(y, 0.0), math.inf))


def xlog2(d: UOp, f: FloatSpec) -> UOp:
  c = _consts(f)
  scale = f.mant + 9
  tiny = d < 2.0**(1 - f.bias)
  bits = tiny.where(d * 2.0**scale, d).bitcast(f.ut)
  mask = (1 << f.mant) - 1
  mbits = bits & mask
  big = mbits > (math.trunc(math.sqrt(2) * 2**f.mant) & mask)  # m >= sqrt(2): m/2 instead
  m = (mbits | big.where((f.bias - 1) << f.mant, f.bias << f.mant)).bitcast(f.dt)
  ex = ((bits >> f.mant).cast(f.it) + big.where(1 - f.bias, -f.bias) - tiny.where(scale, 0)).cast(f.dt)
  num, bh = m - 1.0, m + 1.0
  bl = m - (bh - 1.0)  # m + 1 = bh + bl exactly
  fq = num / bh
  p, pe = _two_prod(fq, bh, f)
  fl = (((num - p) - pe) - fq * bl) / bh  # f = fq + fl: the division's exact remainder, divided
  z = fq * fq
  (c1, c1l), (fh, fm) = c.c1, _split(fq, f)
  s, se = _two_sum(ex, fh * c1)
  y = s + (se + ((fm * c1 + (fq * c1l + fl * (c1 + c1l))) + fq * z * _poly(z, c.log2)))
  y = (d < 0.0).where(math.nan, d.eq(0.0).where(-math.inf, d.eq(math.inf).where(math.inf, y)))
  return d.ne(d).where(math.nan, y)


def _window(pos: UOp, f: FloatSpec, words: tuple[int, ...]) -> list[UOp]:
  """The f.limbs 32-bit words of the stream `words` from bit pos (U64) on, most significant first: the aligned words
  by a shifter of WHEREs over the bits of pos >> 5, then shifted by pos & 31."""
  j, sh, need = pos >> 5, pos & 31, f.limbs + 1
  stages = (len(words) - need).bit_length()
  sizes = [need]
  for b in range(stages): sizes.append(sizes[-1] + (1 << b))
  arr = [pos.const_like(words[i] if i < len(words) else 0) for i in range(sizes[-1])]
  for b in reversed(range(stages)):
    take = ((j >> b) & 1).ne(0)
    arr = [a if a is o else take.where(o, a) for a, o in zip(arr[:sizes[b]], arr[1 << b:(1 << b) + sizes[b]])]
  return [(((arr[n] << 32) | arr[n + 1]) << sh) >> 32 for n in range(f.limbs)]


def reduce_pio2(x: UOp, f: FloatSpec) -> tuple[UOp, UOp, UOp]:
  """Finite x >= 1/2 as k*pi/2 + rh + rl: (k mod 4 as U64, rh, rl), |rh| <= pi/4. With x = M * 2^E, M an integer,
  only the bits of 2/pi from weight 2^(1-E) down count in x * 2/pi mod 4 (the others give multiples of 4): it is the
  low 32*limbs bits of M times those bits W as an integer, times 2^(2-32*limbs), off by less than M * 2^(2-32*limbs)."""
  words = two_over_pi_words(((f.bias + 62 - f.mant) >> 5) + f.limbs + 1)
  bits = x.bitcast(f.ut).cast(U64)
  mant = (bits & ((1 << f.mant) - 1)) | (1 << f.mant)
  w = _window((bits >> f.mant) + (62 - f.bias - f.mant), f, words)[::-1]  # starts at weight 2^(1-E); least significant first
  m = [mant & M32] + ([mant >> 32] if f.mant >= 32 else [])
  prods = {(a, b): m[a] * w[b] for a in range(len(m)) for b in range(f.limbs) if a + b < f.limbs}
  limbs, carry = [], bits.const_like(0)
  for k in range(f.limbs):
    acc = carry
    for (a, b), p in prods.items():
      if a + b == k: acc = acc + (p & M32)
      if a + b == k - 1: acc = acc + (p >> 32)
    limbs.append(acc & M32)
    carry = acc >> 32
  top = (limbs[-1] + (1 << 29)) & M32  # + 1/2: k is x * 2/pi rounded
  # the fraction x * 2/pi - k, in [-1/2, 1/2): pieces of f.piece bits (value, weight of its last bit), summed exactly
  ints = [(top & ((1 << 30) - 1), 30, -30)] + [(limbs[i], 32, 2 + 32 * (i - f.limbs)) for i in range(f.limbs - 2, -1, -1)]
  pieces = [(v if f.piece >= n else (v >> s) & ((1 << f.piece) - 1), lsb + s) for v, n, lsb in ints for s in reversed(range(0, n, f.piece))]
  pieces = [(v, lsb) for v, lsb in pieces if lsb >= -3 * (f.mant + 1) - 8]
  hi, lo = pieces[0][0].cast(f.dt) * 2.0**pieces[0][1] - 0.5, x.const_like(0.0)
  for v, lsb in pieces[1:]:
    hi, e = _two_sum(hi, v.cast(f.dt) * 2.0**lsb)
    lo = lo + e
  pio2 = _consts(f).pio2
  p, pe = _mul_const(hi, pio2, f)
  rh, rl = _fast_two_sum(p, pe + lo * pio2[0])
  return top >> 30, rh, rl


def xsin(d: UOp, f: FloatSpec) -> UOp:
  c = _consts(f)
  sign = 1 << (f.bits - 1)
  bits = d.bitcast(f.ut)
  ax = (bits & (sign - 1)).bitcast(f.dt)
  small, finite = ax < 0.78, ax < math.inf
  k, rh, rl = reduce_pio2(finite.where(small.where(1.0, ax), 1.0), f)
  k, rh, rl = small.where(0, k), small.where(ax, rh), small.where(0.0, rl)
  z = rh * rh
  sinv = rh + (rh * z * _poly(z, c.sin) + rl * (1.0 - 0.5 * z))
  hh, hl = _two_prod(rh, rh, f)
  w, we = _fast_two_sum(rh.const_like(1.0), hh * -0.5)  # 1 - r^2/2 = w + we
  cosv = w + ((we - (0.5 * hl + rh * rl)) + z * z * _poly(z, c.cos))
  v = (k & 1).ne(0).where(cosv, sinv)
  v = (k & 2).ne(0).where(-v, v)
  v = (v.bitcast(f.ut) ^ (bits & sign)).bitcast(f.dt)  # sin(-x) = -sin(x), -0.0 included
  return finite.where(v, math.nan)


FUNCTIONS: dict[Ops, Callable[[UOp, FloatSpec], UOp]] = {Ops.EXP2: xexp2, Ops.LOG2: xlog2, Ops.SIN: xsin}


# ** the rewrite pass **

def _decompose(ctx: frozenset[DType], x: UOp, d: UOp) -> UOp | None:
  dt = x.dtype
  if dt.scalar() not in ctx: return None
  if dt.count > 1:  # lane by lane (expand leaves these ops scalar)
    return UOp(Ops.VECTORIZE, dt, tuple(UOp(Ops.GEP, d.dtype.scalar(), (d,), (i,)).alu(x.op) for i in range(dt.count)))
  if dt in SPECS: return FUNCTIONS[x.op](d, SPECS[dt])
  wide = dtypes.float64 if dt is dtypes.weakfloat else dtypes.float32  # in float32 (decomposed if it is in dts too)
  return d.cast(wide).alu(x.op).cast(dt)


pm_transcendental = PatternMatcher([(UPat(tuple(FUNCTIONS), src=(UPat.var("d"),), name="x"), _decompose)])
# what a CPU decomposes before its lanes are expanded: SIN stays a call per lane, as its argument reduction needs 64-bit
# integer products, which AVX2 has no vector form of
VECTOR_FUNCTIONS = (Ops.EXP2, Ops.LOG2)
pm_vector_transcendental = PatternMatcher([(UPat(VECTOR_FUNCTIONS, src=(UPat.var("d"),), name="x"), _decompose)])


def transcendental_dtypes(lacking: Iterable[DType] = ()) -> frozenset[DType]:
  """The float dtypes whose EXP2, LOG2 and SIN a renderer decomposes: those it has no instruction for (`lacking`),
  and with TRANSCENDENTAL>=2 every float dtype."""
  return frozenset((*dtypes.floats, dtypes.weakfloat)) if TRANSCENDENTAL >= 2 else frozenset(lacking)


def decompose_transcendentals(ast: UOp, dts: Iterable[DType], vectors: bool = False) -> UOp:
  """The kernel IR under `ast` with every EXP2, LOG2 and SIN of the dtypes `dts` written as plain ALU ops. vectors:
  only EXP2 and LOG2, before the lanes are expanded, which then makes them vector ops."""
  dts, ops = frozenset(dts), VECTOR_FUNCTIONS if vectors else tuple(FUNCTIONS)
  if not dts or not any(u.op in ops and u.dtype.scalar() in dts for u in ast.toposort()): return ast
  pm, name = (pm_vector_transcendental, "decompose transcendentals for vectors") if vectors else (pm_transcendental, "decompose transcendentals")
  return graph_rewrite(ast, pm, ctx=dts, name=name)
