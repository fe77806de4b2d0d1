"""The OpenCL device (runtime/ops_cl.py, renderer/opencl.py) on whatever OpenCL driver is installed (PoCL in CI): the
GPU lowering really used (work-groups, local memory, barriers in the rendered source), the program cache, the JIT's
batches, dtypes, and the errors for what can't be done. Every number is checked against NumPy."""
import contextlib
import io
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tinyhybrid import Context, Device, Tensor, TinyJit, dtypes
from tinyhybrid.runtime import ops_cl

if not ops_cl.available():
  if os.getenv("CI"): raise RuntimeError(ops_cl.why_unavailable())
  pytest.skip(f"no OpenCL device: {ops_cl.why_unavailable()}", allow_module_level=True)

RNG = np.random.default_rng(15)


def _f(*shape): return RNG.standard_normal(shape).astype(np.float32)


def _source(fn) -> tuple[object, str]:
  """What fn returns, and the kernel sources DEBUG=4 printed while it ran (the schedule cache is skipped: new plans)."""
  from tinyhybrid.engine.realize import kernel_cache, schedule_cache
  schedule_cache.clear()
  kernel_cache.clear()
  out = io.StringIO()
  with Context(DEBUG=4), contextlib.redirect_stdout(out): ret = fn()
  return ret, out.getvalue()


def _kernel(src: str, prefix: str) -> str:
  """The OpenCL kernel named prefix... among printed sources."""
  start = src.index(f" void {prefix}")
  return src[src.rindex("__kernel", 0, start):src.index("\n}\n", start)]


def _local_size(kernel: str) -> int:
  dims = kernel[kernel.index("reqd_work_group_size(") + 21:].split(")")[0]
  return int(np.prod([int(d) for d in dims.split(",")]))


def test_matmul_runs_in_local_work_groups():
  a, b = _f(256, 128), _f(128, 192)
  out, src = _source(lambda: (Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy())
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
  k = _kernel(src, "r_256_")  # a matmul's output loops and reduce, as this backend names them
  assert "get_group_id(" in k and "get_local_id(" in k, k
  assert _local_size(k) > 1, "the matmul's work-groups have one work-item"
  assert "float16" in k or "float4" in k, "no vector loads"


def test_large_reduce_is_grouped_through_local_memory():
  x = _f(1 << 20)
  out, src = _source(lambda: Tensor(x, device="CL").sum().numpy())
  np.testing.assert_allclose(out, x.sum(dtype=np.float64), rtol=1e-4)
  first = _kernel(src, "r_")  # the first of two stages: 1M values into partial sums, one per work-group
  assert "__local " in first and "barrier(CLK_LOCAL_MEM_FENCE);" in first and "get_local_id(" in first, first
  assert _local_size(first) > 1


def test_epilogue_runs_after_the_grouped_reduce():
  """A reduce fused into the elementwise kernel that reads it (schedule/kernelize.py): on a GPU the work-item that
  combines a grouped reduce's partial results applies the epilogue and stores; a matmul's bias and relu run in its
  work-groups. One kernel each."""
  a, b = _f(256, 4096), _f(256)
  out, src = _source(lambda: ((Tensor(a, device="CL").sum(1) * Tensor(b, device="CL")).relu() + Tensor(a, device="CL")[:, 0]).numpy())
  np.testing.assert_allclose(out, np.maximum(a.sum(1, dtype=np.float64) * b, 0) + a[:, 0], rtol=1e-4, atol=1e-3)
  assert src.count("__kernel") == 1 and "barrier(CLK_LOCAL_MEM_FENCE);" in src, src
  x, w, bias = _f(64, 96), _f(96, 48), _f(48)
  out, src = _source(lambda: (Tensor(x, device="CL") @ Tensor(w, device="CL") + Tensor(bias, device="CL")).relu().numpy())
  np.testing.assert_allclose(out, np.maximum(x @ w + bias, 0), rtol=1e-4, atol=1e-4)
  assert src.count("__kernel") == 1 and "get_local_id(" in src and _local_size(src) > 1, src


@pytest.mark.parametrize("shape,axis", [((1000, 37), 0), ((37, 1000), 1), ((4, 256, 300), (0, 2)), ((3, 1 << 17), 1)])
def test_reduces(shape, axis):
  x = _f(*shape)
  t = Tensor(x, device="CL")
  np.testing.assert_allclose(t.sum(axis=axis).numpy(), x.sum(axis=axis, dtype=np.float64), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(t.max(axis=axis).numpy(), x.max(axis=axis))


def test_softmax_and_conv():
  x, w = _f(2, 3, 17, 19), _f(5, 3, 3, 3)
  import torch
  ref = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), padding=1).softmax(-1).numpy()
  np.testing.assert_allclose(Tensor(x, device="CL").conv2d(Tensor(w, device="CL"), padding=1).softmax(-1).numpy(), ref, rtol=1e-4, atol=1e-5)


