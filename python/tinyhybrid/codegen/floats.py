"""Float rewrites that trade bit-exactness for range (tinygrad's opinionated `sym` rules): the native symbolic rules
keep every float identity bit for bit, so these run apart, on a lowered kernel.

x / (1 + x), a sigmoid written as exp(x) / (1 + exp(x)), is inf * 0 = nan once exp(x) overflows; 1 - 1 / (1 + x) is
the same value in range and 1 out of it. Its gradient has the same product twice more (times a factor, and beside a
term). A reciprocal of a product is the product of reciprocals, so x**-2 of a large x is 0 where x * x overflowed."""
from __future__ import annotations

from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

_x, _y = UPat.var("x"), UPat.var("y")
_d = (1 + _x).reciprocal().named("d")  # 1 / (1 + x)

pm_float_range = PatternMatcher([
  (_x * _d, lambda x, d: 1 - d),
  # a negation leaves a product's chain (exact), so that x meets 1 / (1 + x) in the gradient's -x * d * d
  ((_x * -1) * _y, lambda x, y: None if y.op is Ops.CONST else (x * y) * -1),
  (_x * (_d * _y), lambda x, y, d: y * (1 - d)),
  (_x * (_d + _y), lambda x, y, d: (1 - d) + x * y),
  ((_x * _x).reciprocal(), lambda x: x.reciprocal() * x.reciprocal()),
  ((_x * _x * _x).reciprocal(), lambda x: x.reciprocal() * x.reciprocal() * x.reciprocal()),
  ((_x * UPat.cvar("c")).reciprocal(), lambda x, c: x.reciprocal() * c.reciprocal()),
])


def in_range(ast: UOp) -> UOp:
  """The kernel with pm_float_range's rewrites, simplified again where one applied."""
  out = graph_rewrite(ast, pm_float_range, name="floats in range")
  return out if out is ast else out.simplify()
