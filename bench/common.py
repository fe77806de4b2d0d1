"""Shared pieces of the benchmarks in bench/: best-of-N timing and the one-JSON-line-per-case output.

Each case times our implementation and its anchor (tinygrad, NumPy, PyTorch: whatever the case compares
against) in the same process, and prints one line:

  {"bench": ..., "case": ..., "unit": "us/op", "ours": 0.21, "tinygrad": 1.3, "ratio": 6.2, "target": 5}

`ratio` is anchor time / our time (how many times faster we are); `target` is the ratio the case must reach.
A missing anchor prints null for its figure and the ratio. Set BENCH_REPEATS to change N (default 7).

A new case is one call: case(name, ours_fn, anchor_fn, n, unit, target, bench="...")."""
from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any, Callable

REPEATS = int(os.getenv("BENCH_REPEATS", "7"))


def import_tinyhybrid():
  """The tinyhybrid package: the installed one, or else the source tree's python/ (with a built _core)."""
  try:
    import tinyhybrid
  except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import tinyhybrid
  return tinyhybrid


def best_of(fn: Callable[[], Any], repeats: int | None = None, *, reps: int | None = None, warmup: int = 2) -> float:
  """The fastest of `repeats` (or `reps`) calls of fn, in seconds, after `warmup` untimed calls.

  The cyclic GC runs once before timing and is off while timing, as timeit does (a collection between the calls
  would also flush the CPU caches each time). What fn returns is dropped after the clock stops, so freeing it is
  not part of the figure."""
  n = repeats if repeats is not None else reps if reps is not None else REPEATS
  for _ in range(warmup): fn()
  best = float("inf")
  enabled = gc.isenabled()
  gc.collect()
  gc.disable()
  try:
    for _ in range(n):
      t0 = time.perf_counter()
      result = fn()
      t1 = time.perf_counter()
      del result
      best = min(best, t1 - t0)
  finally:
    if enabled: gc.enable()
  return best


def emit(line: dict[str, Any]) -> None:
  """Print one result line."""
  print(json.dumps(line), flush=True)


def case(name: str, ours_fn: Callable[[], Any], anchor_fn: Callable[[], Any] | None, n: int, unit: str,
         target: float | None, *, bench: str, anchor: str = "tinygrad", anchor_n: int | None = None,
         repeats: int | None = None, warmup: int = 2) -> dict:
  """Time one case and print its JSON line.

  ours_fn and anchor_fn each do the whole batch of `n` units once (n ops, or n nodes; anchor_n when the anchor's
  batch has a different size, e.g. a graph with one more node). The figures are microseconds per unit.
  anchor_fn is None when the anchor is not installed."""
  ours = best_of(ours_fn, repeats, warmup=warmup) / n * 1e6
  theirs = best_of(anchor_fn, repeats, warmup=warmup) / (anchor_n or n) * 1e6 if anchor_fn is not None else None
  row = {"bench": bench, "case": name, "unit": unit, "ours": round(ours, 4),
         anchor: round(theirs, 4) if theirs is not None else None,
         "ratio": round(theirs / ours, 2) if theirs is not None and ours > 0 else None, "target": target}
  emit(row)
  return row
