"""Keccak (SHA-3, SHAKE) over a tensor's last dimension, as tinygrad's Tensor.keccak: the sponge and its f1600
permutation written as uint64 tensor arithmetic, so it runs on any device as ordinary kernels."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

_M64 = (1 << 64) - 1
# (rate in bytes, domain-separation byte) of the named configurations
CONFIGS = {"sha3_224": (144, 6), "sha3_256": (136, 6), "sha3_384": (104, 6), "sha3_512": (72, 6), "shake_128": (168, 31),
           "shake_256": (136, 31)}


def _round_constants() -> list[int]:
  """The 24 iota constants, from the LFSR x^8 + x^6 + x^5 + x^4 + 1 of the Keccak reference."""
  out, r = [], 1
  for _ in range(24):
    rc = 0
    for j in range(7):
      if r & 1: rc |= 1 << ((1 << j) - 1)
      r = ((r << 1) ^ 0x171) if r & 0x80 else r << 1
    out.append(rc)
  return out


def _rotations() -> dict[tuple[int, int], int]:
  """rho's rotation of lane (x, y): (t + 1)(t + 2) / 2 along the walk (x, y) -> (y, 2x + 3y) from (1, 0)."""
  rot, (x, y) = {(0, 0): 0}, (1, 0)
  for t in range(24):
    rot[(x, y)] = ((t + 1) * (t + 2) // 2) % 64
    x, y = y, (2 * x + 3 * y) % 5
  return rot


_RC, _ROT = _round_constants(), _rotations()


# pi moves lane (x, y) to (y, 2x + 3y): the new lane j reads lane _PI[j] (lanes at x + 5 y)
_PI = [0] * 25
for _x in range(5):
  for _y in range(5): _PI[_y + 5 * ((2 * _x + 3 * _y) % 5)] = _x + 5 * _y


def _roll_x(a: Tensor, k: int) -> Tensor:
  """a[..., (x - k) % 5] along the last axis (x)."""
  k %= 5
  return a if k == 0 else a[..., 5 - k:].cat(a[..., :5 - k], dim=-1)


def _round(s: Tensor, rho_mul: Tensor, rho_div: Tensor, rc: Tensor) -> Tensor:
  """One round of f1600 on the (batch, 25) state. The per-lane rotations and the round constant come from buffers, so
  all 24 rounds are one compiled kernel: rotl(v, r) is v * 2**r | v // 2**(64 - r) (and v | v for r = 0)."""
  bs = s.shape[0]
  a = s.reshape(bs, 5, 5)  # [y][x]
  c = a[:, 0] ^ a[:, 1] ^ a[:, 2] ^ a[:, 3] ^ a[:, 4]
  c1 = _roll_x(c, -1)
  a = a ^ (_roll_x(c, 1) ^ ((c1 << 1) | (c1 >> 63))).unsqueeze(1)  # theta
  s = a.reshape(bs, 25)
  s = (s * rho_mul) | (s // rho_div)  # rho
  s = type(s).stack(*[s[:, i] for i in _PI], dim=1)  # pi
  a = s.reshape(bs, 5, 5)
  a = a ^ (~_roll_x(a, -1) & _roll_x(a, -2))  # chi
  return a.reshape(bs, 25) ^ rc  # iota


HASH_PIECE, HASH_LEAF = 1 << 20, 4096  # Tensor.hash's tree: bytes a piece, bytes a leaf (tinygrad's)


class HashMixin:
  __slots__ = ()

  def keccak(self: Tensor, cfg: str | tuple[int, int] = "sha3_256") -> Tensor:
    """The Keccak digest of the last dimension's bytes (a shape (..., n) tensor of any dtype, read as its bytes):
    "sha3_224", "sha3_256" (the default), "sha3_384", "sha3_512", "shake_128" and "shake_256" (their first
    (200 - rate) / 2 bytes), or (rate, domain byte). uint8 of shape (..., digest bytes)."""
    if isinstance(cfg, str) and cfg not in CONFIGS: raise ValueError(f"keccak: unknown configuration {cfg!r}; known: {', '.join(CONFIGS)}")
    rate, dsbyte = CONFIGS[cfg] if isinstance(cfg, str) else cfg
    if not (0 < rate < 200 and rate % 8 == 0): raise ValueError(f"keccak: a rate of {rate} bytes is not a multiple of 8 below 200")
    if self.ndim == 0: raise ValueError("keccak: hashes the last dimension; a 0-d tensor has none")
    data = self.bitcast(dtypes.uint8) if self.dtype.itemsize == 1 else self.contiguous().bitcast(dtypes.uint8)
    lead, n = data.shape[:-1], data.shape[-1]
    data = data.reshape(bs := prod(lead), n)
    blocks = n // rate + 1
    # the padding: the domain byte after the message, 0x80 in the block's last byte (the two share it when they meet)
    pad = [0] * (blocks * rate - n)
    pad[0] ^= dsbyte
    pad[-1] ^= 0x80
    padded = data.cat(type(self)(pad, dtype=dtypes.uint8, device=self.device).reshape(1, -1).expand(bs, len(pad)), dim=1)
    words = padded.reshape(bs, blocks, rate // 8, 8).bitcast(dtypes.uint64).reshape(bs, blocks, rate // 8)
    T, dev = type(self), self.device
    rot = [_ROT[(i % 5, i // 5)] for i in range(25)]
    rho_mul = T([(1 << r) & _M64 for r in rot], dtype=dtypes.uint64, device=dev)
    rho_div = T([1 << (64 - r) if r else 1 for r in rot], dtype=dtypes.uint64, device=dev)
    rcs = [T([rc] + [0] * 24, dtype=dtypes.uint64, device=dev) for rc in _RC]
    state = T.zeros(bs, 25, dtype=dtypes.uint64, device=dev).contiguous()
    for k in range(blocks):
      state = state ^ words[:, k].pad((None, (0, 25 - rate // 8)))
      for rc in rcs: state = _round(state, rho_mul, rho_div, rc).contiguous()
    out = (200 - rate) // 2
    digest = state[:, :-(-out // 8)].bitcast(dtypes.uint8).reshape(bs, -1)[:, :out]
    return digest.reshape(*lead, out)

  def _hash_1mb(self: Tensor) -> Tensor:
    """A 16-byte digest per row of a (n, HASH_PIECE) uint8 tensor: SHAKE-128 of each HASH_LEAF-byte part, then of
    their digests."""
    if self.dtype is not dtypes.uint8 or self.ndim != 2 or self.shape[1] != HASH_PIECE:
      raise ValueError(f"_hash_1mb: wants (n, {HASH_PIECE}) uint8, got {self.shape} {self.dtype}")
    return self.reshape(-1, HASH_LEAF).keccak("shake_128").reshape(self.shape[0], -1).keccak("shake_128")

  def hash(self: Tensor) -> Tensor:
    """tinygrad's 16-byte digest of a tensor's bytes: a tree of SHAKE-128 over zero-padded 1 MiB pieces (_hash_1mb),
    up to one. uint8 of shape (16,)."""
    data = self.flatten().bitcast(dtypes.uint8)
    if not isinstance(n := data.shape[0], int): raise ValueError("hash: needs a tensor of concrete shape")
    chunks = -(-n // HASH_PIECE)
    while chunks > 1:
      data = data.pad_to((chunks * HASH_PIECE,)).reshape(chunks, HASH_PIECE)._hash_1mb().flatten()
      chunks = -(-chunks // (HASH_PIECE // 16))
    return data.pad_to((HASH_PIECE,)).unsqueeze(0)._hash_1mb().flatten()[:16]
