"""tinygrad parity for setitem (values, gradients, errors), Tensor construction edge cases, backward()'s choice of
tensors, and the memory a slice of a big realized tensor costs. Values and gradients are checked against torch (numpy
where torch has no negative steps)."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes
from tinyhybrid.device import Buffer
from tinyhybrid.helpers import GlobalCounters

RNG = np.random.default_rng(13)
S = slice

# indices numpy and torch agree on (positive steps), then ones only numpy has (negative steps)
IDX = [(1,), (S(1, 3),), (S(None, None, 2),), (S(0, 4, 3), S(1, None, 2)), (Ellipsis, 1), (None, 2), (-1, -2), ([0, 2],),
       ([0, 2], S(None, None, 2)), (S(None), [1, 2]), ([[1], [2]], [0, 3]), (1, [0, 2], S(None)), (S(None), 0, [1, 2]), (S(2, 2),)]
NEG = [(S(None, None, -1),), (S(3, 0, -2),), (1, S(None, None, -2)), (Ellipsis, S(None, None, -4)), (S(None, None, -3), 0)]


def _f32(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)


def _valid(shape: tuple[int, ...], ix: tuple) -> bool:
  try: np.zeros(shape)[ix]
  except IndexError: return False
  return True


@pytest.mark.parametrize("lazy", [True, False], ids=["lazy", "realized"])
@pytest.mark.parametrize("ix", IDX + NEG, ids=repr)
def test_setitem_values(ix, lazy):
  for shape in [(4, 5), (4, 5, 3)]:
    if not _valid(shape, ix): continue
    base, val = _f32(*shape), _f32(*np.zeros(shape)[ix].shape)
    ref = base.copy()
    ref[ix] = val
    x = Tensor(base) * 1 if lazy else Tensor(base.copy())
    x[ix] = Tensor(val)
    np.testing.assert_array_equal(x.numpy(), ref)
    x[ix] = 2.5  # a Python value broadcasts
    ref[ix] = 2.5
    np.testing.assert_array_equal(x.numpy(), ref)


@pytest.mark.parametrize("explicit", [True, False], ids=["requires_grad", "implicit"])
# (torch's autograd has no nested-list index)
@pytest.mark.parametrize("ix", [ix for ix in IDX if _valid((4, 5, 3), ix) and not any(isinstance(i, list) and isinstance(i[0], list) for i in ix)],
                         ids=repr)
def test_setitem_gradients_reach_target_and_value(ix, explicit):
  """x[i] = y on a tensor computed from a (not a leaf): a's gradient is zero where y landed, y's is what reads it."""
  base, w = _f32(4, 5, 3), _f32(4, 5, 3)
  val = _f32(*np.zeros((4, 5, 3))[ix].shape)
  ta, tv = torch.tensor(base, requires_grad=True), torch.tensor(val, requires_grad=True)
  tz = ta * 2
  tz[ix] = tv * 3
  (tz * tz * torch.tensor(w)).sum().backward()
  a, v = Tensor(base, requires_grad=explicit or None), Tensor(val, requires_grad=explicit or None)
  z = a * 2
  z[ix] = v * 3
  (z * z * Tensor(w)).sum().backward()
  np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-6)
  np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-5)
  if val.size: np.testing.assert_allclose(v.grad.numpy(), tv.grad.numpy(), rtol=1e-5)


@pytest.mark.parametrize("op", ["iadd", "isub", "imul", "itruediv"])
def test_inplace_ops_through_setitem_and_overlapping_writes(op):
  base, p, q = _f32(5, 3), _f32(3, 3), _f32(3, 3)
  def run(a, p, q):
    z = a * 1
    z[1:4] = p * 1  # overlapping writes: q's rows replace p's last two
    z[2:5] = q * 1
    if op == "iadd": z[0] += p[0]
    elif op == "isub": z[0:2] -= q[:2]
    elif op == "imul": z[::2] *= 3.0
    else: z[-1] /= 2.0
    (z * z).sum().backward()
    return z
  ts = [torch.tensor(x, requires_grad=True) for x in (base, p, q)]
  tz = run(*ts)
  ours = [Tensor(x, requires_grad=True) for x in (base, p, q)]
  z = run(*ours)
  np.testing.assert_allclose(z.numpy(), tz.detach().numpy(), rtol=1e-6)
  for o, t in zip(ours, ts): np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_setitem_into_memory_from_values_that_require_grad():
  """A buffer (Tensor.empty, realized) written in place from tensors computed from params: the params get gradients."""
  w0 = _f32(2, 3)
  tw = torch.tensor(w0, requires_grad=True)
  tout = torch.zeros(4, 3)
  tout[0:2] = tw * 2
  tout[2:] = 1.0
  tout[3, ::2] = (tw * 3)[0, ::2]
  (tout * tout).sum().backward()
  w = Tensor(w0, requires_grad=True)
  out = Tensor.empty(4, 3)
  out[0:2] = w * 2
  out[2:] = 1.0
  out[3, ::2] = (w * 3)[0, ::2]
  (out * out).sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)


def test_setitem_errors():
  t = Tensor.zeros(6).contiguous().realize()
  with pytest.raises(RuntimeError, match="dtype"): t[2:4] = Tensor([1, 2], dtype=dtypes.int32)
  with pytest.raises(RuntimeError, match="dtype"): Tensor.zeros(3, dtype=dtypes.int32).contiguous()[0] = Tensor(1.5)
  # a leaf that requires grad can't be written, nor written from (as in tinygrad; torch refuses the first too)
  with pytest.raises(NotImplementedError): Tensor.rand(8, 8, requires_grad=True)[:3] = Tensor.rand(8)
  with pytest.raises(NotImplementedError): Tensor.rand(8, 8)[:3] = Tensor.rand(8, requires_grad=True)
  # a lazy target that another live tensor was computed from: the merged value would not reach it
  b = Tensor([1.0, 2.0, 3.0]) + 1
  c = b * 2
  with pytest.raises(RuntimeError, match="other uses"): b[0] = 5.0
  np.testing.assert_array_equal(b.numpy(), [2, 3, 4])  # nothing happened
  np.testing.assert_array_equal(c.numpy(), [4, 6, 8])
  with pytest.raises(IndexError): t[7] = 1.0
  with pytest.raises(ValueError): t[0:2] = Tensor([1.0, 2.0, 3.0])


def test_setitem_memory_semantics_like_torch():
  # a realized target: views see the write; a live lazy reader is tinygrad's RuntimeError until it is realized
  a = Tensor([0.0, 1.0, 2.0, 3.0]).contiguous().realize()
  reader, view = a * 2, a[1:3]
  with pytest.raises(RuntimeError, match="other uses"): a[1] = 10.0
  np.testing.assert_array_equal(reader.numpy(), [0, 2, 4, 6])
  a[1] = 10.0
  np.testing.assert_array_equal(view.numpy(), [10, 2])
  # a detached tensor is the same memory
  t = Tensor.zeros(3, 3).contiguous().realize()
  t.detach()[1, 2] = 5
  assert t[1, 2].item() == 5.0
  # Python values cast to the tensor's dtype (truncation, as torch)
  x = Tensor.zeros(4, dtype=dtypes.int32).contiguous()
  x[1] = 2.7
  x[[0, 3]] = -1
  tx = torch.zeros(4, dtype=torch.int32)
  tx[1] = 2.7
  tx[[0, 3]] = -1
  np.testing.assert_array_equal(x.numpy(), tx.numpy())
  b = Tensor.zeros(2, 2, dtype=dtypes.bool).contiguous()
  b[0, 1] = True
  np.testing.assert_array_equal(b.numpy(), [[False, True], [False, False]])
  # a zero-size selection writes nothing
  z = Tensor.ones(3).contiguous()
  z[3:] = 7.0
  z[[]] = 7.0
  np.testing.assert_array_equal(z.numpy(), [1, 1, 1])


# ** construction **
@pytest.mark.parametrize("data,dt,tdt", [
  ([True, False], dtypes.int32, torch.int32), ([-1, 0, 1, 2, 3], dtypes.uint8, torch.uint8),
  ([-3.5, -2.5, 0, 1.5, 3.5], dtypes.int32, torch.int32), ([True, 3], dtypes.float32, torch.float32),
  ([[1.5, 2.0], [0.0, -0.0]], dtypes.float16, torch.float16), ([1e10, -3.7], dtypes.int64, torch.int64), ([0, 255, 127], dtypes.int8, None),
  ([1 << 33, 1 << 32, (1 << 31) - 1, 1, -(1 << 33), -1], dtypes.uint32, None), ([1 << 33, -(1 << 32) - 5, 1 << 31], dtypes.int32, None),
  ([2**64 - 1, -1, 0], dtypes.uint64, None)])
def test_list_construction_casts_and_wraps(data, dt, tdt):
  got = Tensor(data, dtype=dt)
  assert got.dtype is dt
  # out of range Python ints wrap as a C cast (numpy's astype) does; torch raises OverflowError there
  if tdt is not None: want = torch.tensor(data, dtype=tdt).numpy()
  else: want = np.array([int(v) % (1 << 64) for v in data], np.uint64).astype(got.numpy().dtype)
  np.testing.assert_array_equal(got.numpy(), want)


def test_construction_edge_cases():
  t = Tensor(None)  # tinygrad's: a zero
  assert t.shape == () and t.dtype is dtypes.weakfloat and t.item() == 0.0
  assert Tensor(None, dtype=dtypes.int32).dtype is dtypes.int32 and Tensor(None, dtype=dtypes.int32).item() == 0
  for data in ([np.array([1, 2, 3])] * 3, [np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3])], [np.array(1.0), np.array(2.0)],
               [[np.float32(1.5), np.int64(2)]]):
    np.testing.assert_array_equal(Tensor(data).numpy(), np.array(data))
  assert Tensor([np.array([1, 2])]).dtype is dtypes.default_int and Tensor([np.array([1.0])]).dtype is dtypes.default_float
  for data, shape in [([], (0,)), ([[]], (1, 0)), ([[], []], (2, 0)), ([[[]]], (1, 1, 0))]:
    assert Tensor(data).shape == shape == torch.tensor(data).shape
  for shape in [(0,), (2, 0), (0, 3)]:
    assert Tensor.zeros(*shape).numpy().shape == shape and Tensor.empty(*shape).numpy().shape == shape
  with pytest.raises(ValueError): Tensor([[1], [1, 2]])
  x = Tensor.zeros(2, 2).contiguous().realize()
  x.assign(np.array([[1, 2], [3, 4]], np.float32))  # assign takes what Tensor() takes
  x.assign([[5, 6], [7, 8]])
  np.testing.assert_array_equal(x.numpy(), [[5, 6], [7, 8]])


# ** backward(): which tensors get a gradient **
def test_backward_without_requires_grad():
  """Nothing asks for gradients: every live float tensor in the graph gets one (lazy ones too), as in tinygrad."""
  layer, x = Tensor.uniform(1, 1), Tensor.randn(1, 1, 1)
  x.dot(layer).mean().backward()
  assert layer.grad is not None and x.grad is not None
  a = Tensor(_f32(3, 4))
  out = (a * 3).relu()
  out.numpy()  # reading a lazy result keeps its graph: backward still reaches a
  out.sum().backward()
  ta = torch.tensor(a.numpy(), requires_grad=True)
  (ta * 3).relu().sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy())
  # opting out: requires_grad=False and is_param_(False) get none
  b, c = Tensor([1.0, 2.0], requires_grad=False), Tensor([3.0, 4.0]).is_param_(False)
  d = Tensor([5.0, 6.0])
  (b * c * d).sum().backward()
  assert b.grad is None and c.grad is None and not c.is_param and b.is_param is False
  np.testing.assert_array_equal(d.grad.numpy(), [3, 8])
  with pytest.raises(RuntimeError): Tensor([1, 2]).sum().backward()  # no float tensor to take one


def test_is_param_and_clone_keep_gradients():
  w1, w2 = Tensor(3.5).clone(), Tensor(3.5).clone()
  assert w1.is_param and w2.is_param and w1.requires_grad is None
  w1.add(w2).backward()
  np.testing.assert_array_equal([w1.grad.numpy(), w2.grad.numpy()], [1.0, 1.0])
  a = Tensor.rand(4, 4)
  a.mul(5.0).add(5.0).mean().backward()
  b = a.clone()
  np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy())
  np.testing.assert_allclose(b.numpy(), a.numpy())
  assert Tensor([1.0]).is_param_(False).clone().is_param is False


# ** memory **
def test_slice_of_big_realized_tensor_reads_a_view(monkeypatch):
  """Reading a slice allocates about the slice, not a copy of the whole tensor (peak of GlobalCounters.mem_used)."""
  peak = [0]
  alloc = Buffer.ensure_allocated
  def tracked(self: Buffer) -> Buffer:
    out = alloc(self)
    peak[0] = max(peak[0], GlobalCounters.mem_used)
    return out
  monkeypatch.setattr(Buffer, "ensure_allocated", tracked)
  n = 1 << 22
  big = Tensor.arange(n, dtype=dtypes.float32).contiguous().realize()
  grid = big.reshape(1024, 4096)
  reads = [(lambda: big[10:20].numpy(), np.arange(10, 20)), (lambda: big[::1 << 20].numpy(), np.arange(0, n, 1 << 20)),
           (lambda: [big[5].item()], [5]), (lambda: grid[:, 3].numpy()[:3], [3, 4099, 8195]),
           (lambda: grid.T[3:5, 1:3].numpy().reshape(-1), [4099, 8195, 4100, 8196]), (lambda: big[::-1][:2].tolist(), [n - 1, n - 2]),
           (lambda: (big[5:9] + 1).numpy(), np.arange(6, 10)), (lambda: big[100:104].clone().numpy(), np.arange(100, 104))]
  for read, want in reads:
    base = peak[0] = GlobalCounters.mem_used
    np.testing.assert_array_equal(read(), want)
    assert peak[0] - base <= 1024 * 4 + 64, f"reading a slice allocated {peak[0] - base} bytes"
  # a write through a slice is in place
  base = peak[0] = GlobalCounters.mem_used
  big[10:20] = 1.0
  assert peak[0] - base <= 64 and big[9:11].tolist() == [9.0, 1.0]
