"""One rewrite step's graph for the page: the call's input with the first k replacements applied, laid out by Graphviz
(`dot -Tsvg`), nodes colored by op and the ones the step changed marked. A graph too big to lay out quickly gets a
summary (op counts) instead; without Graphviz the answer says how to get it."""
from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from typing import Any

from tinyhybrid.helpers import getenv
from tinyhybrid.viz.session import Call, Node, Session

MAX_NODES = getenv("VIZ_MAX_NODES", 1000)  # past this a graph is summarized: dot needs many seconds
DOT_TIMEOUT_S = 30.0

# fill colors by op (and by op family for the rest)
OP_COLORS = {"SINK": "#e8e8e8", "CONST": "#eeeeee", "DEFINE_VAR": "#c8c8ff", "PARAM": "#b0bdff", "BUFFER": "#b0bdff",
             "LOAD": "#ffc0c0", "STORE": "#87ceeb", "INDEX": "#cef9b7", "RANGE": "#c8a0e0", "END": "#a89c90",
             "REDUCE": "#ff8b8b", "WHERE": "#ffe0a0", "CAST": "#fff0b0", "BITCAST": "#fff0b0", "VECTORIZE": "#d8f9e4",
             "GEP": "#d8f9e4", "CONTIGUOUS": "#ffc14d", "COPY": "#e0a0e0", "AFTER": "#c8b8a8", "SPECIAL": "#c0c0ff"}
MOVEMENT = {"RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP"}
ALU_COLOR, MOVEMENT_COLOR, OTHER_COLOR = "#ffffc0", "#d8f9e4", "#f4f4f4"


def color(op: str) -> str:
  if op in OP_COLORS: return OP_COLORS[op]
  return MOVEMENT_COLOR if op in MOVEMENT else OTHER_COLOR if op.startswith(("DEFINE", "UNIQUE", "DEVICE")) else ALU_COLOR


class Graphs:
  """Graphs of a session's steps. Replacing nodes inside a graph makes nodes that the rewrite itself may never have
  built (it rewrites a node's sources before the node); those are added to the session's table once each."""

  def __init__(self, s: Session):
    self.s = s
    self.by_content: dict[tuple, int] | None = None  # the table's nodes by what they are: the rewrite's own nodes
    self.layouts: dict[tuple[int, int, int], dict[str, Any]] = {}  # (group, call, step) -> laid out, the latest 64

  def call(self, g: int, c: int) -> Call: return self.s.groups[g].calls[c]

  def with_src(self, n: int, src: tuple[int, ...]) -> int:
    """n with other sources: the recorded node that is exactly that (nodes are interned, so a step's `before` is found
    again), or a new one."""
    old = self.s.nodes[n]
    if src == old.src: return n
    if self.by_content is None: self.by_content = {(x.op, x.dtype, x.arg, x.src, x.tag): i for i, x in enumerate(self.s.nodes)}
    key = (old.op, old.dtype, old.arg, src, old.tag)
    if (hit := self.by_content.get(key)) is None:
      hit = self.by_content[key] = len(self.s.nodes)
      self.s.nodes.append(Node(*key))
    return hit

  def root_at(self, call: Call, k: int) -> int:
    """The graph after the call's first k steps: its input with each step's `before` replaced by its `after`. A
    replacement may itself hold nodes that later steps replace (the rewrite goes on inside what a rule built), so a
    replacement is mapped in turn."""
    if k <= 0: return call.root
    if k >= len(call.steps) and call.result is not None: return call.result
    repl: dict[int, int] = {}
    for st in call.steps[:k]: repl[st.before] = st.after
    memo: dict[int, int]
    nodes, memo, active = self.s.nodes, {}, set()
    # frames: (node, state, the replacement being mapped); state 0: map the sources, 1: rebuild and replace, 2: done
    stack: list[tuple[int, int, int]] = [(call.root, 0, -1)]
    while stack:
      n, state, r = stack.pop()
      if state == 0:
        if n in memo: continue
        active.add(n)
        stack.append((n, 1, -1))
        stack.extend((x, 0, -1) for x in nodes[n].src if x not in memo)
      elif state == 1:
        m = self.with_src(n, tuple(memo[x] for x in nodes[n].src))
        c, hops = m, 0
        while c in repl and repl[c] != c and hops < 64: c, hops = repl[c], hops + 1  # bounded: a loop is cut
        if c == m or c in active: memo[n] = m if c in active else c
        elif c in memo: memo[n] = memo[c]
        else:
          stack.append((n, 2, c))
          stack.append((c, 0, -1))
          continue
        active.discard(n)
      else:
        memo[n] = memo[r]
        active.discard(n)
    return memo[call.root]

  def reachable(self, root: int, limit: int | None = None) -> list[int]:
    """The nodes of the graph at root, sources first; stops early past limit nodes (then the list is longer than it)."""
    nodes, seen, order = self.s.nodes, {root}, []
    stack = [root]
    while stack:
      n = stack.pop()
      order.append(n)
      if limit is not None and len(order) > limit: return order
      for x in nodes[n].src:
        if x not in seen:
          seen.add(x)
          stack.append(x)
    return order[::-1]

  def step(self, g: int, c: int, k: int) -> dict[str, Any]:
    """What the page shows for step k of call c of group g (k = 0: the input; k = i: after the i-th rule fired)."""
    call = self.call(g, c)
    n = nsteps(call)
    k = max(0, min(k, n))
    root = self.root_at(call, k)
    ids = self.reachable(root, MAX_NODES)
    out: dict[str, Any] = {"group": g, "call": c, "step": k, "steps": n, "name": call.name, "root": root}
    if k and call.steps:
      st = call.steps[k - 1]
      out["rule"] = {"name": st.rule, "location": st.location, "code": source_line(st.location)}
    elif k: out["rule"] = {"name": call.name, "location": "a pass of the pipeline (not a graph_rewrite): its input, then its output", "code": ""}
    if len(ids) > MAX_NODES:
      out["summary"] = self.summary(root)
      return out
    prev = set(self.reachable(self.root_at(call, k - 1))) if k else set(ids)
    changed = [n for n in ids if n not in prev]
    focus = call.steps[k - 1].after if k and call.steps else None  # a stage's output is all new: no one node to show
    drawn = self.drawn(ids, root, set(changed) | {focus})
    out.update(nodes=len(drawn), total=len(ids), changed=[n for n in changed if n in drawn], focus=focus if focus in drawn else None,
               info={n: self.info(n) for n in ids})
    if (key := (g, c, k)) not in self.layouts:
      self.layouts[key] = layout(self.dot(drawn, set(changed), focus), quick=len(drawn) > 300)
      if len(self.layouts) > 64: self.layouts.pop(next(iter(self.layouts)))
    out.update(self.layouts[key])
    return out

  def drawn(self, ids: list[int], root: int, keep: set) -> list[int]:
    """The nodes drawn as boxes. A constant is written into the labels of the nodes that use it instead (shared
    constants would otherwise pull edges across the whole drawing), unless it is the root or new in this step."""
    nodes = self.s.nodes
    return [n for n in ids if nodes[n].op != "CONST" or n == root or n in keep]

  def info(self, n: int) -> dict[str, Any]:
    x = self.s.nodes[n]
    return {"op": x.op, "dtype": x.dtype, "arg": x.arg, "src": list(x.src), "tag": x.tag}

  def summary(self, root: int) -> dict[str, Any]:
    """A graph too big to draw: its size and what it is made of (walked without a limit: it is only counting)."""
    ids = self.reachable(root)
    ops = Counter(self.s.nodes[n].op for n in ids)
    return {"nodes": len(ids), "limit": MAX_NODES, "ops": ops.most_common(),
            "root": self.info(root)}

  def dot(self, ids: list[int], changed: set[int], focus: int | None) -> str:
    lines = ["digraph G {", 'graph [rankdir=TB, nodesep=0.15, ranksep=0.3, bgcolor="transparent"];',
             'node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.08,0.03", height=0.2, penwidth=0.6];',
             'edge [arrowsize=0.5, color="#777777"];']
    nodes, drawn = self.s.nodes, set(ids)
    for n in ids:
      x = nodes[n]
      folded = " ".join(f"[{i}]={_short(nodes[s].arg, 16)}" for i, s in enumerate(x.src) if s not in drawn)
      label = "\n".join(p for p in (x.op, _short(x.arg), folded, x.dtype if x.dtype != "void" else "") if p)
      extra = ', penwidth=3, color="#e02020"' if n == focus else ', penwidth=2, color="#e07020"' if n in changed else ""
      lines.append(f'n{n} [id="n{n}", label="{_esc(label)}", fillcolor="{color(x.op)}"{extra}];')
    for n in ids:
      src = nodes[n].src
      for i, s in enumerate(src):
        if s in drawn: lines.append(f'n{s} -> n{n}' + (f' [label="{i}", fontsize=8]' if len(src) > 1 and src.count(s) > 1 else "") + ";")
    lines.append("}")
    return "\n".join(lines)


