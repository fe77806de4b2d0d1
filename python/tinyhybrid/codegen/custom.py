"""A kernel written in tinygrad's kernel DSL (uop/kernel_dsl.py) as this project's kernel IR: SINK(END(STORE or GROUP
of STOREs at INDEX(PARAM, flat index), *loops)), with loads made explicit and accumulators turned into REDUCEs.

The DSL writes memory and reads it back: `acc.set(0)` then, in a loop k, `acc.set(acc.after(k) + x, end=k)`. Here a
read of a placeholder's state is resolved to a value: the last store to that element before it (through the AFTERs
of the state), or a load of the argument. A store in loop k whose value combines (+, *, max) the element's value
from the previous iteration with x is the reduce of x over k, combined with the value before the loop. Registers
(REG placeholders) become values that way and are never stored; every store to an argument (GLOBAL) is one of the
kernel's stores, and stores under different loops (loops one after another in the sink) are kernels of their own."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import AddrSpace, AxisType, Ops
from tinyhybrid.uop.buffers import BufferSlot
from tinyhybrid.uop.ops import KernelInfo, UOp

IDX = dtypes.weakint
_COMBINE = (Ops.ADD, Ops.MUL, Ops.MAX)


def _stores(dep: UOp, loops: tuple[UOp, ...] = ()) -> list[tuple[UOp, tuple[UOp, ...]]]:
  """The stores in an AFTER's dependency (a STORE, an END of stores in loops, a GROUP of them) with their loops."""
  if dep.op is Ops.STORE: return [(dep, loops)]
  if dep.op is Ops.END: return _stores(dep.src[0], loops + dep.src[1:])
  if dep.op is Ops.GROUP: return [s for d in dep.src for s in _stores(d, loops)]
  return []  # an ordering dependency (a loop's index): no store


@dataclass
class _Converter:
  args: Sequence[tuple[DType, int]]  # each GLOBAL placeholder slot's (dtype, element count)
  memo: dict[UOp, UOp] = field(default_factory=dict)

  def base(self, state: UOp) -> UOp:
    while state.op in (Ops.AFTER, Ops.RESHAPE): state = state.src[0]
    if state.op is not Ops.PARAM: raise ValueError(f"custom kernel: indexes a {state.op}, not a placeholder")
    return state

  def flat(self, index: UOp) -> UOp:
    """The element an INDEX names, as a row-major offset into its placeholder (through reshapes)."""
    view = index.src[0]
    while view.op is Ops.AFTER: view = view.src[0]
    shape = view.arg if view.op is Ops.RESHAPE else view.arg.shape
    idxs = [self.value(i) for i in index.src[1:]]
    if len(idxs) != len(shape): raise ValueError(f"custom kernel: {len(idxs)} indices into a placeholder of shape {shape}")
    out = UOp.const(IDX, 0)
    for i, ix in enumerate(idxs): out = out + (ix if ix.dtype is IDX else ix.cast(IDX)) * prod(shape[i + 1:])
    return out.simplify()

  def param(self, p: UOp) -> UOp:
    slot = p.arg.slot
    if slot >= len(self.args): raise ValueError(f"custom kernel: placeholder {slot}, but {len(self.args)} tensors were given")
    dtype, size = self.args[slot]
    if p.dtype is not dtype: raise ValueError(f"custom kernel: placeholder {slot} is {p.dtype}, its tensor {dtype}")
    return UOp(Ops.PARAM, dtype.ptr(size), (), slot)

  def value(self, u: UOp) -> UOp:
    if (got := self.memo.get(u)) is not None: return got
    if u.op is Ops.INDEX: out = self.read(u.src[0], self.flat(u))
    elif u.op is Ops.RANGE:
      kind = AxisType.REDUCE if u.arg[1] is AxisType.REDUCE else AxisType.LOOP
      out = UOp(Ops.RANGE, IDX, (self.value(u.src[0]),), (u.arg[0], kind))
    elif u.op in (Ops.AFTER, Ops.STORE, Ops.END, Ops.GROUP, Ops.PARAM, Ops.STACK):
      raise ValueError(f"custom kernel: a {u.op} is used as a value")
    else: out = u.replace(src=tuple(self.value(s) for s in u.src)) if u.src else u
    self.memo[u] = out
    return out

  def read(self, state: UOp, flat: UOp) -> UOp:
    """The value of the element `flat` of a placeholder's memory in this state."""
    if state.op is Ops.AFTER:
      for dep in reversed(state.src[1:]):
        for st, loops in reversed(_stores(dep)):
          if self.base(st.src[0].src[0]) is self.base(state) and self.flat(st.src[0]) is flat: return self.stored(st, loops, flat)
      return self.read(state.src[0], flat)
    if state.op is Ops.RESHAPE: return self.read(state.src[0], flat)
    if state.arg.addrspace is not AddrSpace.GLOBAL: raise ValueError("custom kernel: reads a register before storing to it")
    p = self.param(state)
    return UOp(Ops.LOAD, state.dtype, (UOp(Ops.INDEX, state.dtype, (p, flat)),))

  def stored(self, st: UOp, loops: tuple[UOp, ...], flat: UOp) -> UOp:
    """What an element holds after a store (in loops): its value, or, where the value combines the element's value
    from the loops' previous iteration with x, the value before the loops combined with the reduce of x."""
    target, v = st.src[0].src[0], st.src[1]
    if not (carried := self.carried(st, loops, flat)): return self.value(v)
    if len(carried) != 1 or v.op not in _COMBINE or carried[0] not in v.src:
      raise ValueError(f"custom kernel: an accumulator must be updated as acc + x, acc * x or max(acc, x), not {v.op}")
    x = v.src[1] if v.src[0] is carried[0] else v.src[0]
    before = self.read(target, flat)
    return UOp(v.op, v.dtype, (before, UOp(Ops.REDUCE, v.dtype, (self.value(x), *(self.value(r) for r in loops)), v.op)))

  def carried(self, st: UOp, loops: tuple[UOp, ...], flat: UOp) -> list[UOp]:
    """The reads in a store's value of the same element as the loops' previous iteration left it (acc.after(k))."""
    if not loops: return []
    target = self.base(st.src[0].src[0])
    return [u for u in st.src[1].toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.AFTER and set(loops) <= set(u.src[0].src[1:])
            and self.base(u.src[0]) is target and self.flat(u) is flat]

  def outputs(self, u: UOp, loops: tuple[UOp, ...]) -> list[tuple[UOp, UOp, UOp, tuple[UOp, ...]]]:
    """(placeholder, flat index, value, loops) of each element the kernel stores to an argument."""
    if u.op in (Ops.SINK, Ops.GROUP): return [o for s in u.src for o in self.outputs(s, loops)]
    if u.op is Ops.END: return self.outputs(u.src[0], loops + u.src[1:])
    if u.op is Ops.STORE:
      flat = self.flat(u.src[0])
      return [(self.base(u.src[0].src[0]), flat, self.stored(u, (), flat), loops)]
    if u.op is Ops.AFTER:  # a state: what its last stores left (an accumulator's loops are inside the value)
      out = []
      for st, inner in (s for d in u.src[1:] for s in _stores(d)):
        flat = self.flat(st.src[0])
        out.append((self.base(u), flat, self.read(u, flat), loops if self.carried(st, inner, flat) else loops + inner))
      return out
    raise ValueError(f"custom kernel: the sink holds a {u.op}, not stores")


