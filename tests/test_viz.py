"""VIZ without a browser: the recorded session (calls, steps, rule locations, kernel groups and sources), the graph of
each step, saving and loading (and refusing damaged files), the server's API and port fallback, the profiler's tracks
and Chrome trace (the trace-event format, nesting, kernel names), and the VIZ=1 / PROFILE=1 / TRACK_MATCH_STATS=1
environment switches end to end. The page itself is tested in test_viz_browser.py."""
from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tinyhybrid import Ops, Tensor, UOp, _core, dtypes
from tinyhybrid.uop.upat import graph_rewrite
from tinyhybrid.viz import graph as vgraph, profile as vprofile, serve as vserve, session as vsession
from tinyhybrid.viz.stats import match_stats

sys.path.insert(0, os.path.dirname(__file__))
from viz_fixtures import ADD_ZERO_LINE, IDENTITIES, known_graph, known_rewrite, known_run, leaf, recording  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ops(s: vsession.Session, root: int) -> list[str]:
  return sorted(s.nodes[n].op for n in vgraph.Graphs(s).reachable(root))


# ---------------------------------------------------------------- recording

def test_nothing_is_recorded_while_off():
  _core.track_take()
  assert not _core.track_enabled()
  graph_rewrite(known_graph(), IDENTITIES)
  known_graph().simplify()
  words, strings, nodes = _core.track_take()
  assert words == b"" and strings == [] and nodes == []


def test_a_rewrite_is_recorded_with_its_rules_and_graphs():
  with recording() as s:
    out = known_rewrite()
  g = s.groups[0]
  assert (g.kind, g.name) == ("kernel", "known") and "void known" in g.text
  (call,) = g.calls
  assert call.name == "identities" and not call.stage and call.depth == 0
  assert len(call.steps) == 3
  # each step names its UPat's line in the file that built it
  assert {st.location for st in call.steps} == {f"{ROOT}/tests/viz_fixtures.py:{ADD_ZERO_LINE}",
                                               f"{ROOT}/tests/viz_fixtures.py:{ADD_ZERO_LINE + 1}"}
  assert all(st.rule.startswith("<lambda>") for st in call.steps)
  assert ops(s, call.root) == sorted(n.op.name for n in known_graph().toposort())
  assert ops(s, call.result) == sorted(n.op.name for n in out.toposort()) == ["MUL", "NOOP", "NOOP", "SINK"]
  # before -> after of each step, as the rewrite saw them
  for st in call.steps:
    assert s.nodes[st.before].op in ("ADD", "MUL") and s.nodes[st.after].op in ("NOOP", "MUL")


def test_native_rules_carry_names_and_source_lines():
  i = UOp.variable("i", 0, 9)
  with recording() as s:
    ((i + 0) * 1).simplify()
  (call,) = s.groups[0].calls
  assert call.name == "simplify" and s.groups[0].kind == "rewrites"
  assert call.steps and all(st.location.startswith("src/cpp/symbolic/") and st.location.rsplit(":", 1)[1].isdigit() for st in call.steps)
  assert all(st.rule and "(" not in st.rule[:1] for st in call.steps)  # a readable name, not a pattern dump
  assert vgraph.source_line(call.steps[0].location).startswith("r.push_back(")


def test_failed_and_nested_rewrites():
  from tinyhybrid.uop.upat import PatternMatcher, UPat
  x, y = leaf("x"), leaf("y")
  looping = PatternMatcher([(UPat(Ops.NOOP, name="n"), lambda n: y if n is x else x)])
  inner = PatternMatcher([(UPat(Ops.SINK, src=(UPat.var("a"),), name="s"),
                           lambda s, a: None if (r := graph_rewrite(a, IDENTITIES, name="inner")) is a else UOp.sink(r))])
  with recording() as s:
    with pytest.raises(RuntimeError, match="loop"): graph_rewrite(x, looping, bottom_up=True, name="looping")
    graph_rewrite(UOp.sink(x + UOp.const(dtypes.int, 0)), inner, name="outer")
  calls: dict[str, list] = {}
  for c in s.groups[0].calls: calls.setdefault(c.name, []).append(c)
  assert calls["looping"][0].result is None and calls["looping"][0].bottom_up
  # the outer rule runs the inner rewrite on SINK(x+0), then again on the SINK(x) it made
  assert calls["outer"][0].depth == 0 and [(c.depth, len(c.steps)) for c in calls["inner"]] == [(1, 1), (1, 0)]


