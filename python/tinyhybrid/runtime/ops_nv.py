"""The NV device (DEV=NV, tinygrad's name): an NVIDIA GPU driven through HCQ with no vendor runtime. Its queues are
hcq.NVQueue channels: the C++ encoder (drivers/nv) lowers each command buffer once to GPFIFO pushbuffer methods, with
kernels launched through QMDs whose constant buffer 0 holds the arguments, and a TinyJit replay is one submit with its
addresses patched. Kernels are CUDA C++ (renderer/cuda.py) built by NVRTC into a cubin, whose register count, parameter
offset and shared memory the QMD takes (runtime/cubin.py).

With MOCKGPU=1 (tinygrad's flag) the GPU is hcq.MockNVGPU: a command processor of its own decodes the streams on host
memory and hands each launch to this device, which runs it on the host with the grid, block and argument words it
decoded from the QMD and constant buffer (the kernel's lowering rendered for the PYTHON device alongside its CUDA, in
a comment the compiler skips). Memory is then host memory, shared with the mock. The kernel-driver layer that opens a
real GPU's channels (/dev/nvidiactl, /dev/nvidia-uvm) is not written yet: without MOCKGPU=1, DEV=NV says so."""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyhybrid._core import hcq
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.device import Allocator, Compiled, CompiledProgram, CopySpec, Device, Runner, Target
from tinyhybrid.helpers import getenv
from tinyhybrid.renderer.cuda import CUDARenderer
from tinyhybrid.renderer.python import PythonWriter
from tinyhybrid.runtime.cubin import kernel_info
from tinyhybrid.runtime.hcq import ChainRunner, HCQProgram, QueueRunner, accesses, fits, host_wait, register, submit, synchronize
from tinyhybrid.runtime.ops_python import PythonProgram

MOCKGPU = getenv("MOCKGPU", 0)
_PYTHON_MARK = "/* th-python (what MOCKGPU=1 runs):\n"
_WARP_REGISTERS = 65536  # a streaming multiprocessor's register file, which a work-group's threads share


def missing_driver() -> str | None:
  """Why DEV=NV cannot open a GPU here (the first device file missing), None when the files are there."""
  for f in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0"):
    if not os.path.exists(f): return f"{f} is missing: no NVIDIA kernel driver or GPU here"
  return None


class NVRenderer(CUDARenderer):
  """CUDA C++ for the NV device; with MOCKGPU=1 each kernel's source also carries its PYTHON rendering, which the mock
  runs (a C comment: NVRTC compiles the same source)."""
  device = "NV"

  def __init__(self, arch: str = "sm_90", mock: bool = False):
    super().__init__(arch)
    self.mock = mock

  def render(self, k: LoweredKernel) -> str:
    src = super().render(k)
    return src + _PYTHON_MARK + PythonWriter(k).write() + "*/\n" if self.mock else src


class NVAllocator(Allocator):
  """The mock's GPU memory is host memory: the host waits (through the tracker) before it touches what a submit uses."""
  def idle(self, mem: np.ndarray, write: bool) -> None: host_wait(mem.ctypes.data, write)


@dataclass
class MockKernel:
  """What the mock runs for a launch of the program at an address: the kernel's PYTHON program, and where its
  argument words are in constant buffer 0."""
  program: PythonProgram
  nargs: int
  param_offset: int


