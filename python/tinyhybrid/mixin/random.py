"""Random numbers from a counter-based generator (manual_seed, rand, randn, randint, ..., dropout).

The stream is tinygrad's, value for value: after `Tensor.manual_seed(s)` a program draws the same numbers here as
there. Each device has a key (k0, k1): k1 is the seed, k0 the low word of sha256 of the device's index in the order
devices first drew (so the default device, drawing first, has the same key everywhere), and a 64-bit counter of the
32-bit words drawn on it. A call that needs `num` words derives a key of its own, threefry-2x32-20(key, counter),
and advances the counter by num; word w of the call is then the first output word of the block
threefry(call key, (w, w + h)) for w < h = ceil(num / 2), and the second output word of block w - h otherwise. A
float takes its item's bits (4 bytes per word, lowest first) under the exponent of 1.0, minus 1.

The per-call key is worked out on the host (one block) and reaches the kernel through a tiny uint32 buffer rather
than as constants, so one compiled kernel serves every seed and every call of the same shape, and the cipher, written
as plain uint32 tensor arithmetic, runs inside an ordinary kernel and fuses like any other elementwise work. Unlike
tinygrad's, the counter lives on the host, so values never depend on the order in which lazy results are realized."""
from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from tinyhybrid.device import Buffer
from tinyhybrid.dtype import DType, dtypes, to_dtype
from tinyhybrid.helpers import is_training, prod
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.digest import sha256

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

_M32 = 0xFFFFFFFF
_ROT = (13, 15, 26, 6, 17, 29, 16, 24)  # threefry-2x32 rotation schedule
_PARITY = 0x1BD11BDA                     # threefry key-schedule parity constant
# mantissa bits of each float dtype rand can fill
_NMANT = {dtypes.float64: 52, dtypes.float32: 23, dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.fp8e4m3: 3, dtypes.fp8e5m2: 2,
          dtypes.fp8e4m3fnuz: 3, dtypes.fp8e5m2fnuz: 2}


def _shape_of(shape: tuple) -> tuple[int, ...]:
  s = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
  if any(not isinstance(x, int) or isinstance(x, bool) or x < 0 for x in s): raise ValueError(f"random: invalid shape {s}")
  return s


def _rotl(x: Tensor, r: int) -> Tensor: return (x << r) | (x >> (32 - r))


def threefry2x32(k0: Tensor, k1: Tensor, c0: Tensor, c1: Tensor, rounds: int = 20, k2: Tensor | None = None) -> tuple[Tensor, Tensor]:
  """The threefry-2x32 block cipher (Salmon et al., Random123) on uint32 tensors that broadcast together:
  encrypts the counter block (c0, c1) under the key (k0, k1). All additions wrap modulo 2**32. k2, the key schedule's
  third word k0 ^ k1 ^ parity, may come precomputed (else the scheduler can make it a kernel of its own)."""
  ks = (k0, k1, k0 ^ k1 ^ _PARITY if k2 is None else k2)
  x0, x1 = c0 + ks[0], c1 + ks[1]
  for r in range(rounds):
    x0 = x0 + x1
    x1 = _rotl(x1, _ROT[r % 8]) ^ x0
    if r % 4 == 3:  # key injection after every fourth round
      j = (r + 1) // 4
      x0 = x0 + ks[j % 3]
      x1 = x1 + ks[(j + 1) % 3] + j
  return x0, x1


def _threefry_host(k0: int, k1: int, c0: int, c1: int) -> tuple[int, int]:
  """threefry2x32 on Python ints, for the one block per call that derives its key."""
  ks = (k0, k1, k0 ^ k1 ^ _PARITY)
  x0, x1 = (c0 + k0) & _M32, (c1 + k1) & _M32
  for r in range(20):
    x0 = (x0 + x1) & _M32
    x1 = (((x1 << _ROT[r % 8]) | (x1 >> (32 - _ROT[r % 8]))) & _M32) ^ x0
    if r % 4 == 3:
      j = (r + 1) // 4
      x0, x1 = (x0 + ks[j % 3]) & _M32, (x1 + ks[(j + 1) % 3] + j) & _M32
  return x0, x1