def test_kernels_are_groups_with_stages_and_source():
  with recording() as s:
    (Tensor.arange(12).reshape(3, 4).float().exp().sum(axis=0) + 1).numpy()
  kernels = [g for g in s.groups if g.kind == "kernel"]
  assert kernels and all(g.name and f"void {g.name}(" in g.text for g in kernels)
  stages = [c.name for c in kernels[0].calls if c.stage]
  assert "expand" in stages and "lower" not in stages
  # the lowering is the first pass, a rewrite whose steps are its rules (a movement op, a load, the reduce)
  names = [c.name for c in kernels[0].calls]
  lower = kernels[0].calls[names.index("lower")]
  assert not lower.stage and len(lower.steps) > 3 and all(not c.stage for c in kernels[0].calls[:names.index("lower")])
  assert any(g.kind == "schedule" for g in s.groups)
  assert any(c.name == "simplify" and c.steps for g in kernels for c in g.calls)


def test_merging_loops_is_a_rewrite():
  # a 7x7 image's loops become one loop of 49: the rule on the kernel's END merges a pair a step
  with recording() as s:
    (Tensor.arange(98).reshape(2, 7, 7).float().exp() + 1).numpy()
  (kernel,) = [g for g in s.groups if g.kind == "kernel"]
  merge = next(c for c in kernel.calls if c.name == "merge loops")
  assert not merge.stage and merge.steps and all(st.rule.startswith("_merge_a_pair") for st in merge.steps)


def test_the_schedulers_passes_are_rewrites():
  # a product whose reduce is long against its outputs, on a CPU-like device: the scheduler's rule sets run in order,
  # and the one that splits it in two stages shows one step, on the product's reduce
  with recording() as s:
    (Tensor.empty(64, 32768, device="NULL") @ Tensor.empty(32768, 64, device="NULL")).realize()
  (sched,) = [g for g in s.groups if g.kind == "schedule"]
  names = [c.name for c in sched.calls if c.depth == 0 and not c.stage]
  assert names[:2] == ["rows along the reduce", "split for the cache"], names
  split = sched.calls[[c.name for c in sched.calls].index("split for the cache")]
  assert [st.rule.split(" ")[0] for st in split.steps] == ["_split_for_cache"]


# ---------------------------------------------------------------- graphs of steps

def test_each_step_applies_one_rule():
  with recording() as s:
    known_rewrite()
  gs, call = vgraph.Graphs(s), s.groups[0].calls[0]
  sizes = [len(gs.reachable(gs.root_at(call, k))) for k in range(len(call.steps) + 1)]
  assert sizes[0] == 9 and sizes[-1] == 4
  assert all(a > b for a, b in zip(sizes, sizes[1:]))  # each identity removes nodes
  # the middle steps are built by the viewer (the engine made some of these nodes only later, or never)
  mid = gs.root_at(call, 1)
  assert ops(s, mid).count("CONST") in (1, 2)
  assert sizes == [9, 7, 6, 4]
  # constants are written into their users' labels, unless new in the step: boxes drawn per step
  drawn = [gs.step(0, 0, k)["nodes"] for k in range(4)]
  assert drawn == [7, 6, 5, 4]
  st = gs.step(0, 0, 2)
  assert st["total"] == sizes[2] and st["rule"]["location"].rsplit(":", 1)[1] in (str(ADD_ZERO_LINE), str(ADD_ZERO_LINE + 1))
  assert st["changed"] and st["focus"] in st["info"]
  if vgraph.have_graphviz():
    assert st["svg"].startswith("<svg") and st["svg"].count('class="node"') == drawn[2]
    assert "[1]=0" in gs.step(0, 0, 0)["svg"]  # b + 0: the folded constant in the ADD's label


def test_a_huge_graph_is_summarized():
  x = leaf("x")
  for i in range(50_000): x = x + UOp.const(dtypes.int, i)  # 10^5 nodes
  with recording() as s:
    graph_rewrite(UOp.sink(x), IDENTITIES, name="huge")
  t0 = time.perf_counter()
  st = vgraph.Graphs(s).step(0, 0, 0)
  assert time.perf_counter() - t0 < 10
  assert "svg" not in st and st["summary"]["nodes"] == 100_002
  assert dict(st["summary"]["ops"])["ADD"] == 50_000


