"""Collectives across processes and machines, on MPI (mpi4py over the system's Open MPI; `pip install tinyhybrid[mpi]`).

Launch the same program on every process with the MPI launcher (`mpirun -np 4 python train.py`, or across machines
`mpirun --hostfile hosts python train.py`). Each process (a rank) has its own devices and tensors; the collectives
move realized buffers with MPI, straight from and into tensor memory (never pickled Python objects), and return new
tensors on the input's device.

Every collective waits at most `timeout` seconds (init's, or DIST_TIMEOUT, default 300). Each rank first announces to
every other that it reached the call; a rank that died or stopped answering makes the others raise DistributedError
naming it instead of hanging. Collectives first agree on shapes and dtypes, so a mismatch raises on every rank."""
from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from tinyhybrid.dtype import np_storage
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop.buffers import contiguous_buffer

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

__all__ = ["DistributedError", "init", "is_initialized", "rank", "world_size", "allreduce", "broadcast", "all_gather",
           "barrier", "average_gradients"]

_OPS = ("sum", "max", "min", "mean")
_MAX_DIMS = 16
# the launcher variables that carry a process's rank and the world's size (Open MPI, MPICH/Hydra, Slurm)
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")


class DistributedError(RuntimeError):
  """A collective failed on this rank: a peer died or timed out, or the ranks passed mismatched tensors."""


def _pause(started: float) -> None:
  """Between polls of a transfer pending since `started` (time.monotonic()). For the first 20 ms: a yield, so the
  other ranks' arrival is seen within microseconds (a rank waiting for a slower one in lockstep training waits
  milliseconds every step, and a sleep's wake-up would add tens of microseconds to each), while a process sharing
  this core still gets it. Then sleeps growing to 1 ms, so a long wait costs almost no CPU."""
  waited = time.monotonic() - started
  if waited < 0.02: os.sched_yield()
  else: time.sleep(min((waited - 0.02) / 10, 1e-3))


