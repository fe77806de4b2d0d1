"""tinygrad parity of the nn-level API, checked against torch (values) and tinygrad (exception types, dtypes, seeded
random streams): convolution and pooling errors, interpolate (uint8 too), einsum with '...', creation dtypes, the
random generator, dropout, nn layers and optimizers."""
import math

import numpy as np
import pytest
import torch

from tinyhybrid import Context, GlobalCounters, Tensor, Variable, dtypes, nn
from tinyhybrid.device import is_dtype_supported
from tinyhybrid.nn.state import load_state_dict

F = torch.nn.functional
RNG = np.random.default_rng(7)


def _arr(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)


def check(ours, ref, arrays, atol=1e-4, rtol=1e-4, grad=True):
  """ours(*Tensors) against ref(*torch tensors): values, then the gradients of (out * w).sum() for every input."""
  ts = [Tensor(a, requires_grad=grad) for a in arrays]
  tt = [torch.tensor(a, requires_grad=grad) for a in arrays]
  out, rout = ours(*ts), ref(*tt)
  assert out.shape == tuple(rout.shape)
  np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), atol=atol, rtol=rtol)
  if not grad: return
  gw = RNG.standard_normal(tuple(rout.shape)).astype(np.float32)
  (out * Tensor(gw)).sum().backward()
  (rout * torch.tensor(gw)).sum().backward()
  for i, (t, r) in enumerate(zip(ts, tt)):
    np.testing.assert_allclose(t.grad.numpy(), r.grad.numpy(), atol=atol, rtol=rtol, err_msg=f"gradient of input {i}")


# ** convolution and pooling: edge shapes and the errors tinygrad (and torch) raise **
@pytest.mark.parametrize("xs,ws,kw", [
  ((1, 2, 3, 3), (4, 2, 3, 3), {}),                                # kernel exactly the input: 1x1 output
  ((2, 4, 1, 5), (2, 2, 1, 5), dict(groups=2)),                    # 1-row input
  ((1, 1, 5, 5), (1, 1, 2, 2), dict(stride=3, dilation=2, padding=(1, 2, 0, 1))),  # torch-order 4-int padding
])
def test_conv_edges(xs, ws, kw):
  pad = kw.pop("padding", 0)
  # tinygrad's 2*nd padding is (left, right, top, bottom): torch needs F.pad first
  ref = (lambda x, w: F.conv2d(F.pad(x, pad), w, **kw)) if isinstance(pad, tuple) else (lambda x, w: F.conv2d(x, w, padding=pad, **kw))
  check(lambda x, w: x.conv2d(w, padding=pad, **kw), ref, [_arr(*xs), _arr(*ws)])


@pytest.mark.parametrize("call,exc", [
  (lambda x: x.conv2d(Tensor.zeros(6, 1, 3, 3), dilation=3), RuntimeError),         # dilated kernel larger than the input
  (lambda x: x.conv2d(Tensor.zeros(2, 3, 7, 7)), RuntimeError),                       # kernel larger than the input
  (lambda x: x.conv2d(Tensor.zeros(2, 2, 3, 3)), RuntimeError),                       # channels 3 vs 2
  (lambda x: x.conv2d(Tensor.zeros(3, 1, 3, 3), groups=3, bias=Tensor.zeros(2)), RuntimeError),  # bias size
  (lambda x: x.conv2d(Tensor.zeros(2, 3, 3)), RuntimeError),                          # rank mismatch
  (lambda x: x.conv2d(Tensor.zeros(2, 3, 3, 3), stride=0), RuntimeError),
  (lambda x: x.conv2d(Tensor.zeros(2, 3, 3, 3), padding=(1, 1, 1)), ValueError),     # malformed argument
  (lambda x: x.conv_transpose2d(Tensor.zeros(3, 2, 3, 3), stride=2, output_padding=2), RuntimeError),
  (lambda x: x.max_pool2d(kernel_size=7), RuntimeError),
  (lambda x: x.avg_pool2d(kernel_size=2, stride=0), RuntimeError),
  (lambda x: x.avg_pool2d(kernel_size=(2, 2), padding=(1, 1, 1)), ValueError),
])
def test_conv_pool_errors(call, exc):
  with pytest.raises(exc): call(Tensor.zeros(1, 3, 6, 6))


