"""Tensor cores on the NVIDIA backends without a GPU (codegen/tc.py): fp16 and bf16 matmuls take the TC action and
render mma.sync (inline asm in CUDA C++, the instruction in PTX), which NVRTC and ptxas compile for sm_90; TC=0 and
shapes that are not made of 16x8x16 tiles fall back to the plain plan. Nothing can run here, so the kernel IR the
renderers get is run by a NumPy emulator of a warp: each lane's fragments are gathered through the index
expressions the lowering produced, placed by the PTX ISA's layout tables for mma.m16n8k16 (written out below,
apart from the code's), multiplied, and scattered back through the store's index expressions; the result must be
the matmul, every output written exactly once."""
from __future__ import annotations

import ctypes.util
import itertools
from collections import OrderedDict

import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes
from tinyhybrid.engine import realize
from tinyhybrid.helpers import Context
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp

CUDA, PTX = "NULL:CUDA:sm_90", "NULL:PTX:sm_90"


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
  """Each test compiles its own kernels (realize keeps compiled schedules and kernels by graph and device)."""
  monkeypatch.setattr(realize, "schedule_cache", OrderedDict())
  monkeypatch.setattr(realize, "kernel_cache", OrderedDict())


def _kernels(run) -> list:
  """The (lowered kernel, program) pairs that running `run` made."""
  before = set(realize.kernel_cache)
  run()
  return [v for key, v in realize.kernel_cache.items() if key not in before]


def _matmul(dev: str, m: int, n: int, k: int, dt, acc=None) -> Tensor:
  a, b = Tensor.empty(m, k, dtype=dt, device=dev), Tensor.empty(k, n, dtype=dt, device=dev)
  return a.matmul(b, dtype=acc) if acc is not None else a @ b


# ** the source **

@pytest.mark.parametrize("dev", [CUDA, PTX])
@pytest.mark.parametrize("dt, acc, types", [(dtypes.half, dtypes.float, "f32.f16.f16.f32"), (dtypes.bfloat16, dtypes.float, "f32.bf16.bf16.f32"),
                                            (dtypes.half, dtypes.half, "f16.f16.f16.f16")])
def test_matmul_renders_mma_and_compiles(dev, dt, acc, types):
  ks = _kernels(lambda: _matmul(dev, 64, 64, 64, dt, acc).realize())  # realize compiles: NVRTC, or ptxas for PTX
  assert len(ks) == 1
  lk, prg = ks[0]
  assert lk.opts[0].op.name == "TC" and lk.launch[1] == (32, 1, 1)  # a warp's lanes are threadIdx.x
  assert f"mma.sync.aligned.m16n8k16.row.col.{types} " in prg.src
  assert ("%tid.x" if dev == PTX else "threadIdx.x") in prg.src


@pytest.mark.parametrize("dev", [CUDA, PTX])
def test_tc_0_and_odd_shapes_fall_back(dev):
  with Context(TC=0): ks = _kernels(lambda: _matmul(dev, 32, 16, 32, dtypes.half, dtypes.float).realize())  # TC would fit it
  assert len(ks) == 1 and "mma" not in ks[0][1].src and not any(o.op.name == "TC" for o in ks[0][0].opts)
  ks = _kernels(lambda: _matmul(dev, 17, 40, 24, dtypes.half, dtypes.float).realize())  # no 16x8x16 tiling
  assert len(ks) == 1 and "mma" not in ks[0][1].src
  ks = _kernels(lambda: (Tensor.empty(32, 32, device=dev) @ Tensor.empty(32, 32, device=dev)).realize())  # fp32: no tensor core
  assert len(ks) == 1 and "mma" not in ks[0][1].src


def test_beam_searches_the_tc_action(monkeypatch):
  from tinyhybrid import Device
  from tinyhybrid import codegen
  from tinyhybrid.codegen import search
  from tinyhybrid.codegen.kernel import Opt, OptOps
  from tinyhybrid.codegen.opt import apply_opts
  seen, orig = [], codegen.optimize
  monkeypatch.setattr(codegen, "optimize", lambda k, ren=None, choose=None: seen.append(k) or orig(k, ren, choose))
  _matmul(CUDA, 32, 32, 32, dtypes.bfloat16, dtypes.float).realize()
  ren = Device[CUDA].renderer
  acts = search.actions(seen[0].ast, ren)
  assert Opt(OptOps.TC, 0, -1) in acts
  # after TC: the tile's loops take UPCAST and LOCAL, the tensor core's own ranges nothing, and no second TC
  after = search.actions(apply_opts(seen[0].ast, [Opt(OptOps.TC, 0, -1)], ren), ren)
  assert after and not any(o.op is OptOps.TC for o in after) and {o.op for o in after} <= {OptOps.UPCAST, OptOps.LOCAL, OptOps.SWAP, OptOps.UNROLL}
  with Context(TC=0): assert not any(o.op is OptOps.TC for o in search.actions(seen[0].ast, ren))


