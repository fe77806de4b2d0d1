"""nn layers against torch.nn: each layer gets torch's parameters under torch's state-dict names, then the forward
values, the gradients of loss = (out * random_weight).sum() for the input and every parameter, and BatchNorm's
running statistics are compared; plus initialization bounds and the exceptions for bad arguments."""
import math

import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes, nn
from tinyhybrid.nn.state import get_state_dict

RNG = np.random.default_rng(7)


def _arr(*shape):
  return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture
def training():
  Tensor.training = True
  yield
  Tensor.training = False


def _load_from_torch(ours, ref: torch.nn.Module) -> dict[str, Tensor]:
  """Copies ref's state into ours attribute by attribute; both must have the same keys. Returns our trainable ones."""
  sd = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
  assert set(get_state_dict(ours)) == set(sd), f"state dict keys {sorted(get_state_dict(ours))} vs torch {sorted(sd)}"
  params = {}
  for k, v in sd.items():
    trainable = v.dtype == np.float32 and "running" not in k
    setattr(ours, k, t := Tensor(v, requires_grad=trainable))
    if trainable: params[k] = t
  return params


def check_layer(ours, ref: torch.nn.Module, *xs: np.ndarray, atol=1e-5, rtol=1e-4):
  """Forward and backward of ours and ref on the same inputs and parameters; compares outputs and all gradients."""
  params = _load_from_torch(ours, ref)
  ts = [Tensor(x, requires_grad=x.dtype == np.float32) for x in xs]
  tt = [torch.tensor(x, requires_grad=x.dtype == np.float32) for x in xs]
  out, rout = ours(*ts), ref(*tt)
  assert out.shape == tuple(rout.shape)
  gw = _arr(*rout.shape)
  (out * Tensor(gw)).sum().backward()
  (rout * torch.tensor(gw)).sum().backward()
  Tensor.realize(out, *[t.grad for t in [*params.values(), *ts] if t.grad is not None])  # one schedule for all
  np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), atol=atol, rtol=rtol)
  named = dict(ref.named_parameters())
  for k, t in params.items():
    assert t.grad is not None, f"no gradient for {k}"
    np.testing.assert_allclose(t.grad.numpy(), named[k].grad.numpy(), atol=atol * 10, rtol=rtol, err_msg=f"gradient of {k}")
  for i, (t, r) in enumerate(zip(ts, tt)):
    if r.requires_grad: np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol * 10, rtol=rtol, err_msg=f"gradient of input {i}")


# ** linear, embedding, recurrent **
@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
  check_layer(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias), _arr(2, 4, 5))


def test_embedding():
  idx = np.array([[1, 0, 3], [3, 3, 2]], dtype=np.int32)
  check_layer(nn.Embedding(4, 3), torch.nn.Embedding(4, 3), idx)


def test_embedding_int64_and_bad_dtype():
  emb = nn.Embedding(5, 2)
  np.testing.assert_allclose(emb(Tensor([4, 0], dtype=dtypes.int64)).numpy(), emb.weight.numpy()[[4, 0]])
  with pytest.raises(TypeError, match="integer"): emb(Tensor([1.0, 2.0]))


def test_lstm_cell():
  xs = [_arr(2, 3), _arr(2, 4), _arr(2, 4)]
  ours, ref = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
  params = _load_from_torch(ours, ref)
  ts, tt = [Tensor(x, requires_grad=True) for x in xs], [torch.tensor(x, requires_grad=True) for x in xs]
  (h, c), (rh, rc) = ours(ts[0], (ts[1], ts[2])), ref(tt[0], (tt[1], tt[2]))
  (h.sum() + (c * 2).sum()).backward()
  (rh.sum() + (rc * 2).sum()).backward()
  np.testing.assert_allclose(h.numpy(), rh.detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(c.numpy(), rc.detach().numpy(), atol=1e-5)
  named = dict(ref.named_parameters())
  for k, t in params.items(): np.testing.assert_allclose(t.grad.numpy(), named[k].grad.numpy(), atol=1e-5, err_msg=k)
  for t, r in zip(ts, tt): np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=1e-5)


