"""Constant folding (_core.fold) against NumPy: every int dtype (int8..uint64) and float dtype (float16, float32,
float64), for every op where NumPy has the same semantics. Transcendental ops are defined as the C library's
double function rounded to the dtype, so they are checked against libm called directly."""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tinyhybrid import Ops, _core, dtypes

# Each example is a batch of up to 6 operand tuples run through every op, so 75 examples check ~250 tuples per op.
SETTINGS = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTS = {n: (getattr(dtypes, n), getattr(np, n)) for n in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")}
FLOATS = {"float16": (dtypes.float16, np.float16, 16), "float32": (dtypes.float32, np.float32, 32),
          "float64": (dtypes.float64, np.float64, 64)}

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
for _f in ("sin", "exp2", "log2"): getattr(_libm, _f).restype, getattr(_libm, _f).argtypes = ctypes.c_double, [ctypes.c_double]
_libm.pow.restype, _libm.pow.argtypes = ctypes.c_double, [ctypes.c_double, ctypes.c_double]


def bits(x: float) -> bytes: return struct.pack("<d", x)


def same(got, want) -> bool:
  """Python value from fold vs NumPy scalar: kinds must match; floats bit-exact (NaN == NaN, -0.0 != 0.0)."""
  if isinstance(want, (bool, np.bool_)): return isinstance(got, bool) and got == bool(want)
  if isinstance(want, (float, np.floating)):
    want = float(want)
    return isinstance(got, float) and ((math.isnan(got) and math.isnan(want)) or bits(got) == bits(want))
  return isinstance(got, int) and not isinstance(got, bool) and got == int(want)


def batch(fn, npdt, *cols):
  """fn over whole columns at once (NumPy calls dominate the runtime otherwise)."""
  with np.errstate(all="ignore"): return fn(*[np.array(c, dtype=npdt) for c in cols])


def cast_all(vals, snp, dnp):
  with np.errstate(all="ignore"): return np.array(vals, snp).astype(dnp)


def _int_values(npdt):
  info = np.iinfo(npdt)
  edges = sorted({info.min, info.max, 0, 1, 2, 3, info.max // 2, info.min // 2} | ({-1, -2, info.min + 1} if info.min else set()))
  return st.one_of(st.integers(info.min, info.max), st.sampled_from(edges))


def _float_values(width):
  return st.one_of(st.floats(width=width), st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, math.inf, -math.inf, math.nan]))


def _rows(values, n=3): return st.lists(st.tuples(*[values] * n), min_size=1, max_size=6)


# Built once: building strategies inside each example costs more than the checks.
INT_VALUES = {n: _int_values(npdt) for n, (_, npdt) in INTS.items()}
INT_ROWS = {n: _rows(v) for n, v in INT_VALUES.items()}
SHIFT_ROWS = {n: st.lists(st.tuples(v, st.integers(-2, np.iinfo(INTS[n][1]).bits + 2), st.integers(0, 12)), min_size=1, max_size=6)
              for n, v in INT_VALUES.items()}
FLOAT_VALUES = {n: _float_values(w) for n, (_, _, w) in FLOATS.items()}
FLOAT_ROWS = {n: _rows(v) for n, v in FLOAT_VALUES.items()}


# ---------------------------------------------------------------- integers

def c_div(a: int, b: int) -> int: return abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)


def wrap(v: int, npdt) -> int:
  """Two's-complement wraparound to an int dtype, as a C cast does."""
  info = np.iinfo(npdt)
  v %= 1 << info.bits
  return v - (1 << info.bits) if v > info.max else v

INT_BINARY = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.MAX: np.maximum,
  Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
  Ops.FLOORDIV: np.floor_divide, Ops.FLOORMOD: np.remainder, Ops.CMOD: np.fmod,
}


@pytest.mark.parametrize("name", INTS)
@SETTINGS
@given(data=st.data())
def test_int_ops_match_numpy(name, data):
  dt, npdt = INTS[name]
  rows = data.draw(INT_ROWS[name])
  A, B, C = (list(col) for col in zip(*rows))
  for op, fn in INT_BINARY.items():
    result_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    for a, b, want in zip(A, B, batch(fn, npdt, A, B)):
      got = _core.fold(op, result_dt, a, b)
      if b == 0 and op in (Ops.FLOORDIV, Ops.FLOORMOD, Ops.CMOD): assert got is None, (op, a, b)
      else: assert same(got, want), (name, op, a, b, got, want)
  negs, maccs = batch(np.negative, npdt, A), batch(lambda x, y, z: x * y + z, npdt, A, B, C)
  for a, b, c, neg, macc in zip(A, B, C, negs, maccs):
    if b != 0:
      # C division truncates: the exact quotient, wrapped to the dtype (INT_MIN / -1 wraps back to INT_MIN).
      assert same(_core.fold(Ops.CDIV, dt, a, b), wrap(c_div(a, b), npdt)), (name, a, b)
    else:
      assert _core.fold(Ops.CDIV, dt, a, b) is None
    assert same(_core.fold(Ops.NEG, dt, a), neg), (name, a)
    assert same(_core.fold(Ops.MULACC, dt, a, b, c), macc), (name, a, b, c)
    assert same(_core.fold(Ops.WHERE, dt, a > b, b, c), b if a > b else c)
    assert _core.fold(Ops.TRUNC, dt, a) == a


