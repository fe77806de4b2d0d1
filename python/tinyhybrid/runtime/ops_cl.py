"""The OpenCL device (DEV=CL; CL:0, CL:1, ... in the order the ICD loader lists its platforms' devices): the system's
OpenCL ICD loader (libOpenCL.so.1) through cffi in ABI mode, so nothing is compiled at install time and the package
imports on a machine without OpenCL. Buffers are cl_mem objects (a kernel argument is the handle), kernels are
OpenCL C (renderer/opencl.py) launched on one in-order queue per device: a launch returns at once, and a read, a
synchronize() or a timed run waits. Programs are cached on disk by source and device (their binaries, from
clGetProgramInfo); PoCL's own cache of what it compiles at launch is kept next to ours."""
from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from typing import Any

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, CompileError, ProfileEvent, Runner, profile_events
from tinyhybrid.helpers import PROFILE, once
from tinyhybrid.runtime import diskcache
from tinyhybrid.renderer.opencl import CLProperties, OpenCLRenderer
from tinyhybrid.digest import sha256

_CDEF = """
typedef int32_t cl_int; typedef uint32_t cl_uint; typedef uint64_t cl_ulong; typedef uint64_t cl_bitfield;
typedef struct _cl_platform_id* cl_platform_id; typedef struct _cl_device_id* cl_device_id;
typedef struct _cl_context* cl_context; typedef struct _cl_command_queue* cl_command_queue; typedef struct _cl_mem* cl_mem;
typedef struct _cl_program* cl_program; typedef struct _cl_kernel* cl_kernel; typedef struct _cl_event* cl_event;
cl_int clGetPlatformIDs(cl_uint, cl_platform_id*, cl_uint*);
cl_int clGetPlatformInfo(cl_platform_id, cl_uint, size_t, void*, size_t*);
cl_int clGetDeviceIDs(cl_platform_id, cl_bitfield, cl_uint, cl_device_id*, cl_uint*);
cl_int clGetDeviceInfo(cl_device_id, cl_uint, size_t, void*, size_t*);
cl_context clCreateContext(const intptr_t*, cl_uint, const cl_device_id*, void*, void*, cl_int*);
cl_command_queue clCreateCommandQueue(cl_context, cl_device_id, cl_bitfield, cl_int*);
cl_mem clCreateBuffer(cl_context, cl_bitfield, size_t, void*, cl_int*);
cl_int clReleaseMemObject(cl_mem);
cl_int clEnqueueWriteBuffer(cl_command_queue, cl_mem, cl_uint, size_t, size_t, const void*, cl_uint, const cl_event*, cl_event*);
cl_int clEnqueueReadBuffer(cl_command_queue, cl_mem, cl_uint, size_t, size_t, void*, cl_uint, const cl_event*, cl_event*);
cl_program clCreateProgramWithSource(cl_context, cl_uint, const char**, const size_t*, cl_int*);
cl_program clCreateProgramWithBinary(cl_context, cl_uint, const cl_device_id*, const size_t*, const unsigned char**, cl_int*, cl_int*);
cl_int clBuildProgram(cl_program, cl_uint, const cl_device_id*, const char*, void*, void*);
cl_int clGetProgramBuildInfo(cl_program, cl_device_id, cl_uint, size_t, void*, size_t*);
cl_int clGetProgramInfo(cl_program, cl_uint, size_t, void*, size_t*);
cl_int clReleaseProgram(cl_program);
cl_kernel clCreateKernel(cl_program, const char*, cl_int*);
cl_int clReleaseKernel(cl_kernel);
cl_int clGetKernelInfo(cl_kernel, cl_uint, size_t, void*, size_t*);
cl_int clSetKernelArg(cl_kernel, cl_uint, size_t, const void*);
cl_int clEnqueueNDRangeKernel(cl_command_queue, cl_kernel, cl_uint, const size_t*, const size_t*, const size_t*, cl_uint, const cl_event*, cl_event*);
cl_int clFlush(cl_command_queue);
cl_int clFinish(cl_command_queue);
cl_int clWaitForEvents(cl_uint, const cl_event*);
cl_int clGetEventProfilingInfo(cl_event, cl_uint, size_t, void*, size_t*);
cl_int clReleaseEvent(cl_event);
"""

