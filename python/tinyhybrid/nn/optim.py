"""Optimizers with tinygrad's names and semantics. A step builds each parameter's update lazily and writes it with
assign, so params, optimizer state and learning rate keep their buffers: inside TinyJit the captured kernels replay
against them, and `opt.lr.assign(...)` between steps changes the rate of a jitted step too. Ordered from simple to
complex: SGD and Muon are LARS without a trust ratio; Adam and AdamW are LAMB without one."""
from __future__ import annotations

from tinyhybrid.dtype import DType, dtypes, least_upper_dtype
from tinyhybrid.helpers import is_training
from tinyhybrid.tensor import Tensor


def _dedup(ts: list[Tensor]) -> list[Tensor]: return list({id(t): t for t in ts}.values())


class Optimizer:
  """Base class: holds the params to update (the tensors given whose requires_grad is not False; None becomes True,
  so backward reaches them) and the buffers (requires_grad=False, e.g. BatchNorm running statistics), which step
  realizes too so their pending assigns land in the same schedule."""
  def __init__(self, params: list[Tensor], lr: float, device: str | None = None):
    if lr < 0: raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}")
    for t in params:
      if t.requires_grad is None: t.requires_grad = True
    self.params: list[Tensor] = _dedup([t for t in params if t.requires_grad])
    if not self.params: raise ValueError(f"{type(self).__name__}: needs at least one tensor with requires_grad")
    self.buffers: list[Tensor] = _dedup([t for t in params if not t.requires_grad])
    self.device = device or self.params[0].device
    # a buffer, not a constant, so changing it changes what jitted steps compute; at least float32 precision
    self.lr = Tensor([lr], device=self.device, dtype=least_upper_dtype(dtypes.default_float, dtypes.float32), requires_grad=False)

  def _state_dtype(self, t: Tensor) -> DType: return least_upper_dtype(t.dtype, dtypes.float32)

  def _new_state(self) -> list[Tensor]:
    """One zeroed buffer per param (at least float32), realized now so steps only ever assign into them. Each starts
    from its own empty buffer: identical lazy zeros would be one graph, realized into one shared buffer. On several
    devices a param's state is sharded as the param is (tinygrad's zeros_like), so a step assigns its gradient's
    shards into it."""
    def zeroed(t: Tensor) -> Tensor:
      sharded = type(self.device) is tuple and type(t.device) is tuple
      e = Tensor.empty(t.shape, dtype=self._state_dtype(t), device=None if sharded else self.device, requires_grad=False)
      return (e.shard(t.device, t.uop.axis) if sharded else e).assign(0)
    ts = [zeroed(t) for t in self.params]
    Tensor.realize(*ts)
    return ts

  def zero_grad(self) -> None:
    for t in self.params: t.grad = None

  def step(self) -> None:
    """Applies one update to every param and realizes it (with the optimizer state and the buffers)."""
    Tensor.realize(*self.schedule_step())

  def schedule_step(self) -> list[Tensor]:
    """Assigns the updates lazily and returns the tensors to realize to perform them."""
    if not is_training(Tensor):
      raise RuntimeError(f"{type(self).__name__}.step: Tensor.training is False; set Tensor.training = True to train")
    for t in self.params:
      if t.grad is None: raise RuntimeError(f"{type(self).__name__}.step: a param of shape {t.shape} has no grad; call backward first")
    updates, state = self._step(self.params, [t.grad for t in self.params])  # type: ignore[misc]
    for t, up in zip(self.params, updates): t.assign((t.detach() - up).reshape(t.shape))
    return state + self.params + self.buffers

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """(the amount to subtract from each param, the state tensors the step assigned)."""
    raise NotImplementedError


class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (e.g. Muon for matrices, AdamW for the rest): one schedule for all of them."""
  def __init__(self, *optimizers: Optimizer):  # pylint: disable=super-init-not-called
    self.optimizers = optimizers
    self.params = [t for o in optimizers for t in o.params]
    self.buffers = [t for o in optimizers for t in o.buffers]

  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]


def newton_schulz(x: Tensor, steps: int, coefficients: tuple[float, ...], eps: float = 1e-7) -> Tensor:
  """Orthogonalizes the last two dimensions of x: scaled to Frobenius norm <= 1, then `steps` iterations of the odd
  polynomial x <- sum_i coefficients[i] * (x x^T)^i x, which push every singular value towards 1 (Muon's quintic
  coefficients overshoot on purpose, leaving them in about [0.7, 1.2]). Works on the wide orientation, where x x^T is
  the smaller Gram matrix."""
  if x.ndim < 2: raise ValueError(f"newton_schulz: needs at least 2 dimensions, got shape {x.shape}")
  if x.shape[-2] > x.shape[-1]: return newton_schulz(x.transpose(-2, -1), steps, coefficients, eps).transpose(-2, -1)
  x = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
  for _ in range(steps):
    gram, term = x @ x.transpose(-2, -1), x
    acc = coefficients[0] * x
    for c in coefficients[1:]:
      term = gram @ term
      acc = acc + c * term
    x = acc
  return x


def SGD(params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
        classic: bool = False, device: str | None = None) -> LARS:
  """Stochastic gradient descent with optional momentum (torch's rule, or with classic=True the rate applied before the
  momentum), Nesterov momentum and L2 weight decay added to the gradient."""
  return LARS(params, lr, momentum, weight_decay, nesterov=nesterov, classic=classic, pre_wd=True, tcoef=0.0, device=device)


def Muon(params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
         ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315), nesterov: bool = True, device: str | None = None) -> LARS:
  """SGD with momentum whose update is orthogonalized by newton_schulz (each param viewed as (shape[0], -1)), with
  decoupled weight decay. Momentum accumulates b = momentum*b + g (torch's Muon uses the same direction scaled by
  1-momentum, which the orthogonalization removes); the rate is not adjusted for the matrix's aspect ratio."""
  return LARS(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, classic=False, pre_wd=False, tcoef=0.0, device=device)


