"""The native symbolic simplifier: one block of unit cases per rule family (constant folding, identities,
where, sums, common factors, range-decided comparisons and div/mod), then property tests (hypothesis):
random index expressions over bounded variables keep their value at random points through simplify(), and
every value lies within [vmin, vmax]."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyhybrid import Ops, UOp, _core, dtypes
from tinyhybrid.uop.ops import ssimplify, sym_infer
from tinyhybrid.uop.symbolic import sym
from tinyhybrid.uop.upat import graph_rewrite

W = dtypes.weakint


def C(dtype, v) -> UOp: return UOp.const(dtype, v)
def V(name: str, lo: int, hi: int, dtype=W) -> UOp: return UOp.variable(name, lo, hi, dtype)


def folded(e: UOp):
  """The Python value a constant expression simplifies to (fails when it does not simplify to a constant)."""
  r = e.simplify()
  assert r.op is Ops.CONST, f"{e.render()} -> {r.render()} is not a constant"
  assert r.dtype == e.dtype
  return r.arg


def same_value(a, b) -> bool:
  if isinstance(a, float) and isinstance(b, float):
    if math.isnan(a) or math.isnan(b): return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)
  return a == b and type(a) is type(b)


def S(e: UOp) -> str: return e.simplify().render()


# ---------------------------------------------------------------- constant folding

@pytest.mark.parametrize("dtype,op,a,b,want", [
  (dtypes.int8, Ops.ADD, 100, 100, -56), (dtypes.int8, Ops.MUL, 16, 16, 0), (dtypes.int8, Ops.ADD, -128, -1, 127),
  (dtypes.uint8, Ops.ADD, 200, 100, 44), (dtypes.uint8, Ops.MUL, 16, 17, 16),
  (dtypes.int16, Ops.MUL, 300, 300, 90000 - 65536 * 1), (dtypes.uint16, Ops.ADD, 65535, 1, 0),
  (dtypes.int, Ops.ADD, 2147483647, 1, -2147483648), (dtypes.int, Ops.MUL, 65536, 65536, 0),
  (dtypes.uint32, Ops.ADD, 4294967295, 2, 1), (dtypes.int64, Ops.ADD, 2**63 - 1, 1, -2**63),
  (dtypes.uint64, Ops.MUL, 2**63, 2, 0), (W, Ops.MUL, 2**40, 2**40, 2**80),
  (dtypes.int, Ops.FLOORDIV, -7, 2, -4), (dtypes.int, Ops.FLOORMOD, -7, 2, 1), (dtypes.int, Ops.FLOORDIV, 7, -2, -4),
  (dtypes.int, Ops.FLOORMOD, 7, -2, -1), (dtypes.int, Ops.CDIV, -7, 2, -3), (dtypes.int, Ops.CMOD, -7, 2, -1),
  (dtypes.int, Ops.CDIV, 7, -2, -3), (dtypes.int, Ops.CMOD, 7, -2, 1), (dtypes.uint8, Ops.FLOORDIV, 255, 16, 15),
  (dtypes.int, Ops.MAX, -3, 5, 5), (dtypes.int, Ops.AND, 12, 10, 8), (dtypes.int, Ops.OR, 12, 10, 14),
  (dtypes.int, Ops.XOR, 12, 10, 6), (dtypes.int, Ops.SHL, 1, 4, 16), (dtypes.int, Ops.SHR, -16, 2, -4),
  (dtypes.uint8, Ops.SHL, 1, 7, 128), (dtypes.int8, Ops.SHL, 1, 7, -128),
  (dtypes.int, Ops.CMPLT, 3, 5, True), (dtypes.int, Ops.CMPLT, 5, 3, False), (dtypes.int, Ops.CMPNE, 3, 3, False),
  (dtypes.int, Ops.CMPEQ, 3, 3, True), (dtypes.uint8, Ops.CMPLT, 255, 1, False), (W, Ops.CMPLT, -(2**70), 0, True),
  (dtypes.float, Ops.ADD, 1.5, 2.25, 3.75), (dtypes.float, Ops.ADD, 0.1, 0.2, 0.30000001192092896),
  (dtypes.double, Ops.ADD, 0.1, 0.2, 0.30000000000000004), (dtypes.half, Ops.MUL, 65504.0, 2.0, math.inf),
  (dtypes.half, Ops.ADD, 2048.0, 1.0, 2048.0), (dtypes.float, Ops.MUL, 0.0, -1.0, -0.0),
  (dtypes.float, Ops.ADD, -0.0, -0.0, -0.0), (dtypes.float, Ops.ADD, -0.0, 0.0, 0.0),
  (dtypes.float, Ops.MUL, math.inf, 0.0, math.nan), (dtypes.float, Ops.ADD, math.inf, -math.inf, math.nan),
  (dtypes.float, Ops.MAX, -0.0, 0.0, 0.0), (dtypes.float, Ops.MAX, math.nan, 1.0, math.nan),
  (dtypes.float, Ops.CMPLT, math.nan, 1.0, False), (dtypes.float, Ops.CMPNE, math.nan, math.nan, True),
  (dtypes.bool, Ops.AND, True, False, False), (dtypes.bool, Ops.OR, True, False, True), (dtypes.bool, Ops.XOR, True, True, False),
  (dtypes.bool, Ops.CMPNE, True, False, True),
])
def test_constant_folding(dtype, op, a, b, want):
  e = UOp(op, dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dtype, (C(dtype, a), C(dtype, b)))
  got = folded(e)
  assert same_value(got, want), (e.render(), got, want)
  # the native fold agrees
  assert same_value(_core.fold(op, e.dtype, a, b), want)


def test_constant_folding_unary_and_ternary():
  assert same_value(folded(C(dtypes.float, 4.0).sqrt()), 2.0)
  assert same_value(folded(C(dtypes.float, -1.0).sqrt()), math.nan)
  assert same_value(folded(C(dtypes.float, 0.0).reciprocal()), math.inf)
  assert same_value(folded(C(dtypes.float, -0.0).reciprocal()), -math.inf)
  assert same_value(folded(C(dtypes.float, -2.5).trunc()), -2.0)
  assert same_value(folded(C(dtypes.int, 5).neg()), -5)
  assert same_value(folded(C(dtypes.int8, -128).neg()), -128)  # wraps
  assert same_value(folded(C(dtypes.bool, True).where(C(dtypes.int, 1), C(dtypes.int, 2))), 1)
  assert same_value(folded(C(dtypes.int16, 300).cast(dtypes.int8)), 44)
  assert same_value(folded(C(dtypes.float, -3.7).cast(dtypes.int)), -3)
  assert same_value(folded(C(dtypes.int, -1).cast(dtypes.uint32)), 4294967295)
  assert same_value(folded(C(dtypes.float, 1.0).bitcast(dtypes.uint32)), 0x3F800000)
  assert same_value(folded(C(dtypes.int, 7).cast(dtypes.bool)), True)


def test_no_fold_of_undefined():
  # division by zero and a float->int cast of nan stay as they are
  assert C(dtypes.int, 7) // C(dtypes.int, 0) is not None
  assert (C(dtypes.int, 7) // C(dtypes.int, 0)).simplify().op is Ops.FLOORDIV
  assert (C(dtypes.int, 7) % C(dtypes.int, 0)).simplify().op is Ops.FLOORMOD
  assert C(dtypes.float, math.nan).cast(dtypes.int).simplify().op is Ops.CAST
  assert _core.fold(Ops.FLOORDIV, dtypes.int, 7, 0) is None


# ---------------------------------------------------------------- identities

def test_identities_ints():
  for d in (W, dtypes.int, dtypes.int8, dtypes.uint32, dtypes.int64):
    x = V("x", 0, 100, d)
    assert x + 0 is not x and (x + 0).simplify() is x
    assert (0 + x).simplify() is x
    assert (x * 1).simplify() is x and (1 * x).simplify() is x
    assert (x * 0).simplify() is C(d, 0)
    assert (x // 1).simplify() is x
    assert (x % 1).simplify() is C(d, 0)
    assert (x - 0).simplify() is x
    if d != dtypes.uint32: assert (-(-x)).simplify() is x
  x = V("x", -50, 50, dtypes.int)
  assert (x * -1 * -1).simplify() is x
  assert (x // -1).simplify().sym_infer({"x": -7}) == 7
  assert (x - x).simplify() is C(dtypes.int, 0)


def test_identities_floats_keep_nan_semantics():
  f = UOp(Ops.NOOP, dtypes.float, (), "f")  # an unknown float: may be inf or nan
  assert (f * 1.0).simplify() is f
  assert (f * 0.0).simplify() is f * 0.0  # inf*0 and nan*0 are nan
  assert (f + 0.0).simplify() is f + 0.0  # -0.0 + 0.0 is 0.0
  assert (f + -0.0).simplify() is f
  assert f.ne(f).simplify() is f.ne(f)  # nan != nan
  assert (f < f).simplify() is C(dtypes.bool, False)


def test_bool_identities():
  b = UOp(Ops.NOOP, dtypes.bool, (), "b")
  assert b.logical_not().logical_not().simplify() is b
  assert (b & C(dtypes.bool, True)).simplify() is b
  assert (b & C(dtypes.bool, False)).simplify() is C(dtypes.bool, False)
  assert (b | C(dtypes.bool, True)).simplify() is C(dtypes.bool, True)
  assert (b | C(dtypes.bool, False)).simplify() is b
  assert b.ne(C(dtypes.bool, False)).simplify() is b


def test_where():
  x, y = V("x", 0, 10), V("y", 0, 10)
  assert C(dtypes.bool, True).where(x, y).simplify() is x
  assert C(dtypes.bool, False).where(x, y).simplify() is y
  assert (x < 3).where(y, y).simplify() is y
  assert (x < 20).where(x, y).simplify() is x  # the condition is decided by x's range
  assert (x < 0).where(x, y).simplify() is y
  b = UOp(Ops.NOOP, dtypes.bool, (), "b")
  assert b.where(C(dtypes.bool, True), C(dtypes.bool, False)).simplify() is b
  assert b.logical_not().where(x, y).simplify() is b.where(y, x)


# ---------------------------------------------------------------- sums

def test_like_terms_and_constants():
  x, y = V("x", 0, 100), V("y", 0, 100)
  assert S(x * 2 + x * 4) == "(x*6)"
  assert (x * 2 + x * 4).simplify() is x * 6
  assert S(x + x) == "(x*2)"
  assert S(x * 2 + 5 + x * 4 + y * 2 + y) == "((((x*2)+y)*3)+5)"
  assert S(x + 3 + y + 5) == "((x+y)+8)"
  assert S(3 + x + 4) == "(x+7)"
  assert S(x * 3 - x * 3) == "0"
  assert S(x * 3 - x * 2 - x) == "0"
  assert S((x + 1) * 3) == "((x*3)+3)"
  assert S((x * 2 + y) * 2 - y * 2) == "(x*4)"
  # ints wrap mod 2^bits: the coefficients too
  i = V("i", 0, 100, dtypes.int8)
  assert (i * 200 + i * 56).simplify() is C(dtypes.int8, 0)


def test_common_factors_and_divmod():
  x, y, z = V("x", 0, 100), V("y", 0, 100), V("z", 1, 10)
  assert S((x * 4 + y * 8) // (z * 2)) == "(((x+(y*2))*2)//z)"
  u = V("u", 0, 1000, dtypes.uint32)
  assert S((u & -4) // 4) == "(u//4)"
  assert S((x // 4) * 4 + x % 4) == "x"
  assert S(x % 4 + (x // 4) * 4) == "x"
  assert S((x % 4) * 3 + (x // 4) * 12) == "(x*3)"
  assert S((x * 4 + 3) // 4) == "x"
  assert S((x * 4 + 3) % 4) == "3"
  assert S((x * 6 + 4) // 2) == "((x*3)+2)"
  assert S((x * 6) % 3) == "0"
  assert S((x * 8 + y * 4) // 4) == "((x*2)+y)"
  assert S((x // 2) // 3) == "(x//6)"
  assert S((x % 12) % 4) == "(x%4)"
  k = V("k", 0, 3)
  assert S((x * 4 + k) // 4) == "x"
  assert S((x * 4 + k) % 4) == "k"
  # a lane's offset inside an aligned group does not reach the next multiple of the divisor
  lane = V("lane", 0, 15)
  assert S((x * 16 + lane) // 32) == "(x//2)"
  assert S((x * 16 + lane) % 32) == "(((x%2)*16)+lane)"
  assert S((x * 64 + k * 16 + lane) // 32) == "((x*2)+(k//2))"
  assert S((x * 16 + lane + 1) // 32) == "((((x*16)+lane)+1)//32)"  # lane 15 + 1 carries: not aligned


def test_comparisons_and_divmod_by_range():
  x = V("x", 0, 100)
  assert (x < 200).simplify() is C(dtypes.bool, True)
  assert (x < 0).simplify() is C(dtypes.bool, False)
  assert (x < 101).simplify() is C(dtypes.bool, True)
  assert (x < 100).simplify() is (x < 100)
  assert x.ne(200).simplify() is C(dtypes.bool, True)
  assert (x + 5).ne(3).simplify() is C(dtypes.bool, True)
  assert (x // 200).simplify() is C(W, 0)
  assert (x % 200).simplify() is x
  assert ((x + 200) // 200).simplify() is C(W, 1)
  assert ((x + 200) % 200).simplify() is x
  assert x.maximum(C(W, 0)).simplify() is x
  assert x.maximum(C(W, 100)).simplify() is C(W, 100)
  assert x.minimum(C(W, 200)).simplify() is x
  assert (x * 3 + 2 < 8).simplify().sym_infer({"x": 2}) is False
  assert (x * 3 + 2 < 8).simplify().sym_infer({"x": 1}) is True


def test_vmin_vmax():
  x, y = V("x", 2, 10), V("y", -3, 5)
  assert (x.vmin, x.vmax) == (2, 10)
  assert ((x + y).vmin, (x + y).vmax) == (-1, 15)
  assert ((x * y).vmin, (x * y).vmax) == (-30, 50)
  assert ((x // 3).vmin, (x // 3).vmax) == (0, 3)
  assert ((x % 3).vmin, (x % 3).vmax) == (0, 2)
  assert ((x < 5).vmin, (x < 5).vmax) == (False, True)
  assert ((x < 1).vmin, (x < 1).vmax) == (False, False)
  assert (x.maximum(y).vmin, x.maximum(y).vmax) == (2, 10)
  u = V("u", 0, 10, dtypes.uint8)
  assert ((u - 20).vmin, (u - 20).vmax) == (236, 246)  # wraps as a whole: still exact
  assert ((u - 5).vmin, (u - 5).vmax) == (0, 255)  # wraps for some values: the full range


def test_ssimplify_and_sym_infer_api():
  x = V("x", 0, 10)
  assert ssimplify(x * 0 + 3) == 3
  assert ssimplify(7) == 7
  assert ssimplify(x + 1) is (x + 1).simplify()
  assert sym_infer(x * 3 + 1, {x: 4}) == 13
  assert sym_infer(x * 3 + 1, {"x": 4}) == 13
  assert sym_infer(5, {}) == 5
  assert _core.sym_infer(x // 3, {"x": -7}) == -3
  with pytest.raises(Exception):
    (x + V("y", 0, 3)).sym_infer({"x": 1})


def test_sym_matcher_runs_through_graph_rewrite():
  x, y = V("x", 0, 100), V("y", 0, 100)
  for e in [x * 2 + x * 4, (x * 4 + y * 8) // 4, (x // 4) * 4 + x % 4, (x < 200).where(x, y)]:
    assert graph_rewrite(e, sym) is e.simplify()


# ---------------------------------------------------------------- property tests

OPS_INT = ["add", "sub", "mul_c", "mul_v", "div", "mod", "max", "min", "where"]


@st.composite
def expr(draw, names: tuple[str, ...], depth: int, kind: str = "int", small: bool = False):
  """A random expression tree: nested tuples that build() and py_eval() read."""
  if depth == 0 or draw(st.integers(0, 5)) == 0:
    if kind == "bool":
      return ("lt", ("var", draw(st.sampled_from(names))), ("const", draw(st.integers(-2, 20))))
    if draw(st.integers(0, 3)) == 0: return ("const", draw(st.integers(-8, 12)))
    return ("var", draw(st.sampled_from(names)))
  if kind == "bool":
    op = draw(st.sampled_from(["lt", "ne"]))
    return (op, draw(expr(names, depth - 1, "int", small)), draw(expr(names, depth - 1, "int", small)))
  op = draw(st.sampled_from(OPS_INT))
  sub = lambda: draw(expr(names, depth - 1, "int", small))  # noqa: E731
  if op == "mul_c": return ("mul", sub(), ("const", draw(st.integers(-4, 9))))
  if op == "mul_v":
    if small: return ("mul", sub(), ("var", draw(st.sampled_from(names))))
    return ("mul", sub(), sub())
  if op in ("div", "mod"): return (op, sub(), draw(st.integers(1, 9)))
  if op == "where": return ("where", draw(expr(names, depth - 1, "bool", small)), sub(), sub())
  return (op, sub(), sub())


def build(t, vars_: dict, dtype) -> UOp:
  k = t[0]
  if k == "var": return vars_[t[1]]
  if k == "const": return C(dtype, t[1])
  if k in ("div", "mod"):
    a = build(t[1], vars_, dtype)
    return a // t[2] if k == "div" else a % t[2]
  if k == "where": return build(t[1], vars_, dtype).where(build(t[2], vars_, dtype), build(t[3], vars_, dtype))
  a, b = build(t[1], vars_, dtype), build(t[2], vars_, dtype)
  if k == "add": return a + b
  if k == "sub": return a - b
  if k == "mul": return a * b
  if k == "max": return a.maximum(b)
  if k == "min": return a.minimum(b)
  if k == "lt": return a < b
  if k == "ne": return a.ne(b)
  raise AssertionError(k)


def py_eval(t, env: dict, bound=None):
  """Exact Python value (floor division); `bound` collects the largest magnitude seen."""
  k = t[0]
  if k == "var": v = env[t[1]]
  elif k == "const": v = t[1]
  elif k in ("div", "mod"):
    a = py_eval(t[1], env, bound)
    v = a // t[2] if k == "div" else a % t[2]
  elif k == "where": v = py_eval(t[2], env, bound) if py_eval(t[1], env, bound) else py_eval(t[3], env, bound)
  else:
    a, b = py_eval(t[1], env, bound), py_eval(t[2], env, bound)
    v = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "max": lambda: max(a, b), "min": lambda: min(a, b),
         "lt": lambda: a < b, "ne": lambda: a != b}[k]()
  if bound is not None and not isinstance(v, bool): bound[0] = max(bound[0], abs(v))
  return v


def interval(t, ranges: dict) -> tuple[int, int]:
  """A sound (loose) interval of every intermediate of t: used to keep int32 cases free of overflow."""
  k = t[0]
  if k == "var": return ranges[t[1]]
  if k == "const": return (t[1], t[1])
  if k in ("lt", "ne"):
    interval(t[1], ranges), interval(t[2], ranges)
    return (0, 1)
  if k in ("div", "mod"):
    lo, hi = interval(t[1], ranges)
    return (lo // t[2], hi // t[2]) if k == "div" else (0, t[2] - 1)
  if k == "where":
    interval(t[1], ranges)
    a, b = interval(t[2], ranges), interval(t[3], ranges)
    return (min(a[0], b[0]), max(a[1], b[1]))
  (alo, ahi), (blo, bhi) = interval(t[1], ranges), interval(t[2], ranges)
  if k == "add": return (alo + blo, ahi + bhi)
  if k == "sub": return (alo - bhi, ahi - blo)
  if k == "mul":
    p = [alo * blo, alo * bhi, ahi * blo, ahi * bhi]
    return (min(p), max(p))
  return (min(alo, blo), max(ahi, bhi))  # max/min: loose


def check_expr(t, ranges: dict, points: list[dict], dtype, bound_check=None):
  vars_ = {n: V(n, lo, hi, dtype) for n, (lo, hi) in ranges.items()}
  e = build(t, vars_, dtype)
  s = e.simplify()
  assert s.dtype == e.dtype, f"simplify changed the dtype: {e.render()} ({e.dtype}) -> {s.render()} ({s.dtype})"
  for env in points:
    want = py_eval(t, env)
    got_e = e.sym_infer(env)
    got_s = _core.sym_infer(s, env)
    ctx = f"\nexpr:       {e.render()}\nsimplified: {s.render()}\nat {env}: want {want}, original {got_e}, simplified {got_s}"
    assert got_e == want, "sym_infer of the original is wrong" + ctx
    assert got_s == want, "simplify changed the value" + ctx
    assert e.vmin <= want <= e.vmax, f"value outside [{e.vmin}, {e.vmax}] of the original" + ctx
    assert s.vmin <= want <= s.vmax, f"value outside [{s.vmin}, {s.vmax}] of the simplified" + ctx
  # a fixed point: simplifying again changes nothing
  assert s.simplify() is s, f"not a fixed point: {e.render()} -> {s.render()} -> {s.simplify().render()}"


NAMES = ("a", "b", "c")


@st.composite
def case(draw, small: bool):
  n = draw(st.integers(1, 3))
  names = NAMES[:n]
  his = {nm: draw(st.integers(3, 15 if small else 255)) for nm in names}
  t = draw(expr(names, 5, "int", small))
  points = [{nm: draw(st.integers(0, his[nm])) for nm in names} for _ in range(4)]
  points.append({nm: his[nm] for nm in names})
  points.append({nm: 0 for nm in names})
  return t, {nm: (0, his[nm]) for nm in names}, points


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case(small=False))
def test_property_weakint(c):
  t, ranges, points = c
  check_expr(t, ranges, points, W)


INT32_LIMIT = 2**31 - 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                                    HealthCheck.filter_too_much])
@given(case(small=True))
def test_property_int32_no_overflow(c):
  from hypothesis import assume
  t, ranges, points = c
  lo, hi = interval(t, ranges)
  bound = [0]
  for env in points: py_eval(t, env, bound)
  # every intermediate, at every point and by interval, stays far from int32's limits
  assume(bound[0] < 2**20 and -2**20 < lo and hi < 2**20 and _max_interval(t, ranges) < 2**20)
  check_expr(t, ranges, points, dtypes.int)


def _max_interval(t, ranges) -> int:
  """The largest magnitude any subexpression's interval reaches."""
  best = 0
  def walk(u):
    nonlocal best
    lo, hi = interval(u, ranges)
    best = max(best, abs(lo), abs(hi))
    for s in u[1:]:
      if isinstance(s, tuple): walk(s)
  walk(t)
  return best


