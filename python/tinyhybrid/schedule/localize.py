"""A kernel in its own terms. A scheduled kernel names buffers by their slot in the whole schedule and reaches the
kernels before it through shared graph nodes; its local form numbers buffers by first use (the output first) and sees
earlier kernels' outputs as plain buffer views. Kernels that differ only in which buffers they touch (the repeated
blocks of a network, the same update on many parameters) then have one local form, which is interned: it keys the
cache of lowered, rendered and compiled kernels."""
from __future__ import annotations

import itertools

from tinyhybrid.schedule.kernelize import KernelItem
from tinyhybrid.uop.buffers import BufferSlot, base_buffer, buffer_uop
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of


def localize(item: KernelItem) -> tuple[KernelItem, list[BufferSlot]]:
  """The item's local form, and the schedule slot of each local buffer (index i: local slot i)."""
  slots: dict[BufferSlot, BufferSlot] = {}
  order: list[BufferSlot] = []
  new: dict[UOp, UOp] = {}
  uniques = itertools.count()

  def local(b: BufferSlot) -> BufferSlot:
    if (s := slots.get(b)) is None:
      s = slots[b] = BufferSlot(len(order), b.size, b.dtype)
      order.append(b)
    return s

  def outside(s: UOp) -> UOp:
    # an earlier kernel's output: an assign is the view it wrote through, anything else its buffer
    v = rebuild(s.src[0]) if s.op is Ops.STORE else buffer_uop(local(item.realized[s]), shape_of(s) or ())
    new[s] = v
    return v

  def rebuild(root: UOp) -> UOp:
    for u in root.toposort(gate=lambda n: n is root or n is item.out or n not in item.realized):
      if u in new: continue
      if u.op is Ops.BUFFER: new[u] = UOp(Ops.BUFFER, u.dtype, (), local(u.arg))
      elif u.op is Ops.UNIQUE: new[u] = UOp(Ops.UNIQUE, u.dtype, (), next(uniques))
      else:
        srcs = tuple(new[s] if s in new else outside(s) for s in u.src)
        new[u] = u if all(a is b for a, b in zip(srcs, u.src)) else UOp(u.op, u.dtype, srcs, u.arg)
    return new[root]

  out_slot = local(item.buffer)
  for st in item.also: local(base_buffer(st.src[0]).arg)  # the other outputs follow the first
  return KernelItem(rebuild(item.out), out_slot, also=tuple(rebuild(st) for st in item.also)), order
