#!/usr/bin/env python3
"""The CUDA backend on an NVIDIA GPU against torch on the same GPU, in the same process. One JSON line per case:
{"bench": "cuda", "device", "case", "unit", "ours", "torch", "ratio", "target"} (ratio: ours / torch; for launch
overhead, microseconds per kernel, target: below it).

  DEV=CUDA python bench/cuda.py          # CUDA C++ through NVRTC
  DEV=CUDA:PTX python bench/cuda.py      # the PTX renderer
  python bench/cuda.py matmul            # one case

matmul_fp16: 8192^3 half matmul accumulated in float, TFLOP/s (target: 50% of torch's), with the kernel's opts,
whether it runs on the tensor cores (mma.sync) and its error on a 64x64 corner against torch; matmul_tc0: the same
with TC=0. add_1gib: a + b of 1 GiB float32 tensors, GB/s counting the bytes read and written (target: 80% of torch's). jit_launch: a TinyJit step of 32
small kernels replayed, microseconds per kernel (target: under 10; torch's figure is its own per-op eager cost)."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable

from tinyhybrid import Device, Tensor, TinyJit, dtypes

DEV = Device.canonicalize(os.getenv("DEV", "CUDA"))


def timed(fn: Callable[[], object], sync: Callable[[], None], reps: int = 10, warmup: int = 3) -> float:
  """The mean seconds of fn over reps runs, after warm-up runs, the device synchronized around them."""
  for _ in range(warmup): fn()
  sync()
  st = time.perf_counter()
  for _ in range(reps): fn()
  sync()
  return (time.perf_counter() - st) / reps


def report(case: str, unit: str, ours: float, theirs: float, target: str, **extra) -> None:
  print(json.dumps({"bench": "cuda", "device": DEV, "case": case, "unit": unit, "ours": round(ours, 3), "torch": round(theirs, 3),
                    "ratio": round(ours / theirs, 3) if theirs else None, "target": target, **extra}), flush=True)


def _last_kernel() -> tuple[str, str]:
  """The opts and whether tensor cores (mma.sync) are in the newest kernel realize compiled."""
  from tinyhybrid.engine import realize
  lk, prg = next(reversed(realize.kernel_cache.values()))
  return ", ".join(map(str, lk.opts)), "mma.sync" in prg.src


def matmul_fp16(tc: int = 1) -> None:
  import torch

  from tinyhybrid.engine import realize
  from tinyhybrid.helpers import Context
  n = 8192
  a, b = Tensor.rand(n, n, device=DEV).cast(dtypes.half).realize(), Tensor.rand(n, n, device=DEV).cast(dtypes.half).realize()
  sync = Device[DEV].synchronize
  realize.schedule_cache.clear()  # compiled schedules are kept by graph: TC must choose anew
  with Context(TC=tc):
    c = a.matmul(b, dtype=dtypes.float).realize()
    opts, mma = _last_kernel()
    ours = 2 * n**3 / timed(lambda: a.matmul(b, dtype=dtypes.float).realize(), sync) / 1e12
  # correctness on a corner: the first 64x64 block against torch's (fp32 accumulation both)
  ta, tb = torch.from_numpy(a.numpy()).cuda(), torch.from_numpy(b.numpy()).cuda()
  ref = (ta[:64].float() @ tb[:, :64].float()).cpu().numpy()
  err = float(abs(c[:64, :64].numpy() - ref).max())
  theirs = 2 * n**3 / timed(lambda: torch.matmul(ta, tb), torch.cuda.synchronize) / 1e12
  report("matmul_fp16" if tc else "matmul_fp16_tc0", "TFLOP/s", ours, theirs, "ratio >= 0.5" if tc else "(TC=0, for comparison)",
         tensor_cores=mma, opts=opts, max_err_64x64=round(err, 4))


def add_1gib() -> None:
  import torch
  n = (1 << 30) // 4
  a, b = Tensor.rand(n, device=DEV).realize(), Tensor.rand(n, device=DEV).realize()
  sync = Device[DEV].synchronize
  ours = 3 * n * 4 / timed(lambda: (a + b).realize(), sync) / 1e9
  ta, tb = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
  theirs = 3 * n * 4 / timed(lambda: ta + tb, torch.cuda.synchronize) / 1e9
  report("add_1gib", "GB/s", ours, theirs, "ratio >= 0.8")


def jit_launch() -> None:
  import torch
  kernels = 32

  @TinyJit
  def step(x: Tensor) -> Tensor:
    for _ in range(kernels): x = (x * 1.0001 + 0.5).contiguous()
    return x.realize()

  x = Tensor.rand(1024, device=DEV).realize()
  sync = Device[DEV].synchronize
  ours = timed(lambda: step(x), sync, reps=50) / kernels * 1e6
  tx = torch.rand(1024, device="cuda")

  def torch_step() -> None:
    y = tx
    for _ in range(kernels): y = torch.add(y * 1.0001, 0.5)
  theirs = timed(torch_step, torch.cuda.synchronize, reps=50) / (2 * kernels) * 1e6
  report("jit_launch", "us/kernel", ours, theirs, "ours < 10")


CASES = {"matmul": matmul_fp16, "add": add_1gib, "launch": jit_launch, "matmul_tc0": lambda: matmul_fp16(0)}  # TC=0 last: the least needed

if __name__ == "__main__":
  for name in sys.argv[1:] or list(CASES):
    try: CASES[name]()
    except Exception as e:  # one failing case still lets the others report
      print(json.dumps({"bench": "cuda", "device": DEV, "case": name, "error": f"{type(e).__name__}: {e}"[:2000]}), flush=True)