def test_lstm_cell_no_bias_zero_state():
  ours, ref, x = nn.LSTMCell(3, 2, bias=False), torch.nn.LSTMCell(3, 2, bias=False), _arr(4, 3)
  assert ours.bias_ih is None and ours.bias_hh is None
  _load_from_torch(ours, ref)
  for a, b in zip(ours(Tensor(x)), ref(torch.tensor(x))): np.testing.assert_allclose(a.numpy(), b.detach().numpy(), atol=1e-5)


# ** convolutions **
CONV_CASES = [
  # name, ours, torch, input shape
  ("conv1d", lambda m: m.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (2, 4, 9)),
  ("conv2d_mixed", lambda m: m.Conv2d(4, 2, (3, 2), stride=(2, 1), dilation=(1, 2), groups=2, bias=False), (1, 4, 7, 6)),
  ("conv2d_same", lambda m: m.Conv2d(2, 3, (4, 3), padding="same", dilation=(1, 2)), (1, 2, 6, 7)),
  ("conv_transpose2d", lambda m: m.ConvTranspose2d(4, 2, (3, 2), stride=2, padding=(1, 0), output_padding=(1, 0), dilation=(1, 2), groups=2),
   (1, 4, 3, 3)),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's note on its own speed
@pytest.mark.parametrize("name,make,shape", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv(name, make, shape):
  check_layer(make(nn), make(torch.nn), _arr(*shape), atol=1e-5)


def test_conv_shapes():
  # shapes are known without running anything; the values of these paths are those of the cases above
  conv = nn.Conv2d(2, 3, (2, 2, 2))
  assert conv.weight.shape == (3, 2, 2, 2, 2) and conv(Tensor(_arr(1, 2, 3, 4, 3))).shape == (1, 3, 2, 3, 2)
  tconv = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
  assert tconv.weight.shape == (4, 3, 3) and tconv.bias.shape == (6,) and tconv(Tensor(_arr(2, 4, 5))).shape == (2, 6, 10)


# ** normalization **
def test_batchnorm_train_and_eval(training):
  ours, ref = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
  params = _load_from_torch(ours, ref)
  for _ in range(2):  # two updates of the running statistics
    x = _arr(4, 3, 2, 2) * 3 + 1
    xt, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, rout = ours(xt), ref(tt)
    gw = _arr(*out.shape)
    (out * Tensor(gw)).sum().backward()
    (rout * torch.tensor(gw)).sum().backward()
    Tensor.realize(out, ours.running_mean, ours.running_var, ours.num_batches_tracked)
    np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), atol=1e-5)
    for k, t in params.items(): np.testing.assert_allclose(t.grad.numpy(), getattr(ref, k).grad.numpy(), atol=1e-4, err_msg=k)
    for t in (*params.values(), xt): t.grad = None
    ref.zero_grad()
  np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)
  np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), atol=1e-6)
  assert ours.num_batches_tracked.numpy() == 2 and ours.num_batches_tracked.dtype is dtypes.int64 and ours.num_batches_tracked.shape == ()
  Tensor.training = False
  ref.eval()
  x = _arr(2, 3, 2, 2)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), atol=1e-5)
  np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-6)  # eval leaves them alone


@pytest.mark.parametrize("with_buffers", [True, False], ids=["buffers_in_optimizer", "params_only"])
def test_batchnorm_statistics_follow_the_weights_before_each_step(training, with_buffers):
  # a conv + BatchNorm trained by SGD: each step's running statistics come from the forward pass with the weights as
  # they were before the step (torch's order), whether the optimizer realizes them (its buffers) or they stay pending
  # until the next step's assign lands them
  from tinyhybrid.nn.state import get_parameters
  conv, bn = nn.Conv2d(2, 3, 3, bias=False), nn.BatchNorm2d(3)
  tconv, tbn = torch.nn.Conv2d(2, 3, 3, bias=False), torch.nn.BatchNorm2d(3)
  conv.weight = Tensor(tconv.weight.detach().numpy(), requires_grad=True)
  params = get_parameters([conv, bn]) if with_buffers else [conv.weight, bn.weight, bn.bias]
  opt = nn.optim.SGD(params, lr=0.5, momentum=0.9)
  topt = torch.optim.SGD([*tconv.parameters(), *tbn.parameters()], lr=0.5, momentum=0.9)
  for _ in range(3):
    x = _arr(4, 2, 6, 6)
    opt.zero_grad()
    bn(conv(Tensor(x))).relu().sum().backward()
    opt.step()
    topt.zero_grad()
    tbn(tconv(torch.tensor(x))).relu().sum().backward()
    topt.step()
  np.testing.assert_allclose(conv.weight.numpy(), tconv.weight.detach().numpy(), atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), atol=1e-5, rtol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), atol=1e-5, rtol=1e-5)


