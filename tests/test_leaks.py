"""Memory stays flat: resident memory over 10^6 UOp create/free cycles and 10^4 JIT replays, and no node outliving its
last reference (the live-node counter) through rewrites, errors and realizes."""
import gc
import os
import pickle

import numpy as np
import pytest

import tinyhybrid.engine.realize as realize
from tinyhybrid import Tensor, TinyJit, UOp, _core, dtypes
from tinyhybrid.uop import Ops
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
  """Resident bytes now (not the peak), counted from the page tables: statm's and status's figures come from per-CPU
  counters that Linux 6.2+ folds in lazily, and they lagged 20 MiB of freshly touched buffers on a CI machine."""
  try:
    with open("/proc/self/smaps_rollup") as f: return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("Rss:"))
  except FileNotFoundError:  # before Linux 4.14
    with open("/proc/self/statm") as f: return int(f.read().split()[1]) * PAGE


def test_rss_flat_over_a_million_uop_cycles():
  x = UOp.variable("leak_x", 0, 1000, dtypes.weakint)
  def cycles(n: int, base: int) -> None:
    for i in range(n):
      # two new nodes per cycle (a constant no one made before, and the sum), both freed at the end of the iteration
      (x + (base + i)).simplify()
  cycles(10**5, 0)  # warm up: allocator pools, the intern table's size
  gc.collect()
  before, live_before = rss(), _core.live_uop_count()
  cycles(10**6, 10**7)
  gc.collect()
  grown = rss() - before
  assert _core.live_uop_count() == live_before
  assert grown < 8 * 2**20, f"resident memory grew {grown / 2**20:.1f} MiB over 10^6 create/free cycles"


def test_rss_flat_over_ten_thousand_jit_replays():
  # 16 kernels a replay, 17 CPU ring slots with its timeline signal: the 1 MiB ring (2048 slots of 512 bytes) has been
  # written through, every page of it resident, after ~120 replays. Before that, RSS grows by the pages first touched.
  @TinyJit
  def step(a: Tensor, b: Tensor) -> Tensor:
    x = a
    for i in range(15): x = (x * b + i).contiguous()
    return x.sum(0)
  a, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 0.5, dtype=np.float32)
  want = a
  for i in range(15): want = want * b + i
  ta, tb = Tensor(a).realize(), Tensor(b).realize()
  for _ in range(1100): out = step(ta, tb)
  np.testing.assert_allclose(out.numpy(), want.sum(0), rtol=1e-6)
  gc.collect()
  before, live_before = rss(), _core.live_uop_count()
  for _ in range(10**4): out = step(ta, tb)
  gc.collect()
  grown = rss() - before
  np.testing.assert_allclose(out.numpy(), want.sum(0), rtol=1e-6)
  assert _core.live_uop_count() == live_before
  assert grown < 2**20, f"resident memory grew {grown / 2**20:.2f} MiB over 10^4 JIT replays"


