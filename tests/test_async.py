"""Asynchronous execution through HCQ (runtime/hcq.py): submits return at once, the dependency tracker orders queues
by the memory they declare, and the host waits only when it touches memory a submit still uses. The in-flight work in
these tests is held back by a planted wait on a signal the test raises itself, so what must wait provably waits."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, TinyJit
from tinyhybrid._core import hcq
from tinyhybrid.device import Buffer, dtypes
from tinyhybrid.helpers import Context
from tinyhybrid.renderer.cstyle import STATE_MARK
from tinyhybrid.runtime import hcq as runtime


def _gated_copy(queue: hcq.Queue, gate: hcq.Signal, dst: int, src: int, nbytes: int, dst_off: int = 0, src_off: int = 0) -> int:
  """A copy on queue that starts once gate reaches 1, submitted through the tracker with its accesses."""
  cb = hcq.CommandBuffer()
  cb.wait(gate, 1)
  cb.copy(dst + dst_off, src + src_off, nbytes)
  cb.access(dst, dst_off, dst_off + nbytes, write=True)
  cb.access(src, src_off, src_off + nbytes)
  return runtime.submit(queue, cb)


def _copy(queue: hcq.Queue, dst: int, src: int, nbytes: int, dst_off: int = 0, src_off: int = 0) -> int:
  cb = hcq.CommandBuffer()
  cb.copy(dst + dst_off, src + src_off, nbytes)
  cb.access(dst, dst_off, dst_off + nbytes, write=True)
  cb.access(src, src_off, src_off + nbytes)
  return runtime.submit(queue, cb)


def _open_later(gate: hcq.Signal, delay: float, opened: list[float]) -> threading.Thread:
  def go() -> None:
    time.sleep(delay)
    opened.append(time.monotonic())
    gate.set(1)
  (t := threading.Thread(target=go)).start()
  return t


def test_realize_returns_before_the_work_is_done_and_numpy_waits():
  gate = hcq.Signal("gate")
  q = Device["CPU"].queue
  a = Tensor(np.arange(1024, dtype=np.float32)).realize()
  hold = Buffer("CPU", 1024, dtypes.float32).ensure_allocated()
  # the queue is held: everything submitted after this runs only once the gate opens
  _gated_copy(q, gate, hold.address, a._buffer().address, 4096)
  out = (a * 2 + 1).realize()
  assert q.timeline.value < q.last_submitted, "realize waited for the queue"
  opened: list[float] = []
  t = _open_later(gate, 0.2, opened)
  got = out.numpy()
  assert opened and time.monotonic() >= opened[0], "numpy() returned before the work it reads was done"
  np.testing.assert_allclose(got, np.arange(1024) * 2 + 1)
  t.join()


def test_a_write_from_python_waits_for_the_submit_that_reads_the_buffer():
  gate = hcq.Signal("gate")
  q = Device["CPU"].queue
  src = Buffer("CPU", 256, dtypes.int32, initial=np.arange(256, dtype=np.int32))
  dst = Buffer("CPU", 256, dtypes.int32).ensure_allocated()
  _gated_copy(q, gate, dst.address, src.address, 1024)
  opened: list[float] = []
  t = _open_later(gate, 0.2, opened)
  src.copyin(np.full(256, -1, np.int32))  # must not land before the copy read the old values
  assert opened, "the write did not wait for the reader"
  np.testing.assert_array_equal(dst.numpy(), np.arange(256))
  np.testing.assert_array_equal(src.numpy(), np.full(256, -1))
  t.join()


def test_freeing_memory_an_inflight_submit_reads_waits():
  gate = hcq.Signal("gate")
  q = Device["CPU"].queue
  owner = np.arange(512, dtype=np.float32)
  src = Buffer("CPU", 512, dtypes.float32).attach(owner.ctypes.data)  # memory its owner frees after the buffer goes
  dst = Buffer("CPU", 512, dtypes.float32).ensure_allocated()
  _gated_copy(q, gate, dst.address, src.address, 2048)
  opened: list[float] = []
  t = _open_later(gate, 0.2, opened)
  del src
  assert opened, "the buffer went while a submit still read its memory"
  owner[:] = 0
  np.testing.assert_array_equal(dst.numpy(), np.arange(512, dtype=np.float32))
  t.join()


def test_tracker_orders_two_queues_by_the_bytes_they_touch():
  """Queue A (held) writes x[0:64]; queue B's copy of x[0:64] waits for it (read after write), its copy of x[64:128]
  does not (disjoint bytes), and a write of y by B waits for A's read of it (write after read)."""
  gate = hcq.Signal("gate")
  qa, qb = hcq.CPUQueue(num_threads=1, name="A"), hcq.CPUQueue(num_threads=1, name="B")
  x, y = np.zeros(128, np.uint8), np.arange(128, dtype=np.uint8)
  out_lo, out_hi, z = np.zeros(64, np.uint8), np.zeros(64, np.uint8), np.full(128, 7, np.uint8)
  _gated_copy(qa, gate, x.ctypes.data, y.ctypes.data, 64)  # x[0:64] = y[0:64], once the gate opens (reads y[0:64])
  v_hi = _copy(qb, out_hi.ctypes.data, x.ctypes.data, 64, src_off=64)
  qb.wait(v_hi, timeout_ms=5000)  # disjoint from A's write: done while A is held
  assert qa.timeline.value < qa.last_submitted
  v_lo = _copy(qb, out_lo.ctypes.data, x.ctypes.data, 64)
  v_war = _copy(qb, y.ctypes.data, z.ctypes.data, 64)  # overwrites what A has yet to read
  time.sleep(0.05)
  assert qb.timeline.value < v_lo, "the read of x[0:64] did not wait for A's write"
  gate.set(1)
  qb.wait(v_war, timeout_ms=5000)
  np.testing.assert_array_equal(out_lo, np.arange(64))
  np.testing.assert_array_equal(x[:64], np.arange(64))  # A read y before B overwrote it
  np.testing.assert_array_equal(y[:64], np.full(64, 7))