def test_batchnorm_backward_is_torchs_formula_in_few_passes(training):
  # relu(bn(x)) in training: the forward's statistics (mean, variance, 1/std), the output, then the backward's sums
  # of g and of g * xhat and the input's gradient, with the relu's mask computed into g once (a per-channel product of
  # two of those sums is computed where the elementwise gradient uses it)
  from tinyhybrid.schedule import kernelize
  ours, ref = nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)
  params = _load_from_torch(ours, ref)
  x, gw = _arr(2, 4, 6, 6) * 2 + 1, _arr(2, 4, 6, 6)
  xt, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  (ours(xt).relu() * Tensor(gw)).sum().backward()
  (ref(tt).relu() * torch.tensor(gw)).sum().backward()
  key, inputs, _ = kernelize.normalize([xt.grad.uop])
  assert len(kernelize.create_schedule(key, len(inputs)).items) == 7
  np.testing.assert_allclose(xt.grad.numpy(), tt.grad.numpy(), atol=1e-5, rtol=1e-4)
  for k, t in params.items(): np.testing.assert_allclose(t.grad.numpy(), getattr(ref, k).grad.numpy(), atol=1e-4, rtol=1e-4, err_msg=k)


def test_batchnorm1d(training):
  check_layer(nn.BatchNorm1d(3, momentum=0.3), torch.nn.BatchNorm1d(3, momentum=0.3), _arr(5, 3))


def test_batchnorm_no_running_stats_no_affine(training):
  ours, ref = nn.BatchNorm(2, affine=False, track_running_stats=False), torch.nn.BatchNorm2d(2, affine=False, track_running_stats=False)
  assert ours.weight is None and not hasattr(ours, "running_mean")
  x = _arr(3, 2, 2, 2)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).numpy(), atol=1e-5)
  Tensor.training, _ = False, ref.eval()  # without running statistics eval mode still uses the batch's
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).numpy(), atol=1e-5)


def test_layernorm():
  check_layer(nn.LayerNorm((3, 4), eps=1e-3), torch.nn.LayerNorm((3, 4), eps=1e-3), _arr(2, 3, 4))


def test_layernorm_no_affine():
  ours, x = nn.LayerNorm(4, elementwise_affine=False), _arr(3, 4)
  assert ours.weight is None and ours.bias is None
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), torch.nn.functional.layer_norm(torch.tensor(x), (4,)).numpy(), atol=1e-5)


def test_layernorm2d():
  ours, x = nn.LayerNorm2d(3), _arr(2, 3, 2, 3)
  params = _load_from_torch(ours, ref := torch.nn.LayerNorm(3))
  params["weight"].assign(Tensor([0.5, 1.0, 2.0]))
  ref.weight.data = torch.tensor([0.5, 1.0, 2.0])
  want = ref(torch.tensor(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2).detach().numpy()
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, atol=1e-5)


def test_groupnorm():
  check_layer(nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4), _arr(2, 4, 3, 2))


def test_instancenorm():
  ours, ref, x = nn.InstanceNorm(3), torch.nn.InstanceNorm2d(3, affine=True), _arr(2, 3, 3, 2)
  _load_from_torch(ours, ref)
  np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), atol=1e-5)


def test_rmsnorm():
  check_layer(nn.RMSNorm(4), torch.nn.RMSNorm(4, eps=1e-6), _arr(2, 3, 4))


def test_rmsnorm_half_keeps_dtype():
  x = _arr(2, 8)
  out = nn.RMSNorm(8, elementwise_affine=False)(Tensor(x).half())
  assert out.dtype is dtypes.half
  np.testing.assert_allclose(out.numpy(), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), atol=2e-3, rtol=2e-3)


