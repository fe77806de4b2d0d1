"""CHECK_OOB: a proof, per kernel and before it first runs, that every LOAD and STORE stays inside its buffer.

The kernel IR the renderer takes (codegen/expand.py) is translated to z3: a loop index (RANGE) is an integer in
[0, end) for the accesses inside its loop (an empty loop runs nothing), a kernel variable (DEFINE_VAR) one in its
[min, max], and anything the index arithmetic can not follow (a
value loaded from memory, a cast or bitcast from a float, a float comparison) a fresh unknown bounded by its dtype.
Integer casts and bitcasts wrap into the target's range where the source can leave it (z3's integers are unbounded),
bool and int convert as C does, and the divisions are the renderer's: floor or truncating, 0 for a divisor of 0.
An access is proven when z3 finds no assignment under which it runs (its gate holds, its lane is not masked off)
with an element outside [0, size). A vector access covers `width` elements from its index.

A buffer's size is its PARAM's, or, for a Variable-sized buffer (a whole buffer reshaped to a symbolic shape: the
kernel is replayed with other values on buffers of other sizes), the element count of that shape as an expression of
the bounded variables (LoweredKernel.sizes), so the proof covers every value the variables take.

A kernel that can not be proven raises OutOfBoundsError naming the access, the buffer and z3's counterexample. A
proven kernel is marked (LoweredKernel.proven) and remembered on disk by its source, buffer sizes and variable ranges,
so a kernel is proven once, not once per process."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.runtime import diskcache
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.digest import sha256

if TYPE_CHECKING:
  import z3

  from tinyhybrid.codegen.lower import LoweredKernel

TIMEOUT_MS = 20000  # per access: an index z3 can not decide in this time is not proven
_FORMAT = "oob-5"   # part of the disk cache key: a change to what a proof means invalidates old ones


class OutOfBoundsError(RuntimeError):
  """CHECK_OOB could not prove a kernel's memory accesses in bounds: the message names the access, the buffer's size
  and the loop indices and variable values (z3's counterexample) at which it leaves the buffer."""


def _bits(dt: DType) -> int: return 64 if dt is dtypes.weakint else 8 * dt.itemsize  # weakint renders as long long


def _range(dt: DType) -> tuple[int, int]:
  if dt is dtypes.weakint: return -2**63, 2**63 - 1
  return int(dt.min), int(dt.max)


class _Z3:
  """The translation of one kernel's index arithmetic. Every node is a tuple of lanes (one for a scalar)."""

  def __init__(self, z3mod):
    self.z3 = z3mod
    self.ctx = z3mod.Context()
    self.solver = z3mod.Solver(ctx=self.ctx)
    self.solver.set("timeout", TIMEOUT_MS)
    self.map: dict[UOp, tuple] = {}
    self.named: dict[str, tuple[UOp, z3.ExprRef]] = {}  # the loop indices and variables: what a counterexample shows
    # a loop index's range holds only inside its loop (an empty loop runs nothing): it is a condition of the accesses
    # the loop encloses, not a fact for the whole kernel
    self.in_loop: dict[UOp, z3.BoolRef] = {}
    self.fresh = 0

  def int(self, v: int): return self.z3.IntVal(v, ctx=self.ctx)

  def bounded(self, name: str, lo, hi):
    x = self.z3.Int(name, ctx=self.ctx)
    self.solver.add(lo <= x, x <= hi)
    return x

  def unknown(self, u: UOp):
    """A value the proof does not follow: any value of its dtype (a bool is any bool)."""
    self.fresh += 1
    if u.dtype.scalar() is dtypes.bool: return self.z3.Bool(f"unknown{self.fresh}", ctx=self.ctx)
    lo, hi = _range(u.dtype.scalar())
    return self.bounded(f"unknown{self.fresh}", lo, hi)

  def name(self, name: str, u: UOp, lo, hi):
    """A loop index or variable: its own z3 constant (two nodes under one name would be one unknown, and the proof
    would only cover the smaller range)."""
    while name in self.named: name += "'"
    if u.op is Ops.DEFINE_VAR: x = self.bounded(name, lo, hi)
    else:
      x = self.z3.Int(name, ctx=self.ctx)
      self.in_loop[u] = self.z3.And(lo <= x, x <= hi)
    self.named[name] = (u, x)
    return x

  def wrap(self, x, dt: DType):
    """x as a value of the int dtype dt: two's complement wrap-around."""
    lo, _ = _range(dt)
    return (x - lo) % (2 ** _bits(dt)) + lo

  def to_bv(self, x, n: int = 64): return self.z3.Int2BV(x, n)  # type: ignore[valid-type]  # (int: the method above)
  def from_bv(self, x, signed: bool = True): return self.z3.BV2Int(x, is_signed=signed)

  def of(self, root: UOp) -> tuple:
    """The lanes of root, translating the nodes under it bottom up (the C++ toposort: no recursion on deep indices)."""
    if (hit := self.map.get(root)) is not None: return hit
    for u in root.toposort(gate=lambda n: n not in self.map and n.op not in (Ops.INDEX, Ops.PARAM)):
      if u not in self.map: self.map[u] = self.node(u)
    # an address or a buffer (met inside a lane mask that a loaded value decides) has no value to follow: unknown
    return self.map[root] if root in self.map else (None,) * root.dtype.count

  def node(self, u: UOp) -> tuple:
    z3, op, dt = self.z3, u.op, u.dtype
    n, sdt = dt.count, dt.scalar()
    if sdt._is_float and op is not Ops.CONST: return (None,) * n  # not followed: a consumer of it makes an unknown
    if op is Ops.CONST:
      if sdt._is_float: return (None,) * n
      v = z3.BoolVal(bool(u.arg), ctx=self.ctx) if sdt is dtypes.bool else self.int(int(u.arg))
      return (v,) * n
    if op is Ops.RANGE or op is Ops.SPECIAL:
      end = self.map[u.src[0]][0]
      return (self.name(f"r{u.arg[0]}" if op is Ops.RANGE else str(u.arg), u, 0, end - 1),)
    if op is Ops.DEFINE_VAR: return (self.name(u.arg[0], u, u.arg[1], u.arg[2]),)
    if op is Ops.VECTORIZE: return tuple(lane for s in u.src for lane in self.map[s])
    if op is Ops.GEP: return tuple(self.map[u.src[0]][i] for i in u.arg)
    srcs = [self.map.get(s, (None,) * s.dtype.count) for s in u.src]
    if any(lane is None for s in srcs for lane in s) or op in (Ops.LOAD, Ops.REDUCE): return tuple(self.unknown(u) for _ in range(n))
    # lane-wise: a scalar source is the same in every lane (WHERE's condition over vector branches)
    return tuple(self.alu(u, [s[i] if len(s) > 1 else s[0] for s in srcs]) for i in range(n))

  def alu(self, u: UOp, s: list):
    z3, op, dt = self.z3, u.op, u.dtype.scalar()
    boolean = dt is dtypes.bool
    if op is Ops.ADD: return z3.Or(*s) if boolean else s[0] + s[1]
    if op is Ops.SUB: return s[0] - s[1]
    if op is Ops.MUL: return z3.And(*s) if boolean else s[0] * s[1]
    if op is Ops.NEG: return z3.Not(s[0]) if boolean else -s[0]
    if op is Ops.MAX: return z3.Or(*s) if boolean else z3.If(s[0] < s[1], s[1], s[0])
    if op is Ops.WHERE: return z3.If(s[0], s[1], s[2])
    if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
      a, b = s
      if u.src[0].dtype.scalar() is dtypes.bool:  # bools compare as 0 and 1
        a, b = z3.If(a, self.int(1), self.int(0)), z3.If(b, self.int(1), self.int(0))
      return a < b if op is Ops.CMPLT else a != b if op is Ops.CMPNE else a == b
    if op in (Ops.AND, Ops.OR, Ops.XOR):
      if boolean: return z3.And(*s) if op is Ops.AND else z3.Or(*s) if op is Ops.OR else z3.Xor(*s)
      a, b = (self.to_bv(x, max(_bits(dt), 64)) for x in s)
      return self.wrap(self.from_bv(a & b if op is Ops.AND else a | b if op is Ops.OR else a ^ b), dt)
    if op in (Ops.SHL, Ops.SHR):
      sh = u.src[1]
      if sh.op is not Ops.CONST or not 0 <= sh.arg < _bits(dt): return self.unknown(u)
      return self.wrap(s[0] * 2 ** sh.arg, dt) if op is Ops.SHL else s[0] / 2 ** sh.arg  # z3's / is floor for d > 0
    if op in (Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD):
      a, b = s
      # z3's integer division is Euclidean; for floor division flip both signs when b < 0
      fq = z3.If(b > 0, a / b, (-a) / (-b))
      if op is Ops.FLOORDIV: q = fq
      elif op is Ops.FLOORMOD: return z3.If(b == 0, self.int(0), a - b * fq)
      else:
        t = z3.If(a >= 0, a, -a) / z3.If(b >= 0, b, -b)
        q = z3.If((a >= 0) == (b > 0), t, -t)
        if op is Ops.CMOD: return z3.If(b == 0, self.int(0), a - b * q)
      return z3.If(b == 0, self.int(0), q)
    if op is Ops.CAST or op is Ops.BITCAST:
      src = u.src[0].dtype.scalar()
      if src is dtypes.bool: return s[0] if boolean else z3.If(s[0], self.int(1), self.int(0))
      if boolean: return s[0] != 0
      if op is Ops.BITCAST and _bits(src) != _bits(dt): return self.unknown(u)
      lo, hi = _range(dt)
      # a cast that provably fits changes nothing; one that may not wraps (a bitcast reinterprets: the same wrap)
      return s[0] if lo <= u.src[0].vmin and u.src[0].vmax <= hi else self.wrap(s[0], dt)
    return self.unknown(u)


def _lanes_live(t: _Z3, mask: UOp | None, width: int) -> list:
  """For each lane of a vector access, whether it is read: bit i of the lane mask (all lanes without one). The mask is
  an OR of per-lane bits under gates (codegen/expand.py): each bit is followed through OR, AND, XOR and WHERE as a
  bool, which z3 decides at once, where the same mask as an integer (bit-vector or division arithmetic) can take it
  past its time limit."""
  true = t.z3.BoolVal(True, ctx=t.ctx)
  if mask is None: return [true] * width
  order = [u for u in mask.toposort() if u.dtype.scalar() is not dtypes.bool]  # bool nodes are gates, read by t.of
  out = []
  for i in range(width):
    bit: dict[UOp, z3.BoolRef] = {}
    for u in order:
      if u.op is Ops.CONST: bit[u] = t.z3.BoolVal(bool((int(u.arg) >> i) & 1), ctx=t.ctx)
      elif u.op in (Ops.OR, Ops.AND, Ops.XOR) and all(s in bit for s in u.src):
        bit[u] = (t.z3.Or if u.op is Ops.OR else t.z3.And if u.op is Ops.AND else t.z3.Xor)(*[bit[s] for s in u.src])
      elif u.op is Ops.WHERE and u.src[1] in bit and u.src[2] in bit:
        cond = t.of(u.src[0])[0]
        bit[u] = t.z3.If(cond, bit[u.src[1]], bit[u.src[2]]) if cond is not None else t.z3.Or(bit[u.src[1]], bit[u.src[2]])
      else:
        m = t.of(u)[0]
        bit[u] = (m / 2 ** i) % 2 == 1 if m is not None else true  # a mask the proof can not follow reads every lane
    out.append(bit[mask])
  return out


def _accesses(ast: UOp) -> list[tuple[UOp, UOp, UOp | None, UOp | None, int]]:
  """(access, its INDEX, gate, lane mask, width) for every LOAD and STORE of a buffer."""
  out = []
  for u in ast.toposort():
    if u.op is Ops.LOAD:
      index = u.src[0]
      gate = next((s for s in u.src[1:] if s.dtype is dtypes.bool), None)
      mask = next((s for s in u.src[1:] if s.dtype is dtypes.uint), None)
      out.append((u, index, gate, mask, u.dtype.count))
    elif u.op is Ops.STORE:
      index = u.src[0]
      gate = u.src[2] if len(u.src) > 2 and u.src[2].dtype is dtypes.bool else None
      out.append((u, index, gate, None, u.src[1].dtype.count))
  return [a for a in out if a[1].op is Ops.INDEX and a[1].src[0].op is Ops.PARAM]


_LOOPS = (Ops.RANGE, Ops.SPECIAL)


def _enclosing_loops(ast: UOp) -> Callable[[UOp], set[UOp]]:
  """For an access, the loops it runs inside: the kernel's (END's) and those of every REDUCE whose terms it feeds."""
  outer = {r for u in ast.toposort() if u.op is Ops.END for r in u.src[1:] if r.op in _LOOPS}
  reduces = [(frozenset(n for s in u.src if s.op not in _LOOPS for n in s.toposort()), {s for s in u.src if s.op in _LOOPS})
             for u in ast.toposort() if u.op is Ops.REDUCE]
  return lambda access: outer.union(*[rs for body, rs in reduces if access in body])


def _describe(t: _Z3, model, access: UOp, index: UOp, size: int | UOp, gate: UOp | None, mask: UOp | None, width: int) -> str:
  buf = index.src[0]
  what = f"{access.op.name} of {width} elements" if width > 1 else access.op.name
  # the loop indices and variables this access depends on, at z3's counterexample
  used = {u for root in (index.src[1], gate, mask, size) if isinstance(root, UOp) for u in root.toposort()}
  at = ", ".join(f"{name}={model.eval(x, model_completion=True)}" for name, (u, x) in sorted(t.named.items()) if u in used) or "every loop index"
  idx = t.of(index.src[1])
  lanes = ", ".join(str(model.eval(x, model_completion=True)) for x in idx) if idx[0] is not None else "unknown"
  n = size if isinstance(size, int) else model.eval(t.of(size)[0], model_completion=True).as_long()
  elements = f"{size} element{'s' if size != 1 else ''}" if isinstance(size, int) else f"{size.render(simplify=False)} elements, {n} there"
  msg = (f"{what} data{buf.arg}[{index.src[1].render(simplify=False)}] ({buf.dtype.base.name}, {elements}) may be out of bounds: "
         f"at {at} the index is {lanes}")
  if width > 1 and len(idx) == 1 and idx[0] is not None:
    # a vector access: name the first lane that is read and lies outside
    first = model.eval(idx[0], model_completion=True).as_long()
    live = [model.eval(x, model_completion=True) for x in _lanes_live(t, mask, width)]
    if bad := [i for i in range(width) if t.z3.is_true(live[i]) and not 0 <= first + i < n]:
      msg += f" and lane {bad[0]} reads element {first + bad[0]}"
  if gate is not None: msg += f" (under the gate {gate.render(simplify=False)})"
  return msg


def prove(name: str, ast: UOp, sizes: dict[int, tuple[UOp, ...]] | None = None) -> None:
  """Proves every buffer access of a kernel's IR in bounds (the PARAMs' pointer dtypes give the sizes, `sizes` those of
  the Variable-sized buffers by PARAM slot); raises OutOfBoundsError with a counterexample otherwise."""
  import z3 as z3mod
  t = _Z3(z3mod)
  z3 = t.z3
  symbolic: dict[int, UOp] = {}
  for slot, exprs in (sizes or {}).items():
    # every expression is the buffer's size (each is a reshape of the whole buffer): the first is the size, the rest
    # equal it. A size is at least 0 for every value (a Variable may be 0)
    zs = [t.of(e)[0] for e in exprs]
    if any(x is None for x in zs): continue  # a size the proof can not follow: the PARAM's
    t.solver.add(*[x == zs[0] for x in zs[1:]], zs[0] >= 0)
    symbolic[slot] = exprs[0]
  checks = []  # (the condition under which the access leaves its buffer, the access)
  enclosing = _enclosing_loops(ast)
  for access, index, gate, mask, width in _accesses(ast):
    size: int | UOp = symbolic.get(index.src[0].arg, index.src[0].dtype.size)
    zsize = t.of(size)[0] if isinstance(size, UOp) else size
    idx = t.of(index.src[1])
    g = t.of(gate)[0] if gate is not None else z3.BoolVal(True, ctx=t.ctx)
    if g is None: g = z3.BoolVal(True, ctx=t.ctx)  # a gate the proof can not follow may hold
    live = _lanes_live(t, mask, width)
    if idx[0] is None: bad = z3.BoolVal(True, ctx=t.ctx)  # an index the proof can not follow is never proven
    elif len(idx) > 1: bad = z3.Or(*[z3.And(live[i], z3.Or(x < 0, x >= zsize)) for i, x in enumerate(idx)])  # a gather
    else: bad = z3.Or(*[z3.And(live[i], z3.Or(idx[0] + i < 0, idx[0] + i >= zsize)) for i in range(width)])
    loops = enclosing(access) | {u for root in (index.src[1], gate, mask) if root is not None for u in root.toposort() if u.op in _LOOPS}
    for r in loops: t.of(r)
    checks.append((z3.And(*[t.in_loop[r] for r in loops], g, bad), (access, index, size, gate, mask, width)))
  if not checks: return
  # one query for every access: a kernel that is in bounds (nearly all) costs one solver call
  t.solver.push()
  t.solver.add(z3.Or(*[c for c, _ in checks]))
  res = t.solver.check()
  t.solver.pop()
  if res == z3.unsat: return
  for cond, (access, index, size, gate, mask, width) in checks:
    t.solver.push()
    t.solver.add(cond)
    res = t.solver.check()
    if res == z3.sat:
      raise OutOfBoundsError(f"CHECK_OOB: kernel {name}: {_describe(t, t.solver.model(), access, index, size, gate, mask, width)}")
    if res != z3.unsat:
      raise OutOfBoundsError(f"CHECK_OOB: kernel {name}: {access.op.name} data{index.src[0].arg}[{index.src[1].render(simplify=False)}] "
                             f"({size if isinstance(size, int) else size.render(simplify=False)} elements) could not be proven in bounds: z3 says {t.solver.reason_unknown()}")
    t.solver.pop()


def _key(k: LoweredKernel, src: str) -> str:
  """What a proof depends on: the source (every index, gate and loop bound), the sizes of the buffers and the ranges of
  the variables (neither is in the source: both arrive as arguments)."""
  parts = [_FORMAT, src, *(f"{b.size}:{b.dtype.name}" for b in k.buffers), *(repr(v.arg) for v in k.vars),
           *(f"{i}={e.render(simplify=False)}:{sorted(repr(v.arg) for v in e.toposort() if v.op is Ops.DEFINE_VAR)}" for i, es in sorted(k.sizes.items()) for e in es)]
  return sha256("\0".join(parts).encode()).hexdigest()[:32]


def check_kernel(k: LoweredKernel, src: str) -> None:
  """Proves a rendered kernel in bounds, once: the proof is kept with the kernel (k.proven) and on disk next to the
  compiled kernels, so a kernel is proven once, not once per process."""
  if k.proven: return
  mark = diskcache.subdir("oob") / _key(k, src)
  if not diskcache.valid(mark):
    prove(k.name, k.ast, k.sizes)
    diskcache.write(mark, b"")
  k.proven = True
