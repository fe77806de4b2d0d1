#!/usr/bin/env python3
"""A tinygrad-style script: an MLP trained with hand-written SGD on a synthetic problem (which of two interleaved
half-moons a point is on). With tinygrad it runs after changing the import back to `from tinygrad import Tensor`."""
import numpy as np

from tinyhybrid import Tensor


def moons(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  t = rng.uniform(0, np.pi, n)
  cls = rng.integers(0, 2, n)
  pts = np.where(cls[:, None] == 0, np.stack([np.cos(t), np.sin(t)], 1), np.stack([1 - np.cos(t), 0.5 - np.sin(t)], 1))
  return (pts + rng.normal(0, 0.1, (n, 2))).astype(np.float32), cls.astype(np.int32)


def main(steps: int = 300) -> float:
  Tensor.manual_seed(0)
  X, Y = moons(512)
  w1, b1 = Tensor.kaiming_uniform(2, 64, requires_grad=True), Tensor.zeros(64, requires_grad=True)
  w2, b2 = Tensor.kaiming_uniform(64, 64, requires_grad=True), Tensor.zeros(64, requires_grad=True)
  w3, b3 = Tensor.kaiming_uniform(64, 2, requires_grad=True), Tensor.zeros(2, requires_grad=True)
  params = [w1, b1, w2, b2, w3, b3]
  x, y = Tensor(X), Tensor(Y)
  for step in range(steps):
    out = (x @ w1 + b1).relu().linear(w2, b2).relu().linear(w3, b3)
    loss = out.sparse_categorical_crossentropy(y)
    for p in params: p.grad = None
    loss.backward()
    Tensor.realize(*[p.assign(p.detach() - p.grad * 0.5) for p in params])
    if step % 100 == 0: print(f"step {step:4d}  loss {loss.item():.4f}")
  acc = float(((x @ w1 + b1).relu().linear(w2, b2).relu().linear(w3, b3).argmax(1) == y).mean().item())
  print(f"train accuracy: {acc * 100:.1f}%")
  return acc


if __name__ == "__main__":
  main()
