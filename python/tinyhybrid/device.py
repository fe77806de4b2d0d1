"""Devices and buffers: the Device registry (DEV=, Device.DEFAULT, Device[name]), Buffer, and the interfaces a
device implements (allocator, compiler, program runner)."""
from __future__ import annotations

import ctypes
import functools
import importlib
import mmap
import pickle
import re
import sys
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable, SupportsIndex, TypeGuard

import numpy as np

from tinyhybrid.digest import sha256
from tinyhybrid.dtype import DType, dtypes, np_storage
from tinyhybrid.helpers import DEV, LRU, PROFILE, GlobalCounters, getenv, once

class CompileError(RuntimeError):
  """A kernel failed to compile: carries the compiler's message and the kernel's source (tinygrad's place for it)."""


class Allocator:
  """Host-memory allocator: buffers are aligned numpy arrays, so every device here can read them directly. A device
  with memory of its own (runtime/ops_cl.py) allocates opaque handles instead: `address` is then what its kernels take
  as the buffer's argument. Each device has its own allocator, which counts the bytes of that device's live buffers
  (`used`)."""
  ALIGN = 64
  # freed memory kept for reuse (tinygrad's LRU allocator), by size, up to this many bytes per device: fresh memory
  # costs a page fault per page on first touch, which dominates copies and kernels over new buffers
  CACHE_BYTES = 1 << 30
  # from this size a buffer is pages of its own (page-aligned), given back to the system when it is freed: malloc's
  # would stay with the process once its threshold for such blocks had grown past them (an LLM's warm-up peaked 5% of
  # the model higher for it)
  MAPPED_BYTES = 1 << 18
  # from this size a buffer asks for 2 MiB pages where the kernel gives them on request (transparent huge pages in
  # "madvise" mode, as Debian's): a kernel streaming a weight crosses a page boundary every 4 KiB otherwise, and
  # a decode step of the 0.5B model ran 2-5% faster (F16, Q8_0, Q4_K_M) with its weights on them
  HUGE_BYTES = 1 << 21

  def __init__(self) -> None:
    self.used = 0
    self._cache: dict[int, list[np.ndarray]] = {}
    self._cached = 0

  def alloc(self, nbytes: int) -> Any:
    if (free := self._cache.get(nbytes)):
      self._cached -= nbytes
      return free.pop()
    if nbytes >= self.MAPPED_BYTES:  # private, as malloc's: a forked child's writes stay its own
      m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
      if nbytes >= self.HUGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
        try: m.madvise(mmap.MADV_HUGEPAGE)
        except OSError: pass  # a kernel without transparent huge pages
      return np.frombuffer(m, dtype=np.uint8)
    raw = np.empty(max(nbytes, 1) + self.ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % self.ALIGN
    return raw[off:off + nbytes]

  def address(self, mem: Any) -> int: return mem.ctypes.data
  @property
  def is_host_memory(self) -> bool:
    """Whether its memory is host memory (numpy arrays at the addresses kernels take), which the host uses in place."""
    return type(self).address is Allocator.address
  def wrap(self, ptr: int, nbytes: int) -> Any:
    """Memory for the host memory at ptr, which its owner keeps alive and frees."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr))[:nbytes]

  def idle(self, mem: Any, write: bool) -> None:
    """Until the host may read mem (write: also write or free it): a device whose queue runs asynchronously waits here
    for the submits that use it. Memory kept in the cache needs no wait: its next user's work is ordered after them."""

  def free(self, mem: Any, cache: bool = True) -> None:
    """Takes back memory alloc gave (its buffer is gone): kept for the next alloc of its size while the cache has room
    (cache=False: never, a BufferSpec(nolru=True) buffer's; LRU=0: none, as in tinygrad). A device with memory of
    its own releases it when the handle is dropped."""
    if cache and LRU and self._cached + mem.nbytes <= self.CACHE_BYTES:
      self._cache.setdefault(mem.nbytes, []).append(mem)
      self._cached += mem.nbytes
    else: self.idle(mem, True)

  def free_cache(self) -> None:
    """Lets go of the freed memory kept for reuse (tinygrad's LRUAllocator.free_cache): after a warm-up whose
    buffers will not be asked for again, so that the process holds only what it uses."""
    for mems in self._cache.values():
      for mem in mems: self.idle(mem, True)
    self._cache.clear()
    self._cached = 0

  def copyin(self, dest: Any, src: memoryview, offset: int = 0) -> None:
    """src's bytes into dest from byte `offset` on (the whole of it by default)."""
    self.idle(dest, True)
    dest[offset:offset + len(src)] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: Any) -> None:
    self.idle(src, False)
    np.frombuffer(dest, dtype=np.uint8)[:] = src