def test_conv_symbolic_kernel_larger_than_the_smallest_size():
  # v may be as small as 11 < the 12-wide kernel, but its bound value 79 fits: no error up front
  v = Variable("v", 11, 100).bind(79)
  x, w = Tensor(_arr(1, 2, 100)), Tensor(_arr(3, 2, 12))
  out = x[:, :, :v].conv2d(w, stride=6, padding=(3, 3))
  want = F.conv1d(torch.tensor(x.numpy()[:, :, :79]), torch.tensor(w.numpy()), stride=6, padding=3).numpy()
  np.testing.assert_allclose(out[:, :, :13].numpy(), want, atol=1e-4, rtol=1e-4)


# ** interpolate **
@pytest.mark.parametrize("mode,tmode,ins,outs,align", [
  ("linear", "linear", (7,), (12,), False), ("linear", "linear", (12,), (5,), True),
  ("linear", "bilinear", (5, 9), (8, 4), False), ("linear", "bilinear", (5, 9), (8, 4), True),
  ("linear", "trilinear", (3, 4, 5), (5, 2, 7), False), ("linear", "bilinear", (1, 6), (3, 6), True),
  ("nearest", "nearest", (5, 9), (8, 4), False), ("nearest-exact", "nearest-exact", (5, 9, 3), (8, 4, 7), False),
])
def test_interpolate_modes(mode, tmode, ins, outs, align):
  kw = dict(align_corners=True) if align else {}
  check(lambda x: x.interpolate(outs, mode=mode, **kw), lambda x: F.interpolate(x, size=outs, mode=tmode, **kw), [_arr(2, 3, *ins)])


@pytest.mark.parametrize("ins,outs,align", [((64, 64), (10, 10), False), ((12, 9), (31, 20), False), ((9, 31), (20, 12), True),
                                            ((7, 7), (7, 13), False), ((5, 1), (2, 3), True)])
def test_interpolate_uint8_bilinear_is_exact(ins, outs, align):
  # torch rounds uint8 images in fixed point: the result must be equal, not within one
  x = RNG.integers(0, 256, (2, 3) + ins, dtype=np.uint8)
  want = F.interpolate(torch.tensor(x), size=outs, mode="bilinear", align_corners=align).numpy()
  np.testing.assert_array_equal(Tensor(x).interpolate(outs, mode="linear", align_corners=align).numpy(), want)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_uint8_nearest(mode):
  x = RNG.integers(0, 256, (1, 2, 13, 9), dtype=np.uint8)
  np.testing.assert_array_equal(Tensor(x).interpolate((5, 11), mode=mode).numpy(),
                                F.interpolate(torch.tensor(x), size=(5, 11), mode=mode).numpy())


# ** einsum **
@pytest.mark.parametrize("formula,shapes", [
  ("...id,...jd->...ij", [(3, 4, 5), (3, 2, 5)]), ("...id,...jd", [(3, 4, 5), (3, 2, 5)]),
  ("i...j,ji...->...", [(2, 3, 4, 5), (5, 2, 4)]), ("ij...,ij...->ij", [(2, 3, 2, 2), (2, 3, 2, 2)]),
  ("...ij,...jk", [(5, 1, 2, 3), (4, 3, 4)]), ("...ii->...i", [(3, 4, 4)]), ("ii", [(4, 4)]), ("i,i", [(5,), (5,)]),
  ("ij,jk->ik", [(2, 1), (3, 4)]),   # a size-1 letter broadcasts, as in torch
])
def test_einsum_forms(formula, shapes):
  check(lambda *t: Tensor.einsum(formula, *t), lambda *t: torch.einsum(formula, *t), [_arr(*s) for s in shapes])