def test_copies_into_a_device_run_beside_its_kernels_and_wait_only_for_the_bytes_they_share():
  """A copy between CPU devices runs on the destination's copy queue: it finishes while the device's compute queue is
  held, unless it reads what the held work writes."""
  from tinyhybrid.device import CopySpec
  from tinyhybrid.engine.multi import _submit_copy
  gate = hcq.Signal("gate")
  dev = Device["CPU:1"]
  x, y = Buffer("CPU:1", 64, dtypes.int32).ensure_allocated(), Buffer("CPU:1", 64, dtypes.int32, initial=np.arange(64, dtype=np.int32))
  free_src, free_dst = Buffer("CPU:2", 64, dtypes.int32, initial=np.full(64, 5, np.int32)), Buffer("CPU:1", 64, dtypes.int32).ensure_allocated()
  late = Buffer("CPU:1", 64, dtypes.int32).ensure_allocated()
  _gated_copy(dev.queue, gate, x.address, y.address, 256)  # the compute queue, held: writes x
  _submit_copy("CPU:1", free_dst.address, free_src.address, CopySpec(256))  # bytes the held work does not touch
  copies = dev.hcq_copy_queue
  assert copies is not dev.queue
  copies.wait(copies.last_submitted, timeout_ms=5000)  # done while the compute queue is held
  assert dev.queue.timeline.value < dev.queue.last_submitted
  _submit_copy("CPU:1", late.address, x.address, CopySpec(256))  # reads x: waits for the held write
  time.sleep(0.05)
  assert copies.timeline.value < copies.last_submitted, "the copy of x did not wait for the work that writes it"
  gate.set(1)
  np.testing.assert_array_equal(late.numpy(), np.arange(64))
  np.testing.assert_array_equal(free_dst.numpy(), np.full(64, 5))