def test_old_architectures_have_no_tensor_cores():
  from tinyhybrid.renderer.cuda import CUDARenderer
  from tinyhybrid.renderer.ptx import PTXRenderer
  assert CUDARenderer("sm_75").tensor_cores == [] and PTXRenderer("sm_70").tensor_cores == []
  assert {(t.dtype_in, t.dtype_out) for t in CUDARenderer("sm_80").tensor_cores} == \
         {(dtypes.half, dtypes.float), (dtypes.bfloat16, dtypes.float), (dtypes.half, dtypes.half)}


# ** a warp, emulated **

# The PTX ISA's fragment layouts for mma.m16n8k16 with .f16/.bf16 inputs ("Matrix Fragments for mma.m16n8k16 with
# floating point type"): groupID = laneid >> 2, threadID_in_group = laneid % 4.
def _isa_a(lane: int, i: int) -> tuple[int, int]:
  g, t = lane >> 2, lane % 4
  row = g if i in (0, 1, 4, 5) else g + 8
  col = t * 2 + (i & 1) if i < 4 else t * 2 + (i & 1) + 8
  return row, col

def _isa_b(lane: int, i: int) -> tuple[int, int]:
  g, t = lane >> 2, lane % 4
  return (t * 2 + (i & 1) if i < 2 else t * 2 + (i & 1) + 8), g

def _isa_c(lane: int, i: int) -> tuple[int, int]:
  g, t = lane >> 2, lane % 4
  return (g if i < 2 else g + 8), t * 2 + (i & 1)


def _table(fn, rows: int, cols: int, n: int) -> np.ndarray:
  """For each (row, column) of a fragment's matrix, the (lane, register) holding it; each exactly once."""
  where = np.full((rows, cols, 2), -1)
  for lane, i in itertools.product(range(32), range(n)):
    r, c = fn(lane, i)
    assert where[r, c, 0] == -1
    where[r, c] = lane, i
  assert (where >= 0).all()
  return where


_A, _B, _C = _table(_isa_a, 16, 16, 8), _table(_isa_b, 16, 8, 4), _table(_isa_c, 16, 8, 4)


def _mma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
  """One warp's mma.sync: fragments in (32 lanes, registers) out, per the ISA's layout."""
  am, bm, cm = a[_A[..., 0], _A[..., 1]], b[_B[..., 0], _B[..., 1]], c[_C[..., 0], _C[..., 1]]
  d = am @ bm + cm
  out = np.empty_like(c)
  out[_C[..., 0], _C[..., 1]] = d
  return out


_BIN = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.SUB: np.subtract, Ops.FLOORDIV: np.floor_divide, Ops.FLOORMOD: np.mod,
        Ops.SHL: np.left_shift, Ops.SHR: np.right_shift, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.MAX: np.maximum}


def _eval(u: UOp, env: dict[UOp, np.ndarray], memo: dict) -> np.ndarray:
  """An index expression's value at every point of env (ranges -> integer arrays)."""
  if u in memo: return memo[u]
  if u.op is Ops.RANGE: v = env[u]
  elif u.op is Ops.CONST: v = np.int64(u.arg)
  elif u.op in _BIN: v = _BIN[u.op](*(_eval(s, env, memo) for s in u.src))
  elif u.op in (Ops.CDIV, Ops.CMOD):
    a, b = (_eval(s, env, memo) for s in u.src)
    q = np.trunc(a / b).astype(np.int64)
    v = q if u.op is Ops.CDIV else a - q * b
  elif u.op is Ops.CAST: v = _eval(u.src[0], env, memo)
  else: raise NotImplementedError(f"emulator: {u.op} in an index")
  memo[u] = v
  return v


