#!/usr/bin/env python3
"""A tour of tinyhybrid: the UOp graph core (interning, walks, native simplification) and a Tensor computation
that runs as compiled C kernels on the CPU, checked against NumPy."""
import pickle
import time

import numpy as np

from tinyhybrid import Tensor, UOp, dtypes, _core
from tinyhybrid.dtype import least_upper_dtype


def main() -> None:
  print("== the graph core ==")
  base = _core.live_uop_count()
  x, y = UOp.variable("x", 0, 63, dtypes.weakint), UOp.variable("y", 0, 15, dtypes.weakint)
  idx = (x * 4 + y * 8 + 3) // 4 + (x * 2 + 5 + x * 4) % 2
  print(f"index expression : {idx.render()}")
  print(f"simplified       : {idx.simplify().render()}  (range {idx.simplify().vmin}..{idx.simplify().vmax})")
  print(f"built twice, one node: {((x + 1) * 2) is ((x + 1) * 2)}")
  order = idx.toposort()
  print(f"toposort: {len(order)} nodes, ops {[u.op.name for u in order][:6]}...")
  print(f"pickle round trip is the same node: {pickle.loads(pickle.dumps(idx)) is idx}")
  print(f"dtypes: {dtypes.float.vec(4)} is {dtypes.float.vec(4).itemsize} bytes; {dtypes.uint8} and {dtypes.int8} promote "
        f"to {least_upper_dtype(dtypes.uint8, dtypes.int8)}")
  chain = x
  st = time.perf_counter()
  for _ in range(100_000): chain = chain + chain
  print(f"a 100,000-add chain built in {(time.perf_counter() - st) * 1e3:.1f} ms, walked: {len(chain.toposort())} nodes")
  del chain, order, idx, x, y
  print(f"live nodes back to {_core.live_uop_count() - base} above where we started")

  print("\n== tensors on the CPU ==")
  rng = np.random.default_rng(0)
  a_np, b_np = rng.standard_normal((64, 32)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  out = (a @ b).relu().softmax(-1)
  loss = out.sum(0).max()
  loss.backward()
  print(f"softmax(relu(a @ b)) matches NumPy: {np.allclose(out.numpy(), _np_softmax(np.maximum(a_np @ b_np, 0)), atol=1e-5)}")
  print(f"d loss / d a has shape {a.grad.shape}, |grad| = {float(np.abs(a.grad.numpy()).sum()):.4f}")


def _np_softmax(z: np.ndarray) -> np.ndarray:
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


if __name__ == "__main__":
  main()
