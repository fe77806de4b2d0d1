"""Vector code for DEV=CPU:X86 (AVX2): the selection rules and instructions for vectors of 4-byte elements, float32,
int32 and uint32, in xmm (up to 4 lanes) and ymm (8 lanes) registers. A vector of bools is a lane mask, each lane all
ones or all zeros, as the comparisons of AVX write it and vblendvps and vmaskmovps read it. The expander computes
vectors of any other type lane by lane (X86Renderer.vec_dtypes). Vector constants are read from a pool placed after
the code (`data`, read rip-relative).

X86Vectors is a part of X86Writer (renderer/isa/x86.py): it uses the writer's instructions, registers and values."""
from __future__ import annotations

import functools
import struct
from typing import TYPE_CHECKING

import numpy as np

from tinyhybrid.codegen.late.regalloc import Mem, Reg, VReg
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element
from tinyhybrid.uop.upat import UPat

LANE_DTYPES = frozenset((dtypes.float32, dtypes.int32, dtypes.uint32))
_LANES = (2, 4, 8)
_VF = tuple(dtypes.float32.vec(n) for n in _LANES)
_VI = tuple(dt.vec(n) for dt in (dtypes.int32, dtypes.uint32) for n in _LANES)
_VB = tuple(dtypes.bool.vec(n) for n in _LANES)
# vcmpps predicates: a < b false where unordered, a != b true where unordered (C's), a == b false where unordered
_FCMP = {Ops.CMPLT: 1, Ops.CMPNE: 4, Ops.CMPEQ: 0}
_COMMUTATIVE = {"vaddps", "vmulps", "vpaddd", "vpmulld", "vpand", "vpor", "vpxor", "vpmaxsd", "vpmaxud"}


def const_lanes(u: UOp) -> list | None:
  """The lanes of a constant vector (one value for a splat), None for anything else."""
  if u.op is Ops.CONST: return [u.arg] if u.dtype.count > 1 else None
  if u.op is Ops.VECTORIZE and all(s.op is Ops.CONST for s in u.src): return [s.arg for s in u.src]
  return None


def vbits(dt: DType) -> int:
  """The register width a vector of dt takes: ymm for 8 lanes, xmm for fewer."""
  return 256 if dt.count > 4 else 128


def lane_bytes(value, dt: DType) -> bytes:
  """One lane of a constant vector of dt as memory holds it (a bool: its lane mask)."""
  if dt is dtypes.float32:
    try: return struct.pack("<f", value)
    except OverflowError:  # past float32's range: rounded to an infinity, as a cast does
      with np.errstate(over="ignore"): return np.array(value, np.float32).tobytes()
  if dt is dtypes.bool: return struct.pack("<i", -1 if value else 0)
  return struct.pack("<I", int(value) & 0xFFFFFFFF)


@functools.lru_cache(maxsize=4096)
def pool_bytes(values: tuple, dt: DType) -> bytes:
  """A constant vector's bytes in the pool: its lanes, padded to an xmm or ymm register's 16 or 32."""
  data = b"".join(lane_bytes(v, dt) for v in values)
  return data + bytes((16 if len(data) <= 16 else 32) - len(data))


