"""A VIZ session: the C++ recorder's trace (tinyhybrid/track.h) decoded into groups (kernels) of rewrite calls with their
steps, over one table of graph nodes, plus the profiler's events. It holds only plain values (node ids, strings), so it
pickles small and loads without the objects it describes; `save`/`load` keep it in a file."""
from __future__ import annotations

import pickle
import struct
import threading
from array import array
from dataclasses import dataclass, field
from typing import Any

from tinyhybrid import _core
from tinyhybrid.uop.ops import UOp

FORMAT, VERSION = "tinyhybrid-viz", 1
NONE = 0xFFFFFFFF
K_BEGIN, K_STEP, K_END, K_GROUP_BEGIN, K_GROUP_END = 1, 2, 3, 4, 5
_OPERANDS = {K_BEGIN: 5, K_STEP: 5, K_END: 2, K_GROUP_BEGIN: 1, K_GROUP_END: 2}
ARG_CHARS = 300  # an arg's text past this is cut: a label, not a dump


@dataclass
class Node:
  op: str
  dtype: str
  arg: str  # "" when the arg is None
  src: tuple[int, ...]
  tag: str


@dataclass
class Step:
  rule: str
  location: str  # "path:line" of the rule (a UPat's line, or the C++ line that built a native rule)
  before: int
  after: int


@dataclass
class Call:
  name: str
  root: int
  result: int | None  # None: the rewrite raised
  steps: list[Step] = field(default_factory=list)
  depth: int = 0      # rewrites run from inside a rule's callback are nested
  stage: bool = False  # a pass recorded with viz.stage, not a graph_rewrite
  bottom_up: bool = False


@dataclass
class Group:
  kind: str  # "kernel", "schedule", or "rewrites" for calls made outside any group
  name: str
  calls: list[Call] = field(default_factory=list)
  text: str = ""  # a kernel's rendered source
  depth: int = 0


@dataclass
class Session:
  nodes: list[Node] = field(default_factory=list)
  groups: list[Group] = field(default_factory=list)
  events: list[tuple] = field(default_factory=list)  # profiler spans: (name, device, start_ns, end_ns, kind, queue)
  mem: list[tuple] = field(default_factory=list)     # profiler memory: (device, ts_ns, nbytes)
  format: str = FORMAT
  version: int = VERSION


class Builder:
  """Feeds traces into a Session as they are taken. The recorder numbers its calls, strings and nodes afresh after
  each take, so ids are mapped here; groups and calls still open at the end of one trace go on in the next."""

  def __init__(self) -> None:
    self.session = Session()
    self.ids: dict[UOp, int] = {}
    self.dtypes: dict[Any, str] = {}
    self.op_names: dict[Any, str] = {}
    self.open_groups: list[Group] = []
    self.open_calls: dict[int, Call] = {}
    self.loose: Group | None = None  # the group that collects calls made outside any group

  def node_id(self, u: UOp) -> int:
    ids = self.ids
    if (i := ids.get(u)) is not None: return i
    nodes, dtypes, op_names = self.session.nodes, self.dtypes, self.op_names
    # every node below u that is not in the table yet, sources first (the walk is C++'s); each field is read once, as
    # reading one builds a Python object (this loop is most of the decoding at exit)
    for n in u.toposort(gate=lambda n: n not in ids):
      op, dtype, arg, tag = n.op, n.dtype, n.arg, n.tag
      if (dt := dtypes.get(dtype)) is None: dt = dtypes[dtype] = str(dtype).removeprefix("dtypes.")
      if (name := op_names.get(op)) is None: name = op_names[op] = op.name  # an enum's .name is a slow property
      ids[n] = len(nodes)
      nodes.append(Node(name, dt, "" if arg is None else _text(arg), tuple([ids[s] for s in n.src]), "" if tag is None else _text(tag)))
    return ids[u]

  def feed(self, words: bytes, strings: list[str], nodes: list[UOp]) -> None:
    w = array("I")
    w.frombytes(words)
    node = [self.node_id(u) for u in nodes]
    calls: dict[int, Call] = {}  # this trace's call ids
    c: Call | None
    i, n = 0, len(w)
    while i < n:
      kind = w[i]
      ops = _OPERANDS.get(kind)
      if ops is None or i + 1 + ops > n: raise ValueError(f"VIZ: malformed trace at word {i} (record kind {kind})")
      a = w[i + 1:i + 1 + ops]
      i += 1 + ops
      if kind == K_BEGIN:
        cid, parent, name, root, flags = a
        par = calls.get(parent) or self.open_calls.get(parent)
        c = Call(strings[name], node[root], None, depth=par.depth + 1 if par is not None else 0, stage=bool(flags & 2),
                 bottom_up=bool(flags & 1))
        calls[cid] = c
        self._group().calls.append(c)
      elif kind == K_STEP:
        if (c := calls.get(a[0]) or self.open_calls.get(a[0])) is not None: c.steps.append(Step(strings[a[1]], strings[a[2]], node[a[3]], node[a[4]]))
      elif kind == K_END:
        c = calls.pop(a[0], None) or self.open_calls.pop(a[0], None)
        if c is not None: c.result = None if a[1] == NONE else node[a[1]]
      elif kind == K_GROUP_BEGIN:
        g = Group(strings[a[0]], "", depth=len(self.open_groups))
        self.session.groups.append(g)
        self.open_groups.append(g)
        self.loose = None
      elif kind == K_GROUP_END and self.open_groups:
        g = self.open_groups.pop()
        g.name, g.text = strings[a[0]], strings[a[1]]
    # calls still running (a take from inside a rewrite) finish in a later trace; the recorder numbers them afresh, so
    # a later trace reaches them only through this map if it is read before ids are reused (the live server's case)
    self.open_calls.update(calls)

  def _group(self) -> Group:
    if self.open_groups: return self.open_groups[-1]
    if self.loose is None:
      self.loose = Group("rewrites", "rewrites outside kernels")
      self.session.groups.append(self.loose)
    return self.loose

  def take_profile(self) -> None:
    from tinyhybrid.device import profile_events, profile_mem
    self.session.events.extend((e.name, e.device, e.start_ns, e.end_ns, e.kind, e.queue) for e in profile_events[len(self.session.events):])
    self.session.mem.extend((m.device, m.ts_ns, m.nbytes) for m in profile_mem[len(self.session.mem):])


