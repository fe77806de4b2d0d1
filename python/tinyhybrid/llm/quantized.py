"""Weights as the .gguf file stores them, multiplied without ever writing them out as floats: the dequantization is
an elementwise expression of the weight's bits that the scheduler fuses into the matmul's kernel, so each weight is
read once, in its quantized form, and unpacked in registers.

At load, a quantized weight's blocks are taken apart (nn/quant.py's parts) into planes: each element's code split
into bit planes of 2, 4 or 8 bits, and the blocks' and groups' scales, each plane one contiguous run per row. The
file's bytes, or a few more where a type packs its group scales in fewer than 8 bits (Q4_K 4.625 bits a weight
against 4.5, Q2_K 3.125 against 2.625; Q6_K and the 32-element types as the file, but MXFP4's float32 scale makes 5
against 4.25), laid out for the kernel's loads:
in a chunk of 64 elements, byte c holds elements c, c + L, c + 2L... (L = 64 * bits / 8), so 16 elements of a row
are 16 consecutive bytes at one shift, a vector load, and each shift is known when the kernel is compiled. The
blocks themselves interleave codes with scales in 144- or 210-byte strides, which no vector load reads."""
from __future__ import annotations

from tinyhybrid.dtype import dtypes
from tinyhybrid.llm.gguf import GGUFTensor
from tinyhybrid.nn.quant import FORMATS, GGML_QUANT, Parts, block_fields, join
from tinyhybrid.nn.quant import parts as take_apart
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop.ops import sint

# a code of n bits as planes of these widths, lowest bits first
PLANE_BITS = {2: (2,), 3: (2, 1), 4: (4,), 5: (4, 1), 6: (4, 2), 8: (8,)}


