"""Dequantization of ggml's block formats with Tensor ops, so it runs on the device: each format's bit fields are
unpacked from uint8 blocks by shifts, masks and casts, then scaled. The layouts are those of ggml-common.h (and of
the gguf package's numpy reference dequantizers, which the tests compare against)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

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
  """(nb, 2) little-endian bytes -> (nb, 1) float16 (bitcast only keeps the item size, so the bytes are joined into a
  uint16 first)."""
  return (b[:, 0:1].cast(dtypes.uint16) | (b[:, 1:2].cast(dtypes.uint16) << 8)).bitcast(dtypes.float16)


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
  """The eight 6-bit scales and mins packed into the 12 bytes of a Q4_K/Q5_K block, as (nb, 8) uint8 each."""
  d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
  return (d & 0x3F).cat((md & 0xF) | ((d >> 2) & 0x30), dim=1), (m & 0x3F).cat((md >> 4) | ((m >> 2) & 0x30), dim=1)


Fields = dict[str, Tensor]  # a block's fields by name: (nb, 1) float16 for a half, (nb, bytes) uint8 for the rest

# each type's fields: name -> (first byte, last byte + 1); the 2-byte ones named in HALVES are float16 scales
FIELDS: dict[int, dict[str, tuple[int, int]]] = {
  2: {"d": (0, 2), "qs": (2, 18)}, 3: {"d": (0, 2), "m": (2, 4), "qs": (4, 20)},
  6: {"d": (0, 2), "qh": (2, 6), "qs": (6, 22)}, 7: {"d": (0, 2), "m": (2, 4), "qh": (4, 8), "qs": (8, 24)},
  8: {"d": (0, 2), "qs": (2, 34)},
  10: {"scales": (0, 16), "qs": (16, 80), "d": (80, 82), "dmin": (82, 84)},
  11: {"hmask": (0, 32), "qs": (32, 96), "scales": (96, 108), "d": (108, 110)},
  12: {"d": (0, 2), "dmin": (2, 4), "scales": (4, 16), "qs": (16, 144)},
  13: {"d": (0, 2), "dmin": (2, 4), "scales": (4, 16), "qh": (16, 48), "qs": (48, 176)},
  14: {"ql": (0, 128), "qh": (128, 192), "scales": (192, 208), "d": (208, 210)},
  20: {"d": (0, 2), "qs": (2, 18)}, 23: {"d": (0, 2), "scales_h": (2, 4), "scales_l": (4, 8), "qs": (8, 136)},
  39: {"e": (0, 1), "qs": (1, 17)}}
HALVES = ("d", "dmin", "m")


def block_fields(blocks: Tensor, ggml_type: int) -> Fields:
  """The fields of (nb, bytes per block) uint8 blocks, as lazy slices (halves read as float16)."""
  return {k: _f16(blocks[:, a:b]) if k in HALVES else blocks[:, a:b] for k, (a, b) in FIELDS[ggml_type].items()}


@dataclass(frozen=True)
class Format:
  """How a type's elements are made from its parts: w = d * sc * (value(q) - bias) - dmin * mn, where q is an
  element's code of `bits` bits (unsigned, but Q8_0's int8), d and dmin the block's scales, sc and mn a group's
  (of `group` elements) integer scale and min. value is the identity, or IQ4's levels, or MXFP4's e2m1 numbers."""
  bits: int
  group: int
  bias: int = 0
  value: str = "int"  # int | iq4 | e2m1


FORMATS: dict[int, Format] = {2: Format(4, 32, 8), 3: Format(4, 32), 6: Format(5, 32, 16), 7: Format(5, 32), 8: Format(8, 32),
  10: Format(2, 16), 11: Format(3, 16, 4), 12: Format(4, 32), 13: Format(5, 32), 14: Format(6, 16, 32),
  20: Format(4, 32, value="iq4"), 23: Format(4, 32, value="iq4"), 39: Format(4, 32, value="e2m1")}


@dataclass(frozen=True)
class Parts:
  """A block's elements taken apart (Format says how they join): q (nb, block) uint8 codes, d (nb, 1) scale, and
  where the type has them, sc and mn (nb, groups) integers and dmin (nb, 1)."""
  q: Tensor
  d: Tensor
  sc: Tensor | None = None
  dmin: Tensor | None = None
  mn: Tensor | None = None


def _q4(f: Fields) -> Tensor:
  """A 32-element block's 4-bit codes: the low nibbles of qs, then the high ones."""
  return _nibbles(f["qs"]).flatten(1)