def test_a_device_timeout_is_a_runtime_error_naming_the_queue_and_values_and_the_device_stays_usable():
  gate = hcq.Signal("gate")
  q = Device["CPU"].queue
  src = Buffer("CPU", 16, dtypes.int32, initial=np.arange(16, dtype=np.int32))
  dst = Buffer("CPU", 16, dtypes.int32).ensure_allocated()
  v = _gated_copy(q, gate, dst.address, src.address, 64)
  with pytest.raises(RuntimeError) as e:
    runtime.TRACKER.wait(dst.address, 0, hcq.WHOLE, False, 50)
  assert isinstance(e.value, TimeoutError)
  assert f"'{q.name}:timeline'" in str(e.value) and f"value >= {v}" in str(e.value) and "saw" in str(e.value)
  gate.set(1)
  np.testing.assert_array_equal(dst.numpy(), np.arange(16))
  np.testing.assert_allclose((Tensor([1.0, 2.0]) * 3).numpy(), [3.0, 6.0])


def test_sync_makes_every_submit_wait():
  q = Device["CPU"].queue
  a = Tensor(np.ones(1 << 16, dtype=np.float32)).realize()
  with Context(SYNC=1):
    (a + 1).realize()
    assert q.timeline.value == q.last_submitted
  Device["CPU"].synchronize()
  assert q.timeline.value == q.last_submitted


def test_jit_replays_return_before_their_work_is_done_and_give_the_right_values():
  gate = hcq.Signal("gate")
  q = Device["CPU"].queue
  step = TinyJit(lambda x, y: (x * y + 1).realize())
  x, y = Tensor(np.arange(64, dtype=np.float32)).realize(), Tensor(np.full(64, 2, np.float32)).realize()
  for _ in range(3): step(x, y)
  hold = Buffer("CPU", 16, dtypes.float32).ensure_allocated()
  _gated_copy(q, gate, hold.address, hold.address + 0, 0)
  out = step(x, y)
  assert q.timeline.value < q.last_submitted, "the replay waited"
  gate.set(1)
  np.testing.assert_allclose(out.numpy(), np.arange(64) * 2 + 1)


def test_cpu_devices_run_the_same_kernel_side_by_side_with_state_of_their_own():
  """Two CPU devices run one compiled kernel (its outermost loop handed out in chunks) at the same time, each with its
  own chunk counter: with one counter shared by both, chunks would be skipped and the sums wrong."""
  n = 1 << 20
  xs = {d: Tensor(np.arange(n, dtype=np.float32) % 97, device=d).realize() for d in ("CPU:0", "CPU:1")}
  want = (np.arange(n, dtype=np.float32) % 97) * 3 + 1
  for _ in range(20):
    outs = {d: (x * 3 + 1).realize() for d, x in xs.items()}  # both queues get their kernel before either is waited for
    for o in outs.values(): np.testing.assert_array_equal(o.numpy(), want)
  from tinyhybrid.engine.realize import kernel_cache
  sources = [prg.src for _, prg in kernel_cache.values() if prg.src]
  assert any(STATE_MARK in s for s in sources) and not any("static long long" in s for s in sources)


def test_exit_with_work_in_flight_waits_for_it():
  script = """
import atexit
state = {}
# registered before tinyhybrid's own handler, so it runs after it: the queue must be drained by then
atexit.register(lambda: print("after exit", state["q"].last_submitted - state["q"].timeline.value, flush=True))
import numpy as np
from tinyhybrid import Device, Tensor
from tinyhybrid._core import hcq
from tinyhybrid.device import Buffer, dtypes
from tinyhybrid.runtime import hcq as runtime
import threading, time
gate = hcq.Signal("gate")
q = state["q"] = Device["CPU"].queue
a = Tensor(np.arange(1 << 16, dtype=np.float32)).realize()
cb = hcq.CommandBuffer(); cb.wait(gate, 1); runtime.submit(q, cb)
(a * 2).realize()
threading.Thread(target=lambda: (time.sleep(0.3), gate.set(1)), daemon=True).start()
print("left", q.last_submitted - q.timeline.value, flush=True)
"""
  res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
  assert res.returncode == 0, res.stderr
  lines = res.stdout.splitlines()
  assert lines[0].startswith("left ") and int(lines[0].split()[1]) > 0, res.stdout  # work was in flight at exit
  assert lines[1] == "after exit 0", res.stdout
  assert res.stderr == ""