@pytest.mark.parametrize("formula,shapes,exc", [
  ("...ik...,...jk->", [(2, 3, 4), (2, 3, 4)], RuntimeError),     # two '...' in one operand
  ("i...j,ji...->...", [(2, 3, 4), (2, 3, 4)], RuntimeError),     # '...' that do not broadcast
  ("pqrs,tuqvr->pstuv", [(3, 8, 10, 5), (11, 5, 13, 16, 8)], RuntimeError),
  ("ii->i", [(2, 3)], RuntimeError), ("ij->ik", [(2, 3)], RuntimeError), ("ij->ii", [(2, 3)], RuntimeError),
  ("ij", [(2, 3, 4)], RuntimeError), ("ij3", [(2, 3)], RuntimeError),
  ("ij,jk->ij", [(2, 3), (3, 2), (2, 2)], ValueError),            # operand count: tinygrad's ValueError
])
def test_einsum_errors(formula, shapes, exc):
  with pytest.raises(RuntimeError): torch.einsum(formula, *[torch.zeros(s) for s in shapes])
  with pytest.raises(exc): Tensor.einsum(formula, *[Tensor.zeros(*s) for s in shapes])


# ** creation **
@pytest.mark.parametrize("args,kw,want", [
  ((5,), {}, dtypes.int32), ((5.0,), {}, dtypes.float32), ((0, 1, 0.25), {}, dtypes.float32), ((2 ** 31 + 5,), {}, dtypes.int64),
  ((-2 ** 31 - 1, -2 ** 31 + 1), {}, dtypes.int64), ((3,), dict(dtype="uint8"), dtypes.uint8), ((2,), dict(dtype=dtypes.bool), dtypes.bool),
  ((4,), dict(dtype=dtypes.float16), dtypes.float16),
])
def test_arange_dtypes(args, kw, want):
  t = Tensor.arange(*args, **kw)
  assert t.dtype is want
  if t.shape[0] < 100: np.testing.assert_array_equal(t.numpy(), np.arange(*args).astype(t.numpy().dtype))


@pytest.mark.parametrize("args,kw,exc", [((-1, 3), dict(dtype="uint8"), OverflowError), ((300,), dict(dtype="uint8"), OverflowError),
                                         ((5,), dict(dtype=dtypes.bool), OverflowError), ((3,), dict(foo=1), TypeError),
                                         ((0, 5, 0), {}, ValueError)])
def test_arange_errors(args, kw, exc):
  with pytest.raises(exc): Tensor.arange(*args, **kw)


@pytest.mark.parametrize("args,dt", [((5, 10, 3), None), ((5, 10, 1), None), ((5, 10, 0), None), ((5.5, -5.5, 10), None),
                                     ((5, 10, 20), "int32"), ((5, -5, 20), "int32"), ((0, 10, 4), "float16")])
def test_linspace(args, dt):
  t = Tensor.linspace(*args, **({"dtype": dt} if dt else {}))
  want = torch.linspace(*args, **({"dtype": getattr(torch, dt)} if dt else {})).numpy()
  assert t.dtype is (dtypes.float32 if dt is None else getattr(dtypes, dt))
  # half: torch steps in another order, a last-bit difference
  np.testing.assert_allclose(t.numpy().astype(np.float64), want.astype(np.float64), atol=4e-3 if dt == "float16" else 1e-6)


def test_creation_errors():
  with pytest.raises(ValueError): Tensor.linspace(5, 10, 3, dtype="bool")
  with pytest.raises(ValueError): Tensor.linspace(1, 2, -1)
  for n, m in ((-3, 3), (3, -3), (-3, -3)):
    with pytest.raises(ValueError): Tensor.eye(n, m)
  for shape in ((-3,), (2, -3), (2, -3, 0)):
    with pytest.raises(ValueError): Tensor.full(shape, 2)
    with pytest.raises(ValueError): Tensor.zeros(*shape)
  assert Tensor.eye(2, 3, dtype="int32").numpy().tolist() == [[1, 0, 0], [0, 1, 0]] and Tensor.eye(0).shape == (0, 0)