def resident_pages(addr: int, nbytes: int) -> int | None:
  """How many pages of [addr, addr+nbytes) are in memory (mincore), or None where the range is no longer mapped: the
  buffers' own pages, where the process's RSS also moves with whatever else it maps and frees meanwhile (under ASan,
  its quarantine gives freed blocks back to the system at its own pace)."""
  import ctypes
  import errno
  libc = ctypes.CDLL(None, use_errno=True)
  libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
  start = addr - addr % PAGE
  vec = ctypes.create_string_buffer((addr + nbytes - start + PAGE - 1) // PAGE)
  if libc.mincore(start, addr + nbytes - start, vec) != 0:
    assert ctypes.get_errno() == errno.ENOMEM, os.strerror(ctypes.get_errno())
    return None
  return sum(b & 1 for b in vec.raw)


def test_freed_buffers_go_back_to_the_system():
  # malloc keeps a freed block of a few MiB in the process once a larger block was freed before it (its threshold for
  # blocks of their own grows): an LLM's warm-up buffers stayed resident after free_cache. The allocator maps them.
  from tinyhybrid import Device
  alloc = Device["CPU"].allocator
  big = np.ones(4 << 20, np.float32)  # 16 MiB, freed: malloc's threshold grows past the buffers below
  del big
  gc.collect()
  alloc.free_cache()
  bufs = [Tensor.full((1 << 20,), float(i)).contiguous().realize() for i in range(6)]  # 4 MiB each, every page touched
  assert [b[-1].item() for b in bufs] == [float(i) for i in range(6)]
  ranges = [(b.uop.buffer._address, b.uop.buffer.nbytes) for b in bufs]
  assert all((resident_pages(*r) or 0) >= (4 << 20) // PAGE for r in ranges)
  del bufs
  gc.collect()
  alloc.free_cache()
  kept = sum(resident_pages(*r) or 0 for r in ranges) * PAGE
  assert kept < 4 * 2**20, f"{kept / 2**20:.1f} MiB of freed buffers stayed resident"


def test_large_buffers_ask_for_huge_pages():
  # a weight a kernel streams crosses a 4 KiB page boundary 256 times a MiB: from 2 MiB a buffer's mapping is advised
  # for transparent huge pages (smaps' VmFlags "hg"); a smaller one is not
  from tinyhybrid import Device
  alloc = Device["CPU"].allocator
  def flags(mem: np.ndarray) -> list[str]:
    addr = mem.ctypes.data
    with open("/proc/self/smaps") as f: lines = f.read().splitlines()
    for i, line in enumerate(lines):
      lo, _, hi = line.split()[0].partition("-")
      if "-" in line.split()[0] and int(lo, 16) <= addr < int(hi, 16):
        return next(ln.split()[1:] for ln in lines[i + 1:] if ln.startswith("VmFlags:"))
    raise AssertionError("no mapping holds the buffer")
  big, small = alloc.alloc(4 << 20), alloc.alloc(1 << 20)
  assert "hg" in flags(big) and "hg" not in flags(small)
  alloc.free(big, cache=False)
  alloc.free(small, cache=False)


def test_the_cpu_command_ring_stays_small_once_written_through():
  # every command slot of the CPU queue's ring is written in turn, so all of it becomes resident: 20000 commands
  # (an LLM's warm-up and a few dozen decode steps) in a fresh process
  code = """
import numpy as np
from tinyhybrid import Tensor, TinyJit
from tinyhybrid.device import Device
def rss(): return next(int(ln.split()[1]) * 1024 for ln in open("/proc/self/smaps_rollup") if ln.startswith("Rss:"))
@TinyJit
def step(a):
  for i in range(19): a = (a + i).contiguous()
  return a
x = Tensor(np.zeros(16, np.float32)).realize()
for _ in range(3): step(x)
Device["CPU"].synchronize()
before = rss()
for _ in range(1000): out = step(x)
assert out.numpy()[0] == sum(range(19))
print((rss() - before) / 2**20)
"""
  import subprocess
  import sys
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "DEV": "CPU"})
  assert r.returncode == 0, r.stderr[-2000:]
  grown = float(r.stdout.split()[-1])
  assert grown < 3, f"{grown:.1f} MiB resident after 20000 commands"


def test_importing_leaves_out_what_only_downloads_and_progress_bars_use():
  # http, ssl, email and tqdm cost every process ~8 MB resident, safetensors' Rust module 0.7 MB, hashlib's OpenSSL
  # 3.6 MB (a kernel's cache key is CPython's own SHA-256); fetch, BEAM's bars, a model's load and a .safetensors file
  # bring them in when they run. tinygrad scripts still import tqdm and trange from the helpers.
  code = """
import sys
import tinyhybrid, tinyhybrid.llm.model, tinyhybrid.nn.state
from tinyhybrid import Tensor
assert (Tensor([1.0, 2.0]) * 3 + 1).tolist() == [4.0, 7.0]  # a kernel compiled and cached
print(sorted(m for m in ("tqdm", "email", "ssl", "http.client", "urllib.request", "safetensors", "hashlib") if m in sys.modules))
from tinyhybrid.helpers import tqdm, trange
print(sum(1 for _ in tqdm(range(3), disable=True)), list(trange(2, disable=True)))
"""
  import subprocess
  import sys
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split("\n")[:2] == ["[]", "3 [0, 1]"], r.stdout


