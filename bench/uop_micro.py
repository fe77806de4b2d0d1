#!/usr/bin/env python3
"""Micro-benchmarks of the UOp core against tinygrad, in the same process.

  python bench/uop_micro.py          (tinygrad comes with the bench extra: pip install ".[bench]")

Prints one JSON line per case (see bench/common.py): microseconds per op or per node, ours and tinygrad's,
their ratio (tinygrad / ours) and the ratio issue 2 asks for. Without tinygrad its figures are null.

  uop_create             10^4 constants, UOp.const(dtypes.int, i)                 us/op    target 5x
  add_chain              a = a + a, 10^4 times                                     us/op    target 20x
  toposort_len_chain     len(x.toposort()), x built by x = x + 1 20000 times       us/node  target 20x
  toposort_len_doubling  len(x.toposort()), x built by x = x + x 10000 times       us/node  target 20x
  toposort_visit         toposort of the x + 1 chain, then read .op of every node  us/node  target 5x

Every repetition of the two creation cases builds nodes that do not exist yet (new constant values, a new
variable name), so neither side is timed hitting its intern cache. Per-node figures divide by each side's own
node count (tinygrad's variable is two nodes, ours one). The symbolic and rewrite cases of symbolic_micro.py
follow, under the same "bench" name.
"""
from __future__ import annotations

import gc
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import case, emit, import_tinyhybrid  # noqa: E402

BENCH = "uop_micro"
N_CONST = 10**4
N_ADD = 10**4
N_CHAIN = 20000
N_DOUBLE = 10000


class Side:
  """One implementation's spelling of what the cases need (tinyhybrid and tinygrad differ in small ways)."""
  def __init__(self, const, variable):
    self.const = const        # const(value) -> an int32 constant
    self.variable = variable  # variable(name) -> a variable in [0, 10]

  def toposort_len(self, x) -> int: return len(x.toposort())

  def toposort_visit(self, x) -> None:
    for u in x.toposort(): u.op


def ours() -> Side:
  th = import_tinyhybrid()
  UOp, dtypes = th.UOp, th.dtypes
  return Side(lambda v: UOp.const(dtypes.int, v), lambda name: UOp.variable(name, 0, 10, dtypes.weakint))


def tinygrad() -> Side | None:
  try:
    from tinygrad.dtype import dtypes
    from tinygrad.uop.ops import UOp
  except ImportError:
    return None
  # tinygrad 0.14: UOp.const(value, dtype) value first; toposort() returns a dict
  return Side(lambda v: UOp.const(v, dtypes.int), lambda name: UOp.variable(name, 0, 10, dtypes.weakint))


_fresh = itertools.count(1)


def create(s: Side):
  def run():
    base = next(_fresh) * 1_000_003  # values no earlier repetition made
    return [s.const(base + i) for i in range(N_CONST)]
  return run


def add_chain(s: Side):
  def run():
    a = s.variable(f"a{next(_fresh)}")  # a variable no earlier repetition made
    for _ in range(N_ADD): a = a + a
    return a
  return run


def chain(s: Side):
  x = s.variable("x")
  for _ in range(N_CHAIN): x = x + 1
  return x


def doubling(s: Side):
  x = s.variable("y")
  for _ in range(N_DOUBLE): x = x + x
  return x


def main() -> None:
  o, t = ours(), tinygrad()
  case("uop_create", create(o), create(t) if t else None, N_CONST, "us/op", 5, bench=BENCH)
  case("add_chain", add_chain(o), add_chain(t) if t else None, N_ADD, "us/op", 20, bench=BENCH)

  oc, tc = chain(o), (chain(t) if t else None)
  case("toposort_len_chain", lambda: o.toposort_len(oc), (lambda: t.toposort_len(tc)) if t else None,
       o.toposort_len(oc), "us/node", 20, bench=BENCH, anchor_n=t.toposort_len(tc) if t else None)

  od, td = doubling(o), (doubling(t) if t else None)
  case("toposort_len_doubling", lambda: o.toposort_len(od), (lambda: t.toposort_len(td)) if t else None,
       o.toposort_len(od), "us/node", 20, bench=BENCH, anchor_n=t.toposort_len(td) if t else None)

  case("toposort_visit", lambda: o.toposort_visit(oc), (lambda: t.toposort_visit(tc)) if t else None,
       o.toposort_len(oc), "us/node", 5, bench=BENCH, anchor_n=t.toposort_len(tc) if t else None)

  # the symbolic simplification and rewrite cases (bench/symbolic_micro.py), when that file is present; the chains
  # above (millions of nodes on each side) are freed first, so those cases see the heap they see on their own
  del oc, tc, od, td
  gc.collect()
  try:
    import symbolic_micro
  except ImportError:
    return
  for c in symbolic_micro.cases(): emit({"bench": BENCH, **c()})


if __name__ == "__main__":
  main()
