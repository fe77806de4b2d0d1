"""Memory planning: buffers a schedule creates share memory when their lifetimes do not overlap."""
from __future__ import annotations

from tinyhybrid.uop.buffers import BufferSlot


def share_by_lifetime(items: list[tuple[int, int, int]]) -> list[list[int]]:
  """Items (bytes, first use, last use) in groups whose lives do not overlap, each group to share one piece of memory
  as large as its first member: the largest first, each into the smallest group free over its whole life. Taken in
  order of first use instead, an item joining a group grew it (a 0.5B LLM's prompt capture: 6.4 MiB for 5.1 live at
  once, 5.6 so)."""
  groups: list[tuple[int, list[int], list[tuple[int, int]]]] = []  # (bytes, members, their lives)
  for i in sorted(range(len(items)), key=lambda i: (-items[i][0], items[i][1])):
    nbytes, lo, hi = items[i]
    if free := [g for g in groups if all(b < lo or hi < a for a, b in g[2])]:
      _, members, lives = min(free, key=lambda g: g[0])
      members.append(i)
      lives.append((lo, hi))
    else: groups.append((nbytes, [i], [(lo, hi)]))
  return [members for _, members, _ in groups]


def plan_memory(kernel_slots: list[list[int]], new_slots: list[BufferSlot], keep: set[int], by_bytes: bool = False) \
    -> tuple[list[int], dict[int, int]]:
  """For each new slot, the physical buffer it lives in, and the bytes of each physical buffer that slots of other
  sizes or dtypes share. kernel_slots[k] lists the slots kernel k uses (its output first). A slot lives from its
  first use to its last. Slots in `keep` (the outputs) live on, each in memory of its own or in that of a dead slot of
  its size and dtype. Without by_bytes the others do the same. With it (memory that views can share: the host's)
  they share bytes (share_by_lifetime: a 0.5B LLM's decode step took 3.8 MiB in buffers of exactly matching sizes,
  1.3 so)."""
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
  bases: dict[int, int] = {}
  if by_bytes:
    inner = [j for j, s in enumerate(new_slots) if s.index not in keep]
    groups = share_by_lifetime([(_nbytes(new_slots[j]), *life(new_slots[j])) for j in inner])
    for pid, members in enumerate(groups):
      for m in members: physical[inner[m]] = pid
      if len(members) > 1: bases[pid] = _nbytes(new_slots[inner[members[0]]])
    count = len(groups)
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
  return physical, bases


def _nbytes(slot: BufferSlot) -> int: return slot.size * slot.dtype.itemsize
