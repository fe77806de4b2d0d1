"""Random numbers from a counter-based generator (manual_seed, rand, randn, randint, ..., dropout).

Every random value is a pure function of (seed, call number, element index): element i of the n-th random call
after `manual_seed(s)` is threefry-2x32-20 keyed by s's two 32-bit words, applied to the counter block (i, n). The
cipher is written as plain uint32 tensor arithmetic, so it runs inside an ordinary kernel on any device, fuses like
any other elementwise work, and gives bit-identical results wherever and however it is computed. The key and the
call number reach the kernel through a tiny uint32 buffer rather than as constants, so one compiled kernel serves
every seed and every call of the same shape."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyhybrid.dtype import DType, dtypes, to_dtype
from tinyhybrid.helpers import is_training, prod

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

_M32 = 0xFFFFFFFF
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)  # threefry-2x32 rotation schedule
_PARITY = 0x1BD11BDA                     # threefry key-schedule parity constant


def _shape_of(shape: tuple) -> tuple[int, ...]:
  s = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
  if any(not isinstance(x, int) or isinstance(x, bool) or x < 0 for x in s): raise ValueError(f"random: invalid shape {s}")
  return s


def _rotl(x: Tensor, r: int) -> Tensor: return (x << r) | (x >> (32 - r))


def threefry2x32(k0: Tensor, k1: Tensor, c0: Tensor, c1: Tensor, rounds: int = 20) -> tuple[Tensor, Tensor]:
  """The threefry-2x32 block cipher (Salmon et al., Random123) on uint32 tensors that broadcast together:
  encrypts the counter block (c0, c1) under the key (k0, k1). All additions wrap modulo 2**32."""
  ks = (k0, k1, k0 ^ k1 ^ _PARITY)
  x0, x1 = c0 + ks[0], c1 + ks[1]
  for r in range(rounds):
    x0 = x0 + x1
    x1 = _rotl(x1, _ROT[r % 8]) ^ x0
    if r % 4 == 3:  # key injection after every fourth round
      j = (r + 1) // 4
      x0 = x0 + ks[j % 3]
      x1 = x1 + ks[(j + 1) % 3] + j
  return x0, x1


class RandomMixin:
  __slots__ = ()
  _seed: int = int(time.time())
  _rng_calls: int = 0

  # ** generator state **
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seeds the generator and restarts its call counter: the same seed and the same sequence of random calls give
    the same values on every device and in every process."""
    from tinyhybrid.mixin.random import RandomMixin as R
    if not isinstance(seed, int): raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    R._seed, R._rng_calls = seed % (1 << 64), 0

  @staticmethod
  def _next_rng_words(device: str | None) -> Tensor:
    """A uint32 buffer [key0, key1, call number] for one random call (advances the call counter)."""
    from tinyhybrid.mixin.random import RandomMixin as R
    from tinyhybrid.tensor import Tensor
    call = R._rng_calls
    if call > _M32: raise RuntimeError("random: more than 2**32 random calls since the last manual_seed")
    R._rng_calls = call + 1
    words = np.array([R._seed & _M32, (R._seed >> 32) & _M32, call], dtype=np.uint32)
    return Tensor(words, device=device, dtype=dtypes.uint32)

  @staticmethod
  def _random_bits(shape: tuple[int, ...], device: str | None = None) -> tuple[Tensor, Tensor]:
    """Two independent uint32 words per element of `shape`, from one threefry block per element (lazy)."""
    from tinyhybrid.tensor import Tensor
    n = prod(shape)
    if n > _M32 + 1: raise ValueError(f"random: {n} elements in one call is more than the generator's 2**32 per call")
    words = RandomMixin._next_rng_words(device)
    k0, k1, call = (words.shrink(((i, i + 1),)).reshape(()) for i in range(3))
    idx = Tensor._iota(max(n, 1), device=words.device).cast(dtypes.uint32)
    if n != max(n, 1): idx = idx.shrink(((0, 0),))
    x0, x1 = threefry2x32(k0, k1, idx, call)
    return x0.reshape(shape), x1.reshape(shape)

  @staticmethod
  def _bits_to_unit(x0: Tensor, x1: Tensor, dt: DType) -> Tensor:
    """Floats in [0, 1) of dtype dt: the top mantissa bits of the random words under the exponent of 1.0, minus 1.
    Every value is a multiple of 2**-mantissa_bits, so it is exact in dt and the same on every device."""
    if dt is dtypes.float64:
      bits = ((x1.cast(dtypes.uint64) << 32) | x0.cast(dtypes.uint64)) >> 12
      return (bits | 0x3FF0000000000000).bitcast(dtypes.float64) - 1.0
    nmant = {dtypes.float32: 23, dtypes.float16: 10, dtypes.bfloat16: 7}.get(dt)
    if nmant is None: raise ValueError(f"random: no uniform floats for dtype {dt}")
    mant = x0 >> (32 - nmant)
    if nmant != 23: mant = mant << (23 - nmant)
    out = (mant | 0x3F800000).bitcast(dtypes.float32) - 1.0
    return out if dt is dtypes.float32 else out.cast(dt)

  @staticmethod
  def _finish(t: Tensor, kwargs: dict) -> Tensor:
    if kwargs.get("requires_grad") is not None: t.requires_grad = kwargs["requires_grad"]
    return t

  @staticmethod
  def _float_dtype(dtype: Any, op: str) -> DType:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt._is_float or dt.name.startswith("weak"):
      raise ValueError(f"{op}: needs a concrete float dtype, got {dt}")
    return dt

  # ** uniform and normal floats **
  @classmethod
  def rand(cls, *shape, device: str | None = None, dtype: Any = None, contiguous: bool = True, **kwargs) -> Tensor:
    """Uniform floats in [0, 1). contiguous=False leaves the generator fused into whatever consumes it."""
    dt = cls._float_dtype(dtype, "rand")
    s = _shape_of(shape)
    x0, x1 = cls._random_bits(s, device)
    out = cls._bits_to_unit(x0, x1, dt)
    return cls._finish(out.contiguous() if contiguous else out, kwargs)

  def rand_like(self: Tensor, **kwargs) -> Tensor:
    dt = kwargs.pop("dtype", self.dtype)
    if not to_dtype(dt)._is_float: dt = dtypes.default_float
    return type(self).rand(*self.shape, device=kwargs.pop("device", self.device), dtype=dt, **kwargs)

  @classmethod
  def _randn(cls, shape: tuple[int, ...], device: str | None, dt: DType, contiguous: bool = True) -> Tensor:
    # Box-Muller from the two words of one block: sqrt(-2 ln(1-u1)) * cos(2 pi u2), in float32 then cast
    x0, x1 = cls._random_bits(shape, device)
    u1 = cls._bits_to_unit(x0, x1, dtypes.float32)
    u2 = cls._bits_to_unit(x1, x0, dtypes.float32)
    out = ((1 - u1).log() * -2).sqrt() * (u2 * (2 * math.pi)).cos()
    out = out.cast(dt)
    return out.contiguous() if contiguous else out

  @classmethod
  def randn(cls, *shape, dtype: Any = None, device: str | None = None, contiguous: bool = True, **kwargs) -> Tensor:
    """Standard normal floats (Box-Muller)."""
    dt = cls._float_dtype(dtype, "randn")
    return cls._finish(cls._randn(_shape_of(shape), device, dt, contiguous), kwargs)

  def randn_like(self: Tensor, dtype: Any = None, **kwargs) -> Tensor:
    dt = dtype if dtype is not None else (self.dtype if self.dtype._is_float else dtypes.default_float)
    return type(self).randn(*self.shape, dtype=dt, device=kwargs.pop("device", self.device), **kwargs)

  @classmethod
  def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, **kwargs) -> Tensor:
    if std < 0: raise ValueError(f"normal: std must be >= 0, got {std}")
    rg = kwargs.pop("requires_grad", None)
    out = (cls.randn(*shape, **kwargs) * std + mean)
    return cls._finish(out, {"requires_grad": rg})

  @classmethod
  def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, dtype: Any = None, **kwargs) -> Tensor:
    """Uniform values in [low, high)."""
    if not low < high: raise ValueError(f"uniform: needs low < high, got low={low}, high={high}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt._is_float: return cls.randint(*shape, low=math.ceil(low), high=math.ceil(high), dtype=dt, **kwargs)
    rg = kwargs.pop("requires_grad", None)
    work = dt if dt in (dtypes.float32, dtypes.float64) else dtypes.float32
    out = (cls.rand(*shape, dtype=work, **kwargs) * (high - low) + low).cast(dt)
    return cls._finish(out, {"requires_grad": rg})

  @classmethod
  def randint(cls, *shape, low: int = 0, high: int = 10, dtype: Any = dtypes.int32, device: str | None = None, **kwargs) -> Tensor:
    """Uniform integers in [low, high): low + floor(bits * (high - low) / 2**32) from 32 random bits."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
      raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
    dt = to_dtype(dtype)
    if not dt._is_int: raise TypeError(f"randint: dtype must be an int dtype, got {dt}")
    if low >= high: raise ValueError(f"randint: needs low < high, got low={low}, high={high}")
    if low < dt.min or high - 1 > dt.max: raise ValueError(f"randint: [{low}, {high}) does not fit in {dt}")
    span = high - low
    if span > (1 << 32): raise ValueError(f"randint: the range {span} is more than 2**32")
    x0, _ = cls._random_bits(_shape_of(shape), device)
    off = (x0.cast(dtypes.uint64) * span) >> 32
    out = (off + low).cast(dt) if dt is dtypes.uint64 else (off.cast(dtypes.int64) + low).cast(dt)
    return cls._finish(out.contiguous(), kwargs)

  # ** initializers **
  @classmethod
  def scaled_uniform(cls, *shape, **kwargs) -> Tensor:
    """Uniform in [-1, 1) scaled by prod(shape) ** -0.5."""
    s = _shape_of(shape)
    return cls.uniform(*s, low=-1.0, high=1.0, **kwargs).mul(max(prod(s), 1) ** -0.5)

  @classmethod
  def glorot_uniform(cls, *shape, **kwargs) -> Tensor:
    """Uniform in +-sqrt(6 / (fan_out + fan_in)), fan_out = shape[0], fan_in = prod(shape[1:])."""
    s = _shape_of(shape)
    bound = math.sqrt(6 / (s[0] + prod(s[1:])))
    return cls.uniform(*s, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
    """Uniform in +-sqrt(6 / ((1 + a^2) fan_in)), fan_in = prod(shape[1:]) (torch's kaiming_uniform_, leaky_relu gain)."""
    s = _shape_of(shape)
    bound = math.sqrt(6 / (1 + a * a) / prod(s[1:]))
    return cls.uniform(*s, low=-bound, high=bound, **kwargs)

  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.01, **kwargs) -> Tensor:
    """Normal with std sqrt(2 / ((1 + a^2) fan_in))."""
    s = _shape_of(shape)
    return cls.normal(*s, mean=0.0, std=math.sqrt(2 / (1 + a * a) / prod(s[1:])), **kwargs)

  # ** permutations and sampling **
  @staticmethod
  def _rank_desc(keys: Tensor) -> Tensor:
    """For each row of a 2-D tensor, the position (0 = largest) of each element in a descending order that breaks ties by
    index: a permutation of 0..n-1 per row. O(n^2) work, fine for the sizes sampling is used with."""
    n = keys.shape[-1]
    a, b = keys.unsqueeze(-1), keys.unsqueeze(-2)                 # a: element i, b: element j
    idx = type(keys).arange(n, device=keys.device)
    before = (b > a) | ((b == a) & (idx.reshape(1, n) < idx.reshape(n, 1)))
    return before.cast(dtypes.int32).sum(-1)

  @staticmethod
  def _select_by_rank(rank: Tensor, k: int) -> Tensor:
    """out[..., r] = the index i with rank[..., i] == r, for r < k."""
    n = rank.shape[-1]
    idx = type(rank).arange(n, device=rank.device)
    want = type(rank).arange(k, device=rank.device).reshape(k, 1)
    return ((rank.unsqueeze(-2) == want).cast(dtypes.int32) * idx).sum(-1).cast(dtypes.int32)

  @classmethod
  def randperm(cls, n: int, device: str | None = None, dtype: Any = dtypes.int32, **kwargs) -> Tensor:
    """A random permutation of 0..n-1 (sorts n random words by comparing all pairs: meant for modest n)."""
    if not isinstance(n, int) or n < 0: raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    if n == 0: return cls.full((0,), 0, dtype=dtype, device=device)  # type: ignore[attr-defined]
    x0, _ = cls._random_bits((1, n), device)
    perm = cls._select_by_rank(cls._rank_desc(x0), n).reshape(n)
    return cls._finish(perm.cast(to_dtype(dtype)).contiguous(), kwargs)

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """num_samples indices per row drawn with probability proportional to the (non-negative) weights in self."""
    if not 1 <= self.ndim <= 2: raise ValueError(f"multinomial: needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
    if not isinstance(num_samples, int) or num_samples <= 0: raise ValueError(f"multinomial: num_samples must be positive, got {num_samples}")
    w = (self.unsqueeze(0) if self.ndim == 1 else self).cast(dtypes.float32)
    rows, n = w.shape
    if not replacement and num_samples > n:
      raise ValueError(f"multinomial: {num_samples} samples without replacement from {n} categories")
    if replacement or num_samples == 1:
      cdf = w.cumsum(1)
      cdf = cdf / cdf.shrink((None, (n - 1, n)))
      u = type(self).rand(rows, num_samples, 1, device=self.device)
      out = (u >= cdf.unsqueeze(1)).cast(dtypes.int32).sum(-1).minimum(n - 1)
    else:
      # Efraimidis-Spirakis: the num_samples largest keys log(u) / w
      u = type(self).rand(rows, n, device=self.device)
      keys = (1 - u).log() / w
      out = type(self)._select_by_rank(type(self)._rank_desc(keys), num_samples)
    out = out.cast(dtypes.int32)
    return out.reshape(num_samples) if self.ndim == 1 else out

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """In training (Tensor.training, or Context(TRAINING=1)), zeroes each element with
    probability p and scales the rest by 1/(1-p); otherwise returns self."""
    if not 0 <= p <= 1: raise ValueError(f"dropout: p={p} is out of range [0, 1]")
    if not is_training(type(self)) or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = (type(self).rand(*self.shape, device=self.device, dtype=dtypes.float32, contiguous=False) >= p).contiguous()
    dt = self.dtype if self.dtype._is_float else dtypes.default_float
    # self * (keep ? 1/(1-p) : 0): the mask is a scale, so the gradient is the same masked scale
    return self * keep.where(1.0 / (1.0 - p), 0.0).cast(dt)