def _q5(f: Fields) -> Tensor:
  """Low nibbles with a fifth bit from the 32-bit mask qh: element i takes bit i%8 of mask byte i//8."""
  return _q4(f) | (_bits(f["qh"], dim=2).flatten(1) << 4)


def _q2_k(f: Fields) -> Parts:
  nb, scales = f["qs"].shape[0], f["scales"]
  return Parts(_crumbs(f["qs"].reshape(nb, 2, 32), dim=2).reshape(nb, 256), f["d"], scales & 0xF, f["dmin"], scales >> 4)


def _q3_k(f: Fields) -> Parts:
  s, nb = f["scales"], f["qs"].shape[0]
  # 16 6-bit scales: low 4 bits from nibbles of bytes 0-7, high 2 bits from the crumbs of bytes 8-11; biased by 32
  sc = (_nibbles(s[:, 0:8]).flatten(1) | (_crumbs(s[:, 8:12], dim=1).flatten(1) << 4)).cast(dtypes.int8) - 32
  ql = _crumbs(f["qs"].reshape(nb, 2, 32), dim=2).reshape(nb, 256)
  # a clear bit in the high mask subtracts 4: the code is ql + 4 * bit, biased by 4
  return Parts(ql | (_bits(f["hmask"].reshape(nb, 1, 32), dim=2).reshape(nb, 256) << 2), f["d"], sc)


def _q45_k(f: Fields, q: Tensor) -> Parts:
  sc, mn = _k_scale_min(f["scales"])
  return Parts(q, f["d"], sc, f["dmin"], mn)
# eight groups of 32 elements: group 2j is the low nibbles of bytes 32j..32j+31, group 2j+1 their high nibbles
def _q4_k(f: Fields) -> Parts: return _q45_k(f, _nibbles(f["qs"].reshape(-1, 4, 32), dim=2).reshape(-1, 256))
def _q5_k(f: Fields) -> Parts:
  nb = f["qs"].shape[0]
  ql = _nibbles(f["qs"].reshape(nb, 4, 32), dim=2).reshape(nb, 256)
  return _q45_k(f, ql | (_bits(f["qh"].reshape(nb, 1, 32), dim=2).reshape(nb, 256) << 4))


def _q6_k(f: Fields) -> Parts:
  nb = f["ql"].shape[0]
  ql = _nibbles(f["ql"].reshape(nb, 2, 64), dim=2).reshape(nb, 256)
  qh = _crumbs(f["qh"].reshape(nb, 2, 32), dim=2).reshape(nb, 256)
  return Parts(ql | (qh << 4), f["d"], f["scales"].bitcast(dtypes.int8))


def _mxfp4(f: Fields) -> Parts:
  # the scale is an e8m0 exponent, read as half its power of two: 2^(e-128) (a subnormal float32 for e < 2)
  e = f["e"].cast(dtypes.uint32)
  return Parts(_q4(f), (e < 2).where(0x00200000 * (e + 1), (e - 1) * 0x00800000).bitcast(dtypes.float32))


def _iq4_xs(f: Fields) -> Parts:
  # eight sub-blocks of 32, each with a 6-bit scale: its low 4 bits in scales_l (two a byte), its high 2 in scales_h
  nb = f["qs"].shape[0]
  lo = _nibbles(f["scales_l"], dim=2).flatten(1)  # (nb, 8): sub-block i's low bits
  hi = _crumbs(f["scales_h"], dim=2).flatten(1)   # (nb, 8): its high bits (scales_h is little-endian)
  return Parts(_nibbles(f["qs"].reshape(nb, 8, 16), dim=2).reshape(nb, 256), f["d"], (lo | (hi << 4)).cast(dtypes.int8) - 32)