@dataclass(frozen=True)
class BufferSpec:
  """How a buffer's memory is made (tinygrad's): external_ptr is host memory its owner keeps alive and frees (the
  buffer is attached to it); nolru: its memory is released with it, not kept for reuse (Allocator.free); the other
  fields are hints for devices that place memory, and change nothing here."""
  uncached: bool = False
  cpu_access: bool = False
  host: bool = False
  nolru: bool = False
  zero: bool = False
  external_ptr: int | None = None


class Buffer:
  """`size` elements of `dtype` on `device`. Memory is allocated on first use and freed with the Buffer. The
  constructor takes tinygrad's arguments too: opaque (the allocator's memory, owned from then on), options
  (BufferSpec), initial_value (bytes), base and offset (a view of base's memory) and preallocate."""

  def __init__(self, device: str, size: int, dtype: DType, opaque: Any = None, options: BufferSpec | None = None,
               initial_value: bytes | pickle.PickleBuffer | None = None, uop_refcount: int = 0, base: Buffer | None = None, offset: int = 0,
               preallocate: bool = False, initial: bytes | np.ndarray | None = None):
    if size < 0: raise ValueError(f"Buffer: negative size {size}")
    self.device, self.size, self.dtype, self.options = device, size, dtype, options
    self._mem: Any = None  # the allocator's memory: a numpy array on the host, a handle on a device with its own
    self._address = 0
    self._external = False
    self._allocator: Allocator | None = None  # the device's, which counts this buffer while it has memory
    self._base: Buffer | None = None  # the buffer whose memory a view (Buffer.view) is part of, kept alive by it
    self._mapped: Any = None  # a view's: the base's memory it maps (stale once the base lets it go)
    self._freed = False       # a view's: deallocated, and not allocated again (a read then is a use after free)
    self.offset = 0
    # a schedule's intermediate in memory its plan shares (a view of it), which a TinyJit capture holds weakly as it
    # holds any intermediate (engine/realize.Capture)
    self.intermediate = False
    if base is not None: self._share(base, offset)
    elif opaque is not None or (options is not None and options.external_ptr is not None) or preallocate: self.allocate(opaque)
    # made from host data (Tensor([1, 2])): what tinygrad holds as a copy still to run, not as state a function reads
    self.from_host = initial is not None or initial_value is not None
    if self.from_host:
      data = initial if initial is not None else initial_value
      self.copyin(data.raw() if isinstance(data, pickle.PickleBuffer) else data)  # type: ignore[arg-type]
      if isinstance(data, pickle.PickleBuffer): data.release()

  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  def is_allocated(self) -> bool:
    """Whether its memory exists (a view's: its base's)."""
    return self._base.is_allocated() if self._base is not None else self._mem is not None

  def is_initialized(self) -> bool:
    """Whether it holds memory now: a view, once it maps its base's current memory (allocate, ensure_allocated)."""
    return self._mem is not None and (self._base is None or self._mapped is self._base._mem)
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self

  def allocate(self, opaque: Any = None, external_ptr: int | None = None) -> Buffer:
    """Gives the buffer memory now: the allocator's, opaque (memory the allocator made, owned from now on) or the host
    memory at external_ptr (see attach). tinygrad's: a buffer that has memory already is an AssertionError."""
    assert not (self.is_initialized() if self._base is not None else self.is_allocated()), "can't allocate already allocated buffer"
    if self._base is not None: return self.ensure_allocated()
    if external_ptr is None and self.options is not None: external_ptr = self.options.external_ptr
    if external_ptr is not None: return self.attach(external_ptr)
    if opaque is None: return self.ensure_allocated()
    self._allocator = alloc = Device[self.device].allocator
    if isinstance(opaque, (memoryview, bytearray)) and alloc.is_host_memory: opaque = np.frombuffer(opaque, np.uint8)  # shared
    self._mem, self._address = opaque, alloc.address(opaque)
    GlobalCounters.mem_used += self.nbytes
    alloc.used += self.nbytes
    return self

  def deallocate(self) -> None:
    """Frees the memory now (the buffer may be allocated again). A view lets go of its base's memory, which stays."""
    if self._base is not None:
      assert self._mem is not None, "buffer must be allocated to deallocate"
      self._mem, self._mapped, self._address, self._freed = None, None, 0, True
      return
    assert self.is_allocated(), "buffer must be allocated to deallocate"
    self._release()
    self._mem, self._address, self._external, self._allocator = None, 0, False, None

  def _memory(self) -> Any:
    """The memory to read or write, allocated on first use. A view that was let go of, or whose base was, is a use
    after free: an AssertionError, as in tinygrad."""
    if self._base is not None and not self.is_initialized():
      assert not self._freed and self._mem is None, "use after free: this view, or its base, was deallocated"
    return self.ensure_allocated()._mem

  def ensure_allocated(self) -> Buffer:
    if self._base is not None:
      if not self.is_initialized(): self._map()
      return self
    if self._mem is None:
      self._allocator = alloc = Device[self.device].allocator
      self._mem = alloc.alloc(self.nbytes)
      self._address = alloc.address(self._mem)  # asked on every kernel launch: numpy's lookup is slow
      GlobalCounters.mem_used += self.nbytes
      alloc.used += self.nbytes
      if PROFILE: profile_mem.append(ProfileMemEvent(self.device, time.monotonic_ns(), self.nbytes))
    return self

  def attach(self, ptr: int) -> Buffer:
    """Makes this (unallocated) buffer the host memory at ptr, which its owner keeps alive and frees."""
    if self._mem is not None: raise RuntimeError(f"attach: {self} already has memory")
    alloc = Device[self.device].allocator
    self._mem = alloc.wrap(ptr, self.nbytes)
    self._address, self._external, self._allocator = alloc.address(self._mem), True, alloc
    return self

  def view(self, size: int, dtype: DType, offset: int) -> Buffer:
    """size elements of dtype at byte `offset` of this buffer's memory, as a buffer of its own that shares it (a
    host-memory allocator's: a DISK file's range, a CPU buffer's)."""
    return Buffer(self.device, size, dtype, base=self, offset=offset)

  def _share(self, base: Buffer, offset: int) -> None:
    if not 0 <= offset <= base.nbytes - self.nbytes: raise ValueError(f"view: {self.size} x {self.dtype} at byte {offset} runs past {base}")
    if base._base is not None: base, offset = base._base, base.offset + offset  # a view of a view: of the same memory
    self._base, self._external, self.offset = base, True, offset  # mapped on first use (ensure_allocated)

  def _map(self) -> None:
    """A view's memory: its range of the base's current memory (allocated first if need be)."""
    base = self._base
    assert base is not None
    mem = base._memory()
    self._mem, self._mapped, self._allocator, self._freed = mem[self.offset:self.offset + self.nbytes], mem, base._allocator, False
    self._address = base._address + self.offset

  def __reduce_ex__(self, protocol: SupportsIndex) -> tuple:
    """Pickled with its contents (out of band with protocol 5, so pickle.dumps(..., buffer_callback=) copies nothing);
    a view as its base and offset. The device's state (allocator, programs) is the receiving process's own."""
    if self._base is not None: return Buffer, (self.device, self.size, self.dtype, None, None, None, 0, self._base, self.offset)
    data: bytearray | pickle.PickleBuffer | None = None
    if self.is_allocated():
      data = pickle.PickleBuffer(self.as_buffer()) if int(protocol) >= 5 else bytearray(self.as_buffer())
    return Buffer, (self.device, self.size, self.dtype, None, self.options, data)

  def host_memory(self, write: bool = False) -> Any:
    """The allocator's memory itself (a numpy array on the host), once the host may read it (write: also write it)."""
    mem = self._memory()
    Device[self.device].allocator.idle(mem, write)
    return mem

  def __del__(self) -> None:
    # at interpreter exit the queues have drained (hcq's atexit) and the process's memory goes with it; releasing now
    # would call into modules already torn down
    if not sys.is_finalizing(): self._release()

  def _release(self) -> None:
    if self._mem is not None and self._external and self._allocator is not None:
      self._allocator.idle(self._mem, True)  # its owner frees it next: not while a submit still uses it
    if self._mem is not None and not self._external:
      GlobalCounters.mem_used -= self.nbytes
      if self._allocator is not None:
        self._allocator.used -= self.nbytes
        self._allocator.free(self._mem, cache=self.options is None or not self.options.nolru)
      if PROFILE: profile_mem.append(ProfileMemEvent(self.device, time.monotonic_ns(), -self.nbytes))

  @property
  def address(self) -> int:
    if self._base is not None: return self.ensure_allocated()._address  # a view follows its base's current memory
    return self._address or self.ensure_allocated()._address

  def copyin(self, data: bytes | memoryview | np.ndarray, offset: int | None = None) -> Buffer:
    """The buffer's bytes from data: all of them, or (at a byte offset) the range data covers."""
    # (the ignores on memoryview(ndarray): numpy's stubs give ndarray the buffer protocol for Python 3.12+ only)
    raw = memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else data).cast("B")  # type: ignore[arg-type]
    if offset is None and len(raw) != self.nbytes: raise ValueError(f"copyin: {len(raw)} bytes into a buffer of {self.nbytes}")
    if offset is not None and not 0 <= offset <= self.nbytes - len(raw):
      raise ValueError(f"copyin: a copy of {len(raw)} bytes at {offset} runs past {self.device}'s buffer of {self.nbytes}")
    Device[self.device].allocator.copyin(self._memory(), raw, offset or 0)
    return self

  def copy_from(self, src: Buffer) -> Buffer:
    """This buffer's bytes from another buffer of the same size, on any device (tinygrad's)."""
    if src.nbytes != self.nbytes: raise ValueError(f"copy_from: {src.nbytes} bytes into a buffer of {self.nbytes}")
    return self.copyin(src.as_buffer())

  def copyout(self, dest: memoryview) -> memoryview:
    """The buffer's bytes copied into dest (tinygrad's), which it returns."""
    if dest.nbytes != self.nbytes: raise ValueError(f"copyout: {self.nbytes} bytes into a memoryview of {dest.nbytes}")
    if self.size: Device[self.device].allocator.copyout(dest.cast("B"), self._memory())
    return dest

  def as_memoryview(self, allow_zero_copy: bool = False, force_zero_copy: bool = False) -> memoryview:
    """The bytes (tinygrad's): a copy, or the host memory itself when zero copy is allowed and the memory is the host's."""
    if allow_zero_copy or force_zero_copy: return self.as_buffer()
    return memoryview(bytearray(self.as_buffer()))

  def numpy(self) -> np.ndarray:
    """A copy of the contents as a flat numpy array (raw bits for dtypes numpy lacks)."""
    out = np.empty(self.size, dtype=np_storage(self.dtype))
    if self.size: Device[self.device].allocator.copyout(memoryview(out.view(np.uint8).reshape(-1)), self._memory())  # type: ignore[arg-type]
    return out

  def as_buffer(self, offset: int = 0, nbytes: int | None = None) -> memoryview:
    """The bytes from `offset` on (nbytes of them; all by default): host memory itself where the allocator's is the
    host's (no copy), else a copy of them."""
    end = self.nbytes if nbytes is None else offset + nbytes
    if Device[self.device].allocator.is_host_memory:
      return memoryview(self.host_memory()[offset:end])  # type: ignore[arg-type]  # an ndarray is a buffer
    return memoryview(self.numpy().view(np.uint8).reshape(-1))[offset:end]  # type: ignore[arg-type]
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}{'' if self.is_allocated() else ' (unallocated)'}>"
  # Buffers are compared by identity: two buffers with the same contents are still different memory
  __hash__ = object.__hash__


