"""Reductions, matmul and the functions built on them (softmax, cumulative ops, sorting, losses, attention)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tinyhybrid.dtype import dtypes, least_upper_dtype, sum_acc_dtype, to_dtype
from tinyhybrid.helpers import prod
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import sint_eq

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Axis = int | Sequence[int] | None
_REDUCTIONS = ("mean", "sum", "none")
# cumulative ops run a lower-triangular window over the axis (n^2 work per row); longer axes go in chunks of this size
_CUM_SPLIT = 256


def _check_reduction(op: str, reduction: str) -> None:
  if reduction not in _REDUCTIONS: raise ValueError(f"{op}: reduction={reduction!r} must be one of {_REDUCTIONS}")


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
  return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def _logsigmoid(x: Tensor) -> Tensor:
  """log(sigmoid(x)) without overflow at large |x|: each side of 0 has its own stable form, and each form only ever sees
  inputs from its own side, so the branch not taken is finite and passes no NaN back in the gradient."""
  pos, neg = (x >= 0).where(x, 0), (x < 0).where(x, 0)
  return (x >= 0).where(-(1 + (-pos).exp()).log(), neg - (1 + neg.exp()).log())


def _cum_combine(op: str, a: Tensor, b: Tensor) -> Tensor:
  if op == "sum": return a + b
  if op == "prod": return a * b
  if op == "max": return a.maximum(b)
  m = a.maximum(b).detach()  # lse: logaddexp that keeps -inf (and +inf) operands finite in the exponent
  m = m.isinf().where(0, m)
  return ((a - m).exp() + (b - m).exp()).log() + m


class ReduceMixin:
  __slots__ = ()

  def _axes(self: Tensor, axis: Axis) -> tuple[int, ...]:
    """The axes of a reduce, resolved; a 0-d tensor accepts 0 and -1 (as torch does) and reduces nothing."""
    if axis is None: return tuple(range(self.ndim))
    axes = tuple(self._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))
    return axes if self.ndim else ()

  def _drop_axes(self: Tensor, axes: tuple[int, ...]) -> Tensor:
    """A keepdim reduce's result without its reduced (size-1) axes."""
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _inverse(self: Tensor) -> Tensor:
    """An order-reversing map that is its own inverse and never overflows: -x for floats, ~x for ints, not for bool."""
    return -self if self.dtype._is_float else self.bitwise_not()

  # ** reductions; over a zero-size axis each gives its identity: sum 0, prod 1, max dtype.min, min dtype.max **
  def sum(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum over axis; ints accumulate in at least int32, half, bfloat16 and the fp8s accumulate in float32 and cast back."""
    acc = sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype)
    ret = self.cast(acc)._reduce(Ops.ADD, self._axes(axis), keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16, *dtypes.fp8s) else ret

  def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype=None) -> Tensor:
    return self.cast(to_dtype(dtype) if dtype is not None else self.dtype)._reduce(Ops.MUL, self._axes(axis), keepdim)

  def max(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.MAX, self._axes(axis), keepdim)
  def min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self._inverse().max(axis, keepdim)._inverse()

  def any(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self.cast(dtypes.bool).max(axis, keepdim)
  def all(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def _count(self: Tensor, axis: Axis):
    """How many elements each output of a reduce over axis sums (a sint when the shape is symbolic)."""
    return prod(self.shape[a] for a in self._axes(axis))

  def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    """Mean over axis (NaN over a zero-size axis); ints give default_float, half sums in float32."""
    out_dt = self.dtype if self.dtype._is_float else dtypes.default_float
    return self.sum(axis, keepdim, dtype=sum_acc_dtype(self.dtype)).div(self._count(axis)).cast(out_dt)

  def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    """Variance over axis, dividing by max(0, n - correction) as torch does: NaN (0/0) or inf where that is 0."""
    out_dt = self.dtype if self.dtype._is_float else dtypes.default_float
    n = self._count(axis)
    den = max(n - correction, 0) if isinstance(n, int) else (n - correction).maximum(0)
    sq = (self - self.mean(axis, keepdim=True)).square()
    return sq.sum(axis, keepdim, dtype=sum_acc_dtype(sq.dtype)).div(den).cast(out_dt)

  def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()

  def var_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    axes = self._axes(axis)
    m = self.max(axes, keepdim=True).detach()
    m = m.isinf().where(0, m)  # all -inf (or an inf) keeps inf - inf out of the exponent
    ret = (self - m).exp().sum(axes, keepdim=True).log() + m
    return ret if keepdim else ret._drop_axes(axes)

  def _softmax(self: Tensor, axis: int, dtype=None) -> tuple[Tensor, Tensor, Tensor]:
    x = self.cast(dtype) if dtype is not None else self._float()
    m = x - x.max(axis, keepdim=True).detach()
    e = m.exp()
    return m, e, e.sum(axis, keepdim=True)

  def softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)

  def log_softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()

  def softmin(self: Tensor, axis: int = -1, dtype=None) -> Tensor: return (-self).softmax(axis, dtype)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """self divided by its Lp norm along dim (at least eps), as torch.nn.functional.normalize; p may be 0 or +-inf."""
    if p == 0: norm = (self != 0).sum(dim, keepdim=True).cast(self.dtype)
    elif p == math.inf: norm = self.abs().max(dim, keepdim=True)
    elif p == -math.inf: norm = self.abs().min(dim, keepdim=True)
    else:  # the root's derivative is infinite at 0: a zero norm takes no gradient (torch's subgradient), not inf * 0 = NaN
      total = self.abs().pow(p).sum(dim, keepdim=True)
      norm = (total == 0).where(0, (total == 0).where(1, total).pow(1 / p))
    return self / norm.maximum(eps)

  def allclose(self: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """Whether every element isclose, as a 0-d bool tensor (tinygrad's; .item() gives the bool)."""
    return self.isclose(other, rtol, atol, equal_nan).all()

  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """int32 index of the first maximum (of the flattened tensor when axis is None, all dims kept as 1 with keepdim, as
    torch does); a NaN counts as the maximum, as in torch."""
    if axis is None: return self.flatten().argmax(0).reshape((1,) * self.ndim if keepdim else ())
    a = self._resolve_dim(axis)
    if self.ndim == 0: return self.zeros_like(dtype=dtypes.int32)
    n = self.shape[a]
    if isinstance(n, int) and n == 0: raise IndexError(f"argmax: dimension {a} of shape {self.shape} is empty, it has no index")
    is_max = self == self.max(a, keepdim=True)
    if self.dtype._is_float: is_max = is_max | self.isnan()
    idx = self.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * idx).max(a, keepdim)).cast(dtypes.int32)

  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor: return self._inverse().argmax(axis, keepdim)

  # ** matmul **
  def dot(self: Tensor, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with numpy's broadcasting rules (1-D operands are vectors). The result has the operands' common
    dtype (half and small ints are accumulated in float32 / int32 and cast back, as in tinygrad), or dtype if given."""
    if self.ndim == 0 or w.ndim == 0:
      raise RuntimeError(f"matmul: both operands need at least 1 dimension, got shapes {self.shape} and {w.shape}")
    x, y = (self.unsqueeze(0) if self.ndim == 1 else self), (w.unsqueeze(-1) if w.ndim == 1 else w)
    if not sint_eq(x.shape[-1], y.shape[-2]):
      raise RuntimeError(f"matmul: shapes {self.shape} and {w.shape} do not align ({x.shape[-1]} != {y.shape[-2]})")
    try: self._broadcast_shape(x.shape[:-2], y.shape[:-2])
    except ValueError: raise RuntimeError(f"matmul: the batch dims of shapes {self.shape} and {w.shape} do not broadcast") from None
    out_dt = least_upper_dtype(self.dtype, w.dtype) if dtype is None else to_dtype(dtype)
    # the products too are in the accumulator's dtype: exact for half (and int8) inputs, and the backward's sums then
    # accumulate in float32 as well
    acc = sum_acc_dtype(out_dt) if dtype is None else out_dt
    out = (x.cast(acc).unsqueeze(-1) * y.cast(acc).unsqueeze(-3)).sum(-2, dtype=acc).cast(out_dt)
    if self.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out
  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype=None) -> Tensor: return x.dot(self, dtype) if reverse else self.dot(x, dtype)

  def newton_schulz(self: Tensor, steps: int, params: tuple[float, ...], eps: float = 1.0e-7) -> Tensor:
    """Orthogonalizes the last two dims by `steps` iterations of the odd polynomial sum_i params[i] * (G G^T)^i G (Muon's)."""
    from tinyhybrid.nn.optim import newton_schulz
    return newton_schulz(self, steps, params, eps)

  # ** matrix decompositions, from matmuls; every matrix op works on the last two dims, batched over the rest **
  def qr(self: Tensor) -> tuple[Tensor, Tensor]:
    """Complete QR by Householder reflections: Q (..., m, m) orthogonal and R (..., m, n) upper triangular, with LAPACK's
    (and so torch.linalg.qr(mode="complete")'s) signs: each reflection sends its column to -sign(x_i) * |x|, and a column
    already zero below the diagonal is left as it is."""
    if self.ndim < 2: raise RuntimeError(f"qr: needs at least 2 dimensions, got shape {self.shape}")
    m, n = self.shape[-2], self.shape[-1]
    x = self._float()
    R, Q = x, self.eye(m, dtype=x.dtype, device=self.device).expand(*self.shape[:-2], m, m)
    rows = self.arange(m, device=self.device)
    for i in range(min(m, n)):
      col = (rows >= i).where(R[..., :, i], 0)  # (..., m): column i from the diagonal down
      head = (rows == i).where(col, 0).sum(-1, keepdim=True)
      norm = col.square().sum(-1, keepdim=True).sqrt()
      v = (rows == i).where(col + (head >= 0).where(1, -1) * norm, col)  # x + sign(x_i) |x| e_i
      act = (rows > i).where(col, 0).square().sum(-1, keepdim=True) > 0  # anything below the diagonal to reflect away
      beta = act.where(2 / act.where(v.square().sum(-1, keepdim=True), 1), 0).unsqueeze(-1)  # H = I - beta v v^T
      v = v.unsqueeze(-1)
      R = R - v @ (beta * (v.transpose(-2, -1) @ R))
      Q = Q - (Q @ v) @ (beta * v.transpose(-2, -1))
    return Q, R.triu()  # below the diagonal only rounding is left: exact zeros, as LAPACK

  def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """U, S, Vh with self = U @ diag(S) @ Vh and S descending, as torch.linalg.svd (each singular vector pair is unique
    only up to sign). One-sided Jacobi on the triangle of a QR: sweeps of rotations of column pairs (a round-robin
    schedule, every pair once per sweep) until the columns are orthogonal; their norms are S."""
    if self.ndim < 2: raise RuntimeError(f"svd: needs at least 2 dimensions, got shape {self.shape}")
    m, n = self.shape[-2], self.shape[-1]
    if m < n:
      u, s, vh = self.transpose(-2, -1).svd(full_matrices)
      return vh.transpose(-2, -1), s, u.transpose(-2, -1)
    batch, k = self.shape[:-2], n
    Q, R = self.qr()
    U, V = R[..., :k, :k].contiguous(), self.eye(k, dtype=R.dtype, device=self.device).expand(*batch, k, k).contiguous()
    players, h = list(range(k + k % 2)), (k + k % 2) // 2  # circle method; with odd k one player sits out each round
    for _ in range(10 if k > 1 else 0):  # Jacobi converges quadratically: 10 sweeps reach float precision with margin
      for _ in range(len(players) - 1):
        pairs = [(a, b) for a, b in zip(players[:h], players[::-1][:h]) if a < k and b < k]
        sel = np.zeros((k, 2 * len(pairs)), np.float32)
        for j, (a, b) in enumerate(pairs): sel[a, j], sel[b, len(pairs) + j] = 1, 1
        P = type(self)(sel, device=self.device, dtype=U.dtype)
        up, vp = U @ P, V @ P
        ul, ur = up.split(len(pairs), -1)
        alpha, beta, gamma = ul.square().sum(-2, keepdim=True), ur.square().sum(-2, keepdim=True), (ul * ur).sum(-2, keepdim=True)
        # the rotation that makes a pair orthogonal: t the smaller root of t^2 + 2 zeta t - 1, zeta = (beta - alpha) / 2 gamma
        rot = gamma != 0
        zeta = (beta - alpha) / (2 * rot.where(gamma, 1))
        t = rot.where((zeta >= 0).where(1, -1) / (zeta.abs() + (1 + zeta.square()).sqrt()), 0)
        c = 1 / (1 + t.square()).sqrt()
        sn = c * t
        cs, ss = c.cat(c, dim=-1), (-sn).cat(sn, dim=-1)  # new left = c l - s r, new right = s l + c r
        swap = lambda x: x[..., len(pairs):].cat(x[..., :len(pairs)], dim=-1)  # noqa: E731
        U = U + (up * (cs - 1) + swap(up) * ss) @ P.transpose(-2, -1)
        V = V + (vp * (cs - 1) + swap(vp) * ss) @ P.transpose(-2, -1)
        players = [players[0], players[-1], *players[1:-1]]
    S, order = U.square().sum(-2).sqrt().sort(-1, descending=True)
    perm = (self.arange(k, device=self.device).reshape(k, 1) == order.unsqueeze(-2)).cast(U.dtype)  # [..., i, j]: order[j] == i
    U, V = (U @ perm) / (S != 0).where(S, 1).unsqueeze(-2), V @ perm
    # U of the k x k triangle into the top left of an m x m identity; Q then rotates it into self's column space
    U = Q @ U.pad((None,) * len(batch) + ((0, m - k), (0, m - k))) + Q[..., :, k:].pad((None,) * len(batch) + (None, (k, 0)))
    return (U if full_matrices else U[..., :, :k]), S, V.transpose(-2, -1)

  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  # ** cumulative **
  def _cum_window(self: Tensor, op: str) -> Tensor:
    """The cumulative op along the last axis: out[..., i] = op over x[..., j] for j <= i, as one masked reduce."""
    n = self.shape[-1]
    x = self.unsqueeze(-2).expand(*self.shape[:-1], n, n)  # x[..., i, j] = self[..., j]
    tri = self.ones(n, n, dtype=dtypes.bool, device=self.device).tril()
    if op == "sum": return tri.where(x, 0).sum(-1)
    if op == "prod": return tri.where(x, True if self.dtype is dtypes.bool else 1).prod(-1)  # True: a bool stays bool
    if op == "max": return tri.where(x, self.dtype.min).max(-1)
    cm = self._cum_last("max").detach()  # lse: each row against its own running max, so no term under- or overflows
    cm = cm.isinf().where(0, cm)
    return tri.where(x - cm.unsqueeze(-1), -math.inf).exp().sum(-1).log() + cm

  def _cum_last(self: Tensor, op: str) -> Tensor:
    """The cumulative op along the last (non-empty) axis; a long axis is cut into chunks, each scanned on its own, and
    the running totals of the chunks before it folded in (so the work stays n * _CUM_SPLIT, not n^2)."""
    n = self.shape[-1]
    if not isinstance(n, int) or n <= 2 * _CUM_SPLIT: return self._cum_window(op)
    ident = {"sum": 0, "prod": True if self.dtype is dtypes.bool else 1, "max": self.dtype.min, "lse": -math.inf}[op]
    c = -(-n // _CUM_SPLIT)
    chunks = self.pad((None,) * (self.ndim - 1) + ((0, c * _CUM_SPLIT - n),), value=ident).reshape(*self.shape[:-1], c, _CUM_SPLIT)
    inner = chunks._cum_window(op)
    before = inner[..., -1]._cum_last(op).pad((None,) * (self.ndim - 1) + ((1, -1),), value=ident)
    return _cum_combine(op, inner, before.unsqueeze(-1)).reshape(*self.shape[:-1], c * _CUM_SPLIT)[..., :n]

  def _cumulative(self: Tensor, axis: int, op: str) -> Tensor:
    a = self._resolve_dim(axis)
    if self.ndim == 0 or (isinstance(self.shape[a], int) and self.shape[a] == 0): return self.sum(()) if op == "sum" else self
    return self.transpose(a, -1)._cum_last(op).transpose(a, -1)

  def cumsum(self: Tensor, axis: int = 0) -> Tensor:
    """Cumulative sum along axis, in the dtype sum gives (ints accumulate in at least int32)."""
    return self._cumulative(axis, "sum")
  def cumprod(self: Tensor, axis: int = 0) -> Tensor: return self._cumulative(axis, "prod")

  def cummax(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    """Running maximum along axis and its int32 indices; on ties the later index, as in torch."""
    vals, a = self._cumulative(axis, "max"), self._resolve_dim(axis)
    if self.ndim == 0: return vals, self.zeros_like(dtype=dtypes.int32)
    # the running max is reached again exactly where an element equals it, so its index is a running max of those places
    hit = self == vals
    if self.dtype._is_float: hit = hit | self.isnan()
    pos = self.arange(self.shape[a], device=self.device).reshape((self.shape[a],) + (1,) * (self.ndim - a - 1))
    return vals, hit.where(pos, -1)._cumulative(a, "max").cast(dtypes.int32)

  def cummin(self: Tensor, axis: int = 0) -> tuple[Tensor, Tensor]:
    vals, idx = self._inverse().cummax(axis)
    return vals._inverse(), idx

  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along axis, each prefix scaled by its own running max (exact for [0, 100], all -inf, ...)."""
    return self._float()._cumulative(axis, "lse")

  # ** losses **
  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean") -> Tensor:
    """Cross entropy of logits self (..., C) (classes on the LAST axis, unlike torch) for class indices Y (...)."""
    _check_reduction("sparse_categorical_crossentropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
      raise ValueError(f"sparse_categorical_crossentropy: label_smoothing={label_smoothing} not in [0, 1]")
    log_probs = self.log_softmax()
    mask = Y != ignore_index
    counter = self.arange(self.shape[-1], device=self.device).reshape((1,) * Y.ndim + (self.shape[-1],))
    hit = (counter == Y.unsqueeze(-1)) & mask.unsqueeze(-1)
    smoothing = label_smoothing * mask.where(log_probs.mean(-1), 0)
    loss = -hit.where(log_probs, 0).sum(-1) * (1 - label_smoothing) - smoothing
    return loss.sum() / mask.sum() if reduction == "mean" else _reduce_loss(loss, reduction)

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy of logits self (C,) or (N, C, ...): Y holds class indices (ints, shape without
    the class axis; -100 is ignored) or class probabilities (floats, the shape of self)."""
    _check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"cross_entropy: label_smoothing={label_smoothing} not in [0, 1]")
    if self.ndim == 0: raise RuntimeError("cross_entropy: input needs a class dimension, got a 0-d tensor")
    cdim = 0 if self.ndim == 1 else 1
    n_classes = self.shape[cdim]
    logp = self.log_softmax(cdim)
    if Y.shape == self.shape and Y.dtype._is_float:
      return _reduce_loss(-(logp * ((1 - label_smoothing) * Y + label_smoothing / n_classes)).sum(cdim), reduction)
    if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:] or Y.dtype._is_float:
      raise RuntimeError(f"cross_entropy: target of shape {Y.shape} ({Y.dtype}) fits neither class indices nor class probabilities "
                         f"for input of shape {self.shape}")
    mask = Y != -100
    classes = self.arange(n_classes, device=self.device).reshape((n_classes,) + (1,) * (self.ndim - cdim - 1))
    nll = -(classes == Y.unsqueeze(cdim)).where(logp, 0).sum(cdim)
    loss = mask.where((1 - label_smoothing) * nll - label_smoothing * logp.mean(cdim), 0)
    return loss.sum() / mask.sum() if reduction == "mean" else _reduce_loss(loss, reduction)

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities self (C,) or (N, C, ...) for class indices Y (shape without the class axis)."""
    _check_reduction("nll_loss", reduction)
    if self.ndim == 0: raise RuntimeError("nll_loss: input needs a class dimension, got a 0-d tensor")
    cdim = 1 if self.ndim >= 2 else 0
    if Y.shape != self.shape[:cdim] + self.shape[cdim + 1:]:
      raise RuntimeError(f"nll_loss: target of shape {Y.shape} does not fit input of shape {self.shape}")
    n_classes, tail = self.shape[cdim], (1,) * (self.ndim - cdim - 1)
    hit = self.arange(n_classes, device=self.device).reshape((n_classes,) + tail) == Y.unsqueeze(cdim)
    if ignore_index is not None: hit = hit & (Y != ignore_index).unsqueeze(cdim)
    w = hit.cast(self.dtype) if weight is None else hit.where(weight.reshape((n_classes,) + tail), 0)
    loss = -hit.where(self * w, 0).sum(cdim)
    return loss.sum() / w.sum() if reduction == "mean" else _reduce_loss(loss, reduction)

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    """Binary cross entropy of probabilities self; each log is clamped at -100, as torch does, so 0 and 1 give no NaN."""
    _check_reduction("binary_crossentropy", reduction)
    return _reduce_loss(-(Y * self.log().maximum(-100) + (1 - Y) * (1 - self).log().maximum(-100)), reduction)

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Binary cross entropy of logits self, stable at any magnitude; pos_weight scales the positive term (per class)."""
    _check_reduction("binary_crossentropy_logits", reduction)
    pos = Y * _logsigmoid(self)
    if pos_weight is not None: pos = pos * pos_weight
    return _reduce_loss(-(pos + (1 - Y) * _logsigmoid(-self)), reduction)

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, as torch's. enable_gqa shares each key/value head among query heads (dim -3);
    half inputs compute the scores in float32."""
    q = self
    if is_causal and attn_mask is not None:
      raise RuntimeError(f"scaled_dot_product_attention: attn_mask (shape {attn_mask.shape}) can't be set with is_causal=True")
    if enable_gqa and q.ndim >= 3 and key.ndim >= 3:
      hq, hk, hv = q.shape[-3], key.shape[-3], value.shape[-3]
      if hk == 0 or hv == 0 or hq % hk or hq % hv:
        raise RuntimeError(f"scaled_dot_product_attention: {hq} query heads don't split into groups of {hk} key / {hv} value heads")
      key, value = key.repeat_interleave(hq // hk, dim=-3), value.repeat_interleave(hq // hv, dim=-3)
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    acc = least_upper_dtype(q.dtype, key.dtype, dtypes.float32)
    w = q.matmul(key.transpose(-2, -1), dtype=acc) * s
    if is_causal: w = self.ones(w.shape[-2], w.shape[-1], dtype=dtypes.bool, device=self.device).tril().where(w, -math.inf)
    if attn_mask is not None: w = attn_mask.where(w, -math.inf) if attn_mask.dtype is dtypes.bool else w + attn_mask
    w = w.softmax(-1).cast(value.dtype)
    if dropout_p: w = w.dropout(dropout_p)  # dropout itself checks training (Tensor.training or Context(TRAINING=1))
    return w.matmul(value)

  # ** sorting **
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Values and int32 indices of a stable sort along dim, as torch.sort(stable=True), NaN sorting above every other
    value. Each element's place is the number of elements that come before it (smaller, or equal and earlier), so the
    cost is n^2 compares per row."""
    d = self._resolve_dim(dim)
    if self.ndim == 0 or (isinstance(n := self.shape[d], int) and n <= 1): return self, self.zeros_like(dtype=dtypes.int32)
    x = self.transpose(d, -1)
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a[..., i, j] = x_i, b[..., i, j] = x_j
    ar = self.arange(n, device=self.device)
    lo, hi = (a, b) if descending else (b, a)
    less, same = lo < hi, b == a
    if dtypes.is_float(x.dtype):  # NaN is the largest value, as in torch: last ascending, first descending
      less, same = less | ((hi != hi) & (lo == lo)), same | ((a != a) & (b != b))
    before = less | (same & (ar.reshape(1, n) < ar.reshape(n, 1)))
    rank = before.cast(dtypes.int32).sum(-1)
    hit = rank.unsqueeze(-2) == ar.reshape(n, 1)  # hit[..., r, i]: element i goes to place r
    vals = hit.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype) if x.dtype is not dtypes.bool else (hit & x.unsqueeze(-2)).any(-1)
    idx = hit.where(ar, 0).sum(-1, dtype=dtypes.int32)
    return vals.transpose(d, -1), idx.transpose(d, -1)

  def argsort(self: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """int32 indices that sort self along dim (stable)."""
    return self.sort(dim, descending)[1]

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) values along dim and their int32 indices, in order (sorted_ is there for tinygrad's
    signature: the result is always sorted); ties keep the earlier index."""
    d = self._resolve_dim(dim)
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for dimension {d} of shape {self.shape}")
    vals, idx = self.sort(d, descending=largest)
    if self.ndim == 0: return vals, idx
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return vals.shrink(keep), idx.shrink(keep)
