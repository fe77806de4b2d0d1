"""The VIZ page in a real browser: Debian's chromium and chromium-driver, headless, driven by selenium. Each test serves a
session of known work on a free port and checks the DOM: the kernel list, the SVG graph of a known rewrite with the
right node count at every step, node details, keyboard stepping, the timeline's spans for a known run, and a summary
for a graph of 10^5 nodes. Screenshots go to VIZ_ARTIFACTS (default build/test-artifacts). Outside CI they are
skipped, saying why, when selenium, chromium, its driver or Graphviz is missing; in CI (CI set, as .ci/run does, which
installs them all) a missing one fails them instead."""
from __future__ import annotations

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from viz_fixtures import IDENTITIES, known_graph, known_rewrite, known_run, leaf, recording  # noqa: E402

from tinyhybrid import UOp, dtypes, viz  # noqa: E402
from tinyhybrid.uop.upat import graph_rewrite  # noqa: E402
from tinyhybrid.viz import graph as vgraph, serve as vserve  # noqa: E402

from browser import CHROME_MISSING, IN_CI, headless_chrome  # noqa: E402
if not IN_CI: pytest.importorskip("selenium", reason="selenium is not installed (it comes with the test extra: pip install '.[test]')")
MISSING = [why for absent, why in ((bool(CHROME_MISSING), CHROME_MISSING),
                                   (not vgraph.have_graphviz(), "Graphviz's dot is not installed (apt-get install graphviz)")) if absent]
pytestmark = [pytest.mark.skipif(bool(MISSING) and not IN_CI, reason="; ".join(MISSING) + " (.ci/run installs them)")]

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

ARTIFACTS = os.getenv("VIZ_ARTIFACTS") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "test-artifacts")


@pytest.fixture(scope="module")
def browser():
  if MISSING: pytest.fail("; ".join(MISSING) + ": CI must run the browser tests (.ci/run installs them)")
  yield from headless_chrome(1400, 850)


@pytest.fixture(scope="module")
def known():
  """A session of the known rewrite (the first kernel) and a known run on the CPU, served on a free port."""
  with recording(profile=True) as s:
    known_rewrite()
    names = known_run()
  srv = vserve.serve(s, port=0, block=False, quiet=True)
  yield s, f"http://127.0.0.1:{srv.server_address[1]}", names
  srv.shutdown()
  srv.server_close()


def wait(d, cond, timeout: float = 30.0, what: str = ""):
  end = time.time() + timeout
  while time.time() < end:
    if (v := d.execute_script(f"return {cond}")): return v
    time.sleep(0.03)
  raise AssertionError(f"timed out waiting for {what or cond}")


def node_count(d) -> int: return len(d.find_elements(By.CSS_SELECTOR, "#graph svg g.node"))


def screenshot(d, name: str) -> str:
  os.makedirs(ARTIFACTS, exist_ok=True)
  path = os.path.join(ARTIFACTS, name)
  d.save_screenshot(path)
  return path


def test_page_opens_on_the_first_kernels_first_rewrite(browser, known):
  s, url, _ = known
  browser.get(url)
  wait(browser, "document.body.dataset.ready", what="the page to load")
  # the kernel list: the known kernel first, then the run's schedules and kernels
  heads = browser.find_elements(By.CSS_SELECTOR, "#kernels .group .name")
  names = [h.text for h in heads]
  assert names[0] == "known" and len(names) == len(s.groups)
  assert {g.name for g in s.groups if g.kind == "kernel"} <= set(names)
  assert browser.find_element(By.CSS_SELECTOR, ".group.selected .name").text == "known"
  assert browser.find_element(By.CSS_SELECTOR, ".call.selected").text.startswith("identities")
  # its graph is drawn: the input of the rewrite, 9 nodes, of which the 2 constants are written into their users' labels
  wait(browser, "document.querySelector('#graph svg')", what="the graph")
  assert len(list(known_graph().toposort())) == 9
  assert node_count(browser) == 7
  assert browser.find_element(By.CSS_SELECTOR, "#graph svg").get_attribute("data-nodes") == "7"
  assert "void known" in browser.find_element(By.ID, "source").text
  screenshot(browser, "viz_open.png")


def test_keyboard_steps_through_the_known_rewrite(browser, known):
  s, url, _ = known
  browser.get(url)
  wait(browser, "document.body.dataset.ready")
  # SINK(((a*1)+0) * (b+0)) -> SINK((a+0) * (b+0)) -> SINK(a * (b+0)) -> SINK(a*b): 9, 7, 6 and 4 nodes, the
  # constants not drawn as boxes
  expected = [7, 6, 5, 4]
  body = browser.find_element(By.TAG_NAME, "body")
  for k in range(1, len(expected)):
    body.send_keys(Keys.ARROW_RIGHT)
    wait(browser, f"document.querySelector('#step-title').textContent.includes('step {k} of')", what=f"step {k}")
    wait(browser, f"document.querySelectorAll('#graph svg g.node').length === {expected[k]}", what=f"{expected[k]} nodes at step {k}")
    rule = browser.find_element(By.ID, "rule").text
    assert "viz_fixtures.py:" in rule and "UPat(" in rule  # the rule's location and its line of code
    # the nodes the step made are marked (Graphviz draws them with the changed color)
    assert browser.execute_script("return document.querySelectorAll('#graph svg g.node path[stroke=\"#e02020\"], #graph svg g.node polygon[stroke=\"#e02020\"]').length") >= 1
  body.send_keys(Keys.ARROW_LEFT)
  wait(browser, f"document.querySelectorAll('#graph svg g.node').length === {expected[-2]}", what="a step back")
  # click a node: its op, dtype, arg and sources
  browser.execute_script("""const n = [...document.querySelectorAll('#graph svg g.node')].find(g => g.textContent.includes('MUL'));
    n.dispatchEvent(new MouseEvent('click', {bubbles: true}));""")
  info = browser.find_element(By.ID, "node-table").text
  assert "op MUL" in info and "dtype int" in info and "src 0: n" in info
  screenshot(browser, "viz_step.png")
  # down: the next rewrite, in the next kernel
  body.send_keys(Keys.ARROW_DOWN)
  wait(browser, "document.querySelector('.group.selected .name').textContent !== 'known'", what="the next rewrite")


