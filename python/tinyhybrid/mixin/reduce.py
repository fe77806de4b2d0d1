"""Reductions, matmul and the functions built on them (softmax, losses, attention)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from tinyhybrid.dtype import dtypes, least_upper_float, sum_acc_dtype
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import sint_eq

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Axis = int | Sequence[int] | None


class ReduceMixin:
  __slots__ = ()

  def _axes(self: Tensor, axis: Axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    return tuple(self._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))

  def sum(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum over axis; ints accumulate in at least int32, half and bfloat16 accumulate in float32 and cast back."""
    acc = sum_acc_dtype(self.dtype) if dtype is None else dtype
    ret = self.cast(acc)._reduce(Ops.ADD, self._axes(axis), keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype in (dtypes.float16, dtypes.bfloat16) else ret

  def prod(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype=None) -> Tensor:
    return self.cast(dtype if dtype is not None else self.dtype)._reduce(Ops.MUL, self._axes(axis), keepdim)

  def max(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.MAX, self._axes(axis), keepdim)
  def min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    if self.dtype is dtypes.bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype._is_unsigned: return (self.dtype.max - (self.dtype.max - self).max(axis, keepdim)).cast(self.dtype)
    return -((-self).max(axis, keepdim))

  def any(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self.cast(dtypes.bool).max(axis, keepdim)
  def all(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    out_dt = self.dtype if self.dtype._is_float else dtypes.default_float
    n = math.prod(self.shape[a] for a in self._axes(axis))
    s = self.cast(out_dt).sum(axis, keepdim)
    return s / n if n else s * math.nan

  def var(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    n = math.prod(self.shape[a] for a in self._axes(axis))
    sq = (self - self.mean(axis, keepdim=True)).square().sum(axis, keepdim)
    return sq / max(0, n - correction) if n - correction > 0 else sq * math.nan

  def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
    return self.var(axis, keepdim, correction).sqrt()

  def var_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)

  def std_mean(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def logsumexp(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
    m = self.max(axis, keepdim=True)
    m = m.isinf().where(0, m)
    ret = (self - m).exp().sum(axis, keepdim=True).log() + m
    return ret if keepdim else ret.squeeze(self._axes(axis))

  def _softmax(self: Tensor, axis: int, dtype=None) -> tuple[Tensor, Tensor, Tensor]:
    x = self.cast(dtype) if dtype is not None else self._float()
    m = x - x.max(axis, keepdim=True).detach()
    e = m.exp()
    return m, e, e.sum(axis, keepdim=True)

  def softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    _, e, ss = self._softmax(axis, dtype)
    return e.div(ss)

  def softmin(self: Tensor, axis: int = -1, dtype=None) -> Tensor: return (-self).softmax(axis, dtype)

  def normalize(self: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    norm = self.abs().pow(p).sum(dim, keepdim=True).pow(1 / p)
    return self / norm.maximum(eps)

  def allclose(self: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

  def nll_loss(self: Tensor, Y: Tensor, weight: Tensor | None = None, ignore_index: int | None = None, reduction: str = "mean") -> Tensor:
    """Negative log likelihood of log-probabilities self (N, C, ...) for class indices Y (N, ...)."""
    classes = self.arange(self.shape[1]).reshape((1, self.shape[1]) + (1,) * (self.ndim - 2))
    hit = (classes == Y.unsqueeze(1)).cast(self.dtype)
    w = hit if weight is None else hit * weight.reshape((1, self.shape[1]) + (1,) * (self.ndim - 2))
    if ignore_index is not None: w = w * (Y != ignore_index).unsqueeze(1)
    loss = -(self * w).sum(1)
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    return loss.sum() / w.sum()

  def log_softmax(self: Tensor, axis: int = -1, dtype=None) -> Tensor:
    m, _, ss = self._softmax(axis, dtype)
    return m - ss.log()

  def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    """Index of the first maximum (of the flattened tensor when axis is None)."""
    if axis is None: return self.flatten().argmax(0)
    a = self._resolve_dim(axis)
    n = self.shape[a]
    is_max = self == self.max(a, keepdim=True)
    idx = self.arange(n, 0, -1).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * idx).max(a, keepdim)).cast(dtypes.int32)

  def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
    return (-self if not self.dtype is dtypes.bool else self.logical_not()).argmax(axis, keepdim)

  # ** matmul **
  def dot(self: Tensor, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with numpy's broadcasting rules (1-D operands are vectors)."""
    if self.ndim == 0 or w.ndim == 0: raise ValueError(f"matmul: both operands need at least 1 dimension, got {self.shape} and {w.shape}")
    x, y = (self.unsqueeze(0) if self.ndim == 1 else self), (w.unsqueeze(-1) if w.ndim == 1 else w)
    if not sint_eq(x.shape[-1], y.shape[-2]): raise ValueError(f"matmul: shapes {self.shape} and {w.shape} do not align ({x.shape[-1]} != {y.shape[-2]})")
    out = (x.unsqueeze(-1) * y.unsqueeze(-3)).sum(-2, dtype=dtype)
    if self.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out
  def matmul(self: Tensor, x: Tensor, reverse: bool = False, dtype=None) -> Tensor: return x.dot(self, dtype) if reverse else self.dot(x, dtype)

  def linear(self: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    x = self.mul(weight) if weight.ndim == 1 else self.dot(weight)
    return x.add(bias) if bias is not None else x

  # ** cumulative **
  def _cumulative(self: Tensor, axis: int, op: str) -> Tensor:
    a = self._resolve_dim(axis)
    n = self.shape[a]
    if n == 0: return self
    # rows of a lower-triangular window: out[i] = reduce over j <= i
    x = self.transpose(a, -1).unsqueeze(-2).expand(*self.transpose(a, -1).shape[:-1], n, n)
    tri = self.ones(n, n, dtype="bool").tril()
    if op == "sum": out = tri.where(x, 0).sum(-1, dtype=self.dtype if self.dtype._is_float else None)
    elif op == "prod": out = tri.where(x, 1).prod(-1)
    else: out = tri.where(x, self.dtype.min if not self.dtype._is_float else -math.inf).max(-1)
    return out.transpose(a, -1)
  def cumsum(self: Tensor, axis: int = 0) -> Tensor: return self._cumulative(axis, "sum")
  def cummin(self: Tensor, axis: int = 0) -> Tensor: return -((-self).cummax(axis))
  def logcumsumexp(self: Tensor, axis: int = 0) -> Tensor:
    m = self.max(axis, keepdim=True).detach()
    m = m.isinf().where(0, m)
    return (self - m).exp().cumsum(axis).log() + m
  def cumprod(self: Tensor, axis: int = 0) -> Tensor: return self._cumulative(axis, "prod")
  def cummax(self: Tensor, axis: int = 0) -> Tensor: return self._cumulative(axis, "max")

  # ** losses **
  def sparse_categorical_crossentropy(self: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    log_probs = self.log_softmax()
    mask = Y != ignore_index
    counter = self.arange(self.shape[-1]).reshape((1,) * (Y.ndim) + (self.shape[-1],))
    y = ((counter == Y.unsqueeze(-1)) & mask.unsqueeze(-1)).cast(log_probs.dtype)
    smoothing = label_smoothing * (log_probs.mean(-1) * mask)
    loss = -(y * log_probs).sum(-1) * (1 - label_smoothing) - smoothing
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    return loss.sum() / mask.sum()

  def cross_entropy(self: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    if Y.dtype._is_int: return self.sparse_categorical_crossentropy(Y, -100, label_smoothing, reduction)
    Y = (1 - label_smoothing) * Y + label_smoothing / self.shape[1]
    ret = -self.log_softmax(axis=1).mul(Y).sum(axis=1)
    return ret if reduction == "none" else ret.sum() if reduction == "sum" else ret.mean()

  def binary_crossentropy(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    ret = -(Y * self.log() + (1 - Y) * (1 - self).log())
    return ret if reduction == "none" else ret.sum() if reduction == "sum" else ret.mean()

  def binary_crossentropy_logits(self: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
    ret = (1 - Y) * self - self.logsigmoid()
    return ret if reduction == "none" else ret.sum() if reduction == "sum" else ret.mean()

  def scaled_dot_product_attention(self: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                   dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    q = self
    s = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    w = q.matmul(key.transpose(-2, -1)) * s
    if is_causal:
      L, S = q.shape[-2], key.shape[-2]
      w = self.ones(L, S, dtype="bool").tril().where(w, -math.inf)
    if attn_mask is not None: w = attn_mask.where(w, -math.inf) if attn_mask.dtype is dtypes.bool else w + attn_mask
    w = w.softmax(-1)
    if dropout_p and self.training: w = w.dropout(dropout_p)
    return w.matmul(value)

  # ** sorting **
  def sort(self: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """Values and int32 indices of a stable sort along dim, as torch.sort(stable=True). Each element's place is the
    number of elements that come before it (smaller, or equal and earlier), so the cost is n^2 compares per row."""
    d = self._resolve_dim(dim)
    n = self.shape[d]
    x = self.transpose(d, -1)
    a, b = x.unsqueeze(-1), x.unsqueeze(-2)  # a[..., i, j] = x_i, b[..., i, j] = x_j
    ar = self.arange(n, device=self.device)
    before = ((b > a) if descending else (b < a)) | ((b == a) & (ar.reshape(1, n) < ar.reshape(n, 1)))
    rank = before.cast(dtypes.int32).sum(-1)
    hit = rank.unsqueeze(-2) == ar.reshape(n, 1)  # hit[..., r, i]: element i goes to place r
    vals = hit.where(x.unsqueeze(-2), 0).sum(-1, dtype=x.dtype) if x.dtype is not dtypes.bool else (hit & x.unsqueeze(-2)).any(-1)
    idx = hit.where(ar, 0).sum(-1, dtype=dtypes.int32)
    return vals.transpose(d, -1), idx.transpose(d, -1)

  def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) values along dim and their int32 indices, in order (sorted_ is there for tinygrad's
    signature: the result is always sorted); ties keep the earlier index."""
    d = self._resolve_dim(dim)
    if not 0 <= k <= self.shape[d]: raise ValueError(f"topk: k={k} is out of range for dimension {d} of shape {self.shape}")
    vals, idx = self.sort(d, descending=largest)
    keep = tuple((0, k) if i == d else None for i in range(self.ndim))
    return vals.shrink(keep), idx.shrink(keep)