# the info queries and flags used here (cl.h)
_PLATFORM_NAME, _PLATFORM_VERSION = 0x0902, 0x0901
_DEVICE_TYPE, _MAX_COMPUTE_UNITS, _MAX_WORK_ITEM_DIMENSIONS, _MAX_WORK_GROUP_SIZE, _MAX_WORK_ITEM_SIZES = 0x1000, 0x1002, 0x1003, 0x1004, 0x1005
_MAX_MEM_ALLOC_SIZE, _LOCAL_MEM_SIZE, _DEVICE_NAME, _DRIVER_VERSION, _DEVICE_VERSION, _DEVICE_EXTENSIONS = 0x1010, 0x1023, 0x102B, 0x102D, 0x102F, 0x1030
_DEVICE_TYPE_ALL, _DEVICE_TYPE_CPU = 0xFFFFFFFF, 2
_MEM_READ_WRITE, _MEM_USE_HOST_PTR = 1, 8
_QUEUE_PROFILING_ENABLE = 2
_PROGRAM_BUILD_LOG, _PROGRAM_BINARY_SIZES, _PROGRAM_BINARIES = 0x1183, 0x1165, 0x1166
_PROFILING_QUEUED, _PROFILING_START, _PROFILING_END = 0x1280, 0x1282, 0x1283
_KERNEL_NUM_ARGS = 0x1191

_ERRORS = {-1: "CL_DEVICE_NOT_FOUND", -2: "CL_DEVICE_NOT_AVAILABLE", -3: "CL_COMPILER_NOT_AVAILABLE", -4: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
           -5: "CL_OUT_OF_RESOURCES", -6: "CL_OUT_OF_HOST_MEMORY", -11: "CL_BUILD_PROGRAM_FAILURE", -30: "CL_INVALID_VALUE",
           -33: "CL_INVALID_DEVICE", -34: "CL_INVALID_CONTEXT", -36: "CL_INVALID_COMMAND_QUEUE", -38: "CL_INVALID_MEM_OBJECT",
           -42: "CL_INVALID_BINARY", -44: "CL_INVALID_PROGRAM", -45: "CL_INVALID_PROGRAM_EXECUTABLE", -46: "CL_INVALID_KERNEL_NAME",
           -48: "CL_INVALID_KERNEL", -49: "CL_INVALID_ARG_INDEX", -50: "CL_INVALID_ARG_VALUE", -51: "CL_INVALID_ARG_SIZE",
           -52: "CL_INVALID_KERNEL_ARGS", -53: "CL_INVALID_WORK_DIMENSION", -54: "CL_INVALID_WORK_GROUP_SIZE",
           -55: "CL_INVALID_WORK_ITEM_SIZE", -61: "CL_INVALID_BUFFER_SIZE", -1001: "CL_PLATFORM_NOT_FOUND_KHR"}

_ICD_HINT = ("install an OpenCL driver (ICD) and the loader, e.g. on Debian `apt install ocl-icd-libopencl1 pocl-opencl-icd` "
             "(PoCL runs OpenCL on the CPU)")

# the build options of every program: part of the cache key
_OPTIONS = b""
# how a program is cached: part of every key, so a change here never loads an old binary
_FORMAT = "cl-1"


class CLError(RuntimeError):
  """An OpenCL call failed: names the call and the error."""


def check(err: int, what: str) -> None:
  if err != 0: raise CLError(f"OpenCL: {what} failed with {_ERRORS.get(err, 'error')} ({err})")


