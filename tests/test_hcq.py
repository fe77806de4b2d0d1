# tinyhybrid._core.hcq from Python: real kernels compiled from C with the system compiler, buffers from
# numpy, command buffers run on the CPU device; signal timeouts; encode once, replay with patched slots.
import ctypes, os, shutil, signal, subprocess, tempfile, threading, time
import numpy as np
import pytest

from tinyhybrid._core import hcq

KERNELS = r"""
#include <stdint.h>
#include <unistd.h>
/* args: out, a, b, n. out[i] = a[i] + b[i] over this core's share of [0, n). */
void add(const uint64_t* args, uint32_t core, uint32_t cores) {
  float* out = (float*)args[0]; const float* a = (const float*)args[1]; const float* b = (const float*)args[2];
  uint64_t n = args[3], lo = n * core / cores, hi = n * (core + 1) / cores;
  for (uint64_t i = lo; i < hi; i++) out[i] = a[i] + b[i];
}
/* args: out, a, n, k (a signed int). out[i] = a[i] * k. */
void scale(const uint64_t* args, uint32_t core, uint32_t cores) {
  int32_t* out = (int32_t*)args[0]; const int32_t* a = (const int32_t*)args[1];
  uint64_t n = args[2], lo = n * core / cores, hi = n * (core + 1) / cores; int64_t k = (int64_t)args[3];
  for (uint64_t i = lo; i < hi; i++) out[i] = (int32_t)(a[i] * k);
}
/* args: microseconds. Core 0 sleeps that long. */
void nap(const uint64_t* args, uint32_t core, uint32_t cores) { if (core == 0) usleep((useconds_t)args[0]); }
/* args: seen (uint32[2*cores]): seen[2*core] = 1 + core, seen[2*core+1] = cores. */
void whoami(const uint64_t* args, uint32_t core, uint32_t cores) {
  uint32_t* seen = (uint32_t*)args[0]; seen[2 * core] = 1 + core; seen[2 * core + 1] = cores;
}
"""

@pytest.fixture(scope="module")
def lib():
  cc = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
  if cc is None: pytest.skip("no C compiler")
  with tempfile.TemporaryDirectory() as d:
    src, so = os.path.join(d, "kernels.c"), os.path.join(d, "kernels.so")
    with open(src, "w") as f: f.write(KERNELS)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, src], check=True)
    yield so, ctypes.CDLL(so)

def prog(lib, name):
  return hcq.Program(ctypes.cast(getattr(lib[1], name), ctypes.c_void_p).value, name)

def addr(a:np.ndarray) -> int: return a.ctypes.data

@pytest.fixture(scope="module")
def dev():
  return hcq.CPUQueue(num_threads=2)

def test_exec_add(lib, dev):
  n = 1000
  a, b = np.arange(n, dtype=np.float32), np.linspace(0, 1, n, dtype=np.float32)
  out = np.zeros(n, dtype=np.float32)
  cb = hcq.CommandBuffer()
  assert cb.exec(prog(lib, "add"), [addr(out), addr(a), addr(b), n], global_size=(n,)) == []
  value = dev.submit(cb)
  assert value == dev.last_submitted
  dev.synchronize()
  assert dev.timeline.value >= value
  np.testing.assert_array_equal(out, a + b)

def test_exec_split(lib):
  d = hcq.CPUQueue(num_threads=3)
  assert d.num_threads == 3
  for g, parts in [(1, 1), (2, 2), (100, 3)]:
    seen = np.zeros(8, dtype=np.uint32)
    cb = hcq.CommandBuffer()
    cb.exec(prog(lib, "whoami"), [addr(seen)], global_size=(g, 1, 1))
    d.submit(cb)
    d.synchronize()
    want = [x for c in range(parts) for x in (c + 1, parts)]
    assert seen.tolist() == want + [0] * (8 - len(want))

def test_patched_replay(lib, dev):
  # Encoded once; every submit runs on new buffers and a new (possibly negative) multiplier.
  n = 257
  cb = hcq.CommandBuffer()
  out0, a0 = np.zeros(n, np.int32), np.zeros(n, np.int32)
  slots = cb.exec(prog(lib, "scale"), [addr(out0), addr(a0), n, 1], global_size=(n,), patch=[0, 1, 3])
  assert slots == [0, 1, 2] and cb.num_slots == 3 and len(cb) == 1
  assert cb.slot_defaults == [addr(out0), addr(a0), 1]
  rng = np.random.default_rng(0)
  for k in [3, -2, 0, 7, -1]:
    a, out = rng.integers(-1000, 1000, n, dtype=np.int32), np.zeros(n, np.int32)
    dev.submit(cb, [addr(out), addr(a), k])
    dev.synchronize()
    np.testing.assert_array_equal(out, a * k)
  # The defaults point at the buffers it was encoded with.
  a0[:] = 5
  dev.submit(cb)
  dev.synchronize()
  assert (out0 == 5).all()

