"""Value ranges (UOp.vmin / UOp.vmax) and evaluation (sym_infer): random expressions over bounded variables are
evaluated at points inside the bounds (checked against a plain Python reference), and every value must lie
within [vmin, vmax]; plus the fixed cases symbolic rules rely on."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tinyhybrid import Ops, UOp, _core, dtypes

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
N_VARS = 3
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def wrap(v: int, bits: int = 32, signed: bool = True) -> int:
  v %= 1 << bits
  return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


# ---------------------------------------------------------------- random int expressions
# A tree is a tuple: ("var", i), ("const", c), (op, child, ...) with small constants as plain ints.

SMALL = st.integers(-6, 6).filter(bool)
LEAF = st.one_of(st.tuples(st.just("var"), st.integers(0, N_VARS - 1)), st.tuples(st.just("const"), st.integers(-9, 9)))


def _extend(children):
  return st.one_of(
    st.tuples(st.sampled_from(["add", "sub", "mul", "max", "div", "mod"]), children, children),
    st.tuples(st.sampled_from(["mulc", "divc", "modc"]), children, SMALL),
    st.tuples(st.just("andc"), children, st.integers(0, 31)),
    st.tuples(st.just("shrc"), children, st.integers(0, 4)),
    st.tuples(st.just("neg"), children),
    st.tuples(st.just("where"), st.sampled_from(["lt", "ne", "eq"]), children, children, children, children),
  )


INT_TREES = st.recursive(LEAF, _extend, max_leaves=10)
BOUNDS = st.lists(st.tuples(st.integers(-20, 20), st.integers(0, 25)).map(lambda t: (t[0], t[0] + t[1])),
                  min_size=N_VARS, max_size=N_VARS)


def build(t, vs: list[UOp]) -> UOp:
  k = t[0]
  if k == "var": return vs[t[1]]
  if k == "const": return UOp.const(dtypes.int, t[1])
  if k == "where":
    _, cmp, a, b, x, y = t
    ua, ub = build(a, vs), build(b, vs)
    cond = ua < ub if cmp == "lt" else ua.ne(ub) if cmp == "ne" else ua.eq(ub)
    return cond.where(build(x, vs), build(y, vs))
  a = build(t[1], vs)
  if k == "neg": return -a
  if k in ("mulc", "divc", "modc", "andc", "shrc"):
    c = t[2]
    return {"mulc": lambda: a * c, "divc": lambda: a // c, "modc": lambda: a % c, "andc": lambda: a & c, "shrc": lambda: a >> c}[k]()
  b = build(t[2], vs)
  return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "max": lambda: a.maximum(b),
          "div": lambda: a // b, "mod": lambda: a % b}[k]()


def ref(t, env: list[int]) -> int:
  """int32 semantics in plain Python: wrap after every op, floor division; ZeroDivisionError on x // 0."""
  k = t[0]
  if k == "var": return env[t[1]]
  if k == "const": return t[1]
  if k == "where":
    _, cmp, a, b, x, y = t
    ra, rb = ref(a, env), ref(b, env)
    cond = ra < rb if cmp == "lt" else ra != rb if cmp == "ne" else ra == rb
    # both branches are evaluated, as sym_infer evaluates every source
    rx, ry = ref(x, env), ref(y, env)
    return rx if cond else ry
  a = ref(t[1], env)
  if k == "neg": return wrap(-a)
  b = t[2] if k in ("mulc", "divc", "modc", "andc", "shrc") else ref(t[2], env)
  if k in ("add",): return wrap(a + b)
  if k == "sub": return wrap(a - b)
  if k in ("mul", "mulc"): return wrap(a * b)
  if k == "max": return max(a, b)
  if k in ("div", "divc"): return wrap(a // b)
  if k in ("mod", "modc"): return wrap(a % b)
  if k == "andc": return a & b
  if k == "shrc": return a >> b
  raise AssertionError(k)


def points(data, bnds):
  edge_or_inside = [st.one_of(st.sampled_from([lo, hi]), st.integers(lo, hi)) for lo, hi in bnds]
  return [data.draw(st.tuples(*edge_or_inside)) for _ in range(4)]


@SETTINGS
@given(tree=INT_TREES, bnds=BOUNDS, data=st.data())
def test_random_int_expressions_stay_in_range(tree, bnds, data):
  vs = [UOp.variable(f"v{i}", lo, hi, dtypes.int) for i, (lo, hi) in enumerate(bnds)]
  e = build(tree, vs)
  lo, hi = e.vmin, e.vmax
  assert type(lo) is int and type(hi) is int and INT32_MIN <= lo <= hi <= INT32_MAX
  for env in points(data, bnds):
    try:
      want = ref(tree, list(env))
    except ZeroDivisionError:
      with pytest.raises(ValueError, match="division by zero"): e.sym_infer({f"v{i}": x for i, x in enumerate(env)})
      continue
    got = e.sym_infer({f"v{i}": x for i, x in enumerate(env)})
    assert got == want, (e.render(), env)
    assert lo <= got <= hi, (e.render(), env, got, lo, hi)


@SETTINGS
@given(a=INT_TREES, b=INT_TREES, cmp=st.sampled_from(["lt", "ne", "eq"]), bnds=BOUNDS, data=st.data())
def test_random_comparisons_stay_in_range(a, b, cmp, bnds, data):
  vs = [UOp.variable(f"v{i}", lo, hi, dtypes.int) for i, (lo, hi) in enumerate(bnds)]
  ua, ub = build(a, vs), build(b, vs)
  e = ua < ub if cmp == "lt" else ua.ne(ub) if cmp == "ne" else ua.eq(ub)
  assert type(e.vmin) is bool and type(e.vmax) is bool
  for env in points(data, bnds):
    try:
      got = _core.sym_infer(e, {vs[i]: x for i, x in enumerate(env)})  # keys may be the variables themselves
    except ValueError:
      continue  # a division by zero inside
    assert e.vmin <= got <= e.vmax, (e.render(), env)


INT_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int64, dtypes.uint32]


