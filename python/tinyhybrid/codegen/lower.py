"""Lowering a scheduled kernel to the kernel IR: loops (RANGE), index arithmetic pushed through the movement ops,
gated LOADs, a REDUCE over the reduce loops and the STORE. Index expressions are simplified by the native engine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from tinyhybrid import viz
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.schedule.kernelize import KernelItem
from tinyhybrid.uop.buffers import BufferSlot
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, sint
from tinyhybrid.uop.shape import max_shape, shape_of

if TYPE_CHECKING:
  from tinyhybrid.codegen.opt import Opt

IDX = dtypes.weakint


def _c(v: sint) -> UOp:
  """An index: a constant, or an expression of the kernel's variables (a symbolic dimension)."""
  if isinstance(v, UOp): return v if v.dtype is IDX else v.cast(IDX)
  return UOp.const(IDX, v)


# Shapes and movement args may hold sints: index expressions of the kernel's variables. Python treats a UOp as true and
# as unequal to any int, so the code below takes a symbolic size or offset as "not 0, not 1" and keeps it.

def _strides(shape: tuple[sint, ...]) -> list[sint]:
  out: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    out.append(acc if s != 1 else 0)
    acc *= s
  return out[::-1]


def _flat(idx: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
  acc = _c(0)
  for i, st in zip(idx, _strides(shape)):
    if st: acc = acc + i * st
  return acc


def reduce_identity(op: Ops, dtype):
  """What a reduce over nothing leaves: 0, 1, or the dtype's least value for max."""
  return {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(dtype)}[op]


def _over_nothing(ranges: list[UOp]) -> bool:
  """Whether a reduce's loops run zero times: it is then its identity, a constant (the loads of the loop would otherwise
  stay, hoisted out of it once its index no longer depends on it, and read past an empty buffer)."""
  return any(r.src[0].op is Ops.CONST and r.src[0].arg == 0 for r in ranges)


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
  if a is None: return b
  if b is None: return a
  return a & b


def _unflatten(flat: UOp, shape: tuple[int, ...]) -> list[UOp]:
  """The index into `shape` of a flat (row-major) index. The outermost dim needs no modulo: an in-bounds flat index
  is below the total size (one that is not in bounds is masked), and without it the index stays affine, which
  vector loads need."""
  out, acc = [], 1
  for d in range(len(shape) - 1, -1, -1):
    out.append(_c(0) if shape[d] == 1 else flat // acc if d == 0 else (flat // acc) % shape[d])
    acc *= shape[d]
  return out[::-1]


def _reshape_index(idx: tuple[UOp, ...], new: tuple, old: tuple) -> tuple[UOp, ...]:
  """The index into a reshape's source for `idx` into its result. Dims are matched in runs of equal size product: a
  run of one dim on each side (a reshape that only adds or drops 1s, or leaves a dim alone) maps as it is, so
  only dims really merged or split get a division, which keeps most indices affine. A symbolic dim maps as it is
  when the other side has the same one there (a cache view of a variable's length, reshaped around it); any other
  reshape through a symbolic dim goes through the flat index."""
  def generic() -> tuple[UOp, ...]: return tuple(x.simplify() for x in _unflatten(_flat(idx, new), old))
  if any(isinstance(s, int) and s <= 0 for s in new + old): return generic()
  out: list[UOp] = [_c(0)] * len(old)
  ni = [d for d, s in enumerate(new) if s != 1]
  oi = [d for d, s in enumerate(old) if s != 1]
  a = b = 0
  while a < len(ni):
    if b >= len(oi): return generic()
    sn, so = new[ni[a]], old[oi[b]]
    if not isinstance(sn, int) or not isinstance(so, int):
      if sn is not so: return generic()
      out[oi[b]] = idx[ni[a]]
      a, b = a + 1, b + 1
      continue
    a0, b0, pn, po = a, b, sn, so
    while pn != po:
      if pn < po: a += 1
      else: b += 1
      if a >= len(ni) or b >= len(oi) or not isinstance(new[ni[a]], int) or not isinstance(old[oi[b]], int): return generic()
      if pn < po: pn *= new[ni[a]]
      else: po *= old[oi[b]]
    if a == a0 and b == b0: out[oi[b]] = idx[ni[a]]
    else:
      group = [oi[d] for d in range(b0, b + 1)]
      for d, x in zip(group, _unflatten(_flat(tuple(idx[ni[d]] for d in range(a0, a + 1)), tuple(new[ni[d]] for d in range(a0, a + 1))),
                                         tuple(old[d] for d in group))): out[d] = x.simplify()
    a, b = a + 1, b + 1
  return tuple(out)


def through_views(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...], UOp | None]:
  """Follows movement ops down from u: the first non-movement node, the index into it, and the condition under which
  the position is inside every PAD (None when nothing pads)."""
  cond: UOp | None = None
  while u.op in GroupOp.Movement or u.op is Ops.AFTER:
    if u.op is Ops.AFTER:
      u = u.src[0]
      continue
    src = u.src[0]
    ss = shape_of(src) or ()
    op, arg = u.op, u.arg
    if op is Ops.RESHAPE: idx = _reshape_index(idx, shape_of(u) or (), ss)
    elif op is Ops.PERMUTE:
      inv = [0] * len(arg)
      for i, a in enumerate(arg): inv[a] = i
      idx = tuple(idx[inv[j]] for j in range(len(arg)))
    elif op is Ops.EXPAND: idx = tuple(_c(0) if s == 1 and n != 1 else i for i, s, n in zip(idx, ss, arg))
    elif op is Ops.SHRINK: idx = tuple(i + b if b else i for i, (b, _) in zip(idx, arg))
    elif op is Ops.FLIP: idx = tuple((s - 1) - i if f else i for i, s, f in zip(idx, ss, arg))
    elif op is Ops.PAD:
      inner = []
      for ix, s, (b, a) in zip(idx, ss, arg):
        inner.append(ix - b if b else ix)
        if b: cond = _and(cond, (ix < b).logical_not())
        if a: cond = _and(cond, ix < b + s)
      idx = tuple(x.simplify() for x in inner)
    else: raise NotImplementedError(f"lowering: movement op {op}")
    u = src
  if cond is not None:
    cond = cond.simplify()
    if cond.op is Ops.CONST and cond.arg is True: cond = None  # padding that is never reached
  return u, idx, cond


def symbolic_numel(u: UOp) -> UOp | None:
  """The size of the buffer under the movement ops u, as an expression of the kernel's variables, when a reshape to a
  symbolic shape sits directly on it (a Variable-sized buffer: Tensor(x).reshape(n.bind(4), 3)). A reshape keeps the
  element count, so the buffer holds prod(shape) elements for every value the variables take: what CHECK_OOB proves
  the accesses against (the kernel is replayed with other values, on buffers of other sizes). None otherwise."""
  run: list[UOp] = []  # the reshapes (and AFTERs) since the last other movement op
  while u.op in GroupOp.Movement or u.op is Ops.AFTER:
    run = run + [u] if u.op in (Ops.RESHAPE, Ops.AFTER) else []
    u = u.src[0]
  if u.op is not Ops.BUFFER: return None
  for v in run:
    shape = shape_of(v) or ()
    if not all(isinstance(s, int) for s in shape): return _c(prod(shape)).simplify()
  return None


@dataclass
class LoweredKernel:
  name: str
  ast: UOp                 # SINK of the store, in kernel IR (after optimize: expanded, see codegen/expand.py)
  buffers: list[BufferSlot]  # PARAM i is buffers[i]; 0 is the output (0..outs-1 when it stores to several)
  outer: int               # trip count of the loop split across cores (1: the kernel runs on one core)
  work: int                # total loop iterations, to decide whether splitting is worth it
  opts: tuple[Opt, ...] = ()  # the optimizations applied
  vars: tuple[UOp, ...] = ()  # its DEFINE_VARs, whose values follow the buffer addresses in the kernel's args
  ops: int = 0   # estimated operations per run: its arithmetic on values (not indices) times its iterations
  mem: int = 0   # bytes of the buffers it reads and writes
  proven: bool = False  # CHECK_OOB proved its accesses in bounds (codegen/validate.py)
  # PARAM i -> its buffer's size as expressions of the variables (symbolic_numel), for a Variable-sized buffer
  sizes: dict[int, tuple[UOp, ...]] = field(default_factory=dict)
  # on a GPU-style device (codegen/gpu.py): (work-groups per dimension, work-items per group per dimension)
  launch: tuple[tuple[int, ...], tuple[int, ...]] | None = None
  outs: int = 1  # how many buffers it writes: PARAMs 0..outs-1


class Lowerer:
  def __init__(self, item: KernelItem):
    self.item = item
    self.buffers: list[BufferSlot] = [item.buffer]
    self.params: dict[int, UOp] = {}
    self.memo: dict[tuple, UOp] = {}
    self.reduce_ranges: list[UOp] = []  # the loops of a reduce fused into an elementwise kernel (its epilogue)
    self.reduce_sizes: list[sint] = []
    self.next_axis = 0
    self.sizes: dict[BufferSlot, tuple[UOp, ...]] = {}  # symbolic_numel of the Variable-sized buffers

  def symbolic_size(self, view: UOp, base: UOp) -> None:
    if base.op is not Ops.BUFFER or (n := symbolic_numel(view)) is None: return
    have = self.sizes.get(base.arg, ())
    if not any(n is h for h in have): self.sizes[base.arg] = have + (n,)

  def param(self, buf: BufferSlot) -> UOp:
    for i, b in enumerate(self.buffers):
      if b == buf: break
    else:
      self.buffers.append(buf)
      i = len(self.buffers) - 1
    if i not in self.params: self.params[i] = UOp(Ops.PARAM, buf.dtype.ptr(buf.size), (), i)
    return self.params[i]

  def load(self, buf: BufferSlot, flat: UOp, valid: UOp | None) -> UOp:
    index = UOp(Ops.INDEX, buf.dtype, (self.param(buf), flat.simplify()))
    return UOp(Ops.LOAD, buf.dtype, (index,) if valid is None else (index, valid.simplify()))

  def value(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
    """The kernel IR of u at index idx under the gate valid. Walks with an explicit stack, not recursion: a chain of
    10^5 elementwise ops is as deep as the Tensor program that built it."""
    root = (u, idx, valid)
    steps: dict[tuple, tuple[list[tuple], Callable[[list[UOp]], UOp]]]
    stack, steps = [root], {}
    while stack:
      key = stack[-1]
      if key in self.memo:
        stack.pop()
        continue
      if (step := steps.get(key)) is None: step = steps[key] = self._step(*key)
      deps, build = step
      if missing := [d for d in deps if d not in self.memo]:
        stack.extend(reversed(missing))
        continue
      stack.pop()
      self.memo[key] = build([self.memo[d] for d in deps])
    return self.memo[root]

  def _step(self, u: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[list[tuple], Callable[[list[UOp]], UOp]]:
    """What the value of u at idx needs (the (node, index, gate) triples below it) and how it is made from theirs."""
    op = u.op
    if u is not self.item.out and u in self.item.realized:
      # an assign earlier in the schedule: its result is the target's view of the buffer it wrote
      if u.op is Ops.STORE: return [(u.src[0], idx, valid)], lambda v: v[0]
      return [], lambda _: self.load(self.item.realized[u], _flat(idx, max_shape(shape_of(u) or ())), valid)
    if op is Ops.BUFFER: return [], lambda _: self.load(u.arg, idx[0], valid)
    if op is Ops.CONST or op is Ops.DEFINE_VAR: return [], lambda _: u
    if op is Ops.IOTA: return [], lambda _: idx[0].cast(u.dtype)
    if op in (Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD, Ops.AFTER): return [(u.src[0], idx, valid)], lambda v: v[0]
    if op in GroupOp.Movement:
      base, bidx, cond = through_views(u, idx)
      self.symbolic_size(u, base)
      # a load masked by the padding is already 0 outside it
      def masked(v: list[UOp]) -> UOp: return v[0] if cond is None or v[0].op is Ops.LOAD else cond.where(v[0], UOp.const(v[0].dtype, 0))
      return [(base, bidx, _and(valid, cond))], masked
    if op is Ops.REDUCE: return [(u.src[0], self.fused_reduce_index(u, idx), valid)], lambda v: self.fused_reduce(u, v[0])
    if op in GroupOp.ALU or op in (Ops.CAST, Ops.BITCAST):
      return [(s, idx, valid) for s in u.src], lambda v: UOp(op, u.dtype, tuple(v), u.arg)
    raise NotImplementedError(f"lowering: {op} inside a kernel")

  def fused_reduce_index(self, u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The index into the source of a reduce inside an elementwise kernel (schedule/kernelize.py _epilogue_fused): its
    reduced axes get loops of their own, its other axes are the kernel's index."""
    if self.reduce_ranges: raise NotImplementedError("lowering: two reduces in one kernel")
    full = []
    for i, s in enumerate(shape_of(u.src[0]) or ()):
      if i not in u.arg[1]: full.append(idx[i])
      elif s == 1: full.append(_c(0))
      else:
        full.append(r := UOp(Ops.RANGE, IDX, (_c(s),), (self.next_axis, AxisType.REDUCE)))
        self.reduce_ranges.append(r)
        self.reduce_sizes.append(s)
        self.next_axis += 1
    return tuple(full)

  def fused_reduce(self, u: UOp, src: UOp) -> UOp:
    """The fused reduce of its source's value (a one-hot sum collapses to the one term, and its loop goes)."""
    op = u.arg[0]
    if op is Ops.ADD:
      src, kept = collapse_one_hot(src, self.reduce_ranges)
      self.reduce_sizes = [s for r, s in zip(self.reduce_ranges, self.reduce_sizes) if r in kept]
      self.reduce_ranges = kept
    if _over_nothing(self.reduce_ranges):
      self.reduce_ranges, self.reduce_sizes = [], []
      return UOp.const(u.dtype, reduce_identity(op, u.dtype))
    if not self.reduce_ranges: return src if src.dtype == u.dtype else src.cast(u.dtype)
    return UOp(Ops.REDUCE, u.dtype, (src, *self.reduce_ranges), op)

  def lower(self) -> LoweredKernel:
    out = self.item.out
    out_shape = shape_of(out) or ()
    full_shape: tuple[sint, ...] = shape_of(out.src[0]) if out.op is Ops.REDUCE else out_shape  # type: ignore[assignment]
    axes = set(out.arg[1]) if out.op is Ops.REDUCE else set()
    ranges: list[UOp]
    reduce_ranges: list[UOp]
    rng, ranges, reduce_ranges = [], [], []
    collapsed = 1  # the trip count of the reduce loops a gather's one-hot no longer needs
    dests: list[tuple[UOp, UOp]] = []  # (PARAM, index) of each store of the value
    for i, s in enumerate(full_shape):
      if s == 1: rng.append(_c(0)); continue
      r = UOp(Ops.RANGE, IDX, (_c(s),), (i, AxisType.REDUCE if i in axes else AxisType.LOOP))
      rng.append(r)
      (reduce_ranges if i in axes else ranges).append(r)
    self.next_axis = len(full_shape)
    if out.op is Ops.REDUCE:
      src = self.value(out.src[0], tuple(rng), None)
      if out.arg[0] is Ops.ADD:
        src, kept = collapse_one_hot(src, reduce_ranges)
        for r in reduce_ranges:
          if r not in kept: collapsed *= r.src[0].vmax
        reduce_ranges = kept
      if _over_nothing(reduce_ranges): val = UOp.const(out.dtype, reduce_identity(out.arg[0], out.dtype))
      elif reduce_ranges: val = UOp(Ops.REDUCE, out.dtype, (src, *reduce_ranges), out.arg[0])
      else: val = src if src.dtype == out.dtype else src.cast(out.dtype)
      store_idx = _flat(tuple(_c(0) if i in axes else r for i, r in enumerate(rng)), max_shape(out_shape))
    elif out.op is Ops.STORE:
      # assign: the value goes through the target's view into the target's own buffer (and the same value into the
      # targets of the item's other assigns, PARAMs 1.. in order)
      for st in (out, *self.item.also):
        base, bidx, cond = through_views(st.src[0], tuple(rng))
        self.symbolic_size(st.src[0], base)
        if base.op is not Ops.BUFFER or cond is not None: raise ValueError("assign: the target must be a view of a buffer without padding")
        dests.append((self.param(base.arg), bidx[0]))
      val = self.value(out.src[1], tuple(rng), None)
    else:
      val = self.value(out, tuple(rng), None)
      store_idx = _flat(tuple(rng), max_shape(out_shape))
      full_shape = tuple(full_shape) + tuple(self.reduce_sizes)
    if not dests: dests.append((self.param(self.item.buffer), store_idx))
    stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (p, i.simplify())), val)) for p, i in dests]
    body = stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))
    ast = UOp.sink(UOp(Ops.END, dtypes.void, (body, *ranges))).simplify()
    kvars = tuple(sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg))
    # a symbolic kernel's work is counted at the variables' largest values
    work = prod(max_shape(full_shape)) // collapsed
    arith = sum(1 for u in val.toposort() if u.op in GroupOp.ALU and u.dtype not in (IDX, dtypes.bool))
    return LoweredKernel(_kernel_name(out, full_shape, out.op is Ops.REDUCE or bool(self.reduce_ranges)), ast, self.buffers, 1, work, vars=kvars, ops=arith * work,
                         mem=sum(b.size * b.dtype.itemsize for b in self.buffers),
                         sizes={i: self.sizes[b] for i, b in enumerate(self.buffers) if b in self.sizes}, outs=len(dests))


