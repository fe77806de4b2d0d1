"""Elementwise math: broadcasting and dtype promotion, then ALU ops; transcendental functions from exp2/log2/sin."""
from __future__ import annotations

import builtins  # builtins.float in annotations: in ElementwiseMixin's body `float` is the method
import functools
import math
import operator
from typing import TYPE_CHECKING, Any, Callable

from tinyhybrid.dtype import DType, dtypes, least_upper_dtype, least_upper_float, strong_dtype
from tinyhybrid.gradient import grad_rule, with_gradient
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, resolve, sint_eq

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Operand = Any  # Tensor | int | float | bool


_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}


def _in_float32(fn: Callable) -> Callable:
  """A float function of self (ints become floats) that half, bfloat16 and fp8 compute in float32 and round once at
  the end, as torch does: their intermediates would round at every step (and x*x overflows half at 256)."""
  @functools.wraps(fn)
  def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    x = self._float()
    if x.dtype.itemsize < 4: return fn(x.cast(dtypes.float32), *args, **kwargs).cast(x.dtype)
    return fn(x, *args, **kwargs)
  return wrapper


def _int_pow_const(a: Tensor, n: int) -> Tensor:
  """a ** n for an int n >= 0 by repeated squaring (exact for ints, and wrapping as torch's do)."""
  out: Tensor | None = None
  while n:
    if n & 1: out = a if out is None else out * a
    n >>= 1
    if n: a = a * a
  return out if out is not None else a.ones_like()


def _int_pow(a: Tensor, b: Tensor) -> Tensor:
  """Integer a ** b elementwise, exact: squaring over b's bits. A negative b gives 0 but for a base of 1 or -1."""
  out, sq, e = a.ones_like(), a, b.abs()
  for i in range(8 * b.dtype.itemsize - (0 if b.dtype._is_unsigned else 1)):
    out = ((e >> i) & 1).cast(dtypes.bool).where(out * sq, out)
    sq = sq * sq
  if b.dtype._is_unsigned: return out
  one, odd = a.ones_like(), (b & 1).cast(dtypes.bool)
  return (b < 0).where((a == 1).where(one, (a == -1).where(odd.where(-one, one), a.zeros_like())), out)


def _pow_float(a: Tensor, b: Tensor) -> Tensor:
  """Float a ** b (same dtype and shape) from exp2 and log2, with C's special cases. Half and bfloat16 work in float32,
  as torch does, so the log's rounding does not reach the result."""
  if a.dtype.itemsize < 4: return _pow_float(a.cast(dtypes.float32), b.cast(dtypes.float32)).cast(a.dtype)
  mag = (b * a.abs().log2()).exp2()
  integral = b == b.trunc()
  odd = integral & ((b * 0.5).trunc() != b * 0.5)  # inf and nan are not odd
  neg = a._sign_bit() & (a == a)  # -0.0 and -inf too: pow(-0.0, -1) is -inf
  # a negative base keeps the sign for odd exponents; a finite nonzero one with a fractional exponent has no real power
  signed = neg.where(odd.where(-mag, (integral | a.isinf() | (a == 0)).where(mag, math.nan)), mag)
  return ((b == 0) | (a == 1) | ((a == -1) & b.isinf())).where(1, signed)


def _log1p(e: Tensor) -> Tensor:
  """log(1 + e) without losing e where it is below 1's rounding: log(u) * e / (u - 1) with u = 1 + e (Goldberg)."""
  u = 1 + e
  return (u == 1).where(e, u.log() * e / (u - 1))


# ** derivative rules (gradient.with_gradient): torch's formulas, where the chain rule through a composite's pieces
# would meet 0 * inf at extreme inputs or take the other side of a kink **

@grad_rule
def _pow_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor, Tensor]:
  """d/da = b * a ** (b-1) (0 where b == 0), d/db = out * log(a) (0 where a == 0 and b >= 0)."""
  a, b = x
  return g * (b == 0).where(0, b * a.pow(b - 1)), g * ((a == 0) & (b >= 0)).where(0, out * a.log())
@grad_rule
def _pow_const_grad(g: Tensor, out: Tensor, x: list[Tensor], c: float) -> tuple[Tensor]: return (g * c * x[0].pow(c - 1),)
@grad_rule
def _rpow_grad(g: Tensor, out: Tensor, x: list[Tensor], c: float) -> tuple[Tensor]:
  """d/db c ** b = out * log(c); 0 where c == 0 and b >= 0."""
  if c == 0: return (g * (x[0] >= 0).where(0, out * -math.inf),)
  return (g * out * (math.log(c) if c > 0 else math.nan),)
