#!/usr/bin/env python3
"""Symbolic simplification and Python-callback rewrite micro-benchmarks, side by side with tinygrad in the same process.

cases() returns the cases as plain functions; each runs its measurement and returns a dict
{"case", "unit", "ours", "tinygrad", "ratio", "target", ...} where ratio = tinygrad / ours (how many times faster
we are) and target is the ratio to reach. Run this file to print one JSON line per case.

Fairness: tinygrad caches per node (vmin/vmax, match state) and interns nodes, so every repetition builds fresh
expressions on both sides (new constants, or variables whose names carry the repetition index), outside the timed
region, and times the first simplify/rewrite of each. Rule sets are built (and tinygrad's compiled) before timing.
"""
from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
from typing import Any, Callable

from tinyhybrid import Ops, UOp, dtypes
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite

try:
  from tinygrad.dtype import dtypes as tdtypes
  from tinygrad.uop.ops import UOp as TUOp, UPat as TUPat, PatternMatcher as TPM, graph_rewrite as tgr, Ops as TOps
  HAVE_TINYGRAD = True
except ImportError:  # the numbers of our side still print
  HAVE_TINYGRAD = False


# ---------------------------------------------------------------- the two sides

class Side:
  """What a case needs from one implementation: constants, variables, simplify, node count."""
  def __init__(self, name: str):
    self.name = name
    if name == "ours":
      self.W, self.U = dtypes.weakint, UOp
      self.const = lambda v, d=None: UOp.const(d or dtypes.weakint, v)
    else:
      self.W, self.U = tdtypes.weakint, TUOp
      self.const = lambda v, d=None: TUOp.const(v, d or tdtypes.weakint)

  def var(self, name: str, lo: int, hi: int): return self.U.variable(name, lo, hi, self.W)

  def nodes(self, u) -> int:
    # tinygrad 0.14's variable is a BUFFER over an empty STACK; that STACK is not counted (ours is one DEFINE_VAR)
    return sum(1 for n in u.toposort() if not (n.op.name == "STACK" and len(n.src) == 0))


def _sides() -> list[Side]: return [Side("ours")] + ([Side("tinygrad")] if HAVE_TINYGRAD else [])


def _time_batch(fn: Callable, items: list) -> float:
  """Seconds for fn over every item (gc off while timing)."""
  gc.collect()
  gc.disable()
  try:
    t0 = time.perf_counter_ns()
    for x in items: fn(x)
    return (time.perf_counter_ns() - t0) / 1e9
  finally:
    gc.enable()


def _result(case: str, unit: str, ours: float, theirs: float | None, target: float, **extra: Any) -> dict:
  ratio = None if theirs is None or ours <= 0 else round(theirs / ours, 2)
  return {"case": case, "unit": unit, "ours": round(ours, 4), "tinygrad": None if theirs is None else round(theirs, 4),
          "ratio": ratio, "target": target, **extra}


def _simplify_case(case: str, build: Callable[[Side, int, int], Any], target: float, batch: int, reps: int) -> dict:
  """us per simplify: each repetition builds `batch` fresh expressions per side, then times their simplify."""
  per: dict[str, list[float]] = {s.name: [] for s in _sides()}
  for s in _sides():  # warm up: imports, rule compilation
    for k in range(3): build(s, -1, k).simplify()
  for rep in range(reps):
    for s in _sides():
      exprs = [build(s, rep, k) for k in range(batch)]
      per[s.name].append(_time_batch(lambda e: e.simplify(), exprs) / batch * 1e6)
  ours = statistics.median(per["ours"])
  theirs = statistics.median(per["tinygrad"]) if "tinygrad" in per else None
  return _result(case, "us/simplify", ours, theirs, target, batch=batch, reps=reps)


# ---------------------------------------------------------------- cases

def simplify_a_plus_a() -> dict:
  """(a+a).simplify() with a a constant (a new constant each time)."""
  def build(s: Side, rep: int, k: int):
    a = s.const(100_000 * (rep + 2) + k)
    return a + a
  return _simplify_case("simplify_a_plus_a", build, 50, batch=500, reps=7)


def simplify_like_terms() -> dict:
  """((x*2)+5+(x*4)+(y*2)+y).simplify()"""
  def build(s: Side, rep: int, k: int):
    x, y = s.var(f"x_{rep}_{k}", 0, 100), s.var(f"y_{rep}_{k}", 0, 100)
    return (x * 2) + 5 + (x * 4) + (y * 2) + y
  return _simplify_case("simplify_like_terms", build, 50, batch=200, reps=7)


