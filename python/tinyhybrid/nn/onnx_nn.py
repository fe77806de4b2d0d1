"""ONNX neural-network ops as Tensor ops: convolution, pooling, matmul, quantization, normalization, resize, attention
(softmax, flex and linear), recurrent layers, losses and the training ops. Registered with onnx_ops.op (see onnx_ops.py
for the conventions)."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.nn.onnx import onnx_dtype
from tinyhybrid.nn.onnx_ops import Ctx, cast, ints, op, run_graph, scalar
from tinyhybrid.tensor import Tensor

Pads = list[tuple[int, int]]


# ***** convolution and pooling *****

def _same_pads(i_: tuple, k_: list, s_: list, d_: list, upper: bool) -> Pads:
  """auto_pad SAME_UPPER / SAME_LOWER: the output is ceil(input / stride); an odd extra pad goes after (UPPER) or before."""
  out = []
  for i, k, s, d in zip(i_, k_, s_, d_):
    total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
    out.append((total // 2, total - total // 2) if upper else (total - total // 2, total // 2))
  return out


def _pads(x: Tensor, k_: list, s_: list, d_: list, pads: list | None, auto_pad: str) -> Pads:
  nd = len(k_)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"): return _same_pads(x.shape[2:], k_, s_, d_, auto_pad == "SAME_UPPER")
  if auto_pad == "VALID" or not pads: return [(0, 0)] * nd
  return [(pads[i], pads[i + nd]) for i in range(nd)]


def _torch(p: Pads) -> list[int]:
  """Per-dimension (before, after) pads in torch's flat order (last dimension first)."""
  return [v for b, a in reversed(p) for v in (b, a)]


@op("Conv")
def Conv(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: list | None = None, group: int = 1,
         kernel_shape: list | None = None, pads: list | None = None, strides: list | None = None) -> Tensor:
  nd = w.ndim - 2
  s_, d_ = strides or [1] * nd, dilations or [1] * nd
  return x.conv2d(w, b, group, s_, d_, _torch(_pads(x, list(w.shape[2:]), s_, d_, pads, auto_pad)))


@op("ConvTranspose")
def ConvTranspose(x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: list | None = None, group: int = 1,
                  kernel_shape: list | None = None, output_padding: list | None = None, output_shape: list | None = None,
                  pads: list | None = None, strides: list | None = None) -> Tensor:
  nd = w.ndim - 2
  k_, s_, d_, op_ = w.shape[2:], strides or [1] * nd, dilations or [1] * nd, output_padding or [0] * nd
  if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    # the pads that give the requested output shape (input * stride for SAME); an odd total puts the extra pad
    # before, except for SAME_UPPER
    want = output_shape[-nd:] if output_shape is not None else [i * s for i, s in zip(x.shape[2:], s_)]
    tot = [s * (i - 1) + o + (k - 1) * d + 1 - t for i, s, o, k, d, t in zip(x.shape[2:], s_, op_, k_, d_, want)]
    p = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in tot]
  else: p = _pads(x, list(k_), s_, d_, pads, "NOTSET")
  return x.conv_transpose2d(w, b, group, s_, d_, _torch(p), op_)


def _pool_args(x: Tensor, kernel_shape: list, strides, dilations, pads, auto_pad) -> tuple[list, list, list, Pads]:
  nd = len(kernel_shape)
  s_, d_ = strides or [1] * nd, dilations or [1] * nd
  return list(kernel_shape), s_, d_, _pads(x, list(kernel_shape), s_, d_, pads, auto_pad)


@op("MaxPool")
def MaxPool(x: Tensor, *, kernel_shape: list, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: list | None = None,
            pads: list | None = None, storage_order: int = 0, strides: list | None = None, ctx: Ctx) -> Any:
  k_, s_, d_, p = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  if len(ctx.node.outputs) < 2 or not ctx.node.outputs[1]:
    return x.max_pool2d(k_, s_, d_, _torch(p), bool(ceil_mode))
  y, idx = x.max_pool2d(k_, s_, d_, _torch(p), bool(ceil_mode), return_indices=True)
  sp = x.shape[2:]
  if storage_order:  # column-major: the first spatial index varies fastest (2-D only, as in the spec)
    idx = (idx % sp[1]) * sp[0] + idx // sp[1]
  base = Tensor.arange(x.shape[0] * x.shape[1]).reshape(x.shape[0], x.shape[1], *[1] * len(sp)).cast(dtypes.int64) * prod(sp)
  return y, idx.cast(dtypes.int64) + base


@op("AveragePool")
def AveragePool(x: Tensor, kernel_shape: list, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                dilations: list | None = None, pads: list | None = None, strides: list | None = None) -> Tensor:
  k_, s_, d_, p = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  return x.avg_pool2d(k_, s_, d_, _torch(p), bool(ceil_mode), bool(count_include_pad))


@op("LpPool")
def LpPool(x: Tensor, kernel_shape: list, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: list | None = None, p: int = 2,
           pads: list | None = None, strides: list | None = None) -> Tensor:
  k_, s_, d_, pp = _pool_args(x, kernel_shape, strides, dilations, pads, auto_pad)
  if ceil_mode: pp = list(x._ceil_pads(k_, s_, d_, tuple(pp)))
  nd = len(k_)
  win = (x.abs() ** p).pad(((0, 0), (0, 0), *pp))._pool(k_, s_, d_)
  return win.sum(tuple(range(-nd, 0))) ** (1 / p)