@pytest.mark.parametrize("seed", range(3))
def test_simplify_random_index_exprs(seed):
  """Index-style expressions (+, and * // % by constants): values kept, a fixed point reached. (The result may be
  larger than the input: constant multipliers distribute over sums.)"""
  import random
  rng = random.Random(seed)
  vs = [V(n, 0, rng.randint(3, 255)) for n in NAMES]
  def gen(d):
    if d == 0 or rng.random() < 0.2: return rng.choice(vs) if rng.random() < 0.8 else C(W, rng.randint(0, 9))
    op = rng.choice(["add", "mul", "div", "mod"])
    if op == "add": return gen(d - 1) + gen(d - 1)
    k = rng.randint(2, 9)
    return gen(d - 1) * k if op == "mul" else gen(d - 1) // k if op == "div" else gen(d - 1) % k
  for _ in range(100):
    e = gen(5)
    s = e.simplify()
    assert s.simplify() is s, f"not a fixed point: {e.render()} -> {s.render()} -> {s.simplify().render()}"
    env = {v.arg[0]: rng.randint(0, v.arg[2]) for v in vs}
    assert s.sym_infer(env) == e.sym_infer(env), f"{e.render()} -> {s.render()} at {env}"


# ---------------------------------------------------------------- regressions (bugs these tests found)

