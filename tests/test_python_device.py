"""The PYTHON device (runtime/ops_python.py, renderer/python.py): the GPU lowering run by NumPy with every work-item of
a batch in lockstep. Its values against NumPy and torch, the tensor cores of PYTHON::sm_80 on the real lowering (the
warp's layout is the PTX ISA's, written in runtime/lanes.py apart from the renderer's, so a wrong layout in the
lowering shows), its checked memory accesses, and its device names. The GPU actions one by one run in
test_gpu_opts.py, and `DEV=PYTHON python -m pytest tests` runs the suite's device slice on it."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid import codegen
from tinyhybrid.codegen.kernel import KernelParts, Opt, OptOps
from tinyhybrid.device import Buffer
from tinyhybrid.engine import realize
from tinyhybrid.runtime.lanes import OutOfBoundsAccess

EMU = "PYTHON:sm_80"


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
  monkeypatch.setattr(realize, "schedule_cache", OrderedDict())
  monkeypatch.setattr(realize, "kernel_cache", OrderedDict())


def _kernels(run) -> list:
  before = set(realize.kernel_cache)
  run()
  return [v for key, v in realize.kernel_cache.items() if key not in before]


def _ints(rng, *shape) -> np.ndarray: return rng.integers(-4, 5, shape).astype(np.float32)  # exact in fp16 and bf16 products


# ** tensor cores **

@pytest.mark.parametrize("m, n, k, dt, acc", [(64, 64, 64, dtypes.half, dtypes.float), (48, 80, 32, dtypes.bfloat16, dtypes.float),
                                              (16, 8, 16, dtypes.half, dtypes.half), (32, 256, 48, dtypes.half, dtypes.float)])
def test_tc_matmul(m, n, k, dt, acc):
  rng = np.random.default_rng(m + n + k)
  a, b = _ints(rng, m, k), _ints(rng, k, n)
  ta, tb = Tensor(a, device=EMU).cast(dt).realize(), Tensor(b, device=EMU).cast(dt).realize()
  got: dict[str, np.ndarray] = {}
  ks = _kernels(lambda: got.update(c=ta.matmul(tb, dtype=acc).numpy()))
  assert [lk.opts[0].op for lk, _ in ks if lk.opts] == [OptOps.TC] and "th.wmma('m16n8k16." in ks[0][1].src
  np.testing.assert_array_equal(got["c"].astype(np.float32), a @ b)


def test_tc_batched_with_a_transposed_operand():
  rng = np.random.default_rng(3)
  a, b = _ints(rng, 2, 32, 32), _ints(rng, 2, 24, 32)
  ta, tb = Tensor(a, device=EMU).half().realize(), Tensor(b, device=EMU).half().realize()
  np.testing.assert_array_equal(ta.matmul(tb.transpose(1, 2), dtype=dtypes.float).numpy(), a @ b.transpose(0, 2, 1))


def _tc_kernel(m: int, n: int, k: int, opts_after_tc) -> tuple:
  """The 64x32x64 fp16 matmul kernel lowered with TC and then `opts_after_tc(m, n, k ranges)`, and its PYTHON program."""
  seen = []
  orig = codegen.optimize
  codegen.optimize = lambda kk, ren=None, choose=None: seen.append(kk) or orig(kk, ren, choose)
  try: Tensor.empty(m, k, dtype=dtypes.half, device=EMU).matmul(Tensor.empty(k, n, dtype=dtypes.half, device=EMU), dtype=dtypes.float).realize()
  finally: codegen.optimize = orig
  p = KernelParts.of(seen[0].ast)
  (rm, rn), (rk,) = p.loops, p.reduce_ranges
  lk = codegen.finalize(seen[0], [Opt(OptOps.TC, 0, -1), *opts_after_tc(rm.arg[0], rn.arg[0], rk.arg[0])], Device[EMU].renderer)
  return lk, Device[EMU].compile(lk.name, Device[EMU].renderer.render(lk))


def _run(lk, prg, *inputs: np.ndarray) -> np.ndarray:
  out = Buffer(EMU, lk.buffers[0].size, dtypes.float)
  bufs = [out] + [Buffer(EMU, x.size, dtypes.half, initial=x.astype(np.float16)) for x in inputs]
  prg.call([b.address for b in bufs], lk.launch)
  return out.numpy()


def test_tc_with_unrolled_k_more_warps_and_tiles():
  """What BEAM may add after TC: two instructions per step (UNROLL of k), warps side by side (LOCAL), two tiles a warp."""
  lk, prg = _tc_kernel(64, 32, 64, lambda m, n, k: [Opt(OptOps.UNROLL, k, 2), Opt(OptOps.LOCAL, m, 2), Opt(OptOps.UPCAST, n, 2)])
  assert lk.launch[1] == (32, 2, 1) and prg.src.count("th.wmma(") == 4
  rng = np.random.default_rng(5)
  a, b = _ints(rng, 64, 64), _ints(rng, 64, 32)
  np.testing.assert_array_equal(_run(lk, prg, a, b).reshape(64, 32), a @ b)


def test_a_wrong_layout_in_the_lowering_gives_a_wrong_product(monkeypatch):
  """The emulated instruction reads the fragments where the ISA puts them: a lowering that places A's registers
  elsewhere computes something else (the check is not the lowering agreeing with itself)."""
  from tinyhybrid.renderer import MMA16816
  monkeypatch.setattr(MMA16816, "a_elem", lambda self, lane, reg: (lane // 4 + reg // 4 * 8, lane % 4 * 2 + reg % 2 + reg // 2 % 2 * 8))
  rng = np.random.default_rng(1)
  a, b = _ints(rng, 32, 16), _ints(rng, 16, 16)
  got = Tensor(a, device=EMU).half().realize().matmul(Tensor(b, device=EMU).half().realize(), dtype=dtypes.float).numpy()
  assert not np.array_equal(got, a @ b)


def test_plain_python_has_no_tensor_cores():
  assert Device["PYTHON"].renderer.tensor_cores == [] and Device[EMU].renderer.tensor_cores
  rng = np.random.default_rng(2)
  a, b = _ints(rng, 32, 32), _ints(rng, 32, 16)
  ks = _kernels(lambda: Tensor(a, device="PYTHON").half().realize().matmul(Tensor(b, device="PYTHON").half().realize(), dtype=dtypes.float).numpy())
  assert all("wmma" not in prg.src for _, prg in ks)


# ** values **

def test_values_against_torch():
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 3, 9, 7)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x, device="PYTHON"), Tensor(w, device="PYTHON")
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).relu()
  np.testing.assert_allclose(tx.conv2d(tw, padding=1).relu().numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(tx.softmax(-1).numpy(), torch.tensor(x).softmax(-1).numpy(), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(tx.sum((0, 2)).numpy(), x.sum((0, 2)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt, tdt", [(dtypes.half, torch.float16), (dtypes.bfloat16, torch.bfloat16)])
def test_16_bit_floats_round_every_result(dt, tdt):
  """Products and sums of tensors round to the type after every operation, as torch's do; a division (a product with
  the reciprocal) and a transcendental give the CPU backend's bits."""
  rng = np.random.default_rng(6)
  x, y, z = (rng.standard_normal(257).astype(np.float32) for _ in range(3))
  tx, ty, tz = (Tensor(v, device="PYTHON").cast(dt) for v in (x, y, z))
  rx, ry, rz = (torch.tensor(v).to(tdt) for v in (x, y, z))
  np.testing.assert_array_equal((tx * ty + tz).cast(dtypes.float).numpy(), (rx * ry + rz).float().numpy())
  def f(dev: str) -> np.ndarray: return (Tensor(x, device=dev).cast(dt) * 1.7 / Tensor(y, device=dev).cast(dt)).exp().cast(dtypes.float).numpy()
  np.testing.assert_array_equal(f("PYTHON"), f("CPU"))