class LARS(Optimizer):
  """Layer-wise adaptive rate scaling: momentum SGD whose rate is scaled per param by the trust ratio
  tcoef * ||w|| / (||g|| + wd * ||w||) (https://arxiv.org/abs/1708.03888). tcoef=0 leaves the ratio at 1 (SGD);
  ns_coefficients orthogonalizes the update (Muon); pre_wd adds weight decay to the gradient, otherwise it is applied
  after the momentum, decoupled (scaled by lr only)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4, ns_steps: int = 0,
               ns_coefficients: tuple[float, ...] | None = None, nesterov: bool = False, classic: bool = True, pre_wd: bool = True,
               tcoef: float = 0.001, device: str | None = None):
    if momentum < 0: raise ValueError(f"LARS: invalid momentum {momentum}")
    if weight_decay < 0: raise ValueError(f"LARS: invalid weight_decay {weight_decay}")
    if nesterov and momentum == 0: raise ValueError("LARS: nesterov needs a momentum")
    super().__init__(params, lr, device)
    self.momentum, self.wd, self.ns_steps, self.ns_coefficients = momentum, weight_decay, ns_steps, ns_coefficients
    self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
    self.b = self._new_state() if momentum else []

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    ret = []
    for i, (t, g) in enumerate(zip(params, grads)):
      r: Tensor | float = 1.0
      if self.tcoef != 0:
        wn, gn = t.detach().square().sum().sqrt(), g.square().sum().sqrt()
        r = (wn > 0).where((gn > 0).where(self.tcoef * wn / (gn + self.wd * wn), 1.0), 1.0)
      if self.pre_wd and self.wd > 0: g = g + self.wd * t.detach()
      if self.classic: g = g * r * self.lr
      if self.momentum:
        # the buffer starts at zero, so the first step needs no special case
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = g + self.momentum * self.b[i] if self.nesterov else self.b[i]
      if self.ns_coefficients: g = newton_schulz(g.reshape(g.shape[0], -1), self.ns_steps, self.ns_coefficients).reshape(g.shape)
      if not self.classic: g = g * r * self.lr
      if not self.pre_wd and self.wd > 0: g = g + self.wd * self.lr * t.detach()
      ret.append(g.cast(t.dtype))
    return ret, self.b


def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
          device: str | None = None) -> LAMB:
  """Adam with decoupled weight decay (https://arxiv.org/abs/1711.05101), as torch.optim.AdamW."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, device=device)


def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, device: str | None = None) -> LAMB:
  """Adam (https://arxiv.org/abs/1412.6980), as torch.optim.Adam without weight decay."""
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True, device=device)


class LAMB(Optimizer):
  """Adam's bias-corrected moments plus decoupled weight decay, the update scaled per param by the trust ratio
  ||w|| / ||update|| (https://arxiv.org/abs/1904.00962); adam=True leaves the ratio at 1 (AdamW)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False, device: str | None = None):
    if not 0 <= b1 < 1 or not 0 <= b2 < 1: raise ValueError(f"{'Adam' if adam else 'LAMB'}: betas must be in [0, 1), got {(b1, b2)}")
    if eps < 0: raise ValueError(f"{'Adam' if adam else 'LAMB'}: invalid eps {eps}")
    if weight_decay < 0: raise ValueError(f"{'Adam' if adam else 'LAMB'}: invalid weight_decay {weight_decay}")
    super().__init__(params, lr, device)
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    # b1^t and b2^t for the bias correction, kept as buffers so a jitted step advances them
    self.b1_t, self.b2_t = (Tensor([1.0], dtype=dtypes.float32, device=self.device, requires_grad=False) for _ in range(2))
    self.m, self.v = self._new_state(), self._new_state()

  def _step(self, params: list[Tensor], grads: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    ret = []
    self.b1_t *= self.b1
    self.b2_t *= self.b2
    for t, g, m, v in zip(params, grads, self.m, self.v):
      # moments kept elsewhere (offloaded to the CPU: m.to_("CPU")) take the gradient there, and the update goes back
      # to the weight's devices, sharded as it is
      if g.device != m.device: g = g.contiguous().to(m.device)
      m.assign(self.b1 * m + (1.0 - self.b1) * g)
      v.assign(self.b2 * v + (1.0 - self.b2) * (g * g))
      up = ((m / (1.0 - self.b1_t)) / ((v / (1.0 - self.b2_t)).sqrt() + self.eps)).shard_like(t) + self.wd * t.detach()
      r: Tensor | float = 1.0
      if not self.adam:
        wn, un = t.detach().square().sum().sqrt(), up.square().sum().sqrt()
        r = (wn > 0).where((un > 0).where(wn / un, 1.0), 1.0)
      ret.append((self.lr * r * up).cast(t.dtype))
    return ret, [self.b1_t, self.b2_t] + self.m + self.v
