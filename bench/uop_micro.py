#!/usr/bin/env python3
"""UOp micro-benchmarks (issue 2: creation, add chain, toposort) and the symbolic / rewrite cases of
symbolic_micro.py, side by side with tinygrad (bench extra) in the same process. One JSON line per case:
{"bench", "case", "unit", "ours", "tinygrad", "ratio" (tinygrad / ours: how many times faster we are), "target"}.

  python bench/uop_micro.py
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import best_of, emit  # noqa: E402
import symbolic_micro  # noqa: E402

from tinyhybrid import UOp, dtypes  # noqa: E402

try:
  from tinygrad.dtype import dtypes as tdtypes
  from tinygrad.uop.ops import UOp as TUOp
except ImportError: TUOp = None

N_CONSTS, N_ADDS, CHAIN, DOUBLING = 10_000, 10_000, 20_000, 10_000


def _sides() -> list[tuple[str, Any, Any, Callable]]:
  out = [("ours", UOp, dtypes, lambda d, v: UOp.const(d.int, v))]
  if TUOp is not None: out.append(("tinygrad", TUOp, tdtypes, lambda d, v: TUOp.const(v, d.int)))
  return out


def _case(case: str, unit: str, target: float, per: int, make: Callable[[Any, Any, Callable], Callable[[], Any]],
          reps: int = 7) -> None:
  figures: dict[str, float] = {}
  for name, U, d, const in _sides():
    figures[name] = best_of(make(U, d, const), reps=reps) / per * 1e6
  ours, theirs = figures["ours"], figures.get("tinygrad")
  emit({"bench": "uop_micro", "case": case, "unit": unit, "ours": round(ours, 4),
        "tinygrad": None if theirs is None else round(theirs, 4),
        "ratio": None if theirs is None else round(theirs / ours, 2), "target": target})


def uop_create() -> None:
  """10^4 constants (new values each repetition, so nothing is already interned)."""
  counter = [0]
  def make(U, d, const):
    def run():
      counter[0] += 1
      base = counter[0] * 1_000_003
      return [const(d, base + i) for i in range(N_CONSTS)]
    return run
  _case("uop_create", "us/op", 5, N_CONSTS, make)


def add_chain() -> None:
  """a = a + a, 10^4 times (from a new variable each repetition)."""
  counter = [0]
  def make(U, d, const):
    def run():
      counter[0] += 1
      a = U.variable(f"a{counter[0]}", 0, 10, d.weakint)
      for _ in range(N_ADDS): a = a + a
      return a
    return run
  _case("add_chain", "us/op", 20, N_ADDS, make)


def _chain(U, d, n: int, doubling: bool):
  a = U.variable("t", 0, 10, d.weakint)
  for _ in range(n): a = a + a if doubling else a + 1
  return a


def toposort_len() -> None:
  """len(x.toposort()) of a 20001-node chain (x = x + 1), per node."""
  _case("toposort_len_chain", "us/node", 20, CHAIN + 1,
        lambda U, d, c: (lambda root: lambda: len(root.toposort()))(_chain(U, d, CHAIN, False)), reps=9)


def toposort_doubling() -> None:
  """len(x.toposort()) of a 10001-node doubling chain (x = x + x), per node."""
  _case("toposort_len_doubling", "us/node", 20, DOUBLING + 1,
        lambda U, d, c: (lambda root: lambda: len(root.toposort()))(_chain(U, d, DOUBLING, True)), reps=9)


def toposort_visit() -> None:
  """toposort, then read .op of every node in Python (20001-node chain), per node."""
  _case("toposort_visit", "us/node", 5, CHAIN + 1,
        lambda U, d, c: (lambda root: lambda: [u.op for u in root.toposort()])(_chain(U, d, CHAIN, False)), reps=9)


def main() -> None:
  for case in (uop_create, add_chain, toposort_len, toposort_doubling, toposort_visit): case()
  for case in symbolic_micro.cases(): emit({"bench": "uop_micro", **case()})


if __name__ == "__main__":
  main()