def nsteps(call: Call) -> int:
  """The steps the page steps through: the rules that fired, or for a stage one step from its input to its output."""
  return len(call.steps) or int(call.stage and call.result is not None)


def layout(dot_src: str, quick: bool = False) -> dict[str, Any]:
  """{"svg": ...} laid out by Graphviz, or {"error": ...} saying why not. quick: fewer rounds of dot's rank and
  crossing optimization, for big graphs (a slightly messier drawing in a fraction of the time)."""
  exe = shutil.which("dot")
  if exe is None: return {"error": GRAPHVIZ_MISSING}
  try:
    r = subprocess.run([exe, "-Tsvg", *(["-Gnslimit=2", "-Gmclimit=0.3"] if quick else [])], input=dot_src.encode(),
                       capture_output=True, timeout=DOT_TIMEOUT_S, check=False)
  except subprocess.TimeoutExpired: return {"error": f"Graphviz took more than {DOT_TIMEOUT_S:.0f} s to lay this graph out"}
  if r.returncode != 0: return {"error": f"Graphviz failed: {r.stderr.decode(errors='replace')[-500:]}"}
  svg = r.stdout.decode(errors="replace")
  return {"svg": svg[svg.find("<svg"):]}  # without the XML prolog and doctype, to sit inside the page


GRAPHVIZ_MISSING = ("Graphviz is not installed: the graphs are laid out by its `dot` program, which was not found on PATH. "
                    "Install it (Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz) and reload.")


def have_graphviz() -> bool: return shutil.which("dot") is not None


def source_line(location: str) -> str:
  """The line of code at "path:line" (a Python rule's UPat; a native rule's line when the source tree is at hand)."""
  import linecache
  import os
  path, _, line = location.rpartition(":")
  if not line.isdigit(): return ""
  if os.path.isabs(path): return linecache.getline(path, int(line)).strip()
  # a native rule, src/cpp/...: the copy a wheel carries, else the source tree this runs from
  package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for root in (os.path.join(package, "native_rules"), os.path.dirname(os.path.dirname(package))):
    if text := linecache.getline(os.path.join(root, path), int(line)).strip(): return text
  return ""


def _short(arg: str, n: int = 60) -> str: return arg if len(arg) <= n else arg[:n - 3] + "..."
def _esc(s: str) -> str: return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
