"""Memory planning: buffers a schedule creates share memory when their lifetimes do not overlap."""
from __future__ import annotations

from tinyhybrid.uop.buffers import BufferSlot


def plan_memory(kernel_slots: list[list[int]], new_slots: list[BufferSlot], keep: set[int], by_bytes: bool = False) \
    -> tuple[list[int], dict[int, int]]:
  """For each new slot, the physical buffer it lives in, and the bytes of each physical buffer that slots of other
  sizes or dtypes share. kernel_slots[k] lists the slots kernel k uses (its output first). A slot lives from its
  first use to its last. Slots in `keep` (the outputs) live on, each in memory of its own or in that of a dead slot of
  its size and dtype. Without by_bytes the others do the same. With it (memory that views can share: the host's)
  they share bytes: the largest first, each in the smallest physical buffer free over its whole life (a 0.5B LLM's
  decode step took 3.8 MiB in buffers of exactly matching sizes, 1.3 so)."""
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  for k, slots in enumerate(kernel_slots):
    for s in slots:
      first.setdefault(s, k)
      last[s] = k
  def life(slot: BufferSlot) -> tuple[int, int]:
    start = first.get(slot.index, 0)
    return start, last.get(slot.index, start)
  physical = [0] * len(new_slots)
  count = 0
  shared: list[tuple[int, int, list[tuple[int, int]]]] = []  # (physical id, bytes, the lives of its tenants)
  if by_bytes:
    for j in sorted((j for j, s in enumerate(new_slots) if s.index not in keep), key=lambda j: (-_nbytes(new_slots[j]), life(new_slots[j])[0])):
      lo, hi = life(new_slots[j])
      if open_ := [g for g in shared if all(b < lo or hi < a for a, b in g[2])]:
        pid, _, lives = min(open_, key=lambda g: g[1])
        lives.append((lo, hi))
      else:
        pid, count = count, count + 1
        shared.append((pid, _nbytes(new_slots[j]), [(lo, hi)]))
      physical[j] = pid
  free: list[tuple[int, BufferSlot, int]] = []  # (physical id, its slot, the kernel after which it is free)
  # by first use: a slot then only takes memory whose every earlier tenant is dead (kernels may run in another order
  # than their slots were made: reads_before_writes)
  for j in sorted(range(len(new_slots)), key=lambda j: life(new_slots[j])[0]):
    slot = new_slots[j]
    if by_bytes and slot.index not in keep: continue
    start, end = life(slot)
    pick = next((f for f in free if f[1].size == slot.size and f[1].dtype is slot.dtype and f[2] < start), None)
    if pick is not None:
      free.remove(pick)
      pid = pick[0]
    else:
      pid, count = count, count + 1
    physical[j] = pid
    if slot.index not in keep: free.append((pid, slot, end))
  return physical, {pid: nbytes for pid, nbytes, lives in shared if len(lives) > 1}


def _nbytes(slot: BufferSlot) -> int: return slot.size * slot.dtype.itemsize