# ** the random generator **
def test_rand_is_tinygrads_stream():
  # values tinygrad 0.14 draws after manual_seed(42) (rand, then randint), and tinygrad's randperm for seed 0
  Tensor.manual_seed(42)
  assert [float(v).hex() for v in Tensor.rand(5, 7).numpy()[0, :4]] == \
    ["0x1.1159e00000000p-2", "0x1.8783600000000p-2", "0x1.6e2cdc0000000p-1", "0x1.9764ac0000000p-1"]
  Tensor.manual_seed(42)
  Tensor.rand(5, 7), Tensor.rand(9, dtype=dtypes.float16), Tensor.rand(5, dtype=dtypes.float64), Tensor.rand(5, dtype=dtypes.bfloat16)
  assert Tensor.randint(20, low=-3, high=7).numpy().tolist() == [4, -1, -2, 5, 1, -2, -1, 3, 5, -1, 1, 1, 3, -2, 3, 1, -2, 4, 1, 1]
  Tensor.manual_seed(0)
  assert Tensor.randperm(10).numpy().tolist() == [8, 9, 4, 3, 6, 1, 7, 5, 2, 0]


def test_rand_values_do_not_depend_on_realize_order():
  Tensor.manual_seed(1)
  first, second = Tensor.rand(4).numpy(), Tensor.rand(4).numpy()
  Tensor.manual_seed(1)
  a, b = Tensor.rand(4), Tensor.rand(4)
  b_vals, a_vals = b.numpy(), a.numpy()     # realized in the other order
  np.testing.assert_array_equal(a_vals, first)
  np.testing.assert_array_equal(b_vals, second)


def test_unrealized_random_init_takes_no_memory():
  mem = GlobalCounters.mem_used
  layer = nn.Linear(32, 32)
  assert GlobalCounters.mem_used == mem    # lazy until realized, as in tinygrad
  load_state_dict(layer, {"weight": Tensor.zeros(32, 32).contiguous(), "bias": Tensor.zeros(32).contiguous()}, realize=False, verbose=False)
  assert GlobalCounters.mem_used == mem
  layer.weight.realize()
  assert GlobalCounters.mem_used == mem + 32 * 32 * 4


def test_seeds():
  vals = {}
  for seed in (0, 1, 2 ** 32, 2 ** 32 + 1, -1):
    Tensor.manual_seed(seed)
    vals[seed] = Tensor.rand(8).numpy().tobytes()
  assert len(set(vals.values())) == len(vals)   # 64-bit seeds differ in their high word too
  with pytest.raises(TypeError): Tensor.manual_seed(1.5)


@pytest.mark.parametrize("n", [0, 1, 2, 15, 21, 105, 97 * 89])
def test_randperm_is_a_permutation(n):
  for seed in range(3):
    Tensor.manual_seed(seed)
    p = Tensor.randperm(n).numpy()
    assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(n))


@pytest.mark.parametrize("dt", list(dtypes.floats) + [dtypes.bool, dtypes.int8, dtypes.uint32, dtypes.int64])
def test_randn_any_dtype(dt):
  t = Tensor.randn(3, dtype=dt)
  assert t.dtype is dt and t.element_size() == dt.itemsize
  if is_dtype_supported(dt): assert t.numpy().shape == (3,)


def test_rand_arguments():
  with pytest.raises(TypeError): Tensor.rand(5, generator="foo")
  with pytest.raises(TypeError): Tensor.randint(3, low=0, high=5, foo=1)
  with pytest.raises(TypeError): Tensor.uniform(3, foo=1)
  with pytest.raises(ValueError): Tensor.rand(2, dtype="int32")
  for f in (Tensor.rand, Tensor.randn, Tensor.uniform, Tensor.normal, Tensor.glorot_uniform, Tensor.scaled_uniform, Tensor.kaiming_normal):
    assert f(3, 2, requires_grad=True).requires_grad
  for dt in filter(is_dtype_supported, dtypes.floats):
    a = Tensor.rand(300, dtype=dt).numpy().astype(np.float64)
    assert a.min() >= 0 and a.max() < 1 and len(np.unique(a)) > 3


