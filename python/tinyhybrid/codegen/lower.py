"""Lowering a scheduled kernel to the kernel IR: loops (RANGE), index arithmetic pushed through the movement ops,
gated LOADs, a REDUCE over the reduce loops and the STORE. The values are a rule set run by the native rewrite engine
(pm_views moves an index through one movement op, pm_lower turns each node at an index into kernel IR); the loops
and stores around them are laid out here. Index expressions are simplified by the native engine."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.codegen import floats
from tinyhybrid.codegen.kernel import KernelParts
from tinyhybrid.helpers import prod
from tinyhybrid.schedule.kernelize import KernelItem
from tinyhybrid.uop.buffers import BufferSlot, view_base
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element, resolve, sint
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite
from tinyhybrid.uop.shape import max_shape, shape_of

if TYPE_CHECKING:
  from tinyhybrid.codegen.kernel import Opt

IDX = dtypes.weakint


def _c(v: sint) -> UOp:
  """An index: a constant, or an expression of the kernel's variables (a symbolic dimension)."""
  if isinstance(v, UOp): return v if v.dtype is IDX else v.cast(IDX)
  return UOp.const(IDX, v)


# Shapes and movement args may hold sints: index expressions of the kernel's variables. bool() of an undecided
# comparison is a ValueError (tinygrad's), so the code below asks resolve(), which takes a symbolic size or offset as
# "not 0, not 1" and keeps it.

def _strides(shape: tuple[sint, ...]) -> list[sint]:
  out: list[sint] = []
  acc: sint = 1
  for s in reversed(shape):
    out.append(acc if resolve(s != 1) else 0)
    acc *= s
  return out[::-1]


def _flat(idx: tuple[UOp, ...], shape: tuple[sint, ...]) -> UOp:
  acc = _c(0)
  for i, st in zip(idx, _strides(shape)):
    if resolve(st != 0): acc = acc + i * st
  return acc


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
  ni = [d for d, s in enumerate(new) if resolve(s != 1)]
  oi = [d for d, s in enumerate(old) if resolve(s != 1)]
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


# ** views to indices: a movement op's index map, one rule per op **
# The value of a tensor-graph node u at an index, under a gate, is INDEX(u, gate, *index) (gate: TRUE when none) while
# it is being lowered. Each rule below moves that INDEX one node down; what is left when none applies is kernel IR.

TRUE = UOp.const(dtypes.bool, True)
PAD_MASK = "pad"  # the arg of a WHERE that zeroes a value outside a PAD, until it is known whether the value is a load


def at(u: UOp, idx: tuple[UOp, ...], valid: UOp | None = None) -> UOp:
  """u's value at idx, under valid, to be lowered."""
  return UOp(Ops.INDEX, u.dtype, (u, TRUE if valid is None else valid, *idx))


def _gate(x: UOp) -> UOp | None: return None if x.src[1] is TRUE else x.src[1]


def _permute(idx: tuple[UOp, ...], src: tuple, u: UOp) -> tuple[UOp, ...]:
  inv = [0] * len(u.arg)
  for i, a in enumerate(u.arg): inv[a] = i
  return tuple(idx[inv[j]] for j in range(len(u.arg)))


# how an index into a movement op's result indexes its source (shape of the source, the node)
INDEX_MAPS: dict[Ops, Callable[[tuple[UOp, ...], tuple, UOp], tuple[UOp, ...]]] = {
  Ops.RESHAPE: lambda idx, src, u: _reshape_index(idx, shape_of(u) or (), src),
  Ops.PERMUTE: _permute,
  Ops.EXPAND: lambda idx, src, u: tuple(_c(0) if s == 1 and resolve(n != 1) else i for i, s, n in zip(idx, src, u.arg)),
  Ops.SHRINK: lambda idx, src, u: tuple(i + b if resolve(b != 0) else i for i, (b, _) in zip(idx, u.arg)),
  Ops.FLIP: lambda idx, src, u: tuple((s - 1) - i if f else i for i, s, f in zip(idx, src, u.arg)),
  Ops.PAD: lambda idx, src, u: tuple((i - b).simplify() if resolve(b != 0) else i for i, (b, _) in zip(idx, u.arg)),
}


