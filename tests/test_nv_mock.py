"""The NV queue on the mock GPU from Python (hcq.NVQueue over hcq.MockNVGPU's channel): copies move bytes, the
dependency tracker orders the NV copy queue and a CPU queue by the memory they touch, a replay of 100 launches runs
as one submit with its patched addresses decoded by the mock, and what a queue cannot run is refused before submit,
naming the kernel."""
from __future__ import annotations

import time

import numpy as np
import pytest

from tinyhybrid._core import hcq


def nv_queue(gpu: hcq.MockNVGPU, engine: str, name: str = "nv") -> hcq.NVQueue:
  return hcq.NVQueue(name, True, engine, gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell,
                     hcq.MockNVGPU.token, gpu.signal(f"{name}:timeline"), gpu)


def test_a_copy_on_the_nv_copy_queue_moves_the_bytes():
  gpu = hcq.MockNVGPU()
  q = nv_queue(gpu, "copy")
  src, dst = np.arange(1000, dtype=np.float32), np.zeros(1000, np.float32)
  cb = hcq.CommandBuffer()
  cb.copy(dst.ctypes.data, src.ctypes.data, src.nbytes)
  q.wait(q.submit(cb), timeout_ms=10_000)
  np.testing.assert_array_equal(dst, src)
  assert q.timeline.value == q.last_submitted == 1 and gpu.fault == ""


def test_the_tracker_orders_the_nv_copy_queue_before_a_cpu_queue_that_reads_its_output():
  gpu = hcq.MockNVGPU()
  nvq, cpu = nv_queue(gpu, "copy"), hcq.CPUQueue(num_threads=1, name="cpu")
  tracker, gate = hcq.DepsTracker(), hcq.Signal("gate")
  src, mid, dst = np.arange(512, dtype=np.int32), np.zeros(512, np.int32), np.zeros(512, np.int32)
  first = hcq.CommandBuffer()  # held by the gate: mid = src
  first.wait(gate, 1)
  first.copy(mid.ctypes.data, src.ctypes.data, 2048)
  first.access(mid.ctypes.data, 0, 2048, write=True)
  first.access(src.ctypes.data, 0, 2048)
  second = hcq.CommandBuffer()  # dst = mid, on the CPU
  second.copy(dst.ctypes.data, mid.ctypes.data, 2048)
  second.access(dst.ctypes.data, 0, 2048, write=True)
  second.access(mid.ctypes.data, 0, 2048)
  tracker.submit(nvq, first)
  v = tracker.submit(cpu, second)
  time.sleep(0.05)
  assert cpu.timeline.value < v, "the CPU copy did not wait for the NV copy it reads"
  gate.set(1)
  cpu.wait(v, timeout_ms=10_000)
  np.testing.assert_array_equal(dst, src)


def test_a_replay_of_100_launches_is_one_submit_with_its_addresses_patched():
  gpu = hcq.MockNVGPU()
  q = nv_queue(gpu, "compute")
  kernel = hcq.NVKernel(code=0x1000, registers=16, param_offset=0x210, cbuf0_bytes=0x220)
  prg = kernel.program("E_16")
  cb = hcq.CommandBuffer()
  slots = [cb.add_slot(0) for _ in range(2)]
  for _ in range(100): cb.exec(prg, [hcq.Patch(slots[0]), hcq.Patch(slots[1], 64)], global_size=(4,), local_size=(32,))
  for k in range(1, 11): v = q.submit(cb, [0x1000 * k, 0x2000 * k])
  q.wait(v, timeout_ms=10_000)
  assert gpu.launches == 1000 and gpu.fault == "" and q.timeline.value == 10


def test_an_ampere_queue_refuses_a_timeline_its_semaphores_cannot_reach():
  gpu = hcq.MockNVGPU(hopper=False)
  far = hcq.Signal("far")  # host memory far above 2^40
  assert far.address >> 40
  with pytest.raises(ValueError, match="lies past the 40 bits of address the GPU's semaphores reach"):
    hcq.NVQueue("a", False, "copy", gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell, hcq.MockNVGPU.token, far, gpu)
  q = hcq.NVQueue("a", False, "copy", gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell, hcq.MockNVGPU.token,
                  gpu.signal("a:timeline"), gpu)
  cb = hcq.CommandBuffer()
  cb.signal(far, 1)
  with pytest.raises(ValueError, match="past the 40 bits"): q.submit(cb)
  src, dst = np.arange(64, dtype=np.uint8), np.zeros(64, np.uint8)
  ok = hcq.CommandBuffer()
  ok.copy(dst.ctypes.data, src.ctypes.data, 64)
  q.wait(q.submit(ok), timeout_ms=10_000)
  np.testing.assert_array_equal(dst, src)


def test_what_a_queue_cannot_run_is_refused_before_submit_naming_the_kernel():
  gpu = hcq.MockNVGPU()
  compute, copies = nv_queue(gpu, "compute", "c"), nv_queue(hcq.MockNVGPU(), "copy", "d")
  small = hcq.NVKernel(code=0x1000, registers=8, param_offset=0x160, cbuf0_bytes=0x170)  # room for 2 argument words
  cb = hcq.CommandBuffer()
  cb.exec(small.program("too_many"), [1, 2, 3])
  with pytest.raises(ValueError, match="kernel 'too_many' takes 3 argument words from byte 352, past its constant buffer of 368 bytes"):
    compute.submit(cb)
  with pytest.raises(ValueError, match="a kernel runs on the compute queue"): copies.submit(cb)
  assert compute.last_submitted == 0 and gpu.launches == 0


def test_a_dispatcher_error_stops_the_mock_and_its_waits_fail_at_once():
  """The mock hands each launch to its dispatcher; one that raises stops the mock, and every wait on its signals for
  work it will never do raises hcq.DeviceFault naming the error, not a timeout."""
  seen = []
  def dispatch(program, grid, block, cbuf0, cbuf0_bytes):
    seen.append((program, grid, block, cbuf0_bytes))
    if len(seen) == 2: raise ZeroDivisionError("the second launch")
  gpu = hcq.MockNVGPU(dispatch=dispatch)
  q = nv_queue(gpu, "compute")
  kernel = hcq.NVKernel(code=0x1000, registers=16, param_offset=0x210, cbuf0_bytes=0x220)
  cb = hcq.CommandBuffer()
  cb.exec(kernel.program("E_16"), [7, 9], global_size=(3, 2, 1), local_size=(32, 1, 1))
  q.wait(q.submit(cb), timeout_ms=10_000)
  assert seen == [(0x1000, (3, 2, 1), (32, 1, 1), 0x220)]
  v = q.submit(cb)
  start = time.monotonic()
  for _ in range(2):
    with pytest.raises(hcq.DeviceFault, match="the mock NVIDIA GPU stopped: the dispatcher failed on the launch of QMD .*ZeroDivisionError"):
      q.wait(v, timeout_ms=10_000)
  assert time.monotonic() - start < 5 and "ZeroDivisionError" in gpu.fault
