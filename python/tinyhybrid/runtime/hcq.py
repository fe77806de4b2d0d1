"""The HCQ runtime every queue-backed device shares: submits go through one dependency tracker, which orders them
across queues and devices by the memory they declare (hcq.CommandBuffer.access), and which the host asks before it
reads, writes or frees memory. A submit returns at once (tinygrad's asynchronous realize); the host waits only when it
touches memory a submit still uses, or on Device.synchronize(). SYNC=1 makes every submit wait, for debugging. A kernel
that faults on its device raises hcq.DeviceFault (a RuntimeError naming it) at the first wait that covers it.

A device plugs in with a queue (an hcq.Queue: the C++ CPU ring, later a GPU's command processor) and programs whose
keepalive is an HCQProgram; QueueRunner and ChainRunner then run its schedules and TinyJit replays."""
from __future__ import annotations

import atexit
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tinyhybrid._core import hcq
from tinyhybrid.device import CompiledProgram, CopySpec, ProfileEvent, Runner, profile_events
from tinyhybrid.helpers import PROFILE, ContextVar

SYNC = ContextVar("SYNC", 0)
# the one tracker of this process: host-memory devices share addresses, so one table orders them all
TRACKER = hcq.DepsTracker()
_queues: weakref.WeakSet[hcq.Queue] = weakref.WeakSet()
# finalizers: (queue, timeline value, fn) to run once the queue's timeline reaches the value (a profiled run's
# timestamps read into profile_events), in the order they were added
_finalizers: list[tuple[hcq.Queue, int, Callable[[], None]]] = []


def when_done(queue: hcq.Queue, value: int, fn: Callable[[], None]) -> None:
  """Runs fn at the first submit, host wait or synchronize after queue's timeline reached value."""
  _finalizers.append((queue, value, fn))


def run_finalizers() -> None:
  if not _finalizers: return
  ready: list[Callable[[], None]] = []
  waiting = []
  for f in _finalizers:
    if f[0].timeline.value >= f[1]: ready.append(f[2])
    else: waiting.append(f)
  _finalizers[:] = waiting
  for fn in ready: fn()


def register(queue: hcq.Queue) -> None:
  """A device's queue, drained at exit (the device registers it once, off the submit path)."""
  _queues.add(queue)


def submit(queue: hcq.Queue, cb: hcq.CommandBuffer, patches: list[int] | None = None) -> int:
  """Runs cb on queue after the waits its accesses need; returns the timeline value that marks it done."""
  value = TRACKER.submit(queue, cb, patches)
  if SYNC: queue.wait(value)
  run_finalizers()
  return value


def synchronize(queue: hcq.Queue) -> None:
  """Until everything submitted to queue is done, and its finalizers ran."""
  queue.synchronize()
  run_finalizers()


def synchronize_all() -> None:
  """Until every queue's work is done (what reads the whole profile does this first). Every queue is drained before
  the first device fault met is raised."""
  fault: hcq.DeviceFault | None = None
  for q in list(_queues):
    try: q.synchronize(None)
    except hcq.DeviceFault as e: fault = fault or e
  run_finalizers()
  if fault is not None: raise fault


def submit_group(members: list[tuple[hcq.Queue, hcq.CommandBuffer, list[int] | None]]) -> list[int]:
  """Members that order themselves (signals between their queues), submitted together after their waits on earlier work."""
  values = TRACKER.submit_group(members)
  if SYNC:
    for (q, _, _), v in zip(members, values): q.wait(v)
  return values


def host_wait(address: int, write: bool = False, begin: int = 0, end: int = hcq.WHOLE) -> None:
  """Until the host may read (write: also write or free) bytes [begin, end) of the memory at address."""
  TRACKER.wait(address, begin, end, write)
  run_finalizers()


# work still in flight at exit runs to its end before the memory it uses goes
atexit.register(synchronize_all)


@dataclass
class HCQProgram:
  """What a queue needs to run a compiled kernel: its program, the argument words every launch appends after the
  kernel's own (the CPU's per-device state), and what must stay alive while it may run."""
  program: hcq.Program
  extra: list[int] = field(default_factory=list)
  keep: Any = None