@once
def _api() -> tuple[Any, Any]:
  """(ffi, lib) of the ICD loader, loaded on first use."""
  # PoCL compiles a kernel's work-group function at its first launch and keeps it in its own cache: put that cache
  # with ours, so one TINYHYBRID_CACHE holds everything a second run needs (the loader reads this when it loads PoCL)
  os.environ.setdefault("POCL_CACHE_DIR", str(diskcache.cache_root() / "pocl"))
  import cffi
  ffi = cffi.FFI()
  ffi.cdef(_CDEF)
  errors = []
  for name in ("libOpenCL.so.1", "libOpenCL.so", "OpenCL"):
    try: return ffi, ffi.dlopen(name)
    except OSError as e: errors.append(str(e))
  raise RuntimeError(f"DEV=CL: the OpenCL ICD loader libOpenCL.so.1 is not installed ({errors[0]}); {_ICD_HINT}")


def _info_str(fn: Any, obj: Any, param: int) -> str:
  ffi, _ = _api()
  size = ffi.new("size_t*")
  check(fn(obj, param, 0, ffi.NULL, size), "info query")
  buf = ffi.new("char[]", size[0])
  check(fn(obj, param, size[0], buf, ffi.NULL), "info query")
  return ffi.string(buf).decode(errors="replace")


def _info(fn: Any, obj: Any, param: int, ctype: str) -> Any:
  ffi, _ = _api()
  out = ffi.new(f"{ctype}*")
  check(fn(obj, param, ffi.sizeof(ctype), out, ffi.NULL), "info query")
  return out[0]


@once
def device_ids() -> list[tuple[Any, Any]]:
  """(platform, device) of every OpenCL device, platforms in the loader's order."""
  ffi, lib = _api()
  n = ffi.new("cl_uint*")
  err = lib.clGetPlatformIDs(0, ffi.NULL, n)
  if err == -1001 or (err == 0 and n[0] == 0):
    vendors = os.getenv("OCL_ICD_VENDORS", "/etc/OpenCL/vendors")
    raise RuntimeError(f"DEV=CL: no OpenCL platform: the ICD loader found no driver (no .icd file in {vendors} names a library that loads); "
                       f"{_ICD_HINT}")
  check(err, "clGetPlatformIDs")
  plats = ffi.new("cl_platform_id[]", n[0])
  check(lib.clGetPlatformIDs(n[0], plats, ffi.NULL), "clGetPlatformIDs")
  out = []
  for p in plats:
    nd = ffi.new("cl_uint*")
    if lib.clGetDeviceIDs(p, _DEVICE_TYPE_ALL, 0, ffi.NULL, nd) != 0 or nd[0] == 0: continue  # a platform without devices
    devs = ffi.new("cl_device_id[]", nd[0])
    check(lib.clGetDeviceIDs(p, _DEVICE_TYPE_ALL, nd[0], devs, ffi.NULL), "clGetDeviceIDs")
    out += [(p, d) for d in devs]
  if not out: raise RuntimeError(f"DEV=CL: the OpenCL platforms have no devices; {_ICD_HINT}")
  return out


def why_unavailable() -> str | None:
  """Why no OpenCL device can be opened here (the missing loader or driver), None when one can."""
  try: device_ids()
  except RuntimeError as e: return str(e)
  return None


def available() -> bool: return why_unavailable() is None


def _properties(plat: Any, dev: Any) -> CLProperties:
  ffi, lib = _api()
  ndim = _info(lib.clGetDeviceInfo, dev, _MAX_WORK_ITEM_DIMENSIONS, "cl_uint")
  sizes = ffi.new("size_t[]", ndim)
  check(lib.clGetDeviceInfo(dev, _MAX_WORK_ITEM_SIZES, ffi.sizeof("size_t") * ndim, sizes, ffi.NULL), "clGetDeviceInfo")
  name = _info_str(lib.clGetDeviceInfo, dev, _DEVICE_NAME).strip()
  ident = "\0".join([_info_str(lib.clGetPlatformInfo, plat, _PLATFORM_NAME), _info_str(lib.clGetPlatformInfo, plat, _PLATFORM_VERSION), name,
                     _info_str(lib.clGetDeviceInfo, dev, _DEVICE_VERSION), _info_str(lib.clGetDeviceInfo, dev, _DRIVER_VERSION)])
  return CLProperties(name, ident, bool(_info(lib.clGetDeviceInfo, dev, _DEVICE_TYPE, "cl_bitfield") & _DEVICE_TYPE_CPU),
                      _info(lib.clGetDeviceInfo, dev, _MAX_COMPUTE_UNITS, "cl_uint"), _info(lib.clGetDeviceInfo, dev, _MAX_WORK_GROUP_SIZE, "size_t"),
                      tuple(sizes), _info(lib.clGetDeviceInfo, dev, _LOCAL_MEM_SIZE, "cl_ulong"),
                      _info(lib.clGetDeviceInfo, dev, _MAX_MEM_ALLOC_SIZE, "cl_ulong"),
                      frozenset(_info_str(lib.clGetDeviceInfo, dev, _DEVICE_EXTENSIONS).split()))


