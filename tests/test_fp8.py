"""The OCP fp8 dtypes (fp8e4m3: E4M3FN, fp8e5m2: E5M2) on the devices that render them: the CPU's C
(renderer/cstyle.py), the PYTHON device's NumPy (renderer/python.py, runtime/lanes.py), and CUDA C++ compiled by NVRTC
(renderer/cuda.py, checked to compile for sm_90 without a GPU; on a machine with a CUDA driver the value tests run
there too). Stored as a byte, computed in float.

The semantics are torch's casts (torch.float8_e4m3fn, torch.float8_e5m2), compared value by value: float -> fp8 rounds
to nearest even; past the largest finite E4M3 saturates to +-448 (infinities too: a number never becomes its NaN)
and E5M2 overflows to +-inf; a NaN becomes the all-ones pattern with its sign. ml_dtypes agrees on every value in
range and on E5M2's overflow, but its E4M3FN turns an overflow or an infinity into NaN and its E5M2 NaN is 0x7e:
test_torch_and_ml_dtypes_disagree pins down where. A float64 rounds once, straight to the fp8 (as ml_dtypes does,
and the graph's constant folding), where torch rounds it to float32 first."""
from __future__ import annotations

import ctypes.util

import ml_dtypes
import numpy as np
import pytest
import torch

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid.dtype import fp8_decode, fp8_encode
from tinyhybrid.engine import realize

OCP = {dtypes.fp8e4m3: (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn, 448.0),
       dtypes.fp8e5m2: (torch.float8_e5m2, ml_dtypes.float8_e5m2, 57344.0)}
FP8 = list(OCP)
DEVICES = ["CPU", "PYTHON"] + (["CUDA"] if ctypes.util.find_library("cuda") else [])  # CUDA: a real GPU
NULL_CUDA = "NULL:CUDA:sm_90"


def _bits(t: Tensor) -> np.ndarray: return t.bitcast(dtypes.uint8).numpy()


def _torch_bits(x: np.ndarray, dt) -> np.ndarray:
  """torch's cast of the float32 values x to dt, as bytes."""
  return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(OCP[dt][0]).view(torch.uint8).numpy()


def _torch_values(bits: np.ndarray, dt) -> np.ndarray:
  """The float32 values of dt's bit patterns, by torch."""
  return torch.from_numpy(np.ascontiguousarray(bits, np.uint8)).view(OCP[dt][0]).float().numpy()


def _same_floats(a: np.ndarray, b: np.ndarray) -> bool:
  """Equal bit for bit (so -0.0 is not 0.0), NaN wherever the other is NaN (payloads aside)."""
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  nan = np.isnan(a)
  return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


def _finite_values(dt) -> np.ndarray:
  """Every finite value of dt, from its bit patterns (both zeros included)."""
  v = _torch_values(np.arange(256, dtype=np.uint8), dt)
  return v[np.isfinite(v)]


def _edge_cases(dt) -> np.ndarray:
  """Float32 values where a conversion to dt can go wrong: each tie between neighbouring finite values and the floats
  just either side of it, the subnormals and half of the smallest, the largest, the tie past it and beyond, infinities,
  NaNs, both zeros and float32's own extremes."""
  fin = np.unique(_finite_values(dt))
  mids = ((fin[1:].astype(np.float64) + fin[:-1]) / 2).astype(np.float32)  # exact: a tie has few bits
  near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
  mx = np.float32(OCP[dt][2])
  ulp_top = np.float32(32.0 if dt is dtypes.fp8e4m3 else 8192.0)  # spacing of the top binade
  big = [mx, np.nextafter(mx, np.float32(np.inf)), mx + ulp_top / 2, np.nextafter(mx + ulp_top / 2, np.float32(np.inf)),
         mx + ulp_top, mx * 2, np.float32(1e30), np.finfo(np.float32).max, np.float32(np.inf)]
  tiny = [np.finfo(np.float32).smallest_subnormal, np.finfo(np.float32).tiny, np.float32(0.0)]
  sub = fin[(fin > 0) & (fin < fin[fin > 0].min() * 8)]
  out = np.concatenate([near, big, tiny, sub, sub / 2, sub * np.float32(1.5), np.array([np.nan], np.float32)]).astype(np.float32)
  return np.concatenate([out, -out])


