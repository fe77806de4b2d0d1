"""Running work across devices: copies between devices as commands on the destination's queue, and realizing sharded
tensors (schedule/multi.py lowers them to one graph per device; the COPY nodes of those graphs run here, in waves:
the sources every ready copy needs are realized together, then the copies are submitted to their queues and waited
for together, then the next wave)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tinyhybrid._core import hcq

from tinyhybrid.device import Allocator, Buffer, CompiledProgram, CopySpec, Device
from tinyhybrid.engine import realize as engine
from tinyhybrid.helpers import prod
from tinyhybrid.schedule.kernelize import buffer_uop, buffer_view, contiguous_buffer
from tinyhybrid.schedule.multi import Sharded, is_realized_multi, lower_multi, multi_devices
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor


def _copy_program(device: str, spec: CopySpec) -> CompiledProgram:
  """A copy of spec.nbytes from args[1] + spec.src_offset to args[0] + spec.dst_offset, as one command on `device`'s
  queue: a program like a kernel's, so TinyJit captures and replays it with the kernels."""
  def call(args: list[int], threads: int) -> None:
    if (queue := _submit_copy(device, args[0] + spec.dst_offset, args[1] + spec.src_offset, spec.nbytes)) is not None: queue.synchronize()
  return CompiledProgram(f"copy {spec.nbytes}B -> {device}", "", 0, call, keepalive=spec, mem=2 * spec.nbytes)


def _submit_copy(device: str, dst: int, src: int, nbytes: int) -> Any:
  """Submits a copy command to device's queue (without waiting); returns the queue (None: a device without one)."""
  queue = getattr(Device[device], "queue", None)
  if queue is None: return None  # NULL: nothing to move
  cb = hcq.CommandBuffer()
  cb.copy(dst, src, nbytes)
  queue.submit(cb)
  return queue


def _host_memory(device: str) -> bool:
  """Whether the device's buffers are host memory its queue's copy command can move (CPU:N)."""
  return getattr(Device[device], "queue", None) is not None and type(Device[device].allocator).address is Allocator.address


def _whole(u: UOp) -> Buffer | None:
  """The realized buffer u is all of, in order (reshapes of it)."""
  while u.op is Ops.RESHAPE and len(u.src) == 1: u = u.src[0]
  return u.arg if (buf := contiguous_buffer(u)) is not None and isinstance(buf, Buffer) else None


def _source_range(u: UOp) -> tuple[Buffer, int] | None:
  """(buffer, byte offset) when u is one contiguous range of a realized buffer (whole, or a slice of its leading axis)."""
  if (buf := _whole(u)) is not None: return buf, 0
  if u.op is not Ops.SHRINK or len(u.src) != 1: return None
  shape = shape_of(u.src[0])
  if shape is None or not all(type(d) is int for d in shape): return None
  if (buf := _whole(u.src[0])) is None: return None
  k = next((i for i, (b, s) in enumerate(zip(u.arg, shape)) if b != (0, s)), 0)
  if any(shape[i] != 1 for i in range(k)) or any(u.arg[i] != (0, shape[i]) for i in range(k + 1, len(shape))): return None
  inner = 1
  for d in shape[k + 1:]: inner *= d
  return buf, u.arg[k][0] * inner * buf.dtype.itemsize


def copy_buffer(dst: Buffer, src: Buffer, src_offset: int = 0) -> None:
  """dst's bytes from src's (at src_offset), as a copy command on dst's device; TinyJit captures it."""
  copy_buffers([(dst, src, CopySpec(dst.nbytes, src_offset))])


