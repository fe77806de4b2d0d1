"""Scheduling: which tensor-graph nodes become kernels. Elementwise work and movement fuse into the kernel of
whatever consumes them; a reduce, a contiguous(), an assign and every requested output ends a kernel.

Scheduling works on the graph with its buffers replaced by numbered slots. Interning makes that normalized graph a
structural key: the same computation on other buffers is the same node, so a second run reuses the whole plan
(kernels compiled, buffers laid out) and only binds new memory."""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterator

from tinyhybrid.device import Buffer
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, map_binds
from tinyhybrid.uop.upat import PatternMatcher, UPat, graph_rewrite
from tinyhybrid.uop.shape import max_shape, shape_of
from tinyhybrid.uop.buffers import BufferSlot, concrete, base_buffer, buffer_view, contiguous_buffer, strided_view, strip_reshapes, view_base

MOVEMENT = GroupOp.Movement


@dataclass
class KernelItem:
  """One kernel: compute `out` (a normalized tensor-graph node) into slot `buffer`, reading slots of earlier kernels.
  `also`: more assigns of out's value (STOREs to other buffers) that the same kernel makes (see _shared_stores)."""
  out: UOp
  buffer: BufferSlot
  realized: dict[UOp, BufferSlot] = field(default_factory=dict)
  also: tuple[UOp, ...] = ()


@dataclass
class ScheduleSpec:
  """A whole plan for one graph structure."""
  items: list[KernelItem]
  n_inputs: int
  new_slots: list[BufferSlot]
  outputs: list[tuple[str, int]]  # per root: ("view", slot) | ("store", -1) | ("none", -1)


def normalize(roots: list[UOp], var_vals: dict[UOp, int] | None = None) -> tuple[UOp, list[Buffer], list[UOp]]:
  """The graph with every BUFFER replaced by a BufferSlot, every UNIQUE numbered in order and every bound Variable
  (BIND) replaced by its variable, the Buffers in slot order, and the graph's nodes; var_vals (if given) receives the
  variables' values. Without the values in it, one plan (and its kernels) serves every value of the variables."""
  sink = UOp.sink(*roots)
  nodes = list(sink.toposort())
  inputs: list[Buffer] = []
  subs: dict[UOp, UOp] = {}
  binds: list[UOp] = []
  uniques = 0
  BUFFER, UNIQUE, BIND, AFTER = Ops.BUFFER, Ops.UNIQUE, Ops.BIND, Ops.AFTER  # noqa: N806 (locals: enum lookups are slow in the loop)
  for u in nodes:
    op = u.op
    if op is BUFFER and isinstance(u.arg, Buffer):
      subs[u] = UOp(Ops.BUFFER, u.dtype, (), BufferSlot(len(inputs), u.arg.size, u.dtype))
      inputs.append(u.arg)
    elif op is UNIQUE:
      subs[u] = UOp(Ops.UNIQUE, u.dtype, (), uniques)
      uniques += 1
    elif op is BIND: binds.append(u)
    elif op is AFTER:
      # a realized tensor's view, with how it was computed kept for autograd: that history is no work for this graph
      # (its reduces would be computed again) and none of its buffers are inputs. The AFTERs stay among the nodes: a
      # result computed from them keeps its own history when theirs reaches a tensor that wants gradients
      live, afters = without_history(roots)
      key, inputs, inner = normalize(live, var_vals)
      return key, inputs, inner + afters
  if not binds: return (sink.substitute(subs) if subs else sink), inputs, nodes
  if var_vals is None: var_vals = {}
  names: dict[str, UOp] = {}
  for b in binds:
    var, val = b.unbind()
    if var_vals.setdefault(var, val) != val:
      raise ValueError(f"Variable {var.arg[0]!r} is bound to both {var_vals[var]} and {val} in the same computation")
    if names.setdefault(var.arg[0], var) is not var:
      raise ValueError(f"two different Variables are named {var.arg[0]!r} in the same computation: {names[var.arg[0]].arg} and {var.arg}")
  return map_binds(sink, lambda b: b.src[0], subs), inputs, nodes


class UnrunWrites(NotImplementedError):
  """A graph reads memory after writes made with UOps (tinygrad's `x.after(x.store(v))`) that are not assigns yet:
  the caller makes them assigns (tensor.py) and plans again."""
  def __init__(self, after: UOp):
    super().__init__("a write made with UOps (x.after(x.store(v))) must become an assign before its graph is planned")
    self.after = after


