"""Running work across devices: copies between devices as commands on the destination's queue, and realizing sharded
tensors (schedule/multi.py lowers them to one graph per device; the COPY nodes of those graphs run here, in waves:
the sources every ready copy needs are realized together, then the copies are submitted to their queues, then the
next wave). Nothing here waits: the dependency tracker (runtime/hcq.py) orders each copy after the work that writes
its source and the kernels that read its result after it, and devices' kernels run side by side.

CPU:N devices share the host's memory, so a COPY between two of them that only feeds arithmetic moves nothing: the
kernel on the destination reads the source's memory where it is (zero-copy), and an elementwise source over realized
memory is fused into that kernel (a ring's partial sums then collapse into one kernel per chunk). A COPY whose value is
kept (a result, a gathered piece) stays a copy, so no two devices' tensors ever share memory.

A single-device graph that reads other devices' values (Tensor.to() is a lazy COPY; gradients of shard() take
shards out of sharded values: MSELECT) is realized the same way (realize_across): shards lowered, copies run, then
the graph.

This layer works on UOps and never imports Tensor: realizing graphs on devices is handed in (tensor.py)."""
from __future__ import annotations

from typing import Any, Callable

from tinyhybrid._core import hcq

from tinyhybrid.device import Buffer, CompiledProgram, CopySpec, Device, Runner
from tinyhybrid.engine import realize as engine
from tinyhybrid.runtime import hcq as hcq_runtime
from tinyhybrid.helpers import CAPTURING, PROFILE, ContextVar, prod
from tinyhybrid.schedule.kernelize import without_history
from tinyhybrid.uop.buffers import base_buffer, buffer_uop, buffer_view, byte_range
from tinyhybrid.schedule.multi import Sharded, lower_multi, lower_selects
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, movement
from tinyhybrid.uop.shape import shape_of

# realizes graphs, each on its device, and returns their realized views (contiguous: each in memory of its own)
Realize = Callable[[list[UOp], list[str], bool], list[UOp]]


def _copy_program(device: str, spec: CopySpec) -> CompiledProgram:
  """A copy of spec.nbytes from args[1] + spec.src_offset to args[0] + spec.dst_offset, as one command on `device`'s
  queue: a program like a kernel's, so TinyJit captures and replays it with the kernels."""
  def call(args: list[int], threads: int) -> None: _submit_copy(device, args[0], args[1], spec)
  return CompiledProgram(f"copy {spec.nbytes}B -> {device}", "", 0, call, keepalive=spec, mem=2 * spec.nbytes, outs=1, bufs=2,
                         remake=(_copy_program, (device, spec)))


def _submit_copy(device: str, dst: int, src: int, spec: CopySpec) -> None:
  """Submits a copy command between the buffers at dst and src to device's queue, without waiting: the tracker orders
  it after the work that uses those bytes, and what uses them later after it. A device without a queue (NULL) moves
  nothing."""
  if (queue := Device[device].hcq_copy_queue) is None: return
  hcq_runtime.encode_copy(cb := hcq.CommandBuffer(), dst, src, spec)
  hcq_runtime.submit(queue, cb)


def _host_memory(device: str) -> bool:
  """Whether the device's buffers are at addresses its queue's copy command can move (CPU:N, a mock GPU's)."""
  return Device[device].hcq_queue is not None and Device[device].allocator.is_host_memory


def _in_place(device: str) -> bool:
  """Whether the device's kernels read other such devices' memory in place, and theirs its (CPU:N)."""
  return _host_memory(device) and Device[device].shares_host_memory


def _source_range(u: UOp) -> tuple[Buffer, int] | None:
  """(buffer, byte offset) when u is one run of a realized buffer's memory, in order (uop/buffers.byte_range)."""
  return (rng[0], rng[1]) if (rng := byte_range(u)) is not None and isinstance(rng[0], Buffer) else None


def copy_buffer(dst: Buffer, src: Buffer, src_offset: int = 0) -> None:
  """dst's bytes from src's (at src_offset), as a copy command on dst's device; TinyJit captures it."""
  copy_buffers([(dst, src, CopySpec(dst.nbytes, src_offset))])


