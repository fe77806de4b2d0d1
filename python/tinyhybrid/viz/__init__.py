"""VIZ: every graph_rewrite, grouped by kernel, and the profiler's timeline, in a local web page.

`VIZ=1 python script.py` records what the C++ rewrite engine does, saves it, and serves the page when the script ends
(in a terminal; with its output piped it only saves, as tinygrad does). `VIZ=-1` serves while the script runs and
exits at the end without waiting. `python -m tinyhybrid.viz trace.pkl` serves a saved session. `PROFILE=1` (on with VIZ)
records kernels, copies and TinyJit replays per device queue and writes a Chrome/Perfetto trace at exit.
`TRACK_MATCH_STATS=1` prints how often each rule fired (PRINT_MATCH_STATS forces or stops the table; VIZ sets
TRACK_MATCH_STATS=2, which also saves the session).

This module is what the pipeline calls: `group` and `stage` cost one check while tracking is off. The server and
its pieces are imported only when they are used."""
from __future__ import annotations

import atexit
import os
import sys
from types import TracebackType

from tinyhybrid import _core
from tinyhybrid.helpers import PROFILE, TRACK_MATCH_STATS, VIZ, getenv
from tinyhybrid.uop.ops import UOp


def tracking() -> bool:
  """Whether rewrites are being recorded (VIZ, TRACK_MATCH_STATS): for work only worth doing then."""
  return _core.track_enabled()


def stage(name: str, before: UOp, after: UOp) -> None:
  """Records a pass that is not a graph_rewrite (lowering, applying optimizations) as a step of the current group."""
  if _core.track_enabled(): _core.track_stage(name, before, after)


class group:  # noqa: N801 (used as a statement: `with viz.group("kernel") as g:`)
  """The rewrites inside the block form one group (a kernel); set `name` and `text` (its source) before it ends."""
  __slots__ = ("on", "name", "text")

  def __init__(self, kind: str):
    self.on, self.name, self.text = _core.track_enabled(), "", ""
    if self.on: _core.track_group_begin(kind)

  def __enter__(self) -> group: return self

  def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
    if self.on: _core.track_group_end(self.name or (f"failed: {typ.__name__}" if typ else "?"), self.text)


def _at_exit() -> None:
  from tinyhybrid.viz import session as vsession
  sys.stdout.flush()  # the program's own output first: the server may block from here on
  tracked = _core.track_enabled()
  sess = vsession.collect(final=True) if (tracked or VIZ) else None
  if sess is not None and getenv("PRINT_MATCH_STATS", int(bool(TRACK_MATCH_STATS and not VIZ))):
    from tinyhybrid.viz.stats import print_match_stats
    print_match_stats(sess)
  if PROFILE or VIZ:
    from tinyhybrid.viz import profile
    profile.write_at_exit()
  if sess is None or not (VIZ or TRACK_MATCH_STATS >= 2): return
  path = getenv("VIZ_PATH", "") or os.path.join(_tempdir(), f"tinyhybrid_viz_{os.getpid()}.pkl")
  try:
    vsession.save(sess, path)
    print(f"VIZ: session saved to {path} (`python -m tinyhybrid.viz {path}` serves it)", file=sys.stderr)
  except OSError as e: print(f"VIZ: could not save the session to {path}: {e}", file=sys.stderr)
  # as in tinygrad, only VIZ>0 in a terminal serves at exit: a script whose output is piped (CI, a log) must end
  if VIZ <= 0 or not sys.stdout.isatty(): return
  from tinyhybrid.viz import serve
  serve.serve(sess, block=True)


def _tempdir() -> str:
  import tempfile
  return tempfile.gettempdir()


def _setup() -> None:
  """Called once when tinyhybrid is imported: switches tracking on for VIZ and TRACK_MATCH_STATS."""
  if VIZ or TRACK_MATCH_STATS: _core.track_enable(True)
  atexit.register(_at_exit)
  if VIZ < 0:  # serve at once, while the script runs: the page reads what has been recorded so far on every load
    from tinyhybrid.viz import serve, session as vsession
    serve.serve(vsession.live(), block=False)
