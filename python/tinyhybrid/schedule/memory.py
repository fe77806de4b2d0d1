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
  physical: list[int] = []
  free: list[tuple[int, BufferSlot, int]] = []  # (physical id, its slot, the kernel after which it is free)
  count = 0
  for slot in new_slots:
    start = first.get(slot.index, 0)
    pick = next((f for f in free if f[1].size == slot.size and f[1].dtype is slot.dtype and f[2] < start), None)
    if pick is not None:
      free.remove(pick)
      pid = pick[0]
    else:
      pid, count = count, count + 1
    physical.append(pid)
    if slot.index not in keep: free.append((pid, slot, last.get(slot.index, start)))
  return physical
