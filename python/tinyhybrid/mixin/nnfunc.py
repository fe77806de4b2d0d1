"""Convolution, pooling, einsum and other composite operations.

Everything here is built from movement ops, elementwise ops and reductions, so it stays lazy: a convolution is a
padded, windowed view of its input (`_pool`), broadcast against the weight, multiplied and summed, which the scheduler
turns into a single reduce kernel (plus one for a bias). Gradients come from the same primitives; a conv's and a
max pool's have rules of their own (_conv_grad, _max_pool_grad), convs and one pass over the input where the chain
rule through the windowed view would sum overlapping windows."""
from __future__ import annotations

import functools
import itertools
import math
import string
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tinyhybrid.dtype import dtypes
from tinyhybrid.gradient import grad_rule, with_gradient
from tinyhybrid.helpers import ceildiv, prod
from tinyhybrid.uop.ops import bound_value, smax

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Pads = tuple[tuple[int, int], ...]


def _tuple(v: int | Sequence[int], n: int, what: str, op: str) -> tuple[int, ...]:
  if isinstance(v, int) and not isinstance(v, bool): return (v,) * n
  t = tuple(v)  # type: ignore[arg-type]  # a bool is no int here: tuple() raises its TypeError
  if len(t) != n or any(not isinstance(x, int) for x in t): raise ValueError(f"{op}: {what} must be an int or {n} ints, got {v!r}")
  return t