def _emulate(lk, bufs: list[np.ndarray]) -> np.ndarray:
  """Runs the expanded kernel lk the way the GPU would: every warp of the grid, every step of its reduce loops."""
  end = lk.ast.src[0]
  stores, loops = end.src[0].src, end.src[1:]
  lane = next(r for r in loops if r.arg[1] is AxisType.WARP)
  others = [r for r in loops if r is not lane]
  assert all(r.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL) for r in others)
  out, written = np.zeros_like(bufs[0], dtype=np.float64), np.zeros(bufs[0].shape, dtype=np.int64)
  lanes = np.arange(32)
  for pos in itertools.product(*[range(r.src[0].arg) for r in others]):
    base = {lane: lanes} | {r: np.int64(p) for r, p in zip(others, pos)}
    accs: dict[UOp, np.ndarray] = {}
    memo: dict = {}
    for st in stores:
      val = st.src[1]
      while val.op is Ops.CAST: val = val.src[0]
      assert val.op is Ops.GEP and val.src[0].op is Ops.REDUCE, val.op
      red = val.src[0]
      if red not in accs:
        n = red.arg[1]
        acc = np.zeros((32, red.dtype.count))
        rl = red.src[n:]
        for step in itertools.product(*[range(r.src[0].arg) for r in rl]):
          env = base | {r: np.int64(s) for r, s in zip(rl, step)}
          m: dict = {}
          for term in red.src[:n]:
            assert term.op is Ops.WMMA
            frags = []
            for vec in term.src:
              cols = []
              for ld in vec.src:
                lane_of = 0
                if ld.op is Ops.CAST: ld = ld.src[0]  # an input cast in the registers: exact for the small integers used here
                if ld.op is Ops.GEP: ld, lane_of = ld.src[0], ld.arg[0]  # a lane of a vector load
                assert ld.op is Ops.LOAD and len(ld.src) == 1, "a fragment's element is one ungated load"
                buf, idx = ld.src[0].src
                cols.append(bufs[buf.arg][np.broadcast_to(_eval(idx, env, m) + lane_of, (32,))])
              frags.append(np.stack(cols, axis=1))
            acc = _mma(frags[0], frags[1], acc)
        accs[red] = acc
      idx = np.broadcast_to(_eval(st.src[0].src[1], base, memo), (32,))
      out[idx] = accs[red][:, val.arg[0]]
      np.add.at(written, idx, 1)
  assert (written == 1).all(), f"outputs written {np.unique(written)} times"
  return out


@pytest.mark.parametrize("dev", [CUDA, PTX])
@pytest.mark.parametrize("m, n, k, dt, acc", [(64, 64, 64, dtypes.half, dtypes.float), (48, 80, 32, dtypes.bfloat16, dtypes.float),
                                              (16, 8, 16, dtypes.half, dtypes.half), (32, 256, 48, dtypes.half, dtypes.float)])
def test_emulated_warp_computes_the_matmul(dev, m, n, k, dt, acc):
  ks = _kernels(lambda: _matmul(dev, m, n, k, dt, acc).realize())
  assert len(ks) == 1 and ks[0][0].opts[0].op.name == "TC"
  lk = ks[0][0]
  rng = np.random.default_rng(m * n + k)
  a, b = rng.integers(-4, 5, (m, k)).astype(np.float64), rng.integers(-4, 5, (k, n)).astype(np.float64)  # exact in fp16
  assert [b.size for b in lk.buffers] == [m * n, m * k, k * n]  # PARAM 1 is A, PARAM 2 is B
  bufs = [np.zeros(m * n), a.ravel(), b.ravel()]
  np.testing.assert_array_equal(_emulate(lk, bufs).reshape(m, n), a @ b)


@pytest.mark.parametrize("dev", [CUDA, PTX])
def test_emulated_matmul_of_float_inputs_cast_to_half(dev):
  """A float32 matmul cast to half on the way in (x.half() @ w.half()) is one kernel on the tensor cores: the cast is
  computed in the fragments' registers (an H200 took the scalar path for it, at a tenth of the speed)."""
  m, n, k = 48, 32, 64
  def run() -> None:
    a, b = Tensor.empty(m, k, device=dev), Tensor.empty(k, n, device=dev)
    a.cast(dtypes.half).matmul(b.cast(dtypes.half), dtype=dtypes.float).realize()
  ks = _kernels(run)
  assert len(ks) == 1 and ks[0][0].opts[0].op.name == "TC" and "mma.sync" in ks[0][1].src
  lk = ks[0][0]
  rng = np.random.default_rng(4)
  a, b = rng.integers(-4, 5, (m, k)).astype(np.float64), rng.integers(-4, 5, (k, n)).astype(np.float64)
  np.testing.assert_array_equal(_emulate(lk, [np.zeros(m * n), a.ravel(), b.ravel()]).reshape(m, n), a @ b)


