"""Devices and buffers: the Device registry (DEV=, Device.DEFAULT, Device[name]), Buffer, and the interfaces a
device implements (allocator, compiler, program runner)."""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import PROFILE, GlobalCounters, getenv

# numpy has no bfloat16 or fp8: those are stored as raw bits of the same width
_NP_STORAGE = {"bool": np.bool_, "signed char": np.int8, "unsigned char": np.uint8, "short": np.int16,
               "unsigned short": np.uint16, "int": np.int32, "unsigned int": np.uint32, "long": np.int64,
               "unsigned long": np.uint64, "half": np.float16, "__bf16": np.uint16, "float": np.float32,
               "double": np.float64, "float8_e4m3": np.uint8, "float8_e5m2": np.uint8, "float8_e4m3fnuz": np.uint8,
               "float8_e5m2fnuz": np.uint8}


def np_storage(dtype: DType) -> np.dtype:
  """The numpy dtype that stores values of `dtype` (raw bits where numpy has no such type)."""
  try: return np.dtype(_NP_STORAGE[dtype.scalar().name])
  except KeyError: raise TypeError(f"{dtype} has no numpy storage") from None


class Allocator:
  """Host-memory allocator: buffers are aligned numpy arrays, so every device here can read them directly."""
  ALIGN = 64

  def alloc(self, nbytes: int) -> np.ndarray:
    raw = np.empty(max(nbytes, 1) + self.ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % self.ALIGN
    return raw[off:off + nbytes]

  def copyin(self, dest: np.ndarray, src: memoryview) -> None: dest[:] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: np.ndarray) -> None: np.frombuffer(dest, dtype=np.uint8)[:] = src


class Buffer:
  """`size` elements of `dtype` on `device`. Memory is allocated on first use and freed with the Buffer."""

  def __init__(self, device: str, size: int, dtype: DType, initial: bytes | np.ndarray | None = None):
    if size < 0: raise ValueError(f"Buffer: negative size {size}")
    self.device, self.size, self.dtype = device, size, dtype
    self._mem: np.ndarray | None = None
    self._address = 0
    self._external = False
    if initial is not None: self.copyin(initial)

  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  def is_allocated(self) -> bool: return self._mem is not None

  def ensure_allocated(self) -> Buffer:
    if self._mem is None:
      self._mem = Device[self.device].allocator.alloc(self.nbytes)
      self._address = self._mem.ctypes.data  # asked on every kernel launch: numpy's lookup is slow
      GlobalCounters.mem_used += self.nbytes
      if PROFILE: profile_mem.append(ProfileMemEvent(self.device, time.monotonic_ns(), self.nbytes))
    return self

  def attach(self, ptr: int) -> Buffer:
    """Makes this (unallocated) buffer the host memory at ptr, which its owner keeps alive and frees."""
    if self._mem is not None: raise RuntimeError(f"attach: {self} already has memory")
    self._mem = np.ctypeslib.as_array((ctypes.c_uint8 * max(self.nbytes, 1)).from_address(ptr))[:self.nbytes]
    self._address, self._external = ptr, True
    return self

  def __del__(self) -> None:
    if self._mem is not None and not self._external:
      GlobalCounters.mem_used -= self.nbytes
      if PROFILE: profile_mem.append(ProfileMemEvent(self.device, time.monotonic_ns(), -self.nbytes))

  @property
  def address(self) -> int: return self._address or self.ensure_allocated()._address

  def copyin(self, data: bytes | memoryview | np.ndarray) -> Buffer:
    raw = memoryview(np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else data).cast("B")
    if len(raw) != self.nbytes: raise ValueError(f"copyin: {len(raw)} bytes into a buffer of {self.nbytes}")
    Device[self.device].allocator.copyin(self.ensure_allocated()._mem, raw)  # type: ignore[arg-type]
    return self

  def numpy(self) -> np.ndarray:
    """A copy of the contents as a flat numpy array (raw bits for dtypes numpy lacks)."""
    out = np.empty(self.size, dtype=np_storage(self.dtype))
    if self.size: Device[self.device].allocator.copyout(memoryview(out.view(np.uint8).reshape(-1)), self.ensure_allocated()._mem)  # type: ignore[arg-type]
    return out

  def as_buffer(self) -> memoryview: return memoryview(self.numpy().view(np.uint8).reshape(-1))
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}{'' if self.is_allocated() else ' (unallocated)'}>"
  # Buffers are compared by identity: two buffers with the same contents are still different memory
  __hash__ = object.__hash__


