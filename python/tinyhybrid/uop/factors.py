"""tinygrad's integer-factor helpers on an expression: a factor known to divide it, the exact quotient by one, its
terms along a chain of one op. The native rules simplify divisions themselves; these answer a program's questions
about a node with plain Python over its sources, as tinygrad's UOp does."""
from __future__ import annotations

import collections
import functools
import math
import operator
from typing import TYPE_CHECKING, Any, Iterator

from tinyhybrid.uop import Ops

if TYPE_CHECKING:
  from tinyhybrid.uop.ops import UOp

class FactorMixin:
  def const_factor(self: Any) -> int:
    """An integer known to divide the expression: a constant's value, the gcd of a sum's terms' factors, a product's
    constant operand; 1 where nothing is known (so not always the largest, as in tinygrad)."""
    if self.op is Ops.CONST: return self.arg
    if self.op is Ops.VECTORIZE: return math.gcd(*[s.const_factor() for s in self.src])
    if self.op is Ops.ADD: return math.gcd(self.src[0].const_factor(), self.src[1].const_factor())
    if self.op is Ops.MUL: return next((s.arg for s in self.src if s.op is Ops.CONST), 1)
    return 1

  def divides(self: Any, v: int) -> UOp | None:
    """The expression divided by v where the division is exact by construction (a constant, a sum of divisible terms,
    a product with a divisible operand), else None."""
    if v == 1: return self
    if self.op is Ops.CONST: return self.const_like(self.arg // v) if self.arg % v == 0 else None
    if self.op is Ops.ADD:
      parts = [s.divides(v) for s in self.src]
      return None if parts[0] is None or parts[1] is None else parts[0] + parts[1]
    if self.op is Ops.MUL:
      for i, s in enumerate(self.src):
        if (d := s.divides(v)) is not None: return d * self.src[1 - i] if i == 0 else self.src[0] * d
    return None

  def split_uop(self: Any, sep: Ops) -> Iterator[UOp]:
    """The operands of a chain of `sep` (a + b + c: a, b, c), left to right."""
    if self.op is sep:
      for s in self.src: yield from s.split_uop(sep)
    else: yield self

  def pop_const(self: Any, op: Ops = Ops.ADD) -> tuple[UOp, Any]:
    """(x, c) for x `op` c with a constant c, else (self, op's identity)."""
    from tinyhybrid.uop.ops import identity_element  # (ops builds UOp from this mixin)
    if self.op is op and self.src[1].op is Ops.CONST: return self.src[0], self.src[1].arg
    return self, identity_element(op, self.dtype)

  def divide_exact(self: Any, v: UOp) -> UOp | None:
    """self / v where v is a constant or a product of self's own factors, term by term through sums; else None."""
    if self is v: return self.const_like(1)
    if v.op is Ops.CONST: return self.divides(v.arg)
    if self.op is Ops.ADD:
      parts = [s.divide_exact(v) for s in self.src]
      return None if parts[0] is None or parts[1] is None else parts[0] + parts[1]
    if self.op is Ops.MUL:
      (fac, const), (vfac, vconst) = self.pop_const(Ops.MUL), v.pop_const(Ops.MUL)
      left = collections.Counter(fac.split_uop(Ops.MUL))
      left.subtract(vfac.split_uop(Ops.MUL))
      if const % vconst == 0 and all(n >= 0 for n in left.values()):
        return functools.reduce(operator.mul, left.elements(), self.const_like(const // vconst))
    return None

  @staticmethod
  def gcd(*uops: UOp) -> UOp:
    """The common factor of the expressions: the factors every one's product has, times the gcd of their constants."""
    factors = [u.const_factor() for u in uops]
    terms = [u.divides(f) for u, f in zip(uops, factors)]
    common = functools.reduce(operator.and_, [collections.Counter(t.split_uop(Ops.MUL)) for t in terms if t is not None])
    return functools.reduce(operator.mul, [*common.elements(), uops[0].const_like(math.gcd(*factors))])  # the constant last

  @property
  def _min_max(self: Any) -> tuple[Any, Any]: return self.vmin, self.vmax
