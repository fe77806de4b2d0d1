"""nn.optim against torch.optim (SGD, Adam, AdamW, Muon) and against NumPy transcriptions of tinygrad's update rules
(LARS, LAMB, Muon, classic momentum), parameter by parameter over several steps of a small two-layer model; TinyJit
training steps against the same steps unjitted; and the exceptions for bad arguments."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, TinyJit, nn
from tinyhybrid.nn import optim
from tinyhybrid.nn.state import get_parameters

RNG = np.random.default_rng(11)
# w1, w2 of loss = sum((relu(x @ w1.T) @ w2.T - y)^2); one shape, so both params' update kernels are the same ones
INIT = [RNG.standard_normal((4, 4)).astype(np.float32) * 0.5 for _ in range(2)]
DATA = [(RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)) for _ in range(3)]


@pytest.fixture(autouse=True)
def training():
  Tensor.training = True
  yield
  Tensor.training = False


def _loss(ps, x, y):
  return ((x @ ps[0].T).relu() @ ps[1].T - y).square().sum()


def _ours(make, trainable=(0, 1)) -> list[list[np.ndarray]]:
  """Params after each step of make(params) on DATA; the untrainable ones are requires_grad=False."""
  ps = [Tensor(a, requires_grad=None if i in trainable else False) for i, a in enumerate(INIT)]
  opt, out = make([ps[i] for i in trainable]), []
  for x, y in DATA:
    opt.zero_grad()
    _loss(ps, Tensor(x), Tensor(y)).backward()
    opt.step()
    out.append([p.numpy() for p in ps])
  return out


def _torch(make, trainable=(0, 1)) -> list[list[np.ndarray]]:
  ps = [torch.tensor(a, requires_grad=i in trainable) for i, a in enumerate(INIT)]
  opt, out = make([ps[i] for i in trainable]), []
  for x, y in DATA:
    opt.zero_grad()
    _loss(ps, torch.tensor(x), torch.tensor(y)).backward()
    opt.step()
    out.append([p.detach().numpy().copy() for p in ps])
  return out


def _reference(update, trainable=(0, 1)) -> list[list[np.ndarray]]:
  """update(i, param, grad) -> new param, in float64 NumPy; torch supplies the gradients."""
  ps, out = [a.astype(np.float64) for a in INIT], []
  for x, y in DATA:
    tp = [torch.tensor(p, requires_grad=True) for p in ps]
    _loss(tp, torch.tensor(x, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)).backward()
    ps = [update(i, p, t.grad.numpy()) if i in trainable else p for i, (p, t) in enumerate(zip(ps, tp))]
    out.append(ps)
  return out


def _compare(ours, ref, atol=1e-5, rtol=1e-4):
  for step, (a, b) in enumerate(zip(ours, ref)):
    for i, (p, q) in enumerate(zip(a, b)): np.testing.assert_allclose(p, q, atol=atol, rtol=rtol, err_msg=f"step {step}, param {i}")


# ** against torch.optim **
TORCH_CASES = [
  ("sgd", lambda p: optim.SGD(p, lr=0.05), lambda p: torch.optim.SGD(p, lr=0.05)),
  ("sgd_momentum_wd", lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1),
   lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1)),
  ("sgd_nesterov", lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True),
   lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True)),
  # with a constant rate, applying it before the momentum (classic) gives the same steps as torch's rule
  ("sgd_classic", lambda p: optim.SGD(p, lr=0.05, momentum=0.9, classic=True), lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
  ("adam", lambda p: optim.Adam(p, lr=0.1, b1=0.8, b2=0.9, eps=1e-6), lambda p: torch.optim.Adam(p, lr=0.1, betas=(0.8, 0.9), eps=1e-6)),
  ("adamw", lambda p: optim.AdamW(p, lr=0.1, weight_decay=0.5), lambda p: torch.optim.AdamW(p, lr=0.1, weight_decay=0.5)),
]


@pytest.mark.parametrize("name,ours,ref", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_against_torch(name, ours, ref):
  _compare(_ours(ours), _torch(ref))


def test_muon_against_torch(monkeypatch):
  """torch's Muon (EMA momentum, decoupled decay) with its bfloat16 orthogonalization swapped for a float64 one; the
  params are square, so its aspect-ratio rate adjustment is 1."""
  import torch.optim._muon as tmuon
  monkeypatch.setattr(tmuon, "_zeropower_via_newtonschulz",
                      lambda g, coefs, steps, eps: torch.tensor(_np_newton_schulz(g.double().numpy(), steps, coefs)).to(g.dtype))
  _compare(_ours(lambda p: optim.Muon(p, lr=0.05, weight_decay=0.2)), _torch(lambda p: torch.optim.Muon(p, lr=0.05, weight_decay=0.2)))


# ** against NumPy transcriptions of the update rules **
def _np_newton_schulz(g, steps, coefs, eps=1e-7):
  if g.shape[0] > g.shape[1]: return _np_newton_schulz(g.T, steps, coefs, eps).T
  x = g / (np.sqrt((g * g).sum()) + eps)
  for _ in range(steps):
    gram = x @ x.T
    x = coefs[0] * x + coefs[1] * gram @ x + coefs[2] * gram @ gram @ x
  return x


def _momentum_rule(lr, momentum, wd, nesterov, ns=None, tcoef=0.0, classic=False):
  """tinygrad's LARS family: Muon (ns, decoupled decay), LARS (trust ratio, classic) and SGD."""
  buf: dict[int, np.ndarray] = {}
  def update(i, p, g):
    r = 1.0
    if tcoef:
      wn, gn = np.linalg.norm(p), np.linalg.norm(g)
      r = tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0
    if ns is None: g = g + wd * p
    if classic: g = g * r * lr
    buf[i] = momentum * buf.get(i, 0) + g
    g = g + momentum * buf[i] if nesterov else buf[i]
    if ns is not None: g = _np_newton_schulz(g.reshape(g.shape[0], -1), 5, ns).reshape(g.shape) + wd * p
    return p - (g if classic else g * r * lr)
  return update