# ** initialization **
@pytest.mark.parametrize("make", [
  lambda m: m.Linear(12, 5), lambda m: m.Conv2d(6, 4, 3, groups=2), lambda m: m.ConvTranspose2d(4, 6, (2, 3), groups=2),
  lambda m: m.LSTMCell(3, 9)], ids=["linear", "conv2d", "conv_transpose2d", "lstm"])
def test_init_matches_torch_bounds(make):
  """Same shapes as torch; each tensor uniform within torch's default bound 1/sqrt(fan_in), and filling most of it."""
  ours, ref = make(nn), make(torch.nn)
  sd, rsd = get_state_dict(ours), ref.state_dict()
  assert {k: v.shape for k, v in sd.items()} == {k: tuple(v.shape) for k, v in rsd.items()}
  fan_in = 9 if isinstance(ref, torch.nn.LSTMCell) else math.prod(rsd["weight"].shape[1:])
  vals = np.concatenate([np.abs(v.numpy()).ravel() for v in sd.values()])
  assert vals.max() <= 1 / math.sqrt(fan_in) and vals.max() > 0.8 / math.sqrt(fan_in)


def test_init_defaults():
  bn = nn.BatchNorm(3)
  np.testing.assert_equal([bn.weight.numpy(), bn.bias.numpy(), bn.running_mean.numpy(), bn.running_var.numpy()],
                          [np.ones(3), np.zeros(3), np.zeros(3), np.ones(3)])
  assert bn.running_mean.requires_grad is False and bn.num_batches_tracked.requires_grad is False and bn.weight.requires_grad is None
  w = nn.Embedding(6, 4).weight.numpy()
  assert w.shape == (6, 4) and np.abs(w).max() <= math.sqrt(6 / 10)
  np.testing.assert_equal(nn.RMSNorm(3).weight.numpy(), np.ones(3))
  assert list(get_state_dict(nn.BatchNorm(2))) == list(torch.nn.BatchNorm2d(2).state_dict())


def test_constant_init_tensors_have_own_memory(training):
  # lazy ones/zeros of one shape are one graph; layers must not end up sharing the buffer the first realize fills
  bn, ln1, ln2 = nn.BatchNorm(3, momentum=0.3), nn.LayerNorm(2), nn.LayerNorm(2)
  Tensor.realize(bn(Tensor(_arr(5, 3) * 3 + 1)), bn.running_mean, bn.running_var)
  np.testing.assert_equal([bn.weight.numpy(), bn.bias.numpy()], [np.ones(3), np.zeros(3)])
  ln1.weight.assign(Tensor([5.0, 5.0])).realize()
  np.testing.assert_equal([ln1.weight.numpy(), ln2.weight.numpy(), ln2.bias.numpy()], [[5, 5], [1, 1], [0, 0]])


# ** bad arguments **
def test_bad_arguments():
  with pytest.raises(ValueError, match="padding"): nn.Conv2d(2, 2, 3, padding="full")
  with pytest.raises(ValueError, match="stride"): nn.Conv2d(2, 2, 3, stride=2, padding="same")
  with pytest.raises(ValueError, match="groups"): nn.Conv2d(3, 4, 3, groups=2)
  with pytest.raises(ValueError, match="padding"): nn.ConvTranspose2d(2, 2, 3, padding="same")
  with pytest.raises(ValueError, match="num_groups"): nn.GroupNorm(3, 4)
  with pytest.raises(RuntimeError, match="channels"): nn.GroupNorm(2, 4)(Tensor(_arr(1, 6, 2)))
  with pytest.raises(RuntimeError, match="last dimensions"): nn.LayerNorm((2, 3))(Tensor(_arr(2, 3, 2)))
  with pytest.raises(ValueError, match="BatchNorm"): nn.BatchNorm(3)(Tensor(_arr(3)))
  Tensor.training = True
  try:
    with pytest.raises(ValueError, match="more than one value"): nn.BatchNorm(3)(Tensor(_arr(1, 3)))
  finally: Tensor.training = False
  with pytest.raises(RuntimeError, match="conv2d"): nn.Conv2d(3, 2, 3)(Tensor(_arr(1, 2, 5, 5)))
  with pytest.raises(RuntimeError): nn.Linear(3, 2)(Tensor(_arr(2, 4)))  # matmul's mismatch, as torch
