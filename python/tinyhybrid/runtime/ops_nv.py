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

import os

from tinyhybrid._core import hcq
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.device import Compiled, CompiledProgram, Target
from tinyhybrid.renderer.cuda import CUDARenderer
from tinyhybrid.renderer.python import PythonWriter
from tinyhybrid.runtime import hcq_gpu
from tinyhybrid.runtime.cubin import kernel_info
from tinyhybrid.runtime.hcq import HCQProgram
from tinyhybrid.runtime.hcq_gpu import HCQGPUDevice, MockKernel
from tinyhybrid.runtime.ops_python import PythonProgram

_PYTHON_MARK = "/* th-python (what MOCKGPU=1 runs):\n"
_PARAM_BASE = 0x210  # Hopper's first parameter byte in constant bank 0 (0x160 before it), when the cubin does not say


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


def _queue(gpu: hcq.MockNVGPU, engine: str, name: str) -> hcq.NVQueue:
  return hcq.NVQueue(name, True, engine, gpu.gpfifo, gpu.push, gpu.side, gpu.gp_put, gpu.gp_get, gpu.doorbell, hcq.MockNVGPU.token,
                     gpu.signal(f"{name}:timeline"), gpu)


class NVDevice(HCQGPUDevice):
  def __init__(self, name: str, arch: str):
    if not hcq_gpu.MOCKGPU:
      why = missing_driver() or "the kernel-driver layer for a real GPU (RM and UVM ioctls) is not written yet"
      raise RuntimeError(f"DEV=NV: {why}; MOCKGPU=1 runs the mock GPU")
    # a pushbuffer as large as a real channel's: a schedule of thousands of kernels is one submit
    self.compute_gpu = hcq.MockNVGPU(hopper=True, push_bytes=8 << 20, side_bytes=16 << 20, dispatch=self._dispatch)
    self.copy_gpu = hcq.MockNVGPU(hopper=True, push_bytes=1 << 20, side_bytes=1 << 20)
    self.param_offsets: dict[int, int] = {}
    super().__init__(name, NVRenderer(arch, mock=True), _queue(self.compute_gpu, "compute", name), _queue(self.copy_gpu, "copy", f"{name}:copy"))

  def _dispatch(self, program: int, grid: tuple[int, ...], block: tuple[int, ...], cbuf0: int, cbuf0_bytes: int) -> None:
    self.run_mock(program, (grid, block), cbuf0 + self.param_offsets[program])

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    from tinyhybrid.runtime.cuda_compiler import CUDACompiler, build_kernels, nvrtc_available
    assert isinstance(self.renderer, NVRenderer)
    cubins = build_kernels(CUDACompiler(self.renderer.arch), kernels) if nvrtc_available() else [None] * len(kernels)
    return [self._load(name, src, cubin) for (name, src), cubin in zip(kernels, cubins)]

  def _load(self, name: str, src: str, cubin: bytes | None) -> CompiledProgram:
    info = kernel_info(cubin, name) if cubin is not None else None
    code = self.upload(info.code if info is not None else b"")
    pyprg = PythonProgram(name, src.partition(_PYTHON_MARK)[2].rpartition("*/")[0])
    nargs = len(pyprg.buffers) + pyprg.nvars
    param_offset = info.param_offset if info is not None else _PARAM_BASE
    kernel = hcq.NVKernel(code=code, registers=info.registers if info is not None else 32, shared_bytes=info.shared_bytes if info is not None else 0,
                          param_offset=param_offset, cbuf0_bytes=(param_offset + 8 * nargs + 15) // 16 * 16)
    self.mock_kernels[code], self.param_offsets[code] = MockKernel(pyprg, nargs), param_offset
    return self.program(name, src, HCQProgram(kernel.program(name), [], kernel), code)


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is not None: raise ValueError(f"{name}: the NV device renders CUDA C++ (name an architecture: NV:sm_90)")
  return NVDevice(name, t.arch or "sm_90")
