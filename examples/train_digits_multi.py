#!/usr/bin/env python3
"""The main job (examples/train_digits.py) data-parallel on one machine: the model is replicated on CPU:0..N-1, each
step's batch is sharded across them, and the gradients meet in allreduces (BatchNorm's batch statistics too, so the
step computes what one device would). The whole step runs under TinyJit. Prints the test accuracy of the N-device run
and of the single-device run from the same seed, which agree.

  python examples/train_digits_multi.py [N_DEVICES] [STEPS]"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from tinyhybrid import Tensor, TinyJit, nn
from tinyhybrid.nn.state import get_parameters, get_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_digits import DigitsCNN, load  # noqa: E402  (the main job's model and data)


def train(devices: tuple[str, ...] | None, steps: int, batch: int = 128, seed: int = 0) -> tuple[DigitsCNN, float]:
  """Trains the main job's model, on `devices` (sharding each batch across them) or on the default device (None)."""
  Tensor.manual_seed(seed)
  X_train, _, y_train, _ = load()
  model = DigitsCNN()
  X_all, Y_all = Tensor(X_train), Tensor(y_train)
  if devices:
    for t in get_state_dict(model).values(): t.shard_(devices)  # weights and BatchNorm statistics: a replica each
    X_all, Y_all = X_all.shard(devices), Y_all.shard(devices)
  opt = nn.optim.Adam(get_parameters(model), lr=3e-3)

  @TinyJit
  @Tensor.train()
  def step(idx: Tensor) -> Tensor:
    x, y = X_all[idx], Y_all[idx]
    loss = model(x).sparse_categorical_crossentropy(y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.realize()

  rng = np.random.default_rng(seed)
  start = time.perf_counter()
  for _ in range(steps):
    idx = Tensor(rng.integers(0, len(X_train), batch, dtype=np.int32))
    step(idx.shard(devices, axis=0) if devices else idx)
  return model, time.perf_counter() - start


def accuracy(model: DigitsCNN) -> float:
  _, X_test, _, y_test = load()
  x = Tensor(X_test)
  dev = get_parameters(model)[0].device
  if isinstance(dev, tuple): x = x.shard(dev)
  with Tensor.train(False):
    return float((model(x).argmax(axis=1).numpy() == y_test).mean())


def main(n_devices: int = 2, steps: int = 200) -> dict:
  devices = tuple(f"CPU:{i}" for i in range(n_devices))
  multi, t_multi = train(devices, steps)
  single, t_single = train(None, steps)
  acc_multi, acc_single = accuracy(multi), accuracy(single)
  diff = max(float(np.abs(a.numpy() - b.numpy()).max()) for a, b in zip(get_parameters(multi), get_parameters(single)))
  print(f"{n_devices} devices: test accuracy {acc_multi * 100:.1f}% ({t_multi:.1f} s); one device: {acc_single * 100:.1f}% "
        f"({t_single:.1f} s); largest weight difference {diff:.2e}")
  return {"accuracy_multi": acc_multi, "accuracy_single": acc_single, "max_weight_diff": diff}


if __name__ == "__main__":
  main(*(int(a) for a in sys.argv[1:3]))