def _pad_inside(idx: tuple[UOp, ...], src: tuple, u: UOp) -> UOp | None:
  """Where an index into a PAD's result is inside its source (None: everywhere it is reached)."""
  cond: UOp | None = None
  for ix, s, (b, a) in zip(idx, src, u.arg):
    if resolve(b != 0): cond = _and(cond, (ix < b).logical_not())
    if resolve(a != 0): cond = _and(cond, ix < b + s)
  if cond is None or ((cond := cond.simplify()).op is Ops.CONST and cond.arg is True): return None
  return cond


def _through_movement(x: UOp, u: UOp) -> UOp:
  idx, src_shape = x.src[2:], shape_of(u.src[0]) or ()
  inner = at(u.src[0], INDEX_MAPS[u.op](idx, src_shape, u), _gate(x))
  if u.op is not Ops.PAD or (cond := _pad_inside(idx, src_shape, u)) is None: return inner
  return UOp(Ops.WHERE, x.dtype, (cond, at(u.src[0], inner.src[2:], _and(_gate(x), cond)), UOp.const(x.dtype, 0)), PAD_MASK)


def _reshaped_buffer(x: UOp, u: UOp) -> UOp | None:
  if len(u.src) != 1 or u.src[0].op not in (Ops.RESHAPE, Ops.DETACH): return None
  b = u.src[0]
  while b.op in (Ops.RESHAPE, Ops.DETACH) and len(b.src) == 1: b = b.src[0]
  return x.replace(src=(u.replace(src=(b,)), *x.src[1:])) if b.op is Ops.BUFFER else None


pm_views = PatternMatcher([
  (UPat(Ops.INDEX, src=(UPat(Ops.AFTER, name="u"),), allow_any_len=True, name="x"), lambda x, u: x.replace(src=(u.src[0], *x.src[1:]))),
  # a buffer's memory is flat: reshapes of it (through detaches) are one reshape. Through each in turn an index would
  # be split into the inner shape's axes and joined again, divisions that do not always fold (a conv weight
  # (cout, cin, 3, 3) read as (cout, cin*9) in blocks of 512: (b*512 + r)//9*9 + ...)
  (UPat(Ops.INDEX, src=(UPat(Ops.RESHAPE, name="u"),), allow_any_len=True, name="x"), _reshaped_buffer),
  (UPat(Ops.INDEX, src=(UPat(GroupOp.Movement, name="u"),), allow_any_len=True, name="x"), _through_movement),
  # two pads in a chain mask once, with both conditions
  (UPat(Ops.WHERE, arg=PAD_MASK, src=(UPat(name="c1"), UPat(Ops.WHERE, arg=PAD_MASK, src=(UPat(name="c2"), UPat(name="v"), UPat())), UPat(name="z"))),
   lambda c1, c2, v, z: UOp(Ops.WHERE, v.dtype, ((c1 & c2).simplify(), v, z), PAD_MASK)),
])