def pack_plane(codes: Tensor, bits: int, chunk: int) -> Tensor:
  """(rows, cols) codes of `bits` bits -> (rows, cols / chunk, chunk * bits / 8) bytes: byte c of a chunk holds the
  chunk's elements c, c + L, c + 2L... (L: the chunk's bytes), lowest first."""
  rows, cols = codes.shape
  v = codes.reshape(rows, cols // chunk, 8 // bits, chunk * bits // 8)
  out = v[:, :, 0]
  for s in range(1, 8 // bits): out = out | (v[:, :, s] << (bits * s))
  return out


def unpack_plane(plane: Tensor, bits: int) -> Tensor:
  """pack_plane's inverse: (rows, chunks, bytes) -> (rows, chunks * bytes * 8 / bits) codes."""
  rows = plane.shape[0]
  if bits == 8: return plane.reshape(rows, -1)
  return Tensor.stack(*[(plane >> (bits * s)) & ((1 << bits) - 1) for s in range(8 // bits)], dim=2).reshape(rows, -1)


class QuantizedWeight:
  """A (rows, cols) weight in its file format. rows(): a lazy float32 view of some rows (an embedding lookup);
  matmul(x): x @ W.T with the unpacking fused into the kernel. Several tensors with the same columns and type can be
  joined by rows (q, k and v into one matmul): a row of a quantized tensor is a whole number of blocks."""

  def __init__(self, *parts: GGUFTensor):
    if not parts or any(len(p.shape) != 2 or p.shape[1] != parts[0].shape[1] or p.ggml_type != parts[0].ggml_type for p in parts):
      raise ValueError(f"QuantizedWeight: parts must be 2-D of one type and column count, got {[(p.name, p.shape, p.ggml_type) for p in parts]}")
    self.ggml_type, self.cols = parts[0].ggml_type, parts[0].shape[1]
    self.rows_n = sum(p.shape[0] for p in parts)
    self.shape = (self.rows_n, self.cols)
    data = parts[0].data if len(parts) == 1 else parts[0].data.cat(*[p.data for p in parts[1:]])
    if self.ggml_type not in GGML_QUANT:  # a float type: used as it is (a half weight is widened in the kernel)
      self.weight: Tensor | None = data.reshape(self.shape)
      if len(parts) > 1: self.weight = self.weight.contiguous().realize()
      return
    self.weight = None
    _, self.block, block_bytes = GGML_QUANT[self.ggml_type]
    if self.cols % self.block: raise ValueError(f"QuantizedWeight: {self.cols} columns are not whole blocks of {self.block}")
    rows, nb = self.rows_n, self.rows_n * (self.cols // self.block)
    p = take_apart(block_fields(data.reshape(nb, block_bytes), self.ggml_type), self.ggml_type)
    q, chunk, shift = p.q.reshape(rows, self.cols), 64 if self.cols % 64 == 0 else 32, 0
    self.planes: list[tuple[int, int, Tensor]] = []  # (shift, bits, plane)
    for bits in PLANE_BITS[FORMATS[self.ggml_type].bits]:
      plane = q if bits == 8 else pack_plane((q >> shift) & ((1 << bits) - 1), bits, chunk)
      self.planes.append((shift, bits, plane.reshape(rows, self.cols // chunk, -1).contiguous()))
      shift += bits
    # the scales, a row of each per weight row: d and dmin one per block, sc and mn one per group
    self.scales = {k: t.reshape(rows, -1).contiguous() for k, t in (("d", p.d), ("sc", p.sc), ("dmin", p.dmin), ("mn", p.mn)) if t is not None}
    Tensor.realize(*[t for _, _, t in self.planes], *self.scales.values())

  @property
  def nbytes(self) -> int:
    if self.weight is not None: return self.weight.nbytes()
    return sum(t.nbytes() for _, _, t in self.planes) + sum(t.nbytes() for t in self.scales.values())

  def _unpack(self, sel: Tensor | tuple[sint, sint] | None = None) -> Tensor:
    """float32 rows of the weight: all, a (start, stop) slice (bounds may be bound Variables), or those an index
    tensor picks (a gather of the packed rows first, so only they are unpacked)."""
    def pick(t: Tensor) -> Tensor:
      if sel is None: return t
      if isinstance(sel, tuple): return t[sel[0]:sel[1]]
      return t[sel]
    if self.weight is not None: return pick(self.weight).cast(dtypes.float32)
    (_, low_bits, low), *high = self.planes  # the lowest bits' plane, then those above it
    q = unpack_plane(pick(low), low_bits)
    for shift, bits, t in high: q = q | (unpack_plane(pick(t), bits) << shift)
    sc = {k: pick(t) for k, t in self.scales.items()}
    return join(Parts(q, sc["d"], sc.get("sc"), sc.get("dmin"), sc.get("mn")), self.ggml_type)

  def rows(self, sel: Tensor | tuple[sint, sint]) -> Tensor: return self._unpack(sel)  # (start, end): ints or Variables

  def matmul(self, x: Tensor) -> Tensor:
    """x @ W.T, W unpacked inside the kernel that reads it."""
    return x.matmul(self._unpack().T)

  def dequantized(self) -> Tensor:
    """The whole weight as float32 (lazy)."""
    return self._unpack()


class JoinedWeight:
  """Weights of different types joined by rows (q, k and v of a Q4_K_M file: llama.cpp's mixes quantize attn_v, and
  some layers' ffn_down, finer than the rest): one QuantizedWeight per run of one type, their products side by side."""

  def __init__(self, parts: list[QuantizedWeight]):
    self.parts = parts
    self.shape = (sum(p.rows_n for p in parts), parts[0].cols)

  @property
  def nbytes(self) -> int: return sum(p.nbytes for p in self.parts)

  def matmul(self, x: Tensor) -> Tensor: return self.parts[0].matmul(x).cat(*[p.matmul(x) for p in self.parts[1:]], dim=-1)

  def dequantized(self) -> Tensor: return self.parts[0].dequantized().cat(*[p.dequantized() for p in self.parts[1:]])


def joined(*parts: GGUFTensor) -> QuantizedWeight | JoinedWeight:
  """parts as one weight joined by rows: one QuantizedWeight when they share a type, else a JoinedWeight of a
  QuantizedWeight per run of one type."""
  if not parts or any(len(p.shape) != 2 or p.shape[1] != parts[0].shape[1] for p in parts):
    raise ValueError(f"joined: parts must be 2-D with one column count, got {[(p.name, p.shape) for p in parts]}")
  runs: list[list[GGUFTensor]] = []
  for p in parts:
    if runs and runs[-1][0].ggml_type == p.ggml_type: runs[-1].append(p)
    else: runs.append([p])
  return QuantizedWeight(*runs[0]) if len(runs) == 1 else JoinedWeight([QuantizedWeight(*r) for r in runs])