def _lamb_rule(lr, b1, b2, eps, wd, adam):
  m: dict[int, np.ndarray] = {}
  v: dict[int, np.ndarray] = {}
  t: dict[int, int] = {}
  def update(i, p, g):
    m[i], v[i], t[i] = b1 * m.get(i, 0) + (1 - b1) * g, b2 * v.get(i, 0) + (1 - b2) * g * g, t.get(i, 0) + 1
    up = (m[i] / (1 - b1 ** t[i])) / (np.sqrt(v[i] / (1 - b2 ** t[i])) + eps) + wd * p
    r = 1.0 if adam else np.linalg.norm(p) / np.linalg.norm(up)
    return p - lr * r * up
  return update


NP_CASES = [
  ("muon", lambda p: optim.Muon(p, lr=0.05, weight_decay=0.2), lambda: _momentum_rule(0.05, 0.95, 0.2, True, ns=(3.4445, -4.775, 2.0315))),
  ("lars", lambda p: optim.LARS(p, lr=0.5, momentum=0.9, weight_decay=0.01, tcoef=0.02),
   lambda: _momentum_rule(0.5, 0.9, 0.01, False, tcoef=0.02, classic=True)),
  ("lamb", lambda p: optim.LAMB(p, lr=0.05, weight_decay=0.1), lambda: _lamb_rule(0.05, 0.9, 0.999, 1e-6, 0.1, False)),
]


@pytest.mark.parametrize("name,ours,rule", NP_CASES, ids=[c[0] for c in NP_CASES])
def test_against_numpy(name, ours, rule):
  _compare(_ours(ours), _reference(rule()), atol=2e-5)


def test_newton_schulz_tall_and_orthogonalizing():
  g = RNG.standard_normal((6, 3)).astype(np.float32)
  out = optim.newton_schulz(Tensor(g), 5, (3.4445, -4.775, 2.0315)).numpy()
  np.testing.assert_allclose(out, _np_newton_schulz(g.astype(np.float64), 5, (3.4445, -4.775, 2.0315)), atol=1e-5)
  # the quintic leaves every singular value within about [0.7, 1.2] of 1
  assert np.all(np.abs(np.linalg.svd(out, compute_uv=False) - 1) < 0.35)
  with pytest.raises(ValueError, match="2 dimensions"): optim.newton_schulz(Tensor(g[0]), 5, (1.5, -0.5))


# ** TinyJit **
class _Net:
  def __init__(self):
    self.l1, self.bn, self.l2 = nn.Linear(4, 4, bias=False), nn.BatchNorm(4), nn.Linear(4, 4)
    # known values instead of the random init, which is never realized then
    self.l1.weight, self.l2.weight, self.l2.bias = Tensor(INIT[0]), Tensor(INIT[1]), Tensor(INIT[1][0])
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.bn(self.l1(x)).relu())


@pytest.mark.parametrize("make", [TORCH_CASES[2][1], TORCH_CASES[5][1]],
                         ids=["sgd", "adamw"])
def test_jit_step_matches_unjitted(make):
  """Forward, backward and step inside TinyJit (replayed from the third call) give the unjitted parameters, running
  statistics and losses, also after the learning rate is changed between steps."""
  def train(jit: bool):
    net = _Net()
    opt = make(get_parameters(net))
    def step(x: Tensor, y: Tensor) -> Tensor:
      opt.zero_grad()
      loss = (net(x) - y).square().mean().backward()
      opt.step()
      return loss
    if jit: step = TinyJit(step)
    losses = []
    for i in range(5):
      if i == 3: opt.lr.assign(opt.lr * 0.1).realize()
      x, y = DATA[i % 3]
      losses.append(step(Tensor(x), Tensor(y)).item())
    return losses, [t.numpy() for t in get_parameters(net)]
  (la, pa), (lb, pb) = train(False), train(True)
  np.testing.assert_allclose(la, lb, rtol=1e-6)
  assert la[4] != la[3]
  for a, b in zip(pa, pb): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_lr_tensor_changes_steps():
  p = Tensor([1.0, 2.0])
  opt = optim.SGD([p], lr=0.5)
  assert isinstance(opt.lr, Tensor) and opt.lr.numpy().tolist() == [0.5]
  for lr, want in [(0.5, [0.0, 0.0]), (0.25, [-0.5, -1.0])]:
    opt.lr.assign(Tensor([lr])).realize()
    opt.zero_grad()
    (p * Tensor([2.0, 4.0])).sum().backward()
    opt.step()
    np.testing.assert_allclose(p.numpy(), np.array(want))