def test_where_one_zero_on_ints_keeps_dtype():
  """The bool rules c.where(True, False) -> c and c.where(False, True) -> !c must not match int branches 1 and 0
  (a pattern arg True == 1): an int where turned into a bool node, and every user then failed to rebuild."""
  i = V("i", 0, 3, dtypes.int)
  w = (i < 1).where(C(dtypes.int, 1), C(dtypes.int, 0))
  assert w.simplify().dtype == dtypes.int, w.simplify().render()
  assert (i < 1).where(C(dtypes.int, 0), C(dtypes.int, 1)).simplify().dtype == dtypes.int
  e = w * 5 + i
  s = e.simplify()  # raised TypeError: MUL: source dtypes differ
  assert [s.sym_infer({"i": v}) for v in range(4)] == [e.sym_infer({"i": v}) for v in range(4)]


# (expression builder, variable name, dtype, lo, hi, values to check)
_WRAP_CASES = {
  # unsigned: a wrapping product/sum is treated as its exact integer value
  "uint8 (a*64)//4": (lambda a: (a * 64) // 4, dtypes.uint8, 0, 4),
  "uint8 (a*73)//7": (lambda a: (a * 73) // 7, dtypes.uint8, 0, 4),
  "uint8 (a*255+13)%255": (lambda a: (a * 255 + 13) % 255, dtypes.uint8, 0, 2),
  "uint32 (a*0xffffffff)//255": (lambda a: (a * 4294967295) // 255, dtypes.uint32, 0, 3),
  # nested floor division: c1*c2 is wrapped to the dtype (int8 16*8 -> -128, int32 65536*32768 -> -2**31)
  "int8 (x//16)//8": (lambda a: (a // 16) // 8, dtypes.int8, -128, 127),
  "int32 (x//65536)//32768": (lambda a: (a // 65536) // 32768, dtypes.int, -2**31, 2**31 - 1),
  # (y//c1 + k)//c -> (y + k*c1)//(c1*c): y + k*c1 overflows the dtype
  "int8 ((y//2)+10)//4": (lambda a: ((a // 2) + 10) // 4, dtypes.int8, 0, 127),
  "int32 ((y//2)+10)//4": (lambda a: ((a // 2) + 10) // 4, dtypes.int, 0, 2**31 - 1),
  "uint8 ((u//2)+10)//4": (lambda a: ((a // 2) + 10) // 4, dtypes.uint8, 0, 255),
}


@pytest.mark.parametrize("name", list(_WRAP_CASES))
def test_fixed_width_divmod_wraparound(name):
  """Floor div/mod rules on fixed-width ints gave wrong values when an intermediate wraps."""
  f, dtype, lo, hi = _WRAP_CASES[name]
  a = V("a", lo, hi, dtype)
  e = f(a)
  s = e.simplify()
  n = hi - lo + 1
  pts = range(lo, hi + 1) if n <= 300 else [p for p in (lo, lo + 1, -5, -1, 0, 1, 5, 2**20, hi - 1, hi) if lo <= p <= hi]
  bad = [(p, e.sym_infer({"a": p}), s.sym_infer({"a": p})) for p in pts if e.sym_infer({"a": p}) != s.sym_infer({"a": p})]
  assert not bad, f"{e.render()} -> {s.render()}: (a, original, simplified) = {bad[:4]}"


# ---------------------------------------------------------------- fixed-width ints: wraparound, checked exhaustively

_FW = {"int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16, "uint32": dtypes.uint32, "int32": dtypes.int}


def _wrap(v: int, dtype) -> int:
  bits = dtype.itemsize * 8
  v &= (1 << bits) - 1
  return v - (1 << bits) if not dtypes.is_unsigned(dtype) and v >= 1 << (bits - 1) else v


def _tdiv(a: int, b: int) -> int:
  q = abs(a) // abs(b)
  return q if (a >= 0) == (b > 0) else -q


@st.composite
def fw_expr(draw, names: tuple[str, ...], depth: int, signed: bool, bits: int):
  if depth == 0 or draw(st.integers(0, 4)) == 0:
    if draw(st.booleans()): return ("var", draw(st.sampled_from(names)))
    return ("const", draw(st.integers(-130, 130) if signed else st.integers(0, 300)))
  sub = lambda: draw(fw_expr(names, depth - 1, signed, bits))  # noqa: E731
  k = draw(st.sampled_from(["add", "sub", "mul", "mulv", "div", "mod", "cdiv", "cmod", "max", "where", "and", "or", "xor",
                            "shl", "shr"]))
  if k in ("div", "mod", "cdiv", "cmod"):
    return (k, sub(), ("const", draw(st.sampled_from([1, 2, 3, 4, 7, 8, 16, 255] + ([-2, -3] if signed else [])))))
  if k in ("shl", "shr"): return (k, sub(), ("const", draw(st.integers(0, bits - 1))))
  if k in ("and", "or", "xor"): return (k, sub(), ("const", draw(st.integers(-20, 255))))
  if k == "mulv": return ("mul", sub(), ("var", draw(st.sampled_from(names))))
  if k == "where": return ("where", ("lt", sub(), sub()), sub(), sub())
  return (k, sub(), sub())


_FW_OPS = {"add": Ops.ADD, "mul": Ops.MUL, "div": Ops.FLOORDIV, "mod": Ops.FLOORMOD, "cdiv": Ops.CDIV, "cmod": Ops.CMOD,
           "max": Ops.MAX, "and": Ops.AND, "or": Ops.OR, "xor": Ops.XOR, "shl": Ops.SHL, "shr": Ops.SHR}


def fw_build(t, vars_: dict, dtype) -> UOp:
  if t[0] == "var": return vars_[t[1]]
  if t[0] == "const": return C(dtype, t[1])
  if t[0] == "lt": return fw_build(t[1], vars_, dtype) < fw_build(t[2], vars_, dtype)
  if t[0] == "where": return fw_build(t[1], vars_, dtype).where(fw_build(t[2], vars_, dtype), fw_build(t[3], vars_, dtype))
  a, b = fw_build(t[1], vars_, dtype), fw_build(t[2], vars_, dtype)
  return a - b if t[0] == "sub" else UOp(_FW_OPS[t[0]], dtype, (a, b))


def fw_eval(t, env: dict, dtype):
  """The value with C semantics for the dtype: every op wraps; None when a division by zero happens."""
  k = t[0]
  if k == "var": return env[t[1]]
  if k == "const": return _wrap(t[1], dtype)
  if k == "where":
    c = fw_eval(t[1], env, dtype)
    return None if c is None else fw_eval(t[2] if c else t[3], env, dtype)
  a, b = fw_eval(t[1], env, dtype), fw_eval(t[2], env, dtype)
  if a is None or b is None: return None
  if k == "lt": return a < b
  if k in ("div", "mod", "cdiv", "cmod") and b == 0: return None
  r = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a // b, "mod": lambda: a % b,
       "cdiv": lambda: _tdiv(a, b), "cmod": lambda: a - b * _tdiv(a, b), "max": lambda: max(a, b), "and": lambda: a & b,
       "or": lambda: a | b, "xor": lambda: a ^ b, "shl": lambda: a << b, "shr": lambda: a >> b}[k]()
  return _wrap(r, dtype)


@st.composite
def fw_case(draw):
  dname = draw(st.sampled_from(list(_FW)))
  dtype = _FW[dname]
  signed = not dtypes.is_unsigned(dtype)
  names = ("a", "b")[:draw(st.integers(1, 2))]
  ranges = {}
  for n in names:
    lo = draw(st.sampled_from([0, 0, -5, -100] if signed else [0]))
    ranges[n] = (lo, lo + draw(st.integers(1, 12)))
  return dtype, ranges, draw(fw_expr(names, draw(st.integers(1, 4)), signed, dtype.itemsize * 8))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fw_case())
def test_property_fixed_width_wraparound(c):
  """int8/uint8/int16/uint32/int32 expressions with wrapping intermediates, at every point of the variables' ranges:
  simplify keeps C's value, and the value lies within [vmin, vmax]."""
  import itertools
  dtype, ranges, t = c
  vars_ = {n: V(n, lo, hi, dtype) for n, (lo, hi) in ranges.items()}
  e = fw_build(t, vars_, dtype)
  s = e.simplify()
  assert s.dtype == e.dtype
  for vals in itertools.product(*[range(lo, hi + 1) for lo, hi in ranges.values()]):
    env = dict(zip(ranges, vals))
    want = fw_eval(t, env, dtype)
    if want is None: continue  # a division by zero somewhere: no defined value
    ctx = f"\nexpr:       {e.render()}\nsimplified: {s.render()}\nat {env}: want {want}"
    assert e.sym_infer(env) == want, "sym_infer of the original" + ctx + f", got {e.sym_infer(env)}"
    assert s.sym_infer(env) == want, "simplify changed the value" + ctx + f", got {s.sym_infer(env)}"
    assert e.vmin <= want <= e.vmax, f"outside [{e.vmin}, {e.vmax}] of the original" + ctx
    assert s.vmin <= want <= s.vmax, f"outside [{s.vmin}, {s.vmax}] of the simplified" + ctx


def _fw_random(rng, names, depth: int, signed: bool, bits: int):
  """The same expressions as fw_expr, from a seeded generator (many more of them per second than hypothesis)."""
  if depth == 0 or rng.random() < 0.2:
    if rng.random() < 0.7: return ("var", rng.choice(names))
    return ("const", rng.randint(-130, 130) if signed else rng.randint(0, 300))
  k = rng.choice(["add", "sub", "mul", "mulv", "div", "mod", "cdiv", "cmod", "max", "where", "and", "or", "xor", "shr", "shl"])
  a = _fw_random(rng, names, depth - 1, signed, bits)
  if k in ("div", "mod", "cdiv", "cmod"):
    return (k, a, ("const", rng.choice([1, 2, 3, 4, 7, 8, 16, 255] + ([-2, -3] if signed else []))))
  if k in ("shr", "shl"): return (k, a, ("const", rng.randint(0, bits - 1)))
  if k in ("and", "or", "xor"): return (k, a, ("const", rng.randint(-20, 255)))
  if k == "mulv": return ("mul", a, ("var", rng.choice(names)))
  if k == "where":
    return ("where", ("lt", _fw_random(rng, names, depth - 1, signed, bits), _fw_random(rng, names, depth - 1, signed, bits)),
            a, _fw_random(rng, names, depth - 1, signed, bits))
  return (k, a, _fw_random(rng, names, depth - 1, signed, bits))


@pytest.mark.parametrize("dname", list(_FW))
def test_fixed_width_wraparound_sweep(dname):
  """1500 seeded random expressions per dtype, each checked at every point of its variables' ranges."""
  import itertools
  import random
  dtype = _FW[dname]
  signed = not dtypes.is_unsigned(dtype)
  rng = random.Random(f"wrap-{dname}")
  bad = []
  for _ in range(1500):
    names = ("a", "b")[:rng.randint(1, 2)]
    ranges = {}
    for n in names:
      lo = rng.choice([0, 0, -5, -100] if signed else [0])
      ranges[n] = (lo, lo + rng.randint(1, 12))
    t = _fw_random(rng, names, rng.randint(1, 4), signed, dtype.itemsize * 8)
    e = fw_build(t, {n: V(n, lo, hi, dtype) for n, (lo, hi) in ranges.items()}, dtype)
    s = e.simplify()
    for vals in itertools.product(*[range(lo, hi + 1) for lo, hi in ranges.values()]):
      env = dict(zip(ranges, vals))
      want = fw_eval(t, env, dtype)
      if want is None: continue
      got = s.sym_infer(env)
      if got != want or not (s.vmin <= want <= s.vmax) or not (e.vmin <= want <= e.vmax):
        bad.append(f"{e.render()} -> {s.render()} at {env}: want {want}, got {got}, "
                   f"ranges {(e.vmin, e.vmax)} / {(s.vmin, s.vmax)}")
        break
  assert not bad, f"{len(bad)} wrong:\n" + "\n".join(sorted(bad, key=len)[:5])


# ---- fixed points: simplify() marks the nodes it leaves unchanged, and a later simplify() does not walk under them

def test_simplified_node_is_a_fixed_point():
  x, y, z = V("fx", 0, 10), V("fy", 0, 10), V("fz", 0, 10)
  e = (x * 4 + y * 8) // (z * 2)
  s = e.simplify()
  assert s.render() == "(((fx+(fy*2))*2)//fz)"
  assert s.simplify() is s and e.simplify() is s  # again and again: the same node
  assert graph_rewrite(s, sym) is s  # the same native rule set through graph_rewrite


def test_fixed_point_mark_belongs_to_the_native_rule_set():
  from tinyhybrid.uop.upat import PatternMatcher, UPat
  x = V("mx", 0, 10)
  s = (x * 3 + 1).simplify()
  assert s.simplify() is s
  # a rule set of its own, or the native one extended, still rewrites under a node simplify() marked
  to_two = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="v"), lambda v: UOp.const(v.dtype, 2))])
  assert graph_rewrite(s, to_two).render(simplify=False) == "((2*3)+1)"
  assert graph_rewrite(s, sym + to_two).op is Ops.CONST and graph_rewrite(s, sym + to_two).arg == 7
  assert graph_rewrite(s, to_two + sym).arg == 7
