"""Conversions for DEV=CPU:X86's scalar code: casts and bitcasts between integers (in general registers) and floats
(in xmm registers), the rounding of half and bfloat16 (computed in float), doubles rounded to odd on their way to
half, and uint64 conversions without AVX-512's unsigned instructions.

X86Conversions is a part of X86Writer (renderer/isa/x86.py): it uses the writer's instructions, registers and values."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tinyhybrid.codegen.late.regalloc import Reg, VReg
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop.ops import UOp

FLOATS = frozenset((dtypes.half, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.weakfloat))
INTS = frozenset((*dtypes.ints, dtypes.weakint, dtypes.bool))
_WIDE = (dtypes.float64, dtypes.weakfloat)  # computed in double; the other floats in float


def _unsigned(dt: DType) -> bool: return dtypes.is_unsigned(dt) or dt is dtypes.bool


class X86Conversions:
  if TYPE_CHECKING:
    from tinyhybrid.renderer.isa.x86 import X86Renderer
    ren: X86Renderer
    def new(self, cls: str) -> VReg: ...
    def ins(self, mn: str, *ops) -> None: ...
    def val(self, u: UOp) -> VReg: ...
    def set(self, u: UOp, d: VReg) -> None: ...
    def flag(self, cc: str) -> VReg: ...
    def normalize(self, d: VReg, dt: DType) -> None: ...
    def sfx(self, dt: DType) -> str: ...
    def const(self, value, dt: DType) -> VReg: ...
    @staticmethod
    def cls(dt: DType) -> str: ...

  def rounded(self, d: VReg, dt: DType) -> VReg:
    """d (a float) rounded to dt where dt is computed in float: half through F16C, bfloat16 to nearest even."""
    if dt.scalar() is dtypes.half:
      h, out = self.new("x"), self.new("x")
      self.ins("vcvtps2ph", Reg(h, 128), Reg(d, 128), 0)
      self.ins("vcvtph2ps", Reg(out, 128), Reg(h, 128))
      return out
    if dt.scalar() is not dtypes.bfloat16: return d
    u, t, n, m, out = self.new("g"), self.new("g"), self.new("g"), self.new("g"), self.new("x")
    self.ins("vmovd", Reg(u, 32), Reg(d, 128))
    self.ins("mov", Reg(t, 32), Reg(u, 32))
    self.ins("shr", Reg(t, 32), 16)
    self.ins("and", Reg(t, 32), 1)
    self.ins("add", Reg(t, 32), 0x7FFF)
    self.ins("add", Reg(t, 32), Reg(u, 32))
    self.ins("mov", Reg(n, 32), Reg(u, 32))
    self.ins("or", Reg(n, 32), 0x400000)  # a NaN stays a NaN
    self.ins("mov", Reg(m, 32), Reg(u, 32))
    self.ins("and", Reg(m, 32), 0x7FFFFFFF)
    self.ins("cmp", Reg(m, 32), 0x7F800000)  # (the flags it sets are read by the next instruction)
    self.ins("cmova", Reg(t, 32), Reg(n, 32))
    self.ins("and", Reg(t, 32), -0x10000)
    self.ins("vmovd", Reg(out, 128), Reg(t, 32))
    return out

  def odd_float(self, a: VReg) -> VReg:
    """A double as float rounded to odd, so that the rounding on to half is the only one that counts (the C renderer's
    th_d2f_odd): inexact results have their lowest bit set, moved toward zero first where rounding went away from it."""
    f, back, d = self.new("x"), self.new("x"), self.new("x")
    self.ins("vcvtsd2ss", Reg(f, 128), Reg(a, 128), Reg(a, 128))
    self.ins("vcvtss2sd", Reg(back, 128), Reg(f, 128), Reg(f, 128))
    gb, ga, mask, u, odd = (self.new("g") for _ in range(5))
    self.ins("vmovq", Reg(gb, 64), Reg(back, 128))
    self.ins("vmovq", Reg(ga, 64), Reg(a, 128))
    self.ins("mov", Reg(mask, 64), 2 ** 63 - 1)
    self.ins("and", Reg(gb, 64), Reg(mask, 64))
    self.ins("and", Reg(ga, 64), Reg(mask, 64))
    self.ins("cmp", Reg(gb, 64), Reg(ga, 64))
    over = self.flag("a")  # |float| > |double|: rounded away from zero
    self.ins("vmovd", Reg(u, 32), Reg(f, 128))
    self.ins("mov", Reg(odd, 32), Reg(u, 32))
    self.ins("sub", Reg(odd, 32), Reg(over, 32))
    self.ins("or", Reg(odd, 32), 1)
    self.ins("vucomisd", Reg(back, 128), Reg(a, 128))
    self.ins("cmovne", Reg(u, 32), Reg(odd, 32))  # inexact (a NaN compares unordered: ZF set, kept)
    self.ins("vmovd", Reg(d, 128), Reg(u, 32))
    return d

  def float_of_uint64(self, a: VReg, dt: DType) -> VReg:
    """A uint64 as a float of dt (computed in float below double) without AVX-512's unsigned conversion: a value with its top bit set
    is halved, its lost bit kept as a sticky bit so that the one rounding stays correct, converted as signed and
    doubled back (exactly, by a multiply with 2.0 where other values get 1.0)."""
    half, low, t, one, two = (self.new("g") for _ in range(5))
    self.ins("mov", Reg(half, 64), Reg(a, 64))
    self.ins("shr", Reg(half, 64), 1)
    self.ins("mov", Reg(low, 64), Reg(a, 64))
    self.ins("and", Reg(low, 64), 1)
    self.ins("or", Reg(half, 64), Reg(low, 64))
    self.ins("mov", Reg(t, 64), Reg(a, 64))
    self.ins("test", Reg(a, 64), Reg(a, 64))
    self.ins("cmovs", Reg(t, 64), Reg(half, 64))
    d, scale, s = self.new("x"), self.new("x"), self.sfx(dt)
    wide = s == "sd"
    self.ins("vxorps", Reg(d, 128), Reg(d, 128), Reg(d, 128))
    self.ins(f"vcvtsi2{s}", Reg(d, 128), Reg(d, 128), Reg(t, 64))
    bits = (0x3FF0000000000000, 0x4000000000000000) if wide else (0x3F800000, 0x40000000)  # 1.0 and 2.0
    self.ins("mov", Reg(one, 64), bits[0])
    self.ins("mov", Reg(two, 64), bits[1])
    self.ins("test", Reg(a, 64), Reg(a, 64))
    self.ins("cmovs", Reg(one, 64), Reg(two, 64))
    self.ins("vmovq" if wide else "vmovd", Reg(scale, 128), Reg(one, 64 if wide else 32))
    self.ins(f"vmul{s}", Reg(d, 128), Reg(d, 128), Reg(scale, 128))
    return d

  def uint64_of_float(self, a: VReg, src: DType) -> VReg:
    """A float as a uint64 without AVX-512's unsigned conversion: from 2^63 up, the signed conversion of a - 2^63
    with the top bit set again (below 0 and past 2^64 it is undefined, as in C)."""
    s = self.sfx(src)
    big, less = self.const(2.0 ** 63, dtypes.double if s == "sd" else dtypes.float), self.new("x")
    self.ins(f"vsub{s}", Reg(less, 128), Reg(a, 128), Reg(big, 128))
    d, high, top = self.new("g"), self.new("g"), self.new("g")
    self.ins(f"vcvtt{s}2si", Reg(d, 64), Reg(a, 128))
    self.ins(f"vcvtt{s}2si", Reg(high, 64), Reg(less, 128))
    self.ins("mov", Reg(top, 64), 1 << 63)
    self.ins("xor", Reg(high, 64), Reg(top, 64))
    self.ins(f"vucomi{s}", Reg(a, 128), Reg(big, 128))
    self.ins("cmovae", Reg(d, 64), Reg(high, 64))
    return d

  def cast_value(self, x: UOp) -> None:
    src, dt = x.src[0].dtype.scalar(), x.dtype.scalar()
    a = self.val(x.src[0])
    sx, dx = self.cls(src) == "x", self.cls(dt) == "x"
    if dt is dtypes.bool:
      if not sx:
        self.ins("test", Reg(a, 64), Reg(a, 64))
        return self.set(x, self.flag("ne"))
      z = self.const(0.0, src)
      self.ins(f"vucomi{self.sfx(src)}", Reg(a, 128), Reg(z, 128))
      d, p = self.flag("ne"), self.flag("p")  # a NaN is true
      self.ins("or", Reg(d, 32), Reg(p, 32))
      return self.set(x, d)
    if sx and dx:
      if (src in _WIDE) == (dt in _WIDE): d = a
      elif dt is dtypes.half: d = self.odd_float(a)
      else:
        d = self.new("x")
        self.ins("vcvtss2sd" if dt in _WIDE else "vcvtsd2ss", Reg(d, 128), Reg(a, 128), Reg(a, 128))
      return self.set(x, d if src is dt else self.rounded(d, dt))
    if dx:  # an integer to a float
      if src is dtypes.uint64 and not self.ren.avx512: return self.set(x, self.rounded(self.float_of_uint64(a, dt), dt))
      d = self.new("x")
      mn = ("vcvtusi2sd" if dt in _WIDE else "vcvtusi2ss") if src is dtypes.uint64 else ("vcvtsi2sd" if dt in _WIDE else "vcvtsi2ss")
      self.ins("vxorps", Reg(d, 128), Reg(d, 128), Reg(d, 128))
      self.ins(mn, Reg(d, 128), Reg(d, 128), Reg(a, 64))
      return self.set(x, self.rounded(d, dt))
    if sx:  # a float to an integer (out of range is undefined, as in C)
      if dt is dtypes.uint64 and not self.ren.avx512: return self.set(x, self.uint64_of_float(a, src))
      d = self.new("g")
      wide = src in _WIDE
      mn = ("vcvttsd2usi" if wide else "vcvttss2usi") if dt is dtypes.uint64 else ("vcvttsd2si" if wide else "vcvttss2si")
      self.ins(mn, Reg(d, 64), Reg(a, 128))
      self.normalize(d, dt)
      return self.set(x, d)
    d = self.new("g")  # between integers: dt's value of the source's 64 bits
    self.ins("mov", Reg(d, 64), Reg(a, 64))
    self.normalize(d, dt)
    return self.set(x, d)

  def bitcast_value(self, x: UOp) -> None:
    src, dt = x.src[0].dtype.scalar(), x.dtype.scalar()
    a = self.val(x.src[0])
    if self.cls(src) == "g" and self.cls(dt) == "g":
      d = self.new("g")
      self.ins("mov", Reg(d, 64), Reg(a, 64))
      self.normalize(d, dt)
      return self.set(x, d)
    if self.cls(src) == "x":  # the float's bits
      g = self.new("g")
      if src is dtypes.half:
        h = self.new("x")
        self.ins("vcvtps2ph", Reg(h, 128), Reg(a, 128), 0)
        self.ins("vmovd", Reg(g, 32), Reg(h, 128))
      else: self.ins("vmovq" if src in _WIDE else "vmovd", Reg(g, 64 if src in _WIDE else 32), Reg(a, 128))
      if src is dtypes.bfloat16: self.ins("shr", Reg(g, 32), 16)
      if self.cls(dt) == "g":
        self.normalize(g, dt)
        return self.set(x, g)
      return self.set(x, self.float_of_bits(g, dt))
    return self.set(x, self.float_of_bits(a, dt))

  def float_of_bits(self, g: VReg, dt: DType) -> VReg:
    """The float of dt whose bits (its storage's: 16 for half and bfloat16) are in general register g."""
    d = self.new("x")
    if dt is dtypes.half:
      t = self.new("g")
      self.ins("movzx", Reg(t, 32), Reg(g, 16))
      self.ins("vmovd", Reg(d, 128), Reg(t, 32))
      self.ins("vcvtph2ps", Reg(d, 128), Reg(d, 128))
    elif dt is dtypes.bfloat16:
      t = self.new("g")
      self.ins("movzx", Reg(t, 32), Reg(g, 16))
      self.ins("shl", Reg(t, 32), 16)
      self.ins("vmovd", Reg(d, 128), Reg(t, 32))
    else: self.ins("vmovq" if dt in _WIDE else "vmovd", Reg(d, 128), Reg(g, 64 if dt in _WIDE else 32))
    return d
