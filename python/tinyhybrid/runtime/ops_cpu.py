"""The CPU device: kernels rendered as C and compiled by the system's C compiler (CPU:CLANG, runtime/compiler.py), as
LLVM IR compiled in this process by llvmlite (CPU:LLVM, runtime/llvm.py), or as x86-64 machine code encoded here
(CPU:X86, runtime/x86.py), run through the native command queue (a ring
consumed by one worker thread per usable core; each kernel's THREAD loop is split across them). Submits return at once
(runtime/hcq.py); the allocator waits for the queue before the host touches memory a submit still uses. Devices opened
side by side (CPU:0, CPU:1, ...) split the cores between them, and each keeps its kernels' state of its own."""
from __future__ import annotations

import importlib.util
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tinyhybrid._core import hcq
from tinyhybrid.device import Allocator, Compiled, CompiledProgram, ProfileEvent, Runner, Target, profile_events, to_ctypes_words
from tinyhybrid.helpers import JIT_BATCH_SIZE, NUM_CPU_THREADS, PARALLEL, PROFILE
from tinyhybrid.renderer import Renderer
from tinyhybrid.renderer.cstyle import CRenderer, state_bytes
from tinyhybrid.runtime.host import core_cache_bytes, host_cpu_flags, host_vector_unit, shared_cache_bytes
from tinyhybrid.runtime.compiler import C_TOOLCHAIN, KERNEL_FN, Toolchain, c_compiler, compile_shared, is_clang, load_kernel
from tinyhybrid.runtime.hcq import HCQProgram, QueueRunner, accesses, chain_runner_of, fits, host_wait, register, submit, synchronize


class CPUAllocator(Allocator):
  """Host memory the queue's kernels use in place: the host waits (through the tracker) before it reads memory a submit
  writes, or writes or frees memory a submit uses. With PROFILE=1 a copy goes through the device's queue between two
  timestamps, so the profile shows it on the queue with the queue's own times (a plain numpy copy otherwise)."""
  def __init__(self, dev: CPUDevice):
    super().__init__()
    self.dev = dev

  def idle(self, mem: np.ndarray, write: bool) -> None: host_wait(mem.ctypes.data, write)

  def _queued_copy(self, dst: int, src: int, nbytes: int, name: str) -> None:
    stamps = np.zeros(2, dtype=np.uint64)
    cb = hcq.CommandBuffer()
    cb.timestamp(stamps.ctypes.data)
    cb.copy(dst, src, nbytes)
    cb.timestamp(stamps.ctypes.data + 8)
    self.dev.queue.wait(submit(self.dev.queue, cb))
    profile_events.append(ProfileEvent(f"{name} {nbytes} B", self.dev.name, int(stamps[0]), int(stamps[1]), kind="copy"))

  def copyin(self, dest: np.ndarray, src: memoryview, offset: int = 0) -> None:
    if not PROFILE or not len(src): return super().copyin(dest, src, offset)
    self.idle(dest, True)
    host = np.frombuffer(src, dtype=np.uint8)  # a view: the queue reads the caller's memory, which outlives the wait
    self._queued_copy(dest.ctypes.data + offset, host.ctypes.data, len(host), "copyin")

  def copyout(self, dest: memoryview, src: np.ndarray) -> None:
    if not PROFILE or not src.nbytes: return super().copyout(dest, src)
    self.idle(src, False)
    self._queued_copy(np.frombuffer(dest, dtype=np.uint8).ctypes.data, src.ctypes.data, src.nbytes, "copyout")


# commands the host may write ahead of the workers (512 bytes each): a submit longer than the ring waits for them as it
# goes. Every slot is written in turn, so the whole ring stays resident: 1 MiB, where the core's 16384 slots held 8
# (an LLM decode step is ~720 commands)
RING_SLOTS = 2048

# one for every CPU device of the process: devices with work at the same time split the cores
_CORES = hcq.CoreShare(int(NUM_CPU_THREADS.value))


RENDERERS = ("CLANG", "LLVM", "X86")


def renderer_name(name: str) -> str:
  """Which renderer the CPU device `name` uses: the one its name gives (CPU:LLVM), else CPU_CC's (tinygrad's CPU_CC=LLVM)
  or CPU_LLVM=1's, else CLANG where the C compiler is clang, LLVM where it is another (gcc gets scalar code: Q8_0
  decode 4.9 tok/s against LLVM's 40) and llvmlite is installed, CLANG where it is not; where no C compiler is found,
  LLVM where llvmlite is installed and X86 (machine code written here, nothing to install) where it is not."""
  t = Target.parse(name)
  if t.arch is not None: raise ValueError(f"{name}: the CPU device compiles for this host (no architecture)")
  env = os.environ.get
  if (want := t.renderer or env("CPU_CC", "").upper() or ("LLVM" if env("CPU_LLVM", "0") not in ("", "0") else "")) and want not in RENDERERS:
    raise ValueError(f"{name}: the CPU device has no renderer {want!r} (renderers: {', '.join(RENDERERS)})")
  if want: return want
  try: c_compiler()
  except RuntimeError: return "LLVM" if importlib.util.find_spec("llvmlite") is not None else "X86"
  return "CLANG" if is_clang() or importlib.util.find_spec("llvmlite") is None else "LLVM"