def simplify_divmod() -> dict:
  """((x*4+y*8)//(z*2)).simplify()"""
  def build(s: Side, rep: int, k: int):
    x, y, z = s.var(f"x_{rep}_{k}", 0, 100), s.var(f"y_{rep}_{k}", 0, 100), s.var(f"z_{rep}_{k}", 1, 10)
    return (x * 4 + y * 8) // (z * 2)
  return _simplify_case("simplify_divmod", build, 50, batch=200, reps=7)


def simplify_divmod_repeat(batch: int = 500, reps: int = 7) -> dict:
  """((x*4+y*8)//(z*2)).simplify() on one expression again and again, x, y and z in [0, 10]: the fixed cost of a call
  (issue 19). Ours keeps the answer on the node (the native rules read only the node, so it never changes): a call
  after the first is a load; tinygrad rewrites the expression again."""
  per: dict[str, list[float]] = {s.name: [] for s in _sides()}
  exprs = {}
  for s in _sides():
    x, y, z = (s.var(n, 0, 10) for n in ("x_rep", "y_rep", "z_rep"))
    exprs[s.name] = e = (x * 4 + y * 8) // (z * 2)
    for _ in range(3): e.simplify()
  for _ in range(reps):
    for s in _sides(): per[s.name].append(_time_batch(lambda e: e.simplify(), [exprs[s.name]] * batch) / batch * 1e6)
  ours = statistics.median(per["ours"])
  theirs = statistics.median(per["tinygrad"]) if "tinygrad" in per else None
  return _result("simplify_divmod_repeat", "us/simplify", ours, theirs, 50, batch=batch, reps=reps)


def corpus_trees(n: int = 200, depth: int = 5, seed: int = 1234) -> list[tuple]:
  """n random index expressions as trees: +, and * // % by constants 2..9, over 3 variables bounded by 3..255."""
  rng = random.Random(seed)
  out = []
  for _ in range(n):
    his = tuple(rng.randint(3, 255) for _ in range(3))
    def gen(d: int) -> tuple:
      if d == 0 or rng.random() < 0.15:
        return ("var", rng.randrange(3)) if rng.random() < 0.85 else ("const", rng.randint(0, 9))
      op = rng.choice(["add", "add", "mul", "div", "mod"])
      if op == "add": return ("add", gen(d - 1), gen(d - 1))
      return (op, gen(d - 1), rng.randint(2, 9))
    out.append((his, gen(depth)))
  return out


def build_tree(s: Side, tree: tuple, tag: str):
  his, t = tree
  vs = [s.var(f"{n}_{tag}", 0, h) for n, h in zip("abc", his)]
  def b(u: tuple):
    if u[0] == "var": return vs[u[1]]
    if u[0] == "const": return s.const(u[1])
    if u[0] == "add": return b(u[1]) + b(u[2])
    x = b(u[1])
    return x * u[2] if u[0] == "mul" else x // u[2] if u[0] == "div" else x % u[2]
  return b(t)


def simplify_corpus(reps: int = 5) -> dict:
  """200 random index expressions (depth 5), us per expression; node counts after simplify against tinygrad's."""
  trees = corpus_trees()
  sides = _sides()
  per: dict[str, list[float]] = {s.name: [] for s in sides}
  for s in sides:
    for t in trees[:3]: build_tree(s, t, "warm").simplify()
  for rep in range(reps):
    for s in sides:
      exprs = [build_tree(s, t, f"{rep}_{i}") for i, t in enumerate(trees)]
      per[s.name].append(_time_batch(lambda e: e.simplify(), exprs) / len(exprs) * 1e6)
  extra: dict[str, Any] = {"expressions": len(trees), "reps": reps}
  counts = {s.name: [s.nodes(build_tree(s, t, f"count_{i}").simplify()) for i, t in enumerate(trees)] for s in sides}
  extra["nodes_ours"] = sum(counts["ours"])
  if "tinygrad" in counts:
    extra["nodes_tinygrad"] = sum(counts["tinygrad"])
    extra["not_larger_frac"] = round(sum(o <= t for o, t in zip(counts["ours"], counts["tinygrad"])) / len(trees), 3)
    extra["not_larger_target"] = 0.95
  ours = statistics.median(per["ours"])
  theirs = statistics.median(per["tinygrad"]) if "tinygrad" in per else None
  return _result("simplify_corpus", "us/expression", ours, theirs, 50, **extra)