class CLAllocator(Allocator):
  """cl_mem buffers in the device's context; host copies are blocking, so the host memory is free when they return."""
  def __init__(self, dev: CLDevice):
    super().__init__()
    self.dev = dev

  def free(self, mem: Any, cache: bool = True) -> None: pass  # released when the last reference to its handle goes

  def alloc(self, nbytes: int) -> Any:
    ffi, lib = _api()
    if nbytes > self.dev.props.max_alloc:
      raise MemoryError(f"{self.dev.name}: a buffer of {nbytes} bytes is past the device's largest allocation, {self.dev.props.max_alloc} bytes")
    err = ffi.new("cl_int*")
    mem = lib.clCreateBuffer(self.dev.ctx, _MEM_READ_WRITE, max(nbytes, 1), ffi.NULL, err)
    check(err[0], f"clCreateBuffer of {nbytes} bytes on {self.dev.name}")
    # released once Python drops it; OpenCL keeps it alive until the queued kernels that use it have run
    return ffi.gc(mem, lib.clReleaseMemObject)

  def address(self, mem: Any) -> int: return int(_api()[0].cast("uintptr_t", mem))

  def wrap(self, ptr: int, nbytes: int) -> Any:
    ffi, lib = _api()
    err = ffi.new("cl_int*")
    mem = lib.clCreateBuffer(self.dev.ctx, _MEM_READ_WRITE | _MEM_USE_HOST_PTR, max(nbytes, 1), ffi.cast("void*", ptr), err)
    check(err[0], f"clCreateBuffer over host memory on {self.dev.name}")
    return ffi.gc(mem, lib.clReleaseMemObject)

  def copyin(self, dest: Any, src: memoryview, offset: int = 0) -> None:
    ffi, lib = _api()
    if not len(src): return
    check(lib.clEnqueueWriteBuffer(self.dev.queue, dest, 1, offset, len(src), ffi.from_buffer(src), 0, ffi.NULL, ffi.NULL), "copy to the device")

  def copyout(self, dest: memoryview, src: Any) -> None:
    ffi, lib = _api()
    if not len(dest): return
    check(lib.clEnqueueReadBuffer(self.dev.queue, src, 1, 0, len(dest), ffi.from_buffer(dest), 0, ffi.NULL, ffi.NULL), "copy from the device")


class CLKernel:
  """One cl_kernel of a program with its argument words (buffers' handles and variables' values, 8 bytes each): a
  launch sets only the arguments that changed since the last."""
  def __init__(self, prog: CLProgram):
    ffi, lib = _api()
    self.prog, self.lib = prog, lib
    err = ffi.new("cl_int*")
    self.kernel = ffi.gc(lib.clCreateKernel(prog.program, prog.name.encode(), err), lib.clReleaseKernel)
    check(err[0], f"clCreateKernel {prog.name}")
    nargs = _info(lib.clGetKernelInfo, self.kernel, _KERNEL_NUM_ARGS, "cl_uint")
    self.argv = ffi.new("cl_ulong[]", max(nargs, 1))
    self.set = [False] * nargs

  def enqueue(self, args: list[int], launch: Any, event: Any) -> None:
    lib, argv, kernel = self.lib, self.argv, self.kernel
    if len(args) != len(self.set): raise ValueError(f"kernel {self.prog.name} takes {len(self.set)} arguments, got {len(args)}")
    for i, a in enumerate(args):
      if not self.set[i] or argv[i] != a:
        argv[i] = a
        check(lib.clSetKernelArg(kernel, i, 8, argv + i), f"clSetKernelArg {i} of {self.prog.name}")
        self.set[i] = True
    gsz, lsz = self.prog.dev.sizes(launch)
    check(lib.clEnqueueNDRangeKernel(self.prog.dev.queue, kernel, 3, _api()[0].NULL, gsz, lsz, 0, _api()[0].NULL, event),
          f"launch of {self.prog.name} with {launch}")


