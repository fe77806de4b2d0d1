"""Tensor methods added for the ONNX runner (sort, topk), against torch."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes

RNG = np.random.default_rng(0)


def _with_ties(shape, dtype=np.float32):
  # few distinct values, so ties are common and the stable order matters
  return RNG.integers(-3, 4, size=shape).astype(dtype)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_sort(dim, descending, dtype):
  x = _with_ties((5, 6, 7), dtype)
  v, i = Tensor(x).sort(dim, descending)
  tv, ti = torch.tensor(x).sort(stable=True, dim=dim, descending=descending)
  assert i.dtype is dtypes.int32 and v.dtype is Tensor(x).dtype
  np.testing.assert_equal(v.numpy(), tv.numpy())
  np.testing.assert_equal(i.numpy(), ti.numpy())


def test_sort_bool_and_inf():
  x = np.array([[True, False, True, False]])
  v, i = Tensor(x).sort(-1)
  np.testing.assert_equal(v.numpy(), [[False, False, True, True]])
  np.testing.assert_equal(i.numpy(), [[1, 3, 0, 2]])
  f = np.array([np.inf, -np.inf, 0.0, 1.0], np.float32)
  np.testing.assert_equal(Tensor(f).sort(descending=True)[0].numpy(), [np.inf, 1.0, 0.0, -np.inf])


@pytest.mark.parametrize("k,dim,largest", [(1, -1, True), (3, 1, True), (2, 0, False), (7, -1, False), (0, 1, True)])
def test_topk(k, dim, largest):
  x = _with_ties((4, 6, 7))
  v, i = Tensor(x).topk(k, dim, largest)
  # torch's topk leaves the order of ties open: compare with its stable sort instead
  tv, ti = torch.tensor(x).sort(stable=True, dim=dim, descending=largest)
  np.testing.assert_equal(v.numpy(), tv.narrow(dim, 0, k).numpy())
  np.testing.assert_equal(i.numpy(), ti.narrow(dim, 0, k).numpy())
  np.testing.assert_equal(v.numpy(), torch.tensor(x).topk(k, dim, largest).values.numpy())


def test_topk_bad_k():
  with pytest.raises(ValueError, match="out of range"): Tensor([1.0, 2.0]).topk(3)
