"""The CUDA device (DEV=CUDA; CUDA:0, CUDA:1, ...; DEV=CUDA:PTX renders PTX instead of CUDA C++): the driver API of
libcuda.so.1 through cffi in ABI mode, loaded on first use, so the package imports on a machine without a driver.
The device's compute capability decides the architecture (sm_XY). CUDA C++ is compiled by NVRTC to a cubin; PTX is
handed to the driver, which assembles it at load. Buffers are device allocations (a kernel argument is the
address), host copies are synchronous (from 1 MiB on through a pinned staging buffer), kernels are launched on the
default stream in order (a launch returns at once; a read, synchronize() or a timed run waits), timed runs are
measured with events, and a TinyJit replay is one CUDA graph launch (runtime/graph_cuda.py). Without a driver or a
GPU, asking for the device raises a RuntimeError that says so; compile-only mode (DEV=NULL:CUDA:sm_90,
runtime/ops_null.py) needs neither."""
from __future__ import annotations

import time
from typing import Any

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, ProfileEvent, Runner, Target, profile_events
from tinyhybrid.helpers import JIT, PROFILE, once
from tinyhybrid.runtime.cuda_compiler import CUDACompiler, PTXCompiler, build_kernels

_CDEF = """
typedef int CUresult; typedef int CUdevice; typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext; typedef struct CUmod_st* CUmodule; typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream; typedef struct CUevent_st* CUevent;
CUresult cuInit(unsigned int);
CUresult cuGetErrorString(CUresult, const char**);
CUresult cuDeviceGetCount(int*);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDeviceGetName(char*, int, CUdevice);
CUresult cuDeviceGetAttribute(int*, int, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize(void);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemFree_v2(CUdeviceptr);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuModuleLoadData(CUmodule*, const void*);
CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*);
CUresult cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, CUstream, void**, void**);
CUresult cuEventCreate(CUevent*, unsigned int);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventSynchronize(CUevent);
CUresult cuEventElapsedTime(float*, CUevent, CUevent);
CUresult cuEventDestroy_v2(CUevent);
CUresult cuMemHostAlloc(void**, size_t, unsigned int);
CUresult cuMemFreeHost(void*);
typedef struct CUgraph_st* CUgraph; typedef struct CUgraphNode_st* CUgraphNode; typedef struct CUgraphExec_st* CUgraphExec;
typedef struct {
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void** kernelParams;
  void** extra;
} CUDA_KERNEL_NODE_PARAMS;
CUresult cuGraphCreate(CUgraph*, unsigned int);
CUresult cuGraphAddKernelNode(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, const CUDA_KERNEL_NODE_PARAMS*);
CUresult cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
CUresult cuGraphLaunch(CUgraphExec, CUstream);
CUresult cuGraphExecDestroy(CUgraphExec);
CUresult cuGraphDestroy(CUgraph);
"""
_NO_DEVICE, _OUT_OF_MEMORY, _NO_DRIVER = 100, 2, 35
_CC_MAJOR, _CC_MINOR = 75, 76  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
_COMPILE_ONLY = "compile-only mode needs neither a driver nor a GPU: DEV=NULL:CUDA:sm_90 or DEV=NULL:PTX:sm_90"


class CUDAError(RuntimeError):
  """A CUDA driver call failed: names the call and the error."""


@once
def ffi_() -> Any:
  """The driver API's declarations (no library: tests drive the runtime through a fake driver on them)."""
  import cffi
  ffi = cffi.FFI()
  ffi.cdef(_CDEF)
  return ffi


@once
def _api() -> tuple[Any, Any]:
  ffi = ffi_()
  try: lib = ffi.dlopen("libcuda.so.1")
  except OSError as e:
    raise RuntimeError(f"DEV=CUDA: the NVIDIA driver library libcuda.so.1 is not installed ({e}); install the NVIDIA driver; "
                       f"{_COMPILE_ONLY}") from None
  err = lib.cuInit(0)
  if err in (_NO_DEVICE, _NO_DRIVER): raise RuntimeError(f"DEV=CUDA: the NVIDIA driver finds no GPU here ({_error(ffi, lib, err)}); {_COMPILE_ONLY}")
  if err != 0: raise CUDAError(f"CUDA: cuInit failed: {_error(ffi, lib, err)}")
  return ffi, lib


def _error(ffi: Any, lib: Any, err: int) -> str:
  msg = ffi.new("char**")
  return f"{ffi.string(msg[0]).decode() if lib.cuGetErrorString(err, msg) == 0 and msg[0] != ffi.NULL else 'error'} ({err})"


def check(err: int, what: str) -> None:
  if err != 0:
    ffi, lib = _api()
    raise CUDAError(f"CUDA: {what} failed: {_error(ffi, lib, err)}")


