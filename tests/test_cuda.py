"""The NVIDIA backends without a GPU: tinygrad's target syntax (DEV=NULL:CUDA:sm_90), the compilers' public face
(compile(src) -> bytes, CompileError naming the kernel and marking the line), kernels of every dtype rendered as CUDA
C++ and as PTX and compiled for sm_90 by NVRTC and ptxas, the GPU lowering seen in the source (grid registers,
shared memory and barriers, vector loads), and the clear error of DEV=CUDA on a machine without a driver."""
from __future__ import annotations

import ctypes.util

import numpy as np
import pytest

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid.device import CompileError, Target
from tinyhybrid.engine import realize

CUDA, PTX = "NULL:CUDA:sm_90", "NULL:PTX:sm_90"

GOOD_CUDA = 'extern "C" __global__ void add_one(float* a) { a[threadIdx.x] += 1.0f; }\n'
BAD_CUDA = 'extern "C" __global__ void broken_kernel(float* a) {\n  a[0] = 1.0f;\n  a[1] = undefined_name;\n}\n'
GOOD_PTX = """.version 7.8
.target sm_90
.address_size 64
.visible .entry store_one(.param .u64 data0) {
  .reg .b64 %rd<2>;
  .reg .b32 %r<1>;
  ld.param.u64 %rd0, [data0];
  cvta.to.global.u64 %rd1, %rd0;
  mov.b32 %r0, 0f3F800000;
  st.global.f32 [%rd1+0], %r0;
  ret;
}
"""


def _sources(run) -> set[str]:
  """The sources of the kernels that running `run` compiled."""
  before = set(realize.kernel_cache)
  run()
  return {prg.src for key, (_, prg) in realize.kernel_cache.items() if key not in before}


def test_target_syntax():
  assert Device.canonicalize("null:cuda:SM_90") == "NULL:CUDA:sm_90"
  assert Device.canonicalize("CUDA:0:ptx") == "CUDA:PTX"
  assert Device.canonicalize("cl:1") == "CL:1"
  assert Target.parse("CUDA:1:PTX:sm_80") == Target("CUDA", 1, "PTX", "sm_80")
  with pytest.raises(ValueError, match="RENDERER"): Device.canonicalize("NULL:sm_90:CUDA")
  with pytest.raises(ValueError, match="unknown device"): Device.canonicalize("VULKAN")
  with pytest.raises(ValueError, match="needs a renderer"): Device["NULL:sm_90"]
  with pytest.raises(ValueError, match="not an NVIDIA architecture|not an architecture"): Device["NULL:CUDA:gfx1100"]


@pytest.mark.parametrize("dev, src", [(CUDA, GOOD_CUDA), (PTX, GOOD_PTX)])
def test_compile_returns_a_cubin(dev, src):
  binary = Device[dev].compiler.compile(src)
  assert isinstance(binary, bytes) and binary[:4] == b"\x7fELF"  # a cubin is an ELF file
  assert (b"add_one" if dev == CUDA else b"store_one") in binary


def test_compile_error_names_kernel_and_line():
  with pytest.raises(CompileError) as e: Device[CUDA].compiler.compile(BAD_CUDA)
  msg = str(e.value)
  assert "kernel broken_kernel" in msg and "sm_90" in msg and "undefined_name" in msg
  assert ">>    3 |   a[1] = undefined_name;" in msg and "      2 |   a[0] = 1.0f;" in msg  # only the faulty line marked
  bad_ptx = GOOD_PTX.replace("st.global.f32", "st.global.f99")
  with pytest.raises(CompileError) as e: Device[PTX].compiler.compile(bad_ptx)
  msg = str(e.value)
  assert "kernel store_one" in msg and "ptxas" in msg
  assert ">>   10 |   st.global.f99 [%rd1+0], %r0;" in msg


def test_bad_kernel_in_a_batch_is_named():
  from tinyhybrid.runtime.cuda_compiler import CUDACompiler, build_kernels
  with pytest.raises(CompileError, match="kernel broken_kernel"):
    build_kernels(CUDACompiler("sm_90"), [("add_one", GOOD_CUDA), ("broken_kernel", BAD_CUDA)])


def _programs(dev: str) -> None:
  rng = np.random.default_rng(0)
  a, b = Tensor(rng.random((33, 65), dtype=np.float32), device=dev), Tensor(rng.random((65, 17), dtype=np.float32), device=dev)
  (a @ b).relu().realize()
  Tensor(rng.random((4, 16384), dtype=np.float32), device=dev).sum(axis=1).realize()  # few outputs: grouped through shared memory
  a.max(axis=1).exp2().log2().sin().sqrt().realize()
  for dt in (dtypes.half, dtypes.bfloat16, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int64, dtypes.uint32, dtypes.double):
    x = a.cast(dt)
    ((x * x + x).max(axis=0).cast(dtypes.float) + (x > x.cast(dtypes.float).mean()).cast(dtypes.float)).realize()
  (a > 0.5).where(a, -a).cast(dtypes.bool).realize()
  a.cast(dtypes.half).bitcast(dtypes.short).realize()
  a.cast(dtypes.bfloat16).bitcast(dtypes.ushort).realize()
  (a.cast(dtypes.int32) // 3 - a.cast(dtypes.int32) % 7).realize()
  (a.cast(dtypes.int32) << 2 ^ (a > 0.3).cast(dtypes.int32)).realize()
  Tensor.arange(100, device=dev).reshape(10, 10).cumsum(axis=1).realize()


@pytest.mark.parametrize("dev", [CUDA, PTX])
def test_kernels_of_every_dtype_compile(dev):
  srcs = _sources(lambda: _programs(dev))
  assert len(srcs) >= 20
  text = "\n".join(srcs)
  if dev == CUDA:
    assert "blockIdx.x" in text and "threadIdx.x" in text
    assert "__shared__" in text and "__syncthreads();" in text
    assert "#include <cuda_fp16.h>" in text and "__nv_bfloat16* __restrict__" in text
  else:
    assert "%ctaid.x" in text and "%tid.x" in text and ".shared .align 16" in text and "bar.sync 0" in text
    assert "ld.global.v4.f32" in text or "ld.global.v2.f32" in text  # vector loads where aligned
    assert "cvt.rn.bf16.f32" in text and "add.rn.f16" in text


def test_vector_loads_and_stores():
  srcs = _sources(lambda: (Tensor.ones(64, 128, device=CUDA).contiguous() * 3 + 1).sum(axis=0).realize())
  text = "\n".join(srcs)
  assert "(*(const th_v<float, 4>*)(" in text and "*(th_v<float, 4>*)(data0 + " in text
  srcs = _sources(lambda: (Tensor.ones(64, 128, device=PTX).contiguous() * 3 + 1).sum(axis=0).realize())
  text = "\n".join(srcs)
  assert "ld.global.v4.f32" in text and "st.global.v4.f32" in text


def test_dev_cuda_without_a_driver_is_a_clear_error():
  if ctypes.util.find_library("cuda") is not None:
    pytest.skip("a CUDA driver is installed here: tests/test_cuda_device.py runs the device")
  with pytest.raises(RuntimeError, match="libcuda.so.1 is not installed.*DEV=NULL:CUDA:sm_90"): Tensor([1, 2], device="CUDA").realize()
  with pytest.raises(RuntimeError, match="libcuda.so.1"): Device["CUDA:PTX"]