def test_dtypes():
  a = RNG.integers(-100, 100, (7, 33)).astype(np.int32)
  t = Tensor(a, device="CL")
  np.testing.assert_equal((t // 7 + t % 5).numpy(), a // 7 + a % 5)
  np.testing.assert_equal((t > 3).numpy(), a > 3)
  np.testing.assert_equal(((t > 3) & (t < 50)).where(t, -1).numpy(), np.where((a > 3) & (a < 50), a, -1))
  d = RNG.standard_normal(50)
  np.testing.assert_allclose((Tensor(d, device="CL") * 3).exp().numpy(), np.exp(d * 3))
  np.testing.assert_equal(Tensor(a.astype(np.uint8), device="CL").cast(dtypes.int64).numpy(), a.astype(np.uint8).astype(np.int64))


def test_half_and_bfloat16():
  """half is native where the device has cl_khr_fp16, else computed in float and rounded to half after every step."""
  x, y = _f(100).astype(np.float16), _f(100).astype(np.float16)
  got = (Tensor(x, device="CL") * Tensor(y, device="CL") + 1).exp2().numpy()
  np.testing.assert_equal(got, np.exp2(x * y + np.float16(1)))
  np.testing.assert_equal(Tensor(x, device="CL").cast(dtypes.float32).numpy(), x.astype(np.float32))
  np.testing.assert_equal(Tensor(x.astype(np.float64), device="CL").cast(dtypes.half).numpy(), x)
  np.testing.assert_equal(Tensor(x, device="CL").bitcast(dtypes.uint16).numpy(), x.view(np.uint16))
  b = Tensor(_f(64), device="CL").cast(dtypes.bfloat16)
  np.testing.assert_allclose((b * 2).cast(dtypes.float32).numpy(), b.cast(dtypes.float32).numpy() * 2)


def test_lacking_dtype_fails_before_any_launch():
  from tinyhybrid.helpers import GlobalCounters
  x = Tensor(np.ones(8, np.uint8), device="CL").bitcast(dtypes.fp8e4m3)
  before = GlobalCounters.kernel_count
  with pytest.raises(TypeError, match="fp8e4m3"): (x + 1).realize()
  assert GlobalCounters.kernel_count == before


def test_double_needs_fp64():
  from dataclasses import replace
  from tinyhybrid.codegen.lower import Lowerer
  from tinyhybrid.codegen import finalize
  from tinyhybrid.renderer.opencl import OpenCLRenderer
  from tinyhybrid.schedule.kernelize import create_schedule, normalize
  ren = OpenCLRenderer(replace(Device["CL"].props, extensions=frozenset()))
  assert dtypes.double not in ren.supported_dtypes()
  key, inputs, _ = normalize([(Tensor(np.ones(4), device="CL") * 2).uop])
  k = finalize(Lowerer(create_schedule(key, len(inputs)).items[0]).lower(), (), ren)
  with pytest.raises(TypeError, match="cl_khr_fp64"): ren.render(k)


def test_build_error_names_the_kernel_and_shows_the_log():
  from tinyhybrid.device import CompileError
  src = "__kernel void broken_kernel(__global float* a) { a[0] = not_declared; }"
  with pytest.raises(CompileError, match="broken_kernel") as e: Device["CL"].compile("broken_kernel", src)
  assert "not_declared" in str(e.value)  # the driver's build log


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env={**os.environ, **env}, timeout=300)


def test_no_platform_names_the_missing_icd(tmp_path):
  r = _python("from tinyhybrid import Tensor; Tensor([1.0]).numpy()", DEV="CL", OCL_ICD_VENDORS=str(tmp_path))
  assert r.returncode != 0 and "no OpenCL platform" in r.stderr and "ICD" in r.stderr, r.stderr


def test_no_loader_names_it():
  code = """
  import cffi
  def fail(self, name, *a): raise OSError(f"cannot open {name}")
  cffi.FFI.dlopen = fail
  from tinyhybrid import Tensor
  Tensor([1.0]).numpy()
  """
  r = _python(code, DEV="CL")
  assert r.returncode != 0 and "libOpenCL.so.1 is not installed" in r.stderr, r.stderr


def test_device_selection():
  code = "from tinyhybrid import Device; print(Device.DEFAULT)"
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "CL", "CPU", "NULL")}
  def run(**e: str) -> str:  # the last word: an editable install may print its rebuild first
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **e}, timeout=120).stdout.split()[-1]
  assert run() == "CPU"
  assert run(DEV="CL") == "CL"
  assert run(CL="1") == "CL"
  assert run(DEV="cl:0") == "CL"
  with pytest.raises(RuntimeError, match="OpenCL device"): Device[f"CL:{len(ops_cl.device_ids())}"]


