"""Weights as the .gguf file stores them, multiplied without ever writing them out as floats: the dequantization is
an elementwise expression of the weight's bits that the scheduler fuses into the matmul's kernel, so each weight is
read once, in its quantized form, and unpacked in registers.

At load, a quantized weight's blocks are taken apart (nn/quant.py's parts) into planes: each element's code split
into bit planes of 2, 4 or 8 bits, and the blocks' and groups' scales, each plane one contiguous run per row. The
file's bytes, or a few more where a type packs its group scales in fewer than 8 bits (Q4_K 4.625 bits a weight
against 4.5, Q2_K 3.125 against 2.625; Q6_K and the 32-element types as the file, but MXFP4's float32 scale makes 5
against 4.25), laid out for the kernel's loads:
in a chunk of 64 elements, byte c holds elements c, c + L, c + 2L... (L = 64 * bits / 8), so 16 elements of a row
are 16 consecutive bytes at one shift, a vector load, and each shift is known when the kernel is compiled (4-bit
codes on an 8-lane CPU: 16-bit words, L = 16). The
blocks themselves interleave codes with scales in 144- or 210-byte strides, which no vector load reads."""
from __future__ import annotations

import mmap
from typing import Callable

from tinyhybrid.device import Device
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import ContextVar, prod
from tinyhybrid.llm.gguf import GGUFTensor
from tinyhybrid.nn.quant import FORMATS, GGML_QUANT, Format, Parts, block_fields, dequantize, join
from tinyhybrid.nn.quant import parts as take_apart
from tinyhybrid.schedule.kernelize import INNER_SUM_TERMS
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import sint

# a code of n bits as planes of these widths, lowest bits first
PLANE_BITS = {2: (2,), 3: (2, 1), 4: (4,), 5: (4, 1), 6: (4, 2), 8: (8,)}
# the bits of the group scales and mins of the types whose groups have both (Q2_K, Q4_K, Q5_K), by ggml type
SCALE_BITS = {10: 4, 12: 6, 13: 6}
INT16_MAX = 32767
# a decode step's products with int8 activations (int_matvec); INT_MATVEC=0 multiplies them in float32
INT_MATVEC = ContextVar("INT_MATVEC", 1)
# the most bytes of int16 block sums one piece of int_matvec stores (blocks shorter than INNER_SUM_TERMS' sums): 4 MB
# pieces take the 0.5B model's Q6_K output layer in 3 (1.38-1.51 ms) where 1 MB ones took 12 (1.73-1.78), and its
# peak RSS stays 365 MB (the warm-up's peak is elsewhere)
PARTIAL_BYTES = 1 << 22


def int_dot_block(fmt: Format) -> int | None:
  """The elements of an activation block in the one-row product (int_matvec): the most, up to a group, whose sum
  of products of centered codes (|c| <= 2**(bits-1)) and int8 activations (|a| <= 127) fits an int16. None where
  that is under 8 or the codes are not integers: Q8_0's int8 codes, IQ4's levels and MXFP4's numbers."""
  if fmt.value != "int" or fmt.bits >= 8: return None
  n = fmt.group
  while n * (1 << (fmt.bits - 1)) * 127 > INT16_MAX: n //= 2
  return n if n >= 8 else None