class CompiledProgram:
  """A compiled kernel: its source, the loaded function's address, and a way to call it. The source and the kernel
  are kept compressed (read back on use: DEBUG, VIZ, a pickle, a capture's plan): the 0.5B LLM's 175 kernels held
  2.9 MB of C, 0.7 compressed, and its warm-up's kernels 53k nodes (3 MB of its peak), 0.3 MB as compressed pickles.

  call(args, launch) runs it on args as uint64 words: a CPU kernel's launch is its number of threads, a GPU kernel's
  its (global, local) work sizes (LoweredKernel.launch). A call may return before the kernel has run (the device's
  queue keeps order); it records its span with PROFILE=1. ops and mem: estimated operations and bytes of memory per
  run (GlobalCounters), set when the kernel is lowered. timed: runs the kernel and waits for it, its time in seconds
  as the device measured it (None: the host's clock around call). The first `outs` arguments are the buffers it
  writes, the first `bufs` are buffers and the others variables' values (-1: all are buffers). ast: the kernel it
  was compiled from (a SINK in kernel IR); reads: the buffer arguments it loads from (None: not known, all but its
  outputs). remake: how another process makes it again (pickle), a module-level function and its arguments, set by
  its maker."""

  def __init__(self, name: str, src: str, address: int, call: Callable[[list[int], Any], None], keepalive: Any = None,
               ops: int = 0, mem: int = 0, timed: Callable[[list[int], Any], float] | None = None, outs: int = 1, bufs: int = -1,
               ast: Any = None, remake: tuple[Callable[..., CompiledProgram], tuple] | None = None):
    self.name, self.src, self.address, self.call, self.keepalive = name, src, address, call, keepalive
    self.ops, self.mem, self.timed, self.outs, self.bufs, self.ast, self.remake = ops, mem, timed, outs, bufs, ast, remake
    self.reads: frozenset[int] | None = None

  @property
  def src(self) -> str: return zlib.decompress(self.packed_src).decode() if self.packed_src else ""
  @src.setter
  def src(self, src: str) -> None: self.packed_src = zlib.compress(src.encode(), 1) if src else b""

  @property
  def ast(self) -> Any: return pickle.loads(zlib.decompress(self._ast)) if isinstance(self._ast, bytes) else self._ast
  @ast.setter
  def ast(self, ast: Any) -> None: self._ast = ast

  def pack_ast(self) -> None:
    """Keeps the kernel as a compressed pickle, read back on use: a sixth of a pickle's bytes, a fortieth of the
    nodes' memory (ResNet-50's 90 kernels: 36k nodes, 140 KB). The engine packs a program's kernel when its own cache
    lets the kernel go and the program lives on (in the device's cache, or a captured JIT). Kept as it is where it
    cannot be pickled: an arg pickle refuses, or a kernel deeper than pickle's recursion (a chain of 20000 adds)."""
    if self._ast is None or isinstance(self._ast, bytes): return
    try: self._ast = zlib.compress(pickle.dumps(self._ast), 1)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError): pass

  def __repr__(self) -> str: return f"CompiledProgram({self.name!r}, address={self.address:#x})"

  def __reduce__(self) -> tuple:
    if self.remake is None: raise pickle.PicklingError(f"program {self.name} cannot be made again in another process")
    return _remade, (self.remake, self.ops, self.mem, self.outs, self.bufs, self.ast)