@grad_rule
def _fmod_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor, Tensor]:
  return g, -g * x[0].div(x[1], rounding_mode="trunc")
@grad_rule
def _mod_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor, Tensor]:
  return g, -g * x[0].div(x[1], rounding_mode="floor")
@grad_rule
def _logaddexp_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor, Tensor]:
  a, b = x
  return g / (1 + (b - a).exp()), g / (1 + (a - b).exp())
@grad_rule
def _abs_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * x[0].sign(),)  # 0 at 0 and NaN
@grad_rule
def _copysign_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor, None]:
  return (x[0] == 0).where(0, g * out / x[0]), None  # none for the sign's source (torch)
@grad_rule
def _clip_grad(g: Tensor, out: Tensor, x: list[Tensor], lo: Any, hi: Any) -> tuple[Tensor, ...]:
  """torch's clamp: self gets it on [lo, hi], bounds included (none for NaN); a tensor lo where self < lo < hi, a
  tensor hi where self > hi or hi < lo. lo and hi are constants, None, or "t" for the next input."""
  it = iter(x[1:])
  lo_t = next(it) if lo == "t" else lo
  hi_t = next(it) if hi == "t" else hi
  keep = (x[0] >= lo_t) if lo_t is not None else None
  if hi_t is not None: keep = (x[0] <= hi_t) if keep is None else keep & (x[0] <= hi_t)
  grads: list[Tensor] = [keep.where(g, 0)]  # type: ignore[union-attr]  # clip has a bound: keep is set
  if lo == "t": grads.append(((x[0] < lo_t) & (lo_t < hi_t) if hi_t is not None else x[0] < lo_t).where(g, 0))
  if hi == "t": grads.append(((x[0] > hi_t) | (hi_t < lo_t) if lo_t is not None else x[0] > hi_t).where(g, 0))
  return tuple(grads)
@grad_rule
def _hardtanh_grad(g: Tensor, out: Tensor, x: list[Tensor], lo: float, hi: float) -> tuple[Tensor]:
  return (((x[0] <= lo) | (x[0] >= hi)).where(0, g),)  # unlike clamp, none at the bounds themselves; NaN passes (torch)
@grad_rule
def _hardsigmoid_grad(g: Tensor, out: Tensor, x: list[Tensor], alpha: float, beta: float) -> tuple[Tensor]:
  y = alpha * x[0] + beta
  return (((y > 0) & (y < 1)).where(g * alpha, 0),)
@grad_rule
def _hardswish_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]:
  return ((x[0] <= -3).where(0, (x[0] < 3).where(g * (x[0] * (1 / 3) + 0.5), g)),)
@grad_rule
def _sigmoid_grad(g: Tensor, s: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * s * (1 - s),)
@grad_rule
def _tanh_grad(g: Tensor, t: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * (1 - t * t),)
@grad_rule
def _softplus_grad(g: Tensor, out: Tensor, x: list[Tensor], beta: float, threshold: float) -> tuple[Tensor]:
  return ((x[0] * beta > threshold).where(g, g * (x[0] * beta).sigmoid()),)
@grad_rule
def _erf_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]:
  return (g * (2 / math.sqrt(math.pi)) * (-x[0] * x[0]).exp(),)
@grad_rule
def _asin_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * (1 - x[0] * x[0]).rsqrt(),)
@grad_rule
def _atan_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g / (1 + x[0] * x[0]),)
@grad_rule
def _atanh_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g / (1 - x[0] * x[0]),)
@grad_rule
def _asinh_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * (x[0] * x[0] + 1).rsqrt(),)
@grad_rule
def _acosh_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> tuple[Tensor]: return (g * (x[0] * x[0] - 1).rsqrt(),)


def _flat_args(xs: tuple) -> tuple:
  return tuple(xs[0]) if len(xs) == 1 and isinstance(xs[0], (list, tuple)) else xs


