"""Settings for the whole test run, and the suite on another device.

The suite runs with SPEC=1: every graph that reaches a pass boundary (tensor graph, kernel graph, lowered,
linearized) is checked against the type rules of its ops. It adds no measurable time (the checks run once per
compiled kernel); SPEC=0 in the environment turns it off, SPEC=2 adds the stricter late rules.

`DEV=CL python -m pytest tests` runs a bounded slice of the modules that compare Tensor
results against torch and NumPy (ops, nn, JIT, reduces, custom kernels: DEVICE_SUITE) with every Tensor on that device: a first run
on PoCL builds every kernel it meets (a fraction of a second each), so the CI line takes the slice, not all of
them. The other torch-comparison modules run on the device when named (`DEV=CL python -m pytest
tests/test_parity_grad.py`). `DEV=CPU:LLVM` and `DEV=CPU:X86` run the same slice on the CPU's backends without a
compiler process, LLVM in process and x86 machine code (the plain run is the C backend's). `DEV=PYTHON::sm_80` runs the same slice through the GPU lowering (work-groups, grouped
reduces, vectors, NVIDIA's tensor cores) with NumPy (runtime/ops_python.py), and `DEV=NV MOCKGPU=1` and `DEV=AMD MOCKGPU=1` through those devices' command
streams on their mock GPUs (runtime/ops_nv.py, runtime/ops_amd.py). The rest test the CPU's own machinery and the graph core, and are left to the CPU run.
What a device cannot do is marked in KNOWN with its reason. Without the device's runtime the run is skipped with the
reason, except under CI, where it fails. A CL run ends by saying how many files its compilers added to the kernel
caches (ours and PoCL's): none on a second run."""
from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest

os.environ.setdefault("SPEC", "1")

DEVICE_SUITE = ("test_tensor_ops.py", "test_tensor_nn.py", "test_tensor_extra.py", "test_nn.py", "test_jit.py", "test_parity_jit.py",
                "test_parity_reduce.py", "test_int_division.py", "test_custom_kernel.py")

# device -> {test id (a fnmatch pattern of its node id without the "tests/" part): why it is marked}
KNOWN: dict[str, dict[str, str]] = {
  "CPU:CLANG": {},
  "CPU:LLVM": {},
  "CPU:X86": {},
  "CL": {},
  "PYTHON": {},
  "NV": {},
  "AMD": {},
}


_DEVICE_VARS = ("DEV", "CPU", "NULL", "CL", "CUDA", "PYTHON", "NV", "AMD")


@pytest.fixture(autouse=True)
def _device_environment():
  """Each test ends with the device variables it began with: importing tinygrad itself (the anchor some tests compare
  with) sets DEV to the device it picked, which later tests' other processes would then run on."""
  before = {k: os.environ.get(k) for k in _DEVICE_VARS}
  yield
  for k, v in before.items():
    if v is None: os.environ.pop(k, None)
    else: os.environ[k] = v


def _device() -> str:
  """DEV's kind of device (CL, NV, ...); the CPU with a renderer named (CPU:LLVM) is one of its own."""
  base, _, rest = os.getenv("DEV", "").upper().partition(":")
  if base == "CPU" and (ren := next((p for p in rest.split(":") if p in ("CLANG", "LLVM", "X86")), None)): return f"CPU:{ren}"
  return base


def _cl_cache_files() -> set[Path]:
  from tinyhybrid.runtime.diskcache import cache_root
  dirs = [cache_root() / "cl", Path(os.getenv("POCL_CACHE_DIR", cache_root() / "pocl"))]  # where runtime/ops_cl.py puts them
  # files with something in them: PoCL leaves an empty temporary file behind in its cache at every start
  return {f for d in dirs if d.exists() for f in d.rglob("*") if f.is_file() and f.stat().st_size}


def pytest_configure(config):
  if _device() == "CL" and not hasattr(config, "workerinput"): config.cl_cache_before = _cl_cache_files()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
  if (before := getattr(config, "cl_cache_before", None)) is not None:
    terminalreporter.write_line(f"CL: {len(_cl_cache_files() - before)} files added to the kernel caches by this run")


def pytest_ignore_collect(collection_path, config):
  if _device() in ("", "CPU") or collection_path.suffix != ".py": return None
  return not any(fnmatch.fnmatch(collection_path.name, p) for p in DEVICE_SUITE) or None


def pytest_collection_modifyitems(config, items):
  dev = _device()
  if dev in ("", "CPU"): return
  if dev == "CL":
    from tinyhybrid.runtime import ops_cl
    if not ops_cl.available():
      if os.getenv("CI"): return  # every test fails with the missing driver's error, which names it
      skip = pytest.mark.skip(reason=f"DEV=CL: no OpenCL device here ({ops_cl.why_unavailable()})")
      for item in items: item.add_marker(skip)
      return
  if dev in ("NV", "AMD"):
    import importlib
    from tinyhybrid.runtime import hcq_gpu
    why = importlib.import_module(f"tinyhybrid.runtime.ops_{dev.lower()}").missing_driver()
    if not hcq_gpu.MOCKGPU and why is not None and not os.getenv("CI"):
      for item in items: item.add_marker(pytest.mark.skip(reason=f"DEV={dev}: {why} (MOCKGPU=1 runs the mock GPU)"))
      return
  for item in items:
    nodeid = item.nodeid.removeprefix("tests/")
    if (why := next((r for pat, r in KNOWN.get(dev, {}).items() if fnmatch.fnmatchcase(nodeid, pat)), None)) is not None:
      item.add_marker(pytest.mark.xfail(reason=f"{dev}: {why}", strict=False))