def test_graphviz_missing_is_said(monkeypatch):
  monkeypatch.setattr(vgraph.shutil, "which", lambda name: None)
  assert "Graphviz is not installed" in vgraph.layout("digraph G { a -> b }")["error"]


# ---------------------------------------------------------------- saving, loading

def test_save_and_load(tmp_path):
  with recording() as s:
    known_rewrite()
  p = str(tmp_path / "trace.pkl")
  vsession.save(s, p)
  t = vsession.load(p)
  assert t.groups[0].name == "known" and len(t.groups[0].calls[0].steps) == 3 and len(t.nodes) == len(s.nodes)


@pytest.mark.parametrize("content, message", [
  (b"", "not a tinyhybrid VIZ session"),
  (b"hello, this is text", "not a tinyhybrid VIZ session"),
  (vsession.MAGIC + (99).to_bytes(4, "little"), "format version 99"),
  (vsession.MAGIC + (1).to_bytes(4, "little") + b"\x80\x05garbage", "damaged or truncated"),
  (vsession.MAGIC + (1).to_bytes(4, "little") + pickle.dumps(os.system), "damaged or truncated"),  # code is refused
  (vsession.MAGIC + (1).to_bytes(4, "little") + pickle.dumps([1, 2]), "holds no VIZ session"),
])
def test_a_bad_trace_gives_a_clear_error(tmp_path, content, message):
  p = tmp_path / "bad.pkl"
  p.write_bytes(content)
  with pytest.raises(ValueError, match=message): vsession.load(str(p))


