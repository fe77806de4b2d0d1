#!/usr/bin/env python3
"""The CPU device's backends without a compiler process, CPU:LLVM (LLVM IR compiled in process by llvmlite) and
CPU:X86 (machine code selected, register-allocated and encoded here), against its C backend (CPU:CLANG: C compiled by
a clang process), in one run. One JSON line per case and backend: {"bench", "case", "backend", "unit", "ours" (the
backend's figure), "clang", "ratio" (how many times better the backend is: clang's time / its time, or its
throughput / clang's), "target"}.

  python bench/cpu_backends.py                # every case
  python bench/cpu_backends.py compile        # cases whose name has "compile"

Cases (issue 26's targets):
  compile_per_kernel   median time to build one kernel alone, render included, over the distinct kernels that the
                       torch-comparison tests tests/test_tensor_ops.py and tests/test_parity_reduce.py make on each
                       backend (each run in a process of its own with an empty kernel cache)
  matmul_1024          a 1024x1024 fp32 matmul, GFLOPS
  elementwise_16m      an elementwise chain (x*2+1, exp2, sqrt, *3) over 16M floats, GB/s of its input
  reduce_16m           a sum of 16M floats, GB/s
  conv_resnet          ResNet-50's 3x3 64->64 conv on a 56x56 image, batch 8, GFLOPS
  first_run            the main job (examples/train_digits.py) with an empty kernel cache, end to end, seconds
Kernel cases time each backend's code for the kernel its renderer plans, best of BENCH_REPEATS runs taken in turns,
so every backend sees the same machine load."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPEATS, emit, import_tinyhybrid  # noqa: E402

import_tinyhybrid()
from tinyhybrid import Device, Tensor  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CLANG, OURS = "CPU:CLANG", ("CPU:LLVM", "CPU:X86")
TARGETS = {  # (case, backend) -> the ratio to reach
  ("compile_per_kernel", "CPU:LLVM"): 3.0, ("compile_per_kernel", "CPU:X86"): 50.0,
  ("matmul_1024", "CPU:LLVM"): 0.95, ("matmul_1024", "CPU:X86"): 0.7, ("elementwise_16m", "CPU:LLVM"): 0.9,
  ("elementwise_16m", "CPU:X86"): 0.9, ("reduce_16m", "CPU:LLVM"): 0.9, ("reduce_16m", "CPU:X86"): 0.9,
  ("conv_resnet", "CPU:X86"): 0.7, ("first_run", "CPU:X86"): 3.0,
}


def row(case: str, backend: str, unit: str, ours: float, clang: float, ratio: float) -> None:
  emit({"bench": "cpu_backends", "case": case, "backend": backend, "unit": unit, "ours": round(ours, 4),
        "clang": round(clang, 4), "ratio": round(ratio, 3), "target": TARGETS.get((case, backend))})


def kernel_build_times() -> list[float]:
  """(In a process whose DEV is the backend.) Seconds to render and build each distinct kernel the tests make, alone."""
  import pytest
  dev = Device[Device.DEFAULT]
  cls = type(dev.renderer)
  seen: dict[str, Any] = {}
  render = cls.render

  def capture(self, k):
    src = render(self, k)
    seen.setdefault(src, k)
    return src
  cls.render = capture  # type: ignore[method-assign]
  try: pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(ROOT / "tests/test_tensor_ops.py"), str(ROOT / "tests/test_parity_reduce.py")])
  finally: cls.render = render  # type: ignore[method-assign]
  from tinyhybrid.runtime.compiler import kernel_symbol
  times = []
  with tempfile.TemporaryDirectory() as out:
    for i, k in enumerate(seen.values()):
      t0 = time.perf_counter()
      src = dev.renderer.render(k)
      if dev.toolchain is None:
        from tinyhybrid.runtime import x86
        x86.load(k.name, src)
      else: dev.toolchain.build([(k.name, kernel_symbol(k.name, src, dev.toolchain), src)], Path(out) / f"{i}.o", k.name)
      times.append(time.perf_counter() - t0)
  return times


def compile_per_kernel() -> None:
  med = {}
  for d in (CLANG, *OURS):
    with tempfile.TemporaryDirectory() as cache:
      env = {**os.environ, "DEV": d, "TINYHYBRID_CACHE": cache}
      res = subprocess.run([sys.executable, __file__, "--build-times"], env=env, capture_output=True, text=True, check=True)
    times = json.loads(res.stdout.strip().splitlines()[-1])
    med[d] = statistics.median(times) * 1e3
    print(f"# {d}: {len(times)} distinct kernels, {sum(times):.1f} s in all", file=sys.stderr)
  for d in OURS: row("compile_per_kernel", d, "ms", med[d], med[CLANG], med[CLANG] / med[d])


def kernel_case(name: str, unit: str, work: float, build: Callable[[str], Tensor], targets: tuple[str, ...] = OURS) -> None:
  """work: the units (GFLOP, GB) one run does; build(device) gives the lazy result to realize."""
  devs = (CLANG, *targets)
  def run(d: str) -> None:
    build(d).realize()
    Device[d].synchronize()
  for d in devs:
    for _ in range(2): run(d)
  best = {d: float("inf") for d in devs}
  for _ in range(REPEATS):
    for d in devs:
      t0 = time.perf_counter()
      run(d)
      best[d] = min(best[d], time.perf_counter() - t0)
  for d in targets: row(name, d, unit, work / best[d], work / best[CLANG], best[CLANG] / best[d])


def cases() -> dict[str, Callable[[], None]]:
  n, big = 1024, 16 * 1024 * 1024
  state: dict[str, dict[str, Tensor]] = {}

  def inputs(key: str, shape: tuple[int, ...]) -> dict[str, Tensor]:
    if key not in state: state[key] = {d: Tensor.rand(*shape, device=d).realize() for d in (CLANG, *OURS)}
    return state[key]

  def matmul() -> None:
    a, b = inputs("a", (n, n)), inputs("b", (n, n))
    kernel_case("matmul_1024", "GFLOPS", 2 * n ** 3 / 1e9, lambda d: a[d] @ b[d])

  def elementwise() -> None:
    x = inputs("x", (big,))
    kernel_case("elementwise_16m", "GB/s", big * 4 / 1e9, lambda d: ((x[d] * 2 + 1).exp2().sqrt() * 3))

  def reduce() -> None:
    x = inputs("x", (big,))
    kernel_case("reduce_16m", "GB/s", big * 4 / 1e9, lambda d: x[d].sum())

  def conv() -> None:
    x, w = inputs("img", (8, 64, 56, 56)), inputs("w", (64, 64, 3, 3))
    kernel_case("conv_resnet", "GFLOPS", 2 * 8 * 64 * 56 * 56 * 64 * 9 / 1e9, lambda d: x[d].conv2d(w[d], padding=1))

  def first_run() -> None:
    secs = {}
    for d in (CLANG, *OURS):
      with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TINYHYBRID_CACHE": cache, "DEV": d}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "examples/train_digits.py")], env=env, check=True, capture_output=True)
        secs[d] = time.perf_counter() - t0
    for d in OURS: row("first_run", d, "s", secs[d], secs[CLANG], secs[CLANG] / secs[d])

  return {"compile_per_kernel": compile_per_kernel, "matmul_1024": matmul, "elementwise_16m": elementwise,
          "reduce_16m": reduce, "conv_resnet": conv, "first_run": first_run}


if __name__ == "__main__":
  if sys.argv[1:] == ["--build-times"]:
    times = kernel_build_times()
    print(json.dumps(times))
  else:
    for name, fn in cases().items():
      if len(sys.argv) < 2 or any(a in name for a in sys.argv[1:]): fn()
