"""A test helper: realize many small tensors with one kernel (flattened, concatenated, then split again), so a
suite with hundreds of cases compiles a handful of kernels instead of hundreds."""
import numpy as np


def realize_batched(tensors):
  flat = [t.flatten() for t in tensors if t.numel()]
  arr = flat[0].cat(*flat[1:]).numpy() if flat else np.zeros(0, np.float32)
  res, off = [], 0
  for t in tensors:
    res.append(arr[off:off + t.numel()].reshape(t.shape))
    off += t.numel()
  return res
