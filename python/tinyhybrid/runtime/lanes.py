"""What the PYTHON device's kernels (renderer/python.py) call: memory accesses, casts and the tensor-core step over
lanes that run in lockstep. A value is a NumPy array with one entry per work-item of the batch (a vector: lanes of
the vector first), or a NumPy scalar when it is the same in every work-item. Every address a live work-item reads or
writes is checked against its buffer: an access outside is `OutOfBoundsAccess` naming the kernel's buffer, the index
and the buffer's size, where a GPU would read garbage or fault."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinyhybrid.dtype import dtypes, fp8_decode, fp8_encode


class OutOfBoundsAccess(IndexError):
  """A kernel on the PYTHON device read or wrote an element outside its buffer."""


def _check(buf: np.ndarray, idx: Any, live: Any, what: str, verb: str) -> None:
  bad = (idx < 0) | (idx >= len(buf))
  if live is not None: bad = bad & live
  if np.any(bad):
    first = int(np.broadcast_to(idx, np.shape(bad))[bad].flat[0])
    raise OutOfBoundsAccess(f"PYTHON: a kernel {verb} {what}[{first}], outside its {len(buf)} elements")


def load(buf: np.ndarray, idx: Any, gate: Any, what: str) -> Any:
  """buf[idx] where gate holds (0 elsewhere, and nothing read there)."""
  if gate is None:
    _check(buf, idx, None, what, "reads")
    return buf[idx]
  _check(buf, idx, gate, what, "reads")
  return np.where(gate, buf[np.where(gate, idx, 0)], buf.dtype.type(0))


def _row(x: Any) -> np.ndarray: return np.asarray(x).reshape(1, -1)


def _lanes_of(idx: Any, n: int) -> np.ndarray: return _row(idx) + np.arange(n).reshape(n, 1)


def vload(buf: np.ndarray, idx: Any, n: int, gate: Any, mask: Any, what: str) -> np.ndarray:
  """n consecutive elements from idx: lane i only where bit i of mask is set (past the data otherwise) and gate holds."""
  live = None if mask is None else (_row(mask) >> np.arange(n, dtype=np.uint32).reshape(n, 1)) & 1 == 1
  if gate is not None: live = _row(gate) if live is None else live & _row(gate)
  return load(buf, _lanes_of(idx, n), live, what)


def store(buf: np.ndarray, idx: Any, val: Any, n: int, what: str) -> None:
  """val into buf at idx (a vector of n lanes: at idx, idx + 1, ...), for every work-item."""
  if n > 1: idx = _lanes_of(idx, n)
  _check(buf, idx, None, what, "writes")
  idx, val = np.broadcast_arrays(idx, val)
  buf[idx] = val


def at(x: Any, lanes: np.ndarray) -> Any:
  """x as the work-items at `lanes` hold it (a value the same in all of them stays as it is)."""
  x = np.asarray(x)
  return x if x.ndim == 0 or x.shape[-1] == 1 else x[..., lanes]


def splat(x: Any, n: int) -> np.ndarray: return np.full((n, 1), x)


def vec(*lanes: Any) -> np.ndarray: return np.stack(np.broadcast_arrays(*(np.atleast_1d(x) for x in lanes)))


def maximum(a: Any, b: Any) -> Any: return np.where((a > b) | (a != a), a, b)  # NaN in a wins, as in C's form


def fma(a: Any, b: Any, c: Any) -> Any:
  """a * b + c rounded once (in float64, exact for the product of two floats or halves)."""
  t = np.result_type(a, b, c)
  return ((np.asarray(a, np.float64) * b) + c).astype(t) if t.itemsize < 8 else a * b + c


def math(fn: Any, x: Any, t: Any) -> Any:
  """A transcendental of a 16-bit value, computed in float as the GPU backends do."""
  return fn(x) if np.dtype(t).itemsize >= 4 else fn(np.asarray(x, np.float32)).astype(t)


def round_bf16(x: Any) -> Any: return bf2f(f2bf(x))


def bf2f(raw: Any) -> Any: return (np.asarray(raw, np.uint32) << 16).view(np.float32)


def f2bf(x: Any) -> Any:
  """float32 to bfloat16's bits, rounded to nearest even; NaN stays NaN."""
  u = np.asarray(x, np.float32).view(np.uint32)
  rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
  return np.where((u & 0x7FFFFFFF) > 0x7F800000, ((u >> 16) | 0x40).astype(np.uint16), rounded)


# the OCP fp8s by the names kernels give them: computed in float32, stored as their bit patterns (uint8)
_FP8 = {"e4m3": dtypes.fp8e4m3, "e5m2": dtypes.fp8e5m2}


def fp82f(raw: Any, fmt: str) -> Any: return fp8_decode(raw, _FP8[fmt])


