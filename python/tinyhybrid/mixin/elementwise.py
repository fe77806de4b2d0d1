"""Elementwise math: broadcasting and dtype promotion, then ALU ops; transcendental functions from exp2/log2/sin."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tinyhybrid.dtype import DType, dtypes, least_upper_dtype, least_upper_float, strong_dtype
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, sint_eq

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Operand = Any  # Tensor | int | float | bool


class ElementwiseMixin:
  __slots__ = ()

  # ** broadcasting and promotion **
  def _broadcast_shape(self: Tensor, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    n = max(len(s) for s in shapes)
    padded = [(1,) * (n - len(s)) + s for s in shapes]
    out = []
    for dims in zip(*padded):
      big = {d for d in dims if d != 1}
      if len(big) > 1:
        if not all(sint_eq(d, next(iter(big))) for d in big): raise ValueError(f"cannot broadcast shapes {shapes}")
        # equal sints built in other orders (i+j, j+i): the first, so the graph (and the schedule cache key) is the same every run
        out.append(next(d for d in dims if d != 1))
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
      raise ValueError(f"operands are on different devices: {x.device} and {y.device}")
    if match_dtype and x.dtype is not y.dtype:
      out_dt = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out_dt), y.cast(out_dt)
    if reverse: x, y = y, x
    shape = self._broadcast_shape(x.shape, y.shape)
    return x.expand(shape), y.expand(shape)

  def _binop(self: Tensor, op: Ops, y: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(y, reverse)
    return a._alu(op, b)

  # ** arithmetic **
  def add(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.ADD, x, reverse)
  def mul(self: Tensor, x: Operand, reverse: bool = False) -> Tensor: return self._binop(Ops.MUL, x, reverse)
  def sub(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.ADD, b.neg())
  def neg(self: Tensor) -> Tensor: return self.logical_not() if self.dtype is dtypes.bool else self.mul(-1)
  def div(self: Tensor, x: Operand, reverse: bool = False, rounding_mode: str | None = None) -> Tensor:
    """True division (ints become floats); rounding_mode 'trunc' or 'floor' divides ints exactly."""
    a, b = self._broadcasted(x, reverse)
    if rounding_mode is not None:
      if a.dtype._is_int:
        if rounding_mode == "floor": return a._alu(Ops.FLOORDIV, b)
        if rounding_mode == "trunc": return a._alu(Ops.CDIV, b)
      q = a.div(b)
      return q.floor() if rounding_mode == "floor" else q.trunc()
    if not a.dtype._is_float: a, b = a.cast(least_upper_float(a.dtype)), b.cast(least_upper_float(b.dtype))
    return a._alu(Ops.MUL, b.reciprocal())
  def mod(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if a.dtype._is_int: return a._alu(Ops.FLOORMOD, b)
    return a - b * (a / b).floor()
  def idiv(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    return a._alu(Ops.FLOORDIV, b) if a.dtype._is_int else (a / b).floor()
  def reciprocal(self: Tensor) -> Tensor: return self._float()._alu(Ops.RECIPROCAL)
  def maximum(self: Tensor, x: Operand) -> Tensor:
    a, b = self._broadcasted(x)
    return a._alu(Ops.MAX, b)
  def minimum(self: Tensor, x: Operand) -> Tensor:
    a, b = self._broadcasted(x)
    return (a < b).where(a, b)
  def pow(self: Tensor, x: Operand, reverse: bool = False) -> Tensor:
    a, b = self._broadcasted(x, reverse)
    if not a.dtype._is_float:
      # integer powers by repeated products when the exponent is a small non-negative constant
      if not reverse and isinstance(x, int) and 0 <= x <= 64:
        out = a.ones_like()
        for _ in range(x): out = out * a
        return out
      a, b = a.cast(dtypes.default_float), b.cast(dtypes.default_float)
    # sign handling: negative base with an integral exponent keeps the sign of (-1)**b
    mag = (b * a.abs().log2()).exp2()
    neg_base = a < 0
    odd = (b.abs() % 2) == 1
    integral = b == b.trunc()
    signed = neg_base.where(integral.where(odd.where(-mag, mag), math.nan), mag)
    return (a == 0).where((b == 0).where(1.0, (b < 0).where(math.inf, 0.0)), signed)
  def _float(self: Tensor) -> Tensor: return self if self.dtype._is_float else self.cast(least_upper_float(self.dtype))

  # ** comparisons **
  def __lt__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPLT, x)
  def __gt__(self: Tensor, x: Operand) -> Tensor: return self._binop(Ops.CMPLT, x, reverse=True)
  def __le__(self: Tensor, x: Operand) -> Tensor: return (self > x).logical_not()
  def __ge__(self: Tensor, x: Operand) -> Tensor: return (self < x).logical_not()
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
    if self.dtype._is_float: raise TypeError(f"{op.name.lower()}: bitwise ops need an int or bool tensor, got {self.dtype}")
    return self._binop(op, x, reverse)
  def bitwise_and(self: Tensor, x: Operand) -> Tensor: return self._bitwise(Ops.AND, x)
  def bitwise_or(self: Tensor, x: Operand) -> Tensor: return self._bitwise(Ops.OR, x)
  def bitwise_xor(self: Tensor, x: Operand) -> Tensor: return self._bitwise(Ops.XOR, x)
  def bitwise_not(self: Tensor) -> Tensor: return self.logical_not() if self.dtype is dtypes.bool else self ^ -1
  def lshift(self: Tensor, x: int) -> Tensor: return self._bitwise(Ops.SHL, x)
  def rshift(self: Tensor, x: int) -> Tensor: return self._bitwise(Ops.SHR, x)

  # ** unary math, built from the ALU primitives as tinygrad does **
  def exp2(self: Tensor) -> Tensor: return self._float()._alu(Ops.EXP2)
  def log2(self: Tensor) -> Tensor: return self._float()._alu(Ops.LOG2)
  def exp(self: Tensor) -> Tensor: return (self._float() * (1 / math.log(2))).exp2()
  def log(self: Tensor) -> Tensor: return self.log2() * math.log(2)
  def log10(self: Tensor) -> Tensor: return self.log2() * math.log10(2)
  def sqrt(self: Tensor) -> Tensor: return self._float()._alu(Ops.SQRT)
  def rsqrt(self: Tensor) -> Tensor: return self.sqrt().reciprocal()
  def sin(self: Tensor) -> Tensor: return self._float()._alu(Ops.SIN)
  def cos(self: Tensor) -> Tensor: return (math.pi / 2 - self._float()).sin()
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
    return (self < 0).where(-self, self)
  def sign(self: Tensor) -> Tensor: return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)
  def square(self: Tensor) -> Tensor: return self * self
  def clip(self: Tensor, min_: Operand | None = None, max_: Operand | None = None) -> Tensor:
    if min_ is None and max_ is None: raise ValueError("clip needs min_ or max_")
    t = self.maximum(min_) if min_ is not None else self
    return t.minimum(max_) if max_ is not None else t
  clamp = clip
  def lerp(self: Tensor, end: Tensor, weight: Operand) -> Tensor: return self + (end - self) * weight

  def asin(self: Tensor) -> Tensor:
    # a polynomial-free form from atan: asin(x) = atan(x / sqrt(1 - x^2))
    return (self / (1 - self * self).sqrt()).atan()
  def acos(self: Tensor) -> Tensor: return math.pi / 2 - self.asin()
  def atan(self: Tensor) -> Tensor:
    """Range reduction to |x| <= tan(pi/12), then a short odd series (float32 accurate)."""
    x = self._float()
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
    return (x < 0).where(-out, out)
  def erf(self: Tensor) -> Tensor:
    """Abramowitz-Stegun 7.1.26 (absolute error < 1.5e-7)."""
    x = self._float()
    t = 1.0 / (1.0 + 0.3275911 * x.abs())
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return x.sign() * (1 - poly * (-x * x).exp())
  def copysign(self: Tensor, other: Operand) -> Tensor:
    a, b = self._broadcasted(other)
    neg = (b < 0) | ((b == 0) & ((1 / b) < 0)) if b.dtype._is_float else b < 0
    return neg.where(-a.abs(), a.abs())
  def fmod(self: Tensor, x: Operand) -> Tensor:
    """C's remainder: the sign follows the dividend."""
    a, b = self._broadcasted(x)
    if a.dtype._is_int: return a._alu(Ops.CMOD, b)
    # a finite dividend over an infinite divisor is itself (the formula would give inf * 0)
    return (b.isinf() & a.isfinite()).where(a, a - b * (a / b).trunc())
  def logaddexp(self: Tensor, other: Operand) -> Tensor:
    a, b = self._broadcasted(other)
    m = a.maximum(b)
    return m + ((a - m).exp() + (b - m).exp()).log()
  def isclose(self: Tensor, other: Operand, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    a, b = self._broadcasted(other)
    close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs())
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
  def relu(self: Tensor) -> Tensor: return (self > 0).where(self, 0)
  def sigmoid(self: Tensor) -> Tensor: return (1 + (self._float() * (-1 / math.log(2))).exp2()).reciprocal()
  def hardsigmoid(self: Tensor, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor: return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  def tanh(self: Tensor) -> Tensor: return 2.0 * (2.0 * self._float()).sigmoid() - 1.0
  def sinh(self: Tensor) -> Tensor: return (self.exp() - self.neg().exp()) / 2
  def cosh(self: Tensor) -> Tensor: return (self.exp() + self.neg().exp()) / 2
  def atanh(self: Tensor) -> Tensor: return ((1 + self) / (1 - self)).log() / 2
  def asinh(self: Tensor) -> Tensor:
    # stable for large negative x: asinh(-x) = -asinh(x)
    a = self.abs()
    return self.sign() * (a + (a.square() + 1).sqrt()).log()
  def acosh(self: Tensor) -> Tensor: return (self + (self.square() - 1).sqrt()).log()
  def gelu(self: Tensor) -> Tensor: return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self ** 3)).tanh())
  def quick_gelu(self: Tensor) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self: Tensor) -> Tensor: return self * self.sigmoid()
  swish = silu
  def relu6(self: Tensor) -> Tensor: return self.relu() - (self - 6).relu()
  def hardswish(self: Tensor) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def leaky_relu(self: Tensor, neg_slope: float = 0.01) -> Tensor: return (self < 0).where(neg_slope * self, self)
  def elu(self: Tensor, alpha: float = 1.0) -> Tensor: return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self: Tensor, alpha: float = 1.0) -> Tensor: return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self: Tensor, alpha: float = 1.67326, gamma: float = 1.0507) -> Tensor:
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  def softplus(self: Tensor, beta: float = 1.0) -> Tensor: return (1 / beta) * (1 + (self * beta).exp()).log()
  def mish(self: Tensor) -> Tensor: return self * self.softplus().tanh()
  def softsign(self: Tensor) -> Tensor: return self / (1 + self.abs())
  def hardtanh(self: Tensor, min_val: float = -1, max_val: float = 1) -> Tensor: return self.clip(min_val, max_val)
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
  def __floordiv__(self, x): return self.idiv(x)
  def __rfloordiv__(self, x): return self.idiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __neg__(self): return self.neg()
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return x.matmul(self)
