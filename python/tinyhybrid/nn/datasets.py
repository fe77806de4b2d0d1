"""Datasets tinygrad scripts load by name. Files are downloaded once (helpers.fetch) into the cache."""
from __future__ import annotations

from tinyhybrid.tensor import Tensor

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"


def mnist(device: str | None = None, fashion: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(train images, train labels, test images, test labels) as uint8 tensors, images of shape (N, 1, 28, 28), from
  the IDX files (their headers are 16 bytes for images, 8 for labels)."""
  base = FASHION_MNIST_URL if fashion else MNIST_URL

  def idx(name: str, header: int) -> Tensor: return Tensor.from_url(base + name, gunzip=True, device=device)[header:]
  return (idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28), idx("train-labels-idx1-ubyte.gz", 8),
          idx("t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28), idx("t10k-labels-idx1-ubyte.gz", 8))
