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


def test_shape_errors_match_tinygrad():
  for make in (Tensor.ones, Tensor.zeros, Tensor.empty, lambda s: Tensor.full(s, 1), lambda s: Tensor.ones(2).reshape(s)):
    with pytest.raises(RuntimeError, match="shape must be int"): make((2.0,))
  for f in (Tensor.zeros, Tensor.ones, Tensor.empty, Tensor.rand):
    with pytest.raises(ValueError): f((2, 2), 2, 2)
    with pytest.raises(ValueError): f((2, 2), (2, 2))
  with pytest.raises(ValueError): Tensor.ones(-1)


def test_device_mismatch_is_a_runtime_error():
  with pytest.raises(RuntimeError, match="different devices"): Tensor([1.0], device="CPU") + Tensor([1.0], device="CPU:1")
  with pytest.raises(RuntimeError): Tensor.zeros(3, 4)[Tensor([0, 1], device="CPU:1")]
  # a tuple of one device is that device
  from tinyhybrid import Device
  t = Tensor([1.0], device=(Device.DEFAULT,))
  assert t.device == Device.DEFAULT and (t + Tensor([2.0])).tolist() == [3.0]


def test_bytes_are_the_values_memory():
  import struct
  t = Tensor(struct.pack("ff", 0.234, 0.8585), dtype=dtypes.float32)
  assert t.shape == (2,) and t.tolist() == list(np.array([0.234, 0.8585], np.float32))
  assert Tensor(bytes([1, 2, 3, 4]), dtype=dtypes.int16).tolist() == [513, 1027]
  assert Tensor(bytes([1, 255])).dtype is dtypes.uint8 and Tensor(bytes([1, 255]), dtype=dtypes.int8).tolist() == [1, -1]
  assert Tensor([b"abc", b"def"], dtype=dtypes.uint8).tolist() == [[97, 98, 99], [100, 101, 102]]  # rows of bytes


def test_data_memoryview_shapes():
  d = Tensor(3, dtype=dtypes.int32).data()
  assert d.format == "i" and d.shape == () and d.tolist() == 3
  d = Tensor([], dtype=dtypes.int32).reshape(0, 2).data()
  assert d.itemsize == 4 and d.shape == (0,) and list(d) == []
  assert Tensor([[1, 2], [3, 4]]).T.data().tolist() == [[1, 3], [2, 4]]


def test_a_graph_of_constants_is_deviceless():
  from tinyhybrid.uop.ops import UOp
  t = Tensor(UOp.const(2.0).cast(dtypes.float))
  u = t.uop
  assert t.device is None and "<UOp None" in repr(t)
  t.realize()
  assert t.uop is u and (t + Tensor([1.0, 2.0])).tolist() == [3.0, 4.0] and t.item() == 2.0


def test_pad_to_and_shrink_to_keep_none_dims():
  assert Tensor([1, 2]).pad_to(None, value=5).tolist() == [1, 2]
  assert Tensor([[1, 2]]).pad_to(None, 3).tolist() == [[1, 2, 0]]
  assert Tensor([[1, 2, 3]]).shrink_to(None, 2).tolist() == [[1, 2]]


@pytest.mark.parametrize("src,dst", [("float16", "bfloat16"), ("bfloat16", "float16"), ("bfloat16", "int16"), ("int16", "bfloat16")])
def test_bitcast_between_16_bit_types_keeps_the_bits(src, dst):
  vals = torch.tensor([-3.2, 1.5, 7.0, -100.0, 0.0, 65504.0]).to(getattr(torch, src) if src != "int16" else torch.float32)
  if src == "int16": vals = torch.tensor([-3, 1, 7, -100, 0, 32767], dtype=torch.int16)
  want = vals.view(getattr(torch, dst))
  ours = Tensor(vals.float().numpy() if src == "bfloat16" else vals.numpy(), dtype=getattr(dtypes, src)).bitcast(getattr(dtypes, dst))
  np.testing.assert_array_equal(ours.numpy(), want.float().numpy() if dst == "bfloat16" else want.numpy())


def test_full_takes_tinygrads_buffer_flag():
  a = Tensor.empty(2)
  a.assign(Tensor.ones(2, buffer=False))
  assert a.tolist() == [1.0, 1.0] and Tensor.full((2,), 3, buffer=True).tolist() == [3, 3]
  t = Tensor.ones(4, dtype=dtypes.int32, buffer=False)
  t[1] = 5
  assert t.tolist() == [1, 5, 1, 1]