def _remade(remake: tuple[Callable[..., CompiledProgram], tuple], ops: int, mem: int, outs: int, bufs: int, ast: Any) -> CompiledProgram:
  prg = remake[0](*remake[1])
  prg.ops, prg.mem, prg.outs, prg.bufs, prg.ast = ops, mem, outs, bufs, ast
  return prg


def compiled_program(device: str, name: str, src: str) -> CompiledProgram:
  """The program of a kernel's source on a device (compiled, or from the device's cache)."""
  return Device[device].compile_many([(name, src)])[0]


def _from_packed(device: str, name: str, packed_src: bytes) -> CompiledProgram:
  return compiled_program(device, name, zlib.decompress(packed_src).decode())


@dataclass(frozen=True)
class CopySpec:
  """What a copy program (args: dst, src) moves: a device's runner encodes it as a copy command."""
  nbytes: int
  src_offset: int = 0
  dst_offset: int = 0


@dataclass(frozen=True)
class ProfileEvent:
  """One span of work on a device's queue, in time.monotonic_ns() nanoseconds (PROFILE=1): a kernel, a copy, or a
  TinyJit replay (which spans the kernels it ran). The CPU queue stamps its commands itself, on the same clock."""
  name: str
  device: str
  start_ns: int
  end_ns: int
  kind: str = "kernel"  # "kernel" | "copy" | "jit"
  queue: str = "queue"