def pack_plane(codes: Tensor, bits: int, chunk: int, word: int = 8) -> Tensor:
  """(rows, cols) codes of `bits` bits -> (rows, cols / chunk, chunk * bits / word) words of `word` bits (8 or 16):
  word c of a chunk holds the chunk's elements c, c + L, c + 2L... (L: the chunk's words), lowest first."""
  rows, cols = codes.shape
  v = codes.reshape(rows, cols // chunk, word // bits, chunk * bits // word).cast(dtypes.uint8 if word == 8 else dtypes.uint16)
  return or_shifted([v[:, :, s] for s in range(word // bits)], bits)


def or_shifted(parts: list[Tensor], bits: int) -> Tensor:
  """parts[0] | parts[1] << bits | parts[2] << 2 * bits ...: values of `bits` bits packed into one word, lowest first."""
  out = parts[0]
  for s, p in enumerate(parts[1:], 1): out = out | (p << (bits * s))
  return out


def unpack_plane(plane: Tensor, bits: int) -> Tensor:
  """pack_plane's inverse: (rows, chunks, words) -> (rows, chunks * words * word bits / bits) codes."""
  rows, word = plane.shape[0], plane.dtype.itemsize * 8
  if bits == word: return plane.reshape(rows, -1)
  # each element's shift computed from its index, not picked among word / bits masked terms: a kernel that takes
  # the elements at one shift a few at a time (a prompt's product, 8 rows of a panel) shifts once by a variable
  shifts = Tensor.arange(0, word, bits, dtype=plane.dtype, device=plane.device).reshape(1, 1, -1, 1)
  return ((plane.reshape(*plane.shape[:2], 1, plane.shape[2]) >> shifts) & ((1 << bits) - 1)).reshape(rows, -1)


def pack_pairs(codes: Tensor, bits: int) -> Tensor:
  """(panels, cols, 64) codes of 2 or 4 bits, a panel column's 64 rows each -> (panels, cols / 2, 64 * bits / 8)
  16-bit words for BYTEDOT: each byte of a word holds k = 8 / bits rows of one column (the low byte column 2m, the high
  byte 2m + 1), word w rows r + 16s for s < k, r = (w // 16) * 16k + w % 16. A shift by bits * s and a mask then give
  16 words, each two columns' codes of one row: a pair as BYTEDOT multiplies it with a pair of activations."""
  panels, cols, rows = codes.shape
  k = 8 // bits
  v = codes.reshape(panels, cols // 2, 2, rows // (16 * k), k, 16).cast(dtypes.uint16)
  byte = or_shifted([v[:, :, :, :, s] for s in range(k)], bits)  # (panels, pairs, column of the pair, groups, 16)
  return or_shifted([byte[:, :, 0], byte[:, :, 1]], 8).reshape(panels, cols // 2, rows // k)


def unpack_pairs(plane: Tensor, bits: int) -> Tensor:
  """pack_pairs' words -> (panels, cols / 2, 64) words of a row's two codes, the low byte the even column's."""
  panels, pairs, words = plane.shape
  k = 8 // bits
  shifts = Tensor.arange(0, 8, bits, dtype=dtypes.uint16, device=plane.device).reshape(1, 1, 1, k, 1)
  mask = ((1 << bits) - 1) * 0x0101
  return ((plane.reshape(panels, pairs, words // 16, 1, 16) >> shifts) & mask).reshape(panels, pairs, words * k)


def pack_groups(t: Tensor, bits: int) -> Tensor:
  """(panels, groups, rows) values of `bits` bits (a divisor of 8) -> (panels, groups * bits / 8, rows) bytes: a
  panel's groups as pack_plane's chunks of k = 8 / bits groups, byte g holding groups g * k .. g * k + k - 1 of each
  row, lowest first, so a group's 16 rows stay 16 consecutive bytes."""
  panels, groups, rows = t.shape
  return pack_plane(t.reshape(panels, groups * rows), bits, 8 // bits * rows)


def unpack_groups(t: Tensor, bits: int) -> Tensor:
  """pack_groups' inverse (unpack_plane's): (panels, bytes, rows) -> (panels, bytes * 8 / bits, rows)."""
  return unpack_plane(t, bits).reshape(t.shape[0], -1, t.shape[2])


def unpack_pair_codes(plane: Tensor, bits: int) -> Tensor:
  """pack_pairs' words -> (panels, cols, 64) codes: each element's shift (its column's byte and its row's place in
  it) computed from its index, as unpack_plane does."""
  panels, pairs, words = plane.shape
  k = 8 // bits
  shifts = (Tensor.arange(0, 16, 8, dtype=plane.dtype, device=plane.device).reshape(2, 1) +
            Tensor.arange(0, 8, bits, dtype=plane.dtype, device=plane.device).reshape(1, k)).reshape(1, 1, 2, 1, k, 1)
  return ((plane.reshape(panels, pairs, 1, words // 16, 1, 16) >> shifts) & ((1 << bits) - 1)).reshape(panels, 2 * pairs, words * k)


def from_planes(planes: list[tuple[int, int, Tensor]], unpack: Callable[[Tensor, int], Tensor]) -> Tensor:
  """The values whose bits the planes hold, each (shift, bits, plane) unpacked and placed at its shift."""
  (_, low_bits, low), *high = planes
  v = unpack(low, low_bits)
  for shift, bits, t in high: v = v | (unpack(t, bits) << shift)
  return v


def eight_lanes(device: str | tuple[str, ...]) -> bool:
  """Whether device (one, not shards) is a CPU whose vectors hold 8 floats (AVX2, Renderer.eight_lanes)."""
  return isinstance(device, str) and Device[device].renderer.eight_lanes


def byte_pairs(device: str | tuple[str, ...]) -> bool:
  """Whether codes in column pairs suit device: an 8-lane CPU (int16 sums 16 a register) whose renderer has BYTEDOT."""
  return eight_lanes(device) and Ops.BYTEDOT in Device[device].renderer.code_for_op  # type: ignore[index]


def pick_rows(t: Tensor, sel: Tensor | tuple[sint, sint]) -> Tensor:
  """The rows of t that sel picks: a (start, end) range (ints or Variables), or a tensor of row indices."""
  return t[sel[0]:sel[1]] if isinstance(sel, tuple) else t[sel]


class QuantizedWeight:
  """A (rows, cols) weight in its file format. rows(): a lazy float32 view of some rows (an embedding lookup);
  matmul(x): x @ W.T with the unpacking fused into the kernel. Several tensors with the same columns and type can be
  joined by rows (q, k and v into one matmul): a row of a quantized tensor is a whole number of blocks.

  panels=True (for the types int_matvec reads) stores it in panels of 64 rows (32 where the rows are not whole 64s):
  panel by panel, each column's 64 codes packed as a chunk, and each group's 64 scales together. A decode step's
  product (int_matvec) then takes its vectors along a panel's rows, each lane a row's own sum (no sum across lanes
  per block), and reads the weight in the order it is stored: the kernels read it once, front to back, as the row
  layout's kernels do. A float weight (F16, F32) is stored in panels of 64 rows too, each column's 64 values
  together: a prompt's product then tiles over the panel's rows and the prompt's rows as a quantized one does. Such a
  weight has no rows()."""

  def __init__(self, *parts: GGUFTensor, panels: bool = False):
    if not parts or any(len(p.shape) != 2 or p.shape[1] != parts[0].shape[1] or p.ggml_type != parts[0].ggml_type for p in parts):
      raise ValueError(f"QuantizedWeight: parts must be 2-D of one type and column count, got {[(p.name, p.shape, p.ggml_type) for p in parts]}")
    self.ggml_type, self.cols = parts[0].ggml_type, parts[0].shape[1]
    self.rows_n = sum(p.shape[0] for p in parts)
    self.shape = (self.rows_n, self.cols)
    data = parts[0].data if len(parts) == 1 else parts[0].data.cat(*[p.data for p in parts[1:]])
    self.panel, self.pairs = 0, False  # rows per panel (0: stored by row); codes in column pairs (pack_pairs)
    if self.ggml_type not in GGML_QUANT:  # a float type: used as it is (a half weight is widened in the kernel)
      self.weight: Tensor | None = data.reshape(self.shape)
      if panels and self.rows_n % 64 == 0:  # each panel's columns of 64 rows contiguous, as a quantized weight's codes
        self.panel = 64
        self.weight = self.weight.reshape(self.rows_n // 64, 64, self.cols).permute(0, 2, 1).contiguous().realize()
      elif len(parts) > 1: self.weight = self.weight.contiguous().realize()
      return
    self.weight = None
    _, self.block, block_bytes = GGML_QUANT[self.ggml_type]
    if self.cols % self.block: raise ValueError(f"QuantizedWeight: {self.cols} columns are not whole blocks of {self.block}")
    rows, cols, nb = self.rows_n, self.cols, self.rows_n * (self.cols // self.block)
    p = take_apart(block_fields(data.reshape(nb, block_bytes), self.ggml_type), self.ggml_type)
    q = p.q.reshape(rows, cols)
    scales = {k: t.reshape(rows, -1) for k, t in (("d", p.d), ("sc", p.sc), ("dmin", p.dmin), ("mn", p.mn)) if t is not None}
    # panels only where int_matvec reads them: Q8_0 in panels ran level with Q8_0 by row (0.5B decode 41-54 against
    # 43-48 tok/s, prefill 172-187 against 178-182), which keeps rows() for any use
    if panels and int_dot_block(FORMATS[self.ggml_type]) is not None and rows % 32 == 0:
      self.panel = 64 if rows % 64 == 0 else 32
      q = q.reshape(rows // self.panel, self.panel, cols).permute(0, 2, 1).reshape(-1, self.panel)  # a column's rows of a panel
      scales = {k: t.reshape(rows // self.panel, self.panel, -1).permute(0, 2, 1) for k, t in scales.items()}
    chunk = self.panel or (64 if cols % 64 == 0 else 32)
    # (shift, bits, plane): (stored rows, chunks, words), or in pairs (panels, cols / 2, words: pack_pairs)
    self.planes: list[tuple[int, int, Tensor]] = []
    shift = 0
    # where int16 sums take 16 lanes a register (eight_lanes), a panel column's 4-bit codes are 16 words of 16 bits,
    # word j holding rows j, j + 16, j + 32, j + 48: a load, a shift and a mask give 16 rows' codes as int16, which
    # bytes give only after a widening (int_matvec's inner loop on AVX2: 340 -> 260 instructions per 16 columns)
    word = 16 if self.panel == 64 and eight_lanes(data.device) else 8
    # and where the renderer has BYTEDOT (pmaddubsw), codes of 2 and 4 bits are stored in column pairs (pack_pairs),
    # so that one instruction multiplies 16 rows' codes of two columns with two activations and adds the products
    bits_of = PLANE_BITS[FORMATS[self.ggml_type].bits]
    self.pairs = word == 16 and set(bits_of) <= {2, 4} and byte_pairs(data.device)
    for bits in bits_of:
      codes = (q >> shift) & ((1 << bits) - 1)
      if self.pairs: plane = pack_pairs(codes.reshape(rows // 64, cols, 64), bits)
      # and 2-bit codes (Q6_K's high bits; Q2_K's, Q3_K's low ones) two columns a word: word j holds rows j + 16i of
      # both, so they too come with 16-bit shifts, where bytes took shifts x86 lacks (0.5B Q4_K_M, output layer's
      # block sums 1.85 -> 1.47 ms, PROFILE=1)
      elif bits == 2 and word == 16:
        plane = pack_plane(codes.reshape(q.shape[0] // 2, 2 * chunk), bits, 2 * chunk, 16)
      else: plane = q if bits == 8 else pack_plane(codes, bits, chunk, word if bits == 4 else 8)
      self.planes.append((shift, bits, plane.reshape(plane.shape[0], -1, plane.shape[-1]).contiguous()))
      shift += bits
    # the scales, a row of each per weight row: d and dmin one per block, sc and mn one per group
    # a group's scale and min of 6 bits (Q4_K, Q5_K) or 4 (Q2_K) stored in that many bits, where a panel's groups come
    # in fours: a plane of their low 4 bits (two groups a byte) and one of the high 2 (four a byte). Bytes took 0.125
    # bits a weight more than the file (the 0.5B Q4_K_M model: 5 MB of its 380 MB peak)
    self.scales: dict[str, Tensor] = {}
    self.scale_planes: dict[str, list[tuple[int, int, Tensor]]] = {}  # name -> [(shift, bits, plane)]
    packed_bits = SCALE_BITS.get(self.ggml_type) if self.panel else None
    for k, t in scales.items():
      if k in ("sc", "mn") and packed_bits is not None and t.shape[1] % 4 == 0:
        self.scale_planes[k] = [(sh, b, pack_groups((t >> sh) & ((1 << b) - 1), b).contiguous()) for sh, b in zip((0, 4), PLANE_BITS[packed_bits])]
      else: self.scales[k] = t.contiguous()
    Tensor.realize(*[t for _, _, t in self.planes], *self.scales.values(), *[t for ps in self.scale_planes.values() for _, _, t in ps])

  @property
  def int_rows(self) -> bool:
    """Whether a prompt's rows multiply as a decode step's row does (int_matvec): where the codes are in pairs and the
    blocks' sums are inner sums (Q4_K's 32, not Q6_K's 8, whose sums would go through memory for every row), one
    BYTEDOT does 32 multiply-adds where the float product does 8 (a 64-row Q4_K product of 8192 x 1536: 18-24 -> 10-11 ms)."""
    return self.pairs and (int_dot_block(FORMATS[self.ggml_type]) or 0) >= INNER_SUM_TERMS[0]

  @property
  def nbytes(self) -> int:
    if self.weight is not None: return self.weight.nbytes()
    return sum(t.nbytes() for _, _, t in self.planes) + sum(t.nbytes() for t in self.scales.values()) + \
      sum(t.nbytes() for ps in self.scale_planes.values() for _, _, t in ps)

  def _scales(self) -> dict[str, Tensor]:
    """The scales as stored, those in planes unpacked (lazily) to one byte each: (stored rows, groups or blocks)."""
    return self.scales | {k: from_planes(ps, unpack_groups) for k, ps in self.scale_planes.items()}

  def _pick(self, t: Tensor, sel: Tensor | tuple[sint, sint] | None) -> Tensor:
    if sel is None: return t
    if self.panel: raise ValueError("QuantizedWeight: a weight stored in panels has no rows(); load it with panels=False")
    return pick_rows(t, sel)

  def _code_pairs(self) -> Tensor:
    """A weight in pairs' codes as (panels, cols / 2, 64) words, each a row's codes of two neighbouring columns."""
    return from_planes(self.planes, unpack_pairs)

  def _codes(self, sel: Tensor | tuple[sint, sint] | None = None) -> Tensor:
    """The codes as stored: (rows, cols) by row (of the rows sel picks: a gather of the packed rows first, so only
    they are unpacked), (rows / panel, cols, panel) in panels."""
    if self.pairs: return from_planes(self.planes, unpack_pair_codes)  # (not _code_pairs' words split: those were stored)
    (_, low_bits, low), *high = self.planes  # the lowest bits' plane, then those above it
    q = unpack_plane(self._pick(low, sel), low_bits)
    for shift, bits, t in high: q = q | (unpack_plane(self._pick(t, sel), bits).reshape(q.shape).cast(q.dtype) << shift)
    return q.reshape(self.rows_n // self.panel, self.cols, self.panel) if self.panel else q

  def _parts(self, sel: Tensor | tuple[sint, sint] | None = None) -> Parts:
    """The codes and scales of some rows as (rows, ...) views, whichever way they are stored."""
    def rows_first(t: Tensor) -> Tensor: return t.permute(0, 2, 1).reshape(self.rows_n, -1) if self.panel else t
    sc = {k: rows_first(self._pick(t, sel)) for k, t in self._scales().items()}
    return Parts(rows_first(self._codes(sel)), sc["d"], sc.get("sc"), sc.get("dmin"), sc.get("mn"))

  def _unpack(self, sel: Tensor | tuple[sint, sint] | None = None) -> Tensor:
    """float32 rows of the weight (bounds may be bound Variables)."""
    if self.weight is not None:
      w = self.weight.permute(0, 2, 1).reshape(self.shape) if self.panel else self.weight
      return self._pick(w, sel).cast(dtypes.float32)
    return join(self._parts(sel), self.ggml_type)

  def int_matvec(self, x: Tensor) -> Tensor:
    """x @ W.T for one row x, as llama.cpp's vec_dot does it: x quantized to int8 in blocks of int_dot_block
    elements (a float scale each), the codes centered (c = q - 2**(bits-1)) and multiplied with it in int16, a
    block's products summed in int16 (which int_dot_block keeps from overflowing), then scaled in float32 per block
    and group. A vector instruction multiplies and adds twice the lanes it would in float32, and the group's scale
    is applied once per block instead of once per weight. The group's offset (the centering, the bias and the min)
    multiplies the group's exact float sum of x."""
    fmt, (rows, cols), m = FORMATS[self.ggml_type], self.shape, prod(x.shape[:-1])
    n = int_dot_block(fmt)
    assert n is not None and self.panel, "int_matvec reads a weight stored in panels"
    xb = x.reshape(m, cols // n, n).cast(dtypes.float32)
    amax = xb.abs().max(2, keepdim=True)
    xq = (xb * (amax > 0).where(127 / amax, 0)).round().cast(dtypes.int16)
    if self.pairs:  # the activations as BYTEDOT reads them, two int8s a word (the low byte the even column's)
      u = xq.cast(dtypes.uint16).reshape(m, cols // 2, 2)
      xw: Tensor | None = ((u[:, :, 0] & 0xFF) | (u[:, :, 1] << 8)).contiguous()
    else: xq, xw = xq.contiguous(), None
    panels = rows // self.panel
    # blocks shorter than the scheduler's inner sums have their int16 sums stored (a panel's blocks by its rows) and
    # summed by a second kernel: a product of many panels does that a piece at a time, so that the pieces share one
    # piece's memory (the 32000-row output layer's Q6_K sums: 12 MB in each TinyJit's memory, now 4)
    step = max(1, PARTIAL_BYTES // (cols // n * self.panel * 2)) if n < INNER_SUM_TERMS[0] else panels
    if step >= panels: return self._int_matvec_panels(x, xq, xw, amax, 0, panels)
    return Tensor.cat(*[self._int_matvec_panels(x, xq, xw, amax, p, min(p + step, panels)) for p in range(0, panels, step)], dim=-1)

  def _int_matvec_panels(self, x: Tensor, xq: Tensor, xw: Tensor | None, amax: Tensor, first: int, end: int) -> Tensor:
    """int_matvec's product with the panels first..end-1 (x: the m rows, xq and amax: their (m, blocks, n) int16 blocks
    and (m, blocks, 1) maxima, xw: their (m, cols / 2) int8 pairs where the codes are in pairs)."""
    fmt, cols, rb, e = FORMATS[self.ggml_type], self.cols, self.panel, end - first
    (m, blocks, n), groups, center = xq.shape, cols // fmt.group, 1 << (fmt.bits - 1)
    # sum (q - center) * a as sum q * a - center * sum a, both in int16: the first wraps past int16, but the difference
    # is the exact centered sum, which fits, and int16 arithmetic is modulo 2**16 (the center leaves the inner loop)
    if xw is not None:  # each row's codes of two columns times the two activations, one BYTEDOT (no sum saturates)
      q = self._code_pairs()[first:end].reshape(1, e, cols // 2, rb).expand(m, e, cols // 2, rb)  # rows of a panel last
      qa = q.alu(Ops.BYTEDOT, xw.reshape(m, 1, cols // 2, 1).expand(q.shape)).reshape(m, e, blocks, n // 2, rb).sum(3, dtype=dtypes.int16)
      # the activations' block sums from the pairs, so that their int16 values are computed in one kernel only
      def signed(b: Tensor) -> Tensor: return (b ^ 0x80).cast(dtypes.int16) - 0x80
      xq = (signed(xw & 0xFF) + signed(xw >> 8)).reshape(m, blocks, n // 2)
    else:
      q = self._codes()[first:end].cast(dtypes.int16)  # (panels, cols, rows of a panel)
      qa = (q.reshape(1, e, blocks, n, rb) * xq.reshape(m, 1, blocks, n, 1)).sum(3, dtype=dtypes.int16)
    P = qa - (xq.sum(2, dtype=dtypes.int16) * center).reshape(m, 1, blocks, 1)  # (int16 wraps alike)
    def slices_sum(t: Tensor, k: int) -> Tensor:  # (..., j * k, lanes) -> (..., j, lanes): k neighbours added
      t = t.reshape(*t.shape[:-2], t.shape[-2] // k, k, t.shape[-1])  # as values, so every sum but the last one stays in one kernel
      out = t[..., 0, :]
      for i in range(1, k): out = out + t[..., i, :]
      return out
    dots = slices_sum(P.cast(dtypes.float32) * (amax / 127).reshape(m, 1, blocks, 1), fmt.group // n)  # (m, panels, groups, lanes)
    xsum = x.reshape(m, 1, groups, fmt.group).cast(dtypes.float32).sum(3, keepdim=True)
    # per block b of the file: d_b * sum over its groups of sc_g * (dots_g + (center - bias) * X_g), less
    # dmin_b * sum of mn_g * X_g (the group's exact float sum of x): scales read as stored, one multiply per group
    sc = {k: t[first:end].cast(dtypes.float32) for k, t in self._scales().items()}  # (panels, groups or blocks, lanes)
    inner = dots + (center - fmt.bias) * xsum if center != fmt.bias else dots
    per_block = groups // sc["d"].shape[1]
    y = sc["d"] * slices_sum(sc["sc"] * inner if "sc" in sc else inner, per_block)
    if "dmin" in sc: y = y - sc["dmin"] * slices_sum(sc["mn"] * xsum if "mn" in sc else xsum, per_block)
    return y.sum(2).reshape(*x.shape[:-1], e * rb)

  def rows(self, sel: Tensor | tuple[sint, sint]) -> Tensor: return self._unpack(sel)  # (start, end): ints or Variables

  def matmul(self, x: Tensor, int8: bool = True) -> Tensor:
    """x @ W.T: a decode step's one row by int_matvec where a quantized weight is in panels (unless int8=False), and a
    prompt's rows too where its codes are in pairs and its block sums inner sums (int_rows), else with W unpacked
    inside the kernel that reads it. (By row, int_matvec lost to float32 once the weight left the cache: Q4_K 32768 x
    4096, 9.2 against 7.2 ms; in panels it took 2.8 ms.)"""
    if not self.panel or self.weight is not None: return x.matmul(self._unpack().T)
    if int8 and INT_MATVEC and (prod(x.shape[:-1]) == 1 or self.int_rows): return self.int_matvec(x)
    # reduced over (groups, a group's elements): a group's scales are then computed once per group in the kernel's
    # outer reduce loop, not once per element (the same prefill product: 9.3 -> 8.9 ms)
    (rows, cols), group = self.shape, FORMATS[self.ggml_type].group
    w = self._unpack().reshape(rows, cols // group, group)
    return (x.reshape(*x.shape[:-1], 1, cols // group, group) * w).sum((-2, -1))

  def dequantized(self) -> Tensor:
    """The whole weight as float32 (lazy)."""
    return self._unpack()


class MappedRows:
  """A (rows, cols) weight that is only looked up by row (an embedding whose output layer is a weight of its own),
  kept as the file has it, in the file's own mapped pages (GGUFTensor.mapped): a prompt brings into memory only the
  rows it looks up. rows() unpacks them from their blocks in the kernel that reads them."""

  def __init__(self, t: GGUFTensor):
    if len(t.shape) != 2: raise ValueError(f"MappedRows: {t.name!r} must be 2-D, got {t.shape}")
    self.ggml_type, self.shape = t.ggml_type, t.shape
    data, self._mapping = t.mapped()
    self.blocks = data.reshape(t.shape[0], -1)  # one row of blocks (or of values, a float type) per weight row
    self.nbytes = t.nbytes

  def let_go(self) -> None:
    """Unmaps the pages of the rows looked up so far: they stay in the system's page cache and map again when looked
    up. Each lookup maps 64-256 KiB around its row (the kernel's fault-around and the cache's large folios, even with
    MADV_RANDOM), so a long generation would otherwise bring the whole table into the process (26 MB for the 0.5B
    model's Q4_K one; 32 decode steps mapped 1.5-7.5 MB of it)."""
    if self._mapping is not None and hasattr(mmap, "MADV_DONTNEED"): self._mapping.madvise(mmap.MADV_DONTNEED)

  def rows(self, sel: Tensor | tuple[sint, sint]) -> Tensor:
    picked = pick_rows(self.blocks, sel)
    if self.ggml_type not in GGML_QUANT: return picked.cast(dtypes.float32)
    return dequantize(picked.reshape(-1, GGML_QUANT[self.ggml_type][2]), self.ggml_type).reshape(picked.shape[0], self.shape[1])


class JoinedWeight:
  """Weights of different types joined by rows (q, k and v of a Q4_K_M file: llama.cpp's mixes quantize attn_v, and
  some layers' ffn_down, finer than the rest): one QuantizedWeight per run of one type, their products side by side."""

  def __init__(self, parts: list[QuantizedWeight]):
    self.parts = parts
    self.shape = (sum(p.rows_n for p in parts), parts[0].cols)

  @property
  def nbytes(self) -> int: return sum(p.nbytes for p in self.parts)

  def matmul(self, x: Tensor, int8: bool = True) -> Tensor:
    return self.parts[0].matmul(x, int8).cat(*[p.matmul(x, int8) for p in self.parts[1:]], dim=-1)

  def dequantized(self) -> Tensor: return self.parts[0].dequantized().cat(*[p.dequantized() for p in self.parts[1:]])


def joined(*parts: GGUFTensor, panels: bool = False) -> QuantizedWeight | JoinedWeight:
  """parts as one weight joined by rows: one QuantizedWeight when they share a type, else a JoinedWeight of a
  QuantizedWeight per run of one type."""
  if not parts or any(len(p.shape) != 2 or p.shape[1] != parts[0].shape[1] for p in parts):
    raise ValueError(f"joined: parts must be 2-D with one column count, got {[(p.name, p.shape) for p in parts]}")
  runs: list[list[GGUFTensor]] = []
  for p in parts:
    if runs and runs[-1][0].ggml_type == p.ggml_type: runs[-1].append(p)
    else: runs.append([p])
  return QuantizedWeight(*runs[0], panels=panels) if len(runs) == 1 else JoinedWeight([QuantizedWeight(*r, panels=panels) for r in runs])