def encode_copy(cb: hcq.CommandBuffer, dst: int | hcq.Patch, src: int | hcq.Patch, spec: CopySpec) -> None:
  """A copy of spec's bytes between the buffers at dst and src (addresses or patch slots), with its accesses."""
  def at(base: int | hcq.Patch, offset: int) -> int | hcq.Patch:
    return hcq.Patch(base.slot, base.offset + offset) if isinstance(base, hcq.Patch) else base + offset
  cb.copy(at(dst, spec.dst_offset), at(src, spec.src_offset), spec.nbytes)
  cb.access(dst, spec.dst_offset, spec.dst_offset + spec.nbytes, write=True)
  cb.access(src, spec.src_offset, spec.src_offset + spec.nbytes)


def accesses(prg: CompiledProgram, args: list[int]) -> list[tuple[int, bool]]:
  """(argument, written) for each buffer an item touches (its slot or its address): a copy writes its first and reads its second, a kernel
  writes its first prg.outs buffers and reads the others (its variables are not memory)."""
  if isinstance(prg.keepalive, CopySpec): return [(args[0], True), (args[1], False)]
  return [(a, k < prg.outs) for k, a in enumerate(args[:prg.bufs if prg.bufs >= 0 else len(args)])]


def _declare(cb: hcq.CommandBuffer, slots: list[int], items: list[tuple[CompiledProgram, list[int], Any]]) -> None:
  """The memory the items touch, one access per buffer slot (written if any item writes it)."""
  written: dict[int, bool] = {}
  for prg, args, _ in items:
    for a, w in accesses(prg, args): written[a] = written.get(a, False) or w
  for a, w in written.items(): cb.access(hcq.Patch(slots[a]), write=w)


def _encode_item(cb: hcq.CommandBuffer, slots: list[int], prg: CompiledProgram, args: list[int], threads: Any) -> None:
  if isinstance(prg.keepalive, CopySpec):  # a copy between devices (engine/multi.py), run by this queue
    encode_copy(cb, hcq.Patch(slots[args[0]]), hcq.Patch(slots[args[1]]), prg.keepalive)
  else:
    hp: HCQProgram = prg.keepalive
    # a CPU kernel's launch is its number of threads, a GPU kernel's its (work-groups, work-items per group)
    glob, local = threads if isinstance(threads, tuple) else ((threads,), (1,))
    if 0 in glob: return  # a kernel over no elements: no work-group to launch
    cb.exec(hp.program, [*(hcq.Patch(slots[a]) for a in args), *hp.extra], global_size=glob, local_size=local)


def encode_items(cb: hcq.CommandBuffer, slots: list[int], items: list[tuple[CompiledProgram, list[int], Any]],
                 stamps: np.ndarray | None = None) -> None:
  """Kernels (and copies) over patch slots, each bracketed by timestamps into `stamps` when given, with their accesses.
  Item k's times are stamps[4k + 1] and stamps[4k + 3]: each time has the 16 bytes a GPU's report may take."""
  for k, (prg, args, threads) in enumerate(items):
    if stamps is not None: cb.timestamp(stamps.ctypes.data + 32 * k + 8)
    _encode_item(cb, slots, prg, args, threads)
    if stamps is not None: cb.timestamp(stamps.ctypes.data + 32 * k + 24)
  _declare(cb, slots, items)


def fits(items: list[tuple[CompiledProgram, list[int], Any]]) -> bool:
  """Whether every item's arguments fit a queue command."""
  return all(isinstance(p.keepalive, CopySpec) or len(a) + len(p.keepalive.extra) <= hcq.MAX_EXEC_ARGS for p, a, _ in items)


class QueueRunner(Runner):
  """A schedule encoded once as a command buffer whose buffer addresses are patch slots: a run is one submit, which
  returns before the work is done. With PROFILE=1 a second encoding (made on first use) brackets every item with
  timestamps, read into profile_events once the run is done (when_done)."""
  def __init__(self, items: list[tuple[CompiledProgram, list[int], Any]], nslots: int, queue: hcq.Queue, device: str):
    super().__init__(items, nslots, device)
    self.queue = queue
    self.cb = self._encode(None)
    self.profiled: tuple[hcq.CommandBuffer, np.ndarray] | None = None

  def _encode(self, stamps: np.ndarray | None) -> hcq.CommandBuffer:
    cb = hcq.CommandBuffer()
    encode_items(cb, [cb.add_slot(0) for _ in range(self.nslots)], self.items, stamps)
    return cb

  def __call__(self, addresses: list[int]) -> None:
    if not PROFILE:
      submit(self.queue, self.cb, addresses)
      return
    if self.profiled is None:
      stamps = np.zeros(4 * len(self.items), dtype=np.uint64)
      self.profiled = (self._encode(stamps), stamps)
    cb, stamps = self.profiled
    self.profiled = None  # this run's stamps are read later: the next run encodes stamps of its own
    def record() -> None:
      for k, (prg, _, _) in enumerate(self.items):
        profile_events.append(ProfileEvent(prg.name, self.device, int(stamps[4 * k + 1]), int(stamps[4 * k + 3])))
    when_done(self.queue, submit(self.queue, cb, addresses), record)


