"""Scheduling: which tensor-graph nodes become kernels. Elementwise work and movement fuse into the kernel of
whatever consumes them; a reduce, a contiguous(), an assign and every requested output ends a kernel.

Scheduling works on the graph with its buffers replaced by numbered slots. Interning makes that normalized graph a
structural key: the same computation on other buffers is the same node, so a second run reuses the whole plan
(kernels compiled, buffers laid out) and only binds new memory."""
from __future__ import annotations

from dataclasses import dataclass, field

from tinyhybrid.device import Buffer
from tinyhybrid.dtype import DType
from tinyhybrid.helpers import prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

MOVEMENT = GroupOp.Movement


@dataclass(frozen=True)
class BufferSlot:
  """A buffer by position: inputs first (in graph order), then the buffers the schedule creates."""
  index: int
  size: int
  dtype: DType


@dataclass
class KernelItem:
  """One kernel: compute `out` (a normalized tensor-graph node) into slot `buffer`, reading slots of earlier kernels."""
  out: UOp
  buffer: BufferSlot
  realized: dict[UOp, BufferSlot] = field(default_factory=dict)


@dataclass
class ScheduleSpec:
  """A whole plan for one graph structure."""
  items: list[KernelItem]
  n_inputs: int
  new_slots: list[BufferSlot]
  outputs: list[tuple[str, int]]  # per root: ("view", slot) | ("store", -1) | ("none", -1)


def buffer_view(u: UOp) -> bool:
  """A node that is already memory: a BUFFER, or movement on top of one (an AFTER is its realized src[0])."""
  while u.op in MOVEMENT or u.op is Ops.AFTER: u = u.src[0]
  return u.op is Ops.BUFFER


def normalize(roots: list[UOp]) -> tuple[UOp, list[Buffer], list[UOp]]:
  """The graph with every BUFFER replaced by a BufferSlot and every UNIQUE numbered in order, the Buffers in slot
  order, and the graph's nodes."""
  sink = UOp.sink(*roots)
  nodes = list(sink.toposort())
  inputs: list[Buffer] = []
  subs: dict[UOp, UOp] = {}
  uniques = 0
  for u in nodes:
    if u.op is Ops.BUFFER and isinstance(u.arg, Buffer):
      subs[u] = UOp(Ops.BUFFER, u.dtype, (), BufferSlot(len(inputs), u.arg.size, u.dtype))
      inputs.append(u.arg)
    elif u.op is Ops.UNIQUE:
      subs[u] = UOp(Ops.UNIQUE, u.dtype, (), uniques)
      uniques += 1
  return (sink.substitute(subs) if subs else sink), inputs, nodes


def create_schedule(key: UOp, n_inputs: int) -> ScheduleSpec:
  """Plans the kernels of a normalized sink (see normalize)."""
  roots = list(key.src)
  nodes = list(key.toposort())  # keeps every node's Python object (and its cached shape) alive
  ends_kernel = {u for u in nodes if u.op in (Ops.REDUCE, Ops.CONTIGUOUS, Ops.STORE)}
  # a root that is only a reshape of something already getting a buffer is a view of that buffer, not a copy
  ends_kernel |= {r for r in roots if not buffer_view(r) and _strip_reshape(r) not in ends_kernel}
  items: list[KernelItem] = []
  realized: dict[UOp, BufferSlot] = {}
  new_slots: list[BufferSlot] = []
  for u in nodes:
    if u not in ends_kernel: continue
    # contiguous() of what is already a whole buffer is that buffer, unless it asked for memory of its own (UNIQUE)
    if u.op is Ops.CONTIGUOUS and len(u.src) == 1 and (buf := contiguous_buffer(u.src[0])) is not None:
      realized[u] = buf
      continue
    if u.op is Ops.STORE: slot = base_buffer(u.src[0]).arg  # an assign writes into the buffer under its target
    else:
      slot = BufferSlot(n_inputs + len(new_slots), prod(shape_of(u) or ()), u.dtype)
      new_slots.append(slot)
    items.append(KernelItem(u, slot, realized))  # one shared map: a kernel only reaches nodes realized before it
    realized[u] = slot
  outputs = []
  for r in roots:
    base = _strip_reshape(r)
    if r in realized and r.op is not Ops.STORE: outputs.append(("view", realized[r].index))
    elif base.op is Ops.STORE and base in realized: outputs.append(("store", -1))
    elif base in realized: outputs.append(("view", realized[base].index))
    else: outputs.append(("none", -1))
  return ScheduleSpec(items, n_inputs, new_slots, outputs)


def contiguous_buffer(u: UOp) -> Buffer | BufferSlot | None:
  """The buffer a node is all of, in order (a BUFFER, or a reshape of one; a realized AFTER is its view), or None."""
  if u.op is Ops.AFTER: u = u.src[0]
  if u.op is Ops.RESHAPE: u = u.src[0]
  return u.arg if u.op is Ops.BUFFER else None


def buffer_uop(buf: Buffer | BufferSlot, shape: tuple[int, ...]) -> UOp:
  """The node for a realized buffer (or a slot) seen with `shape`."""
  b = UOp(Ops.BUFFER, buf.dtype, (), buf)
  return b if tuple(shape) == (buf.size,) else UOp(Ops.RESHAPE, buf.dtype, (b,), tuple(shape))


def base_buffer(u: UOp) -> UOp:
  """The BUFFER under a view (movement ops and realized AFTERs)."""
  while u.op in MOVEMENT or u.op is Ops.AFTER: u = u.src[0]
  if u.op is not Ops.BUFFER: raise ValueError("assign: the target is not a view of a buffer")
  return u


def _strip_reshape(u: UOp) -> UOp:
  while u.op is Ops.RESHAPE: u = u.src[0]
  return u
