"""Run by tests/test_distributed.py under mpirun: each mode checks tinyhybrid.distributed against NumPy on every rank."""
import os
import signal
import sys
import time

import numpy as np

from tinyhybrid import Tensor, TinyJit, dtypes
from tinyhybrid import distributed as dist


def data(r: int, shape: tuple, dt=np.float32) -> np.ndarray:
  return np.random.default_rng(100 + r).standard_normal(shape).astype(dt)


def collectives(rank: int, size: int) -> None:
  shape = (3, 5, 7)  # 105 items: no power of two
  mine, every = data(rank, shape), np.stack([data(r, shape) for r in range(size)])
  t = Tensor(mine)
  for op, ref in (("sum", every.sum(0)), ("max", every.max(0)), ("min", every.min(0)), ("mean", every.mean(0))):
    out = dist.allreduce(t, op)
    assert out.shape == shape and out.dtype is dtypes.float32 and out.device == t.device
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-6, err_msg=op)
  np.testing.assert_array_equal(t.numpy(), mine)  # the input is left alone
  ints = dist.allreduce(Tensor(np.arange(37, dtype=np.int32) * (rank + 1)), "sum")
  np.testing.assert_array_equal(ints.numpy(), np.arange(37) * sum(range(1, size + 1)))
  lazy = dist.allreduce(Tensor(mine) * 2 + 1, "sum")  # a lazy input is realized first
  np.testing.assert_allclose(lazy.numpy(), (every * 2 + 1).sum(0), rtol=1e-5, atol=1e-5)
  root = size - 1
  b = dist.broadcast(Tensor(mine), root=root)
  np.testing.assert_array_equal(b.numpy(), data(root, shape))
  g = dist.all_gather(Tensor(mine[0]))
  assert g.shape == (size, 5, 7)
  np.testing.assert_array_equal(g.numpy(), every[:, 0])
  dist.barrier()
  # mismatched shapes raise on every rank
  try:
    dist.allreduce(Tensor(np.zeros(4 + (rank == 1), np.float32)))
    raise AssertionError("no error on mismatched shapes")
  except dist.DistributedError as e: assert "different tensors" in str(e) and "rank 1: shape (5,)" in str(e), str(e)
  # gradients averaged in one allreduce
  w = Tensor(np.ones((4, 3), np.float32), requires_grad=True)
  v = Tensor(np.ones(3, np.float32), requires_grad=True)
  ((Tensor(data(rank, (2, 4))) @ w + v) * (rank + 1)).sum().backward()
  dist.average_gradients([w, v])
  xs = [data(r, (2, 4)) for r in range(size)]
  np.testing.assert_allclose(w.grad.numpy(), np.mean([np.repeat(x.sum(0)[:, None] * (r + 1), 3, 1) for r, x in enumerate(xs)], 0), rtol=1e-5)
  np.testing.assert_allclose(v.grad.numpy(), np.full(3, np.mean([2.0 * (r + 1) for r in range(size)])), rtol=1e-6)
  # grads a TinyJit refills in place each step: the later calls reuse the first one's plan of their memory
  u = Tensor(np.ones((4, 3), np.float32), requires_grad=True)

  @TinyJit
  def backward(x: Tensor) -> Tensor:
    u.grad = None
    (x @ u).square().sum().backward()
    return u.grad.realize()

  for step in range(4):
    backward(Tensor(data(10 * step + rank, (2, 4))))
    dist.average_gradients([u])
    want = np.mean([2 * x.T @ (x @ np.ones((4, 3))) for x in (data(10 * step + r, (2, 4)) for r in range(size))], 0)
    np.testing.assert_allclose(u.grad.numpy(), want, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")


def stuck(rank: int, size: int) -> None:
  if rank == 1:
    time.sleep(4)  # stops answering past the others' timeout
    return
  try: dist.allreduce(Tensor(np.ones(8, np.float32)))
  except dist.DistributedError as e:
    print(f"rank {rank} error: {e}", flush=True)
    sys.exit(3)


def killed(rank: int, size: int) -> None:
  if rank == 1: os.kill(os.getpid(), signal.SIGKILL)
  dist.allreduce(Tensor(np.ones(8, np.float32)))


if __name__ == "__main__":
  r, n = dist.init(timeout=float(sys.argv[2]) if len(sys.argv) > 2 else 60)
  {"collectives": collectives, "stuck": stuck, "killed": killed}[sys.argv[1]](r, n)
  print(f"OK rank {r} of {n}", flush=True)
