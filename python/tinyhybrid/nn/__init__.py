"""Layers, optimizers and model files. Layers are plain classes whose tensors are attributes named as in torch
(`weight`, `bias`, `running_mean`, ...), so nn.state.get_state_dict gives torch's keys and a torch checkpoint loads
directly. Names, arguments and semantics follow tinygrad's nn; default initializations use torch's bounds."""
from __future__ import annotations

import math

import numpy as np

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.gradient import grad_rule, with_gradient
from tinyhybrid.helpers import is_training, prod
from tinyhybrid.tensor import Tensor
from tinyhybrid.nn import optim, state  # noqa: F401


def _tuple(x: int | tuple[int, ...], n: int) -> tuple[int, ...]: return (x,) * n if isinstance(x, int) else tuple(x)


def _channel_shape(x: Tensor) -> tuple[int, ...]: return (1, -1, *[1] * (x.ndim - 2))


def _filled(shape: int | tuple[int, ...], value: float, dtype: DType | None = None, requires_grad: bool | None = None) -> Tensor:
  """A constant-initialized parameter or buffer with memory of its own, filled on the host: a plain buffer, so no
  kernel runs and gradients stop at it. Tensor.full would be a graph identical to every other of that shape and value:
  one node, which gradients (keyed by node) could not tell apart."""
  return Tensor(np.full(_tuple(shape, 1), value, dtype=np.float64), dtype=dtype or dtypes.default_float, requires_grad=requires_grad)


