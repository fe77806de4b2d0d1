"""Weights as the .gguf file stores them, multiplied without ever writing them out as floats: the dequantization is
an elementwise expression of the weight's bytes that the scheduler fuses into the matmul's kernel, so each weight
is read once, in its quantized form, and unpacked in registers.

Q8_0 is repacked once at load into its two planes, the int8 values (out, in) and one float32 scale per 32 of them
(out, in/32): the same information in 9/8 bytes a weight instead of 17/16, and the kernel's loads become contiguous
runs of int8 that vectorize (the 34-byte blocks, 2-byte aligned, do not). Other types keep their blocks and are
unpacked by nn/quant.py's expressions."""
from __future__ import annotations

from tinyhybrid.dtype import dtypes
from tinyhybrid.llm.gguf import GGUFTensor
from tinyhybrid.nn.quant import GGML_QUANT, dequantize
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop.ops import sint

Q8_0 = 8


def _f16(b: Tensor) -> Tensor:
  """(n, 2) little-endian bytes -> (n, 1) float32 of the float16 they hold."""
  return (b[:, 0:1].cast(dtypes.uint16) | (b[:, 1:2].cast(dtypes.uint16) << 8)).bitcast(dtypes.float16).cast(dtypes.float32)


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
    _, self.block, self.block_bytes = GGML_QUANT[self.ggml_type]
    if self.cols % self.block: raise ValueError(f"QuantizedWeight: {self.cols} columns are not whole blocks of {self.block}")
    if self.ggml_type == Q8_0:
      self.qs = data[:, 2:].bitcast(dtypes.int8).reshape(self.rows_n, self.cols).contiguous()
      self.scale = _f16(data[:, 0:2]).reshape(self.rows_n, self.cols // 32).contiguous()
      Tensor.realize(self.qs, self.scale)
    else: self.blocks = data.reshape(self.rows_n, self.cols // self.block, self.block_bytes).contiguous().realize() if len(parts) > 1 else \
      data.reshape(self.rows_n, self.cols // self.block, self.block_bytes)

  @property
  def nbytes(self) -> int:
    if self.weight is not None: return self.weight.nbytes()
    if self.ggml_type == Q8_0: return self.qs.nbytes() + self.scale.nbytes()
    return self.blocks.nbytes()

  def _unpack(self, sel: Tensor | tuple[sint, sint] | None = None) -> Tensor:
    """float32 rows of the weight: all, a (start, stop) slice (bounds may be bound Variables), or those an index
    tensor picks (a gather of the packed rows first, so only they are unpacked)."""
    def pick(t: Tensor) -> Tensor:
      if sel is None: return t
      if isinstance(sel, tuple): return t[sel[0]:sel[1]]
      return t[sel]
    if self.weight is not None: return pick(self.weight).cast(dtypes.float32)
    if self.ggml_type == Q8_0:
      qs, sc = pick(self.qs), pick(self.scale)
      n = qs.shape[0]
      return (qs.reshape(n, self.cols // 32, 32).cast(dtypes.float32) * sc.reshape(n, self.cols // 32, 1)).reshape(n, self.cols)
    b = pick(self.blocks)
    n = b.shape[0]
    return dequantize(b.reshape(n * (self.cols // self.block), self.block_bytes), self.ggml_type).reshape(n, self.cols)

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