_PARTS: dict[int, Callable[[Fields], Parts]] = {
  2: lambda f: Parts(_q4(f), f["d"]), 3: lambda f: Parts(_q4(f), f["d"], dmin=-f["m"]), 6: lambda f: Parts(_q5(f), f["d"]),
  7: lambda f: Parts(_q5(f), f["d"], dmin=-f["m"]), 8: lambda f: Parts(f["qs"].bitcast(dtypes.int8), f["d"]),
  10: _q2_k, 11: _q3_k, 12: _q4_k, 13: _q5_k, 14: _q6_k, 20: lambda f: Parts(_q4(f), f["d"]), 23: _iq4_xs, 39: _mxfp4}


def parts(fields: Fields, ggml_type: int) -> Parts:
  """A type's fields (block_fields' slices) taken apart into codes and scales, lazily."""
  return _PARTS[ggml_type](fields)


def _iq4_levels(codes: Tensor) -> Tensor:
  """IQ4's non-linear levels of 4-bit codes, chosen bit by bit (a tree of selects: elementwise, so it fuses into the
  matmul that reads the weight, where a table lookup would be a reduce that leaves the weight unpacked in memory)."""
  levels: list = [float(v) for v in IQ4_LEVELS]
  for bit in range(4):
    on = ((codes >> bit) & 1).cast(dtypes.bool)
    levels = [on.where(levels[i + 1], levels[i]) for i in range(0, len(levels), 2)]
  return levels[0]


def _e2m1(codes: Tensor) -> Tensor:
  """MXFP4's 4-bit e2m1 numbers, doubled (the scale is half its power of two): magnitudes 0, 1, 2, 3, 4, 6, 8, 12,
  bit 3 the sign."""
  c = codes.cast(dtypes.int32)
  m = c & 7
  mag = (m < 4).where(m, (2 + (m & 1)) * 2 * (1 + (m >= 6).cast(dtypes.int32)))
  return (mag * (1 - 2 * (c >> 3))).cast(dtypes.float32)


def join(p: Parts, ggml_type: int) -> Tensor:
  """The float32 elements of a type's parts, lazily, in q's (rows, cols) shape: one block a row (block fields), or
  whole weight rows (planes); d and dmin have a column per block of the row, sc and mn one per group. The order of
  the float operations is the reference dequantizers', so the results are theirs bit for bit."""
  fmt, (rows, cols) = FORMATS[ggml_type], p.q.shape
  groups = cols // fmt.group
  def per_group(t: Tensor) -> Tensor:  # a (rows, blocks) scale, repeated for each group of its block
    return t.cast(dtypes.float32).reshape(rows, t.shape[1], 1).expand(rows, t.shape[1], groups // t.shape[1]).reshape(rows, groups)
  value = _iq4_levels(p.q) if fmt.value == "iq4" else _e2m1(p.q) if fmt.value == "e2m1" else p.q.cast(dtypes.float32)
  if fmt.bias: value = value - fmt.bias
  scale = per_group(p.d)
  if p.sc is not None: scale = scale * p.sc.cast(dtypes.float32)
  w = scale.reshape(rows, groups, 1) * value.reshape(rows, groups, fmt.group)
  if p.dmin is not None:
    low = per_group(p.dmin) if p.mn is None else per_group(p.dmin) * p.mn.cast(dtypes.float32)
    w = w - low.reshape(rows, groups, 1)
  return w.reshape(rows, cols)


def dequantize(blocks: Tensor, ggml_type: int) -> Tensor:
  """(nb, bytes per block) uint8 blocks of a ggml quantized type -> (nb * elements per block,) float32, lazily."""
  if ggml_type not in GGML_QUANT: raise ValueError(f"ggml type {ggml_type} is not a supported quantized type")
  name, _, type_size = GGML_QUANT[ggml_type]
  if blocks.dtype is not dtypes.uint8 or blocks.ndim != 2 or blocks.shape[1] != type_size:
    raise ValueError(f"dequantize {name}: blocks must be (n, {type_size}) uint8, got {blocks.shape} {blocks.dtype}")
  return join(parts(block_fields(blocks, ggml_type), ggml_type), ggml_type).flatten()