@dataclass
class CompiledProgram:
  """A compiled kernel: its source, the loaded function's address, and a way to call it."""
  name: str
  src: str
  address: int
  call: Callable[[list[int], int], None]  # (args as uint64 words, number of threads); records its span with PROFILE=1
  keepalive: Any = None
  ops: int = 0  # estimated operations and bytes of memory per run (GlobalCounters), set when the kernel is lowered
  mem: int = 0


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

  def __init__(self, items: list[tuple[CompiledProgram, list[int], int]], nslots: int, device: str = ""):
    self.items, self.nslots, self.device = items, nslots, device

  def __call__(self, addresses: list[int]) -> None:
    # each program's call records its own profile span, with the best clock its device has
    for prg, slots, threads in self.items: prg.call([addresses[s] for s in slots], threads)


class Compiled:
  """A device that compiles and runs kernels: an allocator, a renderer, a compiler and a runtime."""
  def __init__(self, name: str, allocator: Allocator, renderer: Any,
               build_fn: Callable[[list[tuple[str, str]]], list[CompiledProgram]] | None):
    # build_fn compiles a list of new (name, source) kernels at once: a compiler may take several in one run
    self.name, self.allocator, self.renderer, self._build = name, allocator, renderer, build_fn
    self._cache: dict[tuple[str, str], CompiledProgram] = {}
    self.max_threads = 1  # how many cores a kernel's outer loop is split across
    # the runner class that replays many kernels as one submitted batch (tinygrad's graph), if the device has one
    self.graph: type[Runner] | None = None

  def compile(self, name: str, src: str) -> CompiledProgram: return self.compile_many([(name, src)])[0]

  def compile_many(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    """The programs of (name, source) pairs, each compiled once per device."""
    if self._build is None: raise RuntimeError(f"device {self.name} does not run kernels")
    if todo := [k for k in dict.fromkeys(kernels) if k not in self._cache]: self._cache.update(zip(todo, self._build(todo)))
    return [self._cache[k] for k in kernels]

  def runner(self, items: list[tuple[CompiledProgram, list[int], int]], nslots: int) -> Runner: return Runner(items, nslots, self.name)

  def synchronize(self) -> None: pass


class _DeviceRegistry:
  """Device["CPU"] gives the device object (made on first use); Device.DEFAULT is DEV= or CPU."""
  _known = ("CPU", "NULL")

  @functools.cached_property
  def DEFAULT(self) -> str:  # noqa: N802 (tinygrad's name)
    dev = os.getenv("DEV", "") or next((d for d in self._known if getenv(d, 0) == 1), "CPU")
    return self.canonicalize(dev)

  def canonicalize(self, device: str | None) -> str:
    if device is None: return self.DEFAULT
    base, _, idx = device.upper().partition(":")
    if base not in self._known: raise ValueError(f"unknown device {device!r}; known: {', '.join(self._known)}")
    return base if not idx or idx == "0" else f"{base}:{idx}"

  @functools.cache  # noqa: B019 (one device object per name for the process)
  def __getitem__(self, device: str) -> Compiled:
    name = self.canonicalize(device)
    mod = importlib.import_module(f"tinyhybrid.runtime.ops_{name.split(':')[0].lower()}")
    return mod.make_device(name)


Device = _DeviceRegistry()


def to_ctypes_words(args: list[int]) -> ctypes.Array:
  """Kernel arguments as the uint64 array every kernel takes."""
  return (ctypes.c_uint64 * max(len(args), 1))(*[a & 0xFFFFFFFFFFFFFFFF for a in args])


def is_dtype_supported(dtype: DType, device: str | None = None) -> bool:
  """Whether kernels on device (the default one if None) can hold and compute in dtype."""
  return dtype in Device[Device.canonicalize(device)].renderer.supported_dtypes()


def default_float_np() -> np.dtype: return np_storage(dtypes.default_float)
