"""Expanding UPCAST and UNROLL ranges into lanes: every value node becomes one node per combination of the lane
axes it depends on. One lane axis, the vector axis (the one contiguous in memory), is cut into chunks of up to
VEC lanes that become vector values (dtype.vec(n)); the other lane axes become separate registers. A chunk may end in
dead lanes (see chunks()).

Memory accesses are resolved per chunk: the index (and gate) is simplified once with the chunk's lane as a variable,
which shows whether every lane reads one address or consecutive ones; only other accesses are worked out lane by
lane. Lanes at consecutive addresses become one vector load or store (aligned when the first address is provably a
multiple of the width, masked when some lanes are padding or dead), anything else a gather.
A REDUCE keeps one accumulator per register; UNROLL lanes are added into it every step, except along the vector
axis, whose lanes accumulate separately and are combined once after the loop. Ops the renderer has no vector form
for are done lane by lane.

Output: SINK(END(GROUP(*stores), *loops)), REDUCEs as REDUCE(*terms, *reduce loops) with arg (op, number of terms)
(acc = acc op term, each term in turn), LOAD(INDEX, [bool gate], [uint32 lane mask])."""
from __future__ import annotations

import itertools
from typing import Callable

from tinyhybrid.codegen.kernel import LANES, KernelParts, rkind, rsize, stride
from tinyhybrid.codegen.tc import has_tc
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import postorder, prod
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp

IDX = dtypes.weakint
# the element types whose vectors a renderer computes by default (Renderer.vec_dtypes narrows them)
VEC_DTYPES = frozenset((dtypes.float, dtypes.double, dtypes.int, dtypes.uint, dtypes.long, dtypes.ulong, IDX, dtypes.int8, dtypes.uint8,
                        dtypes.int16, dtypes.uint16))
_VEC_ALU = {Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.CAST, Ops.BITCAST, Ops.BYTEDOT}
_VEC_INT = {Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
_VEC_FLOAT = {Ops.FDIV, Ops.RECIPROCAL}


def chunks(size: int, vec: int) -> list[tuple[int, int, int]]:
  """(start, width, live) pieces of an axis: powers of two of at most `vec` lanes, widest first. A rest a little
  short of a power of two (a 14 or 7 wide image row) is one vector of that power whose last lanes are dead: they are
  computed but never read from memory, stored or combined (at most a third of what is left: 28 is 16 and 16 with 12
  live)."""
  out, start = [], 0
  while start < size:
    rest, w = size - start, vec
    while w > rest: w //= 2
    if w < rest and (p := 2 * w) <= vec and p - rest <= rest // 3: w = p
    out.append((start, w, min(w, rest)))
    start += w
  return out


def _pieces(n: int) -> list[tuple[int, int]]:
  """(offset, width) powers of two covering n lanes, widest first."""
  out, off = [], 0
  while off < n:
    w = 1 << ((n - off).bit_length() - 1)
    out.append((off, w))
    off += w
  return out


def csize(dt: DType) -> int:
  """The size of one element as rendered (weak types are C's long long and double)."""
  return 8 if dt.scalar()._is_weak else dt.scalar().itemsize


def cpu_lanes(ast: UOp, vec: int, vec_dtypes: frozenset[DType] = VEC_DTYPES) -> int:
  """The lanes of a CPU kernel's vectors, for registers of `vec` floats: more where every value it computes is
  narrower than 4 bytes and the renderer has vectors of it (int_matvec's int16 block sums, 16 a register on AVX2: a
  Q4_K decode step 30.5 -> 20.5 ms of kernels on 2 cores)."""
  if vec <= 1: return vec
  k = KernelParts.of(ast)
  # a kernel with inner sums (int_matvec's blocks) does its work in them: its other values take as many registers
  widest = max(map(_widest_value, inner)) if (inner := k.inner_sums) else _widest_value(k.value)
  return vec * 4 // widest if widest < 4 and dtypes.int16 in vec_dtypes else vec


def _widest_value(value: UOp) -> int:
  """The widest element (csize) of the values a kernel computes from memory: its loads and the ops on them, not the
  indexes nor what is computed from indexes alone (an arange's shift amounts), which is worked out per chunk."""
  widest, data = 1, set()
  for x in value.toposort():
    if x.op is Ops.LOAD or any(s in data for s in x.src):
      data.add(x)
      if x.dtype.scalar() is not dtypes.bool and not x.dtype.scalar()._is_weak: widest = max(widest, csize(x.dtype))
  return widest


def mask_size(u: UOp) -> int | None:
  """The element size of the lane mask a vector bool holds (its comparison's operands), None when it is not a mask."""
  sizes: set[int] = set()
  stack, seen = [u], set()
  while stack:  # (a walk, not recursion: a mask may combine thousands of conditions)
    if (x := stack.pop()) in seen: continue
    seen.add(x)
    if x.dtype.count == 1 or x.dtype.scalar() is not dtypes.bool: return None
    if x.op in GroupOp.Comparison: sizes.add(csize(x.src[0].dtype))
    elif x.op in (Ops.AND, Ops.OR, Ops.XOR): stack.extend(x.src)
    else: return None
  return sizes.pop() if len(sizes) == 1 else None


def _c(v: int) -> UOp: return UOp.const(IDX, v)


def gep(u: UOp, lane: int) -> UOp:
  if u.dtype.count == 1: return u
  return u.src[lane] if u.op is Ops.VECTORIZE else UOp(Ops.GEP, u.dtype.scalar(), (u,), (lane,))


def bcast(u: UOp, w: int) -> UOp: return u if w == 1 or u.dtype.count == w else UOp(Ops.VECTORIZE, u.dtype.vec(w), (u,) * w)


def vectorize(xs: list[UOp]) -> UOp: return xs[0] if len(xs) == 1 else UOp(Ops.VECTORIZE, xs[0].dtype.vec(len(xs)), tuple(xs))


def _const_lanes(u: UOp, w: int) -> list | None:
  """The w lane values of a constant (one broadcast, or a vector of constants), None when u is not one."""
  if u.op is Ops.CONST: return [u.arg] * w
  if u.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in u.src): return [s.arg for s in u.src]
  return None


