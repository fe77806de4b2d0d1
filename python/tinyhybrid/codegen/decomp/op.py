"""Operations as plain 32-bit ALU arithmetic, for renderers without an instruction for them:
- THREEFRY, the threefry-2x32 block cipher of a uint64 counter under a uint64 key, as tinygrad's random numbers use it
  (its word order: the key's high word first in the schedule). On constants it folds to a constant; on a kernel's
  values it is shifts, xors and wrapping adds.
- BYTEDOT, x86's pmaddubsw on one 16-bit lane: the unsigned bytes of a times the signed bytes of b, the two products
  added and saturated to int16 (a quantized weight's pair of codes times a pair of int8 activations)."""
from __future__ import annotations

from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def threefry2x32(x: UOp, key: UOp) -> UOp:
  """THREEFRY(x, key) for uint64 x and key: 20 rounds over the two 32-bit halves of x, the key injected every four."""
  def words(v: UOp) -> tuple[UOp, UOp]: return v.cast(dtypes.uint32), (v >> 32).cast(dtypes.uint32)
  (x0, x1), (k0, k1) = words(x), words(key)
  schedule = (k1, k0 ^ k1 ^ _PARITY, k0)
  a, b = x0 + schedule[2], x1 + schedule[0]
  for i in range(5):
    for r in _ROTATIONS[i % 2]:
      a = a + b
      b = a ^ ((b << r) + (b >> (32 - r)))
    a, b = a + schedule[i % 3], b + schedule[(i + 1) % 3] + (i + 1)
  return (b.cast(dtypes.uint64) << 32) | a.cast(dtypes.uint64)


pm_threefry = PatternMatcher([(UPat(Ops.THREEFRY, dtypes.uint64, src=(UPat.var("x"), UPat.var("key"))), threefry2x32)])


def bytedot(a: UOp, b: UOp) -> UOp:
  """BYTEDOT(a, b) for uint16 lanes a and b, in int32: lo(a) * slo(b) + hi(a) * shi(b) clamped to int16."""
  def byte(v: UOp, shift: int) -> UOp: return ((v >> shift) & 0xFF).cast(dtypes.int32) if shift else (v & 0xFF).cast(dtypes.int32)
  def signed(x: UOp) -> UOp: return (x ^ 0x80) - 0x80
  total = byte(a, 0) * signed(byte(b, 0)) + byte(a, 8) * signed(byte(b, 8))
  return total.maximum(-32768).minimum(32767).cast(dtypes.int16)


pm_bytedot = PatternMatcher([(UPat(Ops.BYTEDOT, src=(UPat.var("a"), UPat.var("b"))), bytedot)])


def decompose_bytedot(ast: UOp) -> UOp:
  """The kernel IR under `ast` with every BYTEDOT written as int32 arithmetic (before the lanes are expanded)."""
  if not any(u.op is Ops.BYTEDOT for u in ast.toposort()): return ast
  return graph_rewrite(ast, pm_bytedot, name="decompose bytedot")
