"""The profiler's events (tinyhybrid.device.profile_events and profile_mem, recorded with PROFILE=1) as tracks: one per
device queue with its spans (kernels, copies, TinyJit replays), and each device's memory in use over time. The same
tracks go to the page's timeline and to a Chrome/Perfetto trace file (the trace-event JSON format).

Bad events are kept out rather than trusted: a span that ends before it starts is dropped (and counted), an event
without a device goes on an "unknown" device, and a track left empty is not shown."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from tinyhybrid.helpers import getenv

UNKNOWN = "unknown"


@dataclass
class Track:
  device: str
  queue: str
  spans: list[tuple[str, str, int, int]] = field(default_factory=list)  # (name, kind, start_ns, end_ns), by start


@dataclass
class Profile:
  tracks: list[Track]
  memory: dict[str, list[tuple[int, int]]]  # device -> [(ts_ns, bytes in use after it)]
  start_ns: int
  end_ns: int
  dropped: int  # spans that ended before they started


def build(events: list[tuple], mem: list[tuple]) -> Profile:
  """events: (name, device, start_ns, end_ns, kind, queue); mem: (device, ts_ns, nbytes)."""
  tracks: dict[tuple[str, str], Track] = {}
  dropped = 0
  for name, device, start, end, kind, queue in events:
    if not isinstance(start, int) or not isinstance(end, int) or end < start:
      dropped += 1
      continue
    dev = device or UNKNOWN
    t = tracks.get((dev, queue or "queue"))
    if t is None: t = tracks[(dev, queue or "queue")] = Track(dev, queue or "queue")
    t.spans.append((str(name), kind or "kernel", start, end))
  for t in tracks.values():
    # by start, and a longer span first when two start together: a replay before the kernels inside it
    t.spans.sort(key=lambda s: (s[2], -(s[3] - s[2])))
  memory: dict[str, list[tuple[int, int]]] = {}
  used: dict[str, int] = {}
  for device, ts, nbytes in sorted(mem, key=lambda m: m[1]):
    dev = device or UNKNOWN
    used[dev] = max(0, used.get(dev, 0) + nbytes)  # memory allocated before profiling began may be freed during it
    memory.setdefault(dev, []).append((ts, used[dev]))
  stamps = [s[2] for t in tracks.values() for s in t.spans] + [m[0] for v in memory.values() for m in v]
  ends = [s[3] for t in tracks.values() for s in t.spans] + [m[0] for v in memory.values() for m in v]
  ordered = sorted((t for t in tracks.values() if t.spans), key=lambda t: (t.device == UNKNOWN, t.device, t.queue))
  return Profile(ordered, memory, min(stamps, default=0), max(ends, default=0), dropped)


def timeline(p: Profile) -> dict[str, Any]:
  """The page's timeline: times in microseconds from the first event."""
  t0 = p.start_ns
  return {"start_ns": t0, "duration_us": (p.end_ns - t0) / 1e3, "dropped": p.dropped,
          "tracks": [{"device": t.device, "queue": t.queue,
                      "spans": [[n, k, (s - t0) / 1e3, (e - s) / 1e3] for n, k, s, e in t.spans]} for t in p.tracks],
          "memory": {d: [[(ts - t0) / 1e3, b] for ts, b in pts] for d, pts in p.memory.items()}}


def chrome_trace(p: Profile) -> dict[str, Any]:
  """The trace-event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open: a process per device, a thread
  per queue, a complete ("X") event per span and a counter ("C") per memory change. Every event carries ph, ts, dur,
  pid and tid, metadata too, so a reader of the format needs no special cases."""
  t0 = p.start_ns
  devices = sorted({t.device for t in p.tracks} | set(p.memory), key=lambda d: (d == UNKNOWN, d))
  pid = {d: i + 1 for i, d in enumerate(devices)}
  out: list[dict[str, Any]] = []
  for d in devices: out.append({"ph": "M", "name": "process_name", "ts": 0, "dur": 0, "pid": pid[d], "tid": 0, "args": {"name": d}})
  tids: dict[tuple[str, str], int] = {}
  for t in p.tracks:
    tid = tids[(t.device, t.queue)] = len([k for k in tids if k[0] == t.device]) + 1
    out.append({"ph": "M", "name": "thread_name", "ts": 0, "dur": 0, "pid": pid[t.device], "tid": tid, "args": {"name": t.queue}})
    for name, kind, s, e in t.spans:
      out.append({"ph": "X", "name": name, "cat": kind, "ts": (s - t0) / 1e3, "dur": (e - s) / 1e3, "pid": pid[t.device], "tid": tid})
  for d, pts in p.memory.items():
    for ts, b in pts: out.append({"ph": "C", "name": "memory", "ts": (ts - t0) / 1e3, "dur": 0, "pid": pid[d], "tid": 0, "args": {"bytes": b}})
  return {"traceEvents": out, "displayTimeUnit": "ns", "otherData": {"generator": "tinyhybrid PROFILE=1", "dropped_spans": p.dropped}}


def current() -> Profile:
  from tinyhybrid.device import profile_events, profile_mem
  from tinyhybrid.runtime.hcq import synchronize_all
  synchronize_all()  # a run's events are recorded once it is done
  return build([(e.name, e.device, e.start_ns, e.end_ns, e.kind, e.queue) for e in profile_events],
               [(m.device, m.ts_ns, m.nbytes) for m in profile_mem])


def write_trace(path: str, p: Profile | None = None) -> str:
  p = current() if p is None else p
  with open(path, "w") as f: json.dump(chrome_trace(p), f)
  return path


def write_at_exit() -> None:
  """PROFILE=1's file, when anything was recorded: to PROFILE_PATH, or a temporary file whose path is printed."""
  p = current()
  if not p.tracks and not p.memory: return
  path = getenv("PROFILE_PATH", "") or os.path.join(tempfile.gettempdir(), f"tinyhybrid_profile_{os.getpid()}.json")
  try: write_trace(path, p)
  except OSError as e:
    print(f"PROFILE: could not write the trace to {path}: {e}", file=sys.stderr)
    return
  note = f"; {p.dropped} spans that ended before they started were left out" if p.dropped else ""
  print(f"PROFILE: trace written to {path} (open it at https://ui.perfetto.dev or chrome://tracing){note}", file=sys.stderr)