def through_views(u: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, tuple[UOp, ...], UOp | None]:
  """Follows movement ops down from u: the first other node, the index into it, and the condition under which the
  position is inside every PAD (None when nothing pads)."""
  x = graph_rewrite(at(u, idx), pm_views, bottom_up=True, name="views to indices")
  if x.op is Ops.WHERE: x = x.src[1]  # a PAD's mask: its condition is the gate
  return x.src[0], x.src[2:], _gate(x)


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
  loads: int = 0  # bytes its loads may read: each loaded buffer's index range, at most the buffer
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
    # the loops of the kernel's reduce, and of a reduce fused into an elementwise kernel (its epilogue)
    self.loops: dict[str, ReduceLoops] = {ROOT: ReduceLoops(), FUSED: ReduceLoops()}
    self.next_axis = 0
    self.sizes: dict[BufferSlot, tuple[UOp, ...]] = {}  # symbolic_numel of the Variable-sized buffers

  def symbolic_size(self, view: UOp, base: UOp) -> None:
    """Keeps the size of a Variable-sized buffer that view (movement ops over base) reads, for CHECK_OOB."""
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

  def fused_reduce_index(self, u: UOp, idx: tuple[UOp, ...]) -> tuple[str, tuple[UOp, ...]]:
    """The loops' kind and the index into the source of a reduce inside a kernel: its reduced axes get loops of their
    own, its other axes are the kernel's index. In an elementwise kernel (schedule/kernelize.py _epilogue_fused) that
    is the kernel's reduce; in a reducing kernel it is an inner sum (kernelize._inner_sums), whose loops run inside
    the kernel's reduce loop, once per index the kernel reads it at."""
    # (an inner sum's index only exists once the reduce it is inside of has its loops: its INDEX is made by at() of
    # that reduce's source)
    inner = self.item.out.op is Ops.REDUCE or bool(self.loops[FUSED].ranges)
    kind = f"inner {len(self.loops)}" if inner else FUSED
    loops = self.loops.setdefault(kind, ReduceLoops())
    if loops.ranges: raise NotImplementedError("lowering: two reduces in one kernel")
    full = []
    for i, s in enumerate(shape_of(u.src[0]) or ()):
      if i not in u.arg[1]: full.append(idx[i])
      elif s == 1: full.append(_c(0))
      else:
        full.append(r := UOp(Ops.RANGE, IDX, (_c(s),), (self.next_axis, AxisType.REDUCE)))
        loops.ranges.append(r)
        loops.sizes.append(s)
        self.next_axis += 1
    return kind, tuple(full)

  def reduce(self, kind: str, op: Ops, dtype: DType, src: UOp) -> UOp:
    """The reduce of its source's value over its loops (a one-hot sum collapses to the one term, and its loop goes)."""
    loops = self.loops[kind]
    if op is Ops.ADD:
      src, kept = collapse_one_hot(src, loops.ranges)
      for r in loops.ranges:
        if r not in kept: loops.collapsed *= r.src[0].vmax
      loops.sizes = [s for r, s in zip(loops.ranges, loops.sizes) if r in kept]
      loops.ranges = kept
    if _over_nothing(loops.ranges):
      loops.ranges, loops.sizes = [], []
      return UOp.const(dtype, identity_element(op, dtype))
    if not loops.ranges: return src if src.dtype == dtype else src.cast(dtype)
    return UOp(Ops.REDUCE, dtype, (src, *loops.ranges), op)

  def lower(self) -> LoweredKernel:
    """The kernel: its loops and stores laid out around the output's value at the loops' index, then every value
    turned into kernel IR by the rule set (pm_lower)."""
    out = self.item.out
    out_shape = shape_of(out) or ()
    full_shape: tuple[sint, ...] = shape_of(out.src[0]) if out.op is Ops.REDUCE else out_shape  # type: ignore[assignment]
    axes = set(out.arg[1]) if out.op is Ops.REDUCE else set()
    rng: list[UOp] = []
    ranges: list[UOp] = []
    dests: list[tuple[UOp, UOp]] = []  # (PARAM, index) of each store of the value
    for i, s in enumerate(full_shape):
      if s == 1: rng.append(_c(0)); continue
      r = UOp(Ops.RANGE, IDX, (_c(s),), (i, AxisType.REDUCE if i in axes else AxisType.LOOP))
      rng.append(r)
      (self.loops[ROOT].ranges if i in axes else ranges).append(r)
    self.next_axis = len(full_shape)
    if out.op is Ops.REDUCE:
      val = UOp(Ops.REDUCE, out.dtype, (at(out.src[0], tuple(rng)),), (ROOT, out.arg[0]))
      store_idx = _flat(tuple(_c(0) if i in axes else r for i, r in enumerate(rng)), max_shape(out_shape))
    elif out.op is Ops.STORE:
      # assign: the value goes through the target's view into the target's own buffer (and the same value into the
      # targets of the item's other assigns, PARAMs 1.. in order)
      for st in (out, *self.item.also):
        base, bidx, cond = through_views(st.src[0], tuple(rng))
        self.symbolic_size(st.src[0], base)
        if base.op is not Ops.BUFFER or cond is not None: raise ValueError("assign: the target must be a view of a buffer without padding")
        dests.append((self.param(base.arg), bidx[0]))
      val = at(out.src[1], tuple(rng))
    else:
      val = at(out, tuple(rng))
      store_idx = _flat(tuple(rng), max_shape(out_shape))
    if not dests: dests.append((self.param(self.item.buffer), store_idx))
    stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (p, i.simplify())), val)) for p, i in dests]
    body = stores[0] if len(stores) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(stores))
    lowered = graph_rewrite(UOp.sink(UOp(Ops.END, dtypes.void, (body, *ranges))), pm_lower, ctx=self, bottom_up=True, name="lower")
    val = _stored_value(lowered)
    ast = floats.in_range(lowered.simplify())
    if out.op not in (Ops.REDUCE, Ops.STORE): full_shape = tuple(full_shape) + tuple(self.loops[FUSED].sizes)
    kvars = tuple(sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg))
    # a symbolic kernel's work is counted at the variables' largest values
    work = prod(max_shape(full_shape)) // self.loops[ROOT].collapsed
    arith = _arith(val)
    # an inner sum's loop runs its ops again at each step of the kernel's: it counts in the work that decides the
    # kernel's threads, and in its ops
    inner = [(prod(int(r.src[0].vmax) for r in u.src[1:]), _arith(u.src[0])) for u in KernelParts.of(ast).inner_sums]  # (steps, ops a step)
    arith += sum(ops * (steps - 1) for steps, ops in inner)
    steps = 1 + sum(steps for steps, _ in inner)
    return LoweredKernel(_kernel_name(out, full_shape, out.op is Ops.REDUCE or bool(self.loops[FUSED].ranges)), ast, self.buffers, 1, work * steps,
                         vars=kvars, ops=arith * work, mem=sum(b.size * b.dtype.itemsize for b in self.buffers), loads=_loaded_bytes(ast, self.buffers),
                         sizes={i: self.sizes[b] for i, b in enumerate(self.buffers) if b in self.sizes}, outs=len(dests))


