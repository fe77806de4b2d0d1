"""Weak dtypes in the graph (tinygrad's): a tensor of a Python scalar is weak (dtypes.weakint, dtypes.weakfloat) and
takes the other operand's type, as the scalar itself would; weakness ends where storage begins (realize, .numpy(), a
parameter). Expected dtypes are tinygrad's for the same expressions; values against NumPy."""
import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes, nn
from tinyhybrid.nn import optim

H = dtypes.half


@pytest.mark.parametrize("expr, want", [
  (lambda: Tensor(2.0), dtypes.weakfloat), (lambda: Tensor(3), dtypes.weakint), (lambda: Tensor(True), dtypes.bool),
  (lambda: Tensor(2.0) * Tensor([1, 2], dtype=H), H), (lambda: Tensor(2) * Tensor([1, 2], dtype=dtypes.int8), dtypes.int8),
  (lambda: Tensor(2.0) * Tensor([1, 2], dtype=dtypes.int8), dtypes.weakfloat),
  (lambda: Tensor.stack(Tensor(2.0), Tensor(-3.0)), dtypes.weakfloat), (lambda: Tensor(2.0) + Tensor(1), dtypes.weakfloat),
  (lambda: Tensor([True, False]).where(Tensor(1.0), Tensor([2, 3], dtype=H)), H),
  (lambda: Tensor([1, 2], dtype=H).maximum(Tensor(1.5)), H), (lambda: Tensor(3) / Tensor(2), dtypes.float),
  (lambda: Tensor([1.0]), dtypes.float), (lambda: Tensor.full((), 2.0), dtypes.float), (lambda: Tensor(2.0).sum(), dtypes.float),
  (lambda: Tensor(2.0).cast(H), H), (lambda: Tensor(2.0).reshape(1).contiguous(), dtypes.weakfloat),
])
def test_dtype(expr, want):
  assert expr().dtype is want


def test_weak_is_not_the_default_type():
  assert Tensor(2.0).dtype != dtypes.float32 and Tensor(2).dtype != dtypes.int32


def test_values_read_as_the_default_type():
  s = Tensor.stack(Tensor(2.0), Tensor(-3.0))
  out = s.numpy()
  assert out.dtype == np.float32 and s.dtype is dtypes.weakfloat  # reading does not change the tensor
  np.testing.assert_array_equal(out, [2, -3])
  assert Tensor(2.5).item() == 2.5 and Tensor(7).tolist() == 7 and Tensor(6).numpy().dtype == np.int32
  assert (Tensor(2.0) + Tensor(1.5)).realize().dtype is dtypes.float  # realized: stored as float32
  np.testing.assert_array_equal((Tensor([200], dtype=dtypes.uint8) + Tensor(100)).numpy(), np.array([200], np.uint8) + np.uint8(100))


def test_half_math_with_a_weak_scalar_stays_half():
  a = np.array([1.5, -2.25, 3.0], np.float16)
  out = (Tensor(a) * Tensor(0.5) + Tensor(1.0)).numpy()
  assert out.dtype == np.float16
  np.testing.assert_array_equal(out, a * np.float16(0.5) + np.float16(1.0))


def test_setitem_and_assign_take_the_tensors_type():
  t = Tensor([1.0, 2.0], dtype=H).contiguous().realize()
  t[0] = Tensor(5.0)
  t.assign(t + Tensor(1.0))
  np.testing.assert_array_equal(t.numpy(), np.array([6, 3], np.float16))
  assert t.dtype is H
  with pytest.raises(RuntimeError, match="dtype mismatch"): Tensor([1, 2], dtype=dtypes.int32).contiguous()[0] = Tensor(2.5)


def test_a_weak_parameter_has_storage():
  p = Tensor(3.0, requires_grad=True)
  assert p.dtype is dtypes.float
  opt = optim.SGD([p], lr=0.25)
  (p * p).backward()
  with Tensor.train(): opt.step()
  assert p.item() == 1.5 and nn.state.get_parameters(p)[0].dtype is dtypes.float
