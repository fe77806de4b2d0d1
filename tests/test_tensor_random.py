"""The counter-based random generator: threefry-2x32 known answers, a NumPy reference of the exact bits, determinism
(within and across processes, across shapes and fusion), statistics, dtypes, initializers, dropout and sampling."""
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes
from tinyhybrid.mixin.random import threefry2x32

N = 100_000
M32 = 0xFFFFFFFF
ROT = (13, 15, 26, 6, 17, 29, 16, 24)


def np_threefry(k0: int, k1: int, c0: np.ndarray, c1: int) -> tuple[np.ndarray, np.ndarray]:
  """Reference threefry-2x32-20 in NumPy (uint32 wraps)."""
  ks = [np.uint32(k0), np.uint32(k1), np.uint32(k0 ^ k1 ^ 0x1BD11BDA)]
  with np.errstate(over="ignore"):
    x0 = c0.astype(np.uint32) + ks[0]
    x1 = np.full_like(x0, c1) + ks[1]
    for r in range(20):
      x0 = x0 + x1
      x1 = ((x1 << np.uint32(ROT[r % 8])) | (x1 >> np.uint32(32 - ROT[r % 8]))) ^ x0
      if r % 4 == 3:
        j = (r + 1) // 4
        x0 = x0 + ks[j % 3]
        x1 = x1 + ks[(j + 1) % 3] + np.uint32(j)
  return x0, x1