def _loaded_bytes(ast: UOp, buffers: list[BufferSlot]) -> int:
  """Bytes a kernel's loads may read: per buffer, the range its load indices span (a slice of a big buffer counts as
  the slice), at most the buffer."""
  spans: dict[int, tuple[int, int]] = {}
  for u in ast.toposort():
    if u.op is Ops.LOAD and (ix := u.src[0]).op is Ops.INDEX and ix.src[0].op is Ops.PARAM:
      lo, hi, p = ix.src[1].vmin, ix.src[1].vmax, ix.src[0].arg
      seen = spans.get(p, (lo, hi))
      spans[p] = (min(seen[0], lo), max(seen[1], hi))
  def size(p: int, lo: int, hi: int) -> int:
    b = buffers[p]
    return (min(hi - lo + 1, b.size) if isinstance(b.size, int) else hi - lo + 1) * b.dtype.itemsize
  return sum(size(p, lo, hi) for p, (lo, hi) in spans.items())


def _arith(u: UOp) -> int:
  """The arithmetic ops computing u (not its index arithmetic nor its conditions)."""
  return sum(1 for x in u.toposort() if x.op in GroupOp.AnyALU and x.dtype not in (IDX, dtypes.bool))


def _stored_value(sink: UOp) -> UOp:
  """The value a lowered kernel (SINK(END(STORE or GROUP of STOREs, *loops))) stores."""
  body = sink.src[0].src[0]
  return (body if body.op is Ops.STORE else body.src[0]).src[1]


@dataclass
class ReduceLoops:
  """A reduce's loops while its value is lowered: the ranges it still runs, their sizes, and the trip count of those
  a one-hot sum no longer needs."""
  ranges: list[UOp] = field(default_factory=list)
  sizes: list[sint] = field(default_factory=list)
  collapsed: int = 1


# ** lowering: the value of each tensor-graph node at an index, as kernel IR **

NOT_PARAM = tuple(o for o in Ops if o is not Ops.PARAM)  # an INDEX of a PARAM is kernel IR already (a load's address)
# REDUCE arg (kind, op) while the reduce waits for its source's value: the kernel's own reduce, or one fused into it
ROOT, FUSED = "root", "fused"