def _fresh_graph(tag: str) -> UOp:
  x, y = UOp.variable(f"lx_{tag}", 0, 50, dtypes.weakint), UOp.variable(f"ly_{tag}", 1, 9, dtypes.weakint)
  return UOp(Ops.SINK, dtypes.void, (((x * 4 + y * 8) // (y * 2)) + 0, (x + 0) * 1 % y))


def _settled_count() -> int:
  """Live nodes once earlier tests' cyclic garbage is gone (else a later collection frees nodes this test never made)."""
  gc.collect()
  return _core.live_uop_count()


def test_no_node_outlives_a_rewrite_with_python_callbacks():
  made: list[int] = []
  def strip_add_zero(x: UOp) -> UOp:
    made.append(1)
    return x
  pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: strip_add_zero(x) if c.arg == 0 else None)])
  before = _settled_count()
  for i in range(50):
    g = _fresh_graph(f"cb{i}")
    out = graph_rewrite(g, pm)
    assert out is not g and len(out.toposort()) < len(g.toposort())
    del g, out
  assert made and _core.live_uop_count() == before


def test_no_node_outlives_a_failed_rewrite():
  class Boom(Exception): pass
  def explode(x: UOp) -> UOp:
    # the nodes made before the error are referenced only by the rewrite that is unwinding
    UOp.const(dtypes.weakint, 123456789) + x
    raise Boom("rule failed")
  pm = PatternMatcher([(UPat(Ops.MUL, name="x"), explode)])
  before = _settled_count()
  for i in range(20):
    with pytest.raises(Boom, match="rule failed"): graph_rewrite(_fresh_graph(f"err{i}"), pm)
  gc.collect()
  assert _core.live_uop_count() == before


def test_no_node_outlives_pickling_and_simplify():
  before = _settled_count()
  for i in range(20):
    g = _fresh_graph(f"pk{i}")
    back = pickle.loads(pickle.dumps(g))
    assert back is g
    [u.simplify() for u in g.src]
    del g, back
  assert _core.live_uop_count() == before


def test_no_node_outlives_a_realize_once_caches_drop_it(monkeypatch):
  for cache in ("schedule_cache", "kernel_cache"): monkeypatch.setattr(realize, cache, type(getattr(realize, cache))())
  a = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
  out = (Tensor(a).exp() * 3 + Tensor(a).sum(1, keepdim=True)).numpy()  # compile once: dtype tables and the like
  np.testing.assert_allclose(out, np.exp(a) * 3 + a.sum(1, keepdims=True), rtol=1e-5)
  realize.schedule_cache.clear(); realize.kernel_cache.clear()
  before = _settled_count()
  for _ in range(3):
    t = Tensor(a).exp() * 3 + Tensor(a).sum(1, keepdim=True)
    np.testing.assert_allclose(t.numpy(), np.exp(a) * 3 + a.sum(1, keepdims=True), rtol=1e-5)
    del t
    realize.schedule_cache.clear(); realize.kernel_cache.clear()
    gc.collect()
  assert _core.live_uop_count() == before


def test_simplify_keeps_its_answer_on_the_node_and_frees_both():
  gc.collect()
  live = _core.live_uop_count()
  x, y, z = (UOp.variable(n, 0, 10, dtypes.weakint) for n in ("keep_x", "keep_y", "keep_z"))
  e = (x * 4 + y * 8) // (z * 2)
  s = e.simplify()
  assert s is not e and e.simplify() is s  # the second call reads the answer kept on e
  assert s.simplify() is s  # an answer is a fixed point: it keeps nothing of its own
  del s
  assert e.simplify().render() == e.simplify().render()  # the answer lives as long as e, without a Python reference
  del e, x, y, z
  gc.collect()
  assert _core.live_uop_count() == live  # e's reference to its answer went with e: no cycle


def test_a_program_past_its_cache_entry_keeps_its_kernel_packed(monkeypatch):
  # while the engine's cache holds a kernel its program shares the nodes; once the entry goes, the program (still in
  # its device's cache) keeps only a compressed pickle, read back as the same kernel
  monkeypatch.setattr(realize, "kernel_cache", realize.KernelCache())
  monkeypatch.setattr(realize, "schedule_cache", type(realize.schedule_cache)())
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_allclose((Tensor(a) * 2 + 1).numpy(), a * 2 + 1)
  (k, prg), = realize.kernel_cache.values()
  assert prg._ast is k.ast
  realize.kernel_cache.clear()
  assert isinstance(prg._ast, bytes) and prg.ast is k.ast