@op("MaxUnpool", consts=(2,))
def MaxUnpool(x: Tensor, indices: Tensor, output_shape: Any = None, kernel_shape: list | None = None, pads: list | None = None,
              strides: list | None = None) -> Tensor:
  nd = len(kernel_shape)  # type: ignore[arg-type]
  s_ = strides or [1] * nd
  p = [(pads[i], pads[i + nd]) for i in range(nd)] if pads else [(0, 0)] * nd
  size = [(i - 1) * s + k - b - a for i, s, k, (b, a) in zip(x.shape[2:], s_, kernel_shape, p)]  # type: ignore[arg-type]
  # ONNX indices run over the whole tensor; max_unpool2d wants them within each (n, c) plane
  y = x.max_unpool2d(indices % prod(size), kernel_shape, s_, output_size=size)  # type: ignore[arg-type]
  # a larger output_shape only adds zeros at the end: the indices refer to the default shape
  return y.pad(((0, 0), (0, 0), *[(0, o - n) for o, n in zip(ints(output_shape)[2:], size)])) if output_shape is not None else y


op("GlobalAveragePool")(lambda x: x.mean(tuple(range(2, x.ndim)), keepdim=True))
op("GlobalMaxPool")(lambda x: x.max(tuple(range(2, x.ndim)), keepdim=True))
op("GlobalLpPool")(lambda x, p=2: (x.abs() ** p).sum(tuple(range(2, x.ndim)), keepdim=True) ** (1 / p))


# ***** matmul *****

@op("Gemm")
def Gemm(a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0,
         broadcast: int = 0) -> Tensor:
  y = (a.T if transA else a) @ (b.T if transB else b)
  if alpha != 1.0: y = y * alpha
  if c is None: return y
  return y + (c * beta if beta != 1.0 else c)


op("MatMul")(lambda a, b: a @ b)
op("Einsum")(lambda *xs, equation: Tensor.einsum(equation, *xs).cast(xs[0].dtype))


def _zp(x: Tensor, zp: Tensor | None, axis: int) -> Tensor:
  """x - zero_point in int32; a 1-D zero point runs along axis."""
  x = x.cast(dtypes.int32)
  if zp is None: return x
  zp = zp.cast(dtypes.int32)
  return x - (zp.reshape([-1 if i == axis % x.ndim else 1 for i in range(x.ndim)]) if zp.numel() > 1 else zp.reshape(()))


op("MatMulInteger")(lambda a, b, a_zero_point=None, b_zero_point=None: _zp(a, a_zero_point, -2) @ _zp(b, b_zero_point, -1))


@op("ConvInteger")
def ConvInteger(x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None, **kw: Any) -> Tensor:
  return Conv(_zp(x, x_zero_point, 1), _zp(w, w_zero_point, 0), **kw)


@op("Det")
def Det(x: Tensor) -> Tensor:
  """Gaussian elimination with partial pivoting, one column per step; a zero pivot makes the determinant 0."""
  n = x.shape[-1]
  a, pivots = x.cast(dtypes.float32) if x.dtype.itemsize < 4 else x, []
  rows = Tensor.arange(n).reshape(n, 1)
  for k in range(n):
    # the pivot: the largest magnitude at or below row k
    p = (Tensor.arange(n) < k).where(-1.0, a[..., :, k].abs()).argmax(-1).reshape(*a.shape[:-2], 1, 1)
    # swap rows k and p: a row permutation as a gather
    perm = (rows == k).where(p, (rows == p).where(k, rows)).expand(a.shape)
    a = a.gather(-2, perm)
    piv = a[..., k, k]
    pivots.append((p.reshape(piv.shape) != k).where(-piv, piv))  # a swap flips the sign
    factor = (rows.reshape(n) > k).where(a[..., :, k] / (piv == 0).where(1.0, piv).unsqueeze(-1), 0.0).unsqueeze(-1)
    a = a - factor * a[..., k:k + 1, :]
  return functools.reduce(Tensor.mul, pivots).cast(x.dtype)


# ***** quantization *****