@pytest.mark.parametrize("name", INTS)
@SETTINGS
@given(data=st.data())
def test_int_shifts_and_pow_match_numpy(name, data):
  dt, npdt = INTS[name]
  nbits = np.iinfo(npdt).bits
  rows = data.draw(SHIFT_ROWS[name])
  A, K, E = (list(col) for col in zip(*rows))
  for op, fn in ((Ops.SHL, np.left_shift), (Ops.SHR, np.right_shift)):
    for a, k, want in zip(A, K, batch(fn, npdt, A, [k % nbits for k in K])):
      got = _core.fold(op, dt, a, k)
      if not 0 <= k < nbits: assert got is None, (op, a, k)  # undefined in C
      else: assert same(got, want), (name, op, a, k, got)
  for a, e, want in zip(A, E, batch(np.power, npdt, A, E)):
    assert same(_core.fold(Ops.POW, dt, a, e), want), (name, a, e)


@pytest.mark.parametrize("src", INTS)
@SETTINGS
@given(data=st.data())
def test_int_casts_match_numpy(src, data):
  sdt, snp = INTS[src]
  vals = data.draw(st.lists(INT_VALUES[src], min_size=1, max_size=6))
  for dst, (ddt, dnp) in {**INTS, **{k: v[:2] for k, v in FLOATS.items()}}.items():
    same_size = np.dtype(snp).itemsize == np.dtype(dnp).itemsize
    views = np.array(vals, snp).view(dnp) if same_size else [None] * len(vals)
    for v, want, view in zip(vals, cast_all(vals, snp, dnp), views):
      assert same(_core.fold(Ops.CAST, ddt, v), want), (src, dst, v)
      if same_size: assert same(_core.fold(Ops.BITCAST, ddt, v, src_dtype=sdt), view), (src, dst, v)
  for v in vals: assert _core.fold(Ops.CAST, dtypes.bool, v) is (v != 0)


# ---------------------------------------------------------------- floats

FLOAT_NATIVE = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide,
  Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal, Ops.CMOD: np.fmod,
}
FLOAT_UNARY_NATIVE = {Ops.NEG: np.negative, Ops.SQRT: np.sqrt, Ops.TRUNC: np.trunc, Ops.RECIPROCAL: np.reciprocal}
LIBM = {Ops.SIN: _libm.sin, Ops.EXP2: _libm.exp2, Ops.LOG2: _libm.log2}


@pytest.mark.parametrize("name", FLOATS)
@SETTINGS
@given(data=st.data())
def test_float_ops_match_numpy(name, data):
  dt, npdt, width = FLOATS[name]
  rows = data.draw(FLOAT_ROWS[name])
  A, B, C = (list(col) for col in zip(*rows))
  for op, fn in FLOAT_NATIVE.items():
    result_dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt
    for a, b, want in zip(A, B, batch(fn, npdt, A, B)):
      got = _core.fold(op, result_dt, a, b)
      if op is Ops.CMOD and b == 0: assert got is None
      else: assert same(got, want), (name, op, a, b, got)
  # MAX propagates NaN (numpy.maximum); between zeros it gives +0.0 in either order, where numpy keeps one.
  for a, b, want in zip(A, B, batch(np.maximum, npdt, A, B)):
    got = _core.fold(Ops.MAX, dt, a, b)
    assert same(got, want) or (got == want == 0 and bits(got) == bits(0.0)), (name, a, b, got, want)
    assert same(got, _core.fold(Ops.MAX, dt, b, a))
  # Floor division and modulo compute in double and round once, as every op here does.
  for op, fn in ((Ops.FLOORDIV, np.floor_divide), (Ops.FLOORMOD, np.remainder)):
    for a, b, want in zip(A, B, cast_all(batch(fn, np.float64, A, B), np.float64, npdt)):
      got = _core.fold(op, dt, a, b)
      if b == 0: assert got is None
      else: assert same(got, want), (name, op, a, b, got)
  for op, fn in FLOAT_UNARY_NATIVE.items():
    for a, want in zip(A, batch(fn, npdt, A)): assert same(_core.fold(op, dt, a), want), (name, op, a)
  for op, fn in LIBM.items():
    for a, want in zip(A, cast_all([fn(a) for a in A], np.float64, npdt)): assert same(_core.fold(op, dt, a), want), (name, op, a)
  for a, b, want in zip(A, B, cast_all([_libm.pow(a, b) for a, b in zip(A, B)], np.float64, npdt)):
    assert same(_core.fold(Ops.POW, dt, a, b), want), (name, a, b)
  # MULACC rounds the product to the dtype before adding.
  for a, b, c, want in zip(A, B, C, batch(lambda x, y, z: x * y + z, npdt, A, B, C)):
    assert same(_core.fold(Ops.MULACC, dt, a, b, c), want), (name, a, b, c)