def test_dropout():
  x = Tensor(np.array([1.0, math.inf, math.nan, -2.0] * 64, np.float32), requires_grad=True)
  assert x.dropout(0.5) is x                           # not training
  with Context(TRAINING=1):
    y = x.dropout(0.25)
    yv = y.numpy()
    y.sum().backward()
  kept = yv != 0
  assert not np.isnan(yv[~kept]).any() and 0.6 < kept.mean() < 0.9   # a dropped inf or nan is 0
  np.testing.assert_array_equal(x.grad.numpy(), kept * np.float32(1 / 0.75))


# ** nn layers against torch.nn (parameters copied in; grads of input and parameters) **
def _layer_case(ours, ref, x: np.ndarray, params: dict[str, str], atol=1e-4):
  with torch.no_grad():
    for o, r in params.items(): setattr(ours, o, Tensor(getattr(ref, r).detach().numpy().copy()))
  xt, xr = Tensor(x), torch.tensor(x, requires_grad=True)
  out, rout = ours(xt), ref(xr)
  np.testing.assert_allclose(out.numpy(), rout.detach().numpy(), atol=atol, rtol=atol)
  gw = RNG.standard_normal(tuple(rout.shape)).astype(np.float32)
  (out * Tensor(gw)).sum().backward()   # nothing asked for gradients: every float tensor in the graph gets one
  (rout * torch.tensor(gw)).sum().backward()
  np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), atol=atol, rtol=atol)
  for o, r in params.items():
    np.testing.assert_allclose(getattr(ours, o).grad.numpy(), getattr(ref, r).grad.numpy(), atol=atol, rtol=atol, err_msg=o)


@pytest.mark.parametrize("make,x,params", [
  (lambda: (nn.Linear(5, 3), torch.nn.Linear(5, 3)), (4, 5), dict(weight="weight", bias="bias")),
  (lambda: (nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 4, 3, padding=1)), (2, 3, 5, 5), dict(weight="weight", bias="bias")),
  (lambda: (nn.ConvTranspose2d(4, 2, 3, stride=2), torch.nn.ConvTranspose2d(4, 2, 3, stride=2)), (1, 4, 3, 3),
   dict(weight="weight", bias="bias")),
  (lambda: (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)), (3, 4, 2, 3), dict(weight="weight", bias="bias")),
  (lambda: (nn.InstanceNorm(4), torch.nn.InstanceNorm2d(4, affine=True)), (3, 4, 2, 3), dict(weight="weight", bias="bias")),
  (lambda: (nn.LayerNorm((3, 4)), torch.nn.LayerNorm((3, 4))), (2, 3, 4), dict(weight="weight", bias="bias")),
  (lambda: (nn.RMSNorm(6), torch.nn.RMSNorm(6, eps=1e-6)), (2, 3, 6), dict(weight="weight")),
])
def test_layers_against_torch(make, x, params):
  ours, ref = make()
  with torch.no_grad():
    for p in ref.parameters(): p.copy_(torch.randn_like(p))   # not the default ones/zeros: a wrong broadcast shows
  _layer_case(ours, ref, _arr(*x), params)


@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_against_torch(training):
  ours, ref = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3).train(training)
  with torch.no_grad():
    ref.running_mean.copy_(torch.randn(3)), ref.running_var.copy_(torch.rand(3) + 0.5)
  ours.running_mean, ours.running_var = Tensor(ref.running_mean.numpy().copy()), Tensor(ref.running_var.numpy().copy())
  with Context(TRAINING=int(training)):
    _layer_case(ours, ref, _arr(4, 3, 2, 2), dict(weight="weight", bias="bias"))
    if training:
      np.testing.assert_allclose(ours.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-5)
      np.testing.assert_allclose(ours.running_var.numpy(), ref.running_var.numpy(), atol=1e-5)