def _fold_lanes(u: UOp, srcs: list[UOp], w: int) -> UOp | None:
  """u over w lanes when its value is known at compile time: an op of constant lanes (a lane's position compared,
  divided or masked, as a cat's or a packed field's index expressions are) computed lane by lane, and a select
  whose condition is the same constant in every lane. None when neither applies."""
  if u.op is Ops.WHERE and (cond := _const_lanes(srcs[0], w)) is not None and len(set(cond)) == 1: return bcast(srcs[1] if cond[0] else srcs[2], w)
  if u.op not in GroupOp.AnyALU: return None
  lanes: list[list] = []
  for s in srcs:  # (most ops have a source that is not constant: the first one ends it)
    if (lane := _const_lanes(s, w)) is None: return None
    lanes.append(lane)
  out = [UOp(u.op, u.dtype, tuple(UOp.const(s.dtype.scalar(), lane[i]) for s, lane in zip(srcs, lanes)), u.arg).simplify() for i in range(w)]
  if any(x.op is not Ops.CONST for x in out): return None
  return bcast(out[0], w) if all(x.arg == out[0].arg for x in out) else vectorize(out)


def _uniform_op(u: UOp, srcs: list[UOp]) -> UOp | None:
  """u on one lane when every source is the same in all lanes (a block's scale read once for the 16 or 32 weights it
  scales): computed once and broadcast, not lane by lane in a vector (a byte widened, converted and multiplied in 16
  lanes cost a quantized matmul's inner loop as much as its weights did). None when a source varies by lane, and for
  a comparison, which stays a vector mask: a select or a mask's AND takes masks, not broadcast bools."""
  if (u.op not in GroupOp.AnyALU and u.op not in (Ops.CAST, Ops.BITCAST)) or u.dtype.scalar() is dtypes.bool: return None
  scalars = []
  for s in srcs:
    if s.dtype.count == 1: scalars.append(s)
    elif s.op is Ops.VECTORIZE and all(x is s.src[0] for x in s.src): scalars.append(s.src[0])
    else: return None
  return UOp(u.op, u.dtype, tuple(scalars), u.arg)


