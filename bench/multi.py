#!/usr/bin/env python3
"""Multi-device benchmarks, one JSON line per case (see common.py):

  allreduce_cpu4: a 64 MB float32 allreduce (sum) over CPU:0..3: each device holds 64 MB and ends with the 64 MB sum
                  (tinygrad's choice of algorithm there: ring). Figures, as NCCL's tests define them:
                    algbw = S / t, S = 64 MB (the bytes of one device's buffer), t the allreduce's time;
                    busbw = algbw * 2(n-1)/n (n = 4 devices: 1.5 x algbw), the bandwidth a ring's links carry, which is
                            the figure allreduce is compared by;
                    memcpy = S / t_memcpy, one thread's copy (NumPy copyto) of the same 64 MB, measured in this run.
                  Target: busbw / memcpy >= 0.5 (`ratio`; `ratio_algbw` is algbw / memcpy).
                  On CPU:N the devices share the host's memory, so the reduce kernels read the other devices' chunks in
                  place and only the gather is copies (engine/multi.py); the devices' queues each use every core.
  jit_replay_per_kernel: a jitted MLP training step replayed, microseconds per kernel (copies count as kernels),
                  sharded over CPU:0..1 (data parallel) against the same step on one device, both in this run.
                  Target: ours within 1.5x of it (ratio = single / sharded >= 0.67).

  python bench/multi.py [--mb 64]
The MPI cases are in bench/mpi.py (run under mpirun)."""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import best_of, emit, import_tinyhybrid  # noqa: E402

th = import_tinyhybrid()
from tinyhybrid import Tensor, TinyJit, nn  # noqa: E402
from tinyhybrid.engine.realize import count_runs  # noqa: E402,F401
from tinyhybrid.helpers import GlobalCounters  # noqa: E402
from tinyhybrid.nn.state import get_parameters  # noqa: E402


def allreduce_case(mb: int) -> None:
  devices = tuple(f"CPU:{i}" for i in range(4))
  n = mb * (1 << 20) // 4
  shards = Tensor.empty(4, n).shard(devices, axis=0).realize()
  for u, d in zip(shards.uop.src, shards.device):  # distinct values per device
    Tensor(u, device=d).assign(Tensor.full((1, n), float(len(d)), device=d)).realize()

  def ours() -> None: shards.sum(0).realize()
  src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
  t_ours, t_copy = best_of(ours, 3, warmup=1), best_of(lambda: np.copyto(dst, src), 5)
  gb = n * 4 / 1e9
  algbw, memcpy = gb / t_ours, gb / t_copy
  busbw = algbw * 2 * (len(devices) - 1) / len(devices)
  emit({"bench": "multi", "case": f"allreduce_cpu4_{mb}MB", "unit": "GB/s", "ours": round(busbw, 3), "algbw": round(algbw, 3),
        "busbw": round(busbw, 3), "memcpy": round(memcpy, 3), "ratio": round(busbw / memcpy, 3),
        "ratio_algbw": round(algbw / memcpy, 3), "ms": round(t_ours * 1e3, 2), "target": 0.5})


def replay_case() -> None:
  def step_time(devices: tuple[str, ...] | None) -> float:
    Tensor.manual_seed(0)
    l1, l2 = nn.Linear(64, 64), nn.Linear(64, 10)
    params = get_parameters([l1, l2])
    if devices:
      for p in params: p.shard_(devices)
    opt = nn.optim.SGD(params, lr=0.01)

    @TinyJit
    @Tensor.train()
    def step(x: Tensor, y: Tensor) -> Tensor:
      loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
      opt.zero_grad()
      loss.backward()
      opt.step()
      return loss.realize()

    def inputs():
      x, y = Tensor.randn(32, 64).realize(), Tensor(np.random.randint(0, 10, 32).astype(np.int32))
      return (x.shard(devices, axis=0).realize(), y.shard(devices, axis=0).realize()) if devices else (x, y)
    xs = inputs()
    for _ in range(3): step(*xs)
    GlobalCounters.reset()
    step(*xs)
    kernels = max(1, GlobalCounters.kernel_count)
    return best_of(lambda: step(*xs), 7) / kernels
  single, multi = step_time(None), step_time(("CPU:0", "CPU:1"))
  emit({"bench": "multi", "case": "jit_replay_per_kernel", "unit": "us/kernel", "ours": round(multi * 1e6, 2),
        "single_device": round(single * 1e6, 2), "ratio": round(single / multi, 3), "target": 0.67})


if __name__ == "__main__":
  ap = argparse.ArgumentParser()
  ap.add_argument("--mb", type=int, default=64)
  args = ap.parse_args()
  allreduce_case(args.mb)
  replay_case()