def _random_floats(n: int, seed: int = 0) -> np.ndarray:
  """Random float32 bit patterns (every exponent, NaNs and infinities among them), and values spread over the fp8s'
  range on a log scale."""
  rng = np.random.default_rng(seed)
  raw = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
  spread = (rng.standard_normal(n) * np.exp2(rng.uniform(-20, 18, n))).astype(np.float32)
  return np.concatenate([raw, spread])


# ** every value **

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_every_bit_pattern_to_float_and_back(dev, dt):
  bits = np.arange(256, dtype=np.uint8)
  t = Tensor(bits, device=dev).bitcast(dt)
  ref = _torch_values(bits, dt)
  assert _same_floats(t.cast(dtypes.float32).numpy(), ref)
  assert _same_floats(t.numpy(), ref) and t.numpy().dtype == np.float32  # numpy() gives the values, as tinygrad's
  assert _same_floats(t.cast(dtypes.float64).numpy(), ref.astype(np.float64))
  # every finite value comes back exactly from float32 and float64; a NaN comes back as the format's NaN, sign kept
  nan = np.isnan(ref)
  for src in (dtypes.float32, dtypes.float64):
    back = _bits(Tensor(ref, device=dev).cast(src).cast(dt))
    np.testing.assert_array_equal(back[~nan], bits[~nan])
    np.testing.assert_array_equal(back[nan], (bits[nan] & 0x80) | 0x7F)
  # bits survive a load and a store that go through float
  np.testing.assert_array_equal(_bits(t.contiguous())[~nan], bits[~nan])


@pytest.mark.parametrize("dt", FP8, ids=str)
def test_host_conversions_against_torch(dt):
  """dtype.fp8_encode / fp8_decode (Tensor's constructor, numpy(), the PYTHON device) on a large set."""
  x = np.concatenate([_random_floats(1_000_000, seed=1), _edge_cases(dt)])
  np.testing.assert_array_equal(fp8_encode(x, dt), _torch_bits(x, dt))
  bits = np.arange(256, dtype=np.uint8)
  assert _same_floats(fp8_decode(bits, dt), _torch_values(bits, dt))


# ** float32 -> fp8 **

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_cast_from_float32_against_torch(dev, dt):
  x = np.concatenate([_random_floats(200_000), _edge_cases(dt)])
  ours = _bits(Tensor(x, device=dev).cast(dt))
  np.testing.assert_array_equal(ours, _torch_bits(x, dt))
  # ml_dtypes agrees wherever it and torch do: every value but E4M3's overflows and E5M2's NaN pattern
  ml = x.astype(OCP[dt][1]).view(np.uint8)
  agree = ~np.isnan(x) & ((np.abs(x) <= 464.0) if dt is dtypes.fp8e4m3 else True)
  np.testing.assert_array_equal(ours[agree], ml[agree])


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_edge_cases(dev, dt):
  mx = OCP[dt][2]
  x = np.array([mx, -mx, mx + 1, mx * 1.01, np.inf, -np.inf, np.nan, -np.nan, -0.0, 0.0], np.float32)
  got = Tensor(x, device=dev).cast(dt)
  if dt is dtypes.fp8e4m3: want = [448, -448, 448, 448, 448, -448, np.nan, np.nan, -0.0, 0.0]
  else: want = [57344, -57344, 57344, 57344, np.inf, -np.inf, np.nan, np.nan, -0.0, 0.0]
  assert _same_floats(got.numpy(), np.array(want, np.float32))
  np.testing.assert_array_equal(_bits(got)[6:], [0x7F, 0xFF, 0x80, 0x00])  # NaN keeps its sign, and so does zero
  # ties go to even: E4M3 1.0625 (between 1 and 1.125) -> 1, 1.1875 -> 1.25; E5M2 1.125 -> 1, 1.375 -> 1.5
  ties = [1.0625, 1.1875] if dt is dtypes.fp8e4m3 else [1.125, 1.375]
  assert Tensor(ties, device=dev).cast(dt).numpy().tolist() == [1.0, 1.25 if dt is dtypes.fp8e4m3 else 1.5]
  # subnormals: the smallest, half of it (a tie with 0: to 0), and a little more than half (up to the smallest)
  s = 2.0 ** (-9 if dt is dtypes.fp8e4m3 else -16)
  assert Tensor([s, s / 2, s * 0.5001, -s * 0.5001, 3 * s], device=dev).cast(dt).numpy().tolist() == [s, 0.0, s, -s, 3 * s]
  # past the largest: the tie above it rounds to even (E4M3's even neighbour is its largest, E5M2's is inf)
  top = 464.0 if dt is dtypes.fp8e4m3 else 61440.0
  assert Tensor([top, np.nextafter(np.float32(top), np.float32(0))], device=dev).cast(dt).numpy().tolist() == \
         [mx if dt is dtypes.fp8e4m3 else np.inf, mx]