def without_history(roots: list[UOp]) -> tuple[list[UOp], list[UOp]]:
  """The roots with each AFTER (a realized view, with the graph that computed it kept for autograd) replaced by its
  view, and the AFTERs replaced. Only the live part is walked and rebuilt: the history, often a whole forward and
  backward pass, is not."""
  new: dict[UOp, UOp] = {}
  afters: dict[UOp, None] = {}

  def rebuild(root: UOp) -> UOp:
    # (the walk leaves out the AFTERs and what was rebuilt before; a node's sources are then rebuilt or left out)
    if root.op is Ops.AFTER:  # (as deep as AFTERs nest in views: one or two)
      if any(d.op is Ops.STORE and d.dtype is dtypes.void for d in root.src[1:]): raise UnrunWrites(root)
      afters[root] = None
      return rebuild(root.src[0])
    for u in root.toposort(gate=lambda n: n.op is not Ops.AFTER and n not in new):
      srcs = tuple(new[x] if x in new else rebuild(x) if x.op is Ops.AFTER else x for x in u.src)
      new[u] = u if all(a is b for a, b in zip(srcs, u.src)) else u.replace(src=srcs)
    return new.get(root, root)
  out = [rebuild(r) for r in roots], list(afters)
  # rebuild refers to itself, a cycle only gc frees: it must not hold the graph's buffers
  new.clear()
  afters.clear()
  return out


def create_schedule(key: UOp, n_inputs: int, split_reduce: bool = False, cache: int = 0, two_stages: bool = True,
                    inner_sums: bool = False) -> ScheduleSpec:
  """Plans the kernels of a normalized sink (see normalize). split_reduce (a GPU-style device): a reduce of many
  values into few becomes two kernels (pm_split_reduces); cache (a CPU's core cache, in bytes): a matrix product reads
  an operand strided along its reduce from a copy along it (pm_rows_along_reduce), and one whose operands would stream
  from memory is reduced in two stages (pm_split_for_cache) unless two_stages is False; inner_sums (a renderer that
  writes a loop inside a reduce's): small integer sums are computed by the reduce that reads them (_inner_sums)."""
  if split_reduce: key = graph_rewrite(key, pm_split_reduces, ctx=Seen(key), name="split reduces")
  if cache: key = graph_rewrite(key, pm_rows_along_reduce, ctx=Seen(key), name="rows along the reduce")
  if cache and two_stages: key = graph_rewrite(key, pm_split_for_cache, ctx=Seen(key, cache), name="split for the cache")
  roots = list(key.src)
  nodes = list(key.toposort())  # keeps every node's Python object (and its cached shape) alive
  ends_kernel = {u for u in nodes if u.op in (Ops.REDUCE, Ops.CONTIGUOUS, Ops.STORE)}
  # a root that is only a reshape of something already getting a buffer is a view of that buffer, not a copy (unless
  # a shape is symbolic: such a buffer is laid out in its max shape, which a reshape does not follow)
  ends_kernel |= {r for r in roots if not buffer_view(r) and ((base := strip_reshapes(r)) not in ends_kernel or
                  (base is not r and not (concrete(shape_of(r)) and concrete(shape_of(base)))))}
  ends_kernel |= _shared_results(nodes, ends_kernel)
  consumers = _users(nodes)
  ends_kernel |= _expanded_work(nodes, ends_kernel, consumers)
  ends_kernel -= _epilogue_fused(nodes, ends_kernel, consumers)
  if inner_sums: ends_kernel -= _inner_sums(nodes, ends_kernel, roots, consumers)
  items: list[KernelItem] = []
  realized: dict[UOp, BufferSlot] = {}
  new_slots: list[BufferSlot] = []
  also = _shared_stores(roots, nodes, ends_kernel)
  for u in nodes:
    if u not in ends_kernel: continue
    if u in also and not also[u]:  # stored by the kernel of the first assign of its value
      realized[u] = base_buffer(u.src[0]).arg
      continue
    # contiguous() of what is already a whole buffer is that buffer, unless it asked for memory of its own (UNIQUE)
    if u.op is Ops.CONTIGUOUS and len(u.src) == 1 and (buf := contiguous_buffer(u.src[0])) is not None:
      realized[u] = buf  # type: ignore[assignment]  # a normalized graph's buffers are slots
      continue
    if u.op is Ops.STORE: slot = base_buffer(u.src[0]).arg  # an assign writes into the buffer under its target
    else:
      slot = BufferSlot(n_inputs + len(new_slots), prod(max_shape(shape_of(u) or ())), u.dtype)
      new_slots.append(slot)
    items.append(KernelItem(u, slot, realized, also.get(u, ())))  # one shared map: a kernel only reaches nodes realized before it
    realized[u] = slot
  items = reads_before_writes(items, realized)
  outputs = []
  for r in roots:
    base = strip_reshapes(r)
    if r in realized and r.op is not Ops.STORE: outputs.append(("view", realized[r].index))
    elif base.op is Ops.STORE and base in realized: outputs.append(("store", -1))
    elif base in realized: outputs.append(("view", realized[base].index))
    else: outputs.append(("none", -1))
  return ScheduleSpec(items, n_inputs, new_slots, outputs)


