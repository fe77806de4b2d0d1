"""The VIZ web server: the standard library's HTTP server on localhost, the page's files from the package, and a JSON
API over a session:

  /api/session           groups (kernels) with their rewrite calls, and whether there is a profile
  /api/step?g=&c=&k=     step k of call c of group g: the graph as SVG, node details, the rule that fired
  /api/source?g=         a kernel's rendered source
  /api/profile           the timeline's tracks and memory
  /trace.json            the same profile as a Chrome/Perfetto trace

VIZ_PORT picks the port (default 8000); when it is taken the next free one is used, and the message says so."""
from __future__ import annotations

import errno
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from tinyhybrid.helpers import getenv
from tinyhybrid.viz import profile as vprofile
from tinyhybrid.viz.graph import GRAPHVIZ_MISSING, Graphs, have_graphviz, nsteps
from tinyhybrid.viz import session as vsession
from tinyhybrid.viz.session import Session

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                 ".png": "image/png", ".svg": "image/svg+xml"}
PORT_TRIES = 100


class State:
  """The session a server shows: a fixed one (a saved file, a finished program) or a live one (VIZ=-1) that is
  collected again whenever the page asks for the list."""

  def __init__(self, source: Session | Callable[[], Session]):
    self.source = source
    # a live session grows while the program runs (and the program collects into it at exit): share its lock
    self.lock = vsession._lock if callable(source) else threading.RLock()
    self.session = source if isinstance(source, Session) else source()
    self.graphs = Graphs(self.session)

  def refresh(self) -> None:
    if callable(self.source):
      n = len(self.session.nodes)
      self.session = self.source()
      if len(self.session.nodes) != n: self.graphs = Graphs(self.session)  # its index of nodes is out of date


def session_json(s: Session) -> dict[str, Any]:
  """The page's index: every group with the calls that changed something (steps), stages and failures; calls that
  changed nothing are only counted, as they are most of a compile (every simplify() of an index expression)."""
  groups = []
  for gi, g in enumerate(s.groups):
    calls = [[ci, c.name, nsteps(c), c.depth, int(c.stage), int(c.result is None)]
             for ci, c in enumerate(g.calls) if c.steps or c.stage or c.result is None]
    groups.append({"i": gi, "kind": g.kind, "name": g.name, "depth": g.depth, "calls": calls, "quiet": len(g.calls) - len(calls),
                   "has_source": bool(g.text)})
  return {"groups": groups, "profile": bool(s.events or s.mem), "graphviz": have_graphviz(),
          "graphviz_missing": GRAPHVIZ_MISSING}


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
  class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None: pass  # noqa: A002 (the base class's name)

    def send(self, body: bytes, ctype: str, status: int = 200) -> None:
      self.send_response(status)
      self.send_header("Content-Type", ctype)
      self.send_header("Content-Length", str(len(body)))
      self.send_header("Cache-Control", "no-store")
      self.end_headers()
      self.wfile.write(body)

    def send_json(self, obj: Any, status: int = 200) -> None: self.send(json.dumps(obj).encode(), "application/json", status)

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
      url = urlparse(self.path)
      q = {k: v[-1] for k, v in parse_qs(url.query).items()}
      try:
        if url.path in ("/", "/index.html"): return self.static("index.html")
        if url.path.startswith("/static/"): return self.static(url.path[len("/static/"):])
        with state.lock:
          if url.path == "/api/session":
            state.refresh()
            return self.send_json(session_json(state.session))
          if url.path == "/api/step": return self.send_json(state.graphs.step(int(q["g"]), int(q["c"]), int(q.get("k", 0))))
          if url.path == "/api/source":
            g = state.session.groups[int(q["g"])]
            return self.send_json({"name": g.name, "text": g.text})
          if url.path == "/api/profile":
            return self.send_json(vprofile.timeline(vprofile.build(state.session.events, state.session.mem)))
          if url.path == "/trace.json":
            return self.send_json(vprofile.chrome_trace(vprofile.build(state.session.events, state.session.mem)))
        self.send_json({"error": f"no such page: {url.path}"}, 404)
      except (KeyError, ValueError, IndexError) as e:
        self.send_json({"error": f"bad request {self.path}: {type(e).__name__}: {e}"}, 400)
      except (BrokenPipeError, ConnectionResetError): pass

    def static(self, name: str) -> None:
      path = os.path.normpath(os.path.join(STATIC, name))
      if not path.startswith(STATIC + os.sep) or not os.path.isfile(path): return self.send_json({"error": f"no such file: {name}"}, 404)
      with open(path, "rb") as f: self.send(f.read(), CONTENT_TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))
  return Handler


def bind(handler: type[BaseHTTPRequestHandler], port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
  """A server on `port`, or the next free port after it (up to PORT_TRIES), saying so when it moves."""
  for p in range(port, port + PORT_TRIES):
    try: srv = ThreadingHTTPServer((host, p), handler)
    except OSError as e:
      if e.errno in (errno.EADDRINUSE, errno.EACCES): continue
      raise
    if p != port: print(f"VIZ: port {port} is in use; serving on port {p} instead", file=sys.stderr)
    return srv
  raise OSError(f"VIZ: no free port in {port}..{port + PORT_TRIES - 1} (set VIZ_PORT)")


def serve(source: Session | Callable[[], Session], port: int | None = None, block: bool = True, quiet: bool = False) -> ThreadingHTTPServer:
  """Serves the session: until interrupted (block), or on a daemon thread (the server is returned; shutdown() stops it)."""
  srv = bind(make_handler(State(source)), getenv("VIZ_PORT", 8000) if port is None else port)
  srv.daemon_threads = True
  if not quiet:
    print(f"VIZ: serving on http://127.0.0.1:{srv.server_address[1]}" + ("" if not block else "  (Ctrl-C to stop)"), file=sys.stderr)
    if not have_graphviz(): print(f"VIZ: {GRAPHVIZ_MISSING}", file=sys.stderr)
  if block: wait_forever(srv)
  else: threading.Thread(target=srv.serve_forever, name="tinyhybrid-viz", daemon=True).start()
  return srv


def wait_forever(srv: ThreadingHTTPServer) -> None:
  """Serves until Ctrl-C."""
  try: srv.serve_forever()
  except KeyboardInterrupt: pass
  finally: srv.server_close()