# ** params, buffers, groups **
def test_params_and_buffers():
  a, b, c = Tensor([1.0]), Tensor([2.0], requires_grad=True), Tensor([3.0], requires_grad=False)
  opt = optim.Adam([a, b, a, c, c])
  assert opt.params == [a, b] and opt.buffers == [c] and a.requires_grad is True
  bn = nn.BatchNorm(2)
  opt = optim.SGD(get_parameters(bn))
  assert [id(t) for t in opt.params] == [id(bn.weight), id(bn.bias)]
  assert {id(t) for t in opt.buffers} == {id(bn.running_mean), id(bn.running_var), id(bn.num_batches_tracked)}


def test_zero_grad_and_scalar_param():
  p = Tensor(3.0, requires_grad=True)
  opt = optim.SGD([p], lr=0.25, momentum=0.5)
  for want in (1.5, 0.0):  # grad 2p: 3 - 0.25*6; momentum 0.5*6 + 3 = 6
    opt.zero_grad()
    (p * p).backward()
    opt.step()
    assert p.shape == () and p.item() == want
  opt.zero_grad()
  assert p.grad is None


def test_optimizer_group():
  ours = lambda p: optim.OptimizerGroup(optim.SGD(p[:1], lr=0.05, momentum=0.9), optim.Adam(p[1:], lr=0.1))  # noqa: E731
  class Ref:
    def __init__(self, p): self.o = [torch.optim.SGD(p[:1], lr=0.05, momentum=0.9), torch.optim.Adam(p[1:], lr=0.1)]
    def zero_grad(self): [o.zero_grad() for o in self.o]
    def step(self): [o.step() for o in self.o]
  _compare(_ours(ours), _torch(Ref))
  group = ours([Tensor([1.0]), Tensor([2.0])])
  assert len(group.params) == 2 and isinstance(group[1], optim.LAMB)


# ** bad use **
def test_bad_arguments():
  p = Tensor([1.0])
  with pytest.raises(ValueError, match="learning rate"): optim.SGD([p], lr=-1)
  with pytest.raises(ValueError, match="requires_grad"): optim.Adam([Tensor([1.0], requires_grad=False)])
  with pytest.raises(ValueError, match="momentum"): optim.SGD([p], momentum=-0.1)
  with pytest.raises(ValueError, match="nesterov"): optim.SGD([p], nesterov=True)
  with pytest.raises(ValueError, match="weight_decay"): optim.AdamW([p], weight_decay=-1)
  with pytest.raises(ValueError, match="betas"): optim.Adam([p], b1=1.0)
  with pytest.raises(ValueError, match="eps"): optim.LAMB([p], eps=-1e-6)


def test_step_needs_training_and_grads():
  p = Tensor([1.0, 2.0])
  opt = optim.SGD([p], lr=0.1)
  with pytest.raises(RuntimeError, match="no grad"): opt.step()
  p.sum().backward()
  Tensor.training = False
  with pytest.raises(RuntimeError, match="training"): opt.step()
  np.testing.assert_equal(p.numpy(), [1.0, 2.0])


def test_lamb_moments_offloaded_to_the_cpu_step_a_sharded_weight():
  # tinygrad's test_lamb_cpu_offload_multi: the moments moved to the CPU, the weight sharded over two devices. The
  # gradient goes to the moments' device and the update back to the weight's, sharded as it is: the values of the
  # same steps without offloading
  x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
  def run(offload: bool) -> tuple[Tensor, optim.LAMB]:
    t = Tensor(x.copy(), requires_grad=True).shard(("CPU", "CPU:1"), axis=1)
    opt = optim.LAMB([t])
    if offload:
      for p in opt.m + opt.v + [opt.b1_t, opt.b2_t]: p.to_("CPU")
    for _ in range(2):
      opt.zero_grad()
      (t * t).sum().backward()
      opt.step()
    return t, opt
  (t1, o1), (t0, _) = run(True), run(False)
  assert t1.device == ("CPU", "CPU:1") and o1.m[0].device == "CPU"
  np.testing.assert_allclose(t1.numpy(), t0.numpy(), rtol=1e-5, atol=1e-6)  # (the norms sum in another order)
