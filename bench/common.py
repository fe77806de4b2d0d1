"""Shared pieces of the benchmarks: timing and the JSON line each case prints."""
from __future__ import annotations

import gc
import json
import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], reps: int = 7, warmup: int = 2) -> float:
  """Fastest wall time of fn in seconds, runs back to back with the garbage collector paused (after warm-up runs
  that compile kernels and fill caches)."""
  for _ in range(warmup): fn()
  gc.collect()
  gc.disable()
  try:
    times = []
    for _ in range(reps):
      st = time.perf_counter()
      fn()
      times.append(time.perf_counter() - st)
  finally:
    gc.enable()
  return min(times)


def emit(line: dict[str, Any]) -> None:
  print(json.dumps(line), flush=True)
