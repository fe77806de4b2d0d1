"""The NV device on the mock GPU (DEV=NV with MOCKGPU=1, runtime/ops_nv.py): kernels go through hcq.NVQueue as QMD
launches that the mock decodes, and run with the grid, block and argument words it read back from the QMD and
constant buffer 0; values against NumPy, a TinyJit replay as one submit, copies to and from the CPU on the copy
engine, a failing kernel as a DeviceFault, the cubin facts a QMD takes, and the error without a GPU."""
from __future__ import annotations

import os

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, TinyJit, dtypes
from tinyhybrid._core import hcq
from tinyhybrid.runtime import hcq_gpu, ops_nv

hcq_gpu.MOCKGPU = 1  # this module's GPU devices are the mocks, whatever the environment says


def test_values_through_qmd_launches():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((33, 40)).astype(np.float32), rng.standard_normal((40, 17)).astype(np.float32)
  dev = Device["NV"]
  before = dev.compute_gpu.launches
  ta, tb = Tensor(a, device="NV"), Tensor(b, device="NV")
  np.testing.assert_allclose((ta @ tb).relu().numpy(), np.maximum(a @ b, 0), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(ta.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal((Tensor(np.arange(100, dtype=np.int32), device="NV") * 3 - 7).numpy(), np.arange(100) * 3 - 7)
  assert dev.compute_gpu.launches >= before + 3 and dev.compute_gpu.fault == ""


def test_a_jitted_replay_is_one_submit_and_follows_its_inputs():
  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor: return ((x * y).sum(0) + x.max(0)).realize()
  q = Device["NV"].hcq_queue
  for i in range(4):
    x, y = (np.random.default_rng(i).standard_normal((8, 64)).astype(np.float32) for _ in range(2))
    before = q.last_submitted
    got = step(Tensor(x, device="NV"), Tensor(y, device="NV")).numpy()
    np.testing.assert_allclose(got, (x * y).sum(0) + x.max(0), rtol=1e-5, atol=1e-5)
    if i >= 2: assert q.last_submitted == before + 1  # replayed: one submit of the pre-encoded buffer
  assert step.captured is not None


def test_copies_between_the_cpu_and_nv():
  x = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
  before = Device["NV"].copy_queue.last_submitted
  on_nv = Tensor(x).to("NV") * 2
  np.testing.assert_array_equal(on_nv.to("CPU").numpy(), x * 2)
  np.testing.assert_array_equal(Tensor(x, device="NV").to("CPU").numpy(), x)
  assert Device["NV"].copy_queue.last_submitted > before  # the copy into NV ran on its copy channel


def test_a_failing_kernel_is_a_device_fault_at_the_wait():
  x = np.arange(64, dtype=np.float32)
  dev = Device["NV"]
  (Tensor(x, device="NV") + 12345.0).realize()  # compiles its kernel (the newest) and runs it
  victim = list(dev.mock_kernels.values())[-1]
  saved = victim.program.buffers
  victim.program.buffers = tuple((ty, n - 8) for ty, n in saved)  # as if the buffers were 8 elements shorter
  try:
    with pytest.raises(hcq.DeviceFault, match="OutOfBoundsAccess"): (Tensor(x, device="NV") + 12345.0).numpy()
  finally: victim.program.buffers = saved
  np.testing.assert_array_equal((Tensor(x, device="NV") + 1).numpy(), x + 1)  # the device goes on


def test_cubin_facts():
  from tinyhybrid.runtime.cubin import kernel_info
  from tinyhybrid.runtime.cuda_compiler import CUDACompiler, nvrtc_available
  if not nvrtc_available():
    if os.getenv("CI"): raise RuntimeError("NVRTC is part of the test extra")
    pytest.skip("no NVRTC here")
  src = ('extern "C" __global__ void th_k(float* a, const float* b, long long n) {\n'
         '  __shared__ float s[64]; int i = threadIdx.x; s[i] = b[i] * 2.0f; __syncthreads(); if (i < n) a[i] = s[63 - i]; }\n')
  info = kernel_info(CUDACompiler("sm_90").compile(src), "th_k")
  # parameters from 0x160 up to Ampere, 0x210 on Hopper; the shared section counts the 1 KB sm_80 on reserve per block
  assert info.param_offset == 0x210 and info.param_bytes == 24 and info.shared_bytes in (256, 256 + 1024)
  assert 4 <= info.registers <= 64 and len(info.code) % 16 == 0 and len(info.code) > 0
  with pytest.raises(ValueError, match="no kernel"): kernel_info(CUDACompiler("sm_90").compile(src), "other")


def test_without_mockgpu_the_missing_driver_is_named(monkeypatch):
  monkeypatch.setattr(hcq_gpu, "MOCKGPU", 0)
  with pytest.raises(RuntimeError, match=r"DEV=NV: .*(/dev/nvidia|not written yet).*MOCKGPU=1 runs the mock GPU"): ops_nv.NVDevice("NV:7", "sm_90")


def test_half_and_bf16_on_nv():
  x = np.linspace(-2, 2, 96, dtype=np.float32)
  for dt in (dtypes.half, dtypes.bfloat16):
    got = (Tensor(x, device="NV").cast(dt) * Tensor(x, device="NV").cast(dt)).float().numpy()
    ref = (Tensor(x, device="PYTHON").cast(dt) * Tensor(x, device="PYTHON").cast(dt)).float().numpy()
    np.testing.assert_array_equal(got, ref)
