#!/usr/bin/env python3
"""A tinygrad-style script: forward and backward of a small CNN, with slicing, setitem and gather on the way."""
import numpy as np

from tinyhybrid import Tensor


def main() -> dict:
  Tensor.manual_seed(1)
  images = Tensor.rand(8, 1, 16, 16)
  labels = Tensor([i % 10 for i in range(8)])
  c1 = Tensor.kaiming_uniform(8, 1, 3, 3, requires_grad=True)
  c2 = Tensor.kaiming_uniform(16, 8, 3, 3, requires_grad=True)
  fc = Tensor.kaiming_uniform(16 * 4 * 4, 10, requires_grad=True)

  x = images.conv2d(c1, padding=1).relu().max_pool2d(2)
  x = x.conv2d(c2, padding=1).relu().avg_pool2d(2)
  logits = x.flatten(1) @ fc
  loss = logits.sparse_categorical_crossentropy(labels)
  loss.backward()

  # indexing on the results: slices, a setitem, and a gather of each row's label logit
  top = logits[:, :5].numpy()
  picked = logits.gather(1, labels.reshape(8, 1)).numpy()[:, 0]
  buf = Tensor.zeros(4, 4).contiguous()
  buf[1:3, ::2] = 7.0
  print(f"loss {loss.item():.4f}, grad norms {[round(float((g.grad ** 2).sum().sqrt().item()), 4) for g in (c1, c2, fc)]}")
  print(f"first logits {np.round(top[0], 3)}, picked {np.round(picked[:3], 3)}")
  return {"loss": loss.item(), "grads": [g.grad.numpy() for g in (c1, c2, fc)], "logits": logits.numpy(),
          "picked": picked, "buf": buf.numpy()}


if __name__ == "__main__":
  main()
