"""Linear-scan register allocation (Poletto and Sarkar) over a machine kernel's instructions on virtual registers.

The instructions come in program order with loops marked (the position of a loop's head label and of its back jump).
A value's live interval runs from its first definition to its last use; a value live where a loop starts stays live
to the loop's back jump, since the next trip reads it again. Intervals are handed registers of their class in order
of their start; when a class runs out, the interval whose uses cost least (weighted by the loops around them) is
spilled to a stack slot of its own. Each instruction that reads a spilled value gets a reload into a scratch register before it, and each that writes one a
store after it (an ISA supplies the scratch registers and how to spell a reload and a store)."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, NamedTuple, TypeVar


class VReg:
  """A virtual register of a class ("g": general purpose, "x": vector/float), given a physical one by allocation; each
  is its own (equal only to itself)."""
  __slots__ = ("cls", "n")
  def __init__(self, cls: str, n: int): self.cls, self.n = cls, n
  def __repr__(self) -> str: return f"%{self.cls}{self.n}"


T = TypeVar("T")


# operands are tuples (made by the thousand for every kernel, where a frozen dataclass costs several times more)
class Mem(NamedTuple):
  """A memory operand: size bytes at [base + index * scale + disp] (base and index: registers, virtual or not)."""
  size: int
  base: VReg | str | None
  index: VReg | str | None = None  # type: ignore[assignment]  # (a field, where tuple has a method of the name)
  scale: int = 1
  disp: int = 0


class Reg(NamedTuple):
  """A register operand: a virtual or physical register, read or written `bits` wide."""
  r: VReg | str
  bits: int


@dataclass
class Ins:
  """One instruction: its mnemonic and operands (Reg, Mem, int immediate, or a str label); `defs` and `uses` are the
  virtual registers it writes and reads (the ISA's instruction selection fills them in)."""
  mn: str
  ops: list
  defs: tuple[VReg, ...] = ()
  uses: tuple[VReg, ...] = ()


@dataclass
class Allocation:
  assigned: dict[VReg, str] = field(default_factory=dict)  # virtual register -> physical register
  slots: dict[VReg, int] = field(default_factory=dict)     # spilled virtual register -> its stack slot's offset
  frame: int = 0                                            # bytes of spill slots


def live_intervals(code: list[Ins], loops: Iterable[tuple[int, int]]) -> dict[VReg, list[int]]:
  """Each virtual register's [first position, last position], widened over the loops it is live into."""
  iv: dict[VReg, list[int]] = {}
  for i, ins in enumerate(code):
    for v in (*ins.uses, *ins.defs):
      if v in iv: iv[v][1] = i
      else: iv[v] = [i, i]
  spans = sorted(loops, key=lambda s: s[1] - s[0])  # inner loops first: a widened interval may then enter an outer one
  changed = True
  while changed:
    changed = False
    for head, back in spans:
      for span in iv.values():
        if span[0] < head <= span[1] < back:
          span[1] = back
          changed = True
  return iv


def spill_costs(code: list[Ins], loops: Iterable[tuple[int, int]]) -> dict[VReg, float]:
  """What spilling each virtual register would cost: its reads and writes, each weighted 8x for every loop around it
  (a loop's accumulator or a buffer's address read every trip costs far more than a value read once)."""
  change = [0] * (len(code) + 1)  # the loops around each position: +1 where one starts, -1 past its end
  for head, back in loops:
    change[head] += 1
    change[back + 1] -= 1
  out: dict[VReg, float] = {}
  depth = 0
  for i, ins in enumerate(code):
    depth += change[i]
    weight = 8.0 ** depth
    for v in ins.uses: out[v] = out.get(v, 0.0) + weight
    for v in ins.defs: out[v] = out.get(v, 0.0) + weight
  return out


def linear_scan(code: list[Ins], loops: Iterable[tuple[int, int]], pools: dict[str, list[str]], slot_bytes: dict[str, int]) -> Allocation:
  """Physical registers (from `pools`, by class) or stack slots for every virtual register of `code`."""
  iv = live_intervals(code, loops)
  cost = spill_costs(code, loops)
  out = Allocation()
  free = {c: list(p) for c, p in pools.items()}
  active: list[tuple[int, VReg]] = []  # (end, vreg), holding a register

  def spill(v: VReg) -> None:
    size = slot_bytes[v.cls]
    out.frame = -(-out.frame // size) * size
    out.slots[v] = out.frame
    out.frame += size

  for v, (start, end) in sorted(iv.items(), key=lambda kv: kv[1][0]):
    for item in [a for a in active if a[0] < start]:  # expired: their registers are free again
      active.remove(item)
      free[item[1].cls].append(out.assigned[item[1]])
    if free[v.cls]:
      out.assigned[v] = free[v.cls].pop(0)
      active.append((end, v))
      continue
    # no register left: the value whose spilling costs least gives its register up (this one, or one holding a
    # register), of equal costs the one that ends last
    victim = min((a for a in active if a[1].cls == v.cls), default=None, key=lambda a: (cost[a[1]], -a[0]))
    if victim is not None and (cost[victim[1]], -victim[0]) < (cost[v], -end):
      active.remove(victim)
      out.assigned[v] = out.assigned.pop(victim[1])
      active.append((end, v))
      spill(victim[1])
    else: spill(v)
  return out


def rewrite(code: list[Ins], alloc: Allocation, scratch: dict[str, list[str]], reload: Callable[[str, VReg, int], Ins],
            store: Callable[[str, VReg, int], Ins], spell: Callable[[Ins, Mapping[VReg, str]], T]) -> list[T]:
  """The instructions on physical registers: spilled values reloaded into scratch registers before the instructions
  that read them and stored after those that write them. reload(reg, vreg, offset) and store(reg, vreg, offset) spell
  the ISA's moves between a register and a stack slot; spell(ins, where) writes each instruction out in the ISA's own
  form with its virtual registers at their places."""
  out: list[T] = []
  slots = alloc.slots
  for ins in code:
    if not slots or not any(v in slots for v in ins.uses) and not any(v in slots for v in ins.defs):
      out.append(spell(ins, alloc.assigned))
      continue
    spilled = [v for v in dict.fromkeys((*ins.uses, *ins.defs)) if v in slots]
    regs: dict[VReg, str] = {}
    taken: dict[str, int] = {}
    for v in spilled:  # read ones first: a value only written may reuse a scratch register its reads freed
      if v not in ins.uses: continue
      regs[v] = scratch[v.cls][taken.get(v.cls, 0)]
      taken[v.cls] = taken.get(v.cls, 0) + 1
    for v in spilled:  # written only: the instruction has read its sources by the time it writes
      if v not in regs: regs[v] = scratch[v.cls][0]
    for v in spilled:
      if v in ins.uses: out.append(spell(reload(regs[v], v, alloc.slots[v]), {}))
    out.append(spell(ins, collections.ChainMap(regs, alloc.assigned)))
    for v in spilled:
      if v in ins.defs: out.append(spell(store(regs[v], v, alloc.slots[v]), {}))
  return out