def test_a_truncated_trace_gives_a_clear_error(tmp_path):
  with recording() as s:
    known_rewrite()
  p = str(tmp_path / "t.pkl")
  vsession.save(s, p)
  data = open(p, "rb").read()
  open(p, "wb").write(data[:len(data) // 2])
  with pytest.raises(ValueError, match="damaged or truncated"): vsession.load(p)
  r = subprocess.run([sys.executable, "-m", "tinyhybrid.viz", p], capture_output=True, text=True, timeout=120)
  assert r.returncode == 2 and "damaged or truncated" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- the server

def get(port: int, path: str) -> dict:
  with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r: return json.loads(r.read())


def test_server_api_and_port_in_use(capsys):
  with recording(profile=True) as s:
    known_rewrite()
    known_run()
  busy = socket.socket()
  busy.bind(("127.0.0.1", 0))
  busy.listen()
  taken = busy.getsockname()[1]
  srv = vserve.serve(s, port=taken, block=False)
  try:
    port = srv.server_address[1]
    assert port != taken
    err = capsys.readouterr().err
    assert f"port {taken} is in use; serving on port {port}" in err and f"http://127.0.0.1:{port}" in err
    j = get(port, "/api/session")
    assert j["groups"][0]["name"] == "known" and j["groups"][0]["calls"][0][:3] == [0, "identities", 3] and j["profile"]
    st = get(port, "/api/step?g=0&c=0&k=3")
    assert st["nodes"] == st["total"] == 4 and st["step"] == 3
    assert get(port, "/api/source?g=0")["text"].startswith("void known")
    assert get(port, "/api/profile")["tracks"]
    assert get(port, "/trace.json")["traceEvents"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r: assert b"viz.js" in r.read()
    with pytest.raises(urllib.error.HTTPError): get(port, "/api/step?g=0&c=99")
    with pytest.raises(urllib.error.HTTPError): get(port, "/static/../session.py")
  finally:
    srv.shutdown()
    srv.server_close()
    busy.close()


def test_the_page_assets_ship_with_the_package():
  static = os.path.join(os.path.dirname(vserve.__file__), "static")
  assert {"index.html", "viz.js", "viz.css"} <= set(os.listdir(static))
  html = open(os.path.join(static, "index.html")).read() + open(os.path.join(static, "viz.js")).read()
  assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html  # nothing fetched


# ---------------------------------------------------------------- the profiler

def check_trace(trace: dict) -> dict[tuple[int, int], list[dict]]:
  """The trace-event format's rules this exporter keeps: every event has ph, ts, dur, pid and tid; complete events
  nest per track (one lies inside another or after it). Returns the complete events per track."""
  assert set(trace) >= {"traceEvents"}
  tracks: dict[tuple[int, int], list[dict]] = {}
  for e in trace["traceEvents"]:
    assert {"ph", "ts", "dur", "pid", "tid"} <= set(e), e
    assert e["ph"] in ("X", "M", "C") and e["dur"] >= 0 and e["ts"] >= 0
    if e["ph"] == "X": tracks.setdefault((e["pid"], e["tid"]), []).append(e)
  for spans in tracks.values():
    stack: list[float] = []
    for e in sorted(spans, key=lambda e: (e["ts"], -e["dur"])):
      while stack and stack[-1] <= e["ts"]: stack.pop()
      end = e["ts"] + e["dur"]
      assert not stack or end <= stack[-1] + 1e-3, f"{e} overlaps the span it starts in"
      stack.append(end)
  json.dumps(trace)
  return tracks


def test_profile_of_a_known_run():
  with recording(profile=True) as s:
    names = known_run()
  p = vprofile.build(s.events, s.mem)
  assert p.dropped == 0 and [(t.device, t.queue) for t in p.tracks] == [("CPU", "queue")]
  tracks = check_trace(vprofile.chrome_trace(p))
  (spans,) = tracks.values()
  assert sorted(e["name"] for e in spans if e["cat"] == "kernel") == sorted(names)
  assert {"kernel", "copy", "jit"} <= {e["cat"] for e in spans}
  # two replays (calls 3 and 4), each around the kernel it ran
  jits = [e for e in spans if e["cat"] == "jit"]
  assert len(jits) == 2 and all(j["name"] == "jit known_run.<locals>.step" for j in jits)
  for j in jits:
    inside = [e for e in spans if e["cat"] == "kernel" and j["ts"] <= e["ts"] and e["ts"] + e["dur"] <= j["ts"] + j["dur"] + 1e-3]
    assert inside
  assert p.memory["CPU"] and all(b >= 0 for _, b in p.memory["CPU"])
  tl = vprofile.timeline(p)
  assert sum(len(t["spans"]) for t in tl["tracks"]) == len(spans)


def test_profile_guards_bad_events():
  events = [("k1", "CPU", 100, 200, "kernel", "queue"), ("backwards", "CPU", 300, 250, "kernel", "queue"),
            ("nowhere", "", 150, 160, "kernel", "queue"), ("k2", "NULL", 400, 400, "kernel", "queue")]
  p = vprofile.build(events, [("CPU", 120, 64), ("CPU", 130, -128)])
  assert p.dropped == 1
  assert [(t.device, [sp[0] for sp in t.spans]) for t in p.tracks] == [("CPU", ["k1"]), ("NULL", ["k2"]), ("unknown", ["nowhere"])]
  assert p.memory["CPU"] == [(120, 64), (130, 0)]  # memory freed that was allocated before profiling: not negative
  check_trace(vprofile.chrome_trace(p))
  empty = vprofile.build([], [])
  assert empty.tracks == [] and vprofile.chrome_trace(empty)["traceEvents"] == []
  assert vprofile.timeline(empty)["tracks"] == []


# ---------------------------------------------------------------- the switches, end to end

SCRIPT = "from tinyhybrid import Tensor\nprint((Tensor.arange(12).reshape(3, 4).float() * 2 + 1).sum(axis=1).sum().item())\n"


def run_env(env: dict, script: str = SCRIPT, timeout: float = 300) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", script], env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout)


def test_profile_env_writes_a_trace(tmp_path):
  out = tmp_path / "trace.json"
  r = run_env({"PROFILE": "1", "PROFILE_PATH": str(out)})
  assert r.returncode == 0, r.stderr
  assert f"trace written to {out}" in r.stderr
  tracks = check_trace(json.loads(out.read_text()))
  assert any(e["cat"] == "kernel" for spans in tracks.values() for e in spans)


def test_track_match_stats_env_prints_the_rules():
  r = run_env({"TRACK_MATCH_STATS": "1"})
  assert r.returncode == 0, r.stderr
  assert "TRACK_MATCH_STATS:" in r.stderr and "src/cpp/symbolic/" in r.stderr
  assert "session saved" not in r.stderr  # level 1 counts; level 2 (what VIZ sets) also saves every match
  quiet = run_env({"TRACK_MATCH_STATS": "1", "PRINT_MATCH_STATS": "0"})
  assert quiet.returncode == 0 and "TRACK_MATCH_STATS:" not in quiet.stderr


def test_viz_env_without_a_terminal_saves_and_ends(tmp_path):
  # as tinygrad: a script whose output is piped (CI, a log file) saves its session and ends instead of serving
  r = run_env({"VIZ": "1", "VIZ_PATH": str(tmp_path / "s.pkl"), "PROFILE_PATH": str(tmp_path / "p.json")}, timeout=120)
  assert r.returncode == 0, r.stderr
  assert r.stdout.strip() == "144.0" and "serving" not in r.stderr
  assert f"python -m tinyhybrid.viz {tmp_path / 's.pkl'}" in r.stderr
  s = vsession.load(str(tmp_path / "s.pkl"))
  assert any(g.kind == "kernel" for g in s.groups) and s.events
  assert "TRACK_MATCH_STATS:" not in r.stderr  # VIZ shows the rules on its page, not as a table


def test_viz_env_serves_when_the_script_ends(tmp_path):
  import pty
  port = free_port()
  env = {**os.environ, "VIZ": "1", "VIZ_PORT": str(port), "VIZ_PATH": str(tmp_path / "s.pkl"), "PROFILE_PATH": str(tmp_path / "p.json")}
  master, terminal = pty.openpty()  # the script's output goes to a terminal: VIZ=1 serves at exit
  proc = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=terminal, stderr=subprocess.PIPE, text=True)
  os.close(terminal)
  try:
    lines = []
    deadline = time.time() + 300
    while time.time() < deadline:
      line = proc.stderr.readline()
      if not line: break
      lines.append(line)
      if "VIZ: serving on" in line: break
    assert any(f"http://127.0.0.1:{port}" in ln for ln in lines), "".join(lines)
    assert os.read(master, 4096).decode().split() == ["144.0"]  # the script's own output came first
    j = get(port, "/api/session")
    assert any(g["kind"] == "kernel" for g in j["groups"]) and j["profile"]
    assert vsession.load(str(tmp_path / "s.pkl")).groups
    assert proc.poll() is None  # it serves until interrupted
  finally:
    proc.kill()
    proc.wait()
    os.close(master)


def test_viz_minus_one_serves_while_the_script_runs(tmp_path):
  port = free_port()
  script = SCRIPT + "import sys\nprint('computed', flush=True)\nsys.stdin.readline()\n"
  env = {**os.environ, "VIZ": "-1", "VIZ_PORT": str(port), "VIZ_PATH": str(tmp_path / "s.pkl"), "PROFILE_PATH": str(tmp_path / "p.json")}
  proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    assert "VIZ: serving on" in proc.stderr.readline()  # at import, before the script's work
    assert proc.stdout.readline().strip() == "144.0" and proc.stdout.readline().strip() == "computed"
    j = get(port, "/api/session")  # the work done so far, while the script still runs
    assert proc.poll() is None and any(g["kind"] == "kernel" for g in j["groups"])
    g = next(g for g in j["groups"] if g["kind"] == "kernel" and g["calls"])
    assert get(port, f"/api/step?g={g['i']}&c={g['calls'][0][0]}&k=1")["step"] == 1
    _, err = proc.communicate("\n", timeout=120)  # then the script ends, and does not wait at exit
    assert proc.returncode == 0, err
    assert vsession.load(str(tmp_path / "s.pkl")).groups
  finally:
    proc.kill()
    proc.wait()


def test_viz_cli_serves_a_saved_session(tmp_path):
  with recording() as s:
    known_rewrite()
  p = str(tmp_path / "s.pkl")
  vsession.save(s, p)
  port = free_port()
  proc = subprocess.Popen([sys.executable, "-m", "tinyhybrid.viz", p, "--port", str(port)], stderr=subprocess.PIPE, text=True)
  try:
    assert "VIZ: serving on" in proc.stderr.readline()
    assert get(port, "/api/session")["groups"][0]["name"] == "known"
  finally:
    proc.kill()
    proc.wait()


def test_match_stats_count_fires():
  with recording() as s:
    known_rewrite()
  fired, calls = match_stats(s)
  assert calls["identities"] == 1 and sum(fired.values()) == 3


def free_port() -> int:
  with socket.socket() as sk:
    sk.bind(("127.0.0.1", 0))
    return sk.getsockname()[1]