def test_torch_and_ml_dtypes_disagree():
  """The evidence for the semantics chosen: torch saturates E4M3 where ml_dtypes gives NaN, and their E5M2 NaNs
  differ; ours are torch's. For float64 sources, ml_dtypes rounds once and torch twice (through float32); ours round
  once."""
  x = np.array([500.0, np.inf, -np.inf, np.nan], np.float32)
  e4 = [0x7E, 0x7E, 0xFE, 0x7F]
  np.testing.assert_array_equal(_torch_bits(x, dtypes.fp8e4m3), e4)
  np.testing.assert_array_equal(x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8), [0x7F, 0x7F, 0xFF, 0x7F])
  np.testing.assert_array_equal(_bits(Tensor(x).cast(dtypes.fp8e4m3)), e4)
  x[0] = 1e5  # past E5M2's largest, 57344
  np.testing.assert_array_equal(_torch_bits(x, dtypes.fp8e5m2), [0x7C, 0x7C, 0xFC, 0x7F])
  np.testing.assert_array_equal(x.astype(ml_dtypes.float8_e5m2).view(np.uint8), [0x7C, 0x7C, 0xFC, 0x7E])
  np.testing.assert_array_equal(_bits(Tensor(x).cast(dtypes.fp8e5m2)), [0x7C, 0x7C, 0xFC, 0x7F])
  d = np.array([1.0625 + 2.0**-40], np.float64)  # just above a tie; float32 rounds it onto the tie
  assert torch.from_numpy(d).to(torch.float8_e4m3fn).float().item() == 1.0
  assert float(d.astype(ml_dtypes.float8_e4m3fn)[0]) == 1.125


