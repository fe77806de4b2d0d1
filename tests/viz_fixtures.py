"""Shared by test_viz.py and test_viz_browser.py: recording a session of known work, isolated from the rest of the
process (the recorder is taken empty before and after), and the known work itself."""
from __future__ import annotations

import contextlib
import inspect
from typing import Iterator

import numpy as np

from tinyhybrid import Ops, Tensor, TinyJit, UOp, _core, dtypes, viz
from tinyhybrid.device import profile_events, profile_mem
from tinyhybrid.helpers import Context
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite
from tinyhybrid.viz.session import Builder, Session


@contextlib.contextmanager
def recording(profile: bool = False) -> Iterator[Session]:
  """Tracks the rewrites (and with profile, PROFILE=1's events) run inside the block into the yielded session."""
  was = _core.track_enabled()
  _core.track_take()  # whatever an earlier test left
  b = Builder()
  n_events, n_mem = len(profile_events), len(profile_mem)
  _core.track_enable(True)
  try:
    with Context(PROFILE=int(profile)): yield b.session
  finally:
    _core.track_enable(was)
    b.feed(*_core.track_take())
  b.session.events.extend((e.name, e.device, e.start_ns, e.end_ns, e.kind, e.queue) for e in profile_events[n_events:])
  b.session.mem.extend((m.device, m.ts_ns, m.nbytes) for m in profile_mem[n_mem:])


def leaf(name: str) -> UOp: return UOp(Ops.NOOP, dtypes.int, (), name)


# x + 0 -> x, x * 1 -> x: Python rules whose UPat lines the tests look for
ADD_ZERO = UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c", arg=0)])
MUL_ONE = UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c", arg=1)])
IDENTITIES = PatternMatcher([(ADD_ZERO, lambda x, c: x), (MUL_ONE, lambda x, c: x)])
ADD_ZERO_LINE = next(i for i, line in enumerate(inspect.getsource(inspect.getmodule(leaf)).splitlines(), 1) if line.startswith("ADD_ZERO = "))


def known_graph() -> UOp:
  """SINK(((a*1)+0) * (b+0)): 9 nodes; the identities rewrite it in three steps to SINK(a*b) (4 nodes)."""
  a, b = leaf("a"), leaf("b")
  zero, one = UOp.const(dtypes.int, 0), UOp.const(dtypes.int, 1)
  return UOp.sink(((a * one) + zero) * (b + zero))


def known_rewrite() -> UOp:
  """The known graph rewritten by the identities, as a kernel group named "known" (the page opens on it when it is
  the first kernel)."""
  with viz.group("kernel") as g:
    out = graph_rewrite(known_graph(), IDENTITIES, name="identities")
    g.name, g.text = "known", "void known(void) { /* the known rewrite */ }"
  return out


def known_run() -> list[str]:
  """Real kernels on the CPU, a copy in and out, and TinyJit replays; returns the kernel names in the order they ran."""
  from tinyhybrid.engine import realize
  # compiled fresh, so that its kernels' rewrites are recorded however much this process compiled before
  realize.schedule_cache.clear()
  realize.kernel_cache.clear()
  first = len(profile_events)
  a = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8))
  b = ((a + 1) * 2).sum(axis=1)
  b.numpy()

  @TinyJit
  def step(x: Tensor) -> Tensor: return (x * 3 + 1).realize()
  for i in range(4): step(Tensor(np.full(8, i, dtype=np.float32))).numpy()
  return [e.name for e in profile_events[first:] if e.kind == "kernel"]