def np_rand(seed: int, counter: int, n: int) -> np.ndarray:
  """float32 rand(n) of the default device's first key, drawn at word `counter` (tinygrad's stream)."""
  k0 = int.from_bytes(hashlib.sha256((0).to_bytes(4, "big")).digest(), "big") & M32
  c = np.array([counter & M32], dtype=np.uint32)
  key = np_threefry(k0 ^ (seed >> 32), seed & M32, c, counter >> 32)
  h = (n + 1) // 2
  x0, x1 = np_threefry(int(key[0][0]), int(key[1][0]), np.arange(h, dtype=np.uint32), np.arange(h, 2 * h, dtype=np.uint32))
  words = np.concatenate([x0, x1])[:n]
  return ((words >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1)


# ** the cipher **
@pytest.mark.parametrize("key,ctr,expect", [
  ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
  ((M32, M32), (M32, M32), (0x1CB996FC, 0xBB002BE7)),
  ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_threefry_known_answers(key, ctr, expect):
  u = lambda v: Tensor(np.array([v], dtype=np.uint32))  # noqa: E731
  x0, x1 = threefry2x32(u(key[0]), u(key[1]), u(ctr[0]), u(ctr[1]))
  assert (x0.item(), x1.item()) == expect
  # the same cipher over constants (folded by the simplifier) gives the same bits
  c = lambda v: Tensor(v, dtype=dtypes.uint32)  # noqa: E731
  assert threefry2x32(c(key[0]), c(key[1]), c(ctr[0]), c(ctr[1]))[0].item() == expect[0]


def test_rand_matches_numpy_reference_bits():
  seed = (7 << 32) | 12345
  Tensor.manual_seed(seed)
  a = Tensor.rand(1000).numpy()
  b = Tensor.rand(1000).numpy()
  np.testing.assert_array_equal(a, np_rand(seed, 0, 1000))
  np.testing.assert_array_equal(b, np_rand(seed, 1000, 1000))  # the counter counts words drawn


# ** determinism **
def test_same_seed_same_values():
  Tensor.manual_seed(42)
  a, b = Tensor.rand(3, 5).numpy(), Tensor.randn(7).numpy()
  Tensor.manual_seed(42)
  np.testing.assert_array_equal(a, Tensor.rand(3, 5).numpy())
  np.testing.assert_array_equal(b, Tensor.randn(7).numpy())


def test_calls_and_seeds_differ():
  Tensor.manual_seed(0)
  a, b = Tensor.rand(64).numpy(), Tensor.rand(64).numpy()
  Tensor.manual_seed(1)
  c = Tensor.rand(64).numpy()
  assert not np.array_equal(a, b) and not np.array_equal(a, c)
  assert len(np.unique(a)) == 64


def test_shape_and_fusion_do_not_change_values():
  # values depend only on (seed, call number, flat index): not on the shape, nor on whether they are fused into a consumer
  Tensor.manual_seed(9)
  flat = Tensor.rand(100).numpy()
  Tensor.manual_seed(9)
  shaped = Tensor.rand(4, 25).numpy()
  Tensor.manual_seed(9)
  fused = (Tensor.rand(100, contiguous=False) * 3 + 1).numpy()
  np.testing.assert_array_equal(flat.reshape(4, 25), shaped)
  np.testing.assert_array_equal((flat * np.float32(3) + np.float32(1)), fused)


def test_lazy_rand_is_stable_when_recomputed():
  Tensor.manual_seed(3)
  r = Tensor.rand(50, contiguous=False)
  a, b = (r * 1).numpy(), (r + 0).numpy()
  np.testing.assert_array_equal(a, b)


def test_same_values_in_another_process():
  Tensor.manual_seed(2024)
  here = Tensor.rand(16).numpy()
  code = ("from tinyhybrid import Tensor; Tensor.manual_seed(2024); "
          "print(' '.join(float(v).hex() for v in Tensor.rand(16).numpy()))")
  # the child imports the same tinyhybrid this process did (installed, or a source tree on PYTHONPATH)
  import tinyhybrid
  pkg_root = os.path.dirname(os.path.dirname(tinyhybrid.__file__))
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([pkg_root, os.environ.get("PYTHONPATH", "")])}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
  assert out.returncode == 0, out.stderr
  # the last line: an editable install may print its rebuild log first
  there = np.array([float.fromhex(v) for v in out.stdout.splitlines()[-1].split()], dtype=np.float32)
  np.testing.assert_array_equal(here, there)


# ** statistics (10^5 samples) **
def test_rand_statistics():
  Tensor.manual_seed(11)
  a = Tensor.rand(N).numpy()
  assert a.dtype == np.float32 and a.min() >= 0 and a.max() < 1
  assert abs(a.mean() - 0.5) < 0.005 and abs(a.var() - 1 / 12) < 0.002
  hist, _ = np.histogram(a, bins=10, range=(0, 1))
  assert np.all(np.abs(hist - N / 10) < 0.05 * N / 10), hist
  # neighbours are not correlated
  assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.02


def test_randn_statistics():
  Tensor.manual_seed(12)
  a = Tensor.randn(N).numpy()
  assert np.isfinite(a).all()
  assert abs(a.mean()) < 0.02 and abs(a.std() - 1) < 0.02
  assert abs(np.mean(np.abs(a) < 1) - 0.6827) < 0.01
  assert abs(np.mean(np.abs(a) < 2) - 0.9545) < 0.005
  assert abs(np.mean(a ** 3)) < 0.05 and abs(np.mean(a ** 4) - 3) < 0.15  # skew 0, kurtosis 3


def test_normal_and_uniform():
  Tensor.manual_seed(13)
  n = Tensor.normal(N, mean=3.0, std=0.5).numpy()
  assert abs(n.mean() - 3) < 0.01 and abs(n.std() - 0.5) < 0.01
  u = Tensor.uniform(N, low=-2.0, high=6.0).numpy()
  assert u.min() >= -2 and u.max() < 6 and abs(u.mean() - 2) < 0.05
  with pytest.raises(ValueError): Tensor.uniform(3, low=1.0, high=1.0)
  with pytest.raises(ValueError): Tensor.normal(3, std=-1.0)


def test_randint():
  Tensor.manual_seed(14)
  a = Tensor.randint(N, low=-3, high=7).numpy()
  assert a.dtype == np.int32 and a.min() == -3 and a.max() == 6
  counts = np.bincount(a + 3)
  assert len(counts) == 10 and np.all(np.abs(counts - N / 10) < 0.05 * N / 10), counts
  big = Tensor.randint(1000, low=0, high=2 ** 32, dtype=dtypes.int64).numpy()
  assert big.min() >= 0 and big.max() < 2 ** 32 and big.max() > 2 ** 31
  for dt, lo, hi in ((dtypes.int8, -128, 128), (dtypes.uint8, 0, 256), (dtypes.int64, -5, 5)):
    v = Tensor.randint(2000, low=lo, high=hi, dtype=dt).numpy()
    assert v.min() >= lo and v.max() < hi and len(np.unique(v)) > min(hi - lo, 2000) // 2
  assert Tensor.randint(2, 3, high=4).shape == (2, 3)
  with pytest.raises(ValueError): Tensor.randint(3, low=5, high=5)
  with pytest.raises(TypeError): Tensor.randint(3, low=0.5, high=2)
  with pytest.raises(TypeError): Tensor.randint(3, dtype=dtypes.float32)
  with pytest.raises(ValueError): Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8)


# ** dtypes and shapes **
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.float32, dtypes.float64, dtypes.bfloat16])
def test_rand_dtypes(dt):
  Tensor.manual_seed(15)
  t = Tensor.rand(4000, dtype=dt)
  assert t.dtype is dt
  a = t.numpy().astype(np.float64)
  assert a.min() >= 0 and a.max() < 1 and abs(a.mean() - 0.5) < 0.03 and len(np.unique(a)) > 100
  r = Tensor.randn(4000, dtype=dt)
  assert r.dtype is dt and abs(r.numpy().astype(np.float64).std() - 1) < 0.1