class CLProgram:
  """A built program holding one kernel."""
  def __init__(self, dev: CLDevice, name: str, program: Any):
    self.dev, self.name, self.program = dev, name, program
    self.direct: CLKernel | None = None  # the kernel object of calls outside a runner

  def call(self, args: list[int], launch: Any) -> None:
    if self.direct is None: self.direct = CLKernel(self)
    if PROFILE: self.dev.profiled(self.direct, args, launch)  # a call records its own span (device.CompiledProgram)
    else: self.direct.enqueue(args, launch, _api()[0].NULL)

  def timed(self, args: list[int], launch: Any) -> float:
    ffi, lib = _api()
    if self.direct is None: self.direct = CLKernel(self)
    ev = ffi.new("cl_event*")
    self.direct.enqueue(args, launch, ev)
    try: return self.dev.event_time(ev[0])[2]
    finally: lib.clReleaseEvent(ev[0])


class CLRunner(Runner):
  """A fixed list of kernels, each with a kernel object of its own whose arguments stay set between runs: a run
  patches the arguments that changed (the inputs' buffers, variables) and enqueues the whole batch, without waiting.
  The queue is in order, so the batch runs as one; anything that reads a result waits for it."""
  def __init__(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int, dev: CLDevice):
    super().__init__(items, nslots, dev.name)
    self.dev = dev
    self.kernels = [(CLKernel(prg.keepalive), slots, launch) for prg, slots, launch in items]

  def __call__(self, addresses: list[int]) -> None:
    ffi, lib = _api()
    if not PROFILE:
      for k, slots, launch in self.kernels: k.enqueue([addresses[s] for s in slots], launch, ffi.NULL)
      lib.clFlush(self.dev.queue)
      return
    for k, slots, launch in self.kernels: self.dev.profiled(k, [addresses[s] for s in slots], launch)