def _vec_ok(u: UOp, srcs: list[UOp], vec_dtypes: frozenset[DType], half_loads: bool = False, float_ops: frozenset[Ops] = frozenset()) -> bool:
  """Whether the renderer can do op u on vectors of these sources (vec_dtypes: the element types it has vectors of;
  half_loads: a half vector's widening to float; float_ops: the float ops it has vector forms of beyond the common ones)."""
  sdt = u.dtype.scalar()
  if half_loads and u.op is Ops.CAST and sdt is dtypes.float and srcs[0].dtype.scalar() is dtypes.half: return True
  if u.op in GroupOp.Comparison: return all(s.dtype.scalar() in vec_dtypes for s in srcs)
  if sdt is dtypes.bool: return u.op in (Ops.AND, Ops.OR, Ops.XOR) and len({mask_size(s) for s in srcs}) == 1 and mask_size(srcs[0]) is not None
  if sdt not in vec_dtypes: return False
  if u.op is Ops.WHERE:
    c = srcs[0]
    return c.dtype.count == 1 or mask_size(c) == csize(sdt)
  if u.op in (Ops.CAST, Ops.BITCAST):
    src = srcs[0].dtype.scalar()
    return src in vec_dtypes and (u.op is Ops.CAST or csize(src) == csize(sdt))
  return u.op in _VEC_ALU or (u.op in _VEC_INT and not sdt._is_float) or (u.op in (_VEC_FLOAT | float_ops) and sdt._is_float)