def copy_buffers(copies: list[tuple[Buffer, Buffer, CopySpec]]) -> None:
  """Each (dst, src, what) copy as a command on dst's device, all submitted before any is waited for (the queues run
  them side by side); TinyJit captures each."""
  queues: dict[int, Any] = {}
  for dst, src, spec in copies:
    if not spec.nbytes: continue
    if not (_host_memory(dst.device) and _host_memory(src.device)):
      # a device with memory of its own (CL, CUDA): through the host, with its allocator's blocking copies
      staged = src.as_buffer()[spec.src_offset:spec.src_offset + spec.nbytes]
      if spec.dst_offset or spec.nbytes != dst.nbytes: raise NotImplementedError(f"a partial copy into {dst.device}")
      dst.copyin(staged)
      engine.count_runs(0, 0, 2 * spec.nbytes)
      continue
    if (q := _submit_copy(dst.device, dst.address + spec.dst_offset, src.address + spec.src_offset, spec.nbytes)) is not None:
      queues[id(q)] = q
    engine.count_runs(0, 0, 2 * spec.nbytes)
    if engine.capturing: engine.capturing[-1].runs.append((dst.device, _copy_program(dst.device, spec), [dst, src], 1))
  for q in queues.values(): q.synchronize()


def resolve_copies(graphs: list[UOp]) -> list[UOp]:
  """The graphs with every COPY node replaced by a buffer on its destination holding the source's value, and every
  UNSHARD (flat pieces from any devices put together on one) by a buffer the pieces were copied into."""
  from tinyhybrid.tensor import Tensor, _realize
  moves = (Ops.COPY, Ops.UNSHARD)
  while True:
    nodes = list(UOp.sink(*graphs).toposort())
    below: dict[UOp, bool] = {}  # a move in the node's graph
    ready: list[UOp] = []
    for u in nodes:
      below[u] = any(below[s] or s.op in moves for s in u.src)
      if u.op in moves and not below[u]: ready.append(u)
    if not ready: return graphs
    subs: dict[UOp, UOp] = {}
    todo: dict[UOp, Tensor] = {}
    for m in ready:
      if m.op is Ops.COPY and m.src[0].device is None:  # a constant: computed where it is used
        subs[m] = m.src[0]
        continue
      for src in m.src:
        if _source_range(src) is None and src not in todo: todo[src] = Tensor(src, device=src.device).contiguous()
    if todo: _realize(list(todo.values()))
    wave: list[tuple[Buffer, Buffer, CopySpec]] = []
    for m in ready:
      if m in subs: continue
      shape = shape_of(m) or ()
      dst = Buffer(Device.canonicalize(m.arg if m.op is Ops.COPY else m.arg[0]), prod(shape), m.dtype)
      at = 0
      for src in m.src:
        rng = _source_range(todo[src].uop if src in todo else src)
        assert rng is not None, "a realized copy source is a buffer"
        nbytes = prod(shape_of(src) or ()) * m.dtype.itemsize
        wave.append((dst, rng[0], CopySpec(nbytes, rng[1], at)))
        at += nbytes
      subs[m] = buffer_uop(dst, shape)
    copy_buffers(wave)
    graphs = [g.substitute(subs) for g in graphs]


def realize_multi(tensors: list[Tensor]) -> None:
  """Realizes sharded tensors: each is lowered to one graph per device, the copies between devices run, then every
  device's graphs are realized as any tensor is. The tensors (and every live tensor whose graph holds them) then read
  the MSTACK of their realized shards."""
  from tinyhybrid.tensor import Tensor, _apply_becomes, _realize
  by_devices: dict[tuple[str, ...], list[Tensor]] = {}
  for t in tensors:
    if is_realized_multi(t.uop): continue
    by_devices.setdefault(multi_devices(t.uop) or t.device, []).append(t)  # type: ignore[arg-type]
  for devices, ts in by_devices.items():
    lowered: list[Sharded] = lower_multi([t.uop for t in ts], devices)
    flat = resolve_copies([g for s in lowered for g in s.shards])
    n = len(devices)
    shard_ts = [Tensor(g, device=devices[i % n]) for i, g in enumerate(flat)]
    _realize([s for s in shard_ts if not buffer_view(s.uop)])
    becomes = {}
    for k, (t, s) in enumerate(zip(ts, lowered)):
      new = UOp(Ops.MSTACK, t.dtype, tuple(st.uop for st in shard_ts[k * n:(k + 1) * n]), (devices, s.axis))
      becomes[t.uop] = new
    _apply_becomes(becomes)