# ** float64 and other sources **

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_cast_from_float64_rounds_once(dev, dt):
  fin = np.unique(_finite_values(dt)).astype(np.float64)
  mids = (fin[1:] + fin[:-1]) / 2
  with np.errstate(invalid="ignore"): rand = _random_floats(50_000).astype(np.float64)  # (signaling NaNs among them)
  x = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids, rand])
  ours = _bits(Tensor(x, device=dev).cast(dt))
  np.testing.assert_array_equal(ours, fp8_encode(x, dt))
  ok = np.isfinite(x) & (np.abs(x) < (464.0 if dt is dtypes.fp8e4m3 else np.inf))
  np.testing.assert_array_equal(ours[ok], x[ok].astype(OCP[dt][1]).view(np.uint8))  # ml_dtypes rounds once too
  # a constant folds to the same value as the kernel computes
  for v in [1.0625 + 2.0**-40, 500.0, -1e300, float("inf"), 2.0**-10 * 1.0000001]:
    assert _same_floats(Tensor(v, dtype=dtypes.float64).cast(dt).numpy(), Tensor([v], dtype=dtypes.float64, device=dev).cast(dt).numpy()[0])


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_casts_with_ints_bools_and_floats(dev, dt):
  tdt = OCP[dt][0]
  vals = _torch_values(np.arange(256, dtype=np.uint8), dt)
  fin = vals[np.isfinite(vals)]
  t, tt = Tensor(fin, device=dev).cast(dt), torch.from_numpy(fin).to(tdt)
  # fp8 -> ints (truncation; values an int holds), bool, half, bfloat16, the other fp8
  small = np.abs(fin) < 127
  for to, tto in ((dtypes.int8, torch.int8), (dtypes.int32, torch.int32), (dtypes.int64, torch.int64)):
    np.testing.assert_array_equal(t.cast(to).numpy()[small], tt.to(tto).numpy()[small])
  pos = (fin >= 0) & (fin < 255)
  np.testing.assert_array_equal(t.cast(dtypes.uint8).numpy()[pos], tt.to(torch.uint8).numpy()[pos])
  np.testing.assert_array_equal(t.cast(dtypes.bool).numpy(), tt.to(torch.bool).numpy())
  assert _same_floats(t.cast(dtypes.half).numpy(), tt.to(torch.float16).float().numpy())
  np.testing.assert_array_equal(t.cast(dtypes.bfloat16).bitcast(dtypes.uint16).numpy(), tt.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
  other = dtypes.fp8e5m2 if dt is dtypes.fp8e4m3 else dtypes.fp8e4m3
  np.testing.assert_array_equal(_bits(t.cast(other)), tt.to(OCP[other][0]).view(torch.uint8).numpy())
  # ints, bools, half and bfloat16 -> fp8
  ints = np.arange(-70000, 70000, 97, dtype=np.int64)
  for src, np_t in ((dtypes.int32, np.int32), (dtypes.int64, np.int64), (dtypes.int16, np.int16)):
    x = ints.astype(np_t)
    np.testing.assert_array_equal(_bits(Tensor(x, device=dev).cast(dt)), torch.from_numpy(x).to(tdt).view(torch.uint8).numpy())
  u = np.arange(256, dtype=np.uint8)
  np.testing.assert_array_equal(_bits(Tensor(u, device=dev).cast(dt)), torch.from_numpy(u).to(tdt).view(torch.uint8).numpy())
  np.testing.assert_array_equal(_bits(Tensor([True, False], device=dev).cast(dt)), torch.tensor([True, False]).to(tdt).view(torch.uint8).numpy())
  with np.errstate(over="ignore", invalid="ignore"): h = _random_floats(20_000).astype(np.float16)
  np.testing.assert_array_equal(_bits(Tensor(h, device=dev).cast(dt)), torch.from_numpy(h).to(tdt).view(torch.uint8).numpy())
  b = torch.from_numpy(_random_floats(20_000)).to(torch.bfloat16)
  tb = Tensor(b.view(torch.int16).numpy().view(np.uint16), device=dev).bitcast(dtypes.bfloat16)
  np.testing.assert_array_equal(_bits(tb.cast(dt)), b.to(tdt).view(torch.uint8).numpy())


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_bitcast(dev, dt):
  u = np.arange(256, dtype=np.uint8)
  t = Tensor(u, device=dev).bitcast(dt)
  # a kernel holds an fp8 as a float: every pattern comes back but E5M2's NaNs, which become its NaN (0x7f) with their
  # sign, as torch's .float().to() does
  want = np.where(np.isnan(_torch_values(u, dt)), (u & 0x80) | 0x7F, u).astype(np.uint8)
  assert (want != u).sum() == (0 if dt is dtypes.fp8e4m3 else 4)
  np.testing.assert_array_equal(t.bitcast(dtypes.uint8).numpy(), want)
  np.testing.assert_array_equal(t.bitcast(dtypes.int8).numpy(), want.view(np.int8))
  np.testing.assert_array_equal(Tensor(u.view(np.int8), device=dev).bitcast(dt).bitcast(dtypes.uint8).numpy(), want)
  other = dtypes.fp8e5m2 if dt is dtypes.fp8e4m3 else dtypes.fp8e4m3
  nan = np.isnan(_torch_values(u, dt)) | np.isnan(_torch_values(u, other))  # a NaN's pattern is the format's own
  np.testing.assert_array_equal(t.bitcast(other).bitcast(dtypes.uint8).numpy()[~nan], u[~nan])
  assert _same_floats(t.bitcast(other).cast(dtypes.float).numpy(), _torch_values(want, other))


# ** arithmetic **

@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_arithmetic_against_torch(dev, dt):
  """Every pair of values: each op computed in float and rounded to the fp8, as torch rounds its float results cast
  back (torch has no float8 add on the CPU)."""
  tdt = OCP[dt][0]
  u = np.arange(256, dtype=np.uint8)
  ab, bb = np.repeat(u, 256), np.tile(u, 256)
  a, b = Tensor(ab, device=dev).bitcast(dt), Tensor(bb, device=dev).bitcast(dt)
  ta, tb = torch.from_numpy(ab).view(tdt).float(), torch.from_numpy(bb).view(tdt).float()
  rb = (1 / tb).to(tdt).float()  # a / b is a * (1 / b), as tinygrad's (and bfloat16's here): the reciprocal rounds first
  for got, want in (((a + b), ta + tb), ((a * b), ta * tb), ((a - b), ta - tb), ((a / b), ta * rb),
                    (a.maximum(b), torch.maximum(ta, tb)), ((a * b + a), (ta * tb).to(tdt).float() + ta)):
    assert got.dtype is dt
    w = want.to(tdt)
    assert _same_floats(got.numpy(), w.float().numpy())
    wb, gb = w.view(torch.uint8).numpy(), _bits(got)
    np.testing.assert_array_equal(gb[(wb & 0x7F) != 0x7F], wb[(wb & 0x7F) != 0x7F])  # NaN signs aside
  np.testing.assert_array_equal((a < b).numpy(), (ta < tb).numpy())
  np.testing.assert_array_equal((a == b).numpy(), (ta == tb).numpy())


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dt", FP8, ids=str)
def test_reduces_and_functions(dev, dt):
  tdt = OCP[dt][0]
  rng = np.random.default_rng(3)
  x = rng.integers(-8, 9, (16, 64)).astype(np.float32) / 4  # sums stay exact in float32
  t, tt = Tensor(x, device=dev).cast(dt), torch.from_numpy(x).to(tdt).float()
  def check(got: Tensor, want: torch.Tensor) -> None:
    assert got.dtype is dt
    assert _same_floats(got.numpy(), want.to(tdt).float().numpy())
  check(t.sum(axis=1), tt.sum(axis=1))
  check(t.max(axis=0), tt.max(axis=0).values)
  check(t.min(), tt.min())
  check(t.sum(), tt.sum())
  check(t.relu(), tt.relu())
  check((t > 0).where(t, t * 3), torch.where(tt > 0, tt, (tt * 3).to(tdt).float()))
  check(t.exp2(), torch.exp2(tt))  # in float32, rounded once
  check(t.sqrt(), torch.sqrt(tt))
  m = Tensor(x[:, :16], device=dev).cast(dt)
  check(m @ m.T, tt[:, :16] @ tt[:, :16].T)


# ** Tensor's own conversions **

@pytest.mark.parametrize("dt", FP8, ids=str)
def test_tensor_from_python_and_numpy(dt):
  tdt = OCP[dt][0]
  vals = [1.0, 2.5, -0.3, 1000.0, 1e-6, float("inf"), float("nan"), -0.0, 3]
  want = torch.tensor(vals, dtype=torch.float64).float().to(tdt).float().numpy()
  assert _same_floats(Tensor(vals, dtype=dt).numpy(), want)
  assert _same_floats(Tensor(np.array(vals, np.float32), dtype=dt).numpy(), want)
  assert _same_floats(Tensor(np.array(vals, np.float64), dtype=dt).numpy(), want)
  t = Tensor([[1.5, -2.0]], dtype=dt)
  assert t.tolist() == [[1.5, -2.0]] and Tensor(1.5, dtype=dt).item() == 1.5 and t.numpy().dtype == np.float32
  assert Tensor.ones(3, dtype=dt).numpy().tolist() == [1.0, 1.0, 1.0]
  assert Tensor.full((2,), 500.0, dtype=dt).numpy().tolist() == [448.0 if dt is dtypes.fp8e4m3 else 512.0] * 2
  assert Tensor.zeros(0, dtype=dt).numpy().dtype == np.float32


@pytest.mark.parametrize("dt", FP8, ids=str)
def test_safetensors_round_trip(tmp_path, dt):
  from safetensors.torch import load_file, save_file
  from tinyhybrid.nn.state import get_state_dict, safe_load, safe_save
  tdt = OCP[dt][0]
  every = torch.arange(256, dtype=torch.uint8).view(tdt)
  save_file({"w": every.reshape(16, 16)}, tmp_path / "torch.safetensors")
  w = safe_load(tmp_path / "torch.safetensors")["w"]
  assert w.dtype is dt and w.shape == (16, 16)
  np.testing.assert_array_equal(_bits(w).reshape(-1), np.arange(256))
  assert _same_floats(w.numpy().reshape(-1), every.float().numpy())
  safe_save({"w": w, "x": Tensor([1.0, -2.5, 1000.0]).cast(dt)}, tmp_path / "ours.safetensors")
  back = load_file(tmp_path / "ours.safetensors")
  assert back["w"].dtype == tdt and np.array_equal(back["w"].view(torch.uint8).reshape(-1).numpy(), np.arange(256))
  assert back["x"].float().tolist() == [1.0, -2.5, 448.0 if dt is dtypes.fp8e4m3 else 1024.0]
  # tinygrad's test_disk_tensor test_save_all_dtypes, for the fp8s
  ones = Tensor(np.random.default_rng(0).random((10, 10)), dtype=dt)
  safe_save(get_state_dict(ones), path := tmp_path / "ones.safetensors")
  loaded = list(safe_load(path).values())[0]
  np.testing.assert_equal(ones.bitcast(dtypes.uint8).numpy(), loaded.bitcast(dtypes.uint8).numpy())
  assert _same_floats(loaded.numpy(), torch.from_numpy(ones.numpy()).to(tdt).float().numpy())


# ** what is not rendered **

def test_fnuz_where_rendered_and_ptx_fp8_refused():
  # the fnuz formats: C and LLVM render them (test_fnuz_casts_match_torch); PYTHON and CUDA do not
  with pytest.raises(TypeError, match="fp8e5m2fnuz"): Tensor([1.0], device="PYTHON").cast(dtypes.fp8e5m2fnuz).realize()
  assert dtypes.fp8e4m3 not in Device["NULL:PTX:sm_90"].renderer.supported_dtypes()
  with pytest.raises(TypeError, match="fp8e4m3"): Tensor([1.0, 2.0], device="NULL:PTX:sm_90").cast(dtypes.fp8e4m3).realize()
  for dev in ("PYTHON", NULL_CUDA):
    ren = Device[dev].renderer
    assert set(dtypes.fp8_ocp) <= ren.supported_dtypes() and not set(dtypes.fp8_fnuz) & ren.supported_dtypes()
  assert set(dtypes.fp8s) <= Device["CPU"].renderer.supported_dtypes()


# ** CUDA C++, compiled by NVRTC for sm_90 (no GPU needed) **

def _sources(run) -> set[str]:
  before = set(realize.kernel_cache)
  run()
  return {prg.src for key, (_, prg) in realize.kernel_cache.items() if key not in before}


def test_cuda_fp8_kernels_compile():
  def run():
    x = Tensor(np.linspace(-600, 600, 64, dtype=np.float32), device=NULL_CUDA)
    for dt in FP8:
      f = x.cast(dt)
      (f * f + f).cast(dtypes.float).realize()
      f.max(axis=0).realize()
      f.bitcast(dtypes.uint8).realize()
      x.cast(dtypes.double).cast(dt).cast(dtypes.half).realize()
      Tensor(np.arange(256, dtype=np.uint8), device=NULL_CUDA).bitcast(dt).cast(dtypes.int32).realize()
  srcs = [s for s in _sources(run) if "cuda_fp8.h" in s]  # compiled by NVRTC as they were made: a CompileError fails
  assert len(srcs) >= 8
  text = "\n".join(srcs)
  assert "__nv_fp8_e4m3* __restrict__" in text and "__nv_fp8_e5m2* __restrict__" in text
  assert "th_f2e4m3(" in text and "th_e5m22f(" in text and "th_fp8_d2f(" in text
  assert all(Device[NULL_CUDA].compiler.compile(s)[:4] == b"\x7fELF" for s in srcs[:2])  # a cubin, past any cache


@pytest.mark.parametrize("dt", FP8, ids=str)
def test_cuda_conversions_on_the_host(tmp_path, dt):
  """The conversions CUDA kernels use (arithmetic, no table: renderer/cstyle.py fp8_helpers, as the CUDA writer spells
  them but for the qualifier and memcpy's name), built for the host by the C compiler and run on every fp8 value and
  a large set of floats and doubles."""
  from tinyhybrid.renderer.cstyle import FP8_FORMATS, fp8_format_helpers, fp8_helpers
  from tinyhybrid.runtime.compiler import c_compiler
  name, qual = FP8_FORMATS[dt][0], "static inline "
  src = "\n".join(["#include <math.h>", fp8_helpers(qual, "__builtin_memcpy"), fp8_format_helpers(dt, qual, table=False),
                   f"void dec(const unsigned char* x, float* y, long n) {{ for (long i = 0; i < n; i++) y[i] = th_{name}2f(x[i]); }}",
                   f"void enc(const float* x, unsigned char* y, long n) {{ for (long i = 0; i < n; i++) y[i] = th_f2{name}(x[i]); }}",
                   f"void encd(const double* x, unsigned char* y, long n) {{ for (long i = 0; i < n; i++) y[i] = th_f2{name}(th_fp8_d2f(x[i])); }}"])
  (c := tmp_path / "fp8.c").write_text(src)
  import subprocess
  subprocess.run([c_compiler(), "-O2", "-shared", "-fPIC", "-o", str(so := tmp_path / "fp8.so"), str(c)], check=True)
  lib = ctypes.CDLL(str(so))
  def call(fn, x: np.ndarray, out_dtype) -> np.ndarray:
    out = np.empty(len(x), out_dtype)
    getattr(lib, fn)(x.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p), ctypes.c_long(len(x)))
    return out
  bits = np.arange(256, dtype=np.uint8)
  assert _same_floats(call("dec", bits, np.float32), _torch_values(bits, dt))
  x = np.concatenate([_random_floats(500_000, seed=5), _edge_cases(dt)])
  np.testing.assert_array_equal(call("enc", x, np.uint8), _torch_bits(x, dt))
  fin = np.unique(_finite_values(dt)).astype(np.float64)
  mids = (fin[1:] + fin[:-1]) / 2
  d = np.concatenate([mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), mids, [1e300, -1e300, 1e-300, np.inf, np.nan]])
  np.testing.assert_array_equal(call("encd", d, np.uint8), fp8_encode(d, dt))


