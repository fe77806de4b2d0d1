"""Integer division and modulo of every integer dtype at its extremes, by tensors and by constants, against NumPy
(floor) and Python's integers (trunc). Runs on the default device; `DEV=CL` runs it on OpenCL too."""
import warnings

import numpy as np
import pytest

from tinyhybrid import Tensor

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def edge_values(nd) -> list[int]:
  info = np.iinfo(nd)
  cands = [info.min, info.min + 1, -7, -2, -1, 0, 1, 2, 3, 7, info.max // 2, info.max // 2 + 1, info.max - 1, info.max]
  return sorted({v for v in cands if info.min <= v <= info.max})


def pairs(nd) -> tuple[np.ndarray, np.ndarray]:
  vals = edge_values(nd)
  return np.array([x for x in vals for _ in vals], dtype=nd), np.array([y for _ in vals for y in vals], dtype=nd)


def wrap(v: int, nd) -> int:
  bits = np.iinfo(nd).bits
  v &= (1 << bits) - 1
  return v - (1 << bits) if np.iinfo(nd).min < 0 and v >> (bits - 1) else v


def trunc_ref(a: int, b: int, nd, mod: bool) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
  return wrap(a - q * b if mod else q, nd)


@pytest.mark.parametrize("nd", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["//", "%"])
def test_floor_division_by_tensors(nd, op):
  a, b = pairs(nd)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # NumPy warns of the overflow of min // -1 (which wraps, as ours)
    want = a // b if op == "//" else a % b
  got = (Tensor(a) // Tensor(b) if op == "//" else Tensor(a) % Tensor(b)).numpy()
  nz = b != 0  # NumPy gives 0 for a divisor of 0, and so do we; the point here is the nonzero ones
  np.testing.assert_array_equal(got[nz], want[nz])
  np.testing.assert_array_equal(got[~nz], 0)


@pytest.mark.parametrize("nd", INTS, ids=lambda d: d.__name__)
@pytest.mark.parametrize("op", ["//", "%"])
def test_floor_division_by_constants(nd, op):
  a, _ = pairs(nd)
  a, cs = np.unique(a), [v for v in edge_values(nd) if v != 0]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    want = np.stack([a // nd(c) if op == "//" else a % nd(c) for c in cs])
  got = Tensor.stack(*[Tensor(a) // c if op == "//" else Tensor(a) % c for c in cs]).numpy()  # one schedule: one compiler run
  for c, g, w in zip(cs, got, want): np.testing.assert_array_equal(g, w, err_msg=f"{nd.__name__} {op} {c}")


@pytest.mark.parametrize("nd", INTS, ids=lambda d: d.__name__)
def test_trunc_division_by_tensors_and_constants(nd):
  a, b = pairs(nd)
  got = Tensor(a).div(Tensor(b), rounding_mode="trunc").numpy()
  want = np.array([trunc_ref(int(x), int(y), nd, False) for x, y in zip(a, b)], dtype=nd)
  np.testing.assert_array_equal(got, want)
  for c in (-1, 3, np.iinfo(nd).max):
    if c < np.iinfo(nd).min: continue
    got = Tensor(a).div(c, rounding_mode="trunc").numpy()
    np.testing.assert_array_equal(got, np.array([trunc_ref(int(x), c, nd, False) for x in a], dtype=nd), err_msg=f"{nd.__name__} / {c}")


def test_int64_min_by_minus_one_wraps_as_numpy():
  lo = np.iinfo(np.int64).min
  a, m1 = Tensor([lo, lo + 1, 5], dtype="int64"), Tensor([-1, -1, -1], dtype="int64")
  assert (a // m1).tolist() == [lo, -(lo + 1), -5]
  assert (a % m1).tolist() == [0, 0, 0]
  assert (a // -1).tolist() == [lo, -(lo + 1), -5]
  assert (a % -1).tolist() == [0, 0, 0]


def test_uint64_from_2_to_the_63():
  big = np.array([2**64 - 1, 2**63, 2**63 + 5, 3], dtype=np.uint64)
  assert (Tensor(big) // 2).tolist() == [2**63 - 1, 2**62, 2**62 + 2, 1]
  assert (Tensor(big) % 10).tolist() == [int(x) % 10 for x in big]
  two = Tensor(np.array([2, 2, 2**63, 7], dtype=np.uint64))
  assert (Tensor(big) // two).tolist() == [int(x) // int(y) for x, y in zip(big, two.numpy())]