class DeviceMemory:
  """A device allocation, freed with the object."""
  def __init__(self, ptr: int, nbytes: int): self.ptr, self.nbytes = ptr, nbytes
  def __del__(self) -> None: _api()[1].cuMemFree_v2(self.ptr)


class PinnedMemory:
  """A page-locked host allocation (cuMemHostAlloc), freed with the object."""
  def __init__(self, ptr: Any, nbytes: int): self.ptr, self.nbytes = ptr, nbytes
  def __del__(self) -> None: _api()[1].cuMemFreeHost(self.ptr)


STAGING_BYTES = 64 << 20  # the pinned staging buffer; a larger copy goes through it in pieces of this size
PINNED_FROM = 1 << 20     # copies from this size on are staged


class CUDAAllocator(Allocator):
  def __init__(self, dev: CUDADevice):
    super().__init__()
    self.dev = dev
    self._staging: PinnedMemory | None = None

  def free(self, mem: Any, cache: bool = True) -> None: pass  # released when the last reference to its handle goes

  def alloc(self, nbytes: int) -> Any:
    ffi, lib = _api()
    ptr = ffi.new("CUdeviceptr*")
    if (err := lib.cuMemAlloc_v2(ptr, max(nbytes, 1))) == _OUT_OF_MEMORY:
      raise MemoryError(f"{self.dev.name}: out of memory allocating {nbytes} bytes on {self.dev.gpu_name}")
    check(err, f"cuMemAlloc of {nbytes} bytes on {self.dev.name}")
    return DeviceMemory(ptr[0], nbytes)

  def address(self, mem: Any) -> int: return mem.ptr
  def wrap(self, ptr: int, nbytes: int) -> Any: raise NotImplementedError(f"{self.dev.name}: host memory can't be a device buffer")

  def staging(self) -> Any:
    """The pinned (page-locked) host buffer copies go through: the DMA engine reads and writes it directly, where
    a copy from pageable memory is staged by the driver in small pieces. Allocated on the first copy, kept."""
    if self._staging is None:
      ffi, lib = _api()
      p = ffi.new("void**")
      check(lib.cuMemHostAlloc(p, STAGING_BYTES, 0), f"cuMemHostAlloc of {STAGING_BYTES} bytes for {self.dev.name}")
      self._staging = PinnedMemory(p[0], STAGING_BYTES)
    return self._staging

  def copyin(self, dest: Any, src: memoryview, offset: int = 0) -> None:
    ffi, lib = _api()
    src = src.cast("B")
    if len(src) < PINNED_FROM:  # small: one direct copy costs less than the extra host copy
      if len(src): check(lib.cuMemcpyHtoD_v2(dest.ptr + offset, ffi.from_buffer(src), len(src)), f"copy to {self.dev.name}")
      return
    st = self.staging()
    view = ffi.buffer(st.ptr, st.nbytes)
    for off in range(0, len(src), st.nbytes):
      n = min(st.nbytes, len(src) - off)
      view[0:n] = src[off:off + n]
      check(lib.cuMemcpyHtoD_v2(dest.ptr + offset + off, st.ptr, n), f"copy to {self.dev.name}")

  def copyout(self, dest: memoryview, src: Any) -> None:
    ffi, lib = _api()
    dest = dest.cast("B")
    if len(dest) < PINNED_FROM:
      if len(dest): check(lib.cuMemcpyDtoH_v2(ffi.from_buffer(dest), src.ptr, len(dest)), f"copy from {self.dev.name}")
      return
    st = self.staging()
    view = ffi.buffer(st.ptr, st.nbytes)
    for off in range(0, len(dest), st.nbytes):
      n = min(st.nbytes, len(dest) - off)
      check(lib.cuMemcpyDtoH_v2(st.ptr, src.ptr + off, n), f"copy from {self.dev.name}")
      dest[off:off + n] = view[0:n]