@settings(max_examples=100, deadline=None)
@given(tree=INT_TREES, bnds=BOUNDS, dt=st.sampled_from(INT_DTYPES + [dtypes.float32, dtypes.float16, dtypes.bool]), data=st.data())
def test_random_casts_stay_in_range(tree, bnds, dt, data):
  vs = [UOp.variable(f"v{i}", lo, hi, dtypes.int) for i, (lo, hi) in enumerate(bnds)]
  e = build(tree, vs).cast(dt)
  for env in points(data, bnds):
    try:
      got = e.sym_infer({f"v{i}": x for i, x in enumerate(env)})
    except ValueError:
      continue
    assert e.vmin <= got <= e.vmax, (e.render(), env, got)


FLOAT_LEAF = st.one_of(st.tuples(st.just("var"), st.integers(0, N_VARS - 1)),
                       st.tuples(st.just("const"), st.sampled_from([0.0, -0.0, 0.5, 2.0, -3.0, 1e30, math.inf, math.nan])))


def _float_extend(children):
  return st.one_of(
    st.tuples(st.sampled_from(["add", "sub", "mul", "max", "fdiv"]), children, children),
    st.tuples(st.sampled_from(["neg", "sqrt", "recip", "exp2", "log2", "sin", "trunc"]), children),
    st.tuples(st.just("where"), children, children, children, children),
  )


FLOAT_TREES = st.recursive(FLOAT_LEAF, _float_extend, max_leaves=8)
FLOAT_BOUNDS = st.lists(st.tuples(st.floats(-100, 100, width=32), st.floats(0, 100, width=32)).map(
  lambda t: (t[0], float(np.float32(t[0] + t[1])))), min_size=N_VARS, max_size=N_VARS)


