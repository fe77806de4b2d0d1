#!/usr/bin/env python3
"""The main job: train a small CNN on scikit-learn's handwritten digits (1797 8x8 images, bundled with the package, so
nothing is downloaded), save it as safetensors, load it back into a fresh model and check the accuracy is the same.
With tinygrad it runs after changing the imports to `tinygrad`."""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import trange

from tinyhybrid import Tensor, TinyJit, nn
from tinyhybrid.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


class DigitsCNN:
  def __init__(self):
    self.c1, self.b1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm(16)
    self.c2, self.b2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm(32)
    self.fc = nn.Linear(32 * 2 * 2, 10)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.b1(self.c1(x)).relu().max_pool2d(2)   # 16 x 4 x 4
    x = self.b2(self.c2(x)).relu().max_pool2d(2)   # 32 x 2 x 2
    return self.fc(x.flatten(1))


def load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  digits = load_digits()
  X = (digits.images.astype(np.float32) / 16.0 - 0.5)[:, None]  # N x 1 x 8 x 8, pixel values 0..16 centred
  y = digits.target.astype(np.int32)
  return train_test_split(X, y, test_size=0.2, random_state=0, stratify=y)


def accuracy(model: DigitsCNN, X: np.ndarray, y: np.ndarray) -> float:
  with Tensor.train(False):
    pred = model(Tensor(X)).argmax(axis=1).numpy()
  return float((pred == y).mean())


def main(steps: int = 400, batch: int = 128, seed: int = 0) -> dict:
  Tensor.manual_seed(seed)
  X_train, X_test, y_train, y_test = load()
  model = DigitsCNN()
  opt = nn.optim.Adam(get_parameters(model), lr=3e-3)
  X_all, Y_all = Tensor(X_train), Tensor(y_train)

  @TinyJit
  @Tensor.train()
  def train_step(idx: Tensor) -> tuple[Tensor, Tensor]:
    x, y = X_all[idx], Y_all[idx]
    out = model(x)
    loss = out.sparse_categorical_crossentropy(y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.realize(), (out.argmax(axis=1) == y).float().mean().realize()

  rng = np.random.default_rng(seed)
  start = time.perf_counter()
  for step in (bar := trange(steps, desc="train")):
    loss, acc = train_step(Tensor(rng.integers(0, len(X_train), batch, dtype=np.int32)))
    if step % 10 == 9 or step == steps - 1: bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{acc.item() * 100:.1f}%")
  train_time = time.perf_counter() - start

  test_acc = accuracy(model, X_test, y_test)
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "digits_cnn.safetensors")
    safe_save(get_state_dict(model), path)
    reloaded = DigitsCNN()
    load_state_dict(reloaded, safe_load(path))
    reloaded_acc = accuracy(reloaded, X_test, y_test)
  if reloaded_acc != test_acc: raise RuntimeError(f"the reloaded model scores {reloaded_acc:.4f}, the trained one {test_acc:.4f}")
  print(f"trained {steps} steps of {batch} in {train_time:.1f} s; the model saved as safetensors and reloaded scores the same")
  print(f"test accuracy: {test_acc * 100:.1f}%")
  return {"test_accuracy": test_acc, "train_seconds": train_time}


if __name__ == "__main__":
  main()