def test_embedding():
  ours, ref = nn.Embedding(7, 4), torch.nn.Embedding(7, 4)
  ours.weight = Tensor(ref.weight.detach().numpy().copy())
  idx = np.array([[0, 6, 3], [3, 3, 1]], np.int32)
  out = ours(Tensor(idx))
  np.testing.assert_allclose(out.numpy(), ref(torch.tensor(idx, dtype=torch.long)).detach().numpy())
  out.sum().backward()
  np.testing.assert_allclose(ours.weight.grad.numpy(), np.bincount(idx.ravel(), minlength=7)[:, None].repeat(4, 1).astype(np.float32))
  assert (ours(Tensor([7, -1])).numpy() == 0).all()   # an index outside the table is a zero row, as in tinygrad


def test_norm_weights_are_plain_buffers_and_load_messages():
  a, b = nn.LayerNorm(3), nn.LayerNorm(3)
  assert a.weight.uop is not b.weight.uop and a.weight.uop.op.name == "BUFFER"
  with pytest.raises(ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(3,\), but found \(4,\) in state dict\."):
    load_state_dict(a, {"weight": Tensor.zeros(4), "bias": Tensor.zeros(3)}, verbose=False)


# ** optimizers against torch.optim **
@pytest.mark.parametrize("ours,ref", [
  (lambda p: nn.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
  (lambda p: nn.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
   lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
  (lambda p: nn.optim.Adam(p, lr=0.05), lambda p: torch.optim.Adam(p, lr=0.05)),
  (lambda p: nn.optim.AdamW(p, lr=0.05, weight_decay=0.1), lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1)),
])
def test_optimizer_steps(ours, ref):
  w0, x = _arr(4, 3), _arr(5, 4)
  w, wr = Tensor(w0.copy(), requires_grad=True), torch.tensor(w0.copy(), requires_grad=True)
  opt, optr = ours([w]), ref([wr])
  with Context(TRAINING=1):
    for _ in range(4):
      opt.zero_grad(), optr.zero_grad()
      (Tensor(x) @ w).tanh().square().sum().backward()
      (torch.tensor(x) @ wr).tanh().square().sum().backward()
      opt.step(), optr.step()
      np.testing.assert_allclose(w.numpy(), wr.detach().numpy(), atol=1e-5, rtol=1e-5)


def test_default_float_context_takes_a_dtype():
  with Context(DEFAULT_FLOAT=dtypes.half):
    assert dtypes.default_float is dtypes.half and Tensor.rand(2).dtype is dtypes.half and Tensor.ones(2).dtype is dtypes.half
  assert dtypes.default_float is dtypes.float32


def test_image_conv2d_and_image_dot_are_conv2d_and_dot_in_float32():
  rng = np.random.default_rng(0)
  x, w, b = rng.standard_normal((2, 6, 9, 9), np.float32), rng.standard_normal((8, 3, 3, 3), np.float32), rng.standard_normal(8, np.float32)
  ours = Tensor(x).image_conv2d(Tensor(w), Tensor(b), groups=2, stride=2, padding=1)
  want = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), groups=2, stride=2, padding=1).numpy()
  np.testing.assert_allclose(ours.numpy(), want, rtol=1e-5, atol=1e-5)
  a, c = rng.standard_normal((3, 5)).astype(np.float16), rng.standard_normal((5, 4)).astype(np.float16)
  d = Tensor(a).image_dot(Tensor(c))
  assert d.dtype is dtypes.float32 and Tensor(a).image_dot(Tensor(c), dtype=dtypes.float16).dtype is dtypes.float16
  np.testing.assert_allclose(d.numpy(), a.astype(np.float32) @ c.astype(np.float32), rtol=1e-6)
  with pytest.raises(RuntimeError): Tensor(a).image_dot(Tensor(a))