def _qparam(p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
  """A scale or zero point broadcast against x: a scalar, one value per index of axis, or one per block along axis."""
  if p.numel() == 1: return p.reshape(())
  a = axis + x.ndim if axis < 0 else axis
  if block_size: return p.repeat_interleave(block_size, a).shrink(tuple((0, s) for s in x.shape))
  return p.reshape([-1 if i == a else 1 for i in range(x.ndim)])


def _saturate(x: Tensor, dt: DType) -> Tensor: return x.clip(dt.min, dt.max).cast(dt)


@op("QuantizeLinear")
def QuantizeLinear(x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0, output_dtype: int = 0,
                   saturate: int = 1, precision: int = 0) -> Tensor:
  dt = y_zero_point.dtype if y_zero_point is not None else onnx_dtype(output_dtype) if output_dtype else dtypes.uint8
  y = _fdiv(x, _qparam(y_scale, x, axis, block_size))
  if dt in dtypes.fp8s: return cast(y, dt, saturate)  # a float8 takes the value itself, rounded as its cast rounds
  y = y.round()
  if y_zero_point is not None: y = y + _qparam(y_zero_point, x, axis, block_size).cast(dtypes.float32)
  return _saturate(y, dt)


@op("DequantizeLinear")
def DequantizeLinear(x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0,
                     output_dtype: int = 0) -> Tensor:
  y = x.cast(dtypes.float32)
  if x_zero_point is not None: y = y - _qparam(x_zero_point, x, axis, block_size).cast(dtypes.float32)
  y = y * _qparam(x_scale, x, axis, block_size).cast(dtypes.float32)
  return y.cast(onnx_dtype(output_dtype) if output_dtype else x_scale.dtype)


@op("DynamicQuantizeLinear")
def DynamicQuantizeLinear(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  mx, mn = x.max().maximum(0), x.min().minimum(0)
  scale = _fdiv((mx == mn).where(1.0, mx - mn), Tensor(255.0))
  zp = _fdiv(-mn, scale).clip(0, 255).round()
  return _saturate(_fdiv(x, scale).round() + zp, dtypes.uint8), scale.cast(x.dtype), zp.cast(dtypes.uint8)


def _fdiv(a: Tensor, b: Tensor) -> Tensor:
  """a / b rounded once to float32, as numpy divides (a multiply by the reciprocal can land one ulp off, and quantization
  rounds that to the other integer at a .5 boundary)."""
  return (a.cast(dtypes.float64) / b.cast(dtypes.float64)).cast(dtypes.float32)


def _requantize(acc: Tensor, scale: Tensor, y_zero_point: Tensor | None, dt: DType) -> Tensor:
  y = acc.cast(dtypes.float32) * scale
  if y_zero_point is not None: y = y + y_zero_point.cast(dtypes.float32)
  return _saturate(y.round(), dt)


@op("QLinearMatMul")
def QLinearMatMul(a: Tensor, a_scale: Tensor, a_zero_point: Tensor, b: Tensor, b_scale: Tensor, b_zero_point: Tensor, y_scale: Tensor,
                  y_zero_point: Tensor) -> Tensor:
  acc = _zp(a, a_zero_point, -2) @ _zp(b, b_zero_point, -1)
  scale = a_scale.cast(dtypes.float32) * b_scale.cast(dtypes.float32) / y_scale.cast(dtypes.float32)
  return _requantize(acc, scale, y_zero_point, y_zero_point.dtype)


@op("QLinearConv")
def QLinearConv(x: Tensor, x_scale: Tensor, x_zero_point: Tensor, w: Tensor, w_scale: Tensor, w_zero_point: Tensor, y_scale: Tensor,
                y_zero_point: Tensor | None = None, B: Tensor | None = None, **kw: Any) -> Tensor:
  acc = Conv(_zp(x, x_zero_point, 1), _zp(w, w_zero_point, 0), B, **kw)
  ws = w_scale.reshape(1, -1, *[1] * (x.ndim - 2)) if w_scale.numel() > 1 else w_scale.reshape(())
  return _requantize(acc, x_scale.cast(dtypes.float32) * ws.cast(dtypes.float32) / y_scale.cast(dtypes.float32), y_zero_point,
                     y_zero_point.dtype if y_zero_point is not None else x.dtype)


# ***** normalization *****

def _spatial(x: Tensor, v: Tensor) -> Tensor: return v.reshape(-1, *[1] * (x.ndim - 2))


@op("BatchNormalization")
def BatchNormalization(x: Tensor, scale: Tensor, B: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5, momentum: float = 0.9,
                       training_mode: int = 0, spatial: int = 1, is_test: int = 1) -> Any:
  if not training_mode: return x.batchnorm(scale, B, mean, (var + epsilon).rsqrt())
  axes = (0, *range(2, x.ndim))
  bm, bv = x.mean(axes), x.var(axes, correction=0)
  y = x.batchnorm(scale, B, bm, (bv + epsilon).rsqrt())
  return y, mean * momentum + bm * (1 - momentum), var * momentum + bv * (1 - momentum)


@op("InstanceNormalization")
def InstanceNormalization(x: Tensor, scale: Tensor, B: Tensor, epsilon: float = 1e-5) -> Tensor:
  return x.layernorm(tuple(range(2, x.ndim)), epsilon) * _spatial(x, scale) + _spatial(x, B)


def _stash(x: Tensor, stash_type: int) -> Tensor: return x.cast(onnx_dtype(stash_type)) if x.dtype is not dtypes.float64 else x


@op("LayerNormalization")
def LayerNormalization(x: Tensor, scale: Tensor, B: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5,
                       stash_type: int = 1) -> tuple[Tensor, Tensor, Tensor]:
  axes = tuple(range(axis + x.ndim if axis < 0 else axis, x.ndim))
  xs = _stash(x, stash_type)
  mean = xs.mean(axes, keepdim=True)
  d = xs - mean
  inv = ((d * d).mean(axes, keepdim=True) + epsilon).rsqrt()
  y = (d * inv).cast(x.dtype) * scale
  return (y if B is None else y + B), mean.cast(x.dtype), inv.cast(x.dtype)


@op("GroupNormalization")
def GroupNormalization(x: Tensor, scale: Tensor, bias: Tensor, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  n, c = x.shape[:2]
  y = _stash(x, stash_type).reshape(n, num_groups, -1).layernorm(-1, epsilon).reshape(x.shape).cast(x.dtype)
  # opset 18 gives one scale and bias per group, opset 21 one per channel
  if scale.shape[0] != c: scale, bias = scale.repeat_interleave(c // num_groups), bias.repeat_interleave(c // num_groups)
  return y * _spatial(x, scale) + _spatial(x, bias)


@op("RMSNormalization")
def RMSNormalization(x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  xs = _stash(x, stash_type)
  axes = tuple(range(axis + x.ndim if axis < 0 else axis, x.ndim))
  return (xs * ((xs * xs).mean(axes, keepdim=True) + epsilon).rsqrt()).cast(x.dtype) * scale


@op("MeanVarianceNormalization")
def MeanVarianceNormalization(x: Tensor, axes: list | None = None) -> Tensor:
  ax = tuple(axes if axes is not None else (0, 2, 3))
  mean = x.mean(ax, keepdim=True)
  return (x - mean) / (((x * x).mean(ax, keepdim=True) - mean * mean).sqrt() + 1e-9)


@op("LpNormalization")
def LpNormalization(x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
  return (norm == 0).where(0, x / norm).cast(x.dtype)


@op("LRN")
def LRN(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
  c, before = x.shape[1], (size - 1) // 2
  sq = (x * x).pad(((0, 0), (before, size - 1 - before)) + ((0, 0),) * (x.ndim - 2))
  win = functools.reduce(Tensor.add, [sq.shrink((None, (j, j + c), *[None] * (x.ndim - 2))) for j in range(size)])
  return x / (bias + (alpha / size) * win) ** beta


# ***** dropout *****

@op("Dropout", consts=(1, 2))
def Dropout(x: Tensor, ratio: Any = None, training_mode: Any = None, seed: int | None = None, is_test: int = 0,
            *, ctx: Ctx) -> Any:
  r = float(scalar(ratio)) if isinstance(ratio, np.ndarray) else (ratio if ratio is not None else 0.5)
  train = training_mode is not None and bool(scalar(training_mode))
  if not train or r == 0: y, mask = x, x.ones_like(dtype=dtypes.bool)
  else:
    mask = Tensor.rand(*x.shape) >= r
    y = mask.where(x / (1 - r), 0).cast(x.dtype)
  return (y, mask) if len(ctx.node.outputs) > 1 else y


# ***** resize *****

def _coords(o: np.ndarray, n: int, m: int, scale: float, mode: str, roi: tuple[float, float]) -> np.ndarray:
  """The input coordinate each output index o maps to (the coordinate_transformation_mode). The spec measures the
  output in the unrounded scale * n, which differs from the m outputs when scales are given."""
  mf = scale * n
  if mode == "half_pixel": return (o + 0.5) / scale - 0.5
  if mode == "pytorch_half_pixel": return (o + 0.5) / scale - 0.5 if mf != 1 else np.full_like(o, -0.5)
  if mode == "half_pixel_symmetric": return (n / 2) * (1 - m / mf) + (o + 0.5) / scale - 0.5
  if mode == "align_corners": return o * (n - 1) / (mf - 1) if mf != 1 else np.zeros_like(o)
  if mode == "asymmetric": return o / scale
  if mode == "tf_crop_and_resize":
    lo, hi = roi
    return lo * (n - 1) + (o * (hi - lo) * (n - 1) / (mf - 1) if mf != 1 else np.full_like(o, (hi - lo) * (n - 1) / 2))
  raise NotImplementedError(f"ONNX op 'Resize': coordinate_transformation_mode {mode!r} is not supported")


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
  t = np.abs(t)
  return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1, np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def _resize_weights(n: int, m: int, scale: float, mode: str, ctm: str, nearest_mode: str, cubic_a: float, exclude_outside: int,
                    antialias: int, roi: tuple[float, float]) -> tuple[np.ndarray, np.ndarray | None]:
  """The (m, n) matrix that resizes one axis, and for tf_crop_and_resize the outputs that fall outside the input."""
  o = np.arange(m, dtype=np.float64)
  x = _coords(o, n, m, scale, ctm, roi)
  W = np.zeros((m, n), dtype=np.float64)
  if mode == "nearest":
    rnd = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5), "floor": np.floor,
           "ceil": np.ceil}[nearest_mode]
    W[np.arange(m), np.clip(rnd(x), 0, n - 1).astype(np.int64)] = 1  # type: ignore[operator]
  else:
    # every input index within the kernel's support; antialias widens the kernel by 1/scale when downsampling
    ks = min(scale, 1.0) if antialias else 1.0
    support = (1 if mode == "linear" else 2) / ks
    j = np.floor(x - support)[:, None] + np.arange(1, 2 * math.ceil(support) + 2)[None, :]
    t = (j - x[:, None]) * ks
    w = np.maximum(0, 1 - np.abs(t)) if mode == "linear" else _cubic(t, cubic_a)
    w = np.where(np.abs(t) < (1 if mode == "linear" else 2), w, 0)
    if exclude_outside: w = np.where((j >= 0) & (j < n), w, 0)
    if antialias or exclude_outside: w = w / w.sum(1, keepdims=True)
    np.add.at(W, (np.repeat(np.arange(m), j.shape[1]), np.clip(j, 0, n - 1).astype(np.int64).reshape(-1)), w.reshape(-1))
  return W, ((x < 0) | (x > n - 1)) if ctm == "tf_crop_and_resize" else None


@op("Resize", since=11, consts=(1, 2, 3))
def Resize(x: Tensor, roi: Any = None, scales: Any = None, sizes: Any = None, antialias: int = 0, axes: list | None = None,
           coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75, exclude_outside: int = 0,
           extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Tensor:
  ax = [a + x.ndim if a < 0 else a for a in (axes if axes is not None else range(x.ndim))]
  rois = np.asarray(roi, np.float64).reshape(-1) if roi is not None and np.asarray(roi).size else None
  if sizes is not None and np.asarray(sizes).size:
    out = ints(sizes)
    sc = [o / x.shape[a] for o, a in zip(out, ax)]
    if keep_aspect_ratio_policy != "stretch":
      s = min(sc) if keep_aspect_ratio_policy == "not_larger" else max(sc)
      sc, out = [s] * len(ax), [int(s * x.shape[a] + 0.5) for a in ax]
  else:
    sc = [float(v) for v in np.asarray(scales).reshape(-1)]
    out = [int(math.floor(x.shape[a] * s)) for a, s in zip(ax, sc)]
  y = x.cast(dtypes.float32) if not x.dtype._is_float else x
  outside = []
  for i, (a, m, s) in enumerate(zip(ax, out, sc)):
    n = x.shape[a]
    r = (float(rois[i]), float(rois[i + len(ax)])) if rois is not None else (0.0, 1.0)
    if m == n and s == 1 and r == (0.0, 1.0): continue
    W, ext = _resize_weights(n, m, s, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias, r)
    yt = y.transpose(a, -1)
    y = (yt.unsqueeze(-2) * Tensor(W.astype(np.float32)).cast(y.dtype)).sum(-1).transpose(a, -1)
    if ext is not None and ext.any(): outside.append(Tensor(ext).reshape([m if k == a else 1 for k in range(x.ndim)]))
  if outside: y = functools.reduce(Tensor.bitwise_or, outside).where(extrapolation_value, y)
  return y.cast(x.dtype) if x.dtype._is_float else _saturate(y.round(), x.dtype)


@op("Resize", since=10, consts=(1,))
def Resize10(x: Tensor, scales: Any, mode: str = "nearest") -> Tensor:
  return Resize(x, scales=scales, mode=mode, coordinate_transformation_mode="asymmetric", nearest_mode="floor")


op("Upsample", consts=(1,))(lambda x, scales=None, mode="nearest": Resize10(x, scales, mode))


# ***** attention *****

@op("Attention", since=23)
def Attention(Q: Tensor, K: Tensor, V: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None, past_value: Tensor | None = None,
              nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0, kv_num_heads: int | None = None, q_num_heads: int | None = None,
              qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0, softmax_precision: int | None = None,
              left_window_size: int = -1, right_window_size: int = -1) -> tuple[Tensor, ...]:
  three_d, out_dt = Q.ndim == 3, Q.dtype
  # half inputs run in float32 and round once at the end: each half-precision step would round again
  if out_dt.itemsize < 4: Q, K, V = Q.float(), K.float(), V.float()
  def heads(t: Tensor, h: int | None) -> Tensor: return t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3)
  if three_d: Q, K, V = heads(Q, q_num_heads), heads(K, kv_num_heads), heads(V, kv_num_heads)
  if past_key is not None: K, V = past_key.cast(K.dtype).cat(K, dim=2), past_value.cast(V.dtype).cat(V, dim=2)  # type: ignore[union-attr]
  present_k, present_v = K.cast(out_dt), V.cast(out_dt)
  L, S, dt = Q.shape[2], K.shape[2], Q.dtype
  if attn_mask is not None and attn_mask.shape[-1] < S:  # a short mask leaves the extra keys out
    attn_mask = attn_mask.pad([(0, 0)] * (attn_mask.ndim - 1) + [(0, S - attn_mask.shape[-1])],
                              value=False if attn_mask.dtype is dtypes.bool else -math.inf)
  bias = Tensor.zeros(L, S, dtype=dt)
  if attn_mask is not None: bias = bias + (attn_mask.where(0.0, -math.inf).cast(dt) if attn_mask.dtype is dtypes.bool else attn_mask)
  # the causal and window masks are aligned to the last query: query i sits at position i + offset among the keys
  if past_key is not None: offset: Any = past_key.shape[2]
  elif nonpad_kv_seqlen is not None: offset = (nonpad_kv_seqlen - L).reshape(-1, 1, 1, 1)
  else: offset = 0
  pos = Tensor.arange(L).reshape(L, 1) + offset
  j = Tensor.arange(S).reshape(1, S)
  allowed = (j <= pos) if is_causal else None
  if left_window_size >= 0: allowed = (pos - j <= left_window_size) if allowed is None else allowed & (pos - j <= left_window_size)
  if right_window_size >= 0: allowed = (j - pos <= right_window_size) if allowed is None else allowed & (j - pos <= right_window_size)
  if allowed is not None: bias = bias + allowed.where(0.0, -math.inf).cast(dt)
  if nonpad_kv_seqlen is not None: bias = bias + (j < nonpad_kv_seqlen.reshape(-1, 1, 1, 1)).where(0.0, -math.inf).cast(dt)
  if Q.shape[1] != K.shape[1]: K, V = K.repeat_interleave(Q.shape[1] // K.shape[1], 1), V.repeat_interleave(Q.shape[1] // V.shape[1], 1)
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(Q.shape[3]))
  qk = (Q * s) @ (K * s).transpose(-1, -2)
  if softcap > 0: qk = (qk / softcap).tanh() * softcap
  qkb = qk + bias
  # a row whose keys are all masked attends to nothing: zeros, not the NaN of a softmax over -inf
  dead = bias.max(-1, keepdim=True) == -math.inf
  logits = dead.where(0.0, qkb)
  sm = dead.where(0.0, logits.cast(onnx_dtype(softmax_precision)).softmax(-1) if softmax_precision else logits.softmax(-1)).cast(dt)
  out_qk = {0: qk, 1: qk, 2: qkb, 3: sm}[qk_matmul_output_mode]
  y = sm @ V
  if three_d: y = y.permute(0, 2, 1, 3).reshape(y.shape[0], L, -1)
  return y.cast(out_dt), present_k, present_v, out_qk.cast(out_dt)


@op("RotaryEmbedding", since=23)
def RotaryEmbedding(x: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None, interleaved: int = 0,
                    num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
  shape = x.shape
  t = x.permute(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], num_heads, -1)  # (batch, seq, heads, head)
  rd = rotary_embedding_dim or t.shape[3]
  rot, rest = t.shrink((None, None, None, (0, rd))), t.shrink((None, None, None, (rd, t.shape[3])))
  if position_ids is not None: cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
  c, s = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
  if interleaved:
    pairs = rot.reshape(*rot.shape[:3], rd // 2, 2)
    x1, x2 = pairs[..., 0], pairs[..., 1]
  else: x1, x2 = rot.shrink((None, None, None, (0, rd // 2))), rot.shrink((None, None, None, (rd // 2, rd)))
  re, im = c * x1 - s * x2, s * x1 + c * x2
  rot = re.stack(im, dim=-1).reshape(rot.shape) if interleaved else re.cat(im, dim=-1)
  out = rot.cat(rest, dim=-1)
  return out.permute(0, 2, 1, 3) if x.ndim == 4 else out.reshape(shape)


@op("FlexAttention", domain="ai.onnx.preview")
def FlexAttention(Q: Tensor, K: Tensor, V: Tensor, scale: float | None = None, score_mod: Any = None, prob_mod: Any = None,
                  softmax_precision: int | None = None, *, ctx: Ctx) -> Tensor:
  if Q.shape[1] != K.shape[1]: K, V = K.repeat_interleave(Q.shape[1] // K.shape[1], 1), V.repeat_interleave(Q.shape[1] // V.shape[1], 1)
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(Q.shape[3]))
  # the softmax runs in float32 for half inputs unless softmax_precision says otherwise
  cdt = onnx_dtype(softmax_precision) if softmax_precision else dtypes.float32 if Q.dtype.itemsize < 4 else Q.dtype
  scores = ((Q * s) @ (K * s).transpose(-1, -2)).cast(cdt)
  if score_mod is not None: scores = run_graph(score_mod, [scores], ctx)[0].cast(cdt)
  probs = scores.softmax(-1)
  if prob_mod is not None: probs = run_graph(prob_mod, [probs], ctx)[0].cast(cdt)
  return (probs @ V.cast(cdt)).cast(V.dtype)


@op("LinearAttention", since=27)
def LinearAttention(query: Tensor, key: Tensor, value: Tensor, past_state: Tensor | None = None, decay: Tensor | None = None,
                    beta: Tensor | None = None, chunk_size: int = 64, kv_num_heads: int = 1, q_num_heads: int = 1, scale: float = 0.0,
                    update_rule: str = "gated_delta") -> tuple[Tensor, Tensor]:
  B, T = query.shape[:2]
  def heads(t: Tensor, h: int) -> Tensor: return t.reshape(B, T, h, -1).permute(0, 2, 1, 3).cast(dtypes.float32)  # (B, H, T, d)
  q, k, v = heads(query, q_num_heads), heads(key, kv_num_heads), heads(value, kv_num_heads)
  dk, dv = q.shape[-1], v.shape[-1]
  g = heads(decay, kv_num_heads) if decay is not None else None  # per key dimension, or (B, H, T, 1) per head
  b = beta.reshape(B, T, beta.shape[-1], 1).permute(0, 2, 1, 3).cast(dtypes.float32) if beta is not None else None
  state = past_state.cast(dtypes.float32) if past_state is not None else Tensor.zeros(B, kv_num_heads, dk, dv)
  sc, grp = scale or 1 / math.sqrt(dk), q_num_heads // kv_num_heads
  outs = []
  # the recurrence, one token at a time (state: (B, H_kv, d_k, d_v))
  for t in range(T):
    kt, vt = k[:, :, t], v[:, :, t]
    if g is not None: state = state * g[:, :, t].exp().unsqueeze(-1)
    if b is not None: vt = b[:, :, t] * (vt - (state * kt.unsqueeze(-1)).sum(-2))
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    outs.append(sc * (q[:, :, t].unsqueeze(-1) * (state.repeat_interleave(grp, 1) if grp > 1 else state)).sum(-2))
  out = outs[0].stack(*outs[1:], dim=2).permute(0, 2, 1, 3).reshape(B, T, q_num_heads * dv).cast(query.dtype)
  return out, state.cast(past_state.dtype if past_state is not None else query.dtype)


@op("CausalConvWithState", since=27)
def CausalConvWithState(x: Tensor, weight: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None,
                        activation: str = "none") -> tuple[Tensor, Tensor]:
  B, C, _ = x.shape
  k = weight.shape[-1]
  full = (past_state if past_state is not None else Tensor.zeros(B, C, k - 1, dtype=x.dtype)).cat(x, dim=2)
  out = full.conv2d(weight, bias, groups=C)
  if activation in ("silu", "swish"): out = (out.float() * out.float().sigmoid()).cast(x.dtype)  # in float32, as the spec's function
  return out, full.shrink((None, None, (full.shape[2] - (k - 1), full.shape[2])))


@op("TensorScatter", since=24)
def TensorScatter(past: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2, mode: str = "linear") -> Tensor:
  a = axis + past.ndim if axis < 0 else axis
  M, S = past.shape[a], update.shape[a]
  # cache position p takes update position p - write_index (modulo the cache length when circular)
  src = Tensor.arange(M).reshape([M if i == a else 1 for i in range(past.ndim)])
  if write_indices is not None: src = src - write_indices.reshape(-1, *[1] * (past.ndim - 1))
  if mode == "circular": src = src % M
  live = (src >= 0) & (src < S)
  return live.where(update.gather(a, src.clip(0, S - 1).expand(past.shape)), past)


# ***** recurrent layers *****

_ACT: dict[str, Callable[[Tensor, float | None, float | None], Tensor]] = {
  "Sigmoid": lambda x, a, b: x.sigmoid(), "Tanh": lambda x, a, b: x.tanh(), "Relu": lambda x, a, b: x.relu(),
  "LeakyRelu": lambda x, a, b: x.leaky_relu(a if a is not None else 0.01),
  "ThresholdedRelu": lambda x, a, b: (x > (a if a is not None else 1.0)).where(x, 0),
  "ScaledTanh": lambda x, a, b: (a if a is not None else 1.0) * (x * (b if b is not None else 1.0)).tanh(),
  "HardSigmoid": lambda x, a, b: x.hardsigmoid(a if a is not None else 0.2, b if b is not None else 0.5),
  "Elu": lambda x, a, b: x.elu(a if a is not None else 1.0), "Softsign": lambda x, a, b: x.softsign(),
  "Softplus": lambda x, a, b: x.softplus(), "Affine": lambda x, a, b: x * (a if a is not None else 1.0) + (b if b is not None else 0.0)}


def _rnn(kind: str, X: Tensor, W: Tensor, R: Tensor, B: Tensor | None, sequence_lens: Tensor | None, initial_h: Tensor | None,
         initial_c: Tensor | None, P: Tensor | None, activation_alpha: list | None, activation_beta: list | None, activations: list | None,
         clip: float | None, direction: str, hidden_size: int, layout: int, linear_before_reset: int = 0) -> tuple[Tensor, ...]:
  """RNN, GRU and LSTM: one Python loop over the time steps per direction. Steps past a batch entry's sequence length
  keep its state and output zeros."""
  if layout: X = X.transpose(0, 1)
  T, bs, H = X.shape[0], X.shape[1], hidden_size
  ndir = 2 if direction == "bidirectional" else 1
  gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
  default = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind]
  acts = activations or default * ndir
  alphas, betas = activation_alpha or [], activation_beta or []
  def act(k: int, v: Tensor) -> Tensor:
    return _ACT[acts[k]](v, alphas[k] if k < len(alphas) else None, betas[k] if k < len(betas) else None)
  lens = sequence_lens.reshape(bs, 1) if sequence_lens is not None else None
  ys, hs, cs = [], [], []
  for d in range(ndir):
    w, r = W[d], R[d]
    b = B[d] if B is not None else Tensor.zeros(2 * gates * H, dtype=X.dtype)
    wb, rb = b[:gates * H], b[gates * H:]
    h = initial_h[d] if initial_h is not None else Tensor.zeros(bs, H, dtype=X.dtype)
    c = initial_c[d] if initial_c is not None else Tensor.zeros(bs, H, dtype=X.dtype)
    p = P[d] if P is not None else None
    k0 = d * len(default)
    xw = X @ w.T + wb  # all time steps at once: (T, bs, gates*H)
    out: list[Tensor | None] = [None] * T
    rev = direction == "reverse" or d == 1
    for t in (range(T - 1, -1, -1) if rev else range(T)):
      hr = h @ r.T + rb
      cl = (lambda v: v.clip(-clip, clip)) if clip is not None else (lambda v: v)  # noqa: E731
      if kind == "RNN": hn, cn = act(k0, cl(xw[t] + hr)), c
      elif kind == "GRU":
        z, rr = act(k0, cl(xw[t][:, :H] + hr[:, :H])), act(k0, cl(xw[t][:, H:2 * H] + hr[:, H:2 * H]))
        cand = xw[t][:, 2 * H:] + (rr * hr[:, 2 * H:] if linear_before_reset else (rr * h) @ r[2 * H:].T + rb[2 * H:])
        hn, cn = (1 - z) * act(k0 + 1, cl(cand)) + z * h, c
      else:
        g = cl(xw[t] + hr)
        gi, go, gf, gc = g[:, :H], g[:, H:2 * H], g[:, 2 * H:3 * H], g[:, 3 * H:]
        if p is not None: gi, gf = gi + p[:H] * c, gf + p[2 * H:] * c
        cn = act(k0, gf) * c + act(k0, gi) * act(k0 + 1, gc)
        hn = act(k0, go + p[H:2 * H] * cn if p is not None else go) * act(k0 + 2, cn)
      if lens is not None:
        live = t < lens
        h, c, out[t] = live.where(hn, h), live.where(cn, c), live.where(hn, 0)
      else: h, c, out[t] = hn, cn, hn
    ys.append(out[0].stack(*out[1:], dim=0))  # type: ignore[union-attr, arg-type]
    hs.append(h)
    cs.append(c)
  Y = ys[0].stack(*ys[1:], dim=1)  # (T, ndir, bs, H)
  Yh, Yc = hs[0].stack(*hs[1:], dim=0), cs[0].stack(*cs[1:], dim=0)
  if layout: Y, Yh, Yc = Y.permute(2, 0, 1, 3), Yh.transpose(0, 1), Yc.transpose(0, 1)
  return (Y, Yh, Yc) if kind == "LSTM" else (Y, Yh)


op("RNN")(lambda X, W, R, B=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None, activations=None,
          clip=None, direction="forward", hidden_size=None, layout=0:
          _rnn("RNN", X, W, R, B, sequence_lens, initial_h, None, None, activation_alpha, activation_beta, activations, clip, direction,
               hidden_size, layout))
op("GRU")(lambda X, W, R, B=None, sequence_lens=None, initial_h=None, activation_alpha=None, activation_beta=None, activations=None,
          clip=None, direction="forward", hidden_size=None, layout=0, linear_before_reset=0:
          _rnn("GRU", X, W, R, B, sequence_lens, initial_h, None, None, activation_alpha, activation_beta, activations, clip, direction,
               hidden_size, layout, linear_before_reset))
op("LSTM")(lambda X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, activation_alpha=None, activation_beta=None,
           activations=None, clip=None, direction="forward", hidden_size=None, layout=0, input_forget=0:
           _rnn("LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P, activation_alpha, activation_beta, activations, clip, direction,
                hidden_size, layout))


# ***** losses *****

@op("NegativeLogLikelihoodLoss")
def NegativeLogLikelihoodLoss(x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
                              reduction: str = "mean") -> Tensor:
  C = x.shape[1]
  hit = target.unsqueeze(1) == Tensor.arange(C).reshape(1, C, *[1] * (x.ndim - 2))
  w = hit.cast(x.dtype) if weight is None else hit.where(weight.reshape(1, C, *[1] * (x.ndim - 2)), 0)
  if ignore_index is not None: w = w * (target != ignore_index).unsqueeze(1)
  loss, wsum = -(x * w).sum(1), w.sum(1)
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  return loss.sum() / wsum.sum() if weight is not None or ignore_index is not None else loss.mean()


@op("SoftmaxCrossEntropyLoss")
def SoftmaxCrossEntropyLoss(scores: Tensor, labels: Tensor, weights: Tensor | None = None, ignore_index: int | None = None,
                            reduction: str = "mean") -> tuple[Tensor, Tensor]:
  logp = scores.log_softmax(1)
  return NegativeLogLikelihoodLoss(logp, labels, weights, ignore_index, reduction), logp


# ***** small ops of the ML and training domains *****

op("Binarizer", domain="ai.onnx.ml")(lambda x, threshold=0.0: (x > threshold).cast(x.dtype))


@op("ArrayFeatureExtractor", domain="ai.onnx.ml")
def ArrayFeatureExtractor(x: Tensor, y: Tensor) -> Tensor: return x[..., y.reshape(-1)]


@op("BitCast", since=26)
def BitCast(x: Tensor, to: int) -> Tensor: return x.bitcast(onnx_dtype(to))


op("SwiGLU", since=28)(lambda a, b, alpha=1.0: a * (a * alpha).sigmoid() * b)


@op("Gradient", domain="ai.onnx.preview.training")
def Gradient(*inputs: Tensor, xs: list[str], y: str, zs: list[str] | None = None, ctx: Ctx) -> tuple[Tensor, ...]:
  """d y / d x for each input named in xs, by the autograd of the graph that computed y."""
  out = ctx.scope.get(y)
  return tuple(out.gradient(*inputs[:len(xs)], gradient=out.ones_like()))


@op("Adagrad", domain="ai.onnx.preview.training")
def Adagrad(R: Tensor, T: Tensor, *inputs: Tensor, decay_factor: float = 0.0, epsilon: float = 0.0, norm_coefficient: float = 0.0) -> tuple:
  n = len(inputs) // 3
  r = R / (1 + T * decay_factor)
  out_x, out_h = [], []
  for x, g, h in zip(inputs[:n], inputs[n:2 * n], inputs[2 * n:]):
    g = g + norm_coefficient * x
    h = h + g * g
    out_x.append(x - r * g / (h.sqrt() + epsilon))
    out_h.append(h)
  return tuple(out_x + out_h)


@op("Momentum", domain="ai.onnx.preview.training")
def Momentum(R: Tensor, T: Tensor, *inputs: Tensor, alpha: float, beta: float, mode: str, norm_coefficient: float) -> tuple:
  n = len(inputs) // 3
  out_x, out_v = [], []
  for x, g, v in zip(inputs[:n], inputs[n:2 * n], inputs[2 * n:]):
    g = g + norm_coefficient * x
    # the first step (T == 0) takes the whole gradient
    v = alpha * v + (T > 0).where(beta, 1.0) * g
    out_x.append(x - R * (g + alpha * v) if mode == "nesterov" else x - R * v)
    out_v.append(v)
  return tuple(out_x + out_v)


@op("Adam", domain="ai.onnx.preview.training")
def Adam(R: Tensor, T: Tensor, *inputs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6, norm_coefficient: float = 0.0,
         norm_coefficient_post: float = 0.0) -> tuple:
  n = len(inputs) // 4
  out_x, out_v, out_h = [], [], []
  for x, g, v, h in zip(inputs[:n], inputs[n:2 * n], inputs[2 * n:3 * n], inputs[3 * n:]):
    g = g + norm_coefficient * x
    v, h = alpha * v + (1 - alpha) * g, beta * h + (1 - beta) * g * g
    t = T.cast(dtypes.float32) + 1
    r = (T > 0).where(R * (1 - beta ** t).sqrt() / (1 - alpha ** t), R)
    xn = x - r * v / (h.sqrt() + epsilon)
    out_x.append(xn - norm_coefficient_post * xn if norm_coefficient_post else xn)
    out_v.append(v)
    out_h.append(h)
  return tuple(out_x + out_v + out_h)