class CPUDevice(Compiled):
  def __init__(self, name: str):
    unit = host_vector_unit()  # register tiles are sized for this CPU's vector registers
    renderer: Renderer
    self.toolchain: Toolchain | None  # None: machine code encoded here (X86), nothing compiled or cached
    if (kind := renderer_name(name)) == "X86":
      from tinyhybrid.renderer.isa.x86 import X86Renderer
      renderer, self.toolchain = X86Renderer(host_cpu_flags()), None
    elif kind == "LLVM":
      from tinyhybrid.renderer.llvmir import LLVMRenderer
      from tinyhybrid.runtime.llvm import LLVM_TOOLCHAIN, llvm
      llvm()  # a missing llvmlite is an error when the device opens
      renderer, self.toolchain = LLVMRenderer(unit.lanes, registers=unit.registers), LLVM_TOOLCHAIN
    else: renderer, self.toolchain = CRenderer(unit.lanes if is_clang() else 1, registers=unit.registers), C_TOOLCHAIN
    super().__init__(name, CPUAllocator(self), renderer, self._build_kernels)
    # the first CPU device's workers keep to a CPU each where they are as many as the CPUs (hcq.CpuConfig::pin); the
    # others' and the copy queues' move freely, so that queues sharing the cores never pin two leaders to one CPU
    self.hcq_queue = self.queue = hcq.CPUQueue(int(NUM_CPU_THREADS.value), RING_SLOTS, name=name, share=_CORES, batch=int(JIT_BATCH_SIZE.value),
                                               pin=Target.parse(name).index == 0)
    register(self.queue)
    self._copy_queue: hcq.CPUQueue | None = None
    self.max_threads = self.queue.num_threads
    # the loop order of a matmul reads them
    renderer.cores, renderer.core_cache, renderer.shared_cache = self.max_threads, core_cache_bytes(), shared_cache_bytes()
    self.shares_host_memory = True

  def _build_kernels(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    if self.toolchain is None:
      from tinyhybrid.runtime import x86
      return [self._program(name, src, obj := x86.load(name, src), obj.symbols[name]) for name, src in kernels]
    # one compiler run per core, each over its share of the kernels (split by source size)
    groups: list[list[int]] = [[] for _ in range(min(len(kernels), max(1, int(PARALLEL.value))))]
    sizes = [0] * len(groups)
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i][1])):
      g = sizes.index(min(sizes))
      groups[g].append(i)
      sizes[g] += len(kernels[i][1])
    toolchain = self.toolchain
    with ThreadPoolExecutor(len(groups)) as pool: built = list(pool.map(lambda g: compile_shared([kernels[i] for i in g], toolchain), groups))
    libs: dict[int, Path] = {}
    for grp, b in zip(groups, built): libs.update(zip(grp, (p for p, _ in b)))
    return [self._program(name, src, *load_kernel(libs[i], name, src, toolchain)) for i, (name, src) in enumerate(kernels)]

  def _program(self, name: str, src: str, lib: Any, addr: int) -> CompiledProgram:
    # the kernel's state on this device (renderer/cstyle.STATE_MARK), its last argument
    state = np.zeros(nstate, dtype=np.uint64) if (nstate := -(-state_bytes(src, self.max_threads) // 8)) else None
    hp = HCQProgram(hcq.Program(addr, name), [] if state is None else [state.ctypes.data], (lib, state))
    fn = KERNEL_FN(addr)

    def call(args: list[int], threads: int) -> None:
      """Runs the kernel and waits for it (BEAM and DEBUG=2 time it so; a schedule runs through a QueueRunner)."""
      touched = accesses(compiled, args)
      if len(args) + len(hp.extra) > hcq.MAX_EXEC_ARGS:  # too many for a queue command: call it here, one core after another
        for a, written in touched: host_wait(a, written)
        words = to_ctypes_words([*args, *hp.extra])
        start = time.monotonic_ns() if PROFILE else 0
        for core in range(threads): fn(words, core, threads)
        # run on this thread, not the queue: the host's clock is the kernel's
        if PROFILE: profile_events.append(ProfileEvent(name, self.name, start, time.monotonic_ns()))
        return
      cb = hcq.CommandBuffer()
      stamps = np.zeros(2, dtype=np.uint64) if PROFILE else None
      if stamps is not None: cb.timestamp(stamps.ctypes.data)
      cb.exec(hp.program, [*args, *hp.extra], global_size=(threads,))
      if stamps is not None: cb.timestamp(stamps.ctypes.data + 8)
      for a, written in touched: cb.access(a, write=written)
      self.queue.wait(submit(self.queue, cb))
      if stamps is not None: profile_events.append(ProfileEvent(name, self.name, int(stamps[0]), int(stamps[1])))
    compiled = CompiledProgram(name, src, addr, call, keepalive=hp)
    return compiled

  def runner(self, items: list[tuple[CompiledProgram, list[int], int]], nslots: int) -> Runner:
    # a queue command carries a bounded number of arguments; a kernel past it is called directly
    return QueueRunner(items, nslots, self.queue, self.name) if fits(items) else Runner(items, nslots, self.name)

  @property
  def hcq_copy_queue(self) -> hcq.CPUQueue:
    """Copies into this device run on a queue of their own, made on first use, beside its kernels: the tracker orders
    the two only where their bytes meet (as a GPU's copy engine beside its compute queue)."""
    if self._copy_queue is None:
      self._copy_queue = hcq.CPUQueue(name=f"{self.name}:copy", share=_CORES, batch=int(JIT_BATCH_SIZE.value))
      register(self._copy_queue)
    return self._copy_queue

  def chain_runner(self, devices: list[str], items: list[tuple[CompiledProgram, list[int], int]], nslots: int) -> Runner | None:
    return chain_runner_of(CPUDevice, devices, items, nslots)

  def compiler_key(self) -> str: return self.toolchain.key() if self.toolchain is not None else "x86"

  def synchronize(self) -> None:
    synchronize(self.queue)
    if self._copy_queue is not None: synchronize(self._copy_queue)


def make_device(name: str) -> Compiled: return CPUDevice(name)
