"""The CPU device: C kernels compiled with the system compiler, run through the native command queue (a ring
consumed by one worker thread per usable core; each kernel's THREAD loop is split across them)."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tinyhybrid._core import hcq
from tinyhybrid.device import Allocator, Compiled, CompiledProgram, CopySpec, Device, ProfileEvent, Runner, profile_events, to_ctypes_words
from tinyhybrid.helpers import PROFILE
from tinyhybrid.renderer.cstyle import CRenderer
from tinyhybrid.runtime.compiler import KERNEL_FN, compile_shared, is_clang, load_kernel


def _encode_items(cb: hcq.CommandBuffer, slots: list[int], items: list[tuple[CompiledProgram, list[int], int]],
                  stamps: np.ndarray | None = None) -> None:
  """Kernels (and copies) over patch slots, each bracketed by timestamps into `stamps` when given."""
  for k, (prg, args, threads) in enumerate(items):
    if stamps is not None: cb.timestamp(stamps.ctypes.data + 16 * k)
    if isinstance(prg.keepalive, CopySpec):  # a copy between devices (engine/multi.py), run by this queue
      spec = prg.keepalive
      cb.copy(hcq.Patch(slots[args[0]], spec.dst_offset), hcq.Patch(slots[args[1]], spec.src_offset), spec.nbytes)
    else: cb.exec(prg.keepalive[1], [hcq.Patch(slots[a]) for a in args], global_size=(threads,))
    if stamps is not None: cb.timestamp(stamps.ctypes.data + 16 * k + 8)


class CPUChainRunner(Runner):
  """Kernels and copies on several CPU devices that must run in the order given (a TinyJit replay of a sharded step):
  one command buffer per device, where a run of items waits, through a signal, for the run on another device before it.
  A call is one submit per device and one wait per device, so no host round trip between runs and no Python per item.
  Each call's signal values are the next ones on the signals' timelines (patched)."""
  def __init__(self, segments: list[tuple[CPUDevice, list[tuple[CompiledProgram, list[int], int]]]], nslots: int):
    super().__init__([it for _, seg in segments for it in seg], nslots)
    self.devs = list({id(d): d for d, _ in segments}.values())
    self.signals = {id(d): hcq.Signal(f"{d.name} chain") for d in self.devs}
    self.cbs = {id(d): hcq.CommandBuffer() for d in self.devs}
    slots = {id(d): [self.cbs[id(d)].add_slot(0) for _ in range(nslots)] for d in self.devs}
    self.marks: dict[int, list[int]] = {id(d): [] for d in self.devs}  # per device: the segment number of each value slot
    self.period = len(segments)
    for k, (dev, seg) in enumerate(segments):
      cb = self.cbs[id(dev)]
      if k and segments[k - 1][0] is not dev:  # after the run before it, on its device's signal
        cb.wait(self.signals[id(segments[k - 1][0])], 0, patch=True)
        self.marks[id(dev)].append(k)
      _encode_items(cb, slots[id(dev)], seg)
      if k + 1 < len(segments) and segments[k + 1][0] is not dev:
        cb.signal(self.signals[id(dev)], 0, patch=True)
        self.marks[id(dev)].append(k + 1)
    self.calls = 0

  def __call__(self, addresses: list[int]) -> None:
    self.calls += 1
    base = self.calls * self.period  # run k is done when its device's signal reaches base + k + 1
    for d in self.devs: d.queue.submit(self.cbs[id(d)], [*addresses, *(base + m for m in self.marks[id(d)])])
    for d in self.devs: d.queue.synchronize()


class CPUQueueRunner(Runner):
  """A schedule encoded once as a command buffer whose buffer addresses are patch slots: a run is one submit.
  With PROFILE=1 a second encoding (made on first use) brackets every exec with timestamps."""
  def __init__(self, items: list[tuple[CompiledProgram, list[int], int]], nslots: int, dev: CPUDevice):
    super().__init__(items, nslots)
    self.dev = dev
    self.cb = self._encode(None)
    self.profiled: tuple[hcq.CommandBuffer, np.ndarray] | None = None

  def _encode(self, stamps: np.ndarray | None) -> hcq.CommandBuffer:
    cb = hcq.CommandBuffer()
    _encode_items(cb, [cb.add_slot(0) for _ in range(self.nslots)], self.items, stamps)
    return cb

  def __call__(self, addresses: list[int]) -> None:
    if not PROFILE:
      self.dev.queue.submit(self.cb, addresses)
      self.dev.queue.synchronize()
      return
    if self.profiled is None:
      stamps = np.zeros(2 * len(self.items), dtype=np.uint64)
      self.profiled = (self._encode(stamps), stamps)
    cb, stamps = self.profiled
    self.dev.queue.submit(cb, addresses)
    self.dev.queue.synchronize()
    for k, (prg, _, _) in enumerate(self.items):
      profile_events.append(ProfileEvent(prg.name, self.dev.name, int(stamps[2 * k]), int(stamps[2 * k + 1])))


class CPUAllocator(Allocator):
  """Host memory; with PROFILE=1 a copy goes through the device's queue between two timestamps, so the profile shows
  it on the queue with the queue's own times (a plain numpy copy otherwise)."""
  def __init__(self, dev: CPUDevice):
    super().__init__()
    self.dev = dev

  def _queued_copy(self, dst: int, src: int, nbytes: int, name: str) -> None:
    stamps = np.zeros(2, dtype=np.uint64)
    cb = hcq.CommandBuffer()
    cb.timestamp(stamps.ctypes.data)
    cb.copy(dst, src, nbytes)
    cb.timestamp(stamps.ctypes.data + 8)
    self.dev.queue.submit(cb)
    self.dev.queue.synchronize()
    profile_events.append(ProfileEvent(f"{name} {nbytes} B", self.dev.name, int(stamps[0]), int(stamps[1]), kind="copy"))

  def copyin(self, dest: np.ndarray, src: memoryview, offset: int = 0) -> None:
    if not PROFILE or not len(src): return super().copyin(dest, src, offset)
    host = np.frombuffer(src, dtype=np.uint8)  # a view: the queue reads the caller's memory, which outlives the wait
    self._queued_copy(dest.ctypes.data + offset, host.ctypes.data, len(host), "copyin")

  def copyout(self, dest: memoryview, src: np.ndarray) -> None:
    if not PROFILE or not src.nbytes: return super().copyout(dest, src)
    self._queued_copy(np.frombuffer(dest, dtype=np.uint8).ctypes.data, src.ctypes.data, src.nbytes, "copyout")