def lower_custom(sink: UOp, args: Sequence[tuple[DType, int]]) -> list[tuple[LoweredKernel, list[int]]]:
  """The kernels a DSL sink describes, each with the argument slot of each of its PARAMs (the written ones first, as
  a lowered kernel's outputs are). A lowered kernel stores one value (to one or more buffers): a sink that stores
  different values becomes one kernel per value, run in the order of their stores."""
  conv = _Converter(args)
  outs = [o for o in conv.outputs(sink, ()) if o[0].arg.addrspace is AddrSpace.GLOBAL]
  info = sink.arg if isinstance(sink.arg, KernelInfo) else KernelInfo(name="custom")
  name = re.sub(r"\W", "_", info.name) or "custom"
  # stores in different loops (two loops one after the other in the sink) are kernels of their own, in store order
  by_value: dict[tuple[tuple[UOp, ...], UOp], list[UOp]] = {}
  for p, flat, val, loops in outs:
    by_value.setdefault((tuple(conv.value(r) for r in loops), val), []).append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, p.dtype, (conv.param(p), flat)), val)))
  return [_kernel(info, name if n == 0 else f"{name}_{n}", stores, loops, args) for n, ((loops, _), stores) in enumerate(by_value.items())]


def _kernel(info: KernelInfo, name: str, stores: list[UOp], loops: tuple[UOp, ...], args: Sequence[tuple[DType, int]]) -> tuple[LoweredKernel, list[int]]:
  used = {u for s in stores for u in s.toposort()}
  body = stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))
  # (an unrolled loop no store reads goes; the KernelInfo stays on the SINK, for its beam width)
  ast = UOp.sink(UOp(Ops.END, dtypes.void, (body, *(r for r in loops if r in used))), arg=info)
  # PARAMs renumbered: written arguments first
  written = list(dict.fromkeys(st.src[0].src[0].arg for st in stores))
  order = written + [s for s in dict.fromkeys(u.arg for u in ast.toposort() if u.op is Ops.PARAM) if s not in written]
  ast = ast.substitute({u: UOp(Ops.PARAM, u.dtype, (), order.index(u.arg)) for u in ast.toposort() if u.op is Ops.PARAM}).simplify()
  if sum(1 for u in ast.toposort() if u.op is Ops.REDUCE) > 1: raise ValueError("custom kernel: a reduce inside another reduce is not supported")
  work = prod(int(r.src[0].arg) for r in ast.toposort() if r.op is Ops.RANGE)
  buffers = [BufferSlot(i, args[s][1], args[s][0]) for i, s in enumerate(order)]
  return LoweredKernel(name, ast, buffers, 1, work, mem=sum(b.size * b.dtype.itemsize for b in buffers), outs=len(written)), order
