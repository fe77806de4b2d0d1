"""Convolutions, pooling, einsum, normalization and resampling against torch: forward values and the gradients of
loss = (out * random_weight).sum() with respect to every input."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes, nn

F = torch.nn.functional
RNG = np.random.default_rng(1234)


def _arr(shape, positive=False):
  a = RNG.standard_normal(shape).astype(np.float32)
  return np.abs(a) + 0.5 if positive else a


def check(ours, ref, arrays, grad=True, atol=1e-4, rtol=1e-4, grad_of=None):
  """Runs ours(*Tensors) and ref(*torch tensors) on the same data; compares values, then gradients."""
  grad_of = range(len(arrays)) if grad_of is None else grad_of
  ts = [Tensor(a, requires_grad=grad and i in grad_of) for i, a in enumerate(arrays)]
  tt = [torch.tensor(a, requires_grad=grad and i in grad_of) for i, a in enumerate(arrays)]
  out, rout = ours(*ts), ref(*tt)
  assert out.shape == tuple(rout.shape), f"shape {out.shape} vs torch {tuple(rout.shape)}"
  if grad:
    gw = _arr(rout.shape)
    (out * Tensor(gw)).sum().backward()
    (rout * torch.tensor(gw)).sum().backward()
  np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), atol=atol, rtol=rtol)
  if grad:
    for i in grad_of:
      assert ts[i].grad is not None, f"no gradient for input {i}"
      np.testing.assert_allclose(ts[i].grad.numpy(), tt[i].grad.numpy(), atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")


# ** convolution **
CONV_CASES = [
  # name, x shape, w shape, kwargs (torch names), bias
  ("1d", (2, 4, 9), (6, 2, 3), dict(groups=2, stride=2, dilation=2, padding=1), True),
  ("2d_pad_bias", (2, 3, 6, 6), (4, 3, 3, 3), dict(padding=1), True),
  ("2d_stride", (2, 3, 7, 7), (4, 3, 3, 3), dict(stride=2), False),
  ("2d_mixed", (2, 4, 7, 6), (6, 2, 3, 2), dict(groups=2, stride=(2, 1), dilation=(1, 2), padding=(1, 0)), True),
  ("2d_depthwise_dil", (1, 4, 6, 6), (4, 1, 3, 3), dict(groups=4, dilation=2, padding=2), True),
  ("2d_stride_gt_kernel", (1, 2, 8, 7), (2, 2, 2, 2), dict(stride=3, padding=1), False),
  ("2d_1x1_stride", (2, 3, 10, 7), (4, 3, 1, 1), dict(stride=(3, 2)), True),
  ("3d", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(stride=(1, 2, 1), padding=1), True),
]


@pytest.mark.parametrize("name,xs,ws,kw,bias", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv(name, xs, ws, kw, bias):
  nd = len(ws) - 2
  tconv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
  arrays = [_arr(xs), _arr(ws)] + ([_arr((ws[0],))] if bias else [])
  check(lambda x, w, *b: x.conv2d(w, b[0] if b else None, **kw),
        lambda x, w, *b: tconv(x, w, b[0] if b else None, **kw), arrays)


def test_conv2d_padding_forms():
  x, w = _arr((1, 2, 5, 6)), _arr((3, 2, 3, 2))
  xt, wt = torch.tensor(x), torch.tensor(w)
  # torch's flat order: (left, right, top, bottom)
  ref = F.conv2d(F.pad(xt, (1, 2, 0, 1)), wt)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=(1, 2, 0, 1)).numpy(), ref.numpy(), atol=1e-5, rtol=1e-5)
  # 'same' and 'valid' (stride 1), including an even kernel and dilation
  for pad in ("same", "valid"):
    ref = F.conv2d(xt, wt, padding=pad, dilation=(1, 2))
    np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=pad, dilation=(1, 2)).numpy(), ref.numpy(), atol=1e-5, rtol=1e-5)
  # negative padding crops the input
  ref = F.conv2d(xt[:, :, 1:, 1:-1], wt)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=(-1, -1, -1, 0)).numpy(), ref.numpy(), atol=1e-5, rtol=1e-5)


def _count_kernels(t: Tensor, cache: int = 0) -> int:
  from tinyhybrid.schedule import kernelize as k
  key, inputs, _ = k.normalize([t.uop])
  return len(k.create_schedule(key, len(inputs), cache=cache).items)


def test_a_long_matrix_product_is_blocked_for_the_cache():
  # (64 x 32768) @ (32768 x 96): each output tile would stream 32768 rows of both operands (21 MB); with a 1 MB core
  # cache the reduce runs in blocks whose rows fill it (partial results, then their sum), after b is copied with its
  # rows along the reduce. A matrix-vector product, a short reduce and a conv take no second stage
  a, b = Tensor(_arr((64, 32768))), Tensor(_arr((32768, 96)))
  assert _count_kernels(a @ b) == 1
  assert _count_kernels(a @ b, cache=1 << 20) == 3
  assert _count_kernels(a[:, :4096] @ b[:4096], cache=1 << 20) == 2  # 2.6 MB of rows: the blocks' partials cost more
  np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-3)
  assert _count_kernels(a[:1] @ b, cache=1 << 20) == 1
  assert _count_kernels(a[:, :512] @ b[:512], cache=1 << 20) == 2
  x, w = Tensor(_arr((8, 64, 32, 32))), Tensor(_arr((64, 64, 3, 3)))
  assert _count_kernels(x.conv2d(w, padding=1), cache=1 << 20) == 1


@pytest.mark.parametrize("lanes,stages", [(16, 2), (8, 1)])
def test_a_cpu_with_8_lane_vectors_reduces_a_long_product_in_one_stage(monkeypatch, lanes, stages):
  # with AVX2's 8 lanes a product is less bound by memory than with AVX-512's 16, and two stages cost more than they
  # save (a ResNet-50 training step's conv weight gradients); the engine plans one there
  from tinyhybrid import Device
  from tinyhybrid.engine.realize import _compile_schedule
  from tinyhybrid.runtime.compiler import is_clang
  from tinyhybrid.schedule import kernelize as k
  if not is_clang(): pytest.skip("vector lanes are clang's ext_vector_type")
  monkeypatch.setattr(Device["CPU"].renderer, "vec", lanes)
  monkeypatch.setattr(Device["CPU"].renderer, "core_cache", 1 << 20)
  a, b = Tensor(_arr((64, 32768))).realize(), Tensor(_arr((96, 32768))).realize()
  key, inputs, _ = k.normalize([(a @ b.T).uop])
  cs = _compile_schedule(key, len(inputs), "CPU")
  assert sum(it.prg.name.startswith("r_") for it in cs.items) == stages, [it.prg.name for it in cs.items]


def test_conv_kernel_counts():
  x, w, b = Tensor(_arr((1, 2, 6, 6))), Tensor(_arr((3, 2, 3, 3))), Tensor(_arr((3,)))
  assert _count_kernels(x.conv2d(w, padding=1)) == 1, "a convolution without bias is one reduce kernel"
  assert _count_kernels(x.conv2d(w, b, padding=1).relu()) <= 2, "a bias and an activation add at most one elementwise kernel"
  assert _count_kernels(x.max_pool2d(3, 2, padding=1)) == 1
  assert _count_kernels(x.avg_pool2d(2)) <= 2   # the sum, then the scale (one kernel once a reduce fuses its epilogue)


@pytest.mark.parametrize("stride,input_kernels", [(1, 2), (2, 6)])
def test_conv_gradients_are_convs(stride, input_kernels):
  # the output's gradient goes to memory (one kernel), which both read; the input's gradient is the transposed conv,
  # one reduce per phase of the stride (and one to interleave them); the weight's a product of copies of g and of the
  # input's windows, each laid out along the reduce, stored in the weight's own order. Values: test_conv
  x, w = Tensor(_arr((2, 4, 8, 8)), requires_grad=True), Tensor(_arr((6, 4, 3, 3)), requires_grad=True)
  g = Tensor(_arr(x.conv2d(w, stride=stride, padding=1).shape)).realize()
  (x.conv2d(w, stride=stride, padding=1) * g).sum().backward()
  assert _count_kernels(x.grad) == input_kernels
  assert _count_kernels(w.grad) == 4
  tx, tw = torch.tensor(x.numpy(), requires_grad=True), torch.tensor(w.numpy(), requires_grad=True)
  (F.conv2d(tx, tw, stride=stride, padding=1) * torch.tensor(g.numpy())).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), atol=1e-4, rtol=1e-4)


def test_max_pool_gradient_is_one_pass_over_the_input():
  # the max, each window's share (its count of maxima, divided into g), then each input value sums its windows'
  # shares in one elementwise kernel (ties split evenly, as the max's own rule does)
  x = Tensor([[[[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [2.0, 0.0, 0.0]]]], requires_grad=True)
  out = x.max_pool2d(2, stride=1)
  out.sum().backward()
  assert _count_kernels(x.grad) == 3
  np.testing.assert_allclose(x.grad.numpy(), [[[[0.25, 0.25, 1.0], [0.25, 0.5, 0.25], [1.0, 0.25, 0.25]]]])


def test_a_large_reduce_keeps_a_transcendental_epilogue_apart():
  # relu(x @ w.T + b) is one kernel at any size; a GELU (exp2 inside) after one of 16384 outputs or more runs in a
  # kernel of its own, on vectors (fused, each output's would be scalar); a matrix-vector product keeps it fused
  b = Tensor(_arr((256,)))
  for rows, gelu_kernels in ((64, 2), (1, 1)):
    x, w = Tensor(_arr((rows, 96))), Tensor(_arr((256, 96)))
    assert _count_kernels((x @ w.T + b).relu()) == 1
    y = (x @ w.T + b).gelu()
    assert _count_kernels(y) == gelu_kernels
    want = torch.nn.functional.gelu(torch.tensor(x.numpy()) @ torch.tensor(w.numpy()).T + torch.tensor(b.numpy()), approximate="tanh")
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_training_batch_norm_reads_its_input_three_times():
  # the mean, the variance (with 1/sqrt(var + eps) as its epilogue), the output: x - mean is one operation on x per
  # value (the -mean is per channel), computed by each kernel that reads it rather than stored and read back
  Tensor.training = True
  try:
    bn = nn.BatchNorm2d(4, track_running_stats=False)
    x = Tensor(_arr((2, 4, 6, 6)))
    assert _count_kernels(bn(x)) == 3
    want = torch.nn.functional.batch_norm(torch.tensor(x.numpy()), None, None, training=True)
    np.testing.assert_allclose(bn(x).numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
  finally:
    Tensor.training = False


def test_expanded_work_is_computed_once():
  # work read many times by a reduce's loop gets a buffer when it is more than one operation per value
  a, w = Tensor(_arr((4, 8))), Tensor(_arr((8, 5)))
  assert _count_kernels((a * 2) @ w) == 1
  assert _count_kernels((a * 2 + 1) @ w) == 2
  # one operation, but on two buffers: fused, each step of the reduce would load both
  b = Tensor(_arr((4, 8)))
  assert _count_kernels((a * b) @ w) == 2
  np.testing.assert_allclose(((a * b) @ w).numpy(), (a.numpy() * b.numpy()) @ w.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(((a * 2 + 1) @ w).numpy(), (a.numpy() * 2 + 1) @ w.numpy(), rtol=1e-5, atol=1e-5)
  # a batch norm before a convolution: normalized once, not once per output channel
  x, g = Tensor(_arr((1, 2, 6, 6))), Tensor(_arr((3, 2, 3, 3)))
  mean, std = Tensor(_arr((1, 2, 1, 1))), (Tensor(_arr((1, 2, 1, 1))).abs() + 1).realize()
  y = ((x - mean) / std).relu().conv2d(g, padding=1)
  assert _count_kernels(y) == 2
  want = torch.nn.functional.conv2d(torch.relu((torch.tensor(x.numpy()) - torch.tensor(mean.numpy())) / torch.tensor(std.numpy())),
                                    torch.tensor(g.numpy()), padding=1).numpy()
  np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_conv_errors():
  x = Tensor.zeros(1, 4, 5, 5)
  # shape mismatches are RuntimeError as in torch; malformed arguments ValueError as in tinygrad
  with pytest.raises(RuntimeError, match=r"\(1, 4, 5, 5\)"): x.conv2d(Tensor.zeros(2, 3, 3, 3))
  with pytest.raises(RuntimeError): x.conv2d(Tensor.zeros(3, 2, 3, 3), groups=2)   # cout not divisible by groups
  with pytest.raises(RuntimeError): x.conv2d(Tensor.zeros(2, 4, 3))                # rank mismatch
  with pytest.raises(RuntimeError): x.conv2d(Tensor.zeros(2, 4, 7, 7))             # kernel larger than the input
  with pytest.raises(ValueError): x.conv2d(Tensor.zeros(2, 4, 3, 3), padding=(1, 2, 3))
  with pytest.raises(ValueError): x.conv2d(Tensor.zeros(2, 4, 3, 3), padding="same", stride=2)


CONVT_CASES = [
  ("2d", (2, 4, 3, 4), (4, 3, 3, 2), dict(groups=2, stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=(1, 2)), False),
  ("2d_bias", (1, 2, 4, 4), (2, 3, 3, 3), dict(stride=2, padding=1, output_padding=1), True),
  ("1d", (2, 3, 5), (3, 2, 4), dict(stride=3, padding=2), True),
]


@pytest.mark.parametrize("name,xs,ws,kw,bias", CONVT_CASES, ids=[c[0] for c in CONVT_CASES])
def test_conv_transpose(name, xs, ws, kw, bias):
  tconv = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[len(ws) - 2]
  cout = ws[1] * kw.get("groups", 1)
  arrays = [_arr(xs), _arr(ws)] + ([_arr((cout,))] if bias else [])
  check(lambda x, w, *b: x.conv_transpose2d(w, b[0] if b else None, **kw),
        lambda x, w, *b: tconv(x, w, b[0] if b else None, **kw), arrays)


# ** pooling **
POOL_CASES = [
  ("max_default", "max", (2, 3, 6, 6), dict(kernel_size=(2, 2))),
  ("max_ceil_pad", "max", (2, 2, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
  ("max_dilation", "max", (1, 2, 8, 7), dict(kernel_size=(2, 3), stride=(2, 1), dilation=(2, 1), padding=(1, 1))),
  ("max_ceil_edge", "max", (1, 1, 6, 6), dict(kernel_size=2, stride=2, padding=1, ceil_mode=True)),
  ("avg_pad_ceil", "avg", (2, 2, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
  ("avg_pad_ceil_nocount", "avg", (2, 2, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
  ("max_1d", "max", (2, 3, 9), dict(kernel_size=(3,), stride=2, padding=1)),
  ("max_apart", "max", (2, 3, 9, 11), dict(kernel_size=1, stride=2)),
  ("max_apart_pad", "max", (1, 2, 10, 7), dict(kernel_size=2, stride=3, padding=1)),
  ("avg_apart_ceil", "avg", (2, 2, 11, 9), dict(kernel_size=(2, 1), stride=(3, 2), ceil_mode=True)),
  ("avg_1d", "avg", (2, 3, 9), dict(kernel_size=(4,), stride=3, ceil_mode=True)),
  ("max_3d", "max", (1, 2, 4, 5, 4), dict(kernel_size=(2, 2, 2), stride=(1, 2, 2))),
  ("avg_3d", "avg", (1, 2, 4, 5, 4), dict(kernel_size=(2, 3, 2), padding=(1, 1, 0))),
]


def _torch_pool(kind, nd, x, kw):
  kw = dict(kw)
  if nd != 2: kw["kernel_size"] = tuple(kw["kernel_size"])
  fn = getattr(F, f"{kind}_pool{nd}d")
  return fn(x, **kw)


@pytest.mark.parametrize("name,kind,xs,kw", POOL_CASES, ids=[c[0] for c in POOL_CASES])
def test_pool(name, kind, xs, kw):
  nd = len(kw["kernel_size"]) if not isinstance(kw["kernel_size"], int) else 2
  # distinct values, so max has a unique answer and the gradient is well defined
  x = (RNG.permutation(int(np.prod(xs))).reshape(xs) / 7).astype(np.float32)
  ours = (lambda t: t.max_pool2d(**kw)) if kind == "max" else (lambda t: t.avg_pool2d(**kw))
  check(ours, lambda t: _torch_pool(kind, nd, t, kw), [x])


def test_max_pool_return_indices_and_unpool():
  x = (RNG.permutation(2 * 3 * 7 * 6).reshape(2, 3, 7, 6) / 5).astype(np.float32)
  kw = dict(kernel_size=3, stride=2, padding=1)
  out, idx = Tensor(x).max_pool2d(**kw, return_indices=True)
  rout, ridx = F.max_pool2d(torch.tensor(x), **kw, return_indices=True)
  np.testing.assert_allclose(out.numpy(), rout.numpy())
  np.testing.assert_array_equal(idx.numpy(), ridx.numpy())
  un = Tensor(out.numpy()).max_unpool2d(Tensor(idx.numpy()), **kw, output_size=(7, 6))
  np.testing.assert_allclose(un.numpy(), F.max_unpool2d(rout, ridx, **kw, output_size=(7, 6)).numpy())
  # ties: the first maximum in the window wins, as in torch
  ones = np.ones((1, 1, 4, 4), np.float32)
  np.testing.assert_array_equal(Tensor(ones).max_pool2d(2, return_indices=True)[1].numpy(),
                                F.max_pool2d(torch.tensor(ones), 2, return_indices=True)[1].numpy())


def test_pool_int_and_default_args():
  x = np.arange(2 * 5 * 5, dtype=np.int32).reshape(1, 2, 5, 5)
  np.testing.assert_array_equal(Tensor(x).max_pool2d().numpy(), F.max_pool2d(torch.tensor(x).float(), 2).numpy().astype(np.int32))
  assert Tensor(x).max_pool2d().dtype is dtypes.int32
  np.testing.assert_allclose(Tensor(x).avg_pool2d().numpy(), F.avg_pool2d(torch.tensor(x).float(), 2).numpy())


def test_unfold():
  x = _arr((3, 10, 4))
  check(lambda t: t.unfold(1, 3, 2), lambda t: t.unfold(1, 3, 2), [x])
  np.testing.assert_allclose(Tensor(x).unfold(-1, 2, 1).numpy(), torch.tensor(x).unfold(-1, 2, 1).numpy())


# ** einsum **
EINSUM_CASES = [
  # formula, shapes, also check the backward pass
  ("ij,jk->ik", [(3, 4), (4, 5)], True),
  ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], True),
  ("ij->ji", [(3, 4)], False),
  ("i,j->ij", [(3,), (4,)], True),
  ("ij->", [(3, 4)], False),
  ("ij->j", [(3, 4)], False),
  ("i,i->", [(5,), (5,)], False),
  ("ij,jk", [(3, 4), (4, 2)], False),                      # implicit output
  ("ba,ca", [(3, 4), (2, 4)], False),                      # implicit output, sorted letters
  ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)], True),
  ("ii->", [(4, 4)], True),                                # trace
  ("ii->i", [(4, 4)], True),                               # diagonal
  ("bii->bi", [(2, 3, 3)], False),
  ("iji->j", [(3, 2, 3)], False),
  ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], True),  # broadcast batch dimensions
  ("b...,b...->b", [(2, 3, 4), (2, 3, 4)], False),
  ("...i,...i", [(2, 3), (3,)], False),
]


@pytest.mark.parametrize("formula,shapes,grad", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum(formula, shapes, grad):
  check(lambda *t: Tensor.einsum(formula, *t), lambda *t: torch.einsum(formula, *t), [_arr(s) for s in shapes], grad=grad)


def test_einsum_list_operands_and_errors():
  a, b = _arr((2, 3)), _arr((3, 2))
  np.testing.assert_allclose(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)]).numpy(), a @ b, atol=1e-5, rtol=1e-5)
  with pytest.raises(ValueError): Tensor.einsum("ij,jk->ik", Tensor(a))
  with pytest.raises(RuntimeError): Tensor.einsum("ij,jk->ik", Tensor(a), Tensor(a))           # j is 3 and 2
  with pytest.raises(RuntimeError): Tensor.einsum("ijk->i", Tensor(a))                        # rank mismatch


# ** normalization **
def test_layernorm():
  x = _arr((2, 3, 8))
  check(lambda t: t.layernorm(), lambda t: F.layer_norm(t, (8,)), [x])
  check(lambda t: t.layernorm(axis=(-2, -1), eps=1e-3), lambda t: F.layer_norm(t, (3, 8), eps=1e-3), [x])


def test_batchnorm():
  x, w, b = _arr((4, 3, 5)), _arr((3,)), _arr((3,))
  mean, var = _arr((3,)), _arr((3,), positive=True)

  def ours(x, w, b, m, v): return x.batchnorm(w, b, m, (v + 1e-5).rsqrt())
  def ref(x, w, b, m, v): return (x - m[:, None]) / torch.sqrt(v[:, None] + 1e-5) * w[:, None] + b[:, None]
  check(ours, ref, [x, w, b, mean, var])
  # statistics from the batch, no affine parameters
  t = Tensor(x)
  out = t.batchnorm(None, None, t.mean(axis=(0, 2)), t.var(axis=(0, 2), correction=0).add(1e-5).rsqrt())
  np.testing.assert_allclose(out.numpy(), F.batch_norm(torch.tensor(x), None, None, training=True, eps=1e-5).numpy(), atol=1e-4, rtol=1e-4)


# ** resampling **
@pytest.mark.parametrize("mode,align,size", [("linear", False, (5, 9)), ("linear", True, (3, 7)), ("nearest", False, (5, 9)),
                                             ("nearest-exact", False, (3, 4))])
def test_interpolate(mode, align, size):
  x = _arr((2, 3, 4, 6))
  tmode = {"linear": "bilinear"}.get(mode, mode)
  kw = dict(align_corners=align) if mode == "linear" else {}
  check(lambda t: t.interpolate(size, mode=mode, align_corners=align), lambda t: F.interpolate(t, size, mode=tmode, **kw), [x])


def test_interpolate_1d_3d():
  x = _arr((1, 2, 5))
  np.testing.assert_allclose(Tensor(x).interpolate((8,)).numpy(), F.interpolate(torch.tensor(x), (8,), mode="linear").numpy(), atol=1e-5)
  y = _arr((1, 1, 2, 3, 4))
  np.testing.assert_allclose(Tensor(y).interpolate((3, 5, 2)).numpy(), F.interpolate(torch.tensor(y), (3, 5, 2), mode="trilinear").numpy(),
                             atol=1e-5)


# ** a small CNN, forward and backward, end to end **
def test_small_cnn():
  x, w1, b1, w2 = _arr((2, 1, 8, 8)), _arr((4, 1, 3, 3)), _arr((4,)), _arr((10, 16))

  def ours(x, w1, b1, w2):
    h = x.conv2d(w1, b1, padding=1).relu().max_pool2d(2)        # (2, 4, 4, 4)
    h = h.avg_pool2d(2).flatten(1)                                # (2, 16)
    return h.linear(w2.transpose())

  def ref(x, w1, b1, w2):
    h = F.max_pool2d(F.relu(F.conv2d(x, w1, b1, padding=1)), 2)
    return F.avg_pool2d(h, 2).flatten(1) @ w2.T
  check(ours, ref, [x, w1, b1, w2])


# ** core behaviours found while building the above **
def test_realize_keeps_a_reshaped_result():
  from tinyhybrid.uop.buffers import buffer_view
  a = (Tensor([1.0, 2, 3, 4]) * 2).reshape(2, 2)
  a.realize()
  assert buffer_view(a.uop), "realize() must point the tensor at its buffer, or every numpy() recomputes (twice)"


def test_full_keeps_requires_grad():
  assert Tensor.ones(3, requires_grad=True).requires_grad and Tensor.zeros(2, 2, requires_grad=True).requires_grad


@pytest.mark.parametrize("bs,groups,stride,hw", [(1, 1, 1, 7), (3, 1, 1, 7), (2, 2, 2, 13)])
def test_a_conv_of_few_positions_runs_by_columns(bs, groups, stride, hw):
  # at most 64 output positions an image (ResNet's 7x7): the windows copied as rows of cin*k values (one kernel), the
  # product against the weight's rows over every image's positions (one), then, over a batch, its result put in
  # (bs, cout, h, w) order (one); values and both gradients as torch's (over a batch the input's gradient, a conv too,
  # runs by columns from a copy of its flipped weight)
  x_np, w_np, b_np = _arr((bs, 64 * groups, hw, hw)), _arr((64 * groups, 64, 3, 3)), _arr((64 * groups,))
  x, w, b = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True), Tensor(b_np)
  out = x.conv2d(w, b, groups=groups, stride=stride, padding=1)
  assert _count_kernels(x.conv2d(w, groups=groups, stride=stride, padding=1)) == (2 if bs == 1 else 3)
  tx, tw = torch.tensor(x_np, requires_grad=True), torch.tensor(w_np, requires_grad=True)
  ref = F.conv2d(tx, tw, torch.tensor(b_np), groups=groups, stride=stride, padding=1)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
  g = _arr(ref.shape)
  (out * Tensor(g)).sum().backward()
  (ref * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)