class Expander:
  def __init__(self, ast: UOp, vec: int, half_loads: bool = False, vec_dtypes: frozenset[DType] = VEC_DTYPES,
               float_ops: frozenset[Ops] = frozenset()):
    self.k = KernelParts.of(ast)
    self.half_loads, self.vec_dtypes, self.float_ops = half_loads, vec_dtypes, float_ops
    self.lane_axes = sorted((r for r in self.k.all_ranges() if rkind(r) in LANES), key=lambda r: r.arg[0])
    self.axes_memo: dict[UOp, tuple[UOp, ...]] = {}
    # a tensor core's fragments are gathered register by register (codegen/tc.py): no vector axis in such a kernel
    self.vaxis = self._vector_axis(vec) if vec > 1 and not has_tc(ast) else None
    self.chunks = chunks(rsize(self.vaxis), vec) if self.vaxis is not None else []
    self.memo: dict[UOp, dict[tuple[int, ...], UOp]] = {}
    self.simplified: dict[UOp, UOp] = {}
    self.positions: dict[tuple, tuple[int, ...]] = {}  # (axes, sub-axes) -> where the sub-axes are in axes

  def _vector_axis(self, vec: int) -> UOp | None:
    """The lane axis along which the most lanes are accessed contiguously (the store's count twice), None when no
    access is contiguous along any. A load counts with all its lanes (a per-channel scale read along a few lanes
    weighs less than the tile it scales), and an axis by how much of a vector it fills."""
    idxs = [(self.k.out.src[1], 2)] + [(u.src[0].src[1], 1) for u in self.k.value.toposort() if u.op is Ops.LOAD]
    lanes = [(idx, w * prod(rsize(a) for a in self.axes(idx))) for idx, w in idxs]
    score = {r: min(rsize(r), vec) * sum(n for idx, n in lanes if r in self.axes(idx) and stride(idx, r) == 1) for r in self.lane_axes}
    best = max(self.lane_axes, key=lambda r: (score[r], rsize(r)), default=None)
    return best if best is not None and score[best] > 0 else None

  # ** lanes **

  def axes(self, u: UOp) -> tuple[UOp, ...]:
    """The lane axes u's value varies over, in lane order."""
    if (hit := self.axes_memo.get(u)) is not None: return hit
    for x in u.toposort(gate=lambda n: n not in self.axes_memo):  # sources first: no recursion on deep graphs
      if x.op is Ops.RANGE: ret: tuple[UOp, ...] = (x,) if rkind(x) in LANES else ()
      else:
        got = set().union(*[self.axes_memo[s] for s in x.src]) if x.src else set()
        if x.op is Ops.REDUCE: got -= set(x.src[1:])
        if x.op is Ops.WMMA: got -= {x.src[3], x.src[4]}  # the fragments' registers are the instruction's
        ret = tuple(a for a in self.lane_axes if a in got)
      self.axes_memo[x] = ret
    return self.axes_memo[u]

  def keys(self, axes: tuple[UOp, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(len(self.chunks) if a is self.vaxis else rsize(a)) for a in axes]))

  def chunk(self, axes: tuple[UOp, ...], key: tuple[int, ...]) -> tuple[int, int, int]:
    """The key's vector chunk: (first lane, width, live lanes; see chunks()), or (0, 1, 1) when it has no vector axis."""
    return self.chunks[key[axes.index(self.vaxis)]] if self.vaxis in axes else (0, 1, 1)

  def width(self, axes: tuple[UOp, ...], key: tuple[int, ...]) -> int: return self.chunk(axes, key)[1]

  def subs(self, axes: tuple[UOp, ...], key: tuple[int, ...]) -> dict[UOp, UOp]:
    """Each lane axis at the key's first lane."""
    return {a: _c(self.chunks[k][0] if a is self.vaxis else k) for a, k in zip(axes, key)}

  def get(self, u: UOp, axes: tuple[UOp, ...], key: tuple[int, ...], widen: bool = True) -> UOp:
    """u's value for a key over `axes` (a superset of u's), made as wide as that key's chunk if `widen`."""
    uaxes, ukey = self.axes(u), key
    if uaxes != axes:
      if (pos := self.positions.get((axes, uaxes))) is None: pos = self.positions[(axes, uaxes)] = tuple(axes.index(a) for a in uaxes)
      ukey = tuple(key[i] for i in pos)
    v = (self.memo.get(u) or self.ex(u))[ukey]
    return bcast(v, self.width(axes, key)) if widen else v

  # ** expansion **

  def ex(self, u: UOp) -> dict[tuple[int, ...], UOp]:
    if (hit := self.memo.get(u)) is not None: return hit
    # what _ex reads is expanded first, sources before users, so _ex never recurses (deep chains of ops)
    for x in postorder(u, self._needs, self.memo): self.memo[x] = self._ex(x)
    return self.memo[u]

  def _needs(self, u: UOp) -> tuple[UOp, ...]:
    """The nodes whose expansion _ex(u) reads."""
    if u.op is Ops.REDUCE: return u.src[0].src[:2] if u.src[0].op is Ops.WMMA else (u.src[0],)
    return () if u.op in (Ops.RANGE, Ops.LOAD) and self.axes(u) else u.src

  def _ex(self, u: UOp) -> dict[tuple[int, ...], UOp]:
    axes = self.axes(u)
    if u.op is Ops.REDUCE: return self.reduce(u)
    if not axes:  # the same for every lane: only a REDUCE below it can change
      srcs = tuple(self.memo[s][()] for s in u.src)
      return {(): u if srcs == u.src else UOp(u.op, u.dtype, srcs, u.arg)}
    return {key: self.node(u, axes, key) for key in self.keys(axes)}

  def node(self, u: UOp, axes: tuple[UOp, ...], key: tuple[int, ...]) -> UOp:
    w = self.width(axes, key)
    if u.op is Ops.RANGE:
      s = self.subs(axes, key)[u]
      return vectorize([_c(s.arg + i) for i in range(w)])
    if u.op is Ops.LOAD: return self.load(u, axes, key)
    srcs = [self.get(s, axes, key, widen=False) for s in u.src]
    if w == 1: return UOp(u.op, u.dtype, tuple(srcs), u.arg)
    if (folded := _fold_lanes(u, srcs, w)) is not None: return folded
    if (same := _uniform_op(u, srcs)) is not None: return bcast(same, w)
    if _vec_ok(u, srcs, self.vec_dtypes, self.half_loads, self.float_ops):
      srcs = [s if u.op is Ops.WHERE and i == 0 and s.dtype.count == 1 else bcast(s, w) for i, s in enumerate(srcs)]
      return UOp(u.op, u.dtype.vec(w), tuple(srcs), u.arg)
    return vectorize([UOp(u.op, u.dtype, tuple(gep(s, i) for s in srcs), u.arg) for i in range(w)])

  def lanes_of(self, x: UOp, axes: tuple[UOp, ...], key: tuple[int, ...], w: int) -> Lanes:
    subs = self.subs(axes, key)
    if w > 1: subs[self.vaxis] = subs[self.vaxis] + _lane(w)  # type: ignore[index]  # w > 1: there is a vector axis
    return Lanes(self.simplify(x.substitute(subs)), w, self.simplify)

  def simplify(self, x: UOp) -> UOp:
    """x simplified; lanes of different chunks and accesses share most index expressions, so results are kept."""
    if (hit := self.simplified.get(x)) is None: hit = self.simplified[x] = x.simplify()
    return hit

  def load(self, u: UOp, axes: tuple[UOp, ...], key: tuple[int, ...]) -> UOp:
    buf, idx = u.src[0].src
    (_, w, n), dt = self.chunk(axes, key), u.dtype
    ix = self.lanes_of(idx, axes, key, w)
    gx = self.lanes_of(u.src[1], axes, key, w) if len(u.src) > 1 else None
    vectors = dt in self.vec_dtypes or (self.half_loads and dt is dtypes.half)
    if (ix.uniform or vectors and ix.contiguous) and (gx is None or gx.uniform):
      # one access for every lane, under one gate (the common case, worked out without looking at the lanes)
      gate = None if gx is None or (gx.first.op is Ops.CONST and gx.first.arg is True) else gx.first
      if gate is not None and gate.op is Ops.CONST: return bcast(UOp.const(dt, 0), w)  # never read
      if ix.uniform: return bcast(UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, dt, (buf, ix.first)),) + ((gate,) if gate is not None else ())), w)
      index = UOp(Ops.INDEX, dt.vec(w), (buf, ix.first), _aligned(ix.first, w, dt, self.simplify))
      dead = () if n == w else (UOp.const(dtypes.uint, (1 << n) - 1),)  # dead lanes may lie past the buffer
      return UOp(Ops.LOAD, dt.vec(w), (index,) + ((gate,) if gate is not None else ()) + dead)
    idxs = ix.each()
    gates: list[UOp | None] = gx.each() if gx is not None else [None] * w  # type: ignore[assignment]
    gates = [None if g is None or (g.op is Ops.CONST and g.arg is True) else g for g in gates]
    live = [i for i, g in enumerate(gates[:n]) if not (g is not None and g.op is Ops.CONST and g.arg is False)]

    def scalar(i: int) -> UOp:
      if i not in live: return UOp.const(dt, 0)
      return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, dt, (buf, idxs[i])),) + ((gates[i],) if gates[i] is not None else ()))  # type: ignore[operator]
    if not live: return bcast(UOp.const(dt, 0), w)
    if ix.uniform and all(g is gates[0] for g in gates): return bcast(scalar(0), w)
    if vectors and ix.contiguous:
      gate = None
      if all(gates[i] is gates[live[0]] for i in live):
        gate, mask = gates[live[0]], UOp.const(dtypes.uint, sum(1 << i for i in live))
      else:
        bits = [UOp.const(dtypes.uint, 1 << i) for i in range(w)]
        mask = UOp.const(dtypes.uint, 0)
        for i in live: mask = mask | (bits[i] if gates[i] is None else gates[i].where(bits[i], UOp.const(dtypes.uint, 0)))  # type: ignore[union-attr]
        mask = mask.simplify()
      full = mask.op is Ops.CONST and mask.arg == (1 << w) - 1
      index = UOp(Ops.INDEX, dt.vec(w), (buf, idxs[0]), _aligned(idxs[0], w, dt, self.simplify))
      return UOp(Ops.LOAD, dt.vec(w), (index,) + ((gate,) if gate is not None else ()) + (() if full else (mask,)))
    return vectorize([scalar(i) for i in range(w)])

  def store(self) -> list[UOp]:
    return [st for out in (self.k.out, *self.k.also) for st in self.store_to(out)]

  def store_to(self, out: UOp) -> list[UOp]:
    value = self.k.value
    axes = tuple(a for a in self.lane_axes if a in set(self.axes(value)) | set(self.axes(out.src[1])))
    stores = []
    for key in self.keys(axes):
      _, w, n = self.chunk(axes, key)
      v = self.get(value, axes, key)
      ix = self.lanes_of(out.src[1], axes, key, w)
      if w > 1 and value.dtype in self.vec_dtypes and ix.contiguous:
        # a chunk with dead lanes stores its live ones as narrower vectors
        for off, pw in ([(0, w)] if n == w else _pieces(n)):
          at = ix.first if off == 0 else self.simplify(ix.first + off)
          piece = v if pw == w else vectorize([gep(v, off + i) for i in range(pw)])
          stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, piece.dtype, (out.src[0], at), _aligned(at, pw, value.dtype, self.simplify)), piece)))
      else:
        idxs = ix.each()
        stores += [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out.src[0], idxs[i])), gep(v, i))) for i in range(n)]
    return stores

  def mma_reduce(self, u: UOp) -> dict[tuple[int, ...], UOp]:
    """A sum of WMMA(a, b, c_reg, a_reg, b_reg) (codegen/tc.py): per tile, one accumulator vector of the C fragment
    (c_reg's lanes), updated by the instruction on the A fragment (a at each a_reg) and the B fragment; unrolled
    reduce steps are more instructions on the same accumulator."""
    w = u.src[0]
    a, b, rc, ra, rb = w.src
    unroll = [r for r in u.src[1:] if rkind(r) is AxisType.UNROLL and r is not ra and r is not rb]
    loops = tuple(r for r in u.src[1:] if rkind(r) is not AxisType.UNROLL)
    acc_axes = tuple(x for x in self.axes(w) if x not in unroll and x is not rc)
    acc_dt = u.dtype.vec(rsize(rc))
    accs = {}
    for key in self.keys(acc_axes):
      terms = []
      for ckey in itertools.product(*[range(rsize(r)) for r in unroll]):
        fk = dict(zip(acc_axes, key)) | dict(zip(unroll, ckey))
        def frag(x: UOp, reg: UOp) -> UOp:
          xa = self.axes(x)
          return vectorize(self.pairs([self.get(x, xa, tuple(i if ax is reg else fk[ax] for ax in xa), widen=False) for i in range(rsize(reg))]))
        terms.append(UOp(Ops.WMMA, acc_dt, (frag(a, ra), frag(b, rb)), w.arg))
      accs[key] = UOp(Ops.REDUCE, acc_dt, (*terms, *loops), (u.arg, len(terms)))
    raxes = self.axes(u)
    out = {}
    for key in self.keys(raxes):
      kd = dict(zip(raxes, key))
      out[key] = gep(accs[tuple(kd[x] for x in acc_axes)], kd[rc])
    return out

  def pairs(self, vals: list[UOp]) -> list[UOp]:
    """A fragment's values, each pair the instruction takes in one register loaded as one 32-bit load where the two
    fp16 values are neighbours in memory at an even index (an A row, or a B column of a transposed B)."""
    out = []
    for a, b in zip(vals[::2], vals[1::2]):
      if a.op is Ops.LOAD and b.op is Ops.LOAD and len(a.src) == len(b.src) == 1 and a.dtype is dtypes.half and a.src[0].src[0] is b.src[0].src[0]:
        (buf, ia), ib = a.src[0].src, b.src[0].src[1]
        if (d := self.simplify(ib - ia)).op is Ops.CONST and d.arg == 1 and _aligned(ia, 2, a.dtype, self.simplify):
          v = UOp(Ops.LOAD, a.dtype.vec(2), (UOp(Ops.INDEX, a.dtype.vec(2), (buf, ia), True),))
          out += [gep(v, 0), gep(v, 1)]
          continue
      out += [a, b]
    return out

  def reduce(self, u: UOp) -> dict[tuple[int, ...], UOp]:
    if u.src[0].op is Ops.WMMA: return self.mma_reduce(u)
    body, op, dt = u.src[0], u.arg, u.dtype
    unroll = [r for r in u.src[1:] if rkind(r) is AxisType.UNROLL]
    loops = tuple(r for r in u.src[1:] if rkind(r) is not AxisType.UNROLL)
    baxes = self.axes(body)
    # lanes along the vector axis accumulate apart (vector accumulators), other unrolled lanes add into their register
    vred = self.vaxis in unroll and self.vaxis in baxes
    acc_axes = tuple(a for a in baxes if a not in unroll or (vred and a is self.vaxis))
    contract = [r for r in unroll if not (vred and r is self.vaxis)]
    full_axes = tuple(a for a in self.lane_axes if a in set(acc_axes) | set(contract))
    accs = {}
    for key in self.keys(acc_axes):
      w = self.width(acc_axes, key)
      terms = []
      for ckey in itertools.product(*[range(rsize(r)) for r in contract]):
        fk = dict(zip(acc_axes, key)) | dict(zip(contract, ckey))
        terms.append(self.get(body, full_axes, tuple(fk[a] for a in full_axes)))
      if w == 1 or dt in self.vec_dtypes: accs[key] = UOp(Ops.REDUCE, dt.vec(w) if w > 1 else dt, (*terms, *loops), (op, len(terms)))
      else: accs[key] = vectorize([UOp(Ops.REDUCE, dt, (*[gep(t, i) for t in terms], *loops), (op, len(terms))) for i in range(w)])
    if not vred: return accs
    # combine the vector axis' lanes (and chunks) of each accumulator once, after the loop
    pos = acc_axes.index(self.vaxis)
    alu = Ops.OR if op is Ops.ADD and dt is dtypes.bool else op
    keys = self.keys(acc_axes[:pos] + acc_axes[pos + 1:])
    parts: dict[tuple[int, ...], list[UOp]] = {key: [] for key in keys}
    full: list[tuple[UOp, tuple[int, ...]]] = []  # whole vectors, summed across accumulators at once (_transposed_fold)
    for key in keys:
      # chunks of one shape combine as vectors first, then the live lanes of what is left
      shapes: dict[tuple[int, int], list[UOp]] = {}
      for c, (_, w, n) in enumerate(self.chunks): shapes.setdefault((w, n), []).append(accs[key[:pos] + (c,) + key[pos:]])
      groups = [((w, n), [a]) for (w, n), g in shapes.items() for a in g] if dt not in self.vec_dtypes else list(shapes.items())
      for (w, n), g in groups:
        v = _fold(alu, g)
        if dt in self.vec_dtypes and n == w > 1 and w & (w - 1) == 0: full.append((v, key))
        else: parts[key] += [gep(v, i) for i in range(n)]
    for (_, key), total in zip(full, _transposed_fold(alu, [v for v, _ in full])): parts[key].append(total)
    return {key: _fold(alu, parts[key]) for key in keys}

  def expand(self) -> UOp:
    loops = [r for r in self.k.loops if rkind(r) not in LANES]
    return UOp.sink(UOp(Ops.END, dtypes.void, (UOp(Ops.GROUP, dtypes.void, tuple(self.store())), *loops)))