def _grouped_pads(padding: int | Sequence[int] | str, nd: int, op: str, kernel: Sequence[int] = (), dilation: Sequence[int] = (),
                  stride: Sequence[int] = ()) -> Pads:
  """Per spatial dimension (before, after), first spatial dimension first. padding is an int (all sides), nd ints (both
  sides of each dimension, in dimension order), 2*nd ints in torch's flat order (last dimension first: left, right,
  top, bottom, ...), or the strings 'valid' and 'same' (stride 1 only; the odd extra goes after, as torch does)."""
  if isinstance(padding, str):
    if padding == "valid": return ((0, 0),) * nd
    if padding != "same": raise ValueError(f"{op}: padding string must be 'same' or 'valid', got {padding!r}")
    if any(s != 1 for s in stride): raise ValueError(f"{op}: padding='same' needs stride 1, got stride {tuple(stride)}")
    tot = [d * (k - 1) for k, d in zip(kernel, dilation)]
    return tuple((t // 2, t - t // 2) for t in tot)
  if isinstance(padding, int) and not isinstance(padding, bool): return ((padding, padding),) * nd
  p = tuple(padding)  # type: ignore[arg-type]  # a bool: tuple() raises its TypeError
  if any(not isinstance(x, int) for x in p): raise ValueError(f"{op}: padding must be ints, got {padding!r}")
  if len(p) == nd: return tuple((x, x) for x in p)
  if len(p) == 2 * nd: return tuple((p[2 * i], p[2 * i + 1]) for i in range(nd))[::-1]
  raise ValueError(f"{op}: padding must be an int or a sequence of {nd} or {2 * nd} ints, got {padding!r}")


def _spread(x: Tensor, s_: Sequence[int]) -> Tensor:
  """x with s-1 zeros between neighbours along each spatial dimension (the input of a transposed conv)."""
  if all(s == 1 for s in s_): return x
  pre, sp = x.shape[:-len(s_)], x.shape[-len(s_):]
  # (n) -> (n, 1) -> pad to (n, s) -> (n*s) -> drop the trailing s-1
  x = x.reshape(*pre, *[v for n in sp for v in (n, 1)])
  x = x.pad(((0, 0),) * len(pre) + tuple(p for s in s_ for p in ((0, 0), (0, s - 1))))
  x = x.reshape(*pre, *[n * s for n, s in zip(sp, s_)])
  return x.shrink((*[None] * len(pre), *[(0, n * s - (s - 1)) for n, s in zip(sp, s_)]))


def _conv_input_grad(g: Tensor, weight: Tensor, groups: int, s_: tuple[int, ...], d_: tuple[int, ...], pads: Pads,
                     i_: tuple[int, ...]) -> Tensor:
  """The gradient of a conv's input: the transposed conv, as one stride-1 conv per phase of the stride. The input
  positions n = s*m + r of one phase r are reached by the taps k with k*d = r + pad (mod s), every (s/gcd(s, d))-th
  tap, each from g at m + (r + pad - k*d)/s: a correlation of g with those taps flipped. Spreading g with s-1 zeros
  instead would multiply zeros by the kernel s^nd-fold."""
  nd, (cout, cin), k_, o_ = len(s_), weight.shape[:2], weight.shape[2:], g.shape[2:]
  rcout = cout // groups
  wt = weight.reshape(groups, rcout, cin, *k_).transpose(1, 2).reshape(groups * cin, rcout, *k_).cast(g.dtype)
  m_ = [ceildiv(i, s) for i, s in zip(i_, s_)]
  pieces = []
  for phase in itertools.product(*[range(s) for s in s_]):
    taps, conv_pads, dil, sizes = [], [], [], []
    for r, s, d, k, (b, _), i, o in zip(phase, s_, d_, k_, pads, i_, o_):
      first = [t for t in range(k) if (r + b - t * d) % s == 0]
      sizes.append(ceildiv(i - r, s))
      if not first or sizes[-1] <= 0: break
      step, dd = s // math.gcd(s, d), d // math.gcd(s, d)
      n = len(range(first[0], k, step))
      before = (n - 1) * dd - (r + b - first[0] * d) // s
      taps.append(slice(first[0], None, step))
      conv_pads.append((before, sizes[-1] + (n - 1) * dd - o - before))
      dil.append(dd)
    else:
      w = wt[(slice(None), slice(None)) + tuple(taps)].flip(tuple(range(2, 2 + nd)))
      # by columns over a batch only, from a copy of the flipped, transposed weight: read through the view, the
      # product's blocks split its index into divisions (18.6 ms against the direct conv's 1.3 at batch 1). A
      # 512-channel 3x3 at 7x7, batch 8: 9.4 -> 5.3 ms, its stride-2 form 6.3 -> 4.3
      if (columns := g.shape[0] > 1 and _by_columns(tuple(sizes), w.shape[2:], rcout, cin)): w = w.contiguous()
      piece = g._conv(w, None, groups, (1,) * nd, tuple(dil), tuple(conv_pads), columns=columns)
      if any(s > 1 for s in s_):  # placed at its phase: (.., m, 1, ..) padded to (.., M, s, ..)
        piece = piece.reshape(*piece.shape[:2], *[v for m in sizes for v in (m, 1)])
        piece = piece.pad(((0, 0), (0, 0), *[p for m, mm, r, s in zip(sizes, m_, phase, s_) for p in ((0, mm - m), (r, s - 1 - r))]))
      pieces.append(piece)
  if not pieces: return type(g).zeros(g.shape[0], groups * cin, *i_, dtype=g.dtype, device=g.device)  # every input in the padding's shadow
  dx = functools.reduce(lambda a, b: a + b, pieces)
  if all(s == 1 for s in s_): return dx
  dx = dx.reshape(*dx.shape[:2], *[m * s for m, s in zip(m_, s_)])
  return dx.shrink((None, None, *[(0, i) for i in i_]))


def _pool_adjoint(h: Tensor, i_: Sequence[int], k_: Sequence[int], s_: Sequence[int], d_: Sequence[int], pads: Pads) -> Tensor:
  """The adjoint of x.pad(pads)._pool(k_, s_, d_) for x of spatial shape i_: h (..., *o, *k) summed back onto the
  positions each window value came from, as one elementwise sum of a shifted, strided view per kernel tap (the chain
  rule through _pool's views would sum them with a reduce over repeated rows instead)."""
  nd = len(k_)
  pre, o_ = h.shape[:-2 * nd], h.shape[-2 * nd:-nd]
  terms = []
  for tap in itertools.product(*[range(k) for k in k_]):
    t = _spread(h[(Ellipsis,) + tap], s_)
    # tap k of window o reads position o*s + k*d - before: the spread view starts at k*d - before
    shift = [(k * d - b, i - (o - 1) * s - 1 - (k * d - b)) for k, d, (b, _), i, o, s in zip(tap, d_, pads, i_, o_, s_)]
    terms.append(t.pad(((0, 0),) * len(pre) + tuple(shift)))
  return functools.reduce(lambda a, b: a + b, terms)


# a conv with at most this many output positions an image (ResNet's 7x7) runs as a product of its windows laid out as
# columns (im2col): its positions fill few vectors, so the direct form's register tiles run half empty. On 2 Zen 4
# cores a 512-channel 3x3 conv at 7x7 took 1.15 ms at batch 1 and 9.2 at batch 8, by columns 0.63 and 5.2 (the
# columns' copy included), its stride-2 form at batch 8 4.55 -> 4.2
COLUMNS_MAX_POSITIONS = 64
COLUMNS_MIN_ROW = 256  # values of a column's row (cin*k), and a quarter as many output channels: smaller convs stay direct


def _by_columns(o_: tuple, k_: tuple, cin: int, rcout: int) -> bool:
  return prod(k_) > 1 and prod(o_) <= COLUMNS_MAX_POSITIONS and cin * prod(k_) >= COLUMNS_MIN_ROW and rcout >= COLUMNS_MIN_ROW // 4


def _conv_by_columns(windows: Tensor, weight: Tensor, groups: int, dtype: Any) -> Tensor:
  """A conv as x @ w.T: the windows (bs, groups*cin, *o, *k) copied as rows of cin*k values, one per output position of
  every image, against the weight's rows (cout, cin*k), both read along the reduce. Over a batch the product's columns
  are every image's positions (bs*O), so each weight row is read once for all of them; its result is then put in
  (bs, cout, *o) order by the kernel that reads it."""
  nd, bs, (cout, cin), k_ = weight.ndim - 2, windows.shape[0], weight.shape[:2], weight.shape[2:]
  o_ = windows.shape[2:2 + nd]
  O, n, rcout = prod(o_), cin * prod(k_), cout // groups
  cols = windows.reshape(bs, groups, cin, O, prod(k_)).permute(1, 0, 3, 2, 4).contiguous().reshape(groups, 1, bs * O, n)
  ret = (cols * weight.reshape(groups, rcout, 1, n)).sum(3, dtype=dtype)  # (groups, rcout, bs*O)
  if bs > 1: ret = ret.contiguous()  # in the product's own order: read through the permute, the loops would follow it
  return ret.reshape(cout, bs, *o_).permute(1, 0, *range(2, 2 + nd))


def _deinterleaved(x: Tensor, s: int) -> Tensor:
  """x with its last axis read from a copy laid out phase by phase (every s-th value together): a conv of stride s
  along it then loads each tap's values for neighbouring outputs from consecutive addresses, not every s-th. On 2 Zen 4
  cores at batch 8, ResNet-50's 3x3 conv of stride 2 (56x56x128) ran at 58-67 GFLOPS reading its input strided, 164
  with the copy (which costs one pass over the input); its 7x7 stem of stride 2, 88 -> 201."""
  pre, w, last = x.shape[:-1], x.shape[-1], x.ndim - 1
  wide = ceildiv(w, s) * s
  swap = (*range(last), last + 1, last)
  phases = x.pad(((0, 0),) * last + ((0, wide - w),)).reshape(*pre, wide // s, s).permute(*swap).contiguous()
  return phases.permute(*swap).reshape(*pre, wide).shrink(tuple((0, n) for n in pre) + ((0, w),))


@grad_rule
def _max_pool_grad(g: Tensor, out: Tensor, x: list[Tensor], k_: tuple[int, ...], s_: tuple[int, ...], d_: tuple[int, ...],
                   pads: Pads) -> tuple[Tensor]:
  """A max pool's gradient, spread evenly over the window values equal to the window's max (NaN where it is NaN),
  as the max's own rule does, and summed back onto the input through _pool_adjoint."""
  nd, src = len(k_), x[0]
  win = src.pad(((0, 0),) * (src.ndim - nd) + pads, value=src.dtype.min)._pool(k_, s_, d_)
  mx = out.reshape(*out.shape, *[1] * nd)
  hit = win == mx
  if src.dtype._is_float: hit = hit | (win.isnan() & mx.isnan())
  hit = hit.cast(g.dtype)
  share = (g / hit.sum(tuple(range(-nd, 0)))).reshape(*g.shape, *[1] * nd)
  return (_pool_adjoint(hit * share, src.shape[-nd:], k_, s_, d_, pads),)


@grad_rule
def _conv_grad(g: Tensor, out: Tensor, x: list[Tensor], groups: int, s_: tuple[int, ...], d_: tuple[int, ...],
               pads: Pads) -> tuple[Tensor, Tensor]:
  """Both gradients of a conv as convs of their own (the chain rule through the sliding-window view would sum
  overlapping windows instead, with a bounds test per value read)."""
  inp, weight = x
  bs, (cout, cin), k_ = inp.shape[0], weight.shape[:2], weight.shape[2:]
  o_, rcout = g.shape[2:], cout // groups
  # g in memory: both products read it, and the weight's is then a plain matrix product (schedule/kernelize
  # pm_split_for_cache blocks it), not one that computes the layers' elementwise backward pass on every read
  g = g.contiguous()
  dx = _conv_input_grad(g, weight, groups, s_, d_, pads, inp.shape[2:])
  # the weight's: a product of g (groups, rcout, [bs, O]) with the input's windows (groups, [cin, K], [bs, O]), both
  # copied along the reduce over the batch and the output positions, the form a CPU's register tiles run best (the
  # windows' copy reads each plane's rows in order). On 2 Zen 4 cores at batch 8, with g read across its planes and
  # the windows copied channels-last, then transposed for the product, a 64-channel 3x3 conv's weight gradient at 56x56
  # took 34.5 ms, now 10.4; the 7x7 stem's 50.5 -> 12.8; a ResNet-50 training step 1248 -> 878 ms
  O, n = prod(o_), cin * prod(k_)
  # the copy runs over the output's rows where they are short (its vectors then load a row's windows whole: at 14x14 and
  # 28x28 a 3x3 conv's weight gradient 8.4 -> 7.2 and 6.7 ms), over the positions as one loop where they are not (56x56:
  # 8.6 -> 16.1 ms over its rows)
  o = o_ if o_[-1] < 32 else (O,)
  cols = inp.pad(((0, 0), (0, 0)) + pads)._pool(k_, s_, d_).reshape(bs, groups, cin, *o, prod(k_))
  cols = cols.permute(1, 2, 3 + len(o), 0, *range(3, 3 + len(o))).cast(g.dtype).contiguous().reshape(groups, 1, n, bs * O)
  gt = g.reshape(bs, groups, rcout, O).permute(1, 2, 0, 3)
  if bs > 1: gt = gt.contiguous()
  dw = (gt.reshape(groups, rcout, 1, bs * O) * cols).sum(3).reshape(cout, cin, *k_)
  return dx.cast(inp.dtype), dw.cast(weight.dtype)


class NNMixin:
  __slots__ = ()

  # ** the sliding-window view **
  def _pool(self: Tensor, k_: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> Tensor:
    """A view of the last len(k_) dimensions as sliding windows: shape (..., *out, *k_), where
    result[..., o..., j...] = self[..., o*stride + j*dilation, ...]. Only movement ops, so it fuses into its consumer.

    Windows that overlap come from a repetition trick: repeat the row r times, cut it to k*L with L = i*f + d and view it
    as (k, L). Row j of that view starts at j*L = j*d (mod i), so its column o*s holds x[o*s + j*d]; f is the smallest
    multiple that leaves room for o*s columns. Non-overlapping windows (stride == kernel, no dilation) are a plain reshape."""
    nd = len(k_)
    if nd == 0 or nd > self.ndim: raise ValueError(f"pool: kernel {tuple(k_)} does not fit a tensor of shape {self.shape}")
    s_, d_ = _tuple(stride, nd, "stride", "pool"), _tuple(dilation, nd, "dilation", "pool")
    if any(k <= 0 for k in k_) or any(s <= 0 for s in s_) or any(d <= 0 for d in d_):
      raise RuntimeError(f"pool: kernel {tuple(k_)}, stride {s_} and dilation {d_} must be positive")
    pre, i_ = self.shape[:-nd], self.shape[-nd:]
    if any(d * (k - 1) + 1 > bound_value(i) for k, d, i in zip(k_, d_, i_)):  # a symbolic size: its bound value decides
      raise RuntimeError(f"pool: kernel {tuple(k_)} with dilation {d_} is larger than the input's spatial shape {i_}")
    o_ = [ceildiv(i - d * (k - 1), s) for i, k, d, s in zip(i_, k_, d_, s_)]
    np_ = len(pre)
    if all(s == k and d == 1 for k, s, d in zip(k_, s_, d_)):
      x = self.shrink(tuple([None] * np_ + [(0, o * k) for o, k in zip(o_, k_)]))
      x = x.reshape(pre + tuple(v for o, k in zip(o_, k_) for v in (o, k)))
    elif all(k <= s and (d == 1 or k == 1) and isinstance(i, int) for k, s, d, i in zip(k_, s_, d_, i_)):
      # windows apart (a 1x1 conv of stride 2): the first k of every s values, one strided view of self, which the
      # scheduler can read (and copy) as such; the repetition below would merge a repeated axis into a row
      x = self.pad(((0, 0),) * np_ + tuple((0, max(0, o * s - i)) for o, s, i in zip(o_, s_, i_)))
      x = x.shrink(tuple([None] * np_ + [(0, o * s) for o, s in zip(o_, s_)]))
      x = x.reshape(pre + tuple(v for o, s in zip(o_, s_) for v in (o, s)))
      x = x.shrink(tuple([None] * np_ + [r for o, k in zip(o_, k_) for r in ((0, o), (0, k))]))
    else:
      f_ = [smax(1, ceildiv(o * s - d, i)) for o, s, d, i in zip(o_, s_, d_, i_)]
      L_ = [i * f + d for i, f, d in zip(i_, f_, d_)]
      x = self.repeat([1] * np_ + [ceildiv(k * L, i) for k, L, i in zip(k_, L_, i_)])
      x = x.shrink(tuple([None] * np_ + [(0, k * L) for k, L in zip(k_, L_)]))
      x = x.reshape(pre + tuple(v for k, L in zip(k_, L_) for v in (k, L)))
      x = x.shrink(tuple([None] * np_ + [r for k, o, s in zip(k_, o_, s_) for r in ((0, k), (0, o * s))]))
      x = x.reshape(pre + tuple(v for k, o, s in zip(k_, o_, s_) for v in (k, o, s)))
      x = x.shrink(tuple([None] * np_ + [r for k, o in zip(k_, o_) for r in ((0, k), (0, o), (0, 1))]))
      x = x.reshape(pre + tuple(v for k, o in zip(k_, o_) for v in (k, o)))
      # now (..., k0, o0, k1, o1, ...): put the outputs in the window's (o, k) order like the fast path
      x = x.permute(tuple(range(np_)) + tuple(np_ + 2 * j + off for j in range(nd) for off in (1, 0)))
    # (..., o0, k0, o1, k1, ...) -> (..., o0, o1, ..., k0, k1, ...)
    return x.permute(tuple(range(np_)) + tuple(np_ + 2 * j for j in range(nd)) + tuple(np_ + 2 * j + 1 for j in range(nd)))

  # ** convolution **
  def conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0, dtype: Any = None) -> Tensor:
    """Cross-correlation of self (bs, groups*cin, *spatial) with weight (cout, cin, *kernel); the number of spatial
    dimensions comes from the weight, so this is conv1d, conv2d or conv3d. Matches torch.nn.functional.conv{1,2,3}d."""
    nd = weight.ndim - 2
    if nd < 1: raise RuntimeError(f"conv2d: weight needs (cout, cin, *kernel), got shape {weight.shape}")
    s_, d_ = _tuple(stride, nd, "stride", "conv2d"), _tuple(dilation, nd, "dilation", "conv2d")
    if any(s <= 0 for s in s_) or any(d <= 0 for d in d_): raise RuntimeError(f"conv2d: stride {s_} and dilation {d_} must be positive")
    pads = _grouped_pads(padding, nd, "conv2d", weight.shape[2:], d_, s_)
    return self._conv(weight, bias, groups, s_, d_, pads, dtype)

  def _conv(self: Tensor, weight: Tensor, bias: Tensor | None, groups: int, s_: tuple[int, ...], d_: tuple[int, ...], pads: Pads,
            dtype: Any = None, columns: bool = True) -> Tensor:
    nd = weight.ndim - 2
    # shape mismatches are RuntimeError, as torch raises them (tinygrad asserts)
    if self.ndim != weight.ndim:
      raise RuntimeError(f"conv2d: input shape {self.shape} and weight shape {weight.shape} need the same number of dimensions")
    (bs, cin_x), (cout, cin), k_ = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if not isinstance(groups, int) or groups <= 0 or groups * cin != cin_x or cout % groups:
      raise RuntimeError(f"conv2d: input shape {self.shape} does not match weight shape {weight.shape} with groups={groups} "
                         f"(input channels {cin_x} vs groups*cin {groups * cin}, cout {cout} must divide by groups)")
    if bias is not None and bias.shape != (cout,): raise RuntimeError(f"conv2d: bias shape {bias.shape} does not match cout={cout}")
    x = self.pad(padded := ((0, 0), (0, 0)) + pads)
    if 2 <= s_[-1] <= 4 and k_[-1] > 1 and d_[-1] == 1 and all(isinstance(n, int) for n in x.shape) and prod(x.shape) >= 1 << 16:
      # the input made contiguous first, so a layer's elementwise tail (BatchNorm, relu) stays in the kernel that
      # computes it rather than moving into the copy (the 1x1 conv before ResNet's strided 3x3 lost its epilogue and
      # half its speed: 1.09 -> 2.08 ms at batch 1)
      x = _deinterleaved(self.contiguous().pad(padded), s_[-1])
    x = x._pool(k_, s_, d_)   # (bs, cin_x, *o, *k)
    o_, rcout = x.shape[2:2 + nd], cout // groups
    if columns and all(isinstance(n, int) for n in x.shape) and _by_columns(o_, k_, cin, rcout):
      ret = _conv_by_columns(x, weight, groups, dtype)
    else:
      # (bs, groups, cin, 1, *o, *k) -> broadcast over rcout -> (bs, groups, rcout, *o, cin, *k)
      x = x.reshape(bs, groups, cin, 1, *o_, *k_).expand(bs, groups, cin, rcout, *o_, *k_)
      x = x.permute(0, 1, 3, *range(4, 4 + nd), 2, *range(4 + nd, 4 + 2 * nd))
      w = weight.reshape(1, groups, rcout, *[1] * nd, cin, *k_)
      ret = (x * w).sum(tuple(range(3 + nd, 4 + 2 * nd)), dtype=dtype).reshape(bs, cout, *o_)
    if self.uop is not weight.uop: ret = with_gradient(ret, (self, weight), _conv_grad, groups, s_, d_, pads)
    return ret if bias is None else ret + bias.reshape(1, cout, *[1] * nd)

  # ** tinygrad's IMAGE=1 forms **
  def image_conv2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
                   dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, dtype: Any = None) -> Tensor:
    """tinygrad's convolution for IMAGE=1 devices, which lays its operands out in 4-channel image textures: the same
    values as conv2d, accumulated in float32 (the result is float32 unless dtype says otherwise). No device here has
    image textures, so nothing is laid out differently."""
    if self.ndim != 4 or weight.ndim != 4: raise RuntimeError(f"image_conv2d: needs a 4-D input and weight, got {self.shape} and {weight.shape}")
    out = self.conv2d(weight, None, groups, stride, dilation, padding, dtype=dtype if dtype is not None else dtypes.float32)
    return out if bias is None else out.add(bias.reshape(1, -1, 1, 1))

  def image_dot(self: Tensor, w: Tensor, dtype: Any = None) -> Tensor:
    """tinygrad's matrix product for IMAGE=1 devices (a 1x1 image_conv2d): dot's values, accumulated in float32."""
    if not (self.ndim > 0 and w.ndim > 0): raise RuntimeError(f"both tensors need to be at least 1D, got {self.ndim=}, {w.ndim=}")
    if self.shape[-1] != w.shape[-min(w.ndim, 2)]: raise RuntimeError(f"cannot image_dot {self.shape} and {w.shape}")
    return self.dot(w, dtype=dtype if dtype is not None else dtypes.float32)

  def conv_transpose2d(self: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride: int | Sequence[int] = 1,
                       dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                       output_padding: int | Sequence[int] = 0) -> Tensor:
    """Transposed convolution (the gradient of conv2d with respect to its input); weight is (cin, cout/groups, *kernel).
    Matches torch.nn.functional.conv_transpose{1,2,3}d."""
    nd = weight.ndim - 2
    if nd < 1 or self.ndim != weight.ndim:
      raise RuntimeError(f"conv_transpose2d: input shape {self.shape} and weight shape {weight.shape} do not match")
    k_ = weight.shape[2:]
    s_, d_ = _tuple(stride, nd, "stride", "conv_transpose2d"), _tuple(dilation, nd, "dilation", "conv_transpose2d")
    op_ = _tuple(output_padding, nd, "output_padding", "conv_transpose2d")
    if any(s <= 0 for s in s_) or any(d <= 0 for d in d_):
      raise RuntimeError(f"conv_transpose2d: stride {s_} and dilation {d_} must be positive")
    if any(p >= max(s, d) for p, s, d in zip(op_, s_, d_)):
      raise RuntimeError(f"conv_transpose2d: output_padding {op_} must be smaller than stride {s_} or dilation {d_}")
    pads = _grouped_pads(padding, nd, "conv_transpose2d")
    cin, rcout = weight.shape[:2]
    if not isinstance(groups, int) or groups <= 0 or cin != self.shape[1] or cin % groups:
      raise RuntimeError(f"conv_transpose2d: input channels {self.shape[1]} vs weight shape {weight.shape} with groups={groups}")
    # the equivalent forward conv: weight (groups*rcout, cin/groups, *k) with the kernel flipped
    w = weight.reshape(groups, cin // groups, rcout, *k_).transpose(1, 2).flip(tuple(range(3, 3 + nd)))
    w = w.reshape(groups * rcout, cin // groups, *k_)
    fwd = tuple(((k - 1) * d - b, (k - 1) * d - a + op) for k, d, (b, a), op in zip(k_, d_, pads, op_))
    return _spread(self, s_)._conv(w, bias, groups, (1,) * nd, d_, fwd)

  # ** pooling **
  def _pool_setup(self: Tensor, kernel_size, stride, dilation, padding, op: str):
    k_ = _tuple(kernel_size, 2, "kernel_size", op) if isinstance(kernel_size, int) else tuple(kernel_size)
    nd = len(k_)
    if nd > self.ndim: raise RuntimeError(f"{op}: kernel {k_} has more dimensions than the input shape {self.shape}")
    s_ = k_ if stride is None else _tuple(stride, nd, "stride", op)
    d_ = _tuple(dilation, nd, "dilation", op)
    pads = _grouped_pads(padding, nd, op)
    return k_, s_, d_, pads

  def _ceil_pads(self: Tensor, k_, s_, d_, pads: Pads) -> Pads:
    """Extra after-padding so the window count rounds up (torch's ceil_mode): one more window where the remainder
    leaves one, unless that window would start inside the right padding."""
    i_ = self.shape[-len(k_):]
    out = []
    for i, k, s, d, (b, a) in zip(i_, k_, s_, d_, pads):
      span = i + b + a - d * (k - 1) - 1
      o = ceildiv(span, s) + 1
      if (o - 1) * s >= i + b: o -= 1
      need = (o - 1) * s + d * (k - 1) + 1 - (i + b + a)
      out.append((b, a + max(0, need)))
    return tuple(out)

  def max_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, return_indices: bool = False):
    """Max over sliding windows of the last len(kernel_size) dimensions (any number of them); padding counts as -inf.
    return_indices also gives the flat spatial index of each maximum (the first one on ties), as torch does."""
    k_, s_, d_, pads = self._pool_setup(kernel_size, stride, dilation, padding, "max_pool2d")
    if ceil_mode: pads = self._ceil_pads(k_, s_, d_, pads)
    nd, lo = len(k_), self.dtype.min
    axes = tuple(range(-nd, 0))
    full = ((0, 0),) * (self.ndim - nd) + pads
    win = self.pad(full, value=lo)._pool(k_, s_, d_)
    out = with_gradient(win.max(axes), (self,), _max_pool_grad, k_, s_, d_, pads)
    if not return_indices: return out
    sp = self.shape[-nd:]
    n = prod(sp)
    rev = (n - type(self).arange(n, device=self.device)).reshape(sp)      # n..1: larger for earlier positions
    rwin = rev.pad(pads)._pool(k_, s_, d_)                              # padding gets 0, never the answer
    hit = win == win.max(axes, keepdim=True)
    idx = (n - (hit.where(rwin, 0)).max(axes)).cast(dtypes.int32)
    return out, idx

  def max_unpool2d(self: Tensor, indices: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None) -> Tensor:
    """Puts each value at its flat spatial index from max_pool2d(return_indices=True); the rest is 0."""
    bs, c, *sp = self.shape
    if output_size is None:
      k_, s_, d_, pads = self._pool_setup(kernel_size, stride, dilation, padding, "max_unpool2d")
      output_size = tuple((i - 1) * s - (b + a) + d * (k - 1) + 1 for i, k, s, d, (b, a) in zip(sp, k_, s_, d_, pads))
    else: output_size = tuple(output_size)[-len(sp):]
    n = prod(output_size)
    pos = type(self).arange(n, device=self.device).reshape(n, 1)
    hit = indices.reshape(bs, c, 1, -1) == pos.cast(indices.dtype)
    # overlapping windows can name the same position more than once, always with the same value: take it once
    vals = hit.where(self.reshape(bs, c, 1, -1), self.dtype.min if not self.dtype._is_float else -math.inf).max(3)
    return hit.any(3).where(vals, 0).reshape(bs, c, *output_size)

  def avg_pool2d(self: Tensor, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True) -> Tensor:
    """Mean over sliding windows of the last len(kernel_size) dimensions. With count_include_pad the divisor counts
    the explicit zero padding (never the extra ceil_mode padding); without it, only real elements. As torch does."""
    k_, s_, d_, pads = self._pool_setup(kernel_size, stride, dilation, padding, "avg_pool2d")
    nd = len(k_)
    cpads = self._ceil_pads(k_, s_, d_, pads) if ceil_mode else pads
    axes = tuple(range(-nd, 0))
    x = self if self.dtype._is_float else self.cast(dtypes.default_float)
    sums = x.pad(((0, 0),) * (self.ndim - nd) + cpads)._pool(k_, s_, d_).sum(axes)
    if count_include_pad and not ceil_mode: return sums * (1.0 / prod(k_))
    # the divisor depends only on shapes: count the positions each window covers (numpy, once)
    sp = self.shape[-nd:]
    ones = np.ones(tuple(i + b + a for i, (b, a) in zip(sp, pads)) if count_include_pad else sp, dtype=np.float32)
    first = pads if not count_include_pad else ((0, 0),) * nd
    extra = tuple((0, ca - a) for (_, a), (_, ca) in zip(pads, cpads))
    ones = np.pad(np.pad(ones, first), extra)
    cnt = _np_pool_sum(ones, k_, s_, d_)
    div = type(self)(cnt.astype(np.float32), device=self.device).cast(sums.dtype)
    return sums / div

  # ** einsum **
  @classmethod
  def einsum(cls, formula: str, *operands: Tensor | Sequence[Tensor], dtype: Any = None) -> Tensor:
    """Einstein summation: 'ij,jk->ik', implicit output (letters used once, sorted), repeated letters within one
    operand (diagonals and traces), and '...' for broadcast batch dimensions."""
    xs: list[Tensor] = (list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple))
                        else list(operands))  # type: ignore[arg-type]
    f = formula.replace(" ", "")
    lhs, arrow, rhs = f.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(xs): raise ValueError(f"einsum: formula {formula!r} has {len(ins)} operands, got {len(xs)} tensors")
    letters = set(c for c in f if c.isalpha())
    # misuse of the formula is a RuntimeError, as torch raises (a wrong operand count stays tinygrad's ValueError)
    if any(not (c.isalpha() or c in ",->.") for c in f): raise RuntimeError(f"einsum: invalid character in {formula!r}")
    # replace '...' by fresh letters, aligned from the right like broadcasting
    if "..." in f:
      fresh = [c for c in string.ascii_letters if c not in letters]
      nell = []
      for s, x in zip(ins, xs):
        if s.count("...") > 1 or s.replace("...", "").count("."): raise RuntimeError(f"einsum: more than one '...' in {s!r}")
        nell.append(x.ndim - (len(s) - 3) if "..." in s else 0)
      if any(n < 0 for n in nell): raise RuntimeError(f"einsum: an operand has fewer dimensions than {formula!r} names")
      m = max(nell)
      ell = "".join(fresh[:m])
      ins = [s.replace("...", ell[m - n:]) for s, n in zip(ins, nell)]
      if arrow: rhs = rhs.replace("...", ell)
      else: rhs = ell + "".join(sorted(c for c in letters if "".join(ins).count(c) == 1))
    elif not arrow:
      rhs = "".join(sorted(c for c in letters if lhs.count(c) == 1))
    if len(set(rhs)) != len(rhs): raise RuntimeError(f"einsum: output {rhs!r} repeats a letter")
    if any(c not in "".join(ins) for c in rhs): raise RuntimeError(f"einsum: output letter in {rhs!r} is not in any input")
    sizes: dict[str, int] = {}
    for k, (s, x) in enumerate(zip(ins, xs)):
      if len(s) != x.ndim: raise RuntimeError(f"einsum: operand {k} has shape {x.shape} but {s!r} names {len(s)} dimensions")
      # a letter repeated within one operand: take the diagonal
      while (dup := next((c for c in s if s.count(c) > 1), None)) is not None:
        j = s.index(dup)
        j2 = s.index(dup, j + 1)
        if x.shape[j] != x.shape[j2]: raise RuntimeError(f"einsum: repeated {dup!r} in operand {k} has sizes {x.shape[j]} and {x.shape[j2]}")
        x = _diagonal(x, j, j2)
        s = s[:j2] + s[j2 + 1:]
        s = s[:j] + s[j + 1:] + dup
      ins[k], xs[k] = s, x
      for c, n in zip(s, x.shape):
        if c in sizes and sizes[c] != n and 1 not in (n, sizes[c]):
          raise RuntimeError(f"einsum: letter {c!r} has sizes {sizes[c]} and {n} in {formula!r}")
        sizes[c] = n if c not in sizes or sizes[c] == 1 else sizes[c]
    alpha = sorted(sizes)
    aligned = []
    for s, x in zip(ins, xs):
      x = x.permute(tuple(s.index(c) for c in sorted(s))) if s else x
      aligned.append(x.reshape(tuple(x.shape[sorted(s).index(c)] if c in s else 1 for c in alpha)))
    full = tuple(sizes[c] for c in alpha)
    prodt = aligned[0].expand(full)
    for a in aligned[1:]: prodt = prodt * a.expand(full)
    red = tuple(i for i, c in enumerate(alpha) if c not in rhs)
    out = prodt.sum(red, dtype=dtype) if red else (prodt if dtype is None else prodt.cast(dtype))
    kept = [c for c in alpha if c in rhs]
    return out.permute(tuple(kept.index(c) for c in rhs)) if kept else out

  # ** normalization **
  def layernorm(self: Tensor, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over axis (biased variance), without affine parameters."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()

  def batchnorm(self: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor,
                axis: int | Sequence[int] = 1) -> Tensor:
    """(x - mean) * weight * invstd + bias, the parameters laid along `axis` and broadcast over the rest."""
    axes = tuple(self._resolve_dim(a) for a in ((axis,) if isinstance(axis, int) else axis))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    ret = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return ret + bias.reshape(shape) if bias is not None else ret

  # ** resampling **
  def interpolate(self: Tensor, size: Sequence[int], mode: str = "linear", align_corners: bool = False) -> Tensor:
    """Resizes the last len(size) dimensions. mode 'linear' (bilinear, trilinear for 2 or 3 sizes), 'nearest' or
    'nearest-exact', with torch's coordinate conventions. Each dimension is a product with a small (out, in) weight
    matrix computed on the host, so no gather is needed."""
    if not isinstance(size, (tuple, list)) or not size or len(size) > self.ndim or any(not isinstance(s, int) or s <= 0 for s in size):
      raise ValueError(f"interpolate: invalid size {size!r} for shape {self.shape}")
    if mode not in ("linear", "nearest", "nearest-exact"): raise ValueError(f"interpolate: unsupported mode {mode!r}")
    if align_corners and mode != "linear": raise ValueError("interpolate: align_corners is only for mode='linear'")
    if self.dtype is dtypes.uint8 and mode == "linear": return self._interpolate_uint8(size, align_corners)
    x = self if self.dtype._is_float else self.cast(dtypes.float32)
    for k in range(1, len(size) + 1):
      d, n_out, n_in = self.ndim - k, size[-k], self.shape[-k]
      if n_out == n_in and not (mode == "linear" and align_corners and n_in == 1): continue
      W = _interp_matrix(n_in, n_out, mode, align_corners)
      w = type(self)(W, device=self.device).cast(x.dtype)      # (n_out, n_in)
      xt = x.transpose(d, -1)                                  # (..., n_in)
      x = (xt.unsqueeze(-2) * w).sum(-1).transpose(d, -1)
    return x if x.dtype is self.dtype else x.cast(self.dtype)

  def _interpolate_uint8(self: Tensor, size: Sequence[int], align_corners: bool) -> Tensor:
    """Linear resampling of uint8 images in torch's fixed point, so results match it exactly rather than within one:
    each dimension (the last first) uses weights scaled by 2**p and rounded to int16 (p as large as the largest
    weight allows), and the sum is rounded back (add 2**(p-1), shift right by p) and clamped to [0, 255] before the
    next dimension."""
    x = self.cast(dtypes.int32)
    for k in range(1, len(size) + 1):
      d, n_out, n_in = self.ndim - k, size[-k], self.shape[-k]
      if n_out == n_in and not (align_corners and n_in == 1): continue
      W = _interp_matrix(n_in, n_out, "linear", align_corners, np.float64)
      p = next((p for p in range(22) if int(0.5 + W.max() * (1 << (p + 1))) >= 1 << 15), 22)
      Wq = np.trunc(W * (1 << p) + np.where(W < 0, -0.5, 0.5)).astype(np.int32)
      w = type(self)(Wq, device=self.device)
      x = ((x.transpose(d, -1).unsqueeze(-2) * w).sum(-1) + (1 << (p - 1) if p else 0)) >> p
      x = x.clip(0, 255).transpose(d, -1)
    return x.cast(dtypes.uint8)


def _diagonal(x: Tensor, j: int, j2: int) -> Tensor:
  """x with dimensions j and j2 (same size n) replaced by one last dimension holding x[..., i, ..., i, ...]."""
  n = x.shape[j]
  rest = [i for i in range(x.ndim) if i not in (j, j2)]
  y = x.permute(*rest, j, j2).flatten(len(rest)) if x.ndim > 2 else x.permute(j, j2).flatten()
  # (n*n) -> pad to n*(n+1) -> (n, n+1): column 0 of row i is position i*(n+1), the diagonal
  y = y.pad(((0, 0),) * len(rest) + ((0, n),)).reshape(*y.shape[:-1], n, n + 1)
  return y.shrink(tuple([None] * (y.ndim - 1) + [(0, 1)])).reshape(*y.shape[:-1])


def _np_pool_sum(a: np.ndarray, k_, s_, d_) -> np.ndarray:
  """Window sums of a small numpy array (the divisor of avg_pool2d)."""
  o_ = [ceildiv(i - d * (k - 1), s) for i, k, d, s in zip(a.shape, k_, d_, s_)]
  out = np.zeros(o_, dtype=np.float64)
  for off in np.ndindex(*k_):
    sl = tuple(slice(j * d, j * d + (o - 1) * s + 1, s) for j, d, o, s in zip(off, d_, o_, s_))
    out += a[sl]
  return out


def _interp_matrix(n_in: int, n_out: int, mode: str, align_corners: bool, dtype: Any = np.float32) -> np.ndarray:
  W = np.zeros((n_out, n_in), dtype=dtype)
  o = np.arange(n_out, dtype=np.float64)
  if mode == "linear":
    if align_corners: src = o * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros_like(o)
    else: src = np.maximum((o + 0.5) * (n_in / n_out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = (src - lo).astype(dtype)
    np.add.at(W, (np.arange(n_out), lo), 1 - frac)
    np.add.at(W, (np.arange(n_out), hi), frac)
  else:
    scale = n_in / n_out
    src = np.floor((o + 0.5) * scale) if mode == "nearest-exact" else np.floor(o * scale)
    W[np.arange(n_out), np.minimum(src.astype(np.int64), n_in - 1)] = 1.0
  return W