class CLDevice(Compiled):
  # source builds by any CL device in this process (tests read it: a run whose programs are all cached builds none)
  source_builds = 0

  def __init__(self, name: str):
    ffi, lib = _api()
    ids = device_ids()
    idx = int(name.partition(":")[2] or 0)
    if idx >= len(ids): raise RuntimeError(f"{name}: there are {len(ids)} OpenCL device(s), CL:0 to CL:{len(ids) - 1}")
    plat, self.device_id = ids[idx]
    self.props = _properties(plat, self.device_id)
    err = ffi.new("cl_int*")
    devs = ffi.new("cl_device_id[1]", [self.device_id])
    self.ctx = lib.clCreateContext(ffi.NULL, 1, devs, ffi.NULL, ffi.NULL, err)
    check(err[0], f"clCreateContext on {self.props.name}")
    self.queue = lib.clCreateCommandQueue(self.ctx, self.device_id, _QUEUE_PROFILING_ENABLE, err)
    check(err[0], f"clCreateCommandQueue on {self.props.name}")
    super().__init__(name, CLAllocator(self), OpenCLRenderer(self.props), self._build_kernels)
    self._sizes: dict[Any, tuple[Any, Any]] = {}
    self._programs: dict[str, Any] = {}  # built programs by their binary's path in the cache

  def sizes(self, launch: Any) -> tuple[Any, Any]:
    """The global and local work sizes (size_t[3] each) of a launch ((groups per dim), (local size per dim))."""
    if (hit := self._sizes.get(launch)) is None:
      ffi = _api()[0]
      groups, local = launch
      hit = self._sizes[launch] = (ffi.new("size_t[3]", [g * l for g, l in zip(groups, local)]), ffi.new("size_t[3]", list(local)))
    return hit

  @functools.cached_property
  def clock_offset(self) -> int:
    """monotonic_ns() minus the device's profiling clock, so that PROFILE=1 events line up with the host's: the time
    before enqueueing a small copy minus the device's stamp of its enqueueing, the largest of a few tries (each is
    below the true offset by the call's latency; a thread put to sleep in between only lowers that one)."""
    ffi, lib = _api()
    mem, word = self.allocator.alloc(4), ffi.new("cl_uint*")
    queued, best = ffi.new("cl_ulong*"), None
    for _ in range(5):
      ev = ffi.new("cl_event*")
      t0 = time.monotonic_ns()
      check(lib.clEnqueueWriteBuffer(self.queue, mem, 1, 0, 4, word, 0, ffi.NULL, ev), "clEnqueueWriteBuffer")
      check(lib.clGetEventProfilingInfo(ev[0], _PROFILING_QUEUED, 8, queued, ffi.NULL), "clGetEventProfilingInfo")
      lib.clReleaseEvent(ev[0])
      best = max(best if best is not None else t0 - queued[0], t0 - queued[0])
    return best  # type: ignore[return-value]  # set by the loop

  def profiled(self, k: CLKernel, args: list[int], launch: Any) -> None:
    """Runs k and waits for it, its span (the device's own timestamps) recorded in profile_events."""
    ffi, lib = _api()
    ev = ffi.new("cl_event*")
    k.enqueue(args, launch, ev)
    try: start, end, _ = self.event_time(ev[0])
    finally: lib.clReleaseEvent(ev[0])
    profile_events.append(ProfileEvent(k.prog.name, self.name, start + self.clock_offset, end + self.clock_offset))

  def event_time(self, ev: Any) -> tuple[int, int, float]:
    """Waits for an event: its start and end (the device's clock, in ns) and its duration in seconds."""
    ffi, lib = _api()
    check(lib.clWaitForEvents(1, ffi.new("cl_event[1]", [ev])), "clWaitForEvents")
    start, end = ffi.new("cl_ulong*"), ffi.new("cl_ulong*")
    check(lib.clGetEventProfilingInfo(ev, _PROFILING_START, 8, start, ffi.NULL), "clGetEventProfilingInfo")
    check(lib.clGetEventProfilingInfo(ev, _PROFILING_END, 8, end, ffi.NULL), "clGetEventProfilingInfo")
    return start[0], end[0], max(end[0] - start[0], 1) * 1e-9

  # ** programs **

  def _cache_path(self, name: str, src: str) -> Path:
    key = sha256("\0".join((src, name, self.props.ident, _OPTIONS.decode(), _FORMAT)).encode()).hexdigest()[:32]
    return diskcache.subdir("cl") / f"{name}-{key}.bin"

  def _build_kernels(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    """The programs of new kernels. Kernels found in the cache are loaded from it; the others are built together,
    one program for all (a build's fixed cost, PoCL's front end and kernel library, is most of a small kernel's), and
    each is entered in the cache as a link to that program's binary. A batch takes each kernel name once: the names
    are the program's entry points."""
    paths = [self._cache_path(name, src) for name, src in kernels]
    cached = {i: prog for i, p in enumerate(paths) if (prog := self._load(p)) is not None}
    batches: list[dict[str, int]] = []
    for i, (name, _) in enumerate(kernels):
      if i in cached or any(i in b.values() for b in batches): continue
      if (b := next((b for b in batches if name not in b), None)) is None: batches.append(b := {})
      b[name] = i
    built: dict[int, Any] = {}
    for b in batches:
      prog = self._build_batch([kernels[i] for i in b.values()], [paths[i] for i in b.values()])
      built.update((i, prog) for i in b.values())
    out = []
    for i, (name, src) in enumerate(kernels):
      prog = CLProgram(self, name, built[i] if i in built else cached[i])
      out.append(CompiledProgram(name, src, 0, prog.call, keepalive=prog, timed=prog.timed))
    return out

  def _load(self, path: Path) -> Any:
    """The program of a cached binary (several kernels may share one), or None when there is none, or it is damaged
    or refused by the driver (then it is deleted and built again)."""
    real = os.path.realpath(path)
    if (prog := self._programs.get(real)) is not None: return prog
    if (binary := diskcache.read(path)) is None: return None
    ffi, lib = _api()
    data = ffi.new("unsigned char[]", binary)
    err = ffi.new("cl_int*")
    devs = ffi.new("cl_device_id[1]", [self.device_id])
    prog = lib.clCreateProgramWithBinary(self.ctx, 1, devs, ffi.new("size_t[1]", [len(binary)]), ffi.new("unsigned char*[1]", [data]), ffi.NULL, err)
    if err[0] != 0:
      diskcache.discard(path)
      return None
    prog = ffi.gc(prog, lib.clReleaseProgram)
    if lib.clBuildProgram(prog, 1, devs, _OPTIONS, ffi.NULL, ffi.NULL) != 0:
      diskcache.discard(path)
      return None
    self._programs[real] = prog
    return prog

  def _build_batch(self, kernels: list[tuple[str, str]], paths: list[Path]) -> Any:
    ffi, lib = _api()
    text = "\n".join(src for _, src in kernels)
    try: prog = self._build_source(text, f"{len(kernels)} kernels" if len(kernels) > 1 else f"kernel {kernels[0][0]}", kernels[0][1])
    except CompileError:
      if len(kernels) == 1: raise
      for name, src in kernels: self._build_source(src, f"kernel {name}", src)  # which one: its error and log
      raise
    sizes = ffi.new("size_t[1]")
    check(lib.clGetProgramInfo(prog, _PROGRAM_BINARY_SIZES, ffi.sizeof("size_t"), sizes, ffi.NULL), "clGetProgramInfo")
    data = ffi.new("unsigned char[]", sizes[0])
    check(lib.clGetProgramInfo(prog, _PROGRAM_BINARIES, ffi.sizeof("void*"), ffi.new("unsigned char*[1]", [data]), ffi.NULL), "clGetProgramInfo")
    blob = bytes(ffi.buffer(data, sizes[0]))
    batch = diskcache.subdir("cl") / f"batch-{sha256(blob).hexdigest()[:32]}.bin"
    diskcache.write(batch, blob)
    for path in paths: diskcache.link(path, batch)  # each kernel's entry is a link to the batch
    self._programs[os.path.realpath(batch)] = prog
    return prog

  def _build_source(self, text: str, what: str, src: str) -> Any:
    ffi, lib = _api()
    err = ffi.new("cl_int*")
    code = ffi.new("char[]", text.encode())
    prog = ffi.gc(lib.clCreateProgramWithSource(self.ctx, 1, ffi.new("char*[1]", [code]), ffi.NULL, err), lib.clReleaseProgram)
    check(err[0], f"clCreateProgramWithSource of {what}")
    CLDevice.source_builds += 1
    if (e := lib.clBuildProgram(prog, 1, ffi.new("cl_device_id[1]", [self.device_id]), _OPTIONS, ffi.NULL, ffi.NULL)) != 0:
      log = _info_str(lambda p, param, n, v, sz: lib.clGetProgramBuildInfo(p, self.device_id, param, n, v, sz), prog, _PROGRAM_BUILD_LOG)
      raise CompileError(f"{what} failed to build on {self.name} ({self.props.name}): {_ERRORS.get(e, e)}\n{log.strip()}\n--- source ---\n{src}")
    return prog

  def runner(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner: return CLRunner(items, nslots, self)

  def synchronize(self) -> None: check(_api()[1].clFinish(self.queue), f"clFinish on {self.name}")


def make_device(name: str) -> Compiled: return CLDevice(name)
