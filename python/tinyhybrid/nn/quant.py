"""Dequantization of ggml's block formats with Tensor ops, so it runs on the device: each format's bit fields are
unpacked from uint8 blocks by shifts, masks and casts, then scaled. The layouts are those of ggml-common.h (and of
the gguf package's numpy reference dequantizers, which the tests compare against)."""
from __future__ import annotations

from tinyhybrid.dtype import dtypes
from tinyhybrid.tensor import Tensor

QK_K = 256  # elements in a k-quant super-block

# ggml type id -> (name, elements per block, bytes per block)
GGML_QUANT: dict[int, tuple[str, int, int]] = {
  2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34),
  10: ("Q2_K", QK_K, 84), 11: ("Q3_K", QK_K, 110), 12: ("Q4_K", QK_K, 144), 13: ("Q5_K", QK_K, 176), 14: ("Q6_K", QK_K, 210),
  20: ("IQ4_NL", 32, 18), 23: ("IQ4_XS", QK_K, 136), 39: ("MXFP4", 32, 17)}

# IQ4_NL's and IQ4_XS's 16 levels (ggml-common.h's kvalues_iq4nl): a 4-bit code picks one, times the block's scale
IQ4_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def _f16(b: Tensor) -> Tensor:
  """(nb, 2) little-endian bytes -> (nb, 1) float32 of the float16 they hold (bitcast only keeps the item size, so
  the bytes are joined into a uint16 first)."""
  return (b[:, 0:1].cast(dtypes.uint16) | (b[:, 1:2].cast(dtypes.uint16) << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


def _nibbles(b: Tensor, dim: int = 1) -> Tensor:
  """The low nibbles, then the high ones, stacked at dim ((nb, k) bytes -> (nb, 2, k) by default)."""
  return Tensor.stack(b & 0xF, b >> 4, dim=dim)


def _crumbs(b: Tensor, dim: int) -> Tensor:
  """The four 2-bit fields of each byte, lowest first, stacked at dim."""
  return Tensor.stack(*[(b >> s) & 3 for s in (0, 2, 4, 6)], dim=dim)


def _bits(b: Tensor, dim: int) -> Tensor:
  """The eight bits of each byte, lowest first, stacked at dim."""
  return Tensor.stack(*[(b >> s) & 1 for s in range(8)], dim=dim)


def _k_scale_min(s: Tensor) -> tuple[Tensor, Tensor]:
  """The eight 6-bit scales and mins packed into the 12 bytes of a Q4_K/Q5_K block, as (nb, 8, 1) each."""
  d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
  sc = (d & 0x3F).cat((md & 0xF) | ((d >> 2) & 0x30), dim=1)
  mn = (m & 0x3F).cat((md >> 4) | ((m >> 2) & 0x30), dim=1)
  return sc.cast(dtypes.float32).unsqueeze(-1), mn.cast(dtypes.float32).unsqueeze(-1)


def _q4_0(b: Tensor) -> Tensor: return (_nibbles(b[:, 2:]).flatten(1).cast(dtypes.float32) - 8) * _f16(b[:, 0:2])
def _q4_1(b: Tensor) -> Tensor: return _nibbles(b[:, 4:]).flatten(1).cast(dtypes.float32) * _f16(b[:, 0:2]) + _f16(b[:, 2:4])
def _q5(b: Tensor, qh: int) -> Tensor:
  """Low nibbles with a fifth bit from the 32-bit mask at byte qh: element i takes bit i%8 of mask byte i//8."""
  return (_nibbles(b[:, qh + 4:]).flatten(1) | (_bits(b[:, qh:qh + 4], dim=2).flatten(1) << 4)).cast(dtypes.float32)
def _q5_0(b: Tensor) -> Tensor: return (_q5(b, 2) - 16) * _f16(b[:, 0:2])
def _q5_1(b: Tensor) -> Tensor: return _q5(b, 4) * _f16(b[:, 0:2]) + _f16(b[:, 2:4])
def _q8_0(b: Tensor) -> Tensor: return b[:, 2:].bitcast(dtypes.int8).cast(dtypes.float32) * _f16(b[:, 0:2])


def _q2_k(b: Tensor) -> Tensor:
  nb, scales = b.shape[0], b[:, 0:16]
  q = _crumbs(b[:, 16:80].reshape(nb, 2, 32), dim=2).reshape(nb, 16, 16).cast(dtypes.float32)
  dl = (_f16(b[:, 80:82]) * (scales & 0xF).cast(dtypes.float32)).unsqueeze(-1)
  ml = (_f16(b[:, 82:84]) * (scales >> 4).cast(dtypes.float32)).unsqueeze(-1)
  return (dl * q - ml).flatten(1)


def _q3_k(b: Tensor) -> Tensor:
  nb, s = b.shape[0], b[:, 96:108]
  # 16 6-bit scales: low 4 bits from nibbles of bytes 0-7, high 2 bits from the crumbs of bytes 8-11; biased by 32
  sc = (_nibbles(s[:, 0:8]).flatten(1) | (_crumbs(s[:, 8:12], dim=1).flatten(1) << 4)).cast(dtypes.float32) - 32
  ql = _crumbs(b[:, 32:96].reshape(nb, 2, 32), dim=2).reshape(nb, 16, 16).cast(dtypes.int8)
  # a clear bit in the high mask subtracts 4
  qh = _bits(b[:, 0:32].reshape(nb, 1, 32), dim=2).reshape(nb, 16, 16).cast(dtypes.int8)
  return ((_f16(b[:, 108:110]) * sc).unsqueeze(-1) * (ql - (1 - qh) * 4).cast(dtypes.float32)).flatten(1)


def _q45_k(b: Tensor, q: Tensor) -> Tensor:
  sc, mn = _k_scale_min(b[:, 4:16])
  return ((_f16(b[:, 0:2]).unsqueeze(-1) * sc) * q.cast(dtypes.float32) - _f16(b[:, 2:4]).unsqueeze(-1) * mn).flatten(1)
# eight groups of 32 elements: group 2j is the low nibbles of bytes 32j..32j+31, group 2j+1 their high nibbles
def _q4_k(b: Tensor) -> Tensor: return _q45_k(b, _nibbles(b[:, 16:144].reshape(-1, 4, 32), dim=2).reshape(-1, 8, 32))
def _q5_k(b: Tensor) -> Tensor:
  nb = b.shape[0]
  ql = _nibbles(b[:, 48:176].reshape(nb, 4, 32), dim=2).reshape(nb, 8, 32)
  return _q45_k(b, ql | (_bits(b[:, 16:48].reshape(nb, 1, 32), dim=2).reshape(nb, 8, 32) << 4))


def _q6_k(b: Tensor) -> Tensor:
  nb = b.shape[0]
  ql = _nibbles(b[:, 0:128].reshape(nb, 2, 64), dim=2).reshape(nb, 8, 32)
  qh = _crumbs(b[:, 128:192].reshape(nb, 2, 32), dim=2).reshape(nb, 8, 32)
  q = ((ql | (qh << 4)).cast(dtypes.int8) - 32).reshape(nb, 16, 16).cast(dtypes.float32)
  d = _f16(b[:, 208:210]) * b[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32)
  return (d.unsqueeze(-1) * q).flatten(1)


def _mxfp4(b: Tensor) -> Tensor:
  # the scale is an e8m0 exponent, read as half its power of two: 2^(e-128) (a subnormal float32 for e < 2)
  e = b[:, 0:1].cast(dtypes.uint32)
  d = (e < 2).where(0x00200000 * (e + 1), (e - 1) * 0x00800000).bitcast(dtypes.float32)
  # e2m1 codes doubled: magnitudes 0, 1, 2, 3, 4, 6, 8, 12 with bit 3 the sign
  c = _nibbles(b[:, 1:17]).flatten(1).cast(dtypes.int32)
  m = c & 7
  mag = (m < 4).where(m, (2 + (m & 1)) * 2 * (1 + (m >= 6).cast(dtypes.int32)))
  return (mag * (1 - 2 * (c >> 3))).cast(dtypes.float32) * d


def _iq4_levels(codes: Tensor) -> Tensor:
  """IQ4's non-linear levels of 4-bit codes, chosen bit by bit (a tree of selects: elementwise, so it fuses into the
  matmul that reads the weight, where a table lookup would be a reduce that leaves the weight unpacked in memory)."""
  levels: list = [float(v) for v in IQ4_LEVELS]
  for bit in range(4):
    on = ((codes >> bit) & 1).cast(dtypes.bool)
    levels = [on.where(levels[i + 1], levels[i]) for i in range(0, len(levels), 2)]
  return levels[0]


def _iq4_nl(b: Tensor) -> Tensor: return _iq4_levels(_nibbles(b[:, 2:]).flatten(1)) * _f16(b[:, 0:2])


def _iq4_xs(b: Tensor) -> Tensor:
  # eight sub-blocks of 32, each with a 6-bit scale: its low 4 bits in scales_l (two a byte), its high 2 in scales_h
  nb = b.shape[0]
  lo = _nibbles(b[:, 4:8], dim=2).flatten(1)  # (nb, 8): sub-block i's low bits
  hi = _crumbs(b[:, 2:4], dim=2).flatten(1)   # (nb, 8): its high bits (scales_h is little-endian)
  dl = _f16(b[:, 0:2]) * ((lo | (hi << 4)).cast(dtypes.float32) - 32)
  q = _iq4_levels(_nibbles(b[:, 8:136].reshape(nb, 8, 16), dim=2).reshape(nb, 8, 32))
  return (dl.unsqueeze(-1) * q).flatten(1)


_DEQUANT = {2: _q4_0, 3: _q4_1, 6: _q5_0, 7: _q5_1, 8: _q8_0, 10: _q2_k, 11: _q3_k, 12: _q4_k, 13: _q5_k, 14: _q6_k, 20: _iq4_nl, 23: _iq4_xs, 39: _mxfp4}


def dequantize(blocks: Tensor, ggml_type: int) -> Tensor:
  """(nb, bytes per block) uint8 blocks of a ggml quantized type -> (nb * elements per block,) float32, lazily."""
  if ggml_type not in GGML_QUANT: raise ValueError(f"ggml type {ggml_type} is not a supported quantized type")
  name, _, type_size = GGML_QUANT[ggml_type]
  if blocks.dtype is not dtypes.uint8 or blocks.ndim != 2 or blocks.shape[1] != type_size:
    raise ValueError(f"dequantize {name}: blocks must be (n, {type_size}) uint8, got {blocks.shape} {blocks.dtype}")
  return _DEQUANT[ggml_type](blocks).flatten()
