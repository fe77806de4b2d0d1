"""The TC action: a matmul-shaped reduce (a sum over k of A[m, k] * B[k, n], fp16 or bf16 inputs, maybe cast to the
accumulator's type) done on the device's tensor cores (Renderer.tensor_cores, tinygrad's TC option). Its output
loops m and n and its reduce loop k are split into tiles of the instruction's (M, N, K); within a tile, the warp's
lanes (a WARP range, threadIdx.x) and the fragments' registers (an UNROLL range each for A and B, an UPCAST range for
C) take the places the instruction's layout gives them (TensorCore.a_elem, b_elem, c_elem). The reduce's body
becomes WMMA(a, b, c_reg, a_reg, b_reg): A's element at (lane, a_reg) and B's at (lane, b_reg), the sum's element
at (lane, c_reg); the expander (codegen/expand.py) gathers the fragments into vectors and keeps one accumulator
vector per tile, which the renderer updates with the instruction. Shapes that are not multiples of the tile don't
take the action (TC_OPT's padding is not implemented), and the kernel falls back to the plain plan."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.codegen.kernel import KernelOptError, KernelParts, rkind, rng, rsize

if TYPE_CHECKING:
  from tinyhybrid.renderer import Renderer, TensorCore

TC_INPUTS = (dtypes.half, dtypes.bfloat16)


def _operand(x: UOp, acc) -> UOp | None:
  """The fp16/bf16 value a factor of the product is (through a cast to the accumulator's type), else None: a load, or
  an elementwise expression such as a float32 load cast to half, which the fragments then compute lane by lane."""
  if x.op is Ops.CAST and x.dtype == acc: x = x.src[0]
  return x if x.dtype in TC_INPUTS and not any(u.op is Ops.REDUCE for u in x.toposort()) else None


def has_tc(ast: UOp) -> bool: return any(u.op is Ops.WMMA for u in ast.toposort())


def tc_choices(k: KernelParts) -> list[tuple[UOp, UOp, UOp, UOp, UOp]]:
  """The (m, n, k, A load, B load) triples of loops a TC action could take in this kernel, in the order its axis
  argument numbers them; none when the kernel is not a product summed over k."""
  red = k.reduce
  if red is None or red.arg is not Ops.ADD or red.src[0].op is not Ops.MUL: return []
  x, y = (_operand(s, red.dtype) for s in red.src[0].src)
  if x is None or y is None or x.dtype != y.dtype: return []
  if any(rkind(r) not in (AxisType.LOOP, AxisType.REDUCE) or r.src[0].op is not Ops.CONST for r in k.all_ranges()): return []
  out = []
  for a, b in ((x, y), (y, x)):
    ia, ib = set(a.toposort()), set(b.toposort())
    ms = [r for r in k.loops if r in ia and r not in ib]
    ns = [r for r in k.loops if r in ib and r not in ia]
    ks = [r for r in k.reduce_ranges if r in ia and r in ib]
    out += [(m, n, kk, a, b) for m, n, kk in itertools.product(ms, ns, ks)]
  return out


def pick_tc(ren: Renderer, dtype_in, dtype_out, select: int) -> TensorCore | None:
  tcs = ren.tensor_cores[select:select + 1] if select >= 0 else ren.tensor_cores
  return next((tc for tc in tcs if tc.dtype_in == dtype_in and tc.dtype_out == dtype_out), None)


def apply_tc(k: KernelParts, axis: int, select: int, ren: Renderer | None, next_axis: int) -> None:
  """The TC action on k (in place): the axis-th choice of tc_choices, on tensor core `select` (-1: the first that
  fits the dtypes)."""
  if ren is None or not ren.tensor_cores: raise KernelOptError("TC: this device has no tensor cores")
  choices = tc_choices(k)
  if not 0 <= axis < len(choices): raise KernelOptError(f"TC: no matmul choice {axis} in this kernel ({len(choices)} of them)")
  m, n, kr, a, b = choices[axis]
  red = k.reduce
  assert red is not None
  tc = pick_tc(ren, a.dtype, red.dtype, select)
  if tc is None: raise KernelOptError(f"TC: no tensor core for {a.dtype} inputs accumulated in {red.dtype}")
  tn, tm, tk = tc.dims
  if rsize(m) % tm or rsize(n) % tn or rsize(kr) % tk:
    raise KernelOptError(f"TC: a {rsize(m)}x{rsize(n)}x{rsize(kr)} matmul is not made of {tm}x{tn}x{tk} tiles")
  ax = itertools.count(next_axis)
  def outer(r: UOp, t: int, kind: AxisType) -> UOp | None: return rng(rsize(r) // t, r.arg[0], kind) if rsize(r) > t else None
  mo, no, ko = outer(m, tm, AxisType.LOOP), outer(n, tn, AxisType.LOOP), outer(kr, tk, AxisType.REDUCE)
  lane = rng(tc.threads, next(ax), AxisType.WARP)
  ra, rb = rng(tc.elements[0], next(ax), AxisType.UNROLL), rng(tc.elements[1], next(ax), AxisType.UNROLL)
  rc = rng(tc.elements[2], next(ax), AxisType.UPCAST)
  def at(o: UOp | None, t: int, inner) -> UOp: return inner if o is None else o * t + inner
  am, ak = tc.a_elem(lane, ra)
  bk, bn = tc.b_elem(lane, rb)
  cm, cn = tc.c_elem(lane, rc)
  a_val = a.substitute({m: at(mo, tm, am), kr: at(ko, tk, ak)}).simplify()
  b_val = b.substitute({kr: at(ko, tk, bk), n: at(no, tn, bn)}).simplify()
  wmma = UOp(Ops.WMMA, red.dtype, (a_val, b_val, rc, ra, rb), tc.name)
  rest = [r for r in red.src[1:] if r is not kr]
  new_red = UOp(Ops.REDUCE, red.dtype, (wmma, *([ko] if ko is not None else []), *rest, ra, rb), red.arg)
  # what the kernel does with the sum (an epilogue, the store) happens at the place of the sum's element
  subs = {m: at(mo, tm, cm), n: at(no, tn, cn)}
  k.value = k.value.substitute({red: new_red}).substitute(subs).simplify()
  k.reduce = next(u for u in k.value.toposort() if u.op is Ops.REDUCE)
  k.move_outs(subs)
  loops = [o for r in k.loops for o in ([mo] if r is m else [no] if r is n else [r]) if o is not None]
  k.loops = loops + [lane, rc]