@pytest.mark.parametrize("src", FLOATS)
@SETTINGS
@given(data=st.data())
def test_float_casts_match_numpy(src, data):
  sdt, snp, width = FLOATS[src]
  vals = data.draw(st.lists(FLOAT_VALUES[src], min_size=1, max_size=6))
  for dst, (ddt, dnp, _) in FLOATS.items():
    for v, want in zip(vals, cast_all(vals, snp, dnp)): assert same(_core.fold(Ops.CAST, ddt, v), want), (src, dst, v)
  for dst, (ddt, dnp) in INTS.items():
    info = np.iinfo(dnp)
    same_size = np.dtype(snp).itemsize == np.dtype(dnp).itemsize
    views = np.array(vals, snp).view(dnp) if same_size else [None] * len(vals)
    for v, want, view in zip(vals, cast_all(vals, snp, dnp), views):
      got = _core.fold(Ops.CAST, ddt, v)
      if not math.isfinite(v) or not info.min <= math.trunc(v) <= info.max:
        assert got is None, (src, dst, v, got)  # undefined behaviour in C: not folded
      else:
        assert same(got, want), (src, dst, v)
      if same_size and not math.isnan(v):  # NaN payloads are not kept (see test_signed_zero_and_nan)
        assert same(_core.fold(Ops.BITCAST, ddt, v, src_dtype=sdt), view), (src, dst, v)
  for v in vals: assert _core.fold(Ops.CAST, dtypes.bool, v) is (v != 0)


# ---------------------------------------------------------------- fixed cases a rule writer relies on

def test_signed_zero_and_nan():
  f32 = dtypes.float32
  assert bits(_core.fold(Ops.MUL, f32, 0.0, -1.0)) == bits(-0.0)
  assert bits(_core.fold(Ops.ADD, f32, -0.0, 0.0)) == bits(0.0)
  assert bits(_core.fold(Ops.NEG, f32, 0.0)) == bits(-0.0)
  assert _core.fold(Ops.FDIV, f32, 1.0, -0.0) == -math.inf
  assert math.isnan(_core.fold(Ops.FDIV, f32, 0.0, 0.0))
  assert _core.fold(Ops.CMPLT, dtypes.bool, math.nan, 1.0) is False
  assert _core.fold(Ops.CMPNE, dtypes.bool, math.nan, math.nan) is True
  assert _core.fold(Ops.CMPEQ, dtypes.bool, math.nan, math.nan) is False
  assert math.isnan(_core.fold(Ops.MAX, f32, math.nan, 1.0)) and math.isnan(_core.fold(Ops.MAX, f32, 1.0, math.nan))
  # A float32 NaN bitcasts to the canonical quiet NaN (NaN payloads are not kept).
  assert _core.fold(Ops.BITCAST, dtypes.uint32, math.nan, src_dtype=f32) == 0x7FC00000


def test_weakint_and_bools():
  assert _core.fold(Ops.ADD, dtypes.weakint, 2**100, 2**100) == 2**101
  assert _core.fold(Ops.MUL, dtypes.weakint, 2**100, 2**100) is None  # past i128: not folded
  assert _core.fold(Ops.ADD, dtypes.weakint, 2**200, 1) is None
  assert _core.fold(Ops.FLOORDIV, dtypes.weakint, -7, 2) == -4 and _core.fold(Ops.CDIV, dtypes.weakint, -7, 2) == -3
  assert _core.fold(Ops.XOR, dtypes.bool, True, True) is False
  assert _core.fold(Ops.ADD, dtypes.bool, True, True) is True
  assert _core.fold(Ops.WHERE, dtypes.float32, False, 1.0, 2.0) == 2.0


def test_half_and_casts():
  half = dtypes.float16
  assert _core.fold(Ops.ADD, half, 1.0, 2**-11) == 1.0  # a tie rounds to even
  assert _core.fold(Ops.ADD, half, 65504.0, 16.0) == math.inf
  assert _core.fold(Ops.CAST, dtypes.float32, 2**60 + 2**36 + 1) == 2.0**60 + 2.0**37  # one rounding, not two
  assert _core.fold(Ops.CAST, dtypes.int8, 127.9) == 127 and _core.fold(Ops.CAST, dtypes.int8, 128.0) is None
  assert _core.fold(Ops.BITCAST, dtypes.int16, 1.0, src_dtype=half) == 0x3C00
  assert _core.fold(Ops.BITCAST, dtypes.int16, 1.0) is None  # half or bfloat16? not known without src_dtype
  assert _core.fold(Ops.THREEFRY, dtypes.uint64, 0, 0) == 0x99BA4EFE6B200159


def test_errors():
  with pytest.raises(TypeError): _core.fold(Ops.ADD, dtypes.int32, "a", 1)
  with pytest.raises(TypeError): _core.fold(Ops.ADD, "int", 1, 1)
  assert _core.fold(Ops.ADD, dtypes.int32, 1) is None  # wrong arity
  assert _core.fold(Ops.LOAD, dtypes.int32, 1) is None
