#!/usr/bin/env python3
"""What VIZ costs, and how fast its page opens. One JSON line per case.

  python bench/viz.py compile                 the main job's compile (examples/train_digits.py's kernels) and a
                                              ResNet-50 forward taken to rendered kernels on DEV=NULL, with the rewrite
                                              tracking of VIZ=1 off and on, each run in a fresh process (target < 3x)
  python bench/viz.py page                    the page of a ResNet-50 forward's session (hundreds of kernels) in
                                              headless chromium: from navigation to the first kernel's graph drawn
                                              (target < 2 s)
  python bench/viz.py off --baseline DIR      the rewrite benchmarks of bench/uop_micro.py and bench/symbolic_micro.py
                                              (our side) with tracking off, against a build without tracking: DIR is
                                              the python/ directory of a source tree at the base revision with its
                                              _core built in (target: under 2% apart). Runs alternate between the two
                                              builds, and each case keeps its best figure on each side, so load on the
                                              machine touches both alike.
  python bench/viz.py off-instr --baseline DIR
                                              the same question answered by instruction counts (valgrind's callgrind)
                                              of a fixed rewrite workload, which load on the machine cannot move

A baseline for `off`: `git archive <base> python | tar -x -C /tmp/base`, then build that revision's _core (or copy it
from an install of that revision) into /tmp/base/python/tinyhybrid/. Its child runs `python -S` with DIR and this
interpreter's site-packages on the path, so an editable install of this tree cannot shadow it.
"""
from __future__ import annotations

import argparse
import json
import os
import site
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child(args: list[str], env: dict[str, str] | None = None, baseline: str | None = None) -> dict:
  cmd = [sys.executable] + (["-S"] if baseline else []) + [__file__, "--child", *args]
  e = {**os.environ, **(env or {})}
  if baseline: e["PYTHONPATH"] = os.pathsep.join([baseline, *site.getsitepackages()])
  r = subprocess.run(cmd, env=e, capture_output=True, text=True, check=False)
  if r.returncode != 0: raise RuntimeError(f"{' '.join(args)} failed:\n{r.stderr[-3000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- compile time, tracking off and on

def run_compile(which: str, track: bool) -> dict:
  from tinyhybrid import _core
  from tinyhybrid.engine.realize import phase_times
  if track: _core.track_enable(True)  # what VIZ=1 switches on while the program runs
  t0 = time.perf_counter()
  if which == "resnet50_forward":
    sys.path.insert(0, HERE)
    import resnet_null
    total = resnet_null.run_case("ours", "forward")
  else:
    import contextlib
    import io
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_digits
    phase_times.update((k, 0.0) for k in phase_times)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()): train_digits.main(steps=4)
    total = time.perf_counter() - t0
  out: dict[str, Any] = {"total": total, "codegen": sum(v for k, v in phase_times.items() if k != "compile"), "phases": dict(phase_times)}
  if track:  # what VIZ=1 adds at exit: the trace decoded into a session
    from tinyhybrid.viz import session
    t1 = time.perf_counter()
    s = session.collect(final=True)
    out.update(collect=time.perf_counter() - t1, kernels=sum(g.kind == "kernel" for g in s.groups),
               rewrites=sum(len(g.calls) for g in s.groups), steps=sum(len(c.steps) for g in s.groups for c in g.calls), nodes=len(s.nodes))
  return out


def report_compile(reps: int) -> None:
  for which, env in (("train_digits", {}), ("resnet50_forward", {"DEV": "NULL", "JIT": "0"})):
    off = [child(["compile", which, "0"], env) for _ in range(reps)]
    on = [child(["compile", which, "1"], env) for _ in range(reps)]
    key = "codegen" if which == "train_digits" else "total"
    o, n = min(r[key] for r in off), min(r[key] for r in on)
    best_on = min(on, key=lambda r: r[key])
    print(json.dumps({"bench": "viz", "case": f"compile_{which}", "unit": "s", "measure": key, "viz_off": round(o, 3), "viz_on": round(n, 3),
                      "ratio": round(n / o, 2), "target": "< 3", "collect_at_exit": round(best_on["collect"], 3),
                      **{k: best_on[k] for k in ("kernels", "rewrites", "steps", "nodes")}, "reps": reps}), flush=True)


# ---------------------------------------------------------------- the page of a ResNet-50