@dataclass(frozen=True)
class ProfileMemEvent:
  """A buffer allocated (nbytes > 0) or freed (nbytes < 0) on a device (PROFILE=1)."""
  device: str
  ts_ns: int
  nbytes: int


# what PROFILE=1 records, in order; the user reads and clears them (tinyhybrid.viz.profile exports them)
profile_events: list[ProfileEvent] = []
profile_mem: list[ProfileMemEvent] = []


class Runner:
  """Runs a fixed list of kernels over numbered buffers: (program, the buffer slots it takes, threads) each."""

  def __init__(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int, device: str = ""):
    self.items, self.nslots, self.device = items, nslots, device

  def __call__(self, addresses: list[int]) -> None:
    # each program's call records its own profile span, with the best clock its device has
    for prg, slots, threads in self.items: prg.call([addresses[s] for s in slots], threads)


class Compiled:
  """A device that compiles and runs kernels: an allocator, a renderer, a compiler and a runtime."""
  # tinygrad's graph runner class for the device's JIT replays. A replay here is batched by its queue (engine/multi.py
  # batch_runners) for every device, so no device has one of tinygrad's graph classes
  graph: Any = None

  def __init__(self, name: str, allocator: Allocator, renderer: Any,
               build_fn: Callable[[list[tuple[str, str]]], list[CompiledProgram]] | None):
    # build_fn compiles a list of new (name, source) kernels at once: a compiler may take several in one run
    self.name, self.allocator, self.renderer, self._build = name, allocator, renderer, build_fn
    self._cache: dict[tuple[str, bytes], CompiledProgram] = {}  # by name and the source's digest
    self.max_threads = 1  # how many cores a kernel's outer loop is split across
    # the device's command queue (an hcq.Queue) when it runs through HCQ: submits then return at once, and copies
    # between host-memory devices are commands on it (runtime/hcq.py)
    self.hcq_queue: Any = None
    # its memory is the host's, and its kernels read the memory of other such devices in place (CPU:N): a copy that
    # only feeds arithmetic then moves nothing. A GPU's memory is its own (a mock's too, to run as a GPU would).
    self.shares_host_memory = False
    # a device without a compiler (DISK) holds memory and runs no kernels: only views of its memory and copies reach it
    self.runs_kernels = build_fn is not None

  @property
  def hcq_copy_queue(self) -> Any:
    """The queue that copies into this device's memory run on: a copy engine's, or the compute queue's where the device
    has none (None without HCQ)."""
    return self.hcq_queue

  def compile(self, name: str, src: str) -> CompiledProgram: return self.compile_many([(name, src)])[0]

  def compile_many(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    """The programs of (name, source) pairs, each compiled once per device."""
    if self._build is None: raise RuntimeError(f"device {self.name} does not run kernels")
    keys = [(name, sha256(src.encode()).digest()) for name, src in kernels]
    if todo := [(k, kernel) for k, kernel in dict(zip(keys, kernels)).items() if k not in self._cache]:
      for (key, (name, _)), prg in zip(todo, self._build([kernel for _, kernel in todo])):
        prg.remake = (_from_packed, (self.name, name, prg.packed_src))
        self._cache[key] = prg
    return [self._cache[k] for k in keys]

  def program_keys(self) -> set[tuple[str, bytes]]:
    """The (name, source digest) pairs of the programs it keeps."""
    return set(self._cache)

  def forget_programs(self, keep: set[tuple[str, bytes]]) -> None:
    """Lets go of the programs it keeps but keep's (engine.realize.run_once): a later compile of one builds it again
    (from the disk cache where the compiler has one)."""
    for k in self._cache.keys() - keep: del self._cache[k]

  def runner(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner: return Runner(items, nslots, self.name)

  def chain_runner(self, devices: list[str], items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner | None:
    """One runner for items on several devices (items[i] runs on devices[i], in this order), each device's items from
    one command buffer, with waits between the queues only where the items' buffers meet; None when these devices
    cannot (then each run of items on one device gets a runner of its own)."""
    return None

  def compiler_key(self) -> str:
    """What identifies the compiler of this device's kernels in cache keys (the device name says the rest)."""
    return ""

  def synchronize(self) -> None: pass


@dataclass(frozen=True)
class Target:
  """A device name in tinygrad's target syntax, DEVICE[:index][:RENDERER][:arch]: CL:1, CUDA:PTX, NULL:CUDA:sm_90."""
  device: str
  index: int = 0
  renderer: str | None = None  # one of RENDERERS; None: the device's own
  arch: str | None = None      # e.g. sm_90; None: the device's own

  @staticmethod
  def parse(name: str) -> Target:
    base, *rest = name.split(":")
    index, renderer, arch = 0, None, None
    for part in rest:
      if not part: continue  # an empty renderer: the device's own (PYTHON::sm_80)
      if part.isdigit() and renderer is None and arch is None: index = int(part)
      elif part.upper() in RENDERERS and renderer is None and arch is None: renderer = part.upper()
      elif arch is None and re.fullmatch(r"[a-z]+_?[0-9][0-9a-z]*", part.lower()): arch = part.lower()
      else: raise ValueError(f"unknown device {name!r}: expected DEVICE[:index][:RENDERER][:arch] (renderers: {', '.join(RENDERERS)})")
    return Target(base.upper(), index, renderer, arch)

  def __str__(self) -> str:
    return ":".join([self.device, *([str(self.index)] if self.index else []), *([self.renderer] if self.renderer else []), *([self.arch] if self.arch else [])])


RENDERERS = ("CUDA", "PTX", "CLANG", "LLVM", "X86")  # renderers a target may name


@functools.lru_cache(maxsize=4096)
def _canonical_name(device: str) -> str:
  """A device name in canonical form (names are asked for per node while graphs are lowered: parsed once each)."""
  base, _, path = device.partition(":")
  if base.upper() == "DISK":  # DISK:/path/to/file, the file's bytes as memory (runtime/ops_disk.py): the path as given
    if not path: raise ValueError(f"{device!r}: a DISK device names its file, DISK:/path/to/file")
    return f"DISK:{path}"
  t = Target.parse(device)
  if t.device not in _DeviceRegistry._known: raise ValueError(f"unknown device {device!r}; known: {', '.join(_DeviceRegistry._known)} (as NAME or NAME:index)")
  return str(t)


class _DeviceRegistry:
  """Device["CPU"] gives the device object (made on first use). Device.DEFAULT is, in order: DEV= (e.g. DEV=CL,
  DEV=CL:1, DEV=CUDA:PTX, DEV=NULL:CUDA:sm_90; see Target), else the first of CPU=1, NULL=1, CL=1, CUDA=1, PYTHON=1, NV=1, AMD=1 set, else CPU.
  "CPU:0", "CPU:1", ... are separate devices, each with its own queue, workers and memory count ("CPU" is "CPU:0"). A
  tuple of names is the device of a tensor sharded across them (tinygrad's multi-device tensors). "DISK:/path" is a
  file as memory: tensors there are views of its bytes, copied to and from other devices (runtime/ops_disk.py)."""
  _known = ("CPU", "NULL", "CL", "CUDA", "PYTHON", "NV", "AMD")

  @property
  def DEFAULT(self) -> str:  # noqa: N802 (tinygrad's name)
    """DEV's device, read each time: `with Context(DEV="NULL"):` changes it for the block, as in tinygrad."""
    return _default_device(str(DEV.value))

  @DEFAULT.setter
  def DEFAULT(self, _: str) -> None:  # noqa: N802
    raise AttributeError("setting Device.DEFAULT is deprecated: set DEV=... in the environment, or use Context(DEV=...)")

  @property
  def default(self) -> Compiled:
    """The default device's object (tinygrad's Device.default)."""
    return self[self.DEFAULT]

  def canonicalize(self, device: str | tuple[str, ...] | list[str] | None) -> Any:
    """The device's canonical name ("cpu:1" -> "CPU:1", "CPU:0" -> "CPU"), or for a tuple of devices the tuple of theirs."""
    if device is None: return self.DEFAULT
    if isinstance(device, (tuple, list)):
      if not device: raise ValueError("an empty tuple of devices")
      return tuple(self.canonicalize(d) for d in device)
    if not isinstance(device, str): raise TypeError(f"a device is a name like 'CPU:1' or a tuple of them, not {type(device).__name__}")
    return _canonical_name(device)

  def __getitem__(self, device: str) -> Compiled:
    if not isinstance(device, str): raise TypeError(f"Device[...] takes one device name, not {device!r}")
    return self._open(self.canonicalize(device))

  def opened(self, base: str | None = None) -> list[str]:
    """The names of the devices of a kind ("CPU"), or of all kinds, made so far."""
    return [n for n in self._names if base is None or device_base(n) == base]

  @functools.cached_property
  def _names(self) -> list[str]: return []

  @once  # one device object per canonical name for the process ("CPU:0" is "CPU"), also when threads open it at once
  def _open(self, name: str) -> Compiled:
    self._names.append(name)
    try: return importlib.import_module(f"tinyhybrid.runtime.ops_{name.split(':')[0].lower()}").make_device(name)
    except BaseException:
      self._names.remove(name)  # not made: not opened
      raise


@functools.lru_cache(maxsize=64)
def _default_device(dev: str) -> str:
  return Device.canonicalize(dev or next((d for d in _DeviceRegistry._known if getenv(d, 0) == 1), "CPU"))


@functools.cache
def device_base(device: str) -> str:
  """The device's kind ("CPU:3" -> "CPU", "NULL:PTX:sm_90" stays, "DISK:/a/file" -> "DISK"): devices of one kind
  share compiled kernels."""
  if device.startswith("DISK:"): return "DISK"
  t = Target.parse(device)
  return str(Target(t.device, 0, t.renderer, t.arch))


Device = _DeviceRegistry()


def is_storage(device: Any) -> TypeGuard[str]:
  """Whether a tensor's device (a name, a tuple of them, None) holds memory and runs no kernels (DISK)."""
  return type(device) is str and not Device[device].runs_kernels


def to_ctypes_words(args: list[int]) -> ctypes.Array:
  """Kernel arguments as the uint64 array every kernel takes."""
  return (ctypes.c_uint64 * max(len(args), 1))(*[a & 0xFFFFFFFFFFFFFFFF for a in args])


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
  """Whether kernels on device (the default one if None) can hold and compute in dtype."""
  return dtype in Device[Device.canonicalize(device)].renderer.supported_dtypes()


def default_float_np() -> np.dtype: return np_storage(dtypes.default_float)
