#!/usr/bin/env python3
"""The main job (examples/train_digits.py) data-parallel across processes with MPI:

  mpirun -np 2 python examples/train_digits_mpi.py [STEPS]

Every rank builds the model from the same seed and draws the same global batch each step; it trains on its own slice
of it, and the gradients are averaged across ranks (tinyhybrid.distributed.average_gradients) before the optimizer
step, so every rank keeps the same weights. BatchNorm normalizes each rank's slice with that slice's statistics
(as data-parallel training without synchronized BatchNorm does); its running statistics are averaged across ranks at
the end.

Rank 0 then trains the same model in one process on the whole batch of every step (BatchNorm taking the statistics of
each rank-sized part, so the computation is the same one) and prints the largest difference between the two sets of
final weights, which is float rounding (the convolutions' biases, which BatchNorm cancels, are left out: see main)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tinyhybrid import Tensor, TinyJit, nn
from tinyhybrid import distributed as dist
from tinyhybrid.nn.state import get_parameters, get_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_digits import DigitsCNN, load  # noqa: E402  (the main job's model and data)


def batches(steps: int, n: int, batch: int, seed: int) -> list[np.ndarray]:
  """The global batches: the same on every rank."""
  rng = np.random.default_rng(seed)
  return [rng.integers(0, n, batch, dtype=np.int32) for _ in range(steps)]


def train(steps: int, parts: int, mine: int | None, batch: int = 128, seed: int = 0, lr: float = 3e-3) -> tuple[DigitsCNN, float]:
  """Trains on slice `mine` of `parts` of each batch, averaging gradients across ranks; with mine None, on all the
  parts in this one process (each part through BatchNorm on its own, the loss their mean)."""
  Tensor.manual_seed(seed)
  X_train, _, y_train, _ = load()
  model = DigitsCNN()
  opt = nn.optim.Adam(get_parameters(model), lr=lr)
  X_all, Y_all = Tensor(X_train), Tensor(y_train)
  size = batch // parts

  @TinyJit
  @Tensor.train()
  def forward_backward(idx: Tensor) -> Tensor:
    # the loss of each part, averaged: one part on a rank, all of them in the single process
    losses = [model(X_all[idx[k * size:(k + 1) * size]]).sparse_categorical_crossentropy(Y_all[idx[k * size:(k + 1) * size]])
              for k in range(idx.shape[0] // size)]
    loss = sum(losses[1:], losses[0]) / len(losses)
    opt.zero_grad()
    loss.backward()
    # BatchNorm's running statistics are assigned here too, so a replay updates them
    return loss.realize(*[p.grad for p in opt.params], *opt.buffers)

  # the update replays too: averaging the gradients (MPI, between the two) fills the same buffers in place
  @TinyJit
  @Tensor.train()
  def update() -> Tensor:
    opt.step()
    return opt.params[0]

  start = time.perf_counter()
  for idx in batches(steps, len(X_train), batch, seed):
    with Tensor.train():
      forward_backward(Tensor(idx if mine is None else idx[mine * size:(mine + 1) * size]))
      if mine is not None: dist.average_gradients(opt.params)
      update()
  return model, time.perf_counter() - start


def accuracy(model: DigitsCNN) -> float:
  _, X_test, _, y_test = load()
  with Tensor.train(False):
    return float((model(Tensor(X_test)).argmax(axis=1).numpy() == y_test).mean())


def main(steps: int = 100, check: bool = True) -> dict:
  rank, world = dist.init()
  model, seconds = train(steps, world, rank)
  # BatchNorm's running statistics saw only this rank's slices: the mean over ranks is the model's
  weights = set(map(id, get_parameters(model)))
  for t in get_state_dict(model).values():
    if id(t) not in weights and t.dtype.name.startswith("float"): t.assign(dist.allreduce(t, "mean")).realize()
  acc = accuracy(model)
  out = {"rank": rank, "world": world, "test_accuracy": acc, "train_seconds": seconds}
  if rank == 0:
    print(f"{world} ranks: {steps} steps in {seconds:.1f} s, test accuracy {acc * 100:.1f}%")
    if check:
      ref, _ = train(steps, world, None)
      # the convolutions' biases feed BatchNorm, which subtracts them again: their gradient is 0 up to rounding, and
      # Adam scales that noise up to steps of about lr, so they are left out (they do not change any output)
      mine_w, ref_w = get_state_dict(model), get_state_dict(ref)
      diff = max(float(np.abs(mine_w[k].numpy() - ref_w[k].numpy()).max()) for k in mine_w
                 if mine_w[k].requires_grad and k not in ("c1.bias", "c2.bias"))
      print(f"largest weight difference from one process on the whole batch: {diff:.2e}")
      out["max_weight_diff"] = diff
  dist.barrier()
  return out


if __name__ == "__main__":
  main(*(int(a) for a in sys.argv[1:2]))