def test_shared_slot_and_patch_objects(lib, dev):
  # One slot feeds two kernels (an input used twice), and the global size is a slot too.
  n = 64
  a, b, t, out = (np.zeros(n, np.float32) for _ in range(4))
  cb = hcq.CommandBuffer()
  sa, sn = cb.add_slot(addr(a)), cb.add_slot(n)
  cb.exec(prog(lib, "add"), [addr(t), hcq.Patch(sa), hcq.Patch(sa), hcq.Patch(sn)], global_size=(hcq.Patch(sn),))
  cb.barrier()
  cb.exec(prog(lib, "add"), [addr(out), addr(t), hcq.Patch(sa), hcq.Patch(sn)], global_size=(hcq.Patch(sn),))
  for m in [64, 10]:
    x = np.arange(n, dtype=np.float32) + m
    out[:] = 0
    dev.submit(cb, (addr(x), m))
    dev.synchronize()
    np.testing.assert_array_equal(out[:m], 3 * x[:m])
    assert (out[m:] == 0).all()

def test_copy(dev):
  src = np.random.default_rng(1).integers(0, 255, (3 << 20) + 5, dtype=np.uint8)
  dst = np.zeros_like(src)
  cb = hcq.CommandBuffer()
  assert cb.copy(addr(dst), addr(src), src.nbytes, patch=[0]) == [0]
  dev.submit(cb, [addr(dst)])
  dev.synchronize()
  np.testing.assert_array_equal(dst, src)

def test_signal_timeout():
  s = hcq.Signal("test:never", 3)
  assert s.name == "test:never" and s.value == 3
  with pytest.raises(TimeoutError, match=r"^signal 'test:never' timed out after 50 ms waiting for value >= 5 \(saw 3\)$") as e:
    s.wait(5, timeout_ms=50)
  assert isinstance(e.value, hcq.SignalTimeout)
  with pytest.raises(ValueError, match="timeout_ms"): s.wait(6, timeout_ms=-1)
  s.set(5)
  s.wait(5, timeout_ms=0)
  s.wait(5, timeout_ms=float("inf"))

def test_a_long_submit_is_busy_not_hung(lib, dev):
  # one submit of ten 40 ms kernels: 400 ms in all, past a 150 ms limit, but every kernel that finishes is progress
  cb = hcq.CommandBuffer()
  for _ in range(10): cb.exec(prog(lib, "nap"), [40_000], global_size=(1,))
  dev.wait(dev.submit(cb), timeout_ms=150)
  s = hcq.Signal("test:busy")
  def work():
    for _ in range(10):
      time.sleep(0.04)
      s.note_progress()
    s.set(1)
  t = threading.Thread(target=work)
  t.start()
  s.wait(1, timeout_ms=150)
  t.join()
  with pytest.raises(hcq.SignalTimeout): s.wait(2, timeout_ms=60)  # and a stall still times out

def test_wait_releases_gil():
  s = hcq.Signal("test:gil")
  # The setter is a Python thread: it can only run while the waiting thread has released the GIL.
  t = threading.Timer(0.02, lambda: s.set(1))
  t.start()
  s.wait(1, timeout_ms=10_000)
  t.join()

def test_wait_is_interruptible():
  # A signal handler that raises (as Ctrl-C does) ends an endless wait.
  s = hcq.Signal("test:forever")
  def handler(*_): raise KeyboardInterrupt
  old = signal.signal(signal.SIGALRM, handler)
  try:
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt): s.wait(1, timeout_ms=None)
    assert time.monotonic() - t0 < 5
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, old)

def test_device_wait_signal_and_timeline(lib):
  d = hcq.CPUQueue(num_threads=1, name="q")
  gate, done = hcq.Signal("gate"), hcq.Signal("done")
  out, a = np.zeros(4, np.int32), np.arange(4, dtype=np.int32)
  cb = hcq.CommandBuffer()
  assert cb.wait(gate, 1, patch=True) == 0
  cb.exec(prog(lib, "scale"), [addr(out), addr(a), 4, 2], global_size=(4,))
  assert cb.signal(done, 7) is None
  v = d.submit(cb)
  with pytest.raises(hcq.SignalTimeout, match=r"signal 'q:timeline' timed out after 20 ms waiting for value >= 1 \(saw 0\)"):
    d.synchronize(timeout_ms=20)
  assert (out == 0).all() and done.value == 0
  with pytest.raises(hcq.SignalTimeout, match=r"'q:timeline' timed out after 0 ms"): d.wait(v, timeout_ms=0)
  gate.set(1)
  done.wait(7)
  d.wait(v)
  d.synchronize()
  assert d.timeline.value == v
  np.testing.assert_array_equal(out, a * 2)

def test_timestamps(lib, dev):
  t0, t1 = hcq.Signal("t0"), hcq.Signal("t1")
  n = 1 << 16
  a = np.ones(n, np.float32)
  cb = hcq.CommandBuffer()
  cb.timestamp(t0)
  cb.exec(prog(lib, "add"), [addr(a), addr(a), addr(a), n], global_size=(n,))
  cb.timestamp(t1)
  before = time.monotonic_ns()
  dev.submit(cb)
  dev.synchronize()
  assert before <= t0.value <= t1.value <= time.monotonic_ns()