def report_page(reps: int) -> None:
  os.environ.update(DEV="NULL", JIT="0")
  import shutil
  sys.path.insert(0, HERE)
  import resnet_null
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service

  from tinyhybrid import _core
  from tinyhybrid.viz import serve, session
  _core.track_enable(True)
  resnet_null.run_case("ours", "forward")
  s = session.collect(final=True)
  srv = serve.serve(s, port=0, block=False, quiet=True)
  url = f"http://127.0.0.1:{srv.server_address[1]}/"
  opts = webdriver.ChromeOptions()
  opts.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
  for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,850"): opts.add_argument(a)
  d = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/lib/chromium/chromedriver"), options=opts)
  times, nodes = [], 0
  try:
    for _ in range(reps):
      d.get("about:blank")
      t0 = time.perf_counter()
      d.get(url)
      while not d.execute_script("return document.body.dataset.ready && document.querySelector('#graph svg')"):
        if time.perf_counter() - t0 > 60: raise RuntimeError("the page did not open in 60 s")
        time.sleep(0.005)
      times.append(time.perf_counter() - t0)
      nodes = d.execute_script("return document.querySelectorAll('#graph svg g.node').length")
    # then a kernel's whole IR: the first kernel's lowering stage, its output step (the biggest graph a kernel shows)
    t0 = time.perf_counter()
    d.execute_script("[...document.querySelectorAll('.call.stage')].find(e => e.textContent.startsWith('lower')).click()")
    while not d.execute_script("return document.querySelector('#step-title').textContent.includes('input') && document.querySelector('#graph svg')"):
      time.sleep(0.005)
    d.execute_script("document.querySelector('#next-step').click()")
    while not d.execute_script("return document.querySelector('#step-title').textContent.includes('step 1 of 1') && document.querySelector('#graph svg')"):
      if time.perf_counter() - t0 > 60: raise RuntimeError("the lowering stage did not show in 60 s")
      time.sleep(0.005)
    stage_s = time.perf_counter() - t0
    stage_nodes = d.execute_script("return document.querySelectorAll('#graph svg g.node').length")
    size = len(json.dumps(serve.session_json(s)))
  finally:
    d.quit()
    srv.shutdown()
  print(json.dumps({"bench": "viz", "case": "page_resnet50_forward", "unit": "s", "open": round(statistics.median(times), 3),
                    "best": round(min(times), 3), "target": "< 2", "kernels": sum(g.kind == "kernel" for g in s.groups),
                    "rewrites_listed": sum(1 for g in s.groups for c in g.calls if c.steps or c.stage), "index_bytes": size,
                    "first_graph_nodes": nodes, "lower_stage_s": round(stage_s, 3), "lower_stage_nodes": stage_nodes, "reps": reps}), flush=True)


# ---------------------------------------------------------------- tracking off against a build without it

def run_off() -> dict:
  sys.modules["tinygrad"] = None  # type: ignore[assignment]  # our side only: the anchors are measured elsewhere
  sys.path.insert(0, HERE)
  import symbolic_micro
  import uop_micro
  from common import best_of
  o = uop_micro.ours()
  out = {"uop_create": best_of(uop_micro.create(o), 5) / uop_micro.N_CONST * 1e6,
         "add_chain": best_of(uop_micro.add_chain(o), 5) / uop_micro.N_ADD * 1e6}
  oc = uop_micro.chain(o)
  out["toposort_len_chain"] = best_of(lambda: o.toposort_len(oc), 5) / o.toposort_len(oc) * 1e6
  for c in symbolic_micro.cases(): out[c.__name__] = min(c()["ours"] for _ in range(3))
  import tinyhybrid
  out["_from"] = tinyhybrid.__file__
  return out


WORK_SETS, WORK_GRAPHS = 30, 10  # big enough that the import's own run-to-run spread (~0.5% of it) is under 1% here


def run_work(rewrite: bool) -> dict:
  """A fixed rewrite workload for instruction counts: the symbolic corpus's expressions (3 sets) simplified, and the
  Python-callback graphs rewritten. Without `rewrite` only the same graphs are built, so the difference of two counts
  is the rewriting alone."""
  import gc
  gc.disable()  # a collection's cost depends on everything else the process holds: not part of the question
  sys.modules["tinygrad"] = None  # type: ignore[assignment]
  sys.path.insert(0, HERE)
  import symbolic_micro as sm
  side = sm.Side("ours")
  exprs = [sm.build_tree(side, t, f"{rep}_{i}") for rep in range(WORK_SETS) for i, t in enumerate(sm.corpus_trees())]
  graphs = [sm.callback_graph(side, f"g{k}") for k in range(WORK_GRAPHS)]
  pm = sm._callback_rules(sm.UPat, sm.PatternMatcher, sm.Ops)
  if rewrite:
    for e in exprs: e.simplify()
    for g in graphs: sm.graph_rewrite(g, pm)
  return {"exprs": len(exprs), "graphs": len(graphs)}