class _WordsBuffer(Buffer):
  """A random call's words, copied in when the buffer is first allocated: a call whose result is never realized (a
  lazily initialized weight that load_state_dict replaces) takes no device memory, as in tinygrad."""
  def __init__(self, device: str, words: np.ndarray):
    super().__init__(device, words.size, dtypes.uint32)
    self._words: np.ndarray | None = words

  def ensure_allocated(self) -> Buffer:
    if self._mem is None:
      super().ensure_allocated()
      words, self._words = self._words, None
      if words is not None: self.copyin(words)
    return self


class RandomMixin:
  __slots__ = ()
  _seed: int = int(time.time())
  _device_keys: dict[str, int] = {}       # device -> k0, in the order devices first drew
  _device_counters: dict[str, int] = {}   # device -> words drawn since manual_seed

  # ** generator state **
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Seeds the generator and restarts every device's counter: the same seed and the same sequence of random calls
    give the same values on every device, in every process, and in tinygrad."""
    from tinyhybrid.mixin.random import RandomMixin as R
    if not isinstance(seed, int): raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    R._seed, R._device_keys, R._device_counters = seed % (1 << 64), {}, {}

  @staticmethod
  def _next_rng_words(device: str | None, num: int = 1) -> Tensor:
    """A uint32 buffer [call key0, call key1, their parity word, num] for one random call of num words on device
    (advances its counter)."""
    from tinyhybrid.device import Device
    from tinyhybrid.mixin.random import RandomMixin as R
    from tinyhybrid.tensor import Tensor
    dev = Device.canonicalize(device)
    if dev not in R._device_keys:
      R._device_keys[dev] = int.from_bytes(sha256(len(R._device_keys).to_bytes(4, "big")).digest(), "big") & _M32
    ctr = R._device_counters.get(dev, 0)
    R._device_counters[dev] = (ctr + num) % (1 << 64)
    # a seed's high word (tinygrad's seeds are 32-bit) goes into k0, so 64-bit seeds differ too
    key = _threefry_host(R._device_keys[dev] ^ (R._seed >> 32), R._seed & _M32, ctr & _M32, ctr >> 32)
    words = np.array([key[0], key[1], key[0] ^ key[1] ^ _PARITY, num & _M32], dtype=np.uint32)
    from tinyhybrid.engine.realize import capture_random
    # a TinyJit replay draws anew: it refills this buffer with the words of the same call made again
    from tinyhybrid.uop.buffers import buffer_uop
    t = Tensor(buffer_uop(_WordsBuffer(dev, words), (len(words),)), device=dev)
    capture_random(t.uop, lambda: R._next_rng_words(device, num).uop)
    return t

  @staticmethod
  def _random_words(num: int, device: str | None = None) -> Tensor:
    """The num uint32 words of one random call (lazy)."""
    from tinyhybrid.tensor import Tensor
    if num > 2 * (_M32 + 1): raise ValueError(f"random: {num} words in one call is more than the generator's 2**33 per call")
    words = RandomMixin._next_rng_words(device, num)
    k0, k1, k2 = (words.shrink(((i, i + 1),)).reshape(()) for i in range(3))
    h = (num + 1) // 2
    idx = Tensor._iota(max(h, 1), device=words.device).cast(dtypes.uint32)
    x0, x1 = threefry2x32(k0, k1, idx, idx + h, k2=k2)
    return x0.cat(x1).shrink(((0, num),))

  @staticmethod
  def _unit(num_items: int, dt: DType, device: str | None) -> Tensor:
    """num_items floats in [0, 1) of dtype dt, flat: each item's bits (from the words of one call, lowest byte first)
    shifted down to its mantissa under the exponent of 1.0, minus 1. Every value is a multiple of 2**-mantissa_bits,
    exact in dt, so the narrow types are made in float32 and cast without rounding."""
    nmant = _NMANT.get(dt)
    if nmant is None: raise ValueError(f"random: no uniform floats for dtype {dt}")
    isz = dt.itemsize
    w = RandomMixin._random_words(-(-num_items * isz // 4), device)
    if isz == 8:
      w = w.reshape(num_items, 2).cast(dtypes.uint64)
      bits = (w.shrink((None, (1, 2))) << 32 | w.shrink((None, (0, 1)))).reshape(num_items) >> 12
      return (bits | 0x3FF0000000000000).bitcast(dtypes.float64) - 1.0
    if isz < 4:  # the items of a word, lowest first
      per, mask = 4 // isz, (1 << (8 * isz)) - 1
      w = w.unsqueeze(-1).expand(w.shape[0], per)
      w = ((w >> type(w).arange(0, 32, 8 * isz, device=w.device).cast(dtypes.uint32)) & mask).flatten().shrink(((0, num_items),))
    mant = w >> (8 * isz - nmant)
    out = ((mant << (23 - nmant)) | 0x3F800000).bitcast(dtypes.float32) - 1.0
    return out if dt is dtypes.float32 else out.cast(dt)

  # ** the generator's parts, as tinygrad names them **
  def threefry(self: Tensor, seed: Tensor) -> Tensor:
    """threefry-2x32-20 of uint64 counters under uint64 keys (each split into its low and high words), elementwise."""
    if self.dtype is not dtypes.uint64 or seed.dtype is not dtypes.uint64:
      raise TypeError(f"threefry: counters and keys are uint64, got {self.dtype} and {seed.dtype}")
    lo, hi = (lambda t: t.cast(dtypes.uint32)), (lambda t: (t >> 32).cast(dtypes.uint32))
    x0, x1 = threefry2x32(lo(seed), hi(seed), lo(self), hi(self))
    return x1.cast(dtypes.uint64) << 32 | x0.cast(dtypes.uint64)

  @classmethod
  def random_bits(cls, key: Tensor, counter: Tensor, num: int) -> Tensor:
    """num uint32 words of tinygrad's stream for a uint32 key [k0, k1] and a 64-bit counter [low, high]: the call's key
    is threefry(key, counter + i) for each chunk i of up to 2**32 - 1 words, and word w of a chunk of n is the first
    output word of block (w, w + ceil(n / 2)) for w < ceil(n / 2), the second of block w - ceil(n / 2) after."""
    if key.shape != (2,) or counter.shape != (2,) or key.dtype is not dtypes.uint32 or counter.dtype is not dtypes.uint32:
      raise ValueError(f"random_bits: key and counter are 2 uint32 words, got {key.shape} {key.dtype} and {counter.shape} {counter.dtype}")
    low, high = counter[0:1], counter[1:2]
    chunks = []
    for i in range(0, num, _M32):
      n, h = min(num - i, _M32), -(-min(num - i, _M32) // 2)
      c_low = low + (i & _M32)
      c_high = high + (i >> 32) + (c_low < low).cast(dtypes.uint32)
      k0, k1 = threefry2x32(key[0:1], key[1:2], c_low, c_high)
      idx = type(key).arange(h, dtype=dtypes.uint32, device=key.device)
      x0, x1 = threefry2x32(k0, k1, idx, idx + h)
      chunks.append(x0.cat(x1)[:n])
    return chunks[0].cat(*chunks[1:]) if chunks else counter[0:0]

  @staticmethod
  def _finish(t: Tensor, requires_grad: bool | None) -> Tensor:
    if requires_grad is not None: t.requires_grad = requires_grad
    return t

  @staticmethod
  def _float_dtype(dtype: Any, op: str) -> DType:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt._is_float or dt.name.startswith("weak"):
      raise ValueError(f"{op}: needs a concrete float dtype, got {dt}")
    return dt

  # ** uniform and normal floats **
  # The creators take only the keywords they name (an unknown one, e.g. torch's generator=, is a TypeError as in
  # tinygrad); requires_grad is kept from the tinygrad versions that had it. Everything but rand is built on rand
  # with tinygrad's formulas, so seeded results match it.
  @classmethod
  def rand(cls, *shape, device: str | None = None, dtype: Any = None, contiguous: bool = True, requires_grad: bool | None = None) -> Tensor:
    """Uniform floats in [0, 1). contiguous=False leaves the generator fused into whatever consumes it."""
    dt = cls._float_dtype(dtype, "rand")
    if isinstance(device, (tuple, list)):
      raise ValueError(f"rand: one device, not {tuple(device)} (shard a random tensor, or take rand_like of a sharded one)")
    s = _shape_of(shape)
    if (n := prod(s)) == 0:
      cls._next_rng_words(device, 0)  # no words, but the device takes its place in the key order as in tinygrad
      return cls._finish(cls.full(s, 0.0, dtype=dt, device=device).contiguous(), requires_grad)  # type: ignore[attr-defined]
    out = cls._unit(n, dt, device).reshape(s)
    return cls._finish(out.contiguous() if contiguous else out, requires_grad)

  def rand_like(self: Tensor, dtype: Any = None, device: str | None = None, contiguous: bool = True,
                requires_grad: bool | None = None) -> Tensor:
    """rand of self's shape, in self's dtype (default_float when that is not a float) unless dtype is given. Of a
    sharded tensor, sharded as it is (device must then be None): a replica holds the same values on every device,
    and the shards of a split axis are drawn each on its device."""
    dt = dtype if dtype is not None else (self.dtype if self.dtype._is_float else dtypes.default_float)
    if type(devices := self.device) is not tuple:
      return type(self).rand(*self.shape, device=devices if device is None else device, dtype=dt, contiguous=contiguous,
                             requires_grad=requires_grad)
    if device is not None: raise RuntimeError(f"rand_like: a tensor sharded across {devices} takes no device (got {device})")
    if (axis := self.uop.axis) is None:
      return type(self).rand(*self.shape, dtype=dt, contiguous=contiguous, requires_grad=requires_grad).shard(devices)
    shape = tuple(d // len(devices) if i == axis else d for i, d in enumerate(self.shape))
    shards = [type(self).rand(*shape, device=d, dtype=dt, contiguous=contiguous).uop for d in devices]
    return type(self)(UOp(Ops.MSTACK, dt, tuple(shards), (devices, axis)), device=devices, requires_grad=requires_grad)

  @classmethod
  def _randn(cls, shape: tuple[int, ...], device: str | None, dt: DType, contiguous: bool = True) -> Tensor:
    # Box-Muller from one float32 rand of (2, *shape): cos(2 pi u0) * sqrt(-2 ln(1 - u1)), then cast
    u = cls.rand(2, *shape, device=device, dtype=dtypes.float32)
    u0, u1 = (u.shrink(((i, i + 1),) + ((None,) * len(shape))).reshape(shape) for i in range(2))
    out = (u0 * (2 * math.pi)).cos() * ((1 - u1).log() * -2).sqrt()
    out = out.cast(dt)
    return out.contiguous() if contiguous else out

  @classmethod
  def randn(cls, *shape, dtype: Any = None, device: str | None = None, contiguous: bool = True,
            requires_grad: bool | None = None) -> Tensor:
    """Standard normal values (Box-Muller in float32). Any dtype, as in tinygrad: a non-float one is the cast of the
    float values (an int dtype truncates them, bool is "nonzero")."""
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if dt.name.startswith("weak"): raise ValueError(f"randn: needs a concrete dtype, got {dt}")
    return cls._finish(cls._randn(_shape_of(shape), device, dt, contiguous), requires_grad)

  def randn_like(self: Tensor, dtype: Any = None, device: str | None = None, contiguous: bool = True,
                 requires_grad: bool | None = None) -> Tensor:
    dt = dtype if dtype is not None else (self.dtype if self.dtype._is_float else dtypes.default_float)
    return type(self).randn(*self.shape, dtype=dt, device=self.device if device is None else device, contiguous=contiguous,
                            requires_grad=requires_grad)

  @classmethod
  def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, dtype: Any = None, device: str | None = None,
             requires_grad: bool | None = None) -> Tensor:
    if std < 0: raise ValueError(f"normal: std must be >= 0, got {std}")
    return cls._finish(std * cls.randn(*shape, dtype=dtype, device=device) + mean, requires_grad)

  @classmethod
  def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, dtype: Any = None, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    """Uniform values in [low, high): (high - low) * rand, cast to dtype, plus low (tinygrad's order of operations)."""
    if not low < high: raise ValueError(f"uniform: needs low < high, got low={low}, high={high}")
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt._is_float:
      return cls.randint(*shape, low=math.ceil(low), high=math.ceil(high), dtype=dt, device=device, requires_grad=requires_grad)
    return cls._finish(((high - low) * cls.rand(*shape, device=device)).cast(dt) + low, requires_grad)

  @classmethod
  def randint(cls, *shape, low: int = 0, high: int = 10, dtype: Any = dtypes.int32, device: str | None = None,
              requires_grad: bool | None = None) -> Tensor:
    """Uniform integers in [low, high): low + trunc((high - low) * rand) as tinygrad, the sum taken in int64 so a
    range that fills the dtype does not wrap (ranges beyond 2**24 get float32's granularity, as there)."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
      raise TypeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
    dt = to_dtype(dtype)
    if not dt._is_int: raise TypeError(f"randint: dtype must be an int dtype, got {dt}")
    if low >= high: raise ValueError(f"randint: needs low < high, got low={low}, high={high}")
    if low < dt.min or high - 1 > dt.max: raise ValueError(f"randint: [{low}, {high}) does not fit in {dt}")
    span = high - low
    off = (span * cls.rand(*shape, device=device)).cast(dtypes.int64).minimum(span - 1)  # a float32 product may round up to span
    return cls._finish((off + low).cast(dt).contiguous(), requires_grad)

  # ** initializers **
  @classmethod
  def scaled_uniform(cls, *shape, requires_grad: bool | None = None, **kwargs) -> Tensor:
    """Uniform in [-1, 1) scaled by prod(shape) ** -0.5."""
    s = _shape_of(shape)
    return cls._finish(cls.uniform(*s, low=-1.0, high=1.0, **kwargs).mul(max(prod(s), 1) ** -0.5), requires_grad)

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
  def randperm(cls, n: int, device: str | None = None, dtype: Any = dtypes.int32, requires_grad: bool | None = None) -> Tensor:
    """A uniformly random permutation of 0..n-1, drawn as tinygrad draws it (the argsort of rand(n)), so a seed gives
    tinygrad's permutation."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0: raise ValueError(f"randperm: n must be a non-negative int, got {n!r}")
    return cls._finish(cls.rand(n, device=device).argsort().cast(to_dtype(dtype)), requires_grad)  # type: ignore[attr-defined]

  def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """num_samples indices per row drawn with probability proportional to the (non-negative) weights in self; bad
    arguments are an AssertionError, as in tinygrad."""
    if not 1 <= self.ndim <= 2: raise AssertionError(f"multinomial: needs a 1-D or 2-D tensor of weights, got shape {self.shape}")
    if not isinstance(num_samples, int) or num_samples <= 0: raise AssertionError(f"multinomial: num_samples must be positive, got {num_samples}")
    w = (self.unsqueeze(0) if self.ndim == 1 else self).cast(dtypes.float32)
    rows, n = w.shape
    if not replacement and num_samples > n:
      raise AssertionError(f"multinomial: {num_samples} samples without replacement from {n} categories")
    # the draws are laid out as tinygrad's, so seeded samples match
    if replacement or num_samples == 1:
      cdf = w.cumsum(1)
      cdf = cdf / cdf.shrink((None, (n - 1, n)))
      u = type(self).rand(num_samples, rows, 1, device=self.device)
      out = (u >= cdf).cast(dtypes.int32).sum(-1).minimum(n - 1).permute(1, 0)
    else:
      # Efraimidis-Spirakis: the num_samples largest keys log2(u) / w
      u = type(self).rand(rows, n, device=self.device, dtype=dtypes.float32)
      keys = u.log2() / w
      out = type(self)._select_by_rank(type(self)._rank_desc(keys), num_samples)
    out = out.cast(dtypes.int32)
    return out.reshape(num_samples) if self.ndim == 1 else out

  def dropout(self: Tensor, p: float = 0.5) -> Tensor:
    """In training (Tensor.training, or Context(TRAINING=1)), zeroes each element with
    probability p and scales the rest by 1/(1-p); otherwise returns self."""
    if not 0 <= p <= 1: raise ValueError(f"dropout: p={p} is out of range [0, 1]")
    if not is_training(type(self)) or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = (self.rand_like(dtype=dtypes.default_float, contiguous=False) >= p).contiguous()
    # a dropped element is 0 even where self is inf or nan (a select, not a product), as in tinygrad
    return keep.where(self, 0) / (1.0 - p)

