#!/usr/bin/env python3
"""MPI benchmarks, one JSON line per case (printed by rank 0; see common.py). Run under the launcher:

  mpirun -np 2 python bench/mpi.py [--mb 64] [--steps 10] [--rounds 12]

  allreduce_mpi: tinyhybrid.distributed.allreduce of a 64 MB float32 tensor against a plain mpi4py Allreduce on NumPy
                 buffers of the same size, in the same run (GB/s of the 64 MB). Target: ratio >= 0.7.
  weak_scaling:  the main job's training step (examples/train_digits_mpi.py: forward, backward, gradient average,
                 Adam; the forward-backward and the update each replay as a TinyJit) with a full batch on every rank,
                 against one rank alone with the same batch while the others wait, in turns (same run). Efficiency =
                 alone (rank 0's) / together. Target: >= 0.8. Also: each rank alone (one_rank_each: a core of a shared
                 machine can run slower than the others for seconds, and lockstep goes at the slowest one's pace;
                 ratio_slowest_rank is against the slowest), and every rank stepping at once without the average
                 (all_ranks_no_mpi, the slowest rank's): ratio_hardware (alone / that) is what the cores lose to each
                 other, ratio_mpi (that / together) what averaging and lockstep cost."""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from common import best_of, emit, import_tinyhybrid  # noqa: E402

import_tinyhybrid()
from tinyhybrid import Tensor, TinyJit, nn  # noqa: E402
from tinyhybrid import distributed as dist  # noqa: E402
from tinyhybrid.nn.state import get_parameters  # noqa: E402
from train_digits import DigitsCNN, load  # noqa: E402


def allreduce_case(mb: int) -> None:
  from mpi4py import MPI
  n = mb * (1 << 20) // 4
  t = Tensor(np.full(n, dist.rank() + 1.0, np.float32)).realize()
  src, dst = np.full(n, dist.rank() + 1.0, np.float32), np.empty(n, np.float32)

  def ours() -> None: dist.allreduce(t).realize()
  def plain() -> None: MPI.COMM_WORLD.Allreduce(src, dst)
  t_ours, t_plain = best_of(ours, 5), best_of(plain, 5)
  assert float(dist.allreduce(t).numpy()[0]) == sum(range(1, dist.world_size() + 1))
  if dist.rank() == 0:
    gb = n * 4 / 1e9
    emit({"bench": "mpi", "case": f"allreduce_mpi{dist.world_size()}_{mb}MB", "unit": "GB/s", "ours": round(gb / t_ours, 3),
          "mpi4py": round(gb / t_plain, 3), "ratio": round(t_plain / t_ours, 3), "target": 0.7})


def weak_scaling_case(steps: int, rounds: int, batch: int = 128) -> None:
  Tensor.manual_seed(0)
  X_train, _, y_train, _ = load()
  model = DigitsCNN()
  opt = nn.optim.Adam(get_parameters(model), lr=3e-3)
  X_all, Y_all = Tensor(X_train), Tensor(y_train)

  @TinyJit
  @Tensor.train()
  def forward_backward(idx: Tensor) -> Tensor:
    loss = model(X_all[idx]).sparse_categorical_crossentropy(Y_all[idx])
    opt.zero_grad()
    loss.backward()
    return loss.realize(*[p.grad for p in opt.params], *opt.buffers)

  @TinyJit
  @Tensor.train()
  def update() -> Tensor:
    opt.step()
    return opt.params[0]

  idx = Tensor(np.random.default_rng(dist.rank()).integers(0, len(X_train), batch, dtype=np.int32))

  def step(average: bool) -> None:
    with Tensor.train():
      forward_backward(idx)
      if average: dist.average_gradients(opt.params)
      update()

  for _ in range(3): step(True)
  # windows of each rank alone, of every rank together, and of every rank stepping at once without averaging (what the
  # machine's cores lose to each other, with no MPI in it), taken in turns (a shared machine's speed drifts over a
  # run), the best of each
  def window(average: bool) -> float: return best_of(lambda: [step(average) for _ in range(steps)], 1, warmup=0) / steps

  def busy_window(seconds: float) -> float:
    # every rank steps for the same time (not the same count, which would leave the slower one alone at the end)
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds: step(False); n += 1
    return (time.perf_counter() - start) / n

  n = dist.world_size()
  alone, together, apart = np.full(n, np.inf), float("inf"), float("inf")
  for _ in range(rounds):
    for r in range(n):  # each rank alone in turn: a core of a shared machine can be slower than the others for seconds
      dist.barrier()
      if dist.rank() == r: alone[r] = min(alone[r], window(False))
    dist.barrier()
    together = min(together, window(True))
    dist.barrier()
    apart = min(apart, busy_window(steps * together))
  # each rank's best alone is known only to it, and so is its best without averaging (the slowest sets the pace)
  alone = dist.allreduce(Tensor(alone.astype(np.float32)), "min").numpy()
  apart = float(dist.allreduce(Tensor([apart], dtype="float32"), "max").item())
  if dist.rank() == 0:
    emit({"bench": "mpi", "case": f"weak_scaling_{n}ranks", "unit": "ms/step", "ours": round(together * 1e3, 2),
          "one_rank": round(float(alone[0]) * 1e3, 2), "ratio": round(float(alone[0]) / together, 3), "target": 0.8,
          "one_rank_each": [round(float(a) * 1e3, 2) for a in alone], "ratio_slowest_rank": round(float(alone.max()) / together, 3),
          "all_ranks_no_mpi": round(apart * 1e3, 2), "ratio_hardware": round(float(alone[0]) / apart, 3), "ratio_mpi": round(apart / together, 3)})

if __name__ == "__main__":
  ap = argparse.ArgumentParser()
  ap.add_argument("--mb", type=int, default=64)
  ap.add_argument("--steps", type=int, default=10)
  ap.add_argument("--rounds", type=int, default=12)
  args = ap.parse_args()
  dist.init()
  allreduce_case(args.mb)
  weak_scaling_case(args.steps, args.rounds)