class X86Vectors:
  if TYPE_CHECKING:
    from tinyhybrid.renderer.isa.x86 import X86Renderer
    v: dict[UOp, VReg]
    acc: dict[UOp, VReg]
    fused: set[UOp]
    pool: dict[bytes, str]
    from_memory: set[UOp]
    lane_masks: dict[tuple[UOp, int], VReg]
    ren: X86Renderer
    def new(self, cls: str) -> VReg: ...
    def ins(self, mn: str, *ops) -> None: ...
    def val(self, u: UOp) -> VReg: ...
    def set(self, u: UOp, d: VReg) -> None: ...
    def demand(self, u: UOp) -> None: ...
    def address(self, index: UOp, at: VReg | None = None) -> Mem: ...
    def fail(self, u: UOp, why: str = "") -> NotImplementedError: ...

  # ** vectors in registers **

  def pooled(self, values: list, dt: DType) -> Mem:
    """The constant lanes `values` of vector type dt in the constant pool."""
    data = pool_bytes(tuple(values), dt.scalar())
    if (at := self.pool.get(data)) is None: at = self.pool[data] = f".Lpool{len(self.pool)}"
    return Mem(len(data), at)

  def vconst(self, values: list, dt: DType) -> VReg:
    """A register holding the constant lanes `values` of vector type dt, read from the constant pool."""
    d, m = self.new("x"), self.pooled(values, dt)
    self.ins("vmovups", Reg(d, 8 * m.size), m)
    return d

  def operand(self, u: UOp, vdt: DType) -> Reg | Mem:
    """u as an instruction's last operand: a constant vector is read from the pool there, not held in a register."""
    if (lanes := const_lanes(u)) is not None: return self.pooled(lanes if len(lanes) > 1 else lanes * vdt.count, vdt)
    return Reg(self.vval(u, vdt), vbits(vdt))

  def splat(self, s: UOp, vdt: DType) -> VReg:
    """Scalar s in every lane of a vector of vdt (a bool as its lane mask)."""
    if s.op is Ops.CONST: return self.vconst([s.arg] * vdt.count, vdt)
    if s in self.from_memory:
      d = self.new("x")
      self.ins("vbroadcastss" if s.dtype is dtypes.float32 else "vpbroadcastd", Reg(d, vbits(vdt)), self.address(s.src[0]))
      return d
    d, v = self.new("x"), self.val(s)
    if s.dtype.scalar() is dtypes.float32:
      self.ins("vbroadcastss", Reg(d, vbits(vdt)), Reg(v, 128))
      return d
    if s.dtype.scalar() is dtypes.bool:  # 0 or 1 -> 0 or all ones
      m = self.new("g")
      self.ins("mov", Reg(m, 64), Reg(v, 64))
      self.ins("neg", Reg(m, 64))
      v = m
    t = self.new("x")
    self.ins("vmovd", Reg(t, 128), Reg(v, 32))
    self.ins("vpbroadcastd", Reg(d, vbits(vdt)), Reg(t, 128))
    return d

  def vval(self, u: UOp, vdt: DType) -> VReg:
    """u as a vector of vdt's lanes: a scalar is splatted."""
    if u.dtype.count == 1: return self.splat(u, vdt.scalar().vec(vdt.count))
    return self.val(u)

  def shuffle(self, src: UOp, lanes: list[int], vdt: DType) -> VReg:
    """The lanes `lanes` of vector src, in order, as a vector of vdt."""
    s, d, m = self.val(src), self.new("x"), src.dtype.count
    if lanes == list(range(len(lanes))):
      self.ins("vmovaps", Reg(d, vbits(src.dtype)), Reg(s, vbits(src.dtype)))
    elif m == 8 and lanes == [4, 5, 6, 7]: self.ins("vextractf128", Reg(d, 128), Reg(s, 256), 1)
    elif m == 8:
      idx = self.vconst(lanes + [0] * (8 - len(lanes)), dtypes.int32.vec(8))
      self.ins("vpermps", Reg(d, 256), Reg(idx, 256), Reg(s, 256))
    else: self.ins("vpermilps", Reg(d, 128), Reg(s, 128), sum(x << 2 * j for j, x in enumerate(lanes)))
    return d

  def vectorize(self, x: UOp) -> None:
    srcs, n = x.src, x.dtype.count
    if x.dtype.scalar() not in LANE_DTYPES | {dtypes.bool}: raise self.fail(x, " (a vector of a type with no vector registers here)")
    if all(s.op is Ops.CONST for s in srcs): return self.set(x, self.vconst([s.arg for s in srcs], x.dtype))
    if all(s is srcs[0] for s in srcs): return self.set(x, self.splat(srcs[0], x.dtype))
    if all(s.op is Ops.GEP and len(s.arg) == 1 and s.src[0] is srcs[0].src[0] for s in srcs):
      return self.set(x, self.shuffle(srcs[0].src[0], [s.arg[0] for s in srcs], x.dtype))
    halves = [self.insert_lanes(srcs[:4]), *([self.insert_lanes(srcs[4:])] if n > 4 else [])]
    if n <= 4: return self.set(x, halves[0])
    d = self.new("x")
    self.ins("vinsertf128", Reg(d, 256), Reg(halves[0], 256), Reg(halves[1], 128), 1)
    return self.set(x, d)

  def insert_lanes(self, srcs: tuple[UOp, ...]) -> VReg:
    """An xmm register whose first lanes are the scalars srcs (floats from xmm registers, the others from general ones)."""
    d = self.new("x")
    for i, s in enumerate(srcs):
      if s.dtype.scalar() is dtypes.float32:
        if i == 0: self.ins("vmovaps", Reg(d, 128), Reg(self.val(s), 128))
        else: self.ins("vinsertps", Reg(d, 128), Reg(d, 128), Reg(self.val(s), 128), i << 4)
        continue
      g = self.val(s)
      if s.dtype.scalar() is dtypes.bool:
        m = self.new("g")
        self.ins("mov", Reg(m, 64), Reg(g, 64))
        self.ins("neg", Reg(m, 64))
        g = m
      if i == 0: self.ins("vmovd", Reg(d, 128), Reg(g, 32))
      else: self.ins("vpinsrd", Reg(d, 128), Reg(d, 128), Reg(g, 32), i)
    return d

  def gep(self, x: UOp) -> None:
    src = x.src[0]
    if src.dtype.scalar() not in LANE_DTYPES | {dtypes.bool}: raise self.fail(x, f" (a lane of a vector of {src.dtype})")
    if len(x.arg) > 1: return self.set(x, self.shuffle(src, list(x.arg), x.dtype))
    v, i = self.val(src), x.arg[0]
    if i >= 4:
      hi = self.new("x")
      self.ins("vextractf128", Reg(hi, 128), Reg(v, 256), 1)
      v, i = hi, i - 4
    dt = x.dtype.scalar()
    if dt is dtypes.float32:
      d = self.new("x")
      if i == 0: self.ins("vmovaps", Reg(d, 128), Reg(v, 128))
      else: self.ins("vpermilps", Reg(d, 128), Reg(v, 128), i)
      return self.set(x, d)
    g = self.new("g")
    self.ins("vpextrd", Reg(g, 32), Reg(v, 128), i)
    if dt is dtypes.int32: self.ins("movsxd", Reg(g, 64), Reg(g, 32))
    elif dt is dtypes.bool: self.ins("and", Reg(g, 32), 1)
    return self.set(x, g)

  # ** memory **

  def lane_bits(self, mask: UOp, n: int) -> VReg:
    """The lane mask of uint `mask`'s n low bits: lane i is on where bit i is set."""
    vdt = dtypes.int32.vec(n)
    bits, t, m = self.vconst([1 << i for i in range(n)], vdt), self.new("x"), self.new("x")
    self.ins("vpand", Reg(t, vbits(vdt)), Reg(self.splat(mask, vdt), vbits(vdt)), Reg(bits, vbits(vdt)))
    self.ins("vpcmpeqd", Reg(m, vbits(vdt)), Reg(t, vbits(vdt)), Reg(bits, vbits(vdt)))
    return m

  def lane_mask(self, gate: UOp | None, mask: UOp | None, n: int) -> VReg:
    """The lane mask of a masked load: lane i is on where bit i of the uint `mask` is set and the gate is open (the
    masks of computed gates and bits were made where those were computed: X86Writer.select)."""
    vdt = dtypes.int32.vec(n)
    m: VReg | None = None
    if mask is not None and mask.op is Ops.CONST: m = self.vconst([-((int(mask.arg) >> i) & 1) for i in range(n)], vdt)
    elif mask is not None: m = self.lane_masks[(mask, n)]
    if gate is None:
      assert m is not None
      return m
    g = self.lane_masks[(gate, n)]
    if m is None: return g
    d = self.new("x")
    self.ins("vpand", Reg(d, vbits(vdt)), Reg(m, vbits(vdt)), Reg(g, vbits(vdt)))
    return d

  def vmem(self, index: UOp, n: int) -> Mem:
    m = self.address(index)
    return m._replace(size=4 * n)

  def load_vector(self, x: UOp) -> None:
    n, bits = x.dtype.count, vbits(x.dtype)
    gate = next((s for s in x.src[1:] if s.dtype is dtypes.bool), None)
    mask = next((s for s in x.src[1:] if s.dtype is dtypes.uint), None)
    d, mem = self.new("x"), self.vmem(x.src[0], n)
    if gate is None and mask is None:
      if n == 2: self.ins("vmovsd", Reg(d, 128), mem)
      else: self.ins("vmovups", Reg(d, bits), mem)
      return self.set(x, d)
    # masked: a lane masked off is never read (a vector may overhang its buffer's end); 2 lanes are 4 with 2 off
    m = self.lane_mask(gate, mask, max(n, 4))
    self.ins("vmaskmovps", Reg(d, bits), Reg(m, bits), mem._replace(size=bits // 8))
    return self.set(x, d)

  def store_vector(self, st: UOp) -> None:
    index, val = st.src
    n, v = val.dtype.count, self.val(val)
    if n == 2: self.ins("vmovsd", self.vmem(index, n), Reg(v, 128))
    else: self.ins("vmovups", self.vmem(index, n), Reg(v, vbits(val.dtype)))

  # ** arithmetic **

  def vbinary(self, mn: str, x: UOp, a: UOp, b: UOp) -> VReg:
    vdt = x.dtype if x.dtype.scalar() is not dtypes.bool else dtypes.int32.vec(x.dtype.count)
    if mn in _COMMUTATIVE and const_lanes(a) is not None: a, b = b, a
    d, bits = self.new("x"), vbits(x.dtype)
    self.ins(mn, Reg(d, bits), Reg(self.vval(a, vdt), bits), self.operand(b, vdt))
    return d

  def vfloat_alu(self, x: UOp) -> None:
    mn = {Ops.ADD: "vaddps", Ops.SUB: "vsubps", Ops.MUL: "vmulps", Ops.FDIV: "vdivps", Ops.CDIV: "vdivps"}[x.op]
    return self.set(x, self.vbinary(mn, x, *x.src))

  def vfloat_unary(self, x: UOp) -> None:
    a, d, bits = self.val(x.src[0]), self.new("x"), vbits(x.dtype)
    if x.op is Ops.SQRT: self.ins("vsqrtps", Reg(d, bits), Reg(a, bits))
    elif x.op is Ops.TRUNC: self.ins("vroundps", Reg(d, bits), Reg(a, bits), 11)  # toward 0, no exceptions
    elif x.op is Ops.RECIPROCAL: self.ins("vdivps", Reg(d, bits), Reg(self.vconst([1.0] * x.dtype.count, x.dtype), bits), Reg(a, bits))
    else: self.ins("vxorps", Reg(d, bits), Reg(a, bits), Reg(self.vconst([-0.0] * x.dtype.count, x.dtype), bits))
    return self.set(x, d)

  def vfloat_max(self, x: UOp) -> None:
    """NaN if either lane is NaN, as the scalar max."""
    bits = vbits(x.dtype)
    a, b = (self.vval(s, x.dtype) for s in x.src)
    self.set(x, self.nan_max(a, b, bits))

  def nan_max(self, a: VReg, b: VReg, bits: int) -> VReg:
    t, m, d = self.new("x"), self.new("x"), self.new("x")
    self.ins("vmaxps", Reg(t, bits), Reg(b, bits), Reg(a, bits))  # b > a ? b : a (a where either is NaN)
    self.ins("vcmpps", Reg(m, bits), Reg(b, bits), Reg(b, bits), 3)  # b unordered
    self.ins("vblendvps", Reg(d, bits), Reg(t, bits), Reg(b, bits), Reg(m, bits))
    return d

  def vint_alu(self, x: UOp) -> None:
    op = x.op
    if x.dtype.scalar() is dtypes.bool and op in (Ops.ADD, Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND
    mn = {Ops.ADD: "vpaddd", Ops.SUB: "vpsubd", Ops.MUL: "vpmulld", Ops.AND: "vpand", Ops.OR: "vpor", Ops.XOR: "vpxor"}[op]
    return self.set(x, self.vbinary(mn, x, *x.src))

  def vint_neg(self, x: UOp) -> None:
    zero = UOp.const(x.dtype.scalar(), 0)
    return self.set(x, self.vbinary("vpsubd", x, zero, x.src[0]))

  def vint_max(self, x: UOp) -> None:
    return self.set(x, self.vbinary("vpmaxud" if x.dtype.scalar() is dtypes.uint32 else "vpmaxsd", x, *x.src))

  def vshift(self, x: UOp) -> None:
    a, b = x.src
    unsigned = x.dtype.scalar() is dtypes.uint32
    amount = b.src[0] if b.op is Ops.VECTORIZE and all(s is b.src[0] for s in b.src) else b
    if amount.op is Ops.CONST and 0 <= int(amount.arg) < 32:  # one amount for every lane: the immediate form
      d, bits = self.new("x"), vbits(x.dtype)
      mn = "vpslld" if x.op is Ops.SHL else "vpsrld" if unsigned else "vpsrad"
      self.ins(mn, Reg(d, bits), Reg(self.val(a), bits), int(amount.arg))
      return self.set(x, d)
    mn = "vpsllvd" if x.op is Ops.SHL else "vpsrlvd" if unsigned else "vpsravd"
    return self.set(x, self.vbinary(mn, x, a, b))

  def vcmp(self, x: UOp) -> None:
    a, b = x.src
    vdt = a.dtype if a.dtype.count > 1 else b.dtype
    sdt, bits, d = vdt.scalar(), vbits(vdt), self.new("x")
    va, vb = self.vval(a, vdt), self.vval(b, vdt)
    if sdt is dtypes.float32:
      self.ins("vcmpps", Reg(d, bits), Reg(va, bits), Reg(vb, bits), _FCMP[x.op])
      return self.set(x, d)
    if x.op is Ops.CMPLT and sdt is dtypes.bool: self.ins("vpandn", Reg(d, bits), Reg(va, bits), Reg(vb, bits))  # !a & b
    elif x.op is Ops.CMPLT:
      if sdt is dtypes.uint32:  # unsigned order is signed order with the top bits flipped
        bias = self.vconst([0x80000000] * vdt.count, vdt)
        fa, fb = self.new("x"), self.new("x")
        self.ins("vpxor", Reg(fa, bits), Reg(va, bits), Reg(bias, bits))
        self.ins("vpxor", Reg(fb, bits), Reg(vb, bits), Reg(bias, bits))
        va, vb = fa, fb
      self.ins("vpcmpgtd", Reg(d, bits), Reg(vb, bits), Reg(va, bits))
    else:
      self.ins("vpcmpeqd", Reg(d, bits), Reg(va, bits), Reg(vb, bits))
      if x.op is Ops.CMPNE:
        ne = self.new("x")
        self.ins("vpxor", Reg(ne, bits), Reg(d, bits), Reg(self.vconst([-1] * vdt.count, dtypes.int32.vec(vdt.count)), bits))
        d = ne
    return self.set(x, d)

  def vwhere(self, x: UOp) -> None:
    c, t, f = x.src
    bits, d = vbits(x.dtype), self.new("x")
    m = self.vval(c, dtypes.bool.vec(x.dtype.count))
    self.ins("vblendvps", Reg(d, bits), Reg(self.vval(f, x.dtype), bits), Reg(self.vval(t, x.dtype), bits), Reg(m, bits))
    return self.set(x, d)

  def vcast(self, x: UOp) -> None:
    src, dt, n = x.src[0].dtype.scalar(), x.dtype.scalar(), x.dtype.count
    a, bits = self.val(x.src[0]), vbits(x.dtype)
    # the same bits: the same register (a vector register is only ever written where it is made, or an accumulator's)
    if x.op is Ops.BITCAST or src is dt or {src, dt} == {dtypes.int32, dtypes.uint32}: return self.set(x, a)
    d = self.new("x")
    if src is dtypes.bool:  # a lane mask to 0 or 1 (its bits anded with the 1's)
      one = self.vconst([1] * n, x.dtype)
      self.ins("vpand", Reg(d, bits), Reg(a, bits), Reg(one, bits))
    elif dt is dtypes.bool: return self.set(x, self.nonzero(x.src[0]))
    elif src is dtypes.int32: self.ins("vcvtdq2ps", Reg(d, bits), Reg(a, bits))
    elif src is dtypes.uint32: d = self.float_of_uint32(a, n)
    elif dt is dtypes.int32: self.ins("vcvttps2dq", Reg(d, bits), Reg(a, bits))
    else: d = self.uint32_of_float(a, n)
    return self.set(x, d)

  def moved(self, a: VReg, bits: int) -> VReg:
    d = self.new("x")
    self.ins("vmovaps", Reg(d, bits), Reg(a, bits))
    return d

  def nonzero(self, u: UOp) -> VReg:
    """The lane mask of u != 0 (a float NaN is nonzero, as C's)."""
    vdt, bits, d = u.dtype, vbits(u.dtype), self.new("x")
    zero = self.vconst([0] * vdt.count, vdt)
    if vdt.scalar() is dtypes.float32:
      self.ins("vcmpps", Reg(d, bits), Reg(self.val(u), bits), Reg(zero, bits), _FCMP[Ops.CMPNE])
      return d
    eq = self.new("x")
    self.ins("vpcmpeqd", Reg(eq, bits), Reg(self.val(u), bits), Reg(zero, bits))
    self.ins("vpxor", Reg(d, bits), Reg(eq, bits), Reg(self.vconst([-1] * vdt.count, vdt), bits))
    return d

  def float_of_uint32(self, a: VReg, n: int) -> VReg:
    """Each lane's high and low 16 bits converted apart (exactly) and added: one rounding, as a scalar conversion."""
    bits, vf = 128 if n <= 4 else 256, dtypes.float32.vec(n)
    hi, lo, fh, fl, d = (self.new("x") for _ in range(5))
    self.ins("vpsrld", Reg(hi, bits), Reg(a, bits), 16)
    self.ins("vpand", Reg(lo, bits), Reg(a, bits), Reg(self.vconst([0xFFFF] * n, dtypes.int32.vec(n)), bits))
    self.ins("vcvtdq2ps", Reg(fh, bits), Reg(hi, bits))
    self.ins("vcvtdq2ps", Reg(fl, bits), Reg(lo, bits))
    self.ins("vmulps", Reg(fh, bits), Reg(fh, bits), Reg(self.vconst([65536.0] * n, vf), bits))
    self.ins("vaddps", Reg(d, bits), Reg(fh, bits), Reg(fl, bits))
    return d

  def uint32_of_float(self, a: VReg, n: int) -> VReg:
    """Lanes from 2^31 up are converted less 2^31 with the top bit set again; the others as signed."""
    bits, vf = 128 if n <= 4 else 256, dtypes.float32.vec(n)
    big = self.vconst([2.0 ** 31] * n, vf)
    low, less, high, flip, ge, d = (self.new("x") for _ in range(6))
    self.ins("vcvttps2dq", Reg(low, bits), Reg(a, bits))
    self.ins("vsubps", Reg(less, bits), Reg(a, bits), Reg(big, bits))
    self.ins("vcvttps2dq", Reg(high, bits), Reg(less, bits))
    self.ins("vpxor", Reg(flip, bits), Reg(high, bits), Reg(self.vconst([0x80000000] * n, dtypes.uint32.vec(n)), bits))
    self.ins("vcmpps", Reg(ge, bits), Reg(a, bits), Reg(big, bits), 13)  # a >= 2^31
    self.ins("vblendvps", Reg(d, bits), Reg(low, bits), Reg(flip, bits), Reg(ge, bits))
    return d

  # ** reduces **

  def vterm(self, acc: UOp, term: UOp) -> None:
    """acc = acc op term on vectors (a product only added in: a fused multiply-add where the CPU has it)."""
    a, bits = self.acc[acc], vbits(acc.dtype)
    if term not in self.fused: return self.vstep(acc, a, self.vval(term, acc.dtype))
    for s in term.src: self.demand(s)
    x, y = (self.vval(s, acc.dtype) for s in term.src)
    if self.ren.fma: return self.ins("vfmadd231ps", Reg(a, bits), Reg(x, bits), Reg(y, bits))
    p = self.new("x")
    self.ins("vmulps", Reg(p, bits), Reg(x, bits), Reg(y, bits))
    self.vstep(acc, a, p)

  def vacc_init(self, acc: UOp) -> VReg:
    init = self.vconst([identity_element(acc.arg[0], acc.dtype.scalar())] * acc.dtype.count, acc.dtype)
    return self.moved(init, vbits(acc.dtype))

  def vstep(self, acc: UOp, a: VReg, t: VReg) -> None:
    """a = a op t on vectors, in place."""
    op, dt, bits = acc.arg[0], acc.dtype.scalar(), vbits(acc.dtype)
    if dt is dtypes.float32 and op is Ops.MAX: return self.ins("vmovaps", Reg(a, bits), Reg(self.nan_max(a, t, bits), bits))
    if dt is dtypes.bool: op = Ops.OR if op in (Ops.ADD, Ops.MAX) else Ops.AND
    if dt is dtypes.float32: mn = {Ops.ADD: "vaddps", Ops.MUL: "vmulps"}[op]
    else: mn = {Ops.ADD: "vpaddd", Ops.MUL: "vpmulld", Ops.OR: "vpor", Ops.AND: "vpand",
                Ops.MAX: "vpmaxud" if dt is dtypes.uint32 else "vpmaxsd"}[op]
    self.ins(mn, Reg(a, bits), Reg(a, bits), Reg(t, bits))


def _rule(fn_name: str):
  return lambda ctx, x: getattr(ctx, fn_name)(x)  # None: the rule emits instructions, it replaces no node


VECTOR_RULES = [
  (UPat(Ops.VECTORIZE, name="x"), _rule("vectorize")),
  (UPat(Ops.GEP, name="x"), _rule("gep")),
  (UPat(Ops.LOAD, dtype=(*_VF, *_VI), name="x"), _rule("load_vector")),
  (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.CDIV), dtype=_VF, name="x"), _rule("vfloat_alu")),
  (UPat((Ops.SQRT, Ops.TRUNC, Ops.RECIPROCAL, Ops.NEG), dtype=_VF, name="x"), _rule("vfloat_unary")),
  (UPat(Ops.MAX, dtype=_VF, name="x"), _rule("vfloat_max")),
  (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR), dtype=(*_VI, *_VB), name="x"), _rule("vint_alu")),
  (UPat(Ops.NEG, dtype=_VI, name="x"), _rule("vint_neg")),
  (UPat(Ops.MAX, dtype=_VI, name="x"), _rule("vint_max")),
  (UPat((Ops.SHL, Ops.SHR), dtype=_VI, name="x"), _rule("vshift")),
  (UPat(GroupOp.Comparison, dtype=_VB, name="x"), _rule("vcmp")),
  (UPat(Ops.WHERE, dtype=(*_VF, *_VI), name="x"), _rule("vwhere")),
  (UPat((Ops.CAST, Ops.BITCAST), dtype=(*_VF, *_VI, *_VB), src=(UPat(dtype=(*_VF, *_VI, *_VB)),), name="x"), _rule("vcast")),
]
