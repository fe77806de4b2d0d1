"""EXP2, LOG2 and SIN decomposed into plain ALU ops (codegen/decomp/transcendental.py): float64 and float32 within 2 ulp of
NumPy over their whole range and exact at the edges, run on the CPU (C) and PYTHON (NumPy) renderers with
TRANSCENDENTAL=2 (and on a real GPU through PTX when there is one); PTX's float64 kernels hold no f32 approximation
and assemble with ptxas."""
from __future__ import annotations

import ctypes.util
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid.codegen.decomp.transcendental import _pi, decompose_transcendentals, transcendental_dtypes, two_over_pi_words
from tinyhybrid.engine import realize
from tinyhybrid.helpers import Context
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp

DEVICES = ["CPU", "PYTHON"] + (["CUDA:PTX"] if ctypes.util.find_library("cuda") else [])
PTX = "NULL:PTX:sm_90"
ULPS = 2
RNG = np.random.default_rng(7)
OPS = {"exp2": (Tensor.exp2, np.exp2), "log2": (Tensor.log2, np.log2), "sin": (Tensor.sin, np.sin)}


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
  """Each test compiles its own kernels, and leaves none behind for the other modules."""
  monkeypatch.setattr(realize, "kernel_cache", OrderedDict())
  monkeypatch.setattr(realize, "schedule_cache", OrderedDict())


