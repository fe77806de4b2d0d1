"""The PYTHON device (DEV=PYTHON, tinygrad's name): kernels rendered as Python over NumPy (renderer/python.py) and run
on the host, the work-items of a batch of work-groups in lockstep, so a GPU lowering (work-groups, local ranges,
grouped reduces, vectors, tensor cores) runs and is checked where there is no GPU. DEV=PYTHON::sm_80 (or PYTHON:sm_80)
plans as for that NVIDIA architecture, with its tensor cores. Buffers are host memory; a launch runs at once, in the
caller's thread. An access outside a buffer is `lanes.OutOfBoundsAccess`, which names it."""
from __future__ import annotations

import ctypes
import functools
import time
from typing import Any, Callable

import numpy as np

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, ProfileEvent, Target, profile_events
from tinyhybrid.dtype import from_storage_scalar, to_storage_scalar  # noqa: F401 (tinygrad's tests import them from here)
from tinyhybrid.helpers import PROFILE, prod
from tinyhybrid.renderer.python import PythonRenderer
from tinyhybrid.runtime import lanes

# work-items computed together: enough to make NumPy's per-operation cost small, few enough that a kernel's
# temporaries stay a few MB each
BATCH_LANES = 1 << 16


@functools.lru_cache(maxsize=256)
def _batch_ids(groups: int, local: tuple[int, ...]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
  """For a batch of `groups` work-groups: each work-item's id in its group per dimension, its place in the batch, and
  its group's place in the batch (work-items of a group are neighbours, local dimension 0 the fastest)."""
  size = prod(local)
  lane = np.arange(groups * size, dtype=np.int64)
  place = lane % size
  lid = [place % local[0], place // local[0] % local[1], place // (local[0] * local[1])]
  return lid, lane, lane // size


def _grid_ids(first: np.ndarray, dims: tuple[int, ...]) -> list[np.ndarray]:
  return [first % dims[0], first // dims[0] % dims[1], first // (dims[0] * dims[1])]


class PythonProgram:
  """One kernel: its function, and how it views the buffers at the addresses of a launch."""
  def __init__(self, name: str, src: str):
    scope: dict[str, Any] = {"np": np}
    exec(compile(src, f"<PYTHON kernel {name}>", "exec"), scope)  # noqa: S102 (the source is our renderer's)
    self.name, self.fn = name, scope[name]
    self.buffers: tuple[tuple[Any, int], ...] = scope["BUFFERS"]
    self.nvars: int = scope["VARS"]

  def __call__(self, args: list[int], launch: Any) -> None:
    bufs = [np.ctypeslib.as_array((ctypes.c_uint8 * (n * np.dtype(t).itemsize)).from_address(a)).view(t) if n else np.empty(0, t)
            for a, (t, n) in zip(args, self.buffers)]
    vals = [np.int64(v - (1 << 64) if v >= 1 << 63 else v) for v in args[len(self.buffers):]]
    glob, local = launch if isinstance(launch, tuple) else ((1, 1, 1), (1, 1, 1))
    total, per = prod(glob), max(1, BATCH_LANES // max(prod(local), 1))
    with np.errstate(all="ignore"):  # integer wrap-around, a float division by 0: what the GPU does, silently
      for start in range(0, total, per):
        lid, lane, group = _batch_ids(min(per, total - start), tuple(local))
        self.fn(lanes, np, *bufs, *vals, _grid_ids(group + start, tuple(glob)), lid, lane)


class PythonDevice(Compiled):
  def __init__(self, name: str, renderer: PythonRenderer):
    super().__init__(name, Allocator(), renderer, self._build)

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    out = []
    for name, src in kernels:
      prg = PythonProgram(name, src)
      out.append(CompiledProgram(name, src, 0, self._caller(prg), keepalive=prg))
    return out


  def _caller(self, prg: PythonProgram) -> Callable[[list[int], Any], None]:
    def call(args: list[int], launch: Any) -> None:
      start = time.monotonic_ns()
      prg(args, launch)
      if PROFILE: profile_events.append(ProfileEvent(prg.name, self.name, start, time.monotonic_ns()))
    return call


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is not None: raise ValueError(f"{name}: the PYTHON device renders Python; name an architecture to plan for (PYTHON::sm_80)")
  return PythonDevice(name, PythonRenderer(t.arch))