def test_program_load(lib, dev):
  p = hcq.Program.load(lib[0], "add")
  assert p.name == "add" and p.address == prog(lib, "add").address
  with pytest.raises(RuntimeError, match="no such symbol"): hcq.Program.load(lib[0], "nope")
  with pytest.raises(RuntimeError, match="cannot load"): hcq.Program.load("/nonexistent.so", "add")

def test_errors(lib, dev):
  cb = hcq.CommandBuffer()
  cb.exec(prog(lib, "add"), [0, 0, 0, 0], global_size=(0,), patch=[3])
  with pytest.raises(ValueError, match="1 slots"): dev.submit(cb, [1, 2])
  with pytest.raises(TypeError, match="expected an int or hcq.Patch"): cb.exec(prog(lib, "add"), ["x"])
  with pytest.raises(IndexError, match="Patch\\(5\\) names no slot"): cb.exec(prog(lib, "add"), [hcq.Patch(5)])
  with pytest.raises(ValueError, match="at most 55"): cb.exec(prog(lib, "add"), [0] * 56, patch=[0])
  with pytest.raises(ValueError, match="does not fit in 64 bits"): cb.exec(prog(lib, "add"), [1 << 64])
  with pytest.raises(ValueError, match="aligned"): cb.timestamp(3)
  with pytest.raises(ValueError, match="power of two"): hcq.CPUQueue(ring_slots=12)
  assert len(cb) == 1 and cb.num_slots == 1  # rejected commands leave nothing behind
  dev.submit(cb, [np.int64(4)])  # numpy ints are ints
  dev.synchronize()

def test_ring_wraparound_and_many_submits(lib):
  d = hcq.CPUQueue(num_threads=2, ring_slots=8)
  n = 16
  acc, one = np.zeros(n, np.float32), np.ones(n, np.float32)
  cb = hcq.CommandBuffer()
  for _ in range(24): cb.exec(prog(lib, "add"), [addr(acc), addr(acc), addr(one), n], global_size=(n,))  # 3x the ring
  d.submit(cb)
  small = hcq.CommandBuffer()
  small.exec(prog(lib, "add"), [addr(acc), addr(acc), addr(one), n], global_size=(n,))
  for _ in range(1000): d.submit(small)
  d.synchronize()
  assert (acc == 1024).all()
  assert d.timeline.value == 1001

def test_deps_tracker():
  q0, q1 = hcq.Signal("q0"), hcq.Signal("q1")
  t = hcq.DepsTracker()
  assert t.access(1, 0, 16, True, q0, 1) == []
  assert t.access(1, 4, 12, True, q1, 1) == [(q0, 1)]
  assert t.waits_for(1, 0, 16) == [(q0, 1), (q1, 1)]
  assert t.waits_for(1, 0, 16, skip=q0) == [(q1, 1)]
  assert t.waits_for(1, 0, 4) == [(q0, 1)] and t.waits_for(2, 0, 4) == []
  q0.set(1)
  assert t.prune() == 2 and t.entries(1) == 1

def test_usable_cpus():
  assert 1 <= hcq.usable_cpu_count() <= (os.cpu_count() or 1)
  assert hcq.default_cpu_threads() >= 1
  assert hcq.MAX_EXEC_ARGS == 55


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin to")
def test_a_pinned_queue_keeps_each_worker_on_a_cpu_of_its_own():
  # unpinned, the scheduler at times ran both workers of a 2-core machine on one core for milliseconds
  allowed = sorted(os.sched_getaffinity(0))
  def started(**kw) -> tuple:
    before = set(os.listdir(f"/proc/{os.getpid()}/task"))
    q = hcq.CPUQueue(**kw)
    return q, [t for t in os.listdir(f"/proc/{os.getpid()}/task") if t not in before]
  def cpus(tids: list[str]) -> list[tuple[str, set[int]]]:
    return sorted((open(f"/proc/{os.getpid()}/task/{t}/comm").read().strip(), os.sched_getaffinity(int(t))) for t in tids)
  n = len(allowed)
  q, new = started(num_threads=n, name="pinned", pin=True)
  want = sorted([("th-cpu-leader", {allowed[0]})] + [(f"th-cpu-h{i}"[:15], {allowed[i]}) for i in range(1, n)])
  deadline = time.monotonic() + 5
  while cpus(new) != want and time.monotonic() < deadline: time.sleep(0.01)  # each worker pins itself as it starts
  assert cpus(new) == want
  del q
  # not asked, more workers than CPUs, fewer (two processes would pin theirs to the same first CPUs): none pinned
  for kw in ({"num_threads": n}, {"num_threads": n + 1, "pin": True}, {"num_threads": n - 1, "pin": True}):
    q, new = started(**kw)
    time.sleep(0.05)
    assert len(new) == kw["num_threads"] and all(c == set(allowed) for _, c in cpus(new)), kw
    del q