def _and_terms(c: UOp) -> list[UOp]:
  """The conditions a chain of ANDs joins, left to right (a walk: a gate may join many)."""
  terms, stack = [], [c]
  while stack:
    if (x := stack.pop()).op is Ops.AND and x.dtype is dtypes.bool: stack.extend(reversed(x.src))
    else: terms.append(x)
  return terms


def collapse_one_hot(v: UOp, ranges: list[UOp]) -> tuple[UOp, list[UOp]]:
  """A sum over a reduce loop r of where(x == r, y, 0), x not depending on r, is y at r = x (0 when x is outside the
  loop): a gather or an embedding lookup written as a one-hot (mixin/indexing.py) becomes one indexed load instead
  of a loop over every row of the table. The index is clamped into the loop, so the load never leaves the buffer."""
  ranges = list(ranges)
  while v.op is Ops.WHERE and v.src[2].op is Ops.CONST and v.src[2].arg == 0:
    terms = _and_terms(v.src[0])
    for t in terms:
      if t.op is not Ops.CMPEQ: continue
      hit = next(((x, r) for x, b in (t.src, t.src[::-1]) for r in [b.src[0] if b.op is Ops.CAST else b]
                  if r.op is Ops.RANGE and r in ranges and dtypes.is_int(x.dtype) and r not in x.toposort()), None)
      if hit is None: continue
      x, r = hit
      i = _c(x)
      inside = (i < 0).logical_not() & (i < r.src[0])
      sub = {r: inside.where(i, _c(0))}
      cond = inside
      for o in terms:
        if o is not t: cond = cond & o.substitute(sub)
      v, ranges = cond.where(v.src[1].substitute(sub), v.src[2]), [q for q in ranges if q is not r]
      break
    else: break
  return v, ranges


def _kernel_name(out: UOp, shape: tuple[sint, ...], reduces: bool) -> str:
  kind = "r" if reduces else "E"
  dims = [str(s) if type(s) is int else "".join(c for c in s.render() if c.isalnum()) for s in shape]  # type: ignore[union-attr]
  return f"{kind}_{'_'.join(dims) if shape else 'scalar'}"[:60]


def lower(item: KernelItem) -> LoweredKernel:
  """The kernel of a schedule item as loops over its buffers, before any optimization (codegen/search.py optimize)."""
  k = Lowerer(item).lower()
  viz.stage("lower", item.out, k.ast)
  return k
