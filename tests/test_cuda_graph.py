"""The CUDA runtime's host-side logic without a GPU, on a fake driver that implements the few driver calls involved
over host memory and records them: a TinyJit batch becomes a CUDA graph of kernel nodes in order (each depending on
the one before) with each kernel's grid, block and argument words, a replay with new input addresses patches only the
nodes that take them and launches the graph once; and large host copies go through the pinned staging buffer in
pieces, small ones directly. (The same code on an H200 runs in bench/gpu_check.sh: tests/test_jit.py on DEV=CUDA.)"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tinyhybrid.device import CompiledProgram, Runner
from tinyhybrid.runtime import ops_cuda
from tinyhybrid.runtime.graph_cuda import CUDAGraphRunner


class FakeDriver:
  """cu* calls over host memory: device memory is one bytearray from address BASE; graphs are recorded."""
  BASE = 1 << 32

  def __init__(self, ffi, nargs: dict[int, int]):
    self.ffi, self.nargs, self.calls, self.keep = ffi, nargs, [], []
    self.mem = bytearray(1 << 16)
    self.nodes: list[dict] = []

  def _words(self, params) -> list[int]:
    n = self.nargs[int(self.ffi.cast("uintptr_t", params.func))]
    return [self.ffi.cast("unsigned long long*", params.kernelParams[i])[0] for i in range(n)]

  def _dims(self, p) -> tuple:
    return ((p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ))

  # graphs
  def cuGraphCreate(self, g, flags):
    g[0] = self.ffi.cast("CUgraph", 0x600)
    self.calls.append("create")
    return 0

  def cuGraphAddKernelNode(self, node, graph, deps, ndeps, params):
    node[0] = self.ffi.cast("CUgraphNode", 0x700 + len(self.nodes))
    self.nodes.append({"func": int(self.ffi.cast("uintptr_t", params.func)), "launch": self._dims(params), "words": self._words(params),
                       "deps": [int(self.ffi.cast("uintptr_t", deps[i])) for i in range(ndeps)]})
    self.calls.append("add")
    return 0

  def cuGraphInstantiateWithFlags(self, ex, graph, flags):
    ex[0] = self.ffi.cast("CUgraphExec", 0x800)
    self.calls.append("instantiate")
    return 0

  def cuGraphExecKernelNodeSetParams(self, ex, node, params):
    self.calls.append(("set", int(self.ffi.cast("uintptr_t", node)) - 0x700, self._words(params)))
    return 0

  def cuGraphLaunch(self, ex, stream):
    self.calls.append("launch")
    return 0

  def cuGraphExecDestroy(self, ex): return 0
  def cuGraphDestroy(self, g): return 0

  # memory
  def cuMemHostAlloc(self, p, n, flags):
    buf = self.ffi.new("char[]", n)
    self.keep.append(buf)
    p[0] = buf
    self.calls.append(("hostalloc", n))
    return 0

  def cuMemFreeHost(self, p): return 0
  def cuMemFree_v2(self, p): return 0

  def cuMemcpyHtoD_v2(self, dst, src, n):
    self.mem[dst - self.BASE:dst - self.BASE + n] = self.ffi.buffer(src, n)[:]
    self.calls.append(("htod", n, self._staged(src)))
    return 0

  def cuMemcpyDtoH_v2(self, dst, src, n):
    self.ffi.buffer(dst, n)[:] = bytes(self.mem[src - self.BASE:src - self.BASE + n])
    self.calls.append(("dtoh", n, self._staged(dst)))
    return 0

  def _staged(self, p) -> bool: return any(int(self.ffi.cast("uintptr_t", p)) == int(self.ffi.cast("uintptr_t", k)) for k in self.keep)


@pytest.fixture
def fake(monkeypatch):
  ffi = ops_cuda.ffi_()
  drv = FakeDriver(ffi, {0x10: 3, 0x20: 2})
  monkeypatch.setattr(ops_cuda, "_api", lambda: (ffi, drv))
  return drv


def _program(ffi, fn: int, name: str) -> CompiledProgram:
  prg = ops_cuda.CUDAProgram.__new__(ops_cuda.CUDAProgram)  # a loaded kernel, without a module to load it from
  prg.fn, prg.name = ffi.cast("CUfunction", fn), name
  return CompiledProgram(name, "", 0, lambda args, launch: None, keepalive=prg)


def test_jit_batch_is_one_graph_patched_per_replay(fake):
  ffi = ops_cuda.ffi_()
  a, b = _program(ffi, 0x10, "a"), _program(ffi, 0x20, "b")
  # slots: 0 the input, 1 and 2 intermediates, 3 a variable's value
  items = [(a, [1, 0, 3], ((4, 2, 1), (32, 1, 1))), (b, [2, 1], ((8, 1, 1), (128, 1, 1))), (a, [1, 2, 3], ((4, 2, 1), (32, 1, 1)))]
  runner = CUDAGraphRunner(items, 4, SimpleNamespace(name="CUDA"))
  runner([0x1000, 0x2000, 0x3000, 7])
  assert fake.calls == ["create", "add", "add", "add", "instantiate", "launch"]
  assert [n["func"] for n in fake.nodes] == [0x10, 0x20, 0x10]
  assert [n["launch"] for n in fake.nodes] == [it[2] for it in items]
  assert [n["words"] for n in fake.nodes] == [[0x2000, 0x1000, 7], [0x3000, 0x2000], [0x2000, 0x3000, 7]]
  assert [n["deps"] for n in fake.nodes] == [[], [0x700], [0x701]]  # in order, as the eager run
  fake.calls.clear()
  runner([0x1000, 0x2000, 0x3000, 7])  # the same arguments: the graph as it is
  assert fake.calls == ["launch"]
  fake.calls.clear()
  runner([0x5000, 0x2000, 0x3000, 9])  # a new input and variable: node 1 (b) takes neither
  assert fake.calls == [("set", 0, [0x2000, 0x5000, 9]), ("set", 2, [0x2000, 0x3000, 9]), "launch"]


def test_graph_falls_back_for_other_programs(fake):
  ran = []
  other = CompiledProgram("copy", "", 0, lambda args, launch: ran.append(args))  # not a CUDA kernel (a copy)
  runner = CUDAGraphRunner([(other, [0, 1], None)], 2, SimpleNamespace(name="CUDA"))
  runner([5, 6])
  assert ran == [[5, 6]] and fake.calls == []


def test_jit_2_launches_kernel_by_kernel(monkeypatch):
  from tinyhybrid.helpers import Context
  dev = ops_cuda.CUDADevice.__new__(ops_cuda.CUDADevice)
  dev.name = "CUDA"
  with Context(JIT=2): assert type(dev.runner([], 0)) is Runner
  assert type(dev.runner([], 0)) is CUDAGraphRunner


def test_large_copies_go_through_pinned_staging(fake, monkeypatch):
  monkeypatch.setattr(ops_cuda, "STAGING_BYTES", 4096)
  monkeypatch.setattr(ops_cuda, "PINNED_FROM", 1024)
  alloc = ops_cuda.CUDAAllocator(SimpleNamespace(name="CUDA", gpu_name="fake"))
  mem = ops_cuda.DeviceMemory.__new__(ops_cuda.DeviceMemory)  # device memory the fake driver holds, never freed
  mem.ptr, mem.nbytes = FakeDriver.BASE + 64, 10000
  data = np.random.default_rng(0).integers(0, 256, 10000, dtype=np.uint8)
  alloc.copyin(mem, memoryview(data))
  assert fake.calls == [("hostalloc", 4096), ("htod", 4096, True), ("htod", 4096, True), ("htod", 1808, True)]
  assert bytes(fake.mem[64:64 + 10000]) == data.tobytes()
  fake.calls.clear()
  out = np.zeros(10000, dtype=np.uint8)
  alloc.copyout(memoryview(out), mem)
  assert fake.calls == [("dtoh", 4096, True), ("dtoh", 4096, True), ("dtoh", 1808, True)]  # the same staging buffer
  np.testing.assert_array_equal(out, data)
  fake.calls.clear()
  small = np.arange(100, dtype=np.uint8)
  alloc.copyin(mem, memoryview(small))
  assert fake.calls == [("htod", 100, False)]  # directly from the caller's memory
  back = np.zeros(100, dtype=np.uint8)
  alloc.copyout(memoryview(back), mem)
  np.testing.assert_array_equal(back, small)
  del alloc, mem  # freed while the fake driver is the driver