@pytest.mark.parametrize("dt,tdt", [(dtypes.fp8e4m3fnuz, torch.float8_e4m3fnuz), (dtypes.fp8e5m2fnuz, torch.float8_e5m2fnuz)])
def test_fnuz_casts_match_torch_in_range_and_saturate_as_tinygrad(dt, tdt):
  rng = np.random.default_rng(0)
  mx = torch.finfo(tdt).max
  vals = np.concatenate([rng.uniform(-mx, mx, 500), rng.standard_normal(300) * 1e-3, [0.0, -0.0, mx, -mx, mx * 1.01]]).astype(np.float32)
  want = torch.tensor(vals).to(tdt).view(torch.uint8).numpy()
  np.testing.assert_array_equal(fp8_encode(vals, dt), want)  # the host's encoder
  np.testing.assert_array_equal(Tensor(vals).cast(dt).bitcast(dtypes.uint8).numpy(), want)  # a kernel's
  # past the largest finite: the largest (tinygrad's float_to_fp8; torch's cast gives NaN); infinities and NaN: 0x80
  over = np.array([1.5 * mx, -3 * mx, 1e30, np.inf, -np.inf, np.nan], np.float32)
  expect = np.array([0x7F, 0xFF, 0x7F, 0x80, 0x80, 0x80], np.uint8)
  np.testing.assert_array_equal(fp8_encode(over, dt), expect)
  np.testing.assert_array_equal(Tensor(over).cast(dt).bitcast(dtypes.uint8).numpy(), expect)
  back = Tensor(np.arange(256, dtype=np.uint8)).bitcast(dt).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(back, torch.arange(256, dtype=torch.uint8).view(tdt).float().numpy())