def copy_buffers(copies: list[tuple[Buffer, Buffer, CopySpec]]) -> None:
  """Each (dst, src, what) copy as a command on dst's device, submitted without waiting (the queues run them side by
  side, ordered by the memory they touch); TinyJit captures each."""
  for dst, src, spec in copies:
    if not spec.nbytes: continue
    if not (_host_memory(dst.device) and _host_memory(src.device)):
      # a device with memory of its own (CL, CUDA): through the host, with its allocator's blocking copies
      dst.copyin(src.as_buffer(spec.src_offset, spec.nbytes), spec.dst_offset)
      engine.count_runs(0, 0, 2 * spec.nbytes)
      continue
    _submit_copy(dst.device, dst.address, src.address, spec)
    engine.count_runs(0, 0, 2 * spec.nbytes)
    if engine.capturing and CAPTURING: engine.capturing[-1].record(dst.device, _copy_program(dst.device, spec), [dst, src], 1)


# ZEROCOPY=0: every COPY between devices is a copy, even where the kernel could read the source in place (the graph's
# copies are then tinygrad's, for comparing schedules)
ZEROCOPY = ContextVar("ZEROCOPY", 1)
_MOVES = (Ops.COPY, Ops.UNSHARD)
# what an elementwise COPY source fused into its consumer may hold: arithmetic and views over realized memory
_FUSABLE = GroupOp.AnyALU | GroupOp.Movement | {Ops.BUFFER, Ops.CONST, Ops.AFTER, Ops.CAST, Ops.BITCAST, Ops.DEVICE}


def _written(nodes: list[UOp]) -> set[int]:
  """The buffers (by id) that STOREs among the nodes write."""
  out: set[int] = set()
  for u in nodes:
    if u.op is Ops.STORE and (b := base_buffer(u.src[0])) is not None: out.add(id(b.arg))
  return out


def _reads(u: UOp) -> set[int]: return {id(n.arg) for n in u.toposort() if n.op is Ops.BUFFER}


def resolve_copies(graphs: list[UOp], realize: Realize) -> list[UOp]:
  """The graphs with every COPY node replaced by its source's value on its destination, and every UNSHARD (flat
  pieces from any devices put together on one) by a buffer the pieces were copied into. A COPY between host-memory
  devices that only arithmetic reads, from memory nothing here writes, is no copy at all (see the module's notes)."""
  while True:
    nodes = list(UOp.sink(*graphs).toposort())
    below: dict[UOp, bool] = {}  # a move in the node's graph
    users: dict[UOp, list[UOp]] = {}
    ready: list[UOp] = []
    for u in nodes:
      below[u] = any(below[s] or s.op in _MOVES for s in u.src)
      for s in u.src: users.setdefault(s, []).append(u)
      if u.op in _MOVES and not below[u]: ready.append(u)
    if not ready: return graphs
    roots, written = set(graphs), _written(nodes)
    subs: dict[UOp, UOp] = {}
    todo: dict[UOp, tuple[UOp, bool]] = {}  # a source to realize first -> (its graph, whether only read in place)
    for m in ready:
      if m.op is Ops.COPY and m.src[0].device is None:  # a constant: computed where it is used
        subs[m] = m.src[0]
        continue
      src = m.src[0]
      if ZEROCOPY and m.op is Ops.COPY and m not in roots and all(p.op in GroupOp.ALU for p in users.get(m, ())) and _in_place(str(src.device)) \
         and _in_place(Device.canonicalize(m.arg)) and _reads(src).isdisjoint(written):
        # read in place: a view of memory as it is, an elementwise graph over memory that only this copy reads
        if buffer_view(src) or (len(users.get(src, ())) == 1 and all(n.op in _FUSABLE for n in src.toposort())): subs[m] = src
        elif src not in todo: todo[src] = (src, True)
        continue
      for s in m.src:
        if _source_range(s) is None and s not in todo: todo[s] = (s, False)
    # memory for every move's result first: a source that is a flat piece of a gather on its own device is computed
    # straight into its place there (no copy), and the other moves copy it from that place. Between host-memory
    # devices the kernel that computes it stores it into its place in every gather (one kernel, no copies: the
    # allgather of a ring allreduce), as a kernel reads a copy's source in place.
    dsts = {m: Buffer(Device.canonicalize(m.arg if m.op is Ops.COPY else m.arg[0]), prod(shape_of(m) or ()), m.dtype)
            for m in ready if m not in subs and not (m.op is Ops.COPY and todo.get(m.src[0], (None, False))[1])}
    homes: dict[UOp, list[tuple[UOp, UOp]]] = {}  # source -> the gathers it is computed into, with those STOREs
    for m, dst in dsts.items():
      if m.op is not Ops.UNSHARD: continue
      at = 0
      for src in m.src:
        n, here = prod(shape_of(src) or ()), str(src.device)
        if src in todo and shape_of(src) == (n,) and (here == dst.device or (ZEROCOPY and _in_place(here) and _in_place(dst.device))):
          st = UOp(Ops.STORE, src.dtype, (movement(Ops.SHRINK, buffer_uop(dst, (m.arg[1],)), ((at, at + n),)), src))
          placed = homes.setdefault(src, [])
          placed.insert(0 if here == dst.device else len(placed), (m, st))  # its own device's place first
        at += n
    realized: dict[UOp, UOp] = {}
    if plain := [src for src in todo if src not in homes]:
      realized.update(zip(plain, realize(plain, [str(src.device) for src in plain], True)))
    if homes:
      stores = [(src, st) for src, placed in homes.items() for _, st in placed]
      for (src, _), view in zip(stores, realize([st for _, st in stores], [str(src.device) for src, _ in stores], False)):
        realized.setdefault(src, view)
    wave: list[tuple[Buffer, Buffer, CopySpec]] = []
    for m in ready:
      if m in subs: continue
      if m not in dsts:  # read in place once computed
        subs[m] = realized[m.src[0]]
        continue
      dst, at = dsts[m], 0
      for src in m.src:
        nbytes = prod(shape_of(src) or ()) * m.dtype.itemsize
        if all(g is not m for g, _ in homes.get(src, ())):  # (a piece computed into its place here needs no copy)
          rng = _source_range(realized.get(src, src))
          assert rng is not None, "a realized copy source is a buffer"
          wave.append((dst, rng[0], CopySpec(nbytes, rng[1], at)))
        at += nbytes
      subs[m] = buffer_uop(dst, shape_of(m) or ())
    copy_buffers(wave)
    # a source computed for a move is that value wherever else the graphs use it (not computed again there)
    for src, view in realized.items(): subs.setdefault(src, view)
    graphs = [g.substitute(subs) for g in graphs]