def _lowering(x: UOp) -> bool:
  """Whether x is a value still being lowered (its rule fires once its sources are kernel IR)."""
  return (x.op is Ops.INDEX and x.src[0].op is not Ops.PARAM) or (x.op is Ops.WHERE and x.arg == PAD_MASK)


def _realized(ctx: Lowerer, x: UOp, u: UOp) -> UOp | None:
  """A result of an earlier kernel of the schedule is read from its buffer (an assign's: through its target's view)."""
  if u is ctx.item.out or u not in ctx.item.realized: return None
  if u.op is Ops.STORE: return at(u.src[0], x.src[2:], _gate(x))
  return ctx.load(ctx.item.realized[u], _flat(x.src[2:], max_shape(shape_of(u) or ())), _gate(x))


def _note_symbolic_size(ctx: Lowerer, x: UOp, u: UOp) -> None:
  """(never rewrites) A view straight over a Variable-sized buffer records that buffer's size."""
  ctx.symbolic_size(u, view_base(u))


def _fused_reduce(ctx: Lowerer, x: UOp, u: UOp) -> UOp:
  kind, idx = ctx.fused_reduce_index(u, x.src[2:])
  return UOp(Ops.REDUCE, u.dtype, (at(u.src[0], idx, _gate(x)),), (kind, u.arg[0]))


def _reduce_of_value(ctx: Lowerer, r: UOp, v: UOp) -> UOp | None:
  if type(r.arg) is not tuple or _lowering(v): return None
  kind, op = r.arg
  return ctx.reduce(kind, op, r.dtype, v)


def _pad_mask(c: UOp, v: UOp, z: UOp) -> UOp | None:
  """Zero outside the PAD, unless the value is a load: its gate has the PAD's condition, so it is 0 there already."""
  return None if _lowering(v) else v if v.op is Ops.LOAD else c.where(v, z)


def _broadcast_index(src: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, ...]:
  """An ALU's index as its source's: none for a 0-d source, which broadcasts (uop/shape.py)."""
  return () if idx and src.op is not Ops.CONST and shape_of(src) == () else idx


def _unsupported(u: UOp) -> Any: raise NotImplementedError(f"lowering: {u.op} inside a kernel")


def _index_of(ops: Any, fn: Callable) -> tuple[UPat, Callable]:
  return UPat(Ops.INDEX, src=(UPat(ops, name="u"),), allow_any_len=True, name="x"), fn


pm_lower = PatternMatcher([_index_of(NOT_PARAM, _realized), _index_of(GroupOp.Movement, _note_symbolic_size)]) + pm_views + PatternMatcher([
  _index_of(Ops.BUFFER, lambda ctx, x, u: ctx.load(u.arg, x.src[2], _gate(x))),
  _index_of((Ops.CONST, Ops.DEFINE_VAR), lambda u: u),
  _index_of(Ops.IOTA, lambda x, u: x.src[2].cast(u.dtype)),
  _index_of((Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUS_BACKWARD), lambda x, u: at(u.src[0], x.src[2:], _gate(x))),
  _index_of(Ops.REDUCE, _fused_reduce),
  _index_of((*GroupOp.AnyALU, Ops.CAST, Ops.BITCAST), lambda x, u: UOp(u.op, u.dtype, tuple(at(s, _broadcast_index(s, x.src[2:]), _gate(x)) for s in u.src), u.arg)),
  _index_of(NOT_PARAM, lambda u: _unsupported(u)),
  # once their sources are kernel IR: a reduce, and a PAD's mask
  (UPat(Ops.REDUCE, src=(UPat(name="v"),), name="r"), _reduce_of_value),
  (UPat(Ops.WHERE, arg=PAD_MASK, src=(UPat(name="c"), UPat(name="v"), UPat(name="z"))), _pad_mask),
])


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
  dims = [str(s) if type(s) is int else "".join(c for c in s.render(simplify=False) if c.isalnum()) for s in shape]  # type: ignore[union-attr]
  return f"{kind}_{'_'.join(dims) if shape else 'scalar'}"[:60]


def lower(item: KernelItem) -> LoweredKernel:
  """The kernel of a schedule item as loops over its buffers, before any optimization (codegen/search.py optimize)."""
  return Lowerer(item).lower()