@pytest.mark.parametrize("dev", [CUDA, PTX])
def test_emulated_batched_matmul_with_a_transposed_operand(dev):
  bs, m, n, k = 2, 32, 24, 32
  def run() -> None:
    a, b = Tensor.empty(bs, m, k, dtype=dtypes.half, device=dev), Tensor.empty(bs, n, k, dtype=dtypes.half, device=dev)
    a.matmul(b.transpose(1, 2), dtype=dtypes.float).realize()
  ks = _kernels(run)
  assert len(ks) == 1 and ks[0][0].opts[0].op.name == "TC" and "mma.sync" in ks[0][1].src
  lk = ks[0][0]
  rng = np.random.default_rng(3)
  a, b = rng.integers(-4, 5, (bs, m, k)).astype(np.float64), rng.integers(-4, 5, (bs, n, k)).astype(np.float64)
  assert [x.size for x in lk.buffers] == [bs * m * n, bs * m * k, bs * n * k]
  got = _emulate(lk, [np.zeros(bs * m * n), a.ravel(), b.ravel()]).reshape(bs, m, n)
  np.testing.assert_array_equal(got, a @ b.transpose(0, 2, 1))


@pytest.mark.parametrize("dev", [CUDA, PTX])
def test_emulated_tc_with_unrolled_k_and_more_warps(dev, monkeypatch):
  """What BEAM may add after TC: several instructions per accumulator per step (UNROLL of k), warps side by side
  (LOCAL), more tiles per warp (UPCAST)."""
  from tinyhybrid import Device
  from tinyhybrid import codegen
  from tinyhybrid.codegen.kernel import KernelParts, Opt, OptOps
  seen, orig = [], codegen.optimize
  monkeypatch.setattr(codegen, "optimize", lambda k, ren=None, choose=None: seen.append(k) or orig(k, ren, choose))
  m, n, k = 64, 32, 64
  _matmul(dev, m, n, k, dtypes.half, dtypes.float).realize()
  p = KernelParts.of(seen[0].ast)
  (rm, rn), (rk,) = p.loops, p.reduce_ranges
  opts = [Opt(OptOps.TC, 0, -1), Opt(OptOps.UNROLL, rk.arg[0], 2), Opt(OptOps.LOCAL, rm.arg[0], 2), Opt(OptOps.UPCAST, rn.arg[0], 2)]
  lk = codegen.finalize(seen[0], opts, Device[dev].renderer)
  assert lk.launch[1] == (32, 2, 1)
  rng = np.random.default_rng(5)
  a, b = rng.integers(-4, 5, (m, k)).astype(np.float64), rng.integers(-4, 5, (k, n)).astype(np.float64)
  np.testing.assert_array_equal(_emulate(lk, [np.zeros(m * n), a.ravel(), b.ravel()]).reshape(m, n), a @ b)
  src = Device[dev].renderer.render(lk)
  Device[dev].compiler.compile(src)
  assert src.count("mma.sync") == 4  # 2 tiles per warp, 2 steps of k per loop


def test_emulator_catches_a_wrong_layout(monkeypatch):
  """The emulator is not a tautology: a lowering with A's registers in the wrong places gives a wrong product."""
  from tinyhybrid.renderer import MMA16816
  monkeypatch.setattr(MMA16816, "a_elem", lambda self, lane, reg: (lane // 4 + reg // 4 * 8, lane % 4 * 2 + reg % 2 + reg // 2 % 2 * 8))
  ks = _kernels(lambda: _matmul(CUDA, 32, 16, 16, dtypes.half, dtypes.float).realize())
  lk = ks[0][0]
  rng = np.random.default_rng(1)
  a, b = rng.integers(-4, 5, (32, 16)).astype(np.float64), rng.integers(-4, 5, (16, 16)).astype(np.float64)
  with pytest.raises(AssertionError, match="not equal"): np.testing.assert_array_equal(_emulate(lk, [np.zeros(32 * 16), a.ravel(), b.ravel()]).reshape(32, 16), a @ b)


# ** on a GPU (bench/gpu_check.sh runs this file there) **

@pytest.mark.parametrize("dev", ["CUDA", "CUDA:PTX"])
@pytest.mark.parametrize("dt, acc", [(dtypes.half, dtypes.float), (dtypes.bfloat16, dtypes.float), (dtypes.half, dtypes.half)])
def test_tc_matmul_on_the_device(dev, dt, acc):
  if ctypes.util.find_library("cuda") is None: pytest.skip("no CUDA driver here: the emulator above stands in for the device")
  rng = np.random.default_rng(0)
  a, b = rng.integers(-4, 5, (96, 64)).astype(np.float32), rng.integers(-4, 5, (64, 48)).astype(np.float32)  # exact in every dtype
  got: dict[str, np.ndarray] = {}
  def run() -> None: got["c"] = Tensor(a, device=dev).cast(dt).matmul(Tensor(b, device=dev).cast(dt), dtype=acc).float().numpy()
  ks = _kernels(run)
  assert any("mma.sync" in prg.src for _, prg in ks)
  np.testing.assert_array_equal(got["c"], a @ b)