class BatchNorm:
  """Batch normalization over the channel axis (1) of (N, C, ...) inputs. In training (Tensor.training) it uses the
  batch's statistics and moves the running ones towards them by momentum (the variance unbiased, as torch does);
  otherwise it uses the running statistics. The running updates are lazy assigns: an optimizer's step realizes them,
  since they are among its buffers (get_parameters lists them)."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True, momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = _filled(sz, 1.0) if affine else None
    self.bias: Tensor | None = _filled(sz, 0.0) if affine else None
    if track_running_stats: self.running_mean, self.running_var = _filled(sz, 0.0, requires_grad=False), _filled(sz, 1.0, requires_grad=False)
    self.num_batches_tracked = _filled((), 0, dtypes.int64, requires_grad=False)

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """(mean, biased variance) per channel: the running ones in eval mode, else the batch's."""
    if self.track_running_stats and not is_training(Tensor): return self.running_mean, self.running_var
    return _batch_stats(x)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm: input needs (N, C, ...) dimensions, got shape {x.shape}")
    mean, var = self.calc_stats(x)
    if self.track_running_stats and is_training(Tensor):
      if (n := x.numel() // x.shape[1]) < 2: raise ValueError(f"BatchNorm: training needs more than one value per channel, got shape {x.shape}")
      self.running_mean.assign((1 - self.momentum) * self.running_mean + self.momentum * mean.detach())
      self.running_var.assign((1 - self.momentum) * self.running_var + self.momentum * n / (n - 1) * var.detach())
      self.num_batches_tracked += 1
    out = x.batchnorm(self.weight, self.bias, mean, var.add(self.eps).rsqrt())
    if self.track_running_stats and not is_training(Tensor): return out
    params = tuple(t for t in (self.weight, self.bias) if t is not None)
    return with_gradient(out, (x, *params), _batch_norm_grad, self.eps, self.weight is not None, self.bias is not None)
BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm


def _batch_axes(x: Tensor) -> tuple[int, ...]: return tuple(a for a in range(x.ndim) if a != 1)


def _batch_stats(x: Tensor) -> tuple[Tensor, Tensor]:
  """(mean, biased variance) per channel of a batch."""
  mean = x.mean(axes := _batch_axes(x))
  # the mean is detached inside the variance because d(var)/d(mean) is zero anyway; it saves a backward path
  y = x - mean.detach().reshape(_channel_shape(x))
  return mean, (y * y).mean(axes)


@grad_rule
def _batch_norm_grad(g: Tensor, out: Tensor, inputs: list[Tensor], eps: float, has_weight: bool, has_bias: bool) -> tuple[Tensor | None, ...]:
  """A batch norm on its batch's statistics, differentiated as one function (torch's formula): the sums of g and of
  g * xhat per channel give the bias's and the weight's gradients, and the input's is
  invstd * weight * (g - mean(g) - xhat * mean(g * xhat)): two reduces and one elementwise pass over the activations,
  where the chain rule through the mean and the variance takes twice as many. The statistics are the forward pass's
  own nodes (built the same way), so nothing is computed twice."""
  x, cs, n = inputs[0], _channel_shape(inputs[0]), inputs[0].numel() // inputs[0].shape[1]
  axes = _batch_axes(x)
  mean, var = _batch_stats(x)
  invstd = var.add(eps).rsqrt()
  xhat = (x - mean.reshape(cs)) * invstd.reshape(cs)
  dbias, dweight = g.sum(axes), (g * xhat).sum(axes)
  scale = invstd * inputs[1] if has_weight else invstd
  dx = scale.reshape(cs) * (g - (dbias / n).reshape(cs) - xhat * (dweight / n).reshape(cs))
  return (dx, *((dweight,) if has_weight else ()), *((dbias,) if has_bias else ()))


class Conv2d:
  """Convolution over 1, 2 or 3 spatial dimensions (as many as kernel_size has; an int means 2). padding is an int, a
  tuple as Tensor.conv2d takes it, or 'same'/'valid'. Weight and bias are uniform in +-1/sqrt(fan_in), torch's default."""
  transposed = False

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] | str = 0, dilation: int | tuple[int, ...] = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = _tuple(kernel_size, 2)
    if isinstance(padding, str) and (self.transposed or padding not in ("same", "valid")):
      raise ValueError(f"{type(self).__name__}: unsupported padding {padding!r}")
    if padding == "same" and any(s != 1 for s in _tuple(stride, len(self.kernel_size))):
      raise ValueError(f"Conv2d: padding='same' needs stride 1, got stride {stride}")
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"{type(self).__name__}: in_channels {in_channels} and out_channels {out_channels} must divide by groups={groups}")
    self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
    # torch's weight layouts; its kaiming_uniform(a=sqrt(5)) bound is 1/sqrt(fan_in), fan_in = prod(weight.shape[1:])
    wshape = (in_channels, out_channels // groups) if self.transposed else (out_channels, in_channels // groups)
    bound = 1 / math.sqrt(wshape[1] * prod(self.kernel_size))
    self.weight = Tensor.uniform(*wshape, *self.kernel_size, low=-bound, high=bound)
    self.bias: Tensor | None = Tensor.uniform(out_channels, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding)


def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0, dilation: int = 1,
           groups: int = 1, bias: bool = True) -> Conv2d:
  """A Conv2d with a one-dimensional kernel: input (N, C, L)."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)


class ConvTranspose2d(Conv2d):
  """Transposed convolution over 1, 2 or 3 spatial dimensions; weight is (in_channels, out_channels/groups, *kernel)
  as in torch."""
  transposed = True

  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, ...], stride: int | tuple[int, ...] = 1,
               padding: int | tuple[int, ...] = 0, output_padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, ...] = 1,
               groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.output_padding = output_padding

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding,  # type: ignore[arg-type]
                              self.output_padding)  # (the padding is never a str here: only Conv2d's may be)


def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, output_padding: int = 0,
                    dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """A ConvTranspose2d with a one-dimensional kernel: input (N, C, L)."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias)