class CPUDevice(Compiled):
  def __init__(self, name: str):
    super().__init__(name, CPUAllocator(self), CRenderer(16 if is_clang() else 1), self._build_kernels)
    self.queue = hcq.CPUDevice()
    self.max_threads = self.queue.num_threads
    self.graph = CPUQueueRunner

  def _build_kernels(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    # one compiler run per core, each over its share of the kernels (split by source size)
    groups: list[list[int]] = [[] for _ in range(min(len(kernels), os.cpu_count() or 1))]
    sizes = [0] * len(groups)
    for i in sorted(range(len(kernels)), key=lambda i: -len(kernels[i][1])):
      g = sizes.index(min(sizes))
      groups[g].append(i)
      sizes[g] += len(kernels[i][1])
    with ThreadPoolExecutor(len(groups)) as pool: built = list(pool.map(lambda g: compile_shared([kernels[i] for i in g]), groups))
    libs: dict[int, Path] = {}
    for grp, b in zip(groups, built): libs.update(zip(grp, (p for p, _ in b)))
    return [self._load(name, src, libs[i]) for i, (name, src) in enumerate(kernels)]

  def _load(self, name: str, src: str, path: Path) -> CompiledProgram:
    lib, addr = load_kernel(path, name, src)
    prog = hcq.Program(addr, name)

    fn = KERNEL_FN(addr)

    def call(args: list[int], threads: int) -> None:
      if len(args) > hcq.MAX_EXEC_ARGS:  # too many for a queue command: call it here, one core after another
        self.queue.synchronize()
        words = to_ctypes_words(args)
        start = time.monotonic_ns() if PROFILE else 0
        for core in range(threads): fn(words, core, threads)
        # run on this thread, not the queue: the host's clock is the kernel's
        if PROFILE: profile_events.append(ProfileEvent(name, self.name, start, time.monotonic_ns()))
        return
      cb = hcq.CommandBuffer()
      if not PROFILE:
        cb.exec(prog, args, global_size=(threads,))
        self.queue.submit(cb)
        self.queue.synchronize()
        return
      stamps = np.zeros(2, dtype=np.uint64)
      cb.timestamp(stamps.ctypes.data)
      cb.exec(prog, args, global_size=(threads,))
      cb.timestamp(stamps.ctypes.data + 8)
      self.queue.submit(cb)
      self.queue.synchronize()
      profile_events.append(ProfileEvent(name, self.name, int(stamps[0]), int(stamps[1])))
    return CompiledProgram(name, src, addr, call, keepalive=(lib, prog, fn))

  def runner(self, items: list[tuple[CompiledProgram, list[int], int]], nslots: int) -> Runner:
    # a queue command carries a bounded number of arguments; a kernel past it is called directly
    if any(len(args) > hcq.MAX_EXEC_ARGS for _, args, _ in items): return Runner(items, nslots, self.name)
    return CPUQueueRunner(items, nslots, self)

  def chain_runner(self, segments: list[tuple[str, list[tuple[CompiledProgram, list[int], int]]]], nslots: int) -> Runner | None:
    # every device a CPU queue, and every kernel's arguments fit a queue command
    cpus = [dev for d, _ in segments if isinstance(dev := Device[d], CPUDevice)]
    if len(cpus) != len(segments) or any(len(a) > hcq.MAX_EXEC_ARGS for _, seg in segments for _, a, _ in seg): return None
    return CPUChainRunner([(dev, seg) for dev, (_, seg) in zip(cpus, segments)], nslots)

  def synchronize(self) -> None: self.queue.synchronize()


def make_device(name: str) -> Compiled: return CPUDevice(name)