# Rules for the callback benchmark: module-level and closure-free (tinygrad's rule compiler requires it); each builds
# with the class of the node it gets, so one function serves both implementations.
# (UOp.const takes (value, dtype) in tinygrad; ours takes either order.)
def _fold_add(p, q): return type(p).const(p.arg + q.arg, p.dtype)
def _fold_mul(p, q): return type(p).const(p.arg * q.arg, p.dtype)


def _callback_rules(U, PM, ops):
  return PM([
    (U(ops.ADD, src=[U.var("x"), U(ops.CONST, arg=0)]), lambda x: x),
    (U(ops.MUL, src=[U.var("x"), U(ops.CONST, arg=1)]), lambda x: x),
    (U(ops.ADD, src=(U.cvar("p"), U.cvar("q"))), _fold_add),
    (U(ops.MUL, src=(U.cvar("p"), U.cvar("q"))), _fold_mul),
  ])


def callback_graph(s: Side, tag: str, seed: int = 7, target_nodes: int = 2000):
  """A DAG of ~target_nodes distinct nodes mixing ADD/MUL over variables, with x+0, x*1 and c+c, c*c for the rules to
  find (the same shape on both sides: one seeded generator)."""
  rng = random.Random(seed)
  d = s.W
  op_add, op_mul, op_sink = (Ops.ADD, Ops.MUL, Ops.SINK) if s.name == "ours" else (TOps.ADD, TOps.MUL, TOps.SINK)
  seen: set = set()
  def mk(op, a, b):
    n = s.U(op, d, (a, b))
    seen.add(n)
    return n
  def const(v):
    c = s.const(v)
    seen.add(c)
    return c
  nodes = [s.var(f"v{i}_{tag}", 0, 100) for i in range(16)]
  seen.update(nodes)
  while len(seen) < target_nodes:
    r = rng.random()
    a, b = rng.choice(nodes[-200:]), rng.choice(nodes[-200:])
    if r < 0.2: n = mk(op_add, a, const(0))
    elif r < 0.35: n = mk(op_mul, a, const(1))
    elif r < 0.5: n = mk(op_add, mk(op_add, const(rng.randint(2, 50)), const(rng.randint(2, 50))), a)
    elif r < 0.55: n = mk(op_mul, mk(op_mul, const(rng.randint(2, 9)), const(rng.randint(2, 9))), a)
    else: n = mk(op_add if r < 0.8 else op_mul, a, b)
    nodes.append(n)
  # the sink holds every node without a user, so the whole graph is rewritten
  used = {x for n in nodes for x in n.src}
  return s.U(op_sink, dtypes.void if s.name == "ours" else tdtypes.void, tuple(n for n in nodes if n not in used))


def rewrite_python_callbacks(reps: int = 7) -> dict:
  """graph_rewrite with Python-callback rules over a ~2000-node graph, us per call (a fresh graph per call)."""
  sides = _sides()
  pms = {"ours": _callback_rules(UPat, PatternMatcher, Ops)}
  if HAVE_TINYGRAD: pms["tinygrad"] = _callback_rules(TUPat, TPM, TOps)
  rewrite = {"ours": lambda g: graph_rewrite(g, pms["ours"]), "tinygrad": lambda g: tgr(g, pms["tinygrad"])}
  results: dict[str, list] = {}
  for s in sides:  # warm up and check the two agree on the result's size
    results[s.name] = [s.nodes(rewrite[s.name](callback_graph(s, "warm"))), s.nodes(callback_graph(s, "warm"))]
  per: dict[str, list[float]] = {s.name: [] for s in sides}
  calls = 5
  for rep in range(reps):
    for s in sides:
      graphs = [callback_graph(s, f"{rep}_{k}") for k in range(calls)]
      per[s.name].append(_time_batch(rewrite[s.name], graphs) / calls * 1e6)
  ours = statistics.median(per["ours"])
  theirs = statistics.median(per["tinygrad"]) if "tinygrad" in per else None
  extra = {"graph_nodes": results["ours"][1], "result_nodes_ours": results["ours"][0]}
  if "tinygrad" in results: extra["result_nodes_tinygrad"] = results["tinygrad"][0]
  return _result("rewrite_python_callbacks", "us/call", ours, theirs, 3, **extra)


def cases() -> list[Callable[[], dict]]:
  """The benchmark cases, each a function returning its result dict."""
  return [simplify_a_plus_a, simplify_like_terms, simplify_divmod, simplify_divmod_repeat, simplify_corpus, rewrite_python_callbacks]


def main() -> None:
  only = set(sys.argv[1:])
  for c in cases():
    if only and c.__name__ not in only: continue
    print(json.dumps(c()), flush=True)


if __name__ == "__main__":
  main()