def build_float(t, vs):
  k = t[0]
  if k == "var": return vs[t[1]]
  if k == "const": return UOp.const(dtypes.float32, t[1])
  if k == "where": return (build_float(t[1], vs) < build_float(t[2], vs)).where(build_float(t[3], vs), build_float(t[4], vs))
  a = build_float(t[1], vs)
  unary = {"neg": lambda: -a, "sqrt": a.sqrt, "recip": a.reciprocal, "exp2": a.exp2, "log2": a.log2, "sin": a.sin, "trunc": a.trunc}
  if k in unary: return unary[k]()
  b = build_float(t[2], vs)
  return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "max": lambda: a.maximum(b), "fdiv": lambda: a / b}[k]()


@SETTINGS
@given(tree=FLOAT_TREES, bnds=FLOAT_BOUNDS, data=st.data())
def test_random_float_expressions_stay_in_range(tree, bnds, data):
  vs = [UOp.variable(f"f{i}", lo, hi, dtypes.float32) for i, (lo, hi) in enumerate(bnds)]
  e = build_float(tree, vs)
  lo, hi = e.vmin, e.vmax
  assert type(lo) is float and type(hi) is float and not math.isnan(lo) and not math.isnan(hi)
  for _ in range(3):
    env = {f"f{i}": data.draw(st.floats(b[0], b[1], width=32)) for i, b in enumerate(bnds)}
    got = e.sym_infer(env)
    if math.isnan(got):
      assert (lo, hi) == (-math.inf, math.inf), (e.render(), env)  # only a full range admits NaN
    else:
      assert lo <= got <= hi, (e.render(), env, got, lo, hi)


# ---------------------------------------------------------------- fixed cases

def full(dt): return {dtypes.int: (INT32_MIN, INT32_MAX), dtypes.int8: (-128, 127), dtypes.uint32: (0, 2**32 - 1)}[dt]


def test_constants():
  c = UOp.const(dtypes.int, 5)
  assert (c.vmin, c.vmax) == (5, 5) and type(c.vmin) is int
  assert (UOp.const(dtypes.bool, True).vmin, UOp.const(dtypes.bool, True).vmax) == (True, True)
  f = UOp.const(dtypes.float, 1.5)
  assert (f.vmin, f.vmax) == (1.5, 1.5) and type(f.vmin) is float
  n = UOp.const(dtypes.float, math.nan)
  assert (n.vmin, n.vmax) == (-math.inf, math.inf)  # a NaN constant says nothing
  assert math.copysign(1.0, UOp.const(dtypes.float, -0.0).vmin) == -1.0


def test_decided_comparisons_and_where():
  x = UOp.variable("x", 0, 10, dtypes.int)
  assert ((x < 11).vmin, (x < 11).vmax) == (True, True)
  assert ((x < 0).vmin, (x < 0).vmax) == (False, False)
  assert ((x < 5).vmin, (x < 5).vmax) == (False, True)
  assert (x.ne(20).vmin, x.eq(20).vmax) == (True, False)
  assert (UOp.const(dtypes.int, 3).eq(3).vmin) is True
  y = UOp.variable("y", 20, 30, dtypes.int)
  w = (x < y).where(x, y)
  assert (w.vmin, w.vmax) == (0, 10)
  w = (x < 5).where(x, y)
  assert (w.vmin, w.vmax) == (0, 30)