class CUDAProgram:
  """One kernel of a loaded module."""
  def __init__(self, dev: CUDADevice, module: Any, name: str):
    ffi, lib = _api()
    self.dev, self.name, self.module = dev, name, module
    fn = ffi.new("CUfunction*")
    check(lib.cuModuleGetFunction(fn, module, name.encode()), f"cuModuleGetFunction {name}")
    self.fn = fn[0]

  def call(self, args: list[int], launch: Any) -> None:
    if not PROFILE: return self.launch(args, launch)
    # PROFILE=1: the kernel's span by the device's events, ending at the host's clock once it is done
    start = time.monotonic_ns()
    took = int(self.timed(args, launch) * 1e9)
    end = time.monotonic_ns()
    profile_events.append(ProfileEvent(self.name, self.dev.name, max(start, end - took), end))

  def launch(self, args: list[int], launch: Any) -> None:
    ffi, lib = _api()
    (gx, gy, gz), (lx, ly, lz) = launch
    words = ffi.new("unsigned long long[]", max(len(args), 1))
    for i, a in enumerate(args): words[i] = a & 0xFFFFFFFFFFFFFFFF
    params = ffi.new("void*[]", [words + i for i in range(len(args))] or [ffi.NULL])
    check(lib.cuLaunchKernel(self.fn, gx, gy, gz, lx, ly, lz, 0, ffi.NULL, params, ffi.NULL), f"launch of kernel {self.name} with {launch}")

  def timed(self, args: list[int], launch: Any) -> float:
    ffi, lib = _api()
    ev = [ffi.new("CUevent*") for _ in range(2)]
    for e in ev: check(lib.cuEventCreate(e, 0), "cuEventCreate")
    try:
      check(lib.cuEventRecord(ev[0][0], ffi.NULL), "cuEventRecord")
      self.launch(args, launch)
      check(lib.cuEventRecord(ev[1][0], ffi.NULL), "cuEventRecord")
      check(lib.cuEventSynchronize(ev[1][0]), f"kernel {self.name}")
      ms = ffi.new("float*")
      check(lib.cuEventElapsedTime(ms, ev[0][0], ev[1][0]), "cuEventElapsedTime")
      return max(ms[0], 1e-6) * 1e-3
    finally:
      for e in ev: lib.cuEventDestroy_v2(e[0])


class CUDADevice(Compiled):
  def __init__(self, name: str):
    ffi, lib = _api()
    t = Target.parse(name)
    if t.renderer not in (None, "CUDA", "PTX"): raise ValueError(f"{name}: the CUDA device renders CUDA C++ or PTX (CUDA, CUDA:PTX)")
    n = ffi.new("int*")
    check(lib.cuDeviceGetCount(n), "cuDeviceGetCount")
    if t.index >= n[0]: raise RuntimeError(f"{name}: there are {n[0]} CUDA device(s), CUDA:0 to CUDA:{n[0] - 1}")
    dev = ffi.new("CUdevice*")
    check(lib.cuDeviceGet(dev, t.index), "cuDeviceGet")
    cc = [ffi.new("int*") for _ in range(2)]
    for attr, out in zip((_CC_MAJOR, _CC_MINOR), cc): check(lib.cuDeviceGetAttribute(out, attr, dev[0]), "cuDeviceGetAttribute")
    gname = ffi.new("char[256]")
    check(lib.cuDeviceGetName(gname, 256, dev[0]), "cuDeviceGetName")
    self.gpu_name = ffi.string(gname).decode()
    self.arch = t.arch or f"sm_{cc[0][0]}{cc[1][0]}"
    ctx = ffi.new("CUcontext*")
    check(lib.cuDevicePrimaryCtxRetain(ctx, dev[0]), "cuDevicePrimaryCtxRetain")
    check(lib.cuCtxSetCurrent(ctx[0]), "cuCtxSetCurrent")
    self.ptx = t.renderer == "PTX"
    if self.ptx:
      from tinyhybrid.renderer.ptx import PTXRenderer
      renderer: Any = PTXRenderer(self.arch)
      self.compiler: Any = PTXCompiler(self.arch)
    else:
      from tinyhybrid.renderer.cuda import CUDARenderer
      renderer, self.compiler = CUDARenderer(self.arch), CUDACompiler(self.arch)
    super().__init__(name, CUDAAllocator(self), renderer, self._build_kernels)
    self._modules: dict[bytes, Any] = {}

  def _module(self, image: bytes) -> Any:
    if (mod := self._modules.get(image)) is None:
      ffi, lib = _api()
      out = ffi.new("CUmodule*")
      check(lib.cuModuleLoadData(out, ffi.from_buffer(image)), f"cuModuleLoadData on {self.name} ({self.arch})")
      mod = self._modules[image] = out[0]
    return mod

  def _build_kernels(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    # PTX goes to the driver, which assembles it for the GPU (no ptxas needed on the machine)
    if self.ptx: images = [src.encode() + b"\0" for _, src in kernels]
    else: images = build_kernels(self.compiler, kernels)
    out = []
    for (name, src), image in zip(kernels, images):
      prg = CUDAProgram(self, self._module(image), name)
      out.append(CompiledProgram(name, src, 0, prg.call, keepalive=prg, timed=prg.timed))
    return out

  def runner(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner:
    """A TinyJit replay: one CUDA graph launch (runtime/graph_cuda.py); JIT=2 launches kernel by kernel."""
    if int(JIT.value) >= 2: return Runner(items, nslots, self.name)
    from tinyhybrid.runtime.graph_cuda import CUDAGraphRunner
    return CUDAGraphRunner(items, nslots, self)

  def synchronize(self) -> None: check(_api()[1].cuCtxSynchronize(), f"synchronize {self.name}")


def make_device(name: str) -> Compiled: return CUDADevice(name)

