"""The AMD device on the mock GPU (DEV=AMD with MOCKGPU=1, runtime/ops_amd.py): kernels go through hcq.AMDQueue as
PM4 dispatches that the mock decodes, and run with the grid, work-group and the argument words at the kernarg address
the user SGPRs carry; values against NumPy, a TinyJit replay as one submit, SDMA copies to and from the CPU, a failing
kernel as a DeviceFault, and the error without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, TinyJit
from tinyhybrid._core import hcq
from tinyhybrid.runtime import hcq_gpu, ops_amd

hcq_gpu.MOCKGPU = 1  # this module's GPU devices are the mocks, whatever the environment says


def test_values_through_pm4_dispatches():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((29, 64)).astype(np.float32), rng.standard_normal((64, 21)).astype(np.float32)
  dev = Device["AMD"]
  before = dev.compute_gpu.launches
  ta, tb = Tensor(a, device="AMD"), Tensor(b, device="AMD")
  np.testing.assert_allclose((ta @ tb).exp2().numpy(), np.exp2(a @ b), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(ta.max(0).numpy(), a.max(0))
  assert dev.compute_gpu.launches >= before + 2 and dev.compute_gpu.fault == ""


def test_a_jitted_replay_is_one_submit_and_follows_its_inputs():
  @TinyJit
  def step(x: Tensor) -> Tensor: return (x.softmax(-1) * 3).realize()
  q = Device["AMD"].hcq_queue
  for i in range(4):
    x = np.random.default_rng(i).standard_normal((4, 50)).astype(np.float32)
    before = q.last_submitted
    got = step(Tensor(x, device="AMD")).numpy()
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(-1, keepdims=True) * 3, rtol=1e-5, atol=1e-6)
    if i >= 2: assert q.last_submitted == before + 1


def test_sdma_copies_between_the_cpu_and_amd():
  x = np.random.default_rng(1).standard_normal(513).astype(np.float32)
  before = Device["AMD"].copy_queue.last_submitted
  np.testing.assert_array_equal((Tensor(x).to("AMD") + 1).to("CPU").numpy(), x + 1)
  assert Device["AMD"].copy_queue.last_submitted > before  # the copy into AMD ran on its SDMA ring


def test_a_failing_kernel_is_a_device_fault_at_the_wait():
  x = np.arange(32, dtype=np.float32)
  dev = Device["AMD"]
  (Tensor(x, device="AMD") * 54321.0).realize()
  victim = list(dev.mock_kernels.values())[-1]
  saved = victim.program.buffers
  victim.program.buffers = tuple((ty, n - 4) for ty, n in saved)
  try:
    with pytest.raises(hcq.DeviceFault, match="OutOfBoundsAccess"): (Tensor(x, device="AMD") * 54321.0).numpy()
  finally: victim.program.buffers = saved
  np.testing.assert_array_equal((Tensor(x, device="AMD") * 2).numpy(), x * 2)


def test_without_mockgpu_the_missing_driver_is_named(monkeypatch):
  monkeypatch.setattr(hcq_gpu, "MOCKGPU", 0)
  with pytest.raises(RuntimeError, match=r"DEV=AMD: .*(/dev/kfd|/dev/dri|not written yet).*MOCKGPU=1 runs the mock GPU"): ops_amd.AMDDevice("AMD:7")