class Linear:
  """y = x @ weight.T + bias; weight (out_features, in_features), both uniform in +-1/sqrt(in_features) as in torch."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    bound = 1 / math.sqrt(in_features)
    self.weight = Tensor.uniform(out_features, in_features, low=-bound, high=bound)
    self.bias: Tensor | None = Tensor.uniform(out_features, low=-bound, high=bound) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.transpose(), self.bias)


class GroupNorm:
  """Normalizes each group of num_channels/num_groups channels of (N, C, ...) inputs, then a per-channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: num_channels {num_channels} must divide by num_groups {num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight: Tensor | None = _filled(num_channels, 1.0) if affine else None
    self.bias: Tensor | None = _filled(num_channels, 0.0) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:  # a forward shape mismatch is a RuntimeError, as torch raises it
      raise RuntimeError(f"GroupNorm: input shape {x.shape} needs {self.num_channels} channels on axis 1")
    x = x.reshape(x.shape[0], self.num_groups, -1).layernorm(eps=self.eps).reshape(x.shape)
    if self.weight is None or self.bias is None: return x
    return x * self.weight.reshape(_channel_shape(x)) + self.bias.reshape(_channel_shape(x))


class InstanceNorm(GroupNorm):
  """Normalizes each channel of each sample over its spatial dimensions: a GroupNorm with one channel per group.
  Unlike torch's InstanceNorm2d it is affine by default, as tinygrad's is; it keeps no running statistics."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    super().__init__(num_features, num_features, eps, affine)
    self.num_features = num_features


class LayerNorm:
  """Normalizes over the last len(normalized_shape) dimensions, then an elementwise affine of that shape."""
  def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape: tuple[int, ...] = _tuple(normalized_shape, 1)
    self.axis, self.eps = tuple(-1 - i for i in range(len(self.normalized_shape))), eps
    self.weight: Tensor | None = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
    self.bias: Tensor | None = _filled(self.normalized_shape, 0.0) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[x.ndim - len(self.normalized_shape):] != self.normalized_shape:
      raise RuntimeError(f"LayerNorm: the last dimensions of input shape {x.shape} must be {self.normalized_shape}")
    x = x.layernorm(eps=self.eps, axis=self.axis)
    if self.weight is None or self.bias is None: return x
    return x * self.weight + self.bias


class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (N, C, H, W) inputs, at each position."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class RMSNorm:
  """x / sqrt(mean(x^2, last axis) + eps) * weight, computed in float32 for half inputs."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight: Tensor | None = _filled(dim, 1.0) if elementwise_affine else None

  def _norm(self, x: Tensor) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt()

  def __call__(self, x: Tensor) -> Tensor:
    x = self._norm(x.float()).cast(x.dtype)
    return x if self.weight is None else x * self.weight


class Embedding:
  """A lookup table: row idx of weight (vocab_size, embed_size) for each integer index. Glorot-uniform init, as tinygrad."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = Tensor.glorot_uniform(vocab_size, embed_size)

  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding: indices must have an integer dtype, got {idx.dtype}")
    # a one-hot select summed over the vocabulary: one reduce kernel that fuses with the index, where weight[idx] would
    # first normalize and check the indices (an index outside [0, vocab_size) gives a zero row, as in tinygrad)
    hit = Tensor.arange(self.weight.shape[0], device=self.weight.device) == idx.unsqueeze(-1)
    return hit.unsqueeze(-1).where(self.weight, 0).sum(-2, dtype=self.weight.dtype)


class LSTMCell:
  """One step of an LSTM: (h, c) = cell(x, (h, c)); gates in torch's order (input, forget, cell, output), weights and
  biases uniform in +-1/sqrt(hidden_size) as in torch."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    b = 1.0 / math.sqrt(hidden_size)
    self.weight_ih = Tensor.uniform(hidden_size * 4, input_size, low=-b, high=b)
    self.weight_hh = Tensor.uniform(hidden_size * 4, hidden_size, low=-b, high=b)
    self.bias_ih: Tensor | None = Tensor.uniform(hidden_size * 4, low=-b, high=b) if bias else None
    self.bias_hh: Tensor | None = Tensor.uniform(hidden_size * 4, low=-b, high=b) if bias else None

  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None: hc = (Tensor.zeros(x.shape[0], self.weight_hh.shape[1], dtype=x.dtype, device=x.device),) * 2
    gates = x.linear(self.weight_ih.T, self.bias_ih) + hc[0].linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=1)
    c = f.sigmoid() * hc[1] + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c
