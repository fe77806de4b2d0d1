#!/usr/bin/env python3
"""Register and group tiles of the tensor-core matmul on an NVIDIA GPU: one 8192^3 fp16 matmul (fp32 accumulation)
kernel, planned with the TC action and each of a few UPCAST/LOCAL tilings, compiled, checked on a corner against
NumPy and timed by the device's events. One JSON line per tiling: {"bench": "cuda_tc_sweep", "device", "opts",
"tflops", "max_err_64x64"} (or "error"), then the default plan's for comparison. It picks the default's tile sizes.

  DEV=CUDA python bench/cuda_tc_sweep.py [N]"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid.codegen.gpu import gpu_optimizations
from tinyhybrid.codegen.kernel import Opt, OptOps
from tinyhybrid.codegen.lower import Lowerer
from tinyhybrid.codegen import finalize
from tinyhybrid.device import Buffer
from tinyhybrid.schedule.kernelize import create_schedule, normalize

DEV = Device.canonicalize(os.getenv("DEV", "CUDA"))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 8192

# axes of the unoptimized kernel: 0 the rows (m), 1 the reduce (k), 2 the columns (n); TC makes new axes after them
# (UPCAST m, UPCAST n, LOCAL m, LOCAL n, UNROLL k)
TILINGS = [(um, un, lm, ln, 1) for um, un in ((4, 4), (8, 4), (4, 8), (8, 2), (2, 8)) for lm, ln in ((2, 2), (4, 2), (2, 4), (4, 4), (1, 1))] + \
          [(4, 4, 2, 2, 2), (2, 4, 2, 2, 4), (4, 2, 2, 2, 4)]


def main() -> None:
  dev = Device[DEV]
  rng = np.random.default_rng(0)
  a_np, b_np = rng.standard_normal((N, N), dtype=np.float32).astype(np.float16), rng.standard_normal((N, N), dtype=np.float32).astype(np.float16)
  a, b = Tensor(a_np, device=DEV).realize(), Tensor(b_np, device=DEV).realize()
  key, inputs, _ = normalize([a.matmul(b, dtype=dtypes.float).uop])
  k = Lowerer(create_schedule(key, len(inputs), split_reduce=True).items[0]).lower()
  c = min(N, 64)
  ref = a_np[:c].astype(np.float32) @ b_np[:, :c].astype(np.float32)
  out = Buffer(DEV, k.buffers[0].size, k.buffers[0].dtype)
  plans = [[Opt(OptOps.TC, 0, -1), Opt(OptOps.UPCAST, 2, un), Opt(OptOps.UPCAST, 0, um)] + ([Opt(OptOps.UNROLL, 1, uk)] if uk > 1 else []) +
           ([Opt(OptOps.LOCAL, 2, ln)] if ln > 1 else []) + ([Opt(OptOps.LOCAL, 0, lm)] if lm > 1 else []) for um, un, lm, ln, uk in TILINGS]
  plans.append(gpu_optimizations(k, dev.renderer))
  for opts in plans:
    line: dict = {"bench": "cuda_tc_sweep", "device": DEV, "n": N, "opts": ", ".join(map(str, opts)), "default": opts is plans[-1]}
    try:
      fk = finalize(k, opts, dev.renderer)
      prg = dev.compile(fk.name, dev.renderer.render(fk))
      bufs = {**dict(enumerate(inputs)), k.buffers[0].index: out}
      args = [bufs[x.index].address for x in k.buffers]
      timed = prg.timed or (lambda *a: (lambda t0: (prg.call(*a), dev.synchronize(), time.perf_counter() - t0)[-1])(time.perf_counter()))
      timed(args, fk.launch)  # warm-up
      secs = min(timed(args, fk.launch) for _ in range(5))
      got = out.numpy().reshape(N, N)[:c, :c]
      line.update(tflops=round(2 * N**3 / secs / 1e12, 2), launch=fk.launch, max_err_64x64=round(float(abs(got - ref).max()), 4))
    except Exception as e:  # one tiling that does not apply or fails still lets the others report
      line["error"] = f"{type(e).__name__}: {e}"[:300]
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
  main()