def test_integer_division_at_the_extremes():
  a = np.array([-2**63, 2**63 - 1, -7, 7, 0], dtype=np.int64)
  b = np.array([-1, -1, 2, -2, 3], dtype=np.int64)
  ta, tb = Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")
  np.testing.assert_array_equal((ta // tb).numpy(), [-2**63, -(2**63 - 1), -4, -4, 0])
  np.testing.assert_array_equal((ta % tb).numpy(), [0, 0, 1, -1, 0])
  u = np.array([2**64 - 1, 2**63], dtype=np.uint64)
  np.testing.assert_array_equal((Tensor(u, device="PYTHON") // 2).numpy(), u // 2)


# ** memory accesses and names **

def test_an_access_outside_its_buffer_is_an_error_naming_it():
  from tinyhybrid.uop import Ops
  rng = np.random.default_rng(4)
  x = rng.standard_normal(64).astype(np.float32)
  ks = _kernels(lambda: (Tensor(x, device="PYTHON") * 2).numpy())
  lk, prg = ks[0]
  assert any(u.op is Ops.LOAD for u in lk.ast.toposort())
  small = Buffer("PYTHON", 64, dtypes.float, initial=x)
  out = Buffer("PYTHON", 64, dtypes.float)
  prg.call([out.address, small.address], lk.launch)
  np.testing.assert_array_equal(out.numpy(), x * 2)
  prg.keepalive.buffers = ((np.float32, 64), (np.float32, 60))  # as if the input were 60 elements
  with pytest.raises(OutOfBoundsAccess, match=r"reads data1\[6[0-3]\], outside its 60 elements"): prg.call([out.address, small.address], lk.launch)


def test_device_names():
  assert Device.canonicalize("PYTHON::sm_80") == Device.canonicalize("python:sm_80") == "PYTHON:sm_80"
  with pytest.raises(ValueError, match="not an architecture"): Device["PYTHON:gfx1100"]
  with pytest.raises(ValueError, match="renders Python"): Device["PYTHON:CUDA"]