def test_division_ranges():
  x, y = UOp.variable("x", 0, 10, dtypes.int), UOp.variable("y", -2, 3, dtypes.int)
  assert ((x // 4).vmin, (x // 4).vmax) == (0, 2)
  assert ((x % 4).vmin, (x % 4).vmax) == (0, 3)
  s = UOp.variable("s", -7, 7, dtypes.int)
  assert ((s // 2).vmin, (s // 2).vmax) == (-4, 3)
  assert ((s % -3).vmin, (s % -3).vmax) == (-2, 0)
  # a divisor range with 0 in it: the dtype's full range
  assert ((x // y).vmin, (x // y).vmax) == full(dtypes.int)
  assert ((x % y).vmin, (x % y).vmax) == full(dtypes.int)
  e = (x * 4 + y * 8) // (UOp.variable("z", 1, 3, dtypes.int) * 2)
  assert (e.vmin, e.vmax) == (-8, 32)


def test_cast_ranges():
  assert (UOp.variable("x", 200, 300, dtypes.int).cast(dtypes.int8).vmin,) == (-128,)
  assert (UOp.variable("x", -100, 100, dtypes.int).cast(dtypes.int8).vmax,) == (100,)
  c = UOp.variable("f", 2e9, 3e9, dtypes.float).cast(dtypes.int)
  assert (c.vmin, c.vmax) == (2000000000, INT32_MAX)  # float->int overflow is undefined: clamp the overlap
  assert (lambda u: (u.vmin, u.vmax))(UOp.variable("f", 3e9, 4e9, dtypes.float).cast(dtypes.int)) == full(dtypes.int)
  assert (lambda u: (u.vmin, u.vmax))(UOp.const(dtypes.float, math.inf).cast(dtypes.int)) == full(dtypes.int)
  g = UOp.variable("x", 5, 7, dtypes.int).cast(dtypes.weakfloat)
  assert (g.vmin, g.vmax) == (5.0, 7.0) and type(g.vmin) is float
  assert (lambda u: (u.vmin, u.vmax))(UOp.variable("x", -1, 5, dtypes.int).cast(dtypes.uint32)) == full(dtypes.uint32)


def test_wrap_gives_full_range():
  b = UOp.variable("b", 0, INT32_MAX, dtypes.int)
  assert ((b + 1).vmin, (b + 1).vmax) == full(dtypes.int)
  assert (b + 1).sym_infer({"b": INT32_MAX}) == INT32_MIN


def test_range_special_bind():
  r = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 10),), 0)
  assert (r.vmin, r.vmax) == (0, 9)
  s = UOp(Ops.SPECIAL, dtypes.int, (), "gidx0")
  assert (s.vmin, s.vmax) == full(dtypes.int)
  x = UOp.variable("x", 2, 8, dtypes.int)
  bound = UOp(Ops.BIND, dtypes.int, (x, UOp.const(dtypes.int, 3)))
  assert (bound.vmin, bound.vmax) == (2, 8)
  assert (bound * 2).sym_infer({}) == 6 and (bound * 2).sym_infer({"x": 4}) == 8
  assert UOp.sink(x).vmin is None


def test_sym_infer_api_and_errors():
  x, y = UOp.variable("x", 0, 10, dtypes.int), UOp.variable("y", 0, 10, dtypes.int)
  e = x * 3 + y
  assert e.sym_infer({"x": 2, "y": 1}) == 7 and e.sym_infer({x: 2, y: 1}) == 7
  assert _core.sym_infer(e, {"x": 2, "y": 1}) == 7 and _core.sym_infer(5, {}) == 5
  with pytest.raises(ValueError, match="'y'"): e.sym_infer({"x": 2})
  with pytest.raises(ValueError, match="FLOORDIV"): (x // y).sym_infer({"x": 1, "y": 0})
  with pytest.raises(TypeError): e.sym_infer({3: 1})
  with pytest.raises(TypeError): e.sym_infer({"x": "a"})


def test_long_chain():
  x = UOp.variable("x", 0, 10, dtypes.int)
  e = x
  for _ in range(100_000): e = e + 1
  assert (e.vmin, e.vmax) == (100_000, 100_010)
  assert e.sym_infer({"x": 3}) == 100_003


# ---------------------------------------------------------------- min and max written as a where
@SETTINGS
@given(a=INT_TREES, b=INT_TREES, bnds=BOUNDS, data=st.data())
def test_where_of_a_comparison_and_its_operands_is_min_or_max(a, b, bnds, data):
  # tinygrad's minimum is (a < b).where(a, b): its range is min's (x.maximum(5).minimum(8) lies in [5, 8]), not the
  # union of the branches' ranges
  vs = [UOp.variable(f"v{i}", lo, hi, dtypes.int) for i, (lo, hi) in enumerate(bnds)]
  ua, ub = build(a, vs), build(b, vs)
  lo_, hi_ = (ua < ub).where(ua, ub), (ua < ub).where(ub, ua)
  if lo_.op is Ops.WHERE: assert (lo_.vmin, lo_.vmax) == (min(ua.vmin, ub.vmin), min(ua.vmax, ub.vmax))
  if hi_.op is Ops.WHERE: assert (hi_.vmin, hi_.vmax) == (max(ua.vmin, ub.vmin), max(ua.vmax, ub.vmax))
  for env in points(data, bnds):
    try: va, vb = ref(a, list(env)), ref(b, list(env))
    except ZeroDivisionError: continue
    vals = {f"v{i}": x for i, x in enumerate(env)}
    assert lo_.sym_infer(vals) == min(va, vb) and lo_.vmin <= min(va, vb) <= lo_.vmax
    assert hi_.sym_infer(vals) == max(va, vb) and hi_.vmin <= max(va, vb) <= hi_.vmax
  x = UOp.variable("x", 0, 10)
  assert (x.maximum(5).minimum(8).vmin, x.maximum(5).minimum(8).vmax) == (5, 8)


# ---------------------------------------------------------------- factors (tinygrad's const_factor and divides)
POLY = st.recursive(LEAF, lambda ch: st.one_of(st.tuples(st.sampled_from(["add", "sub", "mul"]), ch, ch),
                                               st.tuples(st.just("mulc"), ch, SMALL), st.tuples(st.just("neg"), ch)), max_leaves=8)


def exact(u: UOp, env: dict[str, int]) -> int:
  """A sum of products of variables and constants in Python's unbounded ints."""
  if u.op is Ops.CONST: return u.arg
  if u.op is Ops.DEFINE_VAR: return env[u.arg[0]]
  vals = [exact(s, env) for s in u.src]
  return {Ops.ADD: lambda: vals[0] + vals[1], Ops.MUL: lambda: vals[0] * vals[1], Ops.NEG: lambda: -vals[0]}[u.op]()


@SETTINGS
@given(tree=POLY, v=st.integers(1, 12), bnds=BOUNDS, data=st.data())
def test_const_factor_divides_the_value_and_divides_is_exact(tree, v, bnds, data):
  vs = [UOp.variable(f"v{i}", lo, hi, dtypes.int) for i, (lo, hi) in enumerate(bnds)]
  e = build(tree, vs)
  f, q = e.const_factor(), e.divides(v)
  for env in points(data, bnds):
    vals = {f"v{i}": x for i, x in enumerate(env)}
    if f: assert exact(e, vals) % f == 0
    if q is not None: assert exact(q, vals) * v == exact(e, vals)
  if f: assert e.divides(abs(f)) is not None or f < 0  # what const_factor finds, divides divides by


def test_factor_helpers_as_tinygrads():
  x, y = UOp.variable("x", 0, 20), UOp.variable("y", 0, 20)
  assert (UOp.const(dtypes.int, 30) + UOp.const(dtypes.int, 12)).const_factor() == 6
  assert (x * 4).const_factor() == 4 and (x // 4).const_factor() == 1 and x.const_factor() == 1
  assert (x * 6 + 18).divides(6) is not None and (x * 6 + 18).divides(6).const_factor() == 1
  assert (x * 6 + 7).divides(6) is None and UOp.const(dtypes.int, 42).divides(5) is None
  assert list((x * y * 3).split_uop(Ops.MUL)) == [x, y, UOp.const(dtypes.int, 3)]
  assert (x + 3).pop_const() == (x, 3) and x.pop_const(Ops.MUL) == (x, 1)
  assert (x * y * 6).divide_exact(y * 3) is not None and exact((x * y * 6).divide_exact(y * 3), {"x": 5, "y": 7}) == 10
  assert (x * 6).divide_exact(y) is None and x.divide_exact(x).arg == 1
  g = UOp.gcd(x * y * 6, x * 4)
  assert exact(g, {"x": 3, "y": 5}) == 6 and x._min_max == (0, 20)