def instructions(args: list[str], baseline: str | None) -> int:
  """Instructions the child executes, counted by valgrind (callgrind): the same on a busy machine as on an idle one."""
  import re
  import shutil
  if shutil.which("valgrind") is None: raise SystemExit("off-instr needs valgrind")
  cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable] + (["-S"] if baseline else []) + [__file__, "--child", *args]
  e = {**os.environ, "PYTHONHASHSEED": "0", "SKBUILD_EDITABLE_SKIP": "1"}
  if baseline: e["PYTHONPATH"] = os.pathsep.join([baseline, *site.getsitepackages()])
  r = subprocess.run(cmd, env=e, capture_output=True, text=True, check=False)
  if r.returncode != 0: raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
  return int(re.search(r"Collected : (\d+)", r.stderr).group(1))


def report_off_instr(baseline: str, reps: int) -> None:
  # the median of reps counts each: a process's count moves a little from run to run (by ~4M of ~1000M for the import)
  counts = {(side, w): statistics.median(instructions(["work", w], baseline if side == "base" else None) for _ in range(reps))
            for side in ("base", "ours") for w in ("0", "1")}
  base, ours = counts[("base", "1")] - counts[("base", "0")], counts[("ours", "1")] - counts[("ours", "0")]
  print(json.dumps({"bench": "viz", "case": "off_rewrite_instructions", "unit": "instructions", "base": int(base), "viz_off": int(ours),
                    "change_pct": round((ours / base - 1) * 100, 3), "target": "< 2%", "reps": reps,
                    "workload": f"{WORK_SETS * 200} corpus simplify() + {WORK_GRAPHS} Python-callback graph_rewrites of ~2000 nodes"}), flush=True)


def report_off(baseline: str, rounds: int) -> None:
  if not os.path.isfile(os.path.join(baseline, "tinyhybrid", "__init__.py")):
    raise SystemExit(f"--baseline {baseline}: no tinyhybrid package there (give the python/ directory of the base tree)")
  best: dict[str, dict[str, float]] = {"base": {}, "ours": {}}
  for _ in range(rounds):
    for side in ("base", "ours"):
      r = child(["off"], baseline=baseline if side == "base" else None)
      if side == "base" and not r["_from"].startswith(os.path.abspath(baseline)): raise SystemExit(f"the baseline run imported {r['_from']}")
      for k, v in r.items():
        if k != "_from": best[side][k] = min(best[side].get(k, float("inf")), v)
  for k in best["ours"]:
    b, o = best["base"][k], best["ours"][k]
    print(json.dumps({"bench": "viz", "case": f"off_{k}", "unit": "us", "base": round(b, 4), "viz_off": round(o, 4),
                      "change_pct": round((o / b - 1) * 100, 2), "target": "< 2%", "rounds": rounds}), flush=True)


def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("what", nargs="*", default=["compile", "page"], help="compile, page, off")
  p.add_argument("--child", action="store_true")
  p.add_argument("--baseline", help="for off: the python/ directory of a build without tracking")
  p.add_argument("--reps", type=int, default=3)
  args = p.parse_args()
  if args.child:
    if args.what[0] == "compile": print(json.dumps(run_compile(args.what[1], args.what[2] == "1")))
    elif args.what[0] == "off": print(json.dumps(run_off()))
    elif args.what[0] == "work": print(json.dumps(run_work(args.what[1] == "1")))
    return
  for w in args.what:
    if w == "compile": report_compile(args.reps)
    elif w == "page": report_page(max(args.reps, 3))
    elif w == "off":
      if not args.baseline: raise SystemExit("off needs --baseline DIR (see the docstring)")
      report_off(args.baseline, max(args.reps, 5))
    elif w == "off-instr":
      if not args.baseline: raise SystemExit("off-instr needs --baseline DIR (see the docstring)")
      report_off_instr(args.baseline, args.reps)
    else: raise SystemExit(f"unknown case {w!r}: compile, page, off or off-instr")


if __name__ == "__main__":
  main()
