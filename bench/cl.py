#!/usr/bin/env python3
"""The OpenCL backend (DEV=CL; PoCL on these machines) against its anchors, in the same process. One JSON line per
case: {"bench": "cl", "case", "unit", "ours", <anchor>: figure, "ratio_<anchor>": ours / anchor, "target_ratio_<anchor>"}.

  python bench/cl.py                # all cases
  python bench/cl.py matmul         # one case

matmul: 1024x1024 @ 1024x1024 float32 GFLOPS on CL against the CPU backend (PoCL compiles OpenCL for the same CPU, so
the ratio shows what the work-group lowering costs). sum_16m: a sum of 16M floats, GB/s against NumPy. second_run:
a script run twice in fresh processes over one new cache: programs built from source by the second (0 wanted), and
files the compilers added to the cache (ours and PoCL's) in the second."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from tinyhybrid import Device, Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_of  # noqa: E402


def interleaved(fns: dict[str, Callable[[], object]], rounds: int = 3, **kw) -> dict[str, float]:
  """best_of of each fn in alternating rounds: a burst of other work on a shared machine slows every contender."""
  best: dict[str, float] = {}
  for _ in range(rounds):
    for name, fn in fns.items(): best[name] = min(best.get(name, float("inf")), best_of(fn, **{"reps": 5, **kw}))
  return best


def emit(case: str, unit: str, ours: float, anchors: dict[str, float], targets: dict[str, float], higher_is_better: bool = True, **extra) -> None:
  line: dict = {"bench": "cl", "case": case, "unit": unit, "ours": round(ours, 4)}
  for name, v in anchors.items():
    line[name] = round(v, 4)
    line[f"ratio_{name}"] = round(ours / v if higher_is_better else v / ours, 3)
    if name in targets: line[f"target_ratio_{name}"] = targets[name]
  print(json.dumps({**line, **extra}), flush=True)


def _run(dev: str, fn: Callable[[], Tensor]) -> Callable[[], None]:
  def go() -> None:
    fn().realize()
    Device[dev].synchronize()
  return go


def case_matmul() -> None:
  n = 1024
  a_np, b_np = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  fns = {}
  for dev in ("CL", "CPU"):
    a, b = Tensor(a_np, device=dev).realize(), Tensor(b_np, device=dev).realize()
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-4)
    fns[dev] = _run(dev, lambda a=a, b=b: a @ b)
  t = interleaved(fns)
  gf = lambda s: 2 * n**3 / s / 1e9  # noqa: E731
  emit("matmul_1024", "GFLOPS", gf(t["CL"]), {"cpu": gf(t["CPU"])}, {"cpu": 0.4})


def case_sum_16m() -> None:
  n = 16 * 1024 * 1024
  x_np = np.random.rand(n).astype(np.float32)
  x = Tensor(x_np, device="CL").realize()
  np.testing.assert_allclose(x.sum().numpy(), x_np.sum(dtype=np.float64), rtol=1e-4)
  t = interleaved({"CL": _run("CL", lambda: x.sum()), "numpy": lambda: x_np.sum()}, rounds=5, reps=20)  # a few ms each: many tries
  gbs = lambda s: 4 * n / s / 1e9  # noqa: E731
  emit("sum_16m", "GB/s", gbs(t["CL"]), {"numpy": gbs(t["numpy"])}, {"numpy": 0.5})


_SCRIPT = """
import numpy as np
from tinyhybrid import Tensor, TinyJit, nn
from tinyhybrid.runtime.ops_cl import CLDevice
x = Tensor(np.random.rand(33, 64).astype(np.float32), device="CL")
w = Tensor(np.random.rand(64, 48).astype(np.float32), device="CL")
(x @ w).relu().softmax().sum().numpy()
x.max(axis=0).exp().numpy()
step = TinyJit(lambda a: (a * 2 + 1).sum(axis=1).realize())
for _ in range(3): step(x)
print(CLDevice.source_builds)
"""


def case_second_run() -> None:
  """Programs built from source by a second run over the same cache, and files added to the cache by it."""
  with tempfile.TemporaryDirectory() as d:
    env = {**os.environ, "TINYHYBRID_CACHE": d}
    env.pop("POCL_CACHE_DIR", None)  # PoCL's cache goes under ours

    def run() -> tuple[int, int]:
      out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, check=True)
      # files with something in them: PoCL leaves an empty temporary file behind in its cache at every start
      return int(out.stdout.split()[-1]), sum(1 for f in Path(d).rglob("*") if f.is_file() and f.stat().st_size)
    first, files = run()
    second, files2 = run()
  emit("second_run", "builds", second, {}, {}, first_run_builds=first, files_added=files2 - files, target=0)


CASES = {"matmul": case_matmul, "sum_16m": case_sum_16m, "second_run": case_second_run}

if __name__ == "__main__":
  for name in sys.argv[1:] or list(CASES): CASES[name]()
