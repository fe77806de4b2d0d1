"""Memory planning: buffers a schedule creates share memory when their lifetimes do not overlap."""
from __future__ import annotations

from tinyhybrid.uop.buffers import BufferSlot


def plan_memory(kernel_slots: list[list[int]], new_slots: list[BufferSlot], keep: set[int]) -> list[int]:
  """For each new slot, the physical buffer it lives in. kernel_slots[k] lists the slots kernel k uses (its output
  first). A slot lives from its first use to its last; a later slot of the same size and dtype may take over its
  memory once it is dead. Slots in `keep` (the outputs) live on."""
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  for k, slots in enumerate(kernel_slots):
    for s in slots:
      first.setdefault(s, k)
      last[s] = k
  physical = [0] * len(new_slots)
  free: list[tuple[int, BufferSlot, int]] = []  # (physical id, its slot, the kernel after which it is free)
  count = 0
  # by first use: a slot then only takes memory whose every earlier tenant is dead (kernels may run in another order
  # than their slots were made: reads_before_writes)
  for j in sorted(range(len(new_slots)), key=lambda j: first.get(new_slots[j].index, 0)):
    slot = new_slots[j]
    start = first.get(slot.index, 0)
    pick = next((f for f in free if f[1].size == slot.size and f[1].dtype is slot.dtype and f[2] < start), None)
    if pick is not None:
      free.remove(pick)
      pid = pick[0]
    else:
      pid, count = count, count + 1
    physical[j] = pid
    if slot.index not in keep: free.append((pid, slot, last.get(slot.index, start)))
  return physical
