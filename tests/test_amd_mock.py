"""The AMD queue on the mock AMD GPU from Python (hcq.AMDQueue over hcq.MockAMDGPU's ring): SDMA copies move bytes,
the dependency tracker orders the SDMA queue and a CPU queue by the memory they touch, a replay of 100 dispatches is
one submit whose patched arguments the mock decodes, and what a queue cannot run is refused before submit, naming the
kernel."""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from tinyhybrid._core import hcq


def amd_queue(gpu: hcq.MockAMDGPU, engine: str, name: str = "amd") -> hcq.AMDQueue:
  return hcq.AMDQueue(name, True, engine, gpu.ring, gpu.side, gpu.wptr, gpu.rptr, gpu.doorbell, gpu.signal(f"{name}:timeline"), gpu)


def test_an_sdma_copy_moves_the_bytes():
  gpu = hcq.MockAMDGPU(sdma=True)
  q = amd_queue(gpu, "sdma")
  src, dst = np.arange(777, dtype=np.int16), np.zeros(777, np.int16)
  cb = hcq.CommandBuffer()
  cb.copy(dst.ctypes.data, src.ctypes.data, src.nbytes)
  q.wait(q.submit(cb), timeout_ms=10_000)
  np.testing.assert_array_equal(dst, src)
  assert q.timeline.value == 1 and gpu.fault == ""


def test_the_tracker_orders_the_sdma_queue_before_a_cpu_queue_that_reads_its_output():
  gpu = hcq.MockAMDGPU(sdma=True)
  sdma, cpu = amd_queue(gpu, "sdma"), hcq.CPUQueue(num_threads=1, name="cpu")
  tracker, gate = hcq.DepsTracker(), gpu.signal("gate")
  src, mid, dst = np.arange(256, dtype=np.int64), np.zeros(256, np.int64), np.zeros(256, np.int64)
  first = hcq.CommandBuffer()
  first.wait(gate, 1)
  first.copy(mid.ctypes.data, src.ctypes.data, 2048)
  first.access(mid.ctypes.data, 0, 2048, write=True)
  first.access(src.ctypes.data, 0, 2048)
  second = hcq.CommandBuffer()
  second.copy(dst.ctypes.data, mid.ctypes.data, 2048)
  second.access(dst.ctypes.data, 0, 2048, write=True)
  second.access(mid.ctypes.data, 0, 2048)
  tracker.submit(sdma, first)
  v = tracker.submit(cpu, second)
  time.sleep(0.05)
  assert cpu.timeline.value < v, "the CPU copy did not wait for the SDMA copy it reads"
  gate.set(1)
  cpu.wait(v, timeout_ms=10_000)
  np.testing.assert_array_equal(dst, src)


def test_a_replay_of_100_dispatches_is_one_submit():
  gpu = hcq.MockAMDGPU()
  q = amd_queue(gpu, "compute")
  prg = hcq.AMDKernel(code=0x10000, kernarg_sgpr=4, kernarg_bytes=16).program("E_16")
  cb = hcq.CommandBuffer()
  slots = [cb.add_slot(0) for _ in range(2)]
  for _ in range(100): cb.exec(prg, [hcq.Patch(slots[0]), hcq.Patch(slots[1], 64)], global_size=(4,), local_size=(64,))
  for k in range(1, 11): v = q.submit(cb, [0x1000 * k, 0x2000 * k])
  q.wait(v, timeout_ms=10_000)
  assert gpu.launches == 1000 and gpu.fault == "" and q.timeline.value == 10


def test_what_a_queue_cannot_run_is_refused_before_submit_naming_the_kernel():
  gpu = hcq.MockAMDGPU()
  q = amd_queue(gpu, "compute")
  cb = hcq.CommandBuffer()
  cb.exec(hcq.AMDKernel(code=0x10000, kernarg_bytes=8).program("two_args"), [1, 2])
  with pytest.raises(ValueError, match="kernel 'two_args' takes 2 argument words, past its kernarg segment of 8 bytes"): q.submit(cb)
  copy = hcq.CommandBuffer()
  copy.copy(0x1000, 0x2000, 16)
  with pytest.raises(ValueError, match="a copy runs on the SDMA queue"): q.submit(copy)
  with pytest.raises(ValueError, match="engine must be 'compute' or 'sdma'"):
    hcq.AMDQueue("x", True, "gfx", gpu.ring, gpu.side, gpu.wptr, gpu.rptr, gpu.doorbell, gpu.signal("x"), gpu)
  assert q.last_submitted == 0 and gpu.launches == 0


def test_a_dispatcher_error_stops_the_mock_and_its_waits_fail_at_once():
  """The mock hands each dispatch to its dispatcher, with the kernarg address in the user SGPRs; one that raises stops
  the mock, and a wait for work it will never do raises hcq.DeviceFault naming the error, not a timeout."""
  seen = []
  def dispatch(program, grid, block, user_data):
    kernarg = user_data[4] | user_data[5] << 32
    seen.append((program, grid, block, list(np.ctypeslib.as_array((ctypes.c_uint64 * 2).from_address(kernarg)))))
    raise KeyError("no such kernel")
  gpu = hcq.MockAMDGPU(dispatch=dispatch)
  q = amd_queue(gpu, "compute")
  cb = hcq.CommandBuffer()
  cb.exec(hcq.AMDKernel(code=0x10000, kernarg_sgpr=4, kernarg_bytes=16).program("E_16"), [11, 13], global_size=(5, 1, 1), local_size=(64, 1, 1))
  v = q.submit(cb)
  start = time.monotonic()
  with pytest.raises(hcq.DeviceFault, match="the mock AMD GPU stopped: the dispatcher failed on the dispatch of the program at 0x10000: .*no such kernel"):
    q.wait(v, timeout_ms=10_000)
  assert time.monotonic() - start < 5 and seen == [(0x10000, (5, 1, 1), (64, 1, 1), [11, 13])]