def reads_before_writes(items: list[KernelItem], realized: dict[UOp, BufferSlot]) -> list[KernelItem]:
  """The kernels in an order where every kernel that reads a buffer's old contents runs before the assign that
  overwrites it, and otherwise as given. A realize that updates a model's weights and, from the forward pass, its
  BatchNorm running statistics reads each weight before the step writes it, whatever order the roots came in.
  Raises RuntimeError when a kernel reads both a buffer's old contents and what an assign wrote there (no order
  serves it, as in tinygrad: realize one of them first)."""
  writers = {base_buffer(st.src[0]).arg.index: i for i, it in enumerate(items) if it.out.op is Ops.STORE for st in (it.out, *it.also)}
  if not writers: return items
  producer = {it.out: i for i, it in enumerate(items)} | {st: i for i, it in enumerate(items) for st in it.also}
  after: list[set[int]] = [set() for _ in items]  # after[i]: the kernels that must run before kernel i
  for i, it in enumerate(items):
    own = base_buffer(it.out.src[0]) if it.out.op is Ops.STORE else None
    seen, stack = set(), list(it.out.src)
    while stack:
      if (x := stack.pop()) in seen: continue
      seen.add(x)
      if x in producer: after[i].add(producer[x])
      elif x.op is Ops.BUFFER:
        if x is not own and (w := writers.get(x.arg.index)) is not None and w != i: after[w].add(i)
      elif x in realized: stack.append(UOp(Ops.BUFFER, x.dtype, (), realized[x]))  # a contiguous() of a whole buffer
      else: stack.extend(x.src)
  order: list[int] = []
  ready = [i for i, deps in enumerate(after) if not deps]
  heapq.heapify(ready)
  users: list[list[int]] = [[] for _ in items]
  for i, deps in enumerate(after):
    for d in deps: users[d].append(i)
  left = [len(deps) for deps in after]
  while ready:
    order.append(i := heapq.heappop(ready))
    for u in users[i]:
      left[u] -= 1
      if left[u] == 0: heapq.heappush(ready, u)
  if len(order) < len(items):
    raise RuntimeError("a computation reads both the old contents of a buffer and an assign to it: realize the "
                       "tensor that reads the old contents before assigning")
  return [items[i] for i in order]


def _shared_stores(roots: list[UOp], nodes: list[UOp], ends: set[UOp]) -> dict[UOp, tuple[UOp, ...]]:
  """Assigns of one value into several buffers (a reduced chunk of an allreduce placed on every device) made by one
  kernel that computes the value once and stores it to each: the first assign maps to the others, which map to ().
  Only requested assigns nothing else uses, of a value that reads none of their buffers, into views of one shape."""
  by_value: dict[UOp, list[UOp]] = {}
  for r in dict.fromkeys(roots):
    if r.op is Ops.STORE and r in ends: by_value.setdefault(r.src[1], []).append(r)
  groups = [g for g in by_value.values() if len(g) > 1 and len({shape_of(st) for st in g}) == 1]
  if not groups: return {}
  users = {s for u in nodes if u.op is not Ops.SINK for s in u.src}
  # the memory the graph reads anywhere but through an assign's target
  read = {u for u in UOp.sink(*[r.src[1] if r.op is Ops.STORE else r for r in roots]).toposort() if u.op is Ops.BUFFER}
  out: dict[UOp, tuple[UOp, ...]] = {}
  for g in groups:
    bufs = [base_buffer(st.src[0]) for st in g]
    if len(set(bufs)) < len(g) or any(st in users or b in read for st, b in zip(g, bufs)): continue
    out[g[0]] = tuple(g[1:])
    out.update((st, ()) for st in g[1:])
  return out


SPLIT_RATIO = 32768  # values per output from which a reduce is split
SPLIT_OUTPUTS = 1 << 22  # the first stage's outputs stay below this


def _one_hot_axes(x: UOp, shape: tuple[int, ...]) -> set[int]:
  """The axes along which x is a one-hot select, where(index == arange, y, 0) (mixin/indexing.py's gathers and
  lookups): the lowering collapses a sum over such an axis to one indexed load (codegen/lower.collapse_one_hot), so
  it is no work for a split to spread."""
  if x.op is not Ops.WHERE or (zero := view_base(x.src[2])).op is not Ops.CONST or zero.arg != 0: return set()
  lengths = {b.arg for c in x.src[0].toposort() if c.op is Ops.CMPEQ for s in c.src if (b := view_base(s)).op is Ops.IOTA}
  return {a for a, n in enumerate(shape) if n in lengths}


class Seen:
  """The context of the scheduler's rules on reduces. They read shapes, which a node keeps while its Python object
  lives: `nodes` keeps every node of the graph, and every one the rules see, alive through the rewrite, so each shape
  is worked out once (else each of a ResNet-50 training step's 373 reduces walked the rebuilt graph below it again:
  16 s of a 19 s schedule). A reduce a rule made (`made`: the two stages of a split) is not rewritten again."""
  def __init__(self, key: UOp, cache: int = 0):
    self.nodes: set[UOp] = set(key.toposort())
    self.made: set[UOp] = set()
    self.cache = cache

  def visit(self, u: UOp) -> bool:
    """Whether a rule may rewrite u (kept alive from here on)."""
    self.nodes.add(u)
    return u not in self.made