def test_a_kernels_lowering_and_source(browser, known):
  """A real kernel: its lowering, a rewrite from the scheduled graph to the kernel IR, next to its C source (the
  README's screenshot, docs/viz.png, is this test's)."""
  s, url, _ = known
  gi = next(i for i, g in enumerate(s.groups) if g.kind == "kernel" and g.name.startswith("r_"))
  ci = next(i for i, c in enumerate(s.groups[gi].calls) if c.name == "lower")
  browser.get(url)
  wait(browser, "document.body.dataset.ready")
  browser.find_element(By.CSS_SELECTOR, f"#group-{gi} .group-head").click()
  wait(browser, f"document.querySelector('#call-{gi}-{ci}')", what="the kernel's calls")
  browser.find_element(By.ID, f"call-{gi}-{ci}").click()
  call, gs = s.groups[gi].calls[ci], vgraph.Graphs(s)
  wait(browser, "document.querySelector('#step-title').textContent.startsWith('lower: input')", what="the lowering's input")
  browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_RIGHT)
  wait(browser, f"document.querySelector('#step-title').textContent === 'lower: step 1 of {len(call.steps)}'", what="its first rule")
  browser.find_element(By.TAG_NAME, "body").send_keys(Keys.END)
  wait(browser, f"document.querySelector('#step-title').textContent === 'lower: step {len(call.steps)} of {len(call.steps)}'", what="its output")
  ir = gs.reachable(call.result)
  # every node of the kernel IR is a box, but for the constants the last step did not make (in their users' labels)
  before_last = set(gs.reachable(gs.root_at(call, len(call.steps) - 1)))
  boxes = sum(1 for n in ir if s.nodes[n].op != "CONST" or n not in before_last or n == call.result)
  wait(browser, f"document.querySelectorAll('#graph svg g.node').length === {boxes}", what=f"the kernel IR's {boxes} boxes")
  ops = set(browser.execute_script("return [...document.querySelectorAll('#graph svg g.node title')].map(t => t.parentNode.textContent)"))
  assert any("RANGE" in o for o in ops) and any("STORE" in o for o in ops) and any("REDUCE" in o for o in ops)
  assert f"void {s.groups[gi].name}(" in browser.find_element(By.ID, "source").text
  screenshot(browser, "viz_kernel.png")


def test_timeline_shows_the_known_run(browser, known):
  s, url, names = known
  browser.get(url)
  wait(browser, "document.body.dataset.ready")
  browser.find_element(By.ID, "tab-profiler").click()
  wait(browser, "document.querySelector('#timeline svg')", what="the timeline")
  spans = browser.find_elements(By.CSS_SELECTOR, "#timeline rect.span")
  assert len(spans) == len(s.events)
  kernels = [e.get_attribute("data-name") for e in spans if e.get_attribute("data-kind") == "kernel"]
  assert sorted(kernels) == sorted(names) and len(kernels) >= 5
  assert {e.get_attribute("data-kind") for e in spans} == {"kernel", "copy", "jit"}
  assert browser.find_elements(By.CSS_SELECTOR, "#timeline path.mem[data-device='CPU']")
  assert "CPU queue" in browser.find_element(By.ID, "timeline").text
  # zoom in around the middle: fewer spans are in view, and the reset brings them back
  box = browser.find_element(By.ID, "timeline")
  browser.execute_script("""const b = arguments[0], r = b.getBoundingClientRect();
    for (let i = 0; i < 8; i++) b.dispatchEvent(new WheelEvent('wheel', {deltaY: -400, clientX: r.left + r.width * 0.9, clientY: r.top + 40, bubbles: true}));""", box)
  assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.span")) < len(spans)
  browser.find_element(By.ID, "timeline-reset").click()
  assert len(browser.find_elements(By.CSS_SELECTOR, "#timeline rect.span")) == len(spans)
  screenshot(browser, "viz_timeline.png")


def test_a_huge_graph_shows_a_summary(browser):
  x = leaf("x")
  for i in range(50_000): x = x + UOp.const(dtypes.int, i)  # 10^5 nodes
  with recording() as s, viz.group("kernel") as g:
    graph_rewrite(UOp.sink(x), IDENTITIES, name="huge")
    g.name = "huge"
  srv = vserve.serve(s, port=0, block=False, quiet=True)
  try:
    t0 = time.perf_counter()
    browser.get(f"http://127.0.0.1:{srv.server_address[1]}/")
    wait(browser, "document.body.dataset.ready", timeout=60)
    text = browser.find_element(By.ID, "graph").text
    assert "100,002 nodes" in text and "ADD" in text
    assert time.perf_counter() - t0 < 20
  finally:
    srv.shutdown()
    srv.server_close()