def f2fp8(x: Any, fmt: str) -> Any:
  """float values to fp8 bit patterns, rounded to nearest even (see dtype.fp8_encode: e4m3 saturates, e5m2 overflows
  to inf)."""
  return fp8_encode(x, _FP8[fmt])


def round_fp8(x: Any, fmt: str) -> Any: return fp82f(f2fp8(x, fmt), fmt)


def _round(x: Any, fmt: str | None) -> Any:
  """x rounded to a format computed in float32 ("bf16", "e4m3", "e5m2"; None: as it is)."""
  if fmt is None: return x
  return round_bf16(x) if fmt == "bf16" else round_fp8(x, fmt)


def cast(x: Any, t: Any, fmt: str | None) -> Any:
  """x as type t; fmt names the format t holds when that is narrower than t (bf16 and the fp8s in float32)."""
  if t is np.bool_: return np.asarray(x) != 0
  if fmt in _FP8: return round_fp8(x, fmt)  # from the value itself (a float64 rounds once)
  return _round(np.asarray(x).astype(t), fmt)


def bitcast(x: Any, src: Any, t: Any, from_fmt: str | None, to_fmt: str | None) -> Any:
  """x's bits as type t (a vector: along its lanes, the first axis); from_fmt and to_fmt as cast's fmt."""
  x = np.asarray(x)
  if from_fmt is not None: x = f2bf(x) if from_fmt == "bf16" else f2fp8(x, from_fmt)
  dst = t if to_fmt is None else np.uint16 if to_fmt == "bf16" else np.uint8
  out = x.view(dst) if x.ndim < 2 else np.ascontiguousarray(x.T).view(dst).T
  if to_fmt is None: return out
  return bf2f(out) if to_fmt == "bf16" else fp82f(out, to_fmt)


def cdiv(a: Any, b: Any) -> Any:
  """C's integer quotient (toward zero): 0 for a divisor of 0, the most negative value by -1 wraps."""
  return (a - np.fmod(a, b)) // b


def cmod(a: Any, b: Any) -> Any: return np.fmod(a, b)


Place = Callable[[int, int], tuple[int, int]]


@dataclass(frozen=True)
class MmaLayout:
  """Which element of each matrix a lane's register holds: (lane, register) -> (row, column) of A, B and C."""
  mnk: tuple[int, int, int]
  a: Place
  b: Place
  c: Place


# From the PTX ISA's fragment figures for mma.m16n8k16 with 16-bit inputs, written apart from the renderer's
# TensorCore, so that the emulated warp checks the lowering against the instruction and not against itself: lane l is
# in group l // 4, at place l % 4 of it.
MMA_LAYOUTS = {
  "m16n8k16": MmaLayout((16, 8, 16),
                        lambda l, r: (l // 4 + (8 if r in (2, 3, 6, 7) else 0), l % 4 * 2 + r % 2 + (8 if r >= 4 else 0)),
                        lambda l, r: (l % 4 * 2 + r % 2 + (8 if r >= 2 else 0), l // 4),
                        lambda l, r: (l // 4 + (8 if r >= 2 else 0), l % 4 * 2 + r % 2)),
}
WARP = 32


@functools.cache
def _fragment(shape: str, which: str, regs: int) -> tuple[np.ndarray, np.ndarray]:
  place: Place = getattr(MMA_LAYOUTS[shape], which)
  idx = np.array([[place(lane, r) for r in range(regs)] for lane in range(WARP)])
  return idx[..., 0], idx[..., 1]


def wmma(name: str, a: Any, b: Any, c: Any) -> np.ndarray:
  """D = A @ B + C on each warp (e.g. name m16n8k16.f32.f16.f16.f32): the 32 work-items in a row (a warp's lanes are
  local dimension 0) hold the fragments, register r of lane l at the place the instruction's layout gives it."""
  shape = name.split(".")[0]
  tm, tn, tk = MMA_LAYOUTS[shape].mnk
  na, nb, nc = np.shape(a)[0], np.shape(b)[0], np.shape(c)[0]
  lanes = max(np.shape(x)[-1] for x in (a, b, c))
  if lanes % WARP: raise RuntimeError(f"PYTHON: {name} on {lanes} work-items, not whole warps")
  a, b, c = (np.broadcast_to(x, (n, lanes)) for x, n in ((a, na), (b, nb), (c, nc)))
  warps = lanes // WARP
  def gather(x: np.ndarray, which: str, shape2: tuple[int, int]) -> np.ndarray:
    m = np.zeros((warps, *shape2), np.float32)
    rows, cols = _fragment(shape, which, x.shape[0])
    m[:, rows, cols] = x.reshape(x.shape[0], warps, WARP).transpose(1, 2, 0)
    return m
  d = gather(a, "a", (tm, tk)) @ gather(b, "b", (tk, tn)) + gather(c, "c", (tm, tn))
  rows, cols = _fragment(shape, "c", nc)
  return d[:, rows, cols].transpose(2, 0, 1).reshape(nc, lanes).astype(c.dtype)