def ulp_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Distance in representable values (NaN against NaN, and 0 against -0, are 0 apart)."""
  it = {8: np.int64, 4: np.int32, 2: np.int16}[a.dtype.itemsize]
  def order(x: np.ndarray) -> np.ndarray:
    i = x.view(it).astype(np.int64)
    return np.where(i < 0, np.int64(np.iinfo(it).min) - i, i)
  d = np.abs(order(a) - order(b)).astype(np.float64)
  d[(np.isnan(a) & np.isnan(b)) | (a == b)] = 0
  d[np.isnan(a) != np.isnan(b)] = np.inf
  return d


def reference(name: str, x: np.ndarray) -> np.ndarray:
  with np.errstate(all="ignore"): return OPS[name][1](x.astype(np.float64)).astype(x.dtype)  # float32: rounded once


def run(name: str, x: np.ndarray, device: str) -> np.ndarray:
  with Context(TRANSCENDENTAL=2): return OPS[name][0](Tensor(x, device=device)).numpy()


def check(name: str, x: np.ndarray, device: str = "CPU") -> None:
  y, r = run(name, x, device), reference(name, x)
  d = ulp_diff(y, r)
  i = int(np.argmax(d))
  assert d[i] <= ULPS, f"{name}({x[i]!r}) = {y[i]!r}, NumPy says {r[i]!r}: {d[i]} ulp apart"


def samples(name: str, dt) -> np.ndarray:
  """The whole range, log-uniform where it is wide, plus the interval that matters most, plus denormals."""
  n, f64 = 20000, dt == np.float64
  emax, emin = (1024, -1074) if f64 else (128, -149)
  if name == "exp2": xs = [RNG.uniform(emin - 5, emax + 2, n), RNG.uniform(-2, 2, n), RNG.uniform(emin - 1, emin + 60, n)]
  elif name == "log2": xs = [2.0 ** RNG.uniform(emin, emax, n), RNG.uniform(0.5, 2, n), 1 + RNG.uniform(-1e-6, 1e-6, n)]
  else: xs = [RNG.uniform(-8, 8, n), np.sign(RNG.uniform(-1, 1, n)) * 2.0 ** RNG.uniform(-30, emax, n), 1e15 * RNG.uniform(-1, 1, n)]
  return np.concatenate(xs).astype(dt)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(OPS))
def test_values(name, dt, device):
  check(name, samples(name, dt), device)


EDGES = {
  "exp2": [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, 1023.0, 1023.999, 1024.0, 1e300, -1022.0, -1022.5, -1074.0,
           -1074.5, -1074.9, -1075.0, -1e300, 127.99, 128.0, -126.5, -149.0, -149.5, -150.0],
  "log2": [0.0, -0.0, -1.0, -np.inf, np.inf, np.nan, 5e-324, 1e-310, 2.2250738585072014e-308, 1.0, 2.0, 0.5, 1e308,
           1.7976931348623157e308, 1.4142135623730951, 0.7071067811865476, 1.0000000000000002, 0.9999999999999999,
           1e-45, 1.17549435e-38, 3.4028235e38],
  "sin": [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-300, 0.7799999, 0.78, np.pi / 4, np.pi / 2, np.pi, -np.pi, 1e15,
          -1e15, 1e22, 1.7976931348623157e308, 6381956970095103 * 2.0**797, 5.319372648326541e255, 3.4028235e38, 1e-45,
          13176794.0, 1e9],
}


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("name", list(OPS))
def test_edges(name, dt):
  with np.errstate(over="ignore"): x = np.array(EDGES[name], dtype=dt)
  check(name, x)
  y, r = run(name, x, "CPU"), reference(name, x)
  np.testing.assert_array_equal(np.isnan(y), np.isnan(r))
  np.testing.assert_array_equal(y[np.isinf(r)], r[np.isinf(r)])
  np.testing.assert_array_equal(np.signbit(y[r == 0]), np.signbit(r[r == 0]))  # sin(-0.0) = -0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=64), min_size=32, max_size=32), st.sampled_from(list(OPS)))
def test_any_float64(xs, name):
  check(name, np.array(xs, dtype=np.float64))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(width=32), min_size=32, max_size=32), st.sampled_from(list(OPS)))
def test_any_float32(xs, name):
  check(name, np.array(xs, dtype=np.float32))


def test_half_goes_through_float32():
  x = np.linspace(-4, 4, 101).astype(np.float16)
  for name in OPS:
    y, r = run(name, np.abs(x) if name == "log2" else x, "CPU"), reference(name, np.abs(x) if name == "log2" else x)
    assert ulp_diff(y, r).max() <= 1


def test_two_over_pi():
  words = two_over_pi_words(8)
  assert words[:3] == (0, 0, 0xA2F9836E)  # 2/pi = 0.A2F9836E4E441529FC27...
  bits = int("".join(f"{w:08x}" for w in words[2:]), 16)
  assert abs(bits / 2**192 - 2 / float(_pi(100))) < 1e-16


def test_the_rewrite():
  buf = UOp(Ops.PARAM, dtypes.float64.ptr(4), (), 0)
  x = UOp(Ops.LOAD, dtypes.float64, (UOp(Ops.INDEX, dtypes.float64, (buf, UOp.const(dtypes.weakint, 0))),))
  h = x.cast(dtypes.half)
  sink = UOp.sink(x.exp2(), x.log2(), x.sin(), h.exp2(), x.cast(dtypes.float).sin())
  out = decompose_transcendentals(sink, {dtypes.float64})
  left = {(u.op, u.dtype) for u in out.toposort() if u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN)}
  assert left == {(Ops.EXP2, dtypes.half), (Ops.SIN, dtypes.float)}  # the others' dtypes are not asked for
  out = decompose_transcendentals(sink, {dtypes.float64, dtypes.float, dtypes.half})
  assert not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN) for u in out.toposort())
  assert decompose_transcendentals(sink, ()) is sink
  vec = UOp(Ops.VECTORIZE, dtypes.float64.vec(2), (x, x + 1.0)).exp2()  # a vector op: lane by lane
  out = decompose_transcendentals(UOp.sink(vec), {dtypes.float64})
  assert out.src[0].op is Ops.VECTORIZE and not any(u.op is Ops.EXP2 for u in out.toposort())
  assert transcendental_dtypes({dtypes.float64}) == {dtypes.float64}
  with Context(TRANSCENDENTAL=2): assert {dtypes.half, dtypes.bfloat16, dtypes.float, dtypes.float64} <= transcendental_dtypes()


@pytest.mark.parametrize("name", ["exp2", "log2"])
def test_vector_kernels_decompose_float32(name):
  # by default (no TRANSCENDENTAL) a CPU renderer with vectors writes float32 exp2 and log2 as plain ops before the
  # lanes are expanded, so they run as vector code rather than one libm call per lane; as exact as the decomposition
  with np.errstate(over="ignore"): edges = np.array(EDGES[name], dtype=np.float64).astype(np.float32)  # 1e300 is inf
  x = np.concatenate([samples(name, np.float32), edges])
  before = set(realize.kernel_cache)
  y, r = OPS[name][0](Tensor(x, device="CPU")).numpy(), reference(name, x)
  d = ulp_diff(y, r)
  i = int(np.argmax(d))
  assert d[i] <= ULPS, f"{name}({x[i]!r}) = {y[i]!r}, NumPy says {r[i]!r}: {d[i]} ulp apart"
  np.testing.assert_array_equal(np.isnan(y), np.isnan(r))
  np.testing.assert_array_equal(y[np.isinf(r)], r[np.isinf(r)])
  srcs = [prg.src for key, (_, prg) in realize.kernel_cache.items() if key not in before]
  if Device["CPU"].renderer.vec > 1: assert srcs and not any(f"{name}f(" in src or f"@llvm.{name}" in src for src in srcs)


def _ptx(dt, fn=lambda t: t.exp2()) -> str:
  before = set(realize.kernel_cache)
  fn(Tensor(np.linspace(-3, 3, 256), device=PTX).cast(dt)).realize()  # compiled by ptxas on the NULL device
  return "\n".join(prg.src for key, (_, prg) in realize.kernel_cache.items() if key not in before)


def test_ptx_float64_has_no_f32_approximation():
  for fn in (lambda t: t.exp2(), lambda t: t.abs().log2(), lambda t: t.sin(), lambda t: t.exp()):
    src = _ptx(dtypes.float64, fn)
    assert ".f64" in src and "approx" not in src and "cvt.rn.f32.f64" not in src and ".f32" not in src
  assert "ex2.approx.f32" in _ptx(dtypes.float)  # float32 and half keep the hardware's approximation
  assert "ex2.approx.f32" in _ptx(dtypes.half)
  with Context(TRANSCENDENTAL=2): assert "approx" not in _ptx(dtypes.float)


@pytest.mark.skipif("CUDA:PTX" not in DEVICES, reason="no GPU")
def test_ptx_float64_on_the_gpu():
  x = RNG.uniform(-700, 700, 4096)
  t = Tensor(x, device="CUDA:PTX")
  np.testing.assert_allclose(t.exp().numpy(), np.exp(x), rtol=1e-12)
  np.testing.assert_allclose(t.sin().numpy(), np.sin(x), rtol=1e-12, atol=1e-300)
  np.testing.assert_allclose(t.abs().log().numpy(), np.log(np.abs(x)), rtol=1e-12)
