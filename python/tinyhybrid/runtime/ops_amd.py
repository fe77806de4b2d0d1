"""The AMD device (DEV=AMD, tinygrad's name): an AMD GPU driven through HCQ with no vendor runtime. Its queues are
hcq.AMDQueue rings: the C++ encoder (drivers/amd) lowers each command buffer once to PM4 for the compute ring (the
program, its resources and the kernarg pointer by SET_SH_REG, then DISPATCH_DIRECT; RELEASE_MEM signals, WAIT_REG_MEM
waits) and to SDMA for the copy ring, and a TinyJit replay is one submit with its addresses patched.

There is no AMD code generator yet, so the device runs only on the mock GPU (MOCKGPU=1, tinygrad's flag): a kernel's
source is its lowering as the PYTHON device renders it, planned for an RDNA3 GPU's limits, and the mock's command
processor decodes each dispatch from the PM4 stream and hands it back to this device, which runs it on the host with
the grid, the work-group and the argument words at the kernarg address the user SGPRs carry. The kernel-driver layer
(/dev/kfd and the DRM render node) is not written yet: without MOCKGPU=1, DEV=AMD says so."""
from __future__ import annotations

import os

from tinyhybrid._core import hcq
from tinyhybrid.device import Compiled, CompiledProgram, Target
from tinyhybrid.renderer.python import PythonRenderer
from tinyhybrid.runtime import hcq_gpu
from tinyhybrid.runtime.hcq import HCQProgram
from tinyhybrid.runtime.hcq_gpu import HCQGPUDevice, MockKernel
from tinyhybrid.runtime.ops_python import PythonProgram

_KERNARG_SGPR = 0  # the user SGPR pair the kernarg address arrives in (the first, as the AMDGPU ABI puts it)


def missing_driver() -> str | None:
  """Why DEV=AMD cannot open a GPU here (the first device file missing), None when the files are there."""
  for f in ("/dev/kfd", "/dev/dri/renderD128"):
    if not os.path.exists(f): return f"{f} is missing: no AMD kernel driver or GPU here"
  return None


class AMDRenderer(PythonRenderer):
  """The AMD device's kernels, planned for an RDNA3 GPU's limits: with no AMD code generator yet, each is its lowering
  as the PYTHON device renders it, which the mock runs (no tensor cores: RDNA's WMMA layouts are not emulated)."""
  device = "AMD"
  max_local = (1024, 1024, 1024)
  local_mem = 64 * 1024

  def __init__(self) -> None: super().__init__(None)


def _queue(gpu: hcq.MockAMDGPU, engine: str, name: str) -> hcq.AMDQueue:
  return hcq.AMDQueue(name, True, engine, gpu.ring, gpu.side, gpu.wptr, gpu.rptr, gpu.doorbell, gpu.signal(f"{name}:timeline"), gpu)


class AMDDevice(HCQGPUDevice):
  def __init__(self, name: str):
    if not hcq_gpu.MOCKGPU:
      raise RuntimeError(f"DEV=AMD: {missing_driver() or 'the kernel-driver layer for a real GPU (KFD ioctls) is not written yet'}; "
                         "MOCKGPU=1 runs the mock GPU")
    # rings as large as a real compute queue's: a schedule of thousands of kernels is one submit
    self.compute_gpu = hcq.MockAMDGPU(dispatch=self._dispatch, ring_bytes=8 << 20, side_bytes=8 << 20)
    self.copy_gpu = hcq.MockAMDGPU(sdma=True, ring_bytes=1 << 20)
    super().__init__(name, AMDRenderer(), _queue(self.compute_gpu, "compute", name), _queue(self.copy_gpu, "sdma", f"{name}:copy"))

  def _dispatch(self, program: int, grid: tuple[int, ...], block: tuple[int, ...], user_data: tuple[int, ...]) -> None:
    self.run_mock(program, (grid, block), user_data[_KERNARG_SGPR] | user_data[_KERNARG_SGPR + 1] << 32)

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    out = []
    for name, src in kernels:
      code = self.upload(b"")  # no machine code: the mock runs the program's lowering (COMPUTE_PGM_LO takes it >> 8)
      pyprg = PythonProgram(name, src)
      nargs = len(pyprg.buffers) + pyprg.nvars
      kernel = hcq.AMDKernel(code=code, kernarg_sgpr=_KERNARG_SGPR, kernarg_bytes=max(16, (8 * nargs + 15) // 16 * 16), wave32=True)
      self.mock_kernels[code] = MockKernel(pyprg, nargs)
      out.append(self.program(name, src, HCQProgram(kernel.program(name), [], kernel), code))
    return out


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is not None or t.arch is not None: raise ValueError(f"{name}: the AMD device takes no renderer or architecture yet")
  return AMDDevice(name)