class NVDevice(Compiled):
  def __init__(self, name: str, arch: str):
    if not MOCKGPU:
      why = missing_driver() or "the kernel-driver layer for a real GPU (RM and UVM ioctls) is not written yet"
      raise RuntimeError(f"DEV=NV: {why}; MOCKGPU=1 runs the mock GPU")
    self.mock_kernels: dict[int, MockKernel] = {}
    self.compute_gpu = hcq.MockNVGPU(hopper=True, dispatch=self._dispatch)
    self.copy_gpu = hcq.MockNVGPU(hopper=True)
    self.queue, self.copy_queue = self._queue(self.compute_gpu, "compute", name), self._queue(self.copy_gpu, "copy", f"{name}:copy")
    super().__init__(name, NVAllocator(), NVRenderer(arch, mock=True), self._build)
    self.hcq_queue = self.queue
    self.code: list[np.ndarray] = []  # the programs' code, in (host) GPU memory

  @staticmethod
  def _queue(gpu: hcq.MockNVGPU, engine: str, name: str) -> hcq.NVQueue:
    q = hcq.NVQueue(name, True, engine, gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell, hcq.MockNVGPU.token,
                    gpu.signal(f"{name}:timeline"), gpu)
    register(q)
    return q

  @property
  def hcq_copy_queue(self) -> hcq.NVQueue: return self.copy_queue

  def _dispatch(self, program: int, grid: tuple[int, ...], block: tuple[int, ...], cbuf0: int, cbuf0_bytes: int) -> None:
    """A launch the mock decoded: the kernel runs here, on its arguments as the constant buffer holds them. A kernel
    that fails is the fault of the submit the queue is running, raised by the wait that covers it."""
    k = self.mock_kernels[program]
    words = np.ctypeslib.as_array((ctypes.c_uint64 * max(k.nargs, 1)).from_address(cbuf0 + k.param_offset))[:k.nargs]
    try: k.program([int(w) for w in words], (grid, block))
    except Exception as e:  # noqa: BLE001 (any error of the kernel is the device's fault, reported to the waiter)
      timeline = self.queue.timeline
      timeline.fault(timeline.value + 1, f"{self.name}: kernel '{k.program.name}' failed: {type(e).__name__}: {e}")

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    from tinyhybrid.runtime.cuda_compiler import CUDACompiler, build_kernels, nvrtc_available
    assert isinstance(self.renderer, NVRenderer)
    cubins = build_kernels(CUDACompiler(self.renderer.arch), kernels) if nvrtc_available() else [None] * len(kernels)
    return [self._load(name, src, cubin) for (name, src), cubin in zip(kernels, cubins)]

  def _load(self, name: str, src: str, cubin: bytes | None) -> CompiledProgram:
    info = kernel_info(cubin, name) if cubin is not None else None
    code = np.frombuffer(info.code if info is not None and info.code else b"\0" * 16, np.uint8).copy()
    self.code.append(code)
    pyprg = PythonProgram(name, src.partition(_PYTHON_MARK)[2].rpartition("*/")[0])
    nargs = len(pyprg.buffers) + pyprg.nvars
    param_offset = info.param_offset if info is not None else 0x210  # Hopper's parameter base
    kernel = hcq.NVKernel(code=code.ctypes.data, registers=info.registers if info is not None else 32,
                          shared_bytes=info.shared_bytes if info is not None else 0, param_offset=param_offset,
                          cbuf0_bytes=(param_offset + 8 * nargs + 15) // 16 * 16)
    self.mock_kernels[code.ctypes.data] = MockKernel(pyprg, nargs, param_offset)
    hp = HCQProgram(kernel.program(name), [], kernel)

    def call(args: list[int], launch: Any) -> None:
      """Runs the kernel and waits for it (BEAM and DEBUG=2 time it so; a schedule runs through a QueueRunner)."""
      glob, local = launch
      if 0 in glob: return  # over no elements: no work-group to launch
      cb = hcq.CommandBuffer()
      cb.exec(hp.program, args, global_size=glob, local_size=local)
      for a, written in accesses(compiled, args): cb.access(a, write=written)
      self.queue.wait(submit(self.queue, cb))
    compiled = CompiledProgram(name, src, code.ctypes.data, call, keepalive=hp)
    return compiled

  def runner(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner:
    return QueueRunner(items, nslots, self.queue, self.name) if fits(items) else Runner(items, nslots, self.name)

  def chain_runner(self, devices: list[str], items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> Runner | None:
    nvs = [dev for d in devices if isinstance(dev := Device[d], NVDevice)]
    if len(nvs) != len(items) or not fits(items): return None
    return ChainRunner([(dev.copy_queue if isinstance(it[0].keepalive, CopySpec) else dev.queue, it) for dev, it in zip(nvs, items)], nslots)

  def synchronize(self) -> None:
    synchronize(self.queue)
    synchronize(self.copy_queue)


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is not None: raise ValueError(f"{name}: the NV device renders CUDA C++ (name an architecture: NV:sm_90)")
  return NVDevice(name, t.arch or "sm_90")