def _fold(op: Ops, xs: list[UOp]) -> UOp:
  """xs combined with op, as a balanced tree (shorter dependency chains, and a sum rounds less)."""
  while len(xs) > 1: xs = [UOp(op, xs[i].dtype, (xs[i], xs[i + 1])) if i + 1 < len(xs) else xs[i] for i in range(0, len(xs), 2)]
  return xs[0]


def _transposed_fold(op: Ops, vs: list[UOp]) -> list[UOp]:
  """Each vector's lanes combined with op, for many vectors at once: two vectors of k accumulators' p lanes each become
  one of 2k accumulators' p/2 lanes (their low halves op their high halves), until a lane is an accumulator. n vectors
  of w lanes take about 3n vector operations, where combining each alone takes n(w - 1) scalar ones and as many lane
  extractions (a matmul whose lanes run along its reduction ends every output tile so)."""
  items = [(v, [i], v.dtype.count) for i, v in enumerate(vs)]  # (vector, its accumulators in order, lanes each)
  done: dict[int, UOp] = {}
  while items:
    by_shape: dict[tuple[int, int], list[tuple[UOp, list[int], int]]] = {}
    for v, owners, p in items:
      if p == 1: done.update((o, gep(v, j)) for j, o in enumerate(owners))
      else: by_shape.setdefault((len(owners), p), []).append((v, owners, p))
    items = []
    for (_, p), group in by_shape.items():
      for pair in [group[i:i + 2] for i in range(0, len(group), 2)]:  # (the last may be alone: it halves by itself)
        lo = vectorize([gep(v, j * p + i) for v, owners, _ in pair for j in range(len(owners)) for i in range(p // 2)])
        hi = vectorize([gep(v, j * p + p // 2 + i) for v, owners, _ in pair for j in range(len(owners)) for i in range(p // 2)])
        items.append((UOp(op, lo.dtype, (lo, hi)), [o for _, owners, _ in pair for o in owners], p // 2))
  return [done[i] for i in range(len(vs))]


def _lane(w: int) -> UOp:
  """The lane of a chunk of w lanes as a variable: an index simplified with it holds for every lane at once."""
  return UOp(Ops.RANGE, IDX, (_c(w),), (-1, AxisType.UPCAST))


class Lanes:
  """An expression's value in the lanes of a chunk, simplified once with the lane as a variable (_lane): whether it
  is the same in every lane or grows by one per lane is read off that; single lanes are worked out only when asked."""
  def __init__(self, sym: UOp, w: int, simplify: Callable[[UOp], UOp]):
    self.sym, self.w = sym, w
    lane = _lane(w)
    self.uniform = w == 1 or sym.substitute({lane: _c(0)}) is sym
    self.first = sym if self.uniform else simplify(sym.substitute({lane: _c(0)}))
    self.contiguous = w > 1 and not self.uniform and simplify(sym - self.first) is lane

  def each(self) -> list[UOp]:
    if self.uniform: return [self.sym] * self.w
    lane = _lane(self.w)
    return list(UOp.sink(*[self.sym.substitute({lane: _c(i)}) for i in range(self.w)]).simplify().src)


def _aligned(idx: UOp, w: int, dt: DType, simplify: Callable[[UOp], UOp]) -> bool | None:
  """True when idx is provably a multiple of the vector's width (buffers are 64-byte aligned), else None."""
  if w * csize(dt) > 64 or w & (w - 1): return None
  m = simplify(idx % w)
  return True if m.op is Ops.CONST and m.arg == 0 else None


def expand(ast: UOp, vec: int, half_loads: bool = False, vec_dtypes: frozenset[DType] = VEC_DTYPES,
           float_ops: frozenset[Ops] = frozenset()) -> UOp:
  """The kernel with its lanes expanded (see the module doc); `vec` is the widest vector the renderer takes (1: none),
  half_loads whether it loads half vectors and widens them to float (Renderer.half_loads), vec_dtypes the element
  types it has vectors of (Renderer.vec_dtypes: the others are computed lane by lane), float_ops the float ops it
  has vector forms of beyond the common ones (Renderer.vector_float_ops)."""
  return Expander(ast, vec, half_loads, vec_dtypes, float_ops).expand()

