"""ONNX signal ops as Tensor ops: DFT and STFT (products with cosine and sine matrices), the window functions and the
mel filter bank. Registered with onnx_ops.op (see onnx_ops.py for the conventions)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tinyhybrid.dtype import dtypes
from tinyhybrid.nn.onnx import np_of, onnx_dtype
from tinyhybrid.nn.onnx_ops import op, scalar
from tinyhybrid.tensor import Tensor


def _window(size: Any, periodic: int, output_datatype: int, coeffs: list[float]) -> Tensor:
  n = int(scalar(size))
  k = Tensor.arange(n).cast(dtypes.float32) * (2 * math.pi / (n if periodic else n - 1))
  w = Tensor.full((n,), coeffs[0])
  for i, c in enumerate(coeffs[1:], 1): w = w + c * (k * i).cos()
  return w.cast(onnx_dtype(output_datatype))


op("HannWindow", since=17, consts=(0,))(lambda size, periodic=1, output_datatype=1: _window(size, periodic, output_datatype, [0.5, -0.5]))
op("HammingWindow", since=17, consts=(0,))(lambda size, periodic=1, output_datatype=1:
                                            _window(size, periodic, output_datatype, [25 / 46, -21 / 46]))
op("BlackmanWindow", since=17, consts=(0,))(lambda size, periodic=1, output_datatype=1:
                                             _window(size, periodic, output_datatype, [0.42, -0.5, 0.08]))


def _fit(t: Tensor, n: int) -> Tensor:
  """The last axis cut or zero-padded to n."""
  m = t.shape[-1]
  return t.shrink((*[None] * (t.ndim - 1), (0, n))) if m >= n else t.pad(((0, 0),) * (t.ndim - 1) + ((0, n - m),))


def dft(x: Tensor, length: int | None, axis: int, inverse: bool, onesided: bool) -> Tensor:
  """The DFT of x (..., 1 or 2 for real or complex) along axis, as products with cos/sin matrices in float64."""
  a = axis + x.ndim if axis < 0 else axis
  re = x[..., 0].transpose(a, -1).cast(dtypes.float64)
  im = x[..., 1].transpose(a, -1).cast(dtypes.float64) if x.shape[-1] == 2 else None
  n = re.shape[-1]
  N = length if length is not None else (2 * (n - 1) if inverse and onesided else n)
  if inverse and onesided:
    # inverse of a one-sided spectrum: a real signal, the missing half being the conjugate mirror of the given one
    K = N // 2 + 1
    ang = 2 * math.pi * np.outer(np.arange(K), np.arange(N)) / N
    w = np.where((np.arange(K) == 0) | (np.arange(K) * 2 == N), 1.0, 2.0)[:, None] / N
    out = _fit(re, K) @ Tensor(w * np.cos(ang))
    if im is not None: out = out - _fit(im, K) @ Tensor(w * np.sin(ang))
    return out.transpose(a, -1).unsqueeze(-1).cast(x.dtype)
  K = N // 2 + 1 if onesided else N
  ang = 2 * math.pi * np.outer(np.arange(N), np.arange(K)) / N
  c, s = Tensor(np.cos(ang)), Tensor(np.sin(ang) * (1 if inverse else -1))
  re, im = _fit(re, N), (_fit(im, N) if im is not None else None)
  ore, oim = re @ c, re @ s
  if im is not None: ore, oim = ore - im @ s, oim + im @ c
  if inverse: ore, oim = ore / N, oim / N
  return ore.stack(oim, dim=-1).transpose(a, -2).cast(x.dtype)


op("DFT", since=17, consts=(1,))(lambda x, dft_length=None, axis=1, inverse=0, onesided=0:
                                 dft(x, int(scalar(dft_length)) if dft_length is not None else None, axis, bool(inverse), bool(onesided)))
op("DFT", since=20, consts=(1, 2))(lambda x, dft_length=None, axis=None, inverse=0, onesided=0:
                                     dft(x, int(scalar(dft_length)) if dft_length is not None and np.asarray(dft_length).size else None,
                                         int(scalar(axis)) if axis is not None else -2, bool(inverse), bool(onesided)))


@op("STFT", since=17, consts=(1, 3))
def STFT(signal: Tensor, frame_step: Any, window: Tensor | None = None, frame_length: Any = None, onesided: int = 1) -> Tensor:
  step = int(scalar(frame_step))
  n = int(scalar(frame_length)) if frame_length is not None else window.shape[0]  # type: ignore[union-attr]
  frames = signal.unfold(1, n, step).permute(0, 1, 3, 2)  # (batch, frames, n, 1 or 2)
  if window is not None: frames = frames * window.reshape(n, 1)
  return dft(frames, n, 2, False, bool(onesided))


@op("MelWeightMatrix", since=17, consts=(0, 1, 2, 3, 4))
def MelWeightMatrix(num_mel_bins: Any, dft_length: Any, sample_rate: Any, lower_edge_hertz: Any, upper_edge_hertz: Any,
                    output_datatype: int = 1) -> np.ndarray:
  """Triangular mel filters: a constant of the scalar arguments, so it is computed on the host."""
  bins, n, rate = int(scalar(num_mel_bins)), int(scalar(dft_length)), int(scalar(sample_rate))
  mel = lambda hz: 2595 * np.log1p(hz / 700) / np.log(10)  # noqa: E731
  lo, hi = mel(float(scalar(lower_edge_hertz))), mel(float(scalar(upper_edge_hertz)))
  pts = np.arange(bins + 2) * ((hi - lo) / (bins + 2)) + lo
  edges = (((n + 1) * (700 * np.expm1(pts / 2595 * np.log(10)))) // rate).astype(int)
  out = np.zeros((n // 2 + 1, bins))
  for i in range(bins):
    left, center, right = edges[i:i + 3]
    if center == left: out[center, i] = 1
    else: out[left:center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
    if right > center: out[center:right, i] = (right - np.arange(center, right)) / (right - center)
  # np_of, not onnx.helper's numpy type: onnx < 1.19 maps BFLOAT16 to float32
  return out.astype(np_of(onnx_dtype(output_datatype)))