def test_rand_float64_uses_52_bits():
  Tensor.manual_seed(16)
  a = Tensor.rand(1000, dtype=dtypes.float64).numpy()
  assert np.any((a * 2 ** 23) % 1 != 0)  # finer than float32's grid


def test_shapes_and_like():
  Tensor.manual_seed(17)
  assert Tensor.rand(2, 3).shape == (2, 3) and Tensor.rand((2, 3)).shape == (2, 3) and Tensor.randn([4]).shape == (4,)
  assert Tensor.rand(0).numpy().shape == (0,) and Tensor.rand(2, 0, 3).shape == (2, 0, 3) and Tensor.rand().shape == ()
  x = Tensor.zeros(3, 4, dtype=dtypes.float16)
  assert x.rand_like().shape == (3, 4) and x.rand_like().dtype is dtypes.float16 and x.randn_like().dtype is dtypes.float16
  assert x.rand_like(dtype=dtypes.float32).dtype is dtypes.float32
  assert Tensor.rand(3, requires_grad=True).requires_grad
  with pytest.raises(ValueError): Tensor.rand(3, dtype=dtypes.int32)
  with pytest.raises(ValueError): Tensor.rand(-1)


# ** initializers **
def test_initializers():
  Tensor.manual_seed(18)
  shape = (64, 32, 3, 3)
  fan_in = 32 * 9
  ku = Tensor.kaiming_uniform(*shape, a=0.0).numpy()
  bound = np.sqrt(6 / fan_in)
  assert ku.shape == shape and np.abs(ku).max() <= bound and abs(ku.std() - bound / np.sqrt(3)) < 0.03 * bound
  kn = Tensor.kaiming_normal(*shape, a=0.0).numpy()
  assert abs(kn.std() - np.sqrt(2 / fan_in)) < 0.03 * np.sqrt(2 / fan_in)
  gu = Tensor.glorot_uniform(*shape).numpy()
  gb = np.sqrt(6 / (64 + fan_in))
  assert np.abs(gu).max() <= gb and abs(gu.std() - gb / np.sqrt(3)) < 0.03 * gb
  su = Tensor.scaled_uniform(*shape).numpy()
  sb = (64 * fan_in) ** -0.5
  assert np.abs(su).max() <= sb and abs(su.std() - sb / np.sqrt(3)) < 0.03 * sb


# ** dropout **
def test_dropout():
  Tensor.manual_seed(19)
  x = Tensor.ones(200, 100)
  assert x.dropout(0.3) is x  # not training
  old = Tensor.training
  Tensor.training = True
  try:
    y = x.dropout(0.25).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.02
    assert x.dropout(0.0) is x and (x.dropout(1.0).numpy() == 0).all()
    # the backward pass sees the same mask as the forward pass
    w = Tensor(np.linspace(1, 2, 2000, dtype=np.float32).reshape(50, 40), requires_grad=True)
    out = w.dropout(0.5)
    o = out.numpy()
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), (o != 0) * np.float32(2.0), rtol=1e-6)
    with pytest.raises(ValueError): x.dropout(1.5)
  finally:
    Tensor.training = old


# ** permutations and sampling **
def test_randperm():
  Tensor.manual_seed(20)
  p = Tensor.randperm(50).numpy()
  assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(50))
  assert not np.array_equal(p, np.arange(50)) and not np.array_equal(p, Tensor.randperm(50).numpy())
  assert Tensor.randperm(0).shape == (0,)


def test_multinomial():
  Tensor.manual_seed(21)
  w = Tensor([0.1, 0.0, 0.3, 0.6])
  s = w.multinomial(4000, replacement=True).numpy()
  assert s.shape == (4000,) and 1 not in s
  freq = np.bincount(s, minlength=4) / 4000
  np.testing.assert_allclose(freq, [0.1, 0.0, 0.3, 0.6], atol=0.03)
  no = Tensor([[1.0, 2, 3, 4, 5], [5, 4, 3, 2, 1]]).multinomial(5).numpy()
  assert no.shape == (2, 5) and all(sorted(r.tolist()) == list(range(5)) for r in no)
  one = Tensor([0.0, 0.0, 1.0]).multinomial().numpy()
  assert one.tolist() == [2]
  with pytest.raises(AssertionError): Tensor([1.0, 2.0]).multinomial(3)