class ElementwiseMixin:
  __slots__ = ()

  # ** broadcasting and promotion **
  def _broadcast_shape(self: Tensor, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    padded = [(1,) * (n - len(s)) + s for s in shapes]
    out = []
    for dims in zip(*padded):
      big = {d for d in dims if resolve(d != 1)}
      if len(big) > 1:
        if not all(sint_eq(d, next(iter(big))) for d in big): raise ValueError(f"cannot broadcast shapes {shapes}")
        # equal sints built in other orders (i+j, j+i): the first, so the graph (and the schedule cache key) is the same every run
        out.append(next(d for d in dims if resolve(d != 1)))
      else: out.append(big.pop() if big else 1)
    return tuple(out)

  def _broadcasted(self: Tensor, y: Operand, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    from tinyhybrid.tensor import Tensor
    x = self
    if isinstance(y, UOp):
      # a bound Variable (or a sint of them) is a scalar tensor of its value; a weak one promotes like a Python int
      y = Tensor(y, device=x.device, dtype=strong_dtype(least_upper_dtype(x.dtype, y.dtype)) if match_dtype else None)
    elif not isinstance(y, Tensor):
      if not isinstance(y, (bool, int, float)): raise TypeError(f"invalid operand type {type(y).__name__} for a Tensor op")
      out_dt = strong_dtype(least_upper_dtype(x.dtype, dtypes.from_py(y))) if match_dtype else strong_dtype(dtypes.from_py(y))
      y = Tensor.full((), y, dtype=out_dt, device=x.device)
    elif y.device != x.device:
      # a deviceless const (Tensor(UOp.const(...))) takes the other operand's device
      if x.device is None or x.uop.device is None: x = Tensor(x.uop, device=y.device)
      elif y.device is None or y.uop.device is None: y = Tensor(y.uop, device=x.device)
      else: raise RuntimeError(f"operands are on different devices: {x.device} and {y.device}")
    if match_dtype and x.dtype is not y.dtype:
      out_dt = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out_dt), y.cast(out_dt)
    if reverse: x, y = y, x
    shape = self._broadcast_shape(x.shape, y.shape)
    return x.expand(shape), y.expand(shape)

  def _binop(self: Tensor, op: Ops, y: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._alu(op, b)

  # ** tinygrad's generic faces: an op by name, constants shaped like self, n-ary sums and products **
  def alu(self: Tensor, op: Ops, *src: Tensor) -> Tensor:
    """Apply an ALU op to self and `src` (of self's shape and dtype, as tinygrad's alu takes them)."""
    if op not in GroupOp.AnyALU: raise ValueError(f"{op} is not an ALU op")
    return self._alu(op, *src)
  def const_like(self: Tensor, b: Any, dtype: DType | None = None) -> Tensor:
    """b in self's shape and dtype (or dtype), on self's device; on sharded devices, sharded as self is."""
    from tinyhybrid.tensor import Tensor
    dt = dtype if dtype is not None else self.dtype
    if type(self.device) is tuple and self.uop.axis is not None: return Tensor.full(self.shape, b, dtype=dt).shard(self.device, self.uop.axis)
    return Tensor.full(self.shape, b, dtype=dt, device=self.device)
  def ufix(self: Tensor, x: Operand) -> Tensor:
    """`x` as a tensor that combines with self: a Tensor stays as it is, a constant takes self's shape and dtype."""
    from tinyhybrid.tensor import Tensor
    return x if isinstance(x, Tensor) else self.const_like(x)
  def usum(self: Tensor, *xs: Operand) -> Tensor:
    """self + each of `xs` (or of one list of them); for bool, their `|`."""
    return functools.reduce(operator.or_ if self.dtype is dtypes.bool else operator.add, _flat_args(xs), self)
  def uprod(self: Tensor, *xs: Operand) -> Tensor:
    """self * each of `xs` (or of one list of them); for bool, their `&`."""
    return functools.reduce(operator.and_ if self.dtype is dtypes.bool else operator.mul, _flat_args(xs), self)

  # ** arithmetic **
  def add(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.ADD, x, reverse)
  def mul(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.MUL, x, reverse)
  def sub(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.ADD, b.neg())
  def neg(self: Tensor) -> Tensor: return self.logical_not() if self.dtype is dtypes.bool else self.mul(-1)
  def div(self: Tensor, x: Operand, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints become floats); rounding_mode 'trunc' or 'floor' rounds the quotient (ints divide exactly)."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise RuntimeError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    a, b = self._broadcasted(x, reverse)
    if rounding_mode is not None:
      if a.dtype._is_int: return a._alu(Ops.FLOORDIV if rounding_mode == "floor" else Ops.CDIV, b)
      if not a.dtype._is_float: a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
      # the true quotient (FDIV), not a * (1/b): an ulp below an integer would round to the wrong one
      return a._floor_div(b) if rounding_mode == "floor" else a._alu(Ops.FDIV, b).trunc()
    # ints (weak ones too: Tensor(3) / Tensor(2)) divide in the default float, as in tinygrad
    if not a.dtype._is_float: a, b = a.cast(least_upper_float(strong_dtype(a.dtype))), b.cast(least_upper_float(strong_dtype(b.dtype)))
    return a._alu(Ops.MUL, b.reciprocal())
  def mod(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    """Python's (and torch's remainder) %: the sign follows the divisor; -1 % inf is inf."""
    a, b = self._broadcasted(x, reverse)
    if a.dtype._is_int: return a._alu(Ops.FLOORMOD, b)
    r = a._fmod(b)
    return with_gradient(((r != 0) & ((b < 0) != (r < 0))).where(r + b, r), (a, b), _mod_grad)
  def idiv(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    """Division rounded toward zero (C's), as tinygrad's idiv; `//` rounds down, as Python and torch do."""
    return self.div(x, reverse, rounding_mode="trunc")
  def reciprocal(self: Tensor) -> Tensor: return self._float()._alu(Ops.RECIPROCAL)
  def maximum(self: Tensor, x: Operand) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.MAX, b)
  def minimum(self: Tensor, x: Operand) -> Tensor:
    a, b = self._broadcasted(x)
    # floats through MAX, so a tie splits the gradient in half and a NaN wins, as in torch
    return -((-a)._alu(Ops.MAX, -b)) if a.dtype._is_float else (a < b).where(a, b)
  def pow(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    """self ** x with C's (and torch's) special cases: x ** 0 == 1 and 1 ** y == 1 even for NaN, a negative base with a
    fractional exponent is NaN, 0 ** negative is inf (signed for odd exponents). Ints stay ints (exactly, wrapping as
    torch does); an int base with a negative int constant exponent is an error, as in tinygrad."""
    a, b = self._broadcasted(x, reverse)
    const = x if isinstance(x, (int, float)) and not isinstance(x, bool) else None  # the exponent, or (reverse) the base
    if not a.dtype._is_float and a.dtype is not dtypes.bool:
      if const is not None and not reverse:
        if isinstance(x, int) and x < 0:
          raise RuntimeError(f"pow: an integer base ({a.dtype}, shape {a.shape}) needs a float for the negative exponent {x}")
        return _int_pow_const(a, x)
      return _int_pow(a, b)
    if a.dtype is dtypes.bool: a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    if const is None: return with_gradient(_pow_float(a, b), (a, b), _pow_grad)
    if reverse: return with_gradient(_pow_float(a, b), (b,), _rpow_grad, float(const))
    if const == 0: return (a == a).where(a.ones_like(), a.ones_like())  # 1, and a in the graph for a gradient of 0
    # small integer exponents multiply, and +-0.5 are (r)sqrt, as torch computes them (sqrt(-0.0) is -0.0, and a
    # negative base is NaN, where C's pow(-inf, 0.5) is inf)
    if float(const).is_integer() and abs(const) <= 64: out = _int_pow_const(a, abs(int(const)))
    elif abs(const) == 0.5: out = a.sqrt()
    else: out = None
    out = _pow_float(a, b) if out is None else out.reciprocal() if const < 0 else out
    return with_gradient(out, (a,), _pow_const_grad, float(const))
  def _float(self: Tensor) -> Tensor: return self if self.dtype._is_float else self.cast(least_upper_float(self.dtype))
  def _sign_bit(self: Tensor) -> Tensor:
    """Whether each float's sign bit is set: true for -0.0 and -nan too, which no comparison tells."""
    ut = _UINT_OF_SIZE[self.dtype.itemsize]
    return (self.bitcast(ut) >> (8 * ut.itemsize - 1)) != 0

  # ** comparisons **
  def __lt__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPLT, x)
  def __gt__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPLT, x, reverse=True)
  def __le__(self: Tensor, x: Operand) -> Tensor: return self._le(x, False)
  def __ge__(self: Tensor, x: Operand) -> Tensor: return self._le(x, True)
  def _le(self: Tensor, x: Operand, reverse: bool) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    # a NaN is neither less nor greater nor equal (so not(a > b) is not a <= b for floats)
    return (a._alu(Ops.CMPLT, b) | a._alu(Ops.CMPEQ, b)) if a.dtype._is_float else b._alu(Ops.CMPLT, a).logical_not()
  def __eq__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPEQ, x)  # type: ignore[override]
  def __ne__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPNE, x)  # type: ignore[override]
  def eq(self: Tensor, x: Operand) -> Tensor: return self == x
  def ne(self: Tensor, x: Operand) -> Tensor: return self != x
  def lt(self: Tensor, x: Operand) -> Tensor: return self < x
  def gt(self: Tensor, x: Operand) -> Tensor: return self > x
  def le(self: Tensor, x: Operand) -> Tensor: return self <= x
  def ge(self: Tensor, x: Operand) -> Tensor: return self >= x
  def logical_not(self: Tensor) -> Tensor: return self.cast(dtypes.bool)._binop(Ops.CMPNE, True)
  def isnan(self: Tensor) -> Tensor: return self != self
  def isinf(self: Tensor, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    return ((self == math.inf) if detect_positive else self.zeros_like(dtype="bool")) | ((self == -math.inf) if detect_negative else False)
  def isfinite(self: Tensor) -> Tensor: return (self.isinf() | self.isnan()).logical_not()

  def where(self: Tensor, x: Operand, y: Operand) -> Tensor:
    """self ? x : y, broadcasting all three."""
    from tinyhybrid.tensor import Tensor
    cond = self.cast(dtypes.bool)
    if not isinstance(x, Tensor) and not isinstance(y, Tensor):
      dt = strong_dtype(least_upper_dtype(dtypes.from_py(x), dtypes.from_py(y)))
      x = Tensor.full((), x, dtype=dt, device=self.device)
    if isinstance(x, Tensor): xx, yy = x._broadcasted(y)
    else: yy, xx = y._broadcasted(x)  # type: ignore[union-attr]
    shape = self._broadcast_shape(cond.shape, xx.shape)
    return cond.expand(shape)._wrap_alu3(xx.expand(shape), yy.expand(shape))

  def _wrap_alu3(self: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return a._wrap(UOp(Ops.WHERE, a.dtype, (self.uop, a.uop, b.uop)))

  # ** bitwise **
  def _bitwise(self: Tensor, op: Ops, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    # RuntimeError, as torch and tinygrad raise: the operands' common dtype decides (int & 1.5 is float too)
    if a.dtype._is_float or (op in (Ops.SHL, Ops.SHR) and a.dtype is dtypes.bool):
      raise RuntimeError(f"{op.name.lower()}: needs int{' or bool' if op not in (Ops.SHL, Ops.SHR) else ''} operands, got {a.dtype} "
                         f"(from {self.dtype} and {getattr(x, 'dtype', type(x).__name__)}) with shapes {self.shape} and {a.shape}")
    return a._alu(op, b)
  def bitwise_and(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.AND, x, reverse)
  def bitwise_or(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.OR, x, reverse)
  def bitwise_xor(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.XOR, x, reverse)
  def bitwise_not(self: Tensor) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not()
    if self.dtype._is_float: raise RuntimeError(f"bitwise_not: needs an int or bool tensor, got {self.dtype}, shape {self.shape}")
    return self ^ (self.dtype.max if self.dtype._is_unsigned else -1)
  def lshift(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.SHL, x, reverse)
  def rshift(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._bitwise(Ops.SHR, x, reverse)

  # ** unary math, built from the ALU primitives as tinygrad does **
  @_in_float32
  def exp2(self: Tensor) -> Tensor: return self._alu(Ops.EXP2)
  @_in_float32
  def log2(self: Tensor) -> Tensor: return self._alu(Ops.LOG2)
  @_in_float32
  def exp(self: Tensor) -> Tensor: return (self * (1 / math.log(2))).exp2()
  @_in_float32
  def log(self: Tensor) -> Tensor: return self.log2() * math.log(2)
  @_in_float32
  def log10(self: Tensor) -> Tensor: return self.log2() * math.log10(2)
  def sqrt(self: Tensor) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self: Tensor) -> Tensor: return self.sqrt().reciprocal()
  @_in_float32
  def sin(self: Tensor) -> Tensor: return self._alu(Ops.SIN)
  @_in_float32
  def cos(self: Tensor) -> Tensor:
    # 1 - 2 sin(x/2)^2: halving is exact, so sin's own argument reduction serves (sin(pi/2 - x) loses pi/2 to x's
    # rounding once |x| is large)
    s = (self * 0.5).sin()
    return 1 - 2 * s * s
  @_in_float32
  def tan(self: Tensor) -> Tensor: return self.sin() / self.cos()
  def trunc(self: Tensor) -> Tensor: return self._alu(Ops.TRUNC) if self.dtype._is_float else self
  def floor(self: Tensor) -> Tensor:
    if not self.dtype._is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self: Tensor) -> Tensor:
    if not self.dtype._is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self: Tensor) -> Tensor:
    """Rounds half to even, as torch and numpy do."""
    if not self.dtype._is_float: return self
    f = self.floor()
    diff = self - f
    even = (f % 2) == 0
    return (diff > 0.5).where(f + 1, (diff < 0.5).where(f, even.where(f, f + 1)))
  def abs(self: Tensor) -> Tensor:
    if self.dtype is dtypes.bool or self.dtype._is_unsigned: return self
    if not self.dtype._is_float: return (self < 0).where(-self, self)
    # the sign bit cleared: abs(-0.0) is 0.0 and abs(-nan) is nan; d/dx is sign(x), 0 at 0 (torch)
    ut = _UINT_OF_SIZE[self.dtype.itemsize]
    out = (self.bitcast(ut) & ((1 << (8 * ut.itemsize - 1)) - 1)).bitcast(self.dtype)
    return with_gradient(out, (self,), _abs_grad)
  def sign(self: Tensor) -> Tensor:
    """-1, 0 or 1 (0 for NaN, as torch); its gradient is 0."""
    if self.dtype is dtypes.bool: return self
    if self.dtype._is_unsigned: return (self > 0).cast(self.dtype)
    return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
  def square(self: Tensor) -> Tensor: return self * self
  def clip(self: Tensor, min_: Operand | None = None, max_: Operand | None = None) -> Tensor:
    """min(max(self, min_), max_) (so max_ wins where min_ > max_, and NaN stays NaN); the gradient is 1 on [min_, max_],
    bounds included, as torch's clamp."""
    if min_ is None and max_ is None: raise RuntimeError("clip: at least one of min_ and max_ must be given")
    from tinyhybrid.tensor import Tensor
    x, lo, hi = self, min_, max_
    # tensor bounds: all three in one shape and dtype first, so the gradient rule's inputs are the where's own operands
    for b in (min_, max_):
      if isinstance(b, Tensor): x = x._broadcasted(b)[0]
    if isinstance(lo, Tensor): lo = x._broadcasted(lo)[1]
    if isinstance(hi, Tensor): hi = x._broadcasted(hi)[1]
    ret = (x < lo).where(lo, x) if lo is not None else x
    ret = (ret > hi).where(hi, ret) if hi is not None else ret
    if not ret.dtype._is_float or ret.dtype is not x.dtype: return ret
    tensors = [b for b in (lo, hi) if isinstance(b, Tensor)]
    # a NaN bound makes the result NaN (torch)
    for b in tensors: ret = b.isnan().where(b, ret)
    bounds = ("t" if isinstance(v, Tensor) else v if v is None else float(v) for v in (min_, max_))  # "t": the next input
    return with_gradient(ret, (x, *tensors), _clip_grad, *bounds)
  clamp = clip
  def lerp(self: Tensor, end: Tensor, weight: Operand) -> Tensor: return self + (end - self) * weight

  @_in_float32
  def asin(self: Tensor) -> Tensor:
    # a polynomial-free form from atan: asin(x) = atan(x / sqrt(1 - x^2))
    x = self
    return with_gradient((x / (1 - x * x).sqrt()).atan(), (x,), _asin_grad)
  @_in_float32
  def acos(self: Tensor) -> Tensor: return math.pi / 2 - self.asin()
  @_in_float32
  def atan(self: Tensor) -> Tensor:
    """Range reduction to |x| <= tan(pi/12), then a short odd series (float32 accurate)."""
    x = self
    a = x.abs()
    inv = a > 1
    a = inv.where(a.reciprocal(), a)
    # atan(a) = pi/6 + atan((a*sqrt(3) - 1) / (a + sqrt(3))) for a > 2 - sqrt(3)
    big = a > 2 - math.sqrt(3)
    r = big.where((a * math.sqrt(3) - 1) / (a + math.sqrt(3)), a)
    r2 = r * r
    series = r * (1 + r2 * (-1 / 3 + r2 * (1 / 5 + r2 * (-1 / 7 + r2 * (1 / 9 + r2 * (-1 / 11))))))
    out = big.where(math.pi / 6 + series, series)
    out = inv.where(math.pi / 2 - out, out)
    return with_gradient((x < 0).where(-out, out), (x,), _atan_grad)
  @_in_float32
  def erf(self: Tensor) -> Tensor:
    """Abramowitz-Stegun 7.1.26 (absolute error < 1.5e-7)."""
    x = self
    t = 1.0 / (1.0 + 0.3275911 * x.abs())
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    out = x.sign() * (1 - poly * (-x * x).exp())
    return with_gradient(out, (x,), _erf_grad)
  def copysign(self: Tensor, other: Operand) -> Tensor:
    """The magnitude of self with the sign of other (its sign bit: -0.0 and -nan count as negative)."""
    a, b = self._broadcasted(other)
    if not a.dtype._is_float: return (b < 0).where(-a.abs(), a.abs())
    mag = a.abs()
    # torch's gradient: out / a, and 0 where a == 0; none for other
    return with_gradient(b._sign_bit().where(-mag, mag), (a, b), _copysign_grad)
  def fmod(self: Tensor, x: Operand) -> Tensor:
    """C's remainder: the sign follows the dividend."""
    a, b = self._broadcasted(x)
    if a.dtype._is_int: return a._alu(Ops.CMOD, b)
    return with_gradient(a._fmod(b), (a, b), _fmod_grad)
  def _fmod(self: Tensor, b: Tensor) -> Tensor:
    # a finite dividend over an infinite divisor is itself (the formula would give inf * 0). The quotient is a true
    # division (FDIV): a * (1/b) can land an ulp below an integer and truncate wrong. NOTE: a - b * trunc(a/b) still
    # rounds once a/b needs more than the dtype's mantissa, where C's fmod is exact
    return (b.isinf() & self.isfinite()).where(self, self - b * self._alu(Ops.FDIV, b).trunc())
  def _floor_div(self: Tensor, b: Tensor) -> Tensor:
    """Float a // b as torch (and Python) round it: (a - a % b) / b, so -1 // inf is -1; the result has no gradient."""
    a = self.detach()
    b = b.detach()
    r = a._fmod(b)
    q = (a - r)._alu(Ops.FDIV, b)
    q = ((r != 0) & ((b < 0) != (r < 0))).where(q - 1, q)
    f = q.floor()
    q = (q != 0).where(f + ((q - f) > 0.5).cast(q.dtype), q.zeros_like().copysign(a / b))
    return (b == 0).where(a / b, q)
  @_in_float32
  def logaddexp(self: Tensor, other: Operand) -> Tensor:
    """log(exp(self) + exp(other)) without overflow: max + log1p(exp(-|self - other|)); equal infinities are themselves."""
    a, b = self._broadcasted(other)
    out = (a.isinf() & (a == b)).where(a, a.maximum(b) + _log1p((-(a - b).abs()).exp()))
    return with_gradient(out, (a, b), _logaddexp_grad)
  def isclose(self: Tensor, other: Operand, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| for finite values; infinities are close only to themselves, NaN only to
    NaN and only with equal_nan (torch's rules)."""
    a, b = self._broadcasted(other)
    if a.dtype is dtypes.bool: return a == b
    if not a.dtype._is_float: return (a == b) | ((a - b).abs() <= atol + rtol * b.abs())
    close = a.isfinite() & b.isfinite() & ((a - b).abs() <= atol + rtol * b.abs())
    close = close | ((a.isinf() | b.isinf()) & (a == b))
    return close | (a.isnan() & b.isnan()) if equal_nan else close
  def is_floating_point(self: Tensor) -> bool: return self.dtype._is_float
  # dtype shortcuts, as in torch and tinygrad
  def float(self: Tensor) -> Tensor: return self.cast(dtypes.float32)
  def half(self: Tensor) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self: Tensor) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self: Tensor) -> Tensor: return self.cast(dtypes.float64)
  def int(self: Tensor) -> Tensor: return self.cast(dtypes.int32)
  def long(self: Tensor) -> Tensor: return self.cast(dtypes.int64)
  def short(self: Tensor) -> Tensor: return self.cast(dtypes.int16)
  def bool(self: Tensor) -> Tensor: return self.cast(dtypes.bool)

  # ** activations **
  def relu(self: Tensor) -> Tensor: return (self <= 0).where(0, self)  # NaN stays NaN (and passes the gradient), as in torch
  # Activations carry torch's derivative (gradient.with_gradient) where the chain rule through their pieces would meet
  # 0 * inf at extreme inputs, or pick the other side of a kink; the others pick their branch with a double where,
  # so the branch not taken never sees an input that overflows. Under @_in_float32, self is float32 or wider.
  @_in_float32
  def sigmoid(self: Tensor) -> Tensor:
    x = self
    return with_gradient((1 + (x * (-1 / math.log(2))).exp2()).reciprocal(), (x,), _sigmoid_grad)
  @_in_float32
  def hardsigmoid(self: Tensor, alpha: builtins.float = 1 / 6, beta: builtins.float = 0.5) -> Tensor:
    x = self
    return with_gradient((alpha * x + beta).clip(0, 1), (x,), _hardsigmoid_grad, float(alpha), float(beta))
  @_in_float32
  def tanh(self: Tensor) -> Tensor:
    # (1 - e) / (1 + e) with e = exp(-2|x|), signed; for small |x|, where 1 - e would cancel (2 * sigmoid(2x) - 1
    # loses a tiny x to 1's rounding), the odd series to x^15: past the cut its next term is below the dtype's rounding
    x = self
    a = x.abs()
    e = (-2 * a).exp()
    big = (1 - e) / (1 + e)
    x2 = x * x
    poly = x2 * (-929569 / 638512875) + 21844 / 6081075
    for c in (-1382 / 155925, 62 / 2835, -17 / 315, 2 / 15, -1 / 3, 1): poly = c + x2 * poly
    small = a < (0.25 if x.dtype.itemsize <= 4 else 0.1)
    return with_gradient(small.where(x * poly, x._sign_bit().where(-big, big)), (x,), _tanh_grad)
  @_in_float32
  def sinh(self: Tensor) -> Tensor: return (self.exp() - self.neg().exp()) / 2
  @_in_float32
  def cosh(self: Tensor) -> Tensor: return (self.exp() + self.neg().exp()) / 2
  @_in_float32
  def atanh(self: Tensor) -> Tensor:
    x = self
    return with_gradient(((1 + x) / (1 - x)).log() / 2, (x,), _atanh_grad)
  @_in_float32
  def asinh(self: Tensor) -> Tensor:
    # odd, so it works on |x| (stable for large negative x); past 2**28 sqrt(x^2 + 1) is |x| to the last bit (and x^2
    # may overflow): log(2|x|)
    x = self
    a = x.abs()
    small = a < 2 ** 28
    sa = small.where(a, 0)
    mag = small.where((sa + (sa * sa + 1).sqrt()).log(), a.log() + math.log(2))
    return with_gradient(x._sign_bit().where(-mag, mag), (x,), _asinh_grad)
  @_in_float32
  def acosh(self: Tensor) -> Tensor:
    x = self
    small = x < 2 ** 28
    sx = small.where(x, 2)
    out = (x < 1).where(math.nan, small.where((sx + (sx * sx - 1).sqrt()).log(), x.log() + math.log(2)))
    return with_gradient(out, (x,), _acosh_grad)
  @_in_float32
  def gelu(self: Tensor, approximate: str = "tanh") -> Tensor:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (tinygrad's default), or with approximate="none" the exact
    x * Phi(x) from erf."""
    if approximate == "tanh": return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    if approximate == "none": return self * 0.5 * (1.0 + (self * (1 / math.sqrt(2))).erf())
    raise RuntimeError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
  @_in_float32
  def quick_gelu(self: Tensor) -> Tensor: return self * (self * 1.702).sigmoid()
  @_in_float32
  def silu(self: Tensor) -> Tensor: return self * self.sigmoid()
  swish = silu
  def relu6(self: Tensor) -> Tensor: return self.hardtanh(0, 6)
  @_in_float32
  def hardswish(self: Tensor) -> Tensor:
    x = self
    return with_gradient(x * (x + 3).clip(0, 6) * (1 / 6), (x,), _hardswish_grad)
  def leaky_relu(self: Tensor, neg_slope: builtins.float = 0.01) -> Tensor: return (self > 0).where(self, neg_slope * self)
  # the exponential branch is taken for x <= 0 (NaN takes the linear one, as in torch) and only sees those inputs
  def _neg_part(self: Tensor) -> Tensor: return (self <= 0).where(self, 0)
  @_in_float32
  def elu(self: Tensor, alpha: builtins.float = 1.0) -> Tensor: return (self <= 0).where(alpha * (self._neg_part().exp() - 1), self)
  @_in_float32
  def celu(self: Tensor, alpha: builtins.float = 1.0) -> Tensor:
    return (self <= 0).where(alpha * ((self._neg_part() / alpha).exp() - 1), self)
  @_in_float32
  def selu(self: Tensor, alpha: builtins.float = 1.67326, gamma: builtins.float = 1.0507) -> Tensor:
    return gamma * (self <= 0).where(alpha * (self._neg_part().exp() - 1), self)
  @_in_float32
  def softplus(self: Tensor, beta: builtins.float = 1.0, threshold: builtins.float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold (torch's); log1p-accurate for very
    negative x."""
    x = self
    bx = x * beta
    big = bx > threshold
    out = big.where(x, _log1p(big.where(0, bx).exp()) * (1 / beta))
    return with_gradient(out, (x,), _softplus_grad, float(beta), float(threshold))
  @_in_float32
  def mish(self: Tensor) -> Tensor: return self * self.softplus().tanh()
  def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())
  def hardtanh(self: Tensor, min_val: builtins.float = -1, max_val: builtins.float = 1) -> Tensor:
    x = self._float()
    return with_gradient(x.clip(min_val, max_val), (x,), _hardtanh_grad, float(min_val), float(max_val))
  @_in_float32
  def logsigmoid(self: Tensor) -> Tensor: return -(-self).softplus()

  # ** operators **
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self.div(x, rounding_mode="floor")  # rounds down, as Python and torch (idiv truncates)
  def __rfloordiv__(self, x): return self.div(x, True, rounding_mode="floor")
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __neg__(self): return self.neg()
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x, True)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x, True)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x, True)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return x.matmul(self)