class _World:
  def __init__(self, timeout: float):
    from mpi4py import MPI
    self.MPI, self.comm, self.timeout = MPI, MPI.COMM_WORLD, timeout
    self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
    self.calls = 0
    # average_gradients' last grads (their nodes) and their memory, grouped by dtype
    self.grad_plan: tuple[tuple[Any, ...], list[tuple[DType, list[np.ndarray], np.ndarray]]] | None = None
    self.errhook = sys.excepthook
    sys.excepthook = self._abort_on_uncaught

  def _abort_on_uncaught(self, *exc: Any) -> None:
    # an exception that ends a rank would leave the others in their collectives (and this one hanging in
    # MPI_Finalize): print it, then end the whole job as mpi4py's `-m mpi4py` runner does
    self.errhook(*exc)
    sys.stderr.flush()
    self.comm.Abort(1)

  def wait(self, what: str, reqs: list[Any]) -> None:
    """Waits for reqs until the timeout. Before the data moves, each rank announces its arrival at this call to every
    other, so a timeout can name the ranks that never arrived."""
    started = time.monotonic()
    pending = list(reqs)
    while pending := [r for r in pending if not r.Test()]:
      if time.monotonic() > started + self.timeout: raise DistributedError(f"rank {self.rank}: {what} timed out after {self.timeout:g} s")
      _pause(started)

  def arrive(self, what: str, meta: np.ndarray) -> np.ndarray:
    """Every rank's meta (int64 words), exchanged point to point; ranks that do not arrive in time are named."""
    self.calls += 1
    tag = self.calls % 30000 + 1
    out = np.zeros((self.size, meta.size), np.int64)
    out[self.rank] = meta
    peers = [r for r in range(self.size) if r != self.rank]
    recvs = {p: self.comm.Irecv(out[p], source=p, tag=tag) for p in peers}
    sends = [self.comm.Isend(meta, dest=p, tag=tag) for p in peers]
    started = time.monotonic()
    while missing := [p for p, r in recvs.items() if not r.Test()]:
      if time.monotonic() > started + self.timeout:
        raise DistributedError(f"rank {self.rank}: {what}: rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                               f"did not reach the call within {self.timeout:g} s (dead or stuck)")
      _pause(started)
    self.wait(what, sends)
    return out


_world: _World | None = None


def init(timeout: float | None = None) -> tuple[int, int]:
  """Joins the MPI job the launcher started (its environment says this process's rank and the world's size); returns
  (rank, world_size). A process started without a launcher is a world of one."""
  global _world
  if _world is None:
    try: import mpi4py  # noqa: F401
    except ImportError: raise ImportError("tinyhybrid.distributed needs mpi4py: pip install 'tinyhybrid[mpi]'") from None
    _world = _World(float(timeout if timeout is not None else os.getenv("DIST_TIMEOUT", 300)))
    launched = next((v for v in _RANK_VARS if v in os.environ), None)
    if launched is not None and int(os.environ[launched]) != _world.rank:
      raise DistributedError(f"the launcher says rank {os.environ[launched]} ({launched}), MPI says {_world.rank}")
  elif timeout is not None: _world.timeout = float(timeout)
  return _world.rank, _world.size


def is_initialized() -> bool: return _world is not None


def _get() -> _World:
  if _world is None: raise DistributedError("tinyhybrid.distributed: call init() first")
  return _world


def rank() -> int: return _get().rank
def world_size() -> int: return _get().size


_DT_CODE = {dt: i for i, dt in enumerate((dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                                          dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32,
                                          dtypes.float64, dtypes.bfloat16))}


def _memory(t: Tensor, what: str) -> tuple[Tensor, np.ndarray]:
  """t realized into memory of its own, and that memory as a flat numpy array of its items (no copy)."""
  if isinstance(t.device, tuple): raise TypeError(f"{what}: a sharded tensor ({t.device}); pass one on a single device")
  if t.dtype not in _DT_CODE: raise TypeError(f"{what}: {t.dtype} cannot move over MPI")
  if any(type(d) is not int for d in t.shape): raise ValueError(f"{what}: symbolic shape {t.shape}")
  t = t.contiguous().realize()
  return t, t._buffer().host_memory(write=True).view(np_storage(t.dtype))


def _agree(w: _World, what: str, t: Tensor, extra: int = 0) -> None:
  """Every rank passed the same shape and dtype (and extra: an op or a root); otherwise every rank raises."""
  if len(t.shape) > _MAX_DIMS: raise ValueError(f"{what}: at most {_MAX_DIMS} dimensions, got shape {t.shape}")
  meta = np.full(_MAX_DIMS + 3, -1, np.int64)
  meta[0], meta[1], meta[2] = len(t.shape), _DT_CODE[t.dtype], extra
  meta[3:3 + len(t.shape)] = t.shape
  everyone = w.arrive(what, meta)
  if (everyone != meta).any():
    inv = {v: k for k, v in _DT_CODE.items()}
    def desc(m: np.ndarray) -> str: return f"shape {tuple(int(x) for x in m[3:3 + m[0]])} {inv.get(int(m[1]))}"
    bad = [r for r in range(w.size) if (everyone[r] != meta).any()]
    raise DistributedError(f"rank {w.rank}: {what}: the ranks passed different tensors: " +
                           "; ".join(f"rank {r}: {desc(everyone[r])}" + (f" (arg {everyone[r][2]})" if everyone[r][2] != extra else "")
                                     for r in sorted({w.rank, *bad})))


def _empty_like(t: Tensor, shape: tuple[int, ...] | None = None, dtype: DType | None = None) -> tuple[Tensor, np.ndarray]:
  from tinyhybrid.tensor import Tensor
  out = Tensor.empty(*(shape if shape is not None else t.shape), dtype=dtype or t.dtype, device=t.device)
  return out, out._buffer().host_memory(write=True).view(np_storage(out.dtype))


def allreduce(t: Tensor, op: str = "sum") -> Tensor:
  """A new tensor (on t's device) holding op ("sum", "max", "min" or "mean") of t over every rank."""
  if op not in _OPS: raise ValueError(f"allreduce: op is one of {_OPS}, not {op!r}")
  w = _get()
  t, mem = _memory(t, "allreduce")
  if op == "mean" and not t.dtype._is_float: raise TypeError(f"allreduce: mean of a {t.dtype} tensor; cast it to a float first")
  if t.dtype is dtypes.bfloat16 or (t.dtype is dtypes.bool and op in ("sum", "mean")):
    raise TypeError(f"allreduce: {op} of {t.dtype} is not supported over MPI")
  _agree(w, "allreduce", t, _OPS.index(op))
  out, dst = _empty_like(t)
  mpi_op = {"sum": w.MPI.SUM, "mean": w.MPI.SUM, "max": w.MPI.MAX, "min": w.MPI.MIN}[op]
  if mem.size: w.wait("allreduce", [w.comm.Iallreduce(mem, dst, op=mpi_op)])
  if op == "mean" and w.size > 1: np.divide(dst, w.size, out=dst, casting="unsafe")
  return out


def broadcast(t: Tensor, root: int = 0) -> Tensor:
  """A new tensor (on t's device) holding root's t on every rank (the others' t gives the shape and dtype)."""
  w = _get()
  if not 0 <= root < w.size: raise ValueError(f"broadcast: root {root} is not a rank of a world of {w.size}")
  t, mem = _memory(t, "broadcast")
  _agree(w, "broadcast", t, root)
  out, dst = _empty_like(t)
  if w.rank == root: dst[:] = mem
  if mem.size: w.wait("broadcast", [w.comm.Ibcast(dst, root=root)])
  return out


def all_gather(t: Tensor) -> Tensor:
  """A new tensor (on t's device) of shape (world_size, *t.shape): every rank's t, in rank order."""
  w = _get()
  t, mem = _memory(t, "all_gather")
  _agree(w, "all_gather", t)
  out, dst = _empty_like(t, (w.size, *t.shape))
  if mem.size: w.wait("all_gather", [w.comm.Iallgather(mem, dst)])
  return out


def barrier() -> None:
  """Waits until every rank got here (or raises naming the ranks that did not, after the timeout)."""
  w = _get()
  w.arrive("barrier", np.zeros(1, np.int64))


def average_gradients(params: Iterable[Tensor]) -> None:
  """Averages each param's grad over the ranks, in place (the grad keeps its memory, so a TinyJit that computes the
  grads refills the same buffers on its next replay), with one allreduce over all the grads of a dtype together. Call
  it between backward() and the optimizer's step()."""
  w = _get()
  grads = [p.grad for p in params if p.grad is not None]
  # a jitted backward refills the same buffers every step: when the grads are the nodes of the last call, their
  # memory is known and nothing is planned again
  if w.grad_plan is None or len(w.grad_plan[0]) != len(grads) or any(a is not g.uop for a, g in zip(w.grad_plan[0], grads)):
    groups = _grad_groups(grads)
    w.grad_plan = (tuple(g.uop for g in grads), groups)
  else:  # the plan's memory is used in place: once the submits that compute it (a replay) are done
    for g in grads: g._buffer().host_memory(write=True)
  for dt, mems, flat in w.grad_plan[1]:
    meta = np.zeros(_MAX_DIMS + 3, np.int64)
    meta[:3] = (1, _DT_CODE[dt], flat.size)
    everyone = w.arrive("average_gradients", meta)
    if (everyone != meta).any():
      raise DistributedError(f"rank {w.rank}: average_gradients: the ranks' gradients differ in size: " +
                             ", ".join(f"rank {r}: {int(everyone[r][2])} {dt.name}" for r in range(w.size)))
    if len(mems) > 1: np.concatenate(mems, out=flat)
    if flat.size: w.wait("average_gradients", [w.comm.Iallreduce(w.MPI.IN_PLACE, flat, op=w.MPI.SUM)])
    flat /= w.size
    if len(mems) > 1:
      start = 0
      for m in mems:
        m[:] = flat[start:start + m.size]
        start += m.size


def _grad_groups(grads: list[Tensor]) -> list[tuple[DType, list[np.ndarray], np.ndarray]]:
  """Realizes the grads into memory of their own; per dtype, their memory and a flat buffer for all of them."""
  groups: dict[DType, list[np.ndarray]] = {}
  for g in grads:
    if not g.dtype._is_float or g.dtype is dtypes.bfloat16: raise TypeError(f"average_gradients: a {g.dtype} gradient")
    g.replace(g.contiguous().realize()) if contiguous_buffer(g.uop) is None else g.realize()
    groups.setdefault(g.dtype, []).append(_memory(g, "average_gradients")[1])
  return [(dt, mems, np.empty(sum(m.size for m in mems), mems[0].dtype) if len(mems) > 1 else mems[0])
          for dt, mems in sorted(groups.items(), key=lambda kv: kv[0].name)]