def _split_reduce(ctx: Seen, u: UOp) -> UOp | None:
  """Each reduce of at least SPLIT_RATIO values into every output reduced in two stages: first into `split` partial
  results per output, each over a contiguous block of one reduce axis, then those. A GPU spreads work over its
  work-groups by the outputs of a kernel: a sum of 16M floats into one value would otherwise run on one of them."""
  if not ctx.visit(u) or not concrete(shape := shape_of(u.src[0])) or not concrete(out := shape_of(u)): return None  # type: ignore[assignment]
  op, axes = u.arg
  looped = [a for a in axes if a not in _one_hot_axes(u.src[0], shape)]  # type: ignore[arg-type]
  if prod(shape) // max(prod(out), 1) // prod(shape[a] for a in axes if a not in looped) < SPLIT_RATIO: return None  # type: ignore[index, arg-type]
  for split in range(min(256, SPLIT_OUTPUTS // max(prod(out), 1)), 7, -1):  # type: ignore[arg-type]
    if (a := next((a for a in looped if shape[a] % split == 0 and shape[a] // split > 1), None)) is not None:  # type: ignore[index]
      return _in_two_stages(ctx, u, a, split)
  return None


pm_split_reduces = PatternMatcher([(UPat(Ops.REDUCE, name="u"), _split_reduce)])


def _in_two_stages(ctx: Seen, u: UOp, a: int, split: int, blocks_outside: bool = False) -> UOp:
  """u reduced in two stages: first into `split` partial results per output, each over a contiguous block of reduce
  axis a, then those. blocks_outside: the blocks are the first stage's outermost axis, so its loop runs over one
  block's operands for all the outputs before the next block."""
  (op, axes), full, x = u.arg, shape_of(u.src[0]) or (), u.src[0]
  shape = full[:a] + (split, full[a] // split) + full[a + 1:]
  x = UOp(Ops.RESHAPE, x.dtype, (x,), shape)
  axes = tuple(sorted(b if b < a else b + 1 for b in axes))
  if blocks_outside:
    order = (a, *[i for i in range(len(shape)) if i != a])
    x = UOp(Ops.PERMUTE, x.dtype, (x,), order)
    axes, a = tuple(sorted(order.index(b) for b in axes)), 0
  first = UOp(Ops.REDUCE, u.dtype, (x,), (op, axes))
  second = UOp(Ops.REDUCE, u.dtype, (first,), (op, (a,)))
  ctx.made.update((first, second))
  return UOp(Ops.RESHAPE, u.dtype, (second,), shape_of(u))


SPLIT_FOR_CACHE_MIN = 1024  # values reduced per output from which a matrix product may be blocked: a 64-wide tile of
                            # the operands' rows, 256 KB, fits a core's cache below that
# how much longer than M and N the reduce must be. A matrix product over one axis (x @ w.T) accumulates rows read along
# the reduce, which the cache holds: an FFN's down-projection (K = 4 x N) ran at 128 GFLOPS in two stages (6 MB of
# partial sums) and 232 in one. A conv's weight gradient sums over images and positions, and gains from two stages
# from K = 5 x N (a 28x28 layer: 31 ms in one stage, 11 in two)
SPLIT_FOR_CACHE_RATIO = {1: 8, 2: 4}  # by the number of reduced axes (more: as 2)


def _split_for_cache(ctx: Seen, u: UOp) -> UOp | None:
  """A CPU's counterpart of _split_reduce: a matrix product whose reduce is long against its outputs (a conv's weight
  gradient, summed over every image position: 64 x 576 outputs over 8 x 3136 values) reduced in two stages, over
  blocks of the reduce whose rows of both operands fill a core's cache. In one stage each tile of outputs streams the
  whole reduce from memory, tile after tile (50 GFLOPS where the blocks run at 170).

  The sizes come from what the reduce reads: its operands hold K*(M+N) values for K values reduced into each of M*N
  outputs. It splits a reduce of SPLIT_FOR_CACHE_MIN values or more, SPLIT_FOR_CACHE_RATIO times M and N or more, when both are 16
  or more (a matrix-vector product reads its matrix once anyway), into 4 blocks or more, with a quarter as many values
  in partial results as the operands hold or fewer. Weight gradients at batch 8 on 2 Zen 4 cores (1 MB L2), each
  operand copied along the reduce: blocks filling a quarter of the cache, with partials up to the operands' size,
  took 15.7, 13.8, 10.5, 3.8, 4.0 and 12.4 ms (1x1 256->128 at 56x56, 1x1 512->256 at 28x28, 3x3 64 at 56x56, 1x1
  64->256 and 256->64 at 56x56, the 7x7 stem); these blocks 6.4, 5.8, 9.0, 3.3, 4.0 and 10.5. A transformer's products
  (K no longer than M or N) keep one stage: their tiles' rows fit the cache, and partial results would only add traffic.
  A conv, which reads its input through overlapping windows, is no such product: its loops reuse each value from the
  cache already."""
  if not ctx.visit(u) or u.arg[0] is not Ops.ADD or not concrete(shape := shape_of(u.src[0])) or not concrete(out := shape_of(u)): return None
  if _one_hot_axes(u.src[0], shape) & set(u.arg[1]): return None  # type: ignore[arg-type]  # a gather: one load per output once lowered
  if (outputs := prod(out)) == 0 or (k := prod(shape) // outputs) < SPLIT_FOR_CACHE_MIN: return None  # type: ignore[arg-type]
  if (values := _operand_values(u)) is None: return None
  s = values / k  # M + N
  ratio = SPLIT_FOR_CACHE_RATIO[min(len(u.arg[1]), 2)]
  if (disc := s * s - 4 * outputs) < 0 or (s - math.sqrt(disc)) / 2 < 16 or k < ratio * (s + math.sqrt(disc)) / 2: return None
  want = min(k * s * u.dtype.itemsize / ctx.cache, k * s / outputs / 4)
  divisors = [(d, a) for a in u.arg[1] for d in range(4, shape[a] + 1) if shape[a] % d == 0 and d <= want]  # type: ignore[index]
  if not divisors: return None
  split, a = max(divisors)
  return _in_two_stages(ctx, u, a, split, blocks_outside=True)


pm_split_for_cache = PatternMatcher([(UPat(Ops.REDUCE, name="u"), _split_for_cache)])


# when an operand read across its rows is copied first: each of its values serves this many outputs or more (a matrix
# product's other side, its rows), it holds this many values or more, and it steps this far along the reduce
ROWS_MIN_REUSE, ROWS_MIN_VALUES, ROWS_MIN_STRIDE = 32, 1 << 14, 16


def _rows_along_reduce(ctx: Seen, u: UOp) -> UOp | None:
  """A CPU's matrix product whose operand steps across its rows along the reduce (`a @ b` reads b down its columns;
  the backward passes of `x @ w.T`) reads it from a copy laid out along the reduce instead. A product over rows that
  run along the reduce accumulates vectors of both operands, the register tile a CPU runs best: on 2 AVX2 cores a
  1024^2 `a @ b` ran at 43 GFLOPS and `a @ b.T` at 94-150, while the copy, a transpose in 8 x 8 tiles, costs one pass
  over b (0.75 ms). An operand read every 2nd to 4th value along an output axis is likewise read from a copy of those
  values (subsampled). Only an operand reused by many outputs and not small: else the copy costs more than it saves."""
  if not ctx.visit(u) or u.arg[0] is not Ops.ADD or not concrete(shape := shape_of(u.src[0])): return None
  axes = [a for a in u.arg[1] if shape[a] > 1]  # type: ignore[index]
  if not axes or _one_hot_axes(u.src[0], shape) & set(axes): return None  # type: ignore[arg-type]
  order = tuple(a for a in range(len(shape)) if a not in axes) + tuple(axes)  # type: ignore[arg-type]
  back = tuple(order.index(a) for a in range(len(order)))
  def copied(o: UOp) -> UOp:
    if o.op is not Ops.EXPAND or not concrete(part := shape_of(o.src[0])) or prod(part) < ROWS_MIN_VALUES: return o  # type: ignore[arg-type]
    if prod(shape) // prod(part) < ROWS_MIN_REUSE or (view := strided_view(o.src[0])) is None or abs(view[2][axes[-1]]) < ROWS_MIN_STRIDE: return o  # type: ignore[arg-type]
    rows = UOp(Ops.CONTIGUOUS, o.dtype, (UOp(Ops.PERMUTE, o.dtype, (o.src[0],), order),))
    return UOp(Ops.EXPAND, o.dtype, (UOp(Ops.PERMUTE, o.dtype, (rows,), back),), o.arg)
  def subsampled(o: UOp) -> UOp:
    # an operand read every 2nd to 4th value along its innermost axis, an output axis (a 1x1 conv of stride 2,
    # ResNet's downsampling): from a copy of those values, whose rows the kernel's vectors load whole. On 2 Zen 4 cores
    # at batch 8, ResNet-50's three such convs took 35.0, 30.6 and 30.7 ms reading the strided input, 9.6, 21.0 and 13.7
    # with the copy (0.2-0.7 ms of it); resnet50_b8 557-617 -> 473-477 ms
    perm, e = (o.arg, o.src[0]) if o.op is Ops.PERMUTE else (tuple(range(len(shape))), o)  # type: ignore[arg-type]
    if e.op is not Ops.EXPAND or not concrete(part := shape_of(e.src[0])) or prod(part) < ROWS_MIN_VALUES: return o  # type: ignore[arg-type]
    if prod(shape) // prod(part) < ROWS_MIN_REUSE or (view := strided_view(e.src[0])) is None: return o  # type: ignore[arg-type]
    inner = max((i for i, n in enumerate(part) if n > 1), default=None)  # type: ignore[arg-type]
    if inner is None or not 2 <= abs(view[2][inner]) <= 4 or perm.index(inner) in axes: return o
    copy = e.replace(src=(UOp(Ops.CONTIGUOUS, e.dtype, (e.src[0],)),))
    return copy if o is e else o.replace(src=(copy,))
  mul = u.src[0]
  if (srcs := tuple(subsampled(copied(o)) for o in mul.src)) == mul.src: return None
  return u.replace(src=(mul.replace(src=srcs), *u.src[1:]))


pm_rows_along_reduce = PatternMatcher([(UPat(Ops.REDUCE, src=(UPat(Ops.MUL),), allow_any_len=True, name="u"), _rows_along_reduce)])


def _operand_values(u: UOp) -> int | None:
  """How many values the reduce u reads from memory (its buffers' and earlier kernels' results' sizes), if it reads
  them as a matrix product does: through reshapes, permutes and expands (None for windows: pads and shrinks)."""
  seen, stack, n = set(), list(u.src), 0
  while stack:
    if (x := stack.pop()) in seen: continue
    seen.add(x)
    if x.op is Ops.BUFFER: n += x.arg.size
    elif x.op in (Ops.REDUCE, Ops.CONTIGUOUS, Ops.STORE): n += prod(max_shape(shape_of(x) or ()))
    elif x.op in (Ops.PAD, Ops.SHRINK, Ops.FLIP): return None
    else: stack.extend(x.src)
  return n


def _epilogue_fused(nodes: list[UOp], ends: set[UOp], consumers: dict[UOp, set[UOp]]) -> set[UOp]:
  """Reduces whose result is read only by elementwise work (and movement that reads each value once) ending in one
  kernel: that kernel computes the reduce itself and applies the rest to it (`relu(x @ w + b)`, `x.sum(1) * 2` are
  one kernel), so the reduce's result never goes through memory. One reduce per kernel; an assign's kernel keeps its
  reduce apart, since the reduce could read what the assign overwrites."""
  kernels, plain, one_index = _readers(nodes, ends, consumers)
  fused: set[UOp] = set()
  taken: set[UOp] = set()  # kernels (by their end) that already compute a reduce of their own
  for u in nodes:
    if u.op is not Ops.REDUCE or not plain[u] or not one_index[u] or len(kernels[u]) != 1: continue
    (end,) = kernels[u]
    if end.op in (Ops.STORE, Ops.REDUCE) or end in taken or _reduces_in(end, ends, u) > 1: continue
    if prod(max_shape(shape_of(u) or ())) >= MATH_EPILOGUE_OUTPUTS and _math_in(end, ends, u): continue
    fused.add(u)
    taken.add(end)
  return fused


def _readers(nodes: list[UOp], ends: set[UOp], consumers: dict[UOp, set[UOp]]) -> tuple[dict[UOp, set[UOp]], dict[UOp, bool], dict[UOp, bool]]:
  """Per node: the kernels (by their end) that read it, whether every path to them is epilogue work, and whether it
  is read at one index only (one path, or paths of index-keeping ops): else a kernel fusing it would compute it twice."""
  kernels: dict[UOp, set[UOp]] = {}
  plain: dict[UOp, bool] = {}
  keeps_index: dict[UOp, bool] = {}
  one_index: dict[UOp, bool] = {}
  for u in reversed(nodes):
    cs = consumers.get(u, ())
    kernels[u] = set().union(*[{c} if c in ends else kernels[c] for c in cs]) if cs else set()
    plain[u] = bool(cs) and all(c in ends or (c.op in _EPILOGUE and plain[c]) for c in cs)
    keeps_index[u] = all(c in ends or (c.op in _SAME_INDEX and keeps_index[c]) for c in cs)
    one_index[u] = keeps_index[u] or (len(cs) == 1 and all(c in ends or one_index[c] for c in cs))
  return kernels, plain, one_index


# An integer sum of this many values each (at least, at most), read only through epilogue work by one kernel that
# reduces further, is computed inside that kernel, by a loop inside its reduce loop (codegen/lower.py), instead of
# going through memory: int_matvec's int16 block sums, a 32-term dot of codes and activations per block, then scaled
# in float per block and summed along the row. On 2 AVX2 cores a Q4_K_M decode step's kernels took 20.5 ms, 16.8 with
# its Q4_K sums inside; shorter sums pay the float scaling every few steps (with Q6_K's 8-term blocks inside too, 21.4)
INNER_SUM_TERMS = (16, 32)


def _inner_sums(nodes: list[UOp], ends: set[UOp], roots: list[UOp], consumers: dict[UOp, set[UOp]]) -> set[UOp]:
  kernels, _, _ = _readers(nodes, ends, consumers)
  def terms(u: UOp) -> int | None:
    shape = shape_of(u.src[0]) or ()
    n = prod(shape[i] for i in u.arg[1])
    return n if isinstance(n, int) else None
  # every path from the node is epilogue work within a kernel up to a reduce of more than one value (whose loop the
  # sum's goes in)
  into_reduce: dict[UOp, bool] = {}
  for u in reversed(nodes):
    cs = consumers.get(u, ())
    into_reduce[u] = bool(cs) and all((c.op is Ops.REDUCE and terms(c) != 1) or (c.op in _EPILOGUE and c not in ends and into_reduce[c]) for c in cs)
  return {u for u in nodes if u.op is Ops.REDUCE and u in ends and u not in roots and u.arg[0] is Ops.ADD and dtypes.is_int(u.dtype)
          and into_reduce[u] and len(kernels[u]) == 1 and (n := terms(u)) is not None and INNER_SUM_TERMS[0] <= n <= INNER_SUM_TERMS[1]}


# From this many outputs a reduce keeps an epilogue with exp2, log2 or sin (a GELU, a sigmoid) out of its kernel. A
# matmul with a weight stored as nn.Linear stores it (x @ w.T) accumulates vectors along the reduce axis, so its
# outputs, and such an epilogue, are scalar: 10 ns an output, where a kernel of its own runs on vectors (BERT's
# GELU: 4.5 ms fused, 0.7 ms apart, for 393k outputs). A matrix-vector product (an LLM's decode step) stays fused.
MATH_EPILOGUE_OUTPUTS = 1 << 14
_MATH = (Ops.EXP2, Ops.LOG2, Ops.SIN)


def _within(srcs: tuple[UOp, ...], ends: set[UOp], stop: UOp | None = None) -> Iterator[UOp]:
  """Each node a kernel computes from srcs, once, then the buffers and other kernels' results it reads (not `stop`)."""
  seen, stack = set(), list(srcs)
  while stack:
    x = stack.pop()
    if x in seen or x is stop: continue
    seen.add(x)
    yield x
    if x.op is not Ops.BUFFER and x not in ends: stack.extend(x.src)


def _math_in(end: UOp, ends: set[UOp], red: UOp) -> bool:
  """Whether the kernel that ends at `end` computes exp2, log2 or sin outside `red`'s loop."""
  return any(x.op in _MATH and x not in ends for x in _within(end.src, ends, red))


# what may stand between a reduce and the end of the kernel it is fused into: each reads every value once. A PAD does
# not: the kernel's loop would cover the padding too, and run the reduce there (a strided conv's input gradient pads
# each phase out to its place among the others)
_SAME_INDEX = GroupOp.AnyALU | {Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS}
_EPILOGUE = _SAME_INDEX | {Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP}


def _reduces_in(end: UOp, ends: set[UOp], red: UOp) -> int:
  """How many reduces the kernel that ends at `end` would compute if `red` were fused into it."""
  seen, stack, n = set(), list(end.src), 0
  while stack:
    x = stack.pop()
    if x in seen: continue
    seen.add(x)
    if x is red or x not in ends:
      n += x.op is Ops.REDUCE
      stack.extend(x.src)
  return n


def _shared_results(nodes: list[UOp], ends: set[UOp]) -> set[UOp]:
  """Elementwise results computed from a reduce that more than one kernel reads: they get a buffer. Fused into each
  reader instead, a chain of them (a residual stream: relu(bn(conv(x)) + x), block after block) would be recomputed
  by every kernel that reads it, and grow with every block."""
  from_reduce: set[UOp] = set()
  consumers: dict[UOp, list[UOp]] = {}
  for u in nodes:
    if u.op is Ops.REDUCE or (u.op not in (Ops.CONTIGUOUS, Ops.STORE) and any(s in from_reduce for s in u.src)): from_reduce.add(u)
    for s in u.src:
      if s in from_reduce: consumers.setdefault(s, []).append(u)
  readers: dict[UOp, set[UOp]] = {}  # the kernels (by the node they end at) that compute a node
  shared: set[UOp] = set()
  for u in reversed(nodes):
    if u not in from_reduce: continue
    ks: set[UOp] = set()
    for c in consumers.get(u, ()):
      if c in ends or c in shared: ks.add(c)
      else: ks |= readers[c]
    readers[u] = ks
    if u.op in GroupOp.AnyALU and len(ks) > 1 and _ops_in(u, ends | shared) >= 2: shared.add(u)
  return shared


def _expanded_work(nodes: list[UOp], ends: set[UOp], users: dict[UOp, set[UOp]]) -> set[UOp]:
  """Elementwise results read through an EXPAND (every value read many times, e.g. by a convolution's or a matmul's
  loop) that take more than one operation each, or read more than one buffer: they get a buffer. Fused into the
  reader they would be recomputed, and their inputs loaded, on every read: a batch norm before a convolution, once per
  output channel; a lazily initialized weight, once per image position; a product of two activations in a weight's
  gradient, once per row of it. A decode of packed data stays fused (_unpacking). One operation over two buffers read
  by elementwise work only (`(a * b)` of two rows, times a matrix) is done once per output anyway: it stays fused."""
  out: set[UOp] = set()
  for u in nodes:
    if u.op is not Ops.EXPAND: continue
    s = u.src[0]
    while s.op in MOVEMENT: s = s.src[0]
    if s.op not in GroupOp.AnyALU or s in ends or _one_hot(s) or _unpacking(s, ends): continue
    if not _reads(s, ends):  # from indices and constants only (an arange's arithmetic, a lazily initialized weight)
      if _ops_in(s, ends, CHEAP_INDEX_OPS) >= CHEAP_INDEX_OPS: out.add(s)
    elif _ops_in(s, ends) >= 2: out.add(s)
    elif _reads(s, ends) >= 2 and _feeds_a_reduce(u, users, ends): out.add(s)
  return out


# A value computed from indices and constants alone in fewer operations than this (`n - arange(n)`, an argmax's
# positions) is recomputed where it is read: cheaper than a kernel and a buffer of its own. A lazily initialized
# weight (threefry's dozens of operations per value) is not.
CHEAP_INDEX_OPS = 4


def _users(nodes: list[UOp]) -> dict[UOp, set[UOp]]:
  """Each node's consumers among nodes (a consumer that reads it twice, x * x, once)."""
  users: dict[UOp, set[UOp]] = {}
  for n in nodes:
    for x in n.src: users.setdefault(x, set()).add(n)
  return users


def _feeds_a_reduce(u: UOp, users: dict[UOp, set[UOp]], ends: set[UOp]) -> bool:
  """Whether a REDUCE reads u within the kernel u is computed in (not looking past kernel ends): then each value of u
  is read once per step of its loop, not once per output."""
  seen, stack = {u}, [u]
  while stack:
    for c in users.get(stack.pop(), ()):
      if c.op is Ops.REDUCE: return True
      if c not in seen and c not in ends:
        seen.add(c)
        stack.append(c)
  return False


def _unpacking(u: UOp, ends: set[UOp]) -> bool:
  """Whether u widens packed data: it reads 1/16 to 1/2 of the bytes it would write (a quantized weight's codes and
  scales decoded to floats). Such a value stays fused into its reader: a buffer of it would be several times the
  memory of what it decodes (a 4-bit model's weights held as float32), written and read back on every run, where
  the reader's register tile decodes each piece once for all the rows it holds. A value computed from (next to)
  nothing, as a lazily initialized weight, reads less than that and still gets its buffer."""
  seen, stack, read = {u}, list(u.src), 0
  while stack:
    x = stack.pop()
    if x in seen: continue
    seen.add(x)
    if x.op is Ops.BUFFER: read += x.arg.size * x.dtype.itemsize
    elif x in ends: read += prod(max_shape(shape_of(x) or ())) * x.dtype.itemsize
    else: stack.extend(x.src)
  wrote = prod(max_shape(shape_of(u) or ())) * u.dtype.itemsize
  return 2 * read <= wrote <= 16 * read


def _one_hot(u: UOp) -> bool:
  """x == arange(n): the mask of a gather, which the lowering turns into one indexed load (codegen/lower.py
  collapse_one_hot) once it is fused into the sum that reads it; in a buffer of its own it would be n times the work.
  Several tensor indices (x[:, i, j]) AND their masks."""
  while u.op in MOVEMENT: u = u.src[0]
  if u.op is Ops.AND and u.dtype is dtypes.bool: return all(_one_hot(s) for s in u.src)
  if u.op is not Ops.CMPEQ: return False
  for s in u.src:
    while s.op in MOVEMENT or s.op is Ops.CAST: s = s.src[0]
    if s.op is Ops.IOTA: return True
  return False


def _reads(u: UOp, ends: set[UOp]) -> int:
  """How many buffers (or other kernels' results) computing u reads."""
  return sum(x.op is Ops.BUFFER or x in ends for x in _within(u.src, ends))


def _ops_in(u: UOp, ends: set[UOp], limit: int = 2) -> int:
  """How many elementwise operations computing each value of u takes (counting stops at `limit`), not looking past
  kernel ends. An operation on broadcast values only (a batch norm's -mean, or mean = sum / n under its expand) is
  done once per broadcast value, out of the loop over the others: it does not count."""
  seen, stack, n = set(), [u], 0
  memo: dict[UOp, bool] = {}
  while stack and n < limit:
    x = stack.pop()
    if x in seen or (x is not u and x in ends): continue
    seen.add(x)
    if x.op in GroupOp.AnyALU and not _broadcast(x, ends, memo): n += 1
    if x.op is not Ops.EXPAND: stack.extend(x.src)
  return n


def _broadcast(u: UOp, ends: set[UOp], memo: dict[UOp, bool]) -> bool:
  """Whether u's values are computed from expanded values and constants only (inside one kernel)."""
  if (got := memo.get(u)) is not None: return got
  if u.op is Ops.EXPAND or u.op is Ops.CONST: got = True
  elif u in ends or u.op is Ops.BUFFER or not u.src: got = False
  else: got = all(_broadcast(s, ends, memo) for s in u.src)
  memo[u] = got
  return got


