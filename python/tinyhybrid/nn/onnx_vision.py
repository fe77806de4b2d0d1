"""ONNX vision ops as Tensor ops: sampling grids (GridSample, AffineGrid), Col2Im and NonMaxSuppression. Registered with
onnx_ops.op (see onnx_ops.py for the conventions)."""
from __future__ import annotations

from typing import Any

import numpy as np

from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.nn.onnx_ops import ints, op, scalar
from tinyhybrid.tensor import Tensor


def _reflect(v: Tensor, lo: float, hi: float) -> Tensor:
  """Coordinates outside [lo, hi] folded back in by reflecting at the borders, as often as it takes."""
  rng = hi - lo
  below, above = v < lo, v > hi
  dx = below.where(lo - v, v - hi)
  n = (dx / rng).floor() if rng > 0 else dx * 0
  r = dx - n * rng
  even = (n % 2) == 0
  return (below | above).where((below == even).where(lo + r, hi - r), v)


def _cubic_t(t: Tensor, a: float = -0.75) -> Tensor:
  t = t.abs()
  return (t <= 1).where(((a + 2) * t - (a + 3)) * t * t + 1, (t < 2).where(((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


@op("GridSample", since=16)
def GridSample(x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros") -> Tensor:
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
  N, C, *D = x.shape
  nd, O = len(D), grid.shape[1:-1]
  dt = x.dtype if x.dtype.itemsize >= 4 else dtypes.float32
  g = grid.cast(dt)
  weights = []
  for i, d in enumerate(D):
    # the grid's last axis lists coordinates from the innermost dimension out
    v = g[..., nd - 1 - i]
    v = (v + 1) / 2 * (d - 1) if align_corners else ((v + 1) * d - 1) / 2
    lo, hi = (0.0, d - 1.0) if align_corners else (-0.5, d - 0.5)
    if mode == "nearest": v = v.round()
    if padding_mode == "border": v = ((v < lo) | (v > hi)).where(v.clip(0, d - 1), v)
    elif padding_mode == "reflection": v = _reflect(v, lo, hi)
    taps: list[tuple[Tensor, Tensor | None]]
    if mode == "nearest": taps = [(v, None)]
    else:
      x0 = v.floor()
      f = v - x0
      taps = [(x0, 1 - f), (x0 + 1, f)] if mode == "linear" else [(x0 + j, _cubic_t(f - j)) for j in (-1, 0, 1, 2)]
    # W[n, o..., p]: the weight of input index p along this dimension for output o
    ar = Tensor.arange(d).reshape(*[1] * (1 + len(O)), d)
    W = None
    for t, w in taps:
      if padding_mode == "border": t = t.clip(0, d - 1)
      elif padding_mode == "reflection": t = _reflect(t, lo, hi)
      hit = t.cast(dtypes.int32).unsqueeze(-1) == ar
      if padding_mode == "zeros": hit = hit & ((t >= 0) & (t <= d - 1)).unsqueeze(-1)
      term = hit.cast(dt) if w is None else hit.where(w.unsqueeze(-1), 0.0)
      W = term if W is None else W + term
    weights.append(W)
  # contract the input's spatial dimensions with the weights, innermost first
  y = x.cast(dt).reshape(N, C, *[1] * len(O), *D)
  for i in range(nd - 1, -1, -1):
    y = (y * weights[i].reshape(N, 1, *O, *[1] * i, D[i])).sum(-1)  # type: ignore[union-attr]  # every dimension has taps
  return y.cast(x.dtype)


@op("AffineGrid", since=20, consts=(1,))
def AffineGrid(theta: Tensor, size: Any, align_corners: int = 0) -> Tensor:
  N, _, *D = ints(size)
  axes = [np.linspace(-1, 1, d) if align_corners else (np.arange(d) * 2 + 1) / d - 1 for d in D]
  mesh = np.meshgrid(*axes, indexing="ij")
  # homogeneous base coordinates (x, y[, z], 1), x along the innermost dimension
  base = np.stack([*mesh[::-1], np.ones(D)], -1).reshape(-1, len(D) + 1).astype(np.float32)
  return (Tensor(base).cast(theta.dtype) @ theta.transpose(1, 2)).reshape(N, *D, len(D))


def _dilate(t: Tensor, axis: int, s: int) -> Tensor:
  """s - 1 zeros between consecutive elements along axis."""
  if s == 1: return t
  n = t.shape[axis]
  t = t.unsqueeze(axis + 1).pad(tuple((0, s - 1) if i == axis + 1 else (0, 0) for i in range(t.ndim + 1)))
  t = t.reshape(*t.shape[:axis], n * s, *t.shape[axis + 2:])
  return t.shrink(tuple((0, (n - 1) * s + 1) if i == axis else None for i in range(t.ndim)))


@op("Col2Im", since=18, consts=(1, 2))
def Col2Im(x: Tensor, image_shape: Any, block_shape: Any, dilations: list | None = None, pads: list | None = None,
           strides: list | None = None) -> Tensor:
  img, k = ints(image_shape), ints(block_shape)
  nd = len(k)
  d_, s_, p = dilations or [1] * nd, strides or [1] * nd, pads or [0] * (2 * nd)
  N, C = x.shape[0], x.shape[1] // prod(k)
  padded = [i + p[j] + p[j + nd] for j, i in enumerate(img)]
  nb = [(P - (d * (kk - 1) + 1)) // s + 1 for P, kk, d, s in zip(padded, k, d_, s_)]
  xr = x.reshape(N, C, prod(k), *nb)
  out = None
  # each kernel offset adds its column, spread by the stride and shifted by offset * dilation, into the padded image
  for j, off in enumerate(np.ndindex(*k)):
    blk = xr[:, :, j]
    for a in range(nd): blk = _dilate(blk, 2 + a, s_[a])
    blk = blk.pad(((0, 0), (0, 0)) + tuple((o * d, P - o * d - blk.shape[2 + a]) for a, (o, d, P) in enumerate(zip(off, d_, padded))))
    out = blk if out is None else out + blk
  return out.shrink((None, None, *[(p[j], p[j] + img[j]) for j in range(nd)]))  # type: ignore[union-attr]


def _corners(b: Tensor, center_point_box: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(x1, y1, x2, y2) with x1 <= x2 and y1 <= y2 from [y1, x1, y2, x2] (either corner first) or [xc, yc, w, h]."""
  if center_point_box: return b[..., 0] - b[..., 2] / 2, b[..., 1] - b[..., 3] / 2, b[..., 0] + b[..., 2] / 2, b[..., 1] + b[..., 3] / 2
  return b[..., 1].minimum(b[..., 3]), b[..., 0].minimum(b[..., 2]), b[..., 1].maximum(b[..., 3]), b[..., 0].maximum(b[..., 2])


@op("NonMaxSuppression", consts=(2, 3, 4))
def NonMaxSuppression(boxes: Tensor, scores: Tensor, max_output_boxes_per_class: Any = None, iou_threshold: Any = None,
                      score_threshold: Any = None, center_point_box: int = 0) -> Tensor:
  N = scores.shape[2]
  k = min(int(scalar(max_output_boxes_per_class)) if max_output_boxes_per_class is not None and np.size(max_output_boxes_per_class) else 0, N)
  if k <= 0: return Tensor.zeros(0, 3, dtype=dtypes.int64)
  thr = float(scalar(iou_threshold)) if iou_threshold is not None and np.size(iou_threshold) else 0.0
  x1, y1, x2, y2 = _corners(boxes.cast(dtypes.float32), center_point_box)
  # pairwise IoU (B, N, N); boxes that do not overlap, or have no area, never suppress each other
  iw = (x2.unsqueeze(2).minimum(x2.unsqueeze(1)) - x1.unsqueeze(2).maximum(x1.unsqueeze(1))).relu()
  ih = (y2.unsqueeze(2).minimum(y2.unsqueeze(1)) - y1.unsqueeze(2).maximum(y1.unsqueeze(1))).relu()
  inter, area = iw * ih, (x2 - x1) * (y2 - y1)
  union = area.unsqueeze(2) + area.unsqueeze(1) - inter
  over = ((inter > 0) & (union > 0) & (area.unsqueeze(2) > 0) & (area.unsqueeze(1) > 0)).where(inter / union, 0.0) > thr
  live = scores > float(scalar(score_threshold)) if score_threshold is not None and np.size(score_threshold) else scores.ones_like(dtype=dtypes.bool)
  ar, picks, valid = Tensor.arange(N), [], []
  # greedy, as the spec: the best live box is selected and removes the live boxes it overlaps too much
  for _ in range(k):
    pick = live.where(scores, -float("inf")).argmax(-1)  # (B, C), the lowest index on ties
    valid.append(live.any(-1))
    hit = pick.unsqueeze(-1) == ar
    live = live & ~hit & ~(hit.cast(dtypes.float32) @ over.cast(dtypes.float32)).cast(dtypes.bool)
    picks.append(pick)
  # the number selected depends on the data: read the picks back and list them by batch, class, selection order
  p, v = picks[0].stack(*picks[1:], dim=-1).numpy(), valid[0].stack(*valid[1:], dim=-1).numpy()
  b, c, j = np.nonzero(v)
  return Tensor(np.stack([b, c, p[b, c, j]], 1).astype(np.int64).reshape(-1, 3))