def chain_runner_of(kind: type, devices: list[str], items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> ChainRunner | None:
  """A ChainRunner for items on devices that are all of one kind (item i on devices[i]), copies on each one's copy
  queue and kernels on its compute queue; None when a device is of another kind or an item's arguments do not fit."""
  from tinyhybrid.device import Device
  devs = [dev for d in devices if isinstance(dev := Device[d], kind)]
  if len(devs) != len(items) or not fits(items): return None
  return ChainRunner([(dev.hcq_copy_queue if isinstance(it[0].keepalive, CopySpec) else dev.hcq_queue, it) for dev, it in zip(devs, items)], nslots)


class ChainRunner(Runner):
  """Kernels and copies on several queues whose order is given (a TinyJit replay of a sharded step), as one command
  buffer per queue with that queue's items in order. The waits between queues come from a dependency tracker run
  over the items' argument slots when the runner is built: an item waits, through a signal, only for the items of
  other queues that write what it reads or use what it writes, so the queues run side by side wherever their data
  allows. A call is one group submit and no host wait. Each call's signal values are the next ones on the signals'
  timelines (patched)."""
  def __init__(self, items: list[tuple[hcq.Queue, tuple[CompiledProgram, list[int], Any]]], nslots: int):
    super().__init__([it for _, it in items], nslots)
    self.queues = list({id(q): q for q, _ in items}.values())
    self.signals = {id(q): hcq.Signal(f"{q.name} chain") for q in self.queues}
    # which earlier item (by its number on its queue, from 1) of which other queue each item waits for
    plan = hcq.DepsTracker()
    queue_of = {id(sig): qid for qid, sig in self.signals.items()}
    count = dict.fromkeys(self.signals, 0)
    waits: list[dict[int, int]] = []
    for q, (prg, args, _) in items:
      own = self.signals[id(q)]
      count[id(q)] += 1
      need: dict[int, int] = {}
      for slot, write in accesses(prg, args):
        for sig, v in plan.access(slot, 0, hcq.WHOLE, write, own, count[id(q)], skip=own): need[id(sig)] = max(need.get(id(sig), 0), v)
      need = {queue_of[sid]: v for sid, v in need.items()}
      waits.append(need)
    # what each item waits for, by queue name: {queue: item number there}
    names = {id(q): q.name for q in self.queues}
    self.waits = [{names[qid]: v for qid, v in need.items()} for need in waits]
    signalled = {(sq, v) for need in waits for sq, v in need.items()}  # (queue, item number) another queue waits for
    self.period = max(count.values()) + 1
    self.cbs = {id(q): hcq.CommandBuffer() for q in self.queues}
    slots = {id(q): [self.cbs[id(q)].add_slot(0) for _ in range(nslots)] for q in self.queues}
    self.marks: dict[int, list[int]] = {id(q): [] for q in self.queues}  # per queue: the item number of each value slot
    count = dict.fromkeys(self.signals, 0)
    for (q, (prg, args, threads)), need in zip(items, waits):
      cb, qid = self.cbs[id(q)], id(q)
      count[qid] += 1
      for sq, v in need.items():
        cb.wait(self.signals[sq], 0, patch=True)
        self.marks[qid].append(v)
      _encode_item(cb, slots[qid], prg, args, threads)
      if (qid, count[qid]) in signalled:
        cb.signal(self.signals[qid], 0, patch=True)
        self.marks[qid].append(count[qid])
    for q in self.queues: _declare(self.cbs[id(q)], slots[id(q)], [it for iq, it in items if iq is q])
    self.calls = 0

  def __call__(self, addresses: list[int]) -> None:
    self.calls += 1
    base = self.calls * self.period  # item k of a queue is done when its signal reaches base + k
    submit_group([(q, self.cbs[id(q)], [*addresses, *(base + m for m in self.marks[id(q)])]) for q in self.queues])