def realize_multi(roots: list[UOp], devices: tuple[str, ...], realize: Realize) -> list[UOp]:
  """Realizes graphs of tensors sharded across `devices`: each is lowered to one graph per device, the copies between
  devices run, then every device's graphs are realized. Returns what each root becomes: the MSTACK of its realized
  shards."""
  lowered: list[Sharded] = lower_multi(roots, devices)
  flat = resolve_copies([g for s in lowered for g in s.shards], realize)
  n = len(devices)
  done = realize(flat, [devices[i % n] for i in range(len(flat))], False)
  return [UOp(Ops.MSTACK, r.dtype, tuple(done[k * n:(k + 1) * n]), (devices, s.axis)) for k, (r, s) in enumerate(zip(roots, lowered))]


def realize_across(roots: list[UOp], devices: list[str], realize: Realize) -> list[UOp]:
  """Realizes graphs, each on its own device, that read values from other devices (COPY nodes, and MSELECTs: shards
  of sharded values): the shards are lowered to graphs of their devices, the copies run, then the graphs are realized
  on their devices. Returns each root's realized view."""
  # a realized node's history (AFTER(view, how it was computed), kept for autograd) is not computed again
  graphs, _ = without_history(roots)
  return realize(resolve_copies(lower_selects(graphs), realize), devices, False)


def _segments(devices: list[str], items: list) -> list[tuple[str, list]]:
  segments: list[tuple[str, list]] = []
  for d, it in zip(devices, items):
    if not segments or segments[-1][0] != d: segments.append((d, []))
    segments[-1][1].append(it)
  return segments


def batch_runners(devices: list[str], items: list[tuple[CompiledProgram, list[int], Any]], nslots: int) -> list[Runner]:
  """Runners for kernels and copies on several devices that run in the given order (a TinyJit replay): one per run
  of consecutive items on one device, or, when every device is a CPU queue, one for all of them that runs each
  device's items from one command buffer, where an item waits for another device's only when their buffers meet (no
  Python per kernel, one submit per device)."""
  segments = _segments(devices, items)
  if len(segments) > 1 and not PROFILE and (chain := Device[devices[0]].chain_runner(devices, items, nslots)) is not None:
    return [chain]
  return [Device[d].runner(seg, nslots) for d, seg in segments]