_builder = Builder()
_lock = threading.RLock()  # also held by a live server while it reads the session (serve.State)


def collect(final: bool = False) -> Session:
  """This process's session: everything recorded so far (the recorder's buffer is taken and emptied). final: the
  process is ending, tracking is switched off first so that the work done here is not recorded."""
  with _lock:
    if final: _core.track_enable(False)
    _builder.feed(*_core.track_take())
    _builder.take_profile()
    return _builder.session


def live() -> Any:
  """For a server started while the program runs: collect() on every look."""
  return collect


# ** saving and loading **

class _SessionUnpickler(pickle.Unpickler):
  """Loads only what a session holds: a trace file cannot run code."""
  _allowed = {("tinyhybrid.viz.session", n) for n in ("Session", "Group", "Call", "Step", "Node")}

  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in self._allowed: return super().find_class(module, name)
    raise pickle.UnpicklingError(f"{module}.{name} is not part of a VIZ session")


MAGIC = b"THVIZ\x00"


def save(s: Session, path: str) -> None:
  with open(path, "wb") as f:
    f.write(MAGIC + struct.pack("<I", VERSION))
    pickle.dump(s, f, protocol=pickle.HIGHEST_PROTOCOL)


def load(path: str) -> Session:
  """The session saved at path. A file that is not one (or is cut short or damaged) raises ValueError saying so."""
  with open(path, "rb") as f:
    head = f.read(len(MAGIC) + 4)
    if len(head) < len(MAGIC) + 4 or not head.startswith(MAGIC):
      raise ValueError(f"{path}: not a tinyhybrid VIZ session (it does not start with the session header; save one with VIZ=1)")
    if (v := struct.unpack("<I", head[len(MAGIC):])[0]) != VERSION:
      raise ValueError(f"{path}: a VIZ session of format version {v}; this tinyhybrid reads version {VERSION}")
    try: s = _SessionUnpickler(f).load()
    except Exception as e:  # noqa: BLE001 (any failure to decode is the same problem for the user)
      raise ValueError(f"{path}: the VIZ session is damaged or truncated ({type(e).__name__}: {e})") from None
  if not isinstance(s, Session) or not isinstance(s.groups, list) or not isinstance(s.nodes, list):
    raise ValueError(f"{path}: the file holds no VIZ session")
  return s


def _text(x: Any) -> str:
  try: t = str(x)
  except Exception as e:  # noqa: BLE001 (a label must not take the page down)
    t = f"<{type(x).__name__}: str() raised {type(e).__name__}>"
  return t if len(t) <= ARG_CHARS else t[:ARG_CHARS] + "…"