def test_second_run_compiles_nothing(tmp_path):
  """Programs are cached on disk by source and device: a second process builds none from source, and neither our
  compiler nor PoCL's adds a file to the cache."""
  code = """
  import numpy as np
  from tinyhybrid import Tensor
  from tinyhybrid.runtime.ops_cl import CLDevice
  x = Tensor(np.arange(4096, dtype=np.float32).reshape(64, 64), device="CL")
  print(float((x @ x).relu().sum(axis=1).max().numpy()), float(x.exp().mean().numpy()), CLDevice.source_builds)
  """
  env = {"TINYHYBRID_CACHE": str(tmp_path), "POCL_CACHE_DIR": str(tmp_path / "pocl")}

  def run() -> tuple[list[str], set]:
    r = _python(code, **env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()[-3:], {f for f in tmp_path.rglob("*") if f.is_file() and f.stat().st_size}
  (m1, e1, builds1), files1 = run()
  (m2, e2, builds2), files2 = run()
  assert int(builds1) > 0 and int(builds2) == 0 and (m1, e1) == (m2, e2)
  assert files2 == files1, f"the second run added {files2 - files1}"


def test_jit_replays_as_one_batch():
  w = Tensor(_f(32, 16), device="CL").realize()

  @TinyJit
  def step(x: Tensor) -> Tensor: return ((x @ w).relu() * 2).sum(axis=1).realize()
  for _ in range(5):
    xn = _f(8, 32)
    np.testing.assert_allclose(step(Tensor(xn, device="CL")).numpy(), (np.maximum(xn @ w.numpy(), 0) * 2).sum(1), rtol=1e-4, atol=1e-4)
  assert step.captured.runners and all(isinstance(r, ops_cl.CLRunner) for r in step.captured.runners) and len(step.captured.jit_cache) >= 2


def test_debug2_times_on_the_device(capsys):
  with Context(DEBUG=2): Tensor(_f(64, 64), device="CL").exp().sum().numpy()
  assert " us " in capsys.readouterr().out


def test_profile_records_kernels():
  from tinyhybrid.device import profile_events
  from tinyhybrid.engine.realize import kernel_cache, schedule_cache
  schedule_cache.clear()
  kernel_cache.clear()
  profile_events.clear()
  with Context(PROFILE=1): (Tensor(_f(128), device="CL") + 1).numpy()
  assert any(e.device == "CL" and e.end_ns >= e.start_ns for e in profile_events)


def test_beam_searches_on_the_device(tmp_path, monkeypatch):
  from tinyhybrid.engine.realize import kernel_cache, schedule_cache
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  schedule_cache.clear()
  kernel_cache.clear()
  a, b = _f(64, 48), _f(48, 32)
  with Context(BEAM=1):
    out = (Tensor(a, device="CL") @ Tensor(b, device="CL")).numpy()
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
  assert list((tmp_path / "beam").glob("*.json")), "no search result cached"


def test_copies_between_devices():
  x = _f(5, 7)
  t = Tensor(x, device="CL")
  np.testing.assert_equal(t.to("CPU").numpy(), x)
  np.testing.assert_equal((Tensor(x).to("CL") * 2).numpy(), x * 2)


def test_a_partial_copy_into_cl_memory():
  from tinyhybrid.device import Buffer, CopySpec
  from tinyhybrid.engine.multi import copy_buffers
  src = Buffer("CPU", 8, dtypes.int32, initial=np.arange(8, dtype=np.int32))
  dst = Buffer("CL", 6, dtypes.int32, initial=np.full(6, -1, dtype=np.int32))
  copy_buffers([(dst, src, CopySpec(3 * 4, 2 * 4, 1 * 4))])  # src[2:5] into dst[1:4]
  np.testing.assert_array_equal(dst.numpy(), [-1, 2, 3, 4, -1, -1])
  back = Buffer("CPU", 4, dtypes.int32, initial=np.zeros(4, dtype=np.int32))
  copy_buffers([(back, dst, CopySpec(2 * 4, 3 * 4, 2 * 4))])  # dst[3:5] into back[2:4]
  np.testing.assert_array_equal(back.numpy(), [0, 0, 4, -1])
  with pytest.raises(ValueError, match="runs past"): copy_buffers([(dst, src, CopySpec(4 * 4, 0, 3 * 4))])


def test_an_assign_through_a_view_of_a_value_from_another_device():
  a = Tensor.arange(8).contiguous().realize()
  b = Tensor.zeros(8, dtype=a.dtype, device="CL").contiguous().realize()
  b[2:5].assign(a[0:3].to("CL"))  # planned through realize_across, which found the write still pending (recursed)
  b[5:7] = a[6:8].to("CL")
  np.testing.assert_array_equal(b.numpy(), [0, 0, 0, 1, 2, 6, 7, 0])
