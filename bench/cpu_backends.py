#!/usr/bin/env python3
"""The CPU device's in-process backend (CPU:LLVM, LLVM IR compiled by llvmlite) against its C backend (CPU:CLANG, C
compiled by a clang process), in one run. One JSON line per case: {"bench", "case", "unit", "ours" (LLVM), "clang",
"ratio" (how many times better LLVM is: clang's time / LLVM's, or LLVM's throughput / clang's), "target"}.

  python bench/cpu_backends.py                # every case
  python bench/cpu_backends.py compile        # cases whose name has "compile"

Cases (issue 26's targets):
  compile_per_kernel   median time to build one kernel alone, render included, over the distinct kernels the
                       torch-comparison tests tests/test_tensor_ops.py and tests/test_parity_reduce.py compile
  matmul_1024          a 1024x1024 fp32 matmul, GFLOPS
  elementwise_16m      an elementwise chain (x*2+1, exp2, sqrt, *3) over 16M floats, GB/s of its input
  reduce_16m           a sum of 16M floats, GB/s
  conv_resnet          ResNet-50's 3x3 64->64 conv on a 56x56 image, batch 8, GFLOPS
  first_run            the main job (examples/train_digits.py) with an empty kernel cache, end to end, seconds
Kernel cases time the same kernel IR (both devices plan with this CPU's vector width and registers), best of
BENCH_REPEATS runs taken in turns, so both see the same machine load."""
from __future__ import annotations

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
DEVS = ("CPU:LLVM", "CPU:CLANG")


def row(case: str, unit: str, ours: float, clang: float, ratio: float, target: float | None) -> None:
  emit({"bench": "cpu_backends", "case": case, "unit": unit, "ours": round(ours, 4), "clang": round(clang, 4),
        "ratio": round(ratio, 3), "target": target})


def suite_kernels() -> list[Any]:
  """The lowered kernels the torch-comparison tests build (their C source tells distinct ones apart)."""
  import pytest
  from tinyhybrid.renderer.cstyle import CRenderer
  seen: dict[str, Any] = {}
  render = CRenderer.render

  def capture(self, k):
    src = render(self, k)
    seen.setdefault(src, k)
    return src
  CRenderer.render = capture  # type: ignore[method-assign]
  try:
    with tempfile.TemporaryDirectory() as cache:
      os.environ["TINYHYBRID_CACHE"] = cache  # every kernel is rendered (a cached schedule would skip it)
      pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(ROOT / "tests/test_tensor_ops.py"),
                   str(ROOT / "tests/test_parity_reduce.py")], plugins=[])
  finally:
    CRenderer.render = render  # type: ignore[method-assign]
    os.environ.pop("TINYHYBRID_CACHE", None)
  return list(seen.values())


def compile_per_kernel() -> None:
  from tinyhybrid.runtime.compiler import kernel_symbol
  kernels = suite_kernels()
  times: dict[str, list[float]] = {d: [] for d in DEVS}
  with tempfile.TemporaryDirectory() as out:
    for i, k in enumerate(kernels):
      for d in DEVS:
        dev = Device[d]
        t0 = time.perf_counter()
        src = dev.renderer.render(k)
        dev.toolchain.build([(k.name, kernel_symbol(k.name, src, dev.toolchain), src)], Path(out) / f"{d[4:]}-{i}.o", k.name)
        times[d].append(time.perf_counter() - t0)
  llvm, clang = (statistics.median(times[d]) * 1e3 for d in DEVS)
  print(f"# {len(kernels)} distinct kernels; LLVM {sum(times['CPU:LLVM']):.1f} s in all, clang {sum(times['CPU:CLANG']):.1f} s", file=sys.stderr)
  row("compile_per_kernel", "ms", llvm, clang, clang / llvm, 3.0)


def kernel_case(name: str, unit: str, work: float, make: Callable[[str], Callable[[], Any]], target: float) -> None:
  """work: the units (GFLOP, GB) one run does; make(device) gives the run."""
  runs = {d: make(d) for d in DEVS}
  for d, fn in runs.items():
    for _ in range(2): fn()
  best = {d: float("inf") for d in DEVS}
  for _ in range(REPEATS):
    for d, fn in runs.items():
      t0 = time.perf_counter()
      fn()
      Device[d].synchronize()
      best[d] = min(best[d], time.perf_counter() - t0)
  llvm, clang = (work / best[d] for d in DEVS)
  row(name, unit, llvm, clang, llvm / clang, target)


def graph(d: str, build: Callable[[str], Tensor]) -> Callable[[], Any]:
  def run() -> None: build(d).realize()
  return run


def cases() -> dict[str, Callable[[], None]]:
  n, big = 1024, 16 * 1024 * 1024
  state: dict[str, dict[str, Tensor]] = {}

  def inputs(key: str, shape: tuple[int, ...]) -> dict[str, Tensor]:
    if key not in state: state[key] = {d: Tensor.rand(*shape, device=d).realize() for d in DEVS}
    return state[key]

  def matmul() -> None:
    a, b = inputs("a", (n, n)), inputs("b", (n, n))
    kernel_case("matmul_1024", "GFLOPS", 2 * n ** 3 / 1e9, lambda d: graph(d, lambda d: a[d] @ b[d]), 0.95)

  def elementwise() -> None:
    x = inputs("x", (big,))
    kernel_case("elementwise_16m", "GB/s", big * 4 / 1e9, lambda d: graph(d, lambda d: ((x[d] * 2 + 1).exp2().sqrt() * 3)), 0.9)

  def reduce() -> None:
    x = inputs("x", (big,))
    kernel_case("reduce_16m", "GB/s", big * 4 / 1e9, lambda d: graph(d, lambda d: x[d].sum()), 0.9)

  def conv() -> None:
    x, w = inputs("img", (8, 64, 56, 56)), inputs("w", (64, 64, 3, 3))
    flops = 2 * 8 * 64 * 56 * 56 * 64 * 9 / 1e9
    kernel_case("conv_resnet", "GFLOPS", flops, lambda d: graph(d, lambda d: x[d].conv2d(w[d], padding=1)), 0.95)

  def first_run() -> None:
    secs = {}
    for d in DEVS:
      with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TINYHYBRID_CACHE": cache, "DEV": d}
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "examples/train_digits.py")], env=env, check=True, capture_output=True)
        secs[d] = time.perf_counter() - t0
    row("first_run", "s", secs["CPU:LLVM"], secs["CPU:CLANG"], secs["CPU:CLANG"] / secs["CPU:LLVM"], None)

  return {"compile_per_kernel": compile_per_kernel, "matmul_1024": matmul, "elementwise_16m": elementwise,
          "reduce_16m": reduce, "conv_resnet": conv, "first_run": first_run}


if __name__ == "__main__":
  for name, fn in cases().items():
    if len(sys.argv) < 2 or any(a in name for a in sys.argv[1:]): fn()
