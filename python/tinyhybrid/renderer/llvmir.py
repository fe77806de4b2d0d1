"""LLVM IR for the CPU device (DEV=CPU:LLVM), compiled in this process by llvmlite (runtime/llvm.py): no compiler
process and no C compiler on the machine. The nodes are placed as for the C-family languages (CStyleWriter.write: each
at the depth of the innermost loop it uses, a reduce after its loops); each becomes SSA instructions, vectors are
LLVM's own (<16 x float>), and loop counters and accumulators live in stack slots that LLVM's optimizer turns into
registers.

The kernel ABI is the C renderer's (renderer/cstyle.py): `void name(ptr args, i32 core_id, i32 num_cores)`, args
holding the buffer addresses, then the variables' values, then (for a kernel whose IR has the STATE_MARK comment) the
address of its per-device state. It calls the kernel's body, an internal function whose buffer pointers are `noalias`
(C's restrict). Numerics follow the C renderer's: bfloat16 is computed in float and rounded after every operation,
half is LLVM's half, the transcendental functions are libm's, an integer division by 0 gives 0 and the one signed
quotient that overflows wraps."""
from __future__ import annotations

import math
import struct
from typing import Callable

import numpy as np

from tinyhybrid.codegen.expand import csize
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes, float_to_bf16
from tinyhybrid.renderer import Renderer
from tinyhybrid.renderer.cstyle import CHUNKS, FP8_FN, FP8_FNUZ, FP8_FORMATS, FP8_IEEE, STATE_MARK, CStyleWriter, last_level_cache, var_name
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element

# dtype name -> the LLVM type its values are computed in (bfloat16 in float, as the C renderer)
_SCALAR = {"bool": "i1", "signed char": "i8", "unsigned char": "i8", "short": "i16", "unsigned short": "i16",
           "int": "i32", "unsigned int": "i32", "long": "i64", "unsigned long": "i64", "weakint": "i64", "half": "half",
           "__bf16": "float", "float8_e4m3": "float", "float8_e5m2": "float", "float8_e4m3fnuz": "float", "float8_e5m2fnuz": "float", "float": "float", "double": "double",
           "weakfloat": "double"}
# where memory holds a value otherwise than it is computed in (bfloat16 and the OCP fp8s are computed in float)
_MEMORY = {"bool": "i8", "__bf16": "i16", "float8_e4m3": "i8", "float8_e5m2": "i8", "float8_e4m3fnuz": "i8", "float8_e5m2fnuz": "i8"}
_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "half": 16, "float": 32, "double": 64}
_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
_BITWISE = {Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}
# the kernel's functions' attributes. A kernel that calls libm (scalar exp2f, sinf, ...) between vector operations
# keeps to the vector width the CPU prefers ("min-legal-vector-width"="0", as clang marks a C function): on an AVX-512
# CPU that prefers 256 bits, a 512-bit value live across the calls costs a vzeroupper and a rebuild at each; any other
# kernel computes in the widest vectors the CPU has.
_LIBM = {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW}


def _attributes(calls_libm: bool) -> list[str]:
  width = ' "min-legal-vector-width"="0"' if calls_libm else ""
  return [f"attributes #0 = {{ nounwind{width} }}", f"attributes #1 = {{ alwaysinline nounwind{width} }}"]


def _is_vec(t: str) -> bool: return t[0] == "<"
def _elem(t: str) -> str: return t[t.index("x ") + 2:-1] if _is_vec(t) else t
def _lanes(t: str) -> int: return int(t[1:t.index(" ")]) if _is_vec(t) else 1
def _like(t: str, elem: str) -> str: return f"<{_lanes(t)} x {elem}>" if _is_vec(t) else elem


def mangle(t: str) -> str:
  """An intrinsic's name suffix for type t: float -> f32, <8 x float> -> v8f32, i32 -> i32."""
  e = _elem(t)
  s = {"half": "f16", "float": "f32", "double": "f64"}.get(e, e)
  return f"v{_lanes(t)}{s}" if _is_vec(t) else s


def scalar_literal(v, dt: DType, t: str) -> str:
  """A constant of LLVM scalar type t holding v (dt's value)."""
  if t == "i1": return "true" if v else "false"
  if t in ("half", "float", "double"):
    with np.errstate(over="ignore"):  # past the type's largest finite: its infinity
      if t == "half": return f"0xH{int(np.array(float(v), np.float16).view(np.uint16)):04X}"  # half: its own bits
      # a float constant is written as the double of the same value, exactly
      v = float(np.float32(v)) if t == "float" else float(v)
    if dt is dtypes.bfloat16: v = float_to_bf16(v)  # as every value of it
    bits = struct.unpack("<Q", struct.pack("<d", v))[0]
    if t == "float" and math.isnan(v): bits = 0x7FF8000000000000 | (bits & (1 << 63))  # a float's NaN, as a double
    return f"0x{bits:016X}"
  n = _BITS[t]
  iv = int(v) & ((1 << n) - 1)
  return str(iv - (1 << n) if iv >= 1 << (n - 1) else iv)


class LLVMWriter(CStyleWriter):
  def __init__(self, k: LoweredKernel, stream_bytes: int):
    super().__init__(k)
    self.streaming = self.stores_more_than(stream_bytes)
    self.slots: list[str] = []           # stack slots (allocas), declared in the entry block
    self.decls: dict[str, str] = {}      # intrinsics and library functions used, by name
    self.ntmp = self.nlabel = 0
    self.loop_state: dict[UOp, tuple] = {}
    self.inner_slots: dict[UOp, str] = {}  # each inner sum's accumulator slot
    self.nontemporal = False

  # ** values, instructions, blocks **

  def t(self, dt: DType) -> str:
    """The LLVM type values of dt are computed in."""
    try: s = _SCALAR[dt.scalar().name]
    except KeyError: raise NotImplementedError(f"kernel {self.k.name}: the LLVM renderer has no type for {dt}") from None
    return f"<{dt.count} x {s}>" if dt.count > 1 else s

  def mem_t(self, dt: DType) -> str:
    """The LLVM type memory holds values of dt in."""
    s = _MEMORY.get(dt.scalar().name) or self.t(dt.scalar())
    return f"<{dt.count} x {s}>" if dt.count > 1 else s

  def tmp(self) -> str:
    self.ntmp += 1
    return f"%t{self.ntmp}"

  def op(self, rhs: str) -> str:
    """A new value computed by the instruction rhs."""
    d = self.tmp()
    self.emit(f"{d} = {rhs}")
    return d

  def label(self, what: str) -> str:
    self.nlabel += 1
    return f"{what}{self.nlabel}"

  def block(self, name: str) -> None: self.lines.append(f"{name}:")

  def declare(self, name: str, ret: str, args: str) -> str:
    self.decls.setdefault(name, f"declare {ret} @{name}({args})")
    return f"@{name}"

  def intrinsic(self, fn: str, t: str, args: list[str], ret: str | None = None) -> str:
    """A call of llvm.<fn>.<type> on args of type t."""
    ret = ret or t
    name = self.declare(f"llvm.{fn}.{mangle(t)}", ret, ", ".join([t] * len(args)))
    return self.op(f"call {ret} {name}({', '.join(f'{t} {a}' for a in args)})")

  def slot(self, t: str, nm: str) -> str:
    self.slots.append(f"  %{nm} = alloca {t}")
    return f"%{nm}"

  def const(self, v, dt: DType, t: str) -> str:
    """A constant of type t (a vector type: every lane) holding v."""
    lit = scalar_literal(v, dt.scalar(), _elem(t))
    if not _is_vec(t): return lit
    return "zeroinitializer" if lit in ("0", "false", "0x0000000000000000") else f"splat ({_elem(t)} {lit})"

  def splat(self, x: str, t: str) -> str:
    """The scalar value x (of t's element type) in every lane of vector type t."""
    e = _elem(t)
    one = self.op(f"insertelement <1 x {e}> poison, {e} {x}, i32 0")
    return self.op(f"shufflevector <1 x {e}> {one}, <1 x {e}> poison, <{_lanes(t)} x i32> zeroinitializer")

  def val(self, x: UOp, lanes: int = 1) -> str:
    """x's value, with `lanes` lanes: a scalar is broadcast into a vector operation's lanes."""
    v = self.names[x]
    if lanes == 1 or x.dtype.count == lanes: return v
    t = f"<{lanes} x {self.t(x.dtype)}>"
    return self.const(x.arg, x.dtype, t) if x.op is Ops.CONST else self.splat(v, t)

  # ** the frame **

  def params(self) -> None:
    k = self.k
    self.args: list[str] = []
    for i, b in enumerate(k.buffers):
      self.names[UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)] = f"%data{i}"
      self.args.append(f"ptr noalias %data{i}")
    for v in k.vars:
      self.names[v] = f"%{var_name(v)}"
      self.args.append(f"{self.t(v.dtype)} %{var_name(v)}")
    self.body_start = len(self.lines)
    if not any(r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE) for r in self.loops + self.rloops):
      go = self.label("core0_")
      self.emit(f"br i1 {self.op('icmp eq i32 %core_id, 0')}, label %{go}, label %exit")
      self.block(go)

  def loop(self, nm: str, t: str, lo: str, hi: str) -> tuple[str, tuple]:
    """Opens a loop of counter nm (type t) from lo while below hi: the counter's value and what closes it."""
    slot = self.slot(t, f"{nm}.slot")
    self.emit(f"store {t} {lo}, ptr {slot}")
    head, body, done = self.label(f"{nm}_head"), self.label(f"{nm}_body"), self.label(f"{nm}_done")
    self.emit(f"br label %{head}")
    self.block(head)
    i = self.op(f"load {t}, ptr {slot}")
    self.emit(f"br i1 {self.op(f'icmp slt {t} {i}, {hi}')}, label %{body}, label %{done}")
    self.block(body)
    self.depth += 1
    return i, (slot, t, i, head, done)

  def close(self, state: tuple) -> None:
    slot, t, i, head, done = state
    self.depth -= 1
    self.emit(f"store {t} {self.op(f'add {t} {i}, 1')}, ptr {slot}")
    self.emit(f"br label %{head}")
    self.block(done)

  def is_last(self, before: str) -> str:
    """Whether the core whose atomic increment saw `before` is the last of num_cores."""
    return self.op(f"icmp eq i32 {self.op(f'add i32 {before}, 1')}, %num_cores")

  def either(self, a: str, b: str, t: str) -> str: return self.op(f"or {_like(t, 'i1')} {a}, {b}")

  def part_of(self, core: str) -> str:
    """The address of core's (an i32) partial results in the state."""
    wide = self.op(f"zext i32 {core} to i64")
    return self.op(f"getelementptr i8, ptr %th_part, i64 {self.op(f'mul i64 {wide}, {self.part_stride}')}")

  def counter_range(self, end: str, t: str, part: str, parts: str) -> tuple[str, str]:
    """[end * part / parts, end * (part + 1) / parts), in t (part and parts are i64)."""
    e = end if t == "i64" else self.op(f"sext {t} {end} to i64")
    lo = self.op(f"sdiv i64 {self.op(f'mul i64 {e}, {part}')}, {parts}")
    nxt = self.op(f"add i64 {part}, 1")
    hi = self.op(f"sdiv i64 {self.op(f'mul i64 {e}, {nxt}')}, {parts}")
    if t == "i64": return lo, hi
    return self.op(f"trunc i64 {lo} to {t}"), self.op(f"trunc i64 {hi} to {t}")

  def open_loop(self, r: UOp, nm: str) -> None:
    t, end = self.t(r.dtype), self.names[r.src[0]]
    if r.arg[1] is AxisType.THREAD and r is self.loops[0]:
      # the outermost loop in chunks, a chunk to whichever core asks first (see CWriter.open_loop)
      self.stateful = True
      nch = min(r.src[0].arg, CHUNKS) if r.src[0].op is Ops.CONST else CHUNKS
      c, outer = self.loop(f"{nm}_chunk", "i64", self.op("atomicrmw add ptr %th_next, i64 1 monotonic"), str(nch))
      lo, hi = self.counter_range(end, t, c, str(nch))
      i, inner = self.loop(nm, t, lo, hi)
      self.loop_state[r] = (outer, inner)
    elif r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE):
      lo, hi = self.counter_range(end, t, self.op("zext i32 %core_id to i64"), self.op("zext i32 %num_cores to i64"))
      i, inner = self.loop(nm, t, lo, hi)
      self.loop_state[r] = (None, inner)
    else:
      i, inner = self.loop(nm, t, self.const(0, r.dtype, t), end)
      self.loop_state[r] = (None, inner)
    self.names[r] = i

  def end_loop(self, r: UOp) -> None:
    outer, inner = self.loop_state[r]
    self.close(inner)
    if outer is None: return
    # the chunk loop asks for the next chunk: its counter's slot is stored by the next fetch, not by an increment
    slot, _, _, head, done = outer
    self.depth -= 1
    self.emit(f"store i64 {self.op('atomicrmw add ptr %th_next, i64 1 monotonic')}, ptr {slot}")
    self.emit(f"br label %{head}")
    self.block(done)
    # the last core out resets the counters for the next launch
    last, go = self.op("atomicrmw add ptr %th_left, i32 1 acq_rel"), self.label("reset")
    after = self.label("counted")
    self.emit(f"br i1 {self.is_last(last)}, label %{go}, label %{after}")
    self.block(go)
    self.emit("store atomic i64 0, ptr %th_next monotonic, align 8")
    self.emit("store atomic i32 0, ptr %th_left monotonic, align 4")
    self.emit(f"br label %{after}")
    self.block(after)

  # ** nodes **

  def name(self, u: UOp) -> None:
    if u in self.names: return
    if u in self.inner: return self.inner_section(u)
    op, dt = u.op, u.dtype
    if op is Ops.CONST:
      self.names[u] = self.const(u.arg, dt, self.t(dt))
      return
    t = self.t(dt)
    if op is Ops.VECTORIZE:
      if all(s.op is Ops.CONST for s in u.src):
        e = _elem(t)
        self.names[u] = "<" + ", ".join(f"{e} {self.names[s]}" for s in u.src) + ">"
        return
      if all(s is u.src[0] for s in u.src):
        self.names[u] = self.splat(self.names[u.src[0]], t)
        return
      v = "poison"
      for i, s in enumerate(u.src): v = self.op(f"insertelement {t} {v}, {_elem(t)} {self.names[s]}, i32 {i}")
      self.names[u] = v
      return
    if op is Ops.GEP:
      self.names[u] = self.op(f"extractelement {self.t(u.src[0].dtype)} {self.names[u.src[0]]}, i32 {u.arg[0]}")
      return
    if op is Ops.LOAD:
      self.names[u] = self.load(u)
      return
    v = self.alu(u, t)
    if op in GroupOp.ALU and op not in (*GroupOp.Comparison, Ops.WHERE, Ops.MAX): v = self.rounded(v, dt.scalar(), t)
    self.names[u] = v

  def alu(self, u: UOp, t: str) -> str:
    op, dt = u.op, u.dtype.scalar()
    n = u.dtype.count
    if op is Ops.CAST: return self.cast(u.src[0].dtype, u.dtype, self.names[u.src[0]])
    if op is Ops.BITCAST: return self.bitcast(u.src[0].dtype, u.dtype, self.names[u.src[0]])
    if op is Ops.WHERE:
      c = self.names[u.src[0]]  # a scalar condition selects between vectors as it is
      return self.op(f"select {self.t(u.src[0].dtype)} {c}, {t} {self.val(u.src[1], n)}, {t} {self.val(u.src[2], n)}")
    s = [self.val(x, n) for x in u.src]
    st = self.t(u.src[0].dtype) if u.src[0].dtype.count == n else _like(t, self.t(u.src[0].dtype))
    sdt = u.src[0].dtype.scalar()
    flt, unsigned = _elem(st) in ("half", "float", "double"), dtypes.is_unsigned(sdt) or sdt is dtypes.bool
    if op in GroupOp.Comparison:
      if flt: cmp = {Ops.CMPLT: "fcmp olt", Ops.CMPNE: "fcmp une", Ops.CMPEQ: "fcmp oeq"}[op]
      else: cmp = {Ops.CMPLT: "icmp ult" if unsigned else "icmp slt", Ops.CMPNE: "icmp ne", Ops.CMPEQ: "icmp eq"}[op]
      return self.op(f"{cmp} {st} {s[0]}, {s[1]}")
    boolean = dt is dtypes.bool
    if op in _BITWISE or boolean and op in (Ops.ADD, Ops.MUL, Ops.MAX):
      return self.op(f"{_BITWISE.get(op) or ('and' if op is Ops.MUL else 'or')} {t} {s[0]}, {s[1]}")
    if op in (Ops.ADD, Ops.SUB, Ops.MUL):
      return self.op(f"{'f' if flt else ''}{op.name.lower()} {t} {s[0]}, {s[1]}")
    if op is Ops.FDIV or op is Ops.CDIV and flt: return self.op(f"fdiv {t} {s[0]}, {s[1]}")
    if op is Ops.NEG: return self.op(f"fneg {t} {s[0]}") if flt else self.op(f"sub {t} {self.const(0, dt, t)}, {s[0]}")
    if op is Ops.RECIPROCAL: return self.op(f"fdiv {t} {self.const(1, dt, t)}, {s[0]}")
    if op is Ops.MAX:
      if flt:  # (a > b || a != a) ? a : b, as the other renderers
        c = self.either(self.op(f"fcmp ogt {t} {s[0]}, {s[1]}"), self.op(f"fcmp uno {t} {s[0]}, {s[0]}"), t)
      else: c = self.op(f"icmp {'ugt' if unsigned else 'sgt'} {t} {s[0]}, {s[1]}")
      return self.op(f"select {_like(t, 'i1')} {c}, {t} {s[0]}, {t} {s[1]}")
    if op in (Ops.SHL, Ops.SHR):
      amt = self.int_resize(u.src[1].dtype, self.t(u.src[1].dtype.scalar()), _elem(t), s[1], n)
      return self.op(f"{'shl' if op is Ops.SHL else 'lshr' if unsigned else 'ashr'} {t} {s[0]}, {amt}")
    if op in _MATH:
      if not flt: raise NotImplementedError(f"kernel {self.k.name}: {op} on {dt}")
      if _elem(t) == "half":  # computed in float, as the C renderer's ((half)exp2f((float)x))
        ft = _like(t, "float")
        return self.op(f"fptrunc {ft} {self.intrinsic(_MATH[op], ft, [self.op(f'fpext {t} {s[0]} to {ft}')])} to {t}")
      return self.intrinsic(_MATH[op], t, [s[0]])
    if op is Ops.POW:  # in double, as C's pow
      if _elem(t) == "double": return self.intrinsic("pow", t, s)
      dt2 = _like(t, "double")
      wide = [self.op(f"fpext {t} {x} to {dt2}") for x in s]
      return self.op(f"fptrunc {dt2} {self.intrinsic('pow', dt2, wide)} to {t}")
    if op in (Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD):
      if flt: raise NotImplementedError(f"kernel {self.k.name}: {op} on {dt}")
      return self.int_div(u, t, s, unsigned)
    raise NotImplementedError(f"kernel {self.k.name}: the LLVM renderer can't render {op}")

  def int_div(self, u: UOp, t: str, s: list[str], unsigned: bool) -> str:
    """C's truncating division and remainder (CDIV, CMOD) or Python's floor division and modulo (FLOORDIV, FLOORMOD):
    a divisor of 0 gives 0 (the lane may be masked out), and a signed quotient by -1 wraps."""
    op, dt = u.op, u.dtype.scalar()
    a, b = u.src
    floor = op in (Ops.FLOORDIV, Ops.FLOORMOD)
    if floor and (unsigned or a.vmin >= 0 and b.op is Ops.CONST and b.arg > 0): floor = False
    div = op in (Ops.CDIV, Ops.FLOORDIV)
    ins = ("udiv" if div else "urem") if unsigned else ("sdiv" if div else "srem")
    if not floor and b.op is Ops.CONST and b.arg != 0 and (b.arg != -1 or unsigned): return self.op(f"{ins} {t} {s[0]}, {s[1]}")
    mt, zero = _like(t, "i1"), self.const(0, dt, t)
    is0 = self.op(f"icmp eq {t} {s[1]}, {zero}")
    bad, neg1 = is0, None
    if not unsigned:
      neg1 = self.op(f"icmp eq {t} {s[1]}, {self.const(-1, dt, t)}")
      bad = self.op(f"or {mt} {is0}, {neg1}")
    safe = self.op(f"select {mt} {bad}, {t} {self.const(1, dt, t)}, {t} {s[1]}")  # a divisor that never traps
    q = self.op(f"{ins} {t} {s[0]}, {safe}")
    if floor:  # a remainder of the divisor's opposite sign moves the quotient down one, the remainder up by the divisor
      r = q if not div else self.op(f"srem {t} {s[0]}, {safe}")
      signs = self.op(f"xor {t} {r}, {s[1]}")
      off = self.op(f"and {mt} {self.op(f'icmp ne {t} {r}, {zero}')}, {self.op(f'icmp slt {t} {signs}, {zero}')}")
      moved = self.op(f"sub {t} {q}, {self.const(1, dt, t)}") if div else self.op(f"add {t} {r}, {s[1]}")
      q = self.op(f"select {mt} {off}, {t} {moved}, {t} {q}")
    if div and neg1 is not None: q = self.op(f"select {mt} {neg1}, {t} {self.op(f'sub {t} {zero}, {s[0]}')}, {t} {q}")
    return self.op(f"select {mt} {is0}, {t} {zero}, {t} {q}")

  # ** conversions **

  def int_resize(self, src: DType, st: str, dt_elem: str, x: str, n: int) -> str:
    """An integer x of scalar type st (dtype src) as dt_elem, sign- or zero-extended as src is."""
    if st == dt_elem: return x
    a, b = (f"<{n} x {st}>", f"<{n} x {dt_elem}>") if n > 1 else (st, dt_elem)
    if _BITS[st] > _BITS[dt_elem]: return self.op(f"trunc {a} {x} to {b}")
    return self.op(f"{'zext' if dtypes.is_unsigned(src.scalar()) or src.scalar() is dtypes.bool else 'sext'} {a} {x} to {b}")

  def rounded(self, x: str, dt: DType, t: str) -> str:
    """x (float) rounded to dt where dt is computed in a wider type (bfloat16, the fp8s); else x."""
    if dt is dtypes.bfloat16: return self.round_bf16(x, t)
    return self.fp8_decode(self.fp8_encode(x, dt, t), dt, _like(t, "i8")) if dt in FP8_FORMATS else x

  def u32_consts(self, it: str) -> Callable[[int], str]:
    """Constants of i32 type it (a scalar or a vector of them)."""
    return lambda v: self.const(v, dtypes.uint32, it)

  def binary(self, it: str) -> Callable[..., str]:
    """op2(ins, x, y, ty=it): the value of a two-operand instruction."""
    return lambda ins, x, y, ty=it: self.op(f"{ins} {ty} {x}, {y}")

  def fp8_encode(self, x: str, dt: DType, t: str) -> str:
    """The fp8 byte of float x, rounded to nearest even, as the C renderer's th_fp8_enc: past the largest finite E4M3
    saturates to +-448, E5M2 gives +-inf and the fnuz formats saturate; a NaN is the format's NaN. Lane-wise, no
    branches: both of a normal's and a subnormal's roundings are computed and one is picked."""
    _, m, b, kind = FP8_FORMATS[dt]
    it, mt, i8 = _like(t, "i32"), _like(t, "i1"), _like(t, "i8")
    c, op2 = self.u32_consts(it), self.binary(it)
    u = self.op(f"bitcast {t} {x} to {it}")
    sign = op2("and", op2("lshr", u, c(24)), c(0x80))
    a = op2("and", u, c(0x7FFFFFFF))
    e = op2("lshr", a, c(23))
    normal = op2("icmp uge", e, c(127 + 1 - b))  # e - 127 >= 1 - b
    q_norm = op2("sub", op2("lshr", a, c(23 - m)), c((127 - b) << m))
    t_sub = op2("sub", c(151 - b - m), e)
    sh_sub = self.op(f"select {mt} {op2('icmp ugt', t_sub, c(31))}, {it} {c(31)}, {it} {t_sub}")
    a_sub = op2("or", op2("and", a, c(0x7FFFFF)), self.op(f"select {mt} {op2('icmp ne', e, c(0))}, {it} {c(0x800000)}, {it} {c(0)}"))
    sh = self.op(f"select {mt} {normal}, {it} {c(23 - m)}, {it} {sh_sub}")
    aa = self.op(f"select {mt} {normal}, {it} {a}, {it} {a_sub}")
    q = self.op(f"select {mt} {normal}, {it} {q_norm}, {it} {op2('lshr', a_sub, sh_sub)}")
    half = op2("shl", c(1), op2("sub", sh, c(1)))
    rem = op2("and", aa, op2("sub", op2("shl", c(1), sh), c(1)))
    tie_odd = op2("and", op2("icmp eq", rem, half), op2("icmp ne", op2("and", q, c(1)), c(0)), mt)
    up = op2("or", op2("icmp ugt", rem, half), tie_odd, mt)
    q = op2("add", q, self.op(f"zext {mt} {up} to {it}"))
    if kind == FP8_FNUZ:  # saturates; no -0; an infinity and a NaN are 0x80
      q = self.op(f"select {mt} {op2('icmp ugt', q, c(0x7F))}, {it} {c(0x7F)}, {it} {q}")
      byte = self.op(f"select {mt} {op2('icmp eq', q, c(0))}, {it} {c(0)}, {it} {op2('or', sign, q)}")
      nan = op2("icmp uge", a, c(0x7F800000))
      return self.op(f"trunc {it} {self.op(f'select {mt} {nan}, {it} {c(0x80)}, {it} {byte}')} to {i8}")
    top, over = (0x7B, 0x7C) if kind == FP8_IEEE else (0x7E, 0x7E)
    q = self.op(f"select {mt} {op2('icmp ugt', q, c(top))}, {it} {c(over)}, {it} {q}")
    q = self.op(f"select {mt} {op2('icmp ugt', a, c(0x7F800000))}, {it} {c(0x7F)}, {it} {q}")  # NaN
    return self.op(f"trunc {it} {op2('or', sign, q)} to {i8}")

  def fp8_decode(self, byte: str, dt: DType, t8: str) -> str:
    """The float value of fp8 byte(s), exactly, as the C renderer's th_fp8_dec."""
    _, m, b, kind = FP8_FORMATS[dt]
    it, mt, ft = _like(t8, "i32"), _like(t8, "i1"), _like(t8, "float")
    c, op2 = self.u32_consts(it), self.binary(it)
    x = self.op(f"zext {t8} {byte} to {it}")
    sign = op2("shl", op2("and", x, c(0x80)), c(24))
    mag = op2("and", x, c(0x7F))
    e, f = op2("lshr", mag, c(m)), op2("and", x, c((1 << m) - 1))
    normal = op2("or", sign, op2("or", op2("shl", op2("add", e, c(127 - b)), c(23)), op2("shl", f, c(23 - m))))
    if kind == FP8_IEEE: special = (op2("icmp eq", e, c(0x7F >> m)), op2("or", op2("or", sign, c(0x7F800000)),
                                    self.op(f"select {mt} {op2('icmp ne', f, c(0))}, {it} {c(0x400000)}, {it} {c(0)}")))
    elif kind == FP8_FN: special = (op2("icmp eq", mag, c(0x7F)), op2("or", sign, c(0x7FC00000)))
    else: special = (op2("icmp eq", x, c(0x80)), c(0x7FC00000))
    bits = self.op(f"select {mt} {special[0]}, {it} {special[1]}, {it} {normal}")
    value = self.op(f"bitcast {it} {bits} to {ft}")
    # zero and the subnormals: f * 2^(1-b-m), signed
    sub = self.op(f"fmul {ft} {self.op(f'uitofp {it} {f} to {ft}')}, {self.const(2.0 ** (1 - b - m), dtypes.float32, ft)}")
    sub = self.op(f"select {mt} {op2('icmp ne', sign, c(0))}, {ft} {self.op(f'fneg {ft} {sub}')}, {ft} {sub}")
    zero_exp = op2("icmp eq", e, c(0))
    if kind == FP8_FNUZ: zero_exp = op2("and", zero_exp, op2("icmp ne", x, c(0x80)), mt)  # 0x80 is the NaN, not -0
    return self.op(f"select {mt} {zero_exp}, {ft} {sub}, {ft} {value}")

  def round_bf16(self, x: str, t: str) -> str:
    """x (float) rounded to bfloat16, to nearest even; a NaN stays a NaN."""
    it = _like(t, "i32")
    u = self.op(f"bitcast {t} {x} to {it}")
    lsb = self.op(f"and {it} {self.op(f'lshr {it} {u}, {self.const(16, dtypes.uint32, it)}')}, {self.const(1, dtypes.uint32, it)}")
    up = self.op(f"add {it} {self.op(f'add {it} {u}, {self.const(0x7FFF, dtypes.uint32, it)}')}, {lsb}")
    nan = self.op(f"or {it} {u}, {self.const(0x400000, dtypes.uint32, it)}")
    r = self.op(f"select {_like(t, 'i1')} {self.op(f'fcmp uno {t} {x}, {x}')}, {it} {nan}, {it} {up}")
    return self.op(f"bitcast {it} {self.op(f'and {it} {r}, {self.const(0xFFFF0000, dtypes.uint32, it)}')} to {t}")

  def bf16_bits(self, x: str, t: str) -> str:
    """The 16 bits of a bfloat16 value held in float x (exact: its low bits are 0)."""
    it = _like(t, "i32")
    hi = self.op(f"lshr {it} {self.op(f'bitcast {t} {x} to {it}')}, {self.const(16, dtypes.uint32, it)}")
    return self.op(f"trunc {it} {hi} to {_like(t, 'i16')}")

  def bf16_value(self, bits: str, t16: str) -> str:
    it = _like(t16, "i32")
    wide = self.op(f"shl {it} {self.op(f'zext {t16} {bits} to {it}')}, {self.const(16, dtypes.uint32, it)}")
    return self.op(f"bitcast {it} {wide} to {_like(t16, 'float')}")

  def odd_float(self, x: str, t: str) -> str:
    """A double as float rounded to odd, so that a rounding on to a narrower type (half, an fp8) is the only one that
    counts, as the C renderer's th_d2f_odd (a direct double to half conversion is a libcall of compiler-rt, which no
    loaded library has)."""
    ft, it, mt = _like(t, "float"), _like(t, "i32"), _like(t, "i1")
    f = self.op(f"fptrunc {t} {x} to {ft}")
    back = self.op(f"fpext {ft} {f} to {t}")
    inexact = self.op(f"fcmp one {t} {back}, {x}")
    over = self.op(f"fcmp ogt {t} {self.intrinsic('fabs', t, [back])}, {self.intrinsic('fabs', t, [x])}")
    bits = self.op(f"bitcast {ft} {f} to {it}")
    down = self.op(f"sub {it} {bits}, {self.op(f'zext {mt} {over} to {it}')}")
    odd = self.op(f"or {it} {down}, {self.const(1, dtypes.uint32, it)}")
    return self.op(f"bitcast {it} {self.op(f'select {mt} {inexact}, {it} {odd}, {it} {bits}')} to {ft}")

  def cast(self, src: DType, dt: DType, x: str) -> str:  # type: ignore[override]
    st, t = self.t(src), self.t(dt)
    se, te = _elem(st), _elem(t)
    sf, tf = se in ("half", "float", "double"), te in ("half", "float", "double")
    if dt.scalar() is dtypes.bool:
      if src.scalar() is dtypes.bool: return x
      return self.op(f"fcmp une {st} {x}, {self.const(0, src, st)}" if sf else f"icmp ne {st} {x}, {self.const(0, src, st)}")
    if src.scalar() is dtypes.bool:
      return self.op(f"uitofp {st} {x} to {t}" if tf else f"zext {st} {x} to {t}")
    if sf and tf:
      if se == te: v = x
      elif se == "double" and (te == "half" or dt.scalar() in FP8_FORMATS):
        v = self.odd_float(x, st)
        if te == "half": v = self.op(f"fptrunc {_like(st, 'float')} {v} to {t}")
      else: v = self.op(f"{'fpext' if _BITS[se] < _BITS[te] else 'fptrunc'} {st} {x} to {t}")
    elif sf: return self.op(f"{'fptoui' if dtypes.is_unsigned(dt.scalar()) else 'fptosi'} {st} {x} to {t}")
    elif tf: v = self.op(f"{'uitofp' if dtypes.is_unsigned(src.scalar()) else 'sitofp'} {st} {x} to {t}")
    else: return self.int_resize(src, se, te, x, dt.count)
    return v if dt.scalar() is src.scalar() else self.rounded(v, dt.scalar(), t)

  def bitcast(self, src: DType, dt: DType, x: str) -> str:  # type: ignore[override]
    st, t = self.t(src), self.t(dt)
    if src.scalar() in FP8_FORMATS or dt.scalar() in FP8_FORMATS:  # through the byte
      byte = self.fp8_encode(x, src.scalar(), st) if src.scalar() in FP8_FORMATS else x
      t8 = _like(t, "i8")
      return self.fp8_decode(byte, dt.scalar(), t8) if dt.scalar() in FP8_FORMATS else byte
    if src.scalar() is dtypes.bfloat16:
      bits = self.bf16_bits(x, st)
      return bits if _elem(t) == "i16" else self.op(f"bitcast {_like(st, 'i16')} {bits} to {t}")
    if dt.scalar() is dtypes.bfloat16:
      t16 = _like(t, "i16")
      return self.bf16_value(x if _elem(st) == "i16" else self.op(f"bitcast {st} {x} to {t16}"), t16)
    if _elem(st) == "i1": return self.op(f"zext {st} {x} to {t}")  # a bool's byte is 0 or 1
    if _elem(t) == "i1": return self.op(f"icmp ne {st} {x}, {self.const(0, src, st)}")
    return x if st == t else self.op(f"bitcast {st} {x} to {t}")

  # ** memory **

  def address(self, index: UOp, mt: str, inbounds: bool = True, at: str | None = None) -> str:
    """The address of an INDEX's element (at: another value of its index's type in place of the index)."""
    buf, idx = index.src
    i, it = at or self.names[idx], self.t(idx.dtype)
    if it != "i64": i = self.int_resize(idx.dtype, it, "i64", i, 1)
    return self.op(f"getelementptr{' inbounds' if inbounds else ''} {_elem(mt)}, ptr {self.names[buf]}, i64 {i}")

  def from_memory(self, dt: DType, mt: str, v: str) -> str:
    """A loaded value of memory type mt as dt computes in it."""
    if dt.scalar() is dtypes.bool: return self.op(f"icmp ne {mt} {v}, {self.const(0, dtypes.uint8, mt)}")
    if dt.scalar() in FP8_FORMATS: return self.fp8_decode(v, dt.scalar(), mt)
    return self.bf16_value(v, mt) if dt.scalar() is dtypes.bfloat16 else v

  def to_memory(self, dt: DType, t: str, v: str) -> str:
    if dt.scalar() is dtypes.bool: return self.op(f"zext {t} {v} to {_like(t, 'i8')}")
    if dt.scalar() in FP8_FORMATS: return self.fp8_encode(v, dt.scalar(), t)
    return self.bf16_bits(v, t) if dt.scalar() is dtypes.bfloat16 else v

  def lane_mask(self, m: UOp, n: int) -> str:
    """The <n x i1> lanes of a LOAD's uint mask: lane i is bit i."""
    if m.op is Ops.CONST: return "<" + ", ".join(f"i1 {'true' if (int(m.arg) >> i) & 1 else 'false'}" for i in range(n)) + ">"
    vt = f"<{n} x i32>"
    bits = "<" + ", ".join(f"i32 {1 << i}" for i in range(n)) + ">"
    return self.op(f"icmp ne {vt} {self.op(f'and {vt} {self.splat(self.names[m], vt)}, {bits}')}, zeroinitializer")

  def load(self, u: UOp) -> str:
    index, dt, n = u.src[0], u.dtype, u.dtype.count
    gate = next((s for s in u.src[1:] if s.dtype is dtypes.bool), None)
    mask = next((s for s in u.src[1:] if s.dtype is dtypes.uint), None)
    mt, size = self.mem_t(dt), csize(dt) if dt.scalar() is not dtypes.bool else 1
    align = math.gcd(n * size, 64) if index.arg is True else size
    # a masked load: a masked-off lane is never read, so a vector may overhang its buffer's end. A gated vector of
    # 4- or 8-byte elements is one too (a single instruction with AVX-512 or AVX's vmaskmov; branch-free)
    if mask is not None or gate is not None and n > 1 and size in (4, 8):
      lanes = self.lane_mask(mask, n) if mask is not None else "splat (i1 true)"
      if gate is not None: lanes = self.op(f"select i1 {self.names[gate]}, <{n} x i1> {lanes}, <{n} x i1> zeroinitializer")
      fn = self.declare(f"llvm.masked.load.{mangle(mt)}.p0", mt, f"ptr, i32 immarg, <{n} x i1>, {mt}")
      v = self.op(f"call {mt} {fn}(ptr {self.address(index, mt, False)}, i32 {size}, <{n} x i1> {lanes}, {mt} zeroinitializer)")
      return self.from_memory(dt, mt, v)
    if gate is None: return self.from_memory(dt, mt, self.op(f"load {mt}, ptr {self.address(index, mt)}, align {align}"))
    # gated: a closed gate reads element 0 instead (every buffer has one) and gives 0; no branch
    idx = index.src[1]
    it = self.t(idx.dtype)
    at = self.op(f"select i1 {self.names[gate]}, {it} {self.names[idx]}, {it} {self.const(0, idx.dtype, it)}")
    v = self.from_memory(dt, mt, self.op(f"load {mt}, ptr {self.address(index, mt, False, at)}, align {align}"))
    t = self.t(dt)
    return self.op(f"select i1 {self.names[gate]}, {t} {v}, {t} {self.const(0, dt, t)}")

  def store(self, st: UOp) -> None:
    index, val = st.src
    dt, n = val.dtype, val.dtype.count
    mt, size = self.mem_t(dt), csize(dt) if dt.scalar() is not dtypes.bool else 1
    aligned = index.arg is True and n > 1
    v = self.to_memory(dt, self.t(dt), self.names[val])
    nt = ", !nontemporal !0" if aligned and self.streaming else ""
    self.nontemporal |= bool(nt)
    self.emit(f"store {mt} {v}, ptr {self.address(index, mt)}, align {math.gcd(n * size, 64) if aligned else size}{nt}")

  # ** reduces **

  def step(self, acc: UOp, a: str, x: str) -> str:
    """acc's op on its value a and a term x."""
    op, dt, t = acc.arg[0], acc.dtype.scalar(), self.t(acc.dtype)
    flt = _elem(t) in ("half", "float", "double")
    if dt is dtypes.bool: return self.op(f"{'and' if op is Ops.MUL else 'or'} {t} {a}, {x}")
    if op is Ops.ADD: return self.op(f"{'fadd' if flt else 'add'} {t} {a}, {x}")
    if op is Ops.MUL: return self.op(f"{'fmul' if flt else 'mul'} {t} {a}, {x}")
    mt = _like(t, "i1")
    if flt: c = self.either(self.op(f"fcmp ogt {t} {x}, {a}"), self.op(f"fcmp uno {t} {x}, {x}"), t)
    else: c = self.op(f"icmp {'ugt' if dtypes.is_unsigned(dt) else 'sgt'} {t} {x}, {a}")
    return self.op(f"select {mt} {c}, {t} {x}, {t} {a}")

  def reduce_section(self) -> None:
    n_out = self.n_out
    slots = {}
    for i, acc in enumerate(self.reduces):
      t = self.t(acc.dtype)
      slots[acc] = self.slot(t, f"acc{i}")
      self.emit(f"store {t} {self.const(identity_element(acc.arg[0], acc.dtype.scalar()), acc.dtype.scalar(), t)}, ptr {slots[acc]}")
    for j, r in enumerate(self.rloops):
      self.open_loop(r, f"ridx{n_out + j}")
      for u in self.at.get(n_out + j + 1, ()): self.name(u)
    for acc in self.reduces: self.accumulate(acc, slots[acc])
    for r in reversed(self.rloops): self.end_loop(r)
    self.acc_slots = slots
    if any(r.arg[1] is AxisType.GROUP_REDUCE for r in self.rloops): self.combine()
    for acc in self.reduces: self.names[acc] = self.op(f"load {self.t(acc.dtype)}, ptr {slots[acc]}")

  def accumulate(self, acc: UOp, slot: str) -> None:
    """acc's terms added into its accumulator's slot, one after another."""
    t, n = self.t(acc.dtype), acc.dtype.count
    for term in acc.src[:acc.arg[1]]:
      a = self.op(f"load {t}, ptr {slot}")
      if term in self.fused: v = self.intrinsic("fmuladd", t, [self.val(term.src[0], n), self.val(term.src[1], n), a])
      else: v = self.step(acc, a, self.val(term, n))
      self.emit(f"store {t} {v}, ptr {slot}")

  # an inner sum (CStyleWriter.inner_section): a slot of its own, set to the identity before its loop
  def inner_begin(self, acc: UOp) -> None:
    t = self.t(acc.dtype)
    self.inner_slots[acc] = slot = self.slot(t, f"isum{len(self.inner_slots)}")
    self.emit(f"store {t} {self.const(identity_element(acc.arg[0], acc.dtype.scalar()), acc.dtype.scalar(), t)}, ptr {slot}")
  def inner_add(self, acc: UOp) -> None: self.accumulate(acc, self.inner_slots[acc])
  def inner_end(self, acc: UOp) -> None: self.names[acc] = self.op(f"load {self.t(acc.dtype)}, ptr {self.inner_slots[acc]}")

  def combine(self) -> None:
    """Two-stage reduce, as CWriter.combine: each core leaves its accumulators in its slot of the state; the last core
    to finish adds up the others' and goes on to the store."""
    offs, off = [], 0
    for acc in self.reduces:
      offs.append(off)
      off += acc.dtype.count * max(1, _BITS[_elem(self.t(acc.dtype))] // 8)  # as computed: bfloat16 and fp8 in float
    self.stateful, self.part_stride = True, -(-off // 64) * 64
    mine = self.part_of("%core_id")
    for acc, o in zip(self.reduces, offs):
      t = self.t(acc.dtype)
      v, at = self.op(f"load {t}, ptr {self.acc_slots[acc]}"), self.op(f"getelementptr i8, ptr {mine}, i64 {o}")
      self.emit(f"store {t} {v}, ptr {at}, align 1")
    done = self.op("atomicrmw add ptr %th_done, i32 1 acq_rel")
    last = self.label("last")
    self.emit(f"br i1 {self.is_last(done)}, label %{last}, label %exit")
    self.block(last)
    self.emit("store atomic i32 0, ptr %th_done monotonic, align 4")
    c, loop = self.loop("th_c", "i32", "0", "%num_cores")
    other, skip = self.label("other"), self.label("self")
    self.emit(f"br i1 {self.op(f'icmp eq i32 {c}, %core_id')}, label %{skip}, label %{other}")
    self.block(other)
    theirs = self.part_of(c)
    for acc, o in zip(self.reduces, offs):
      t = self.t(acc.dtype)
      part = self.op(f"load {t}, ptr {self.op(f'getelementptr i8, ptr {theirs}, i64 {o}')}, align 1")
      self.emit(f"store {t} {self.step(acc, self.op(f'load {t}, ptr {self.acc_slots[acc]}'), part)}, ptr {self.acc_slots[acc]}")
    self.emit(f"br label %{skip}")
    self.block(skip)
    self.close(loop)

  def finish(self) -> str:
    k, name = self.k, self.k.name
    state = [] if not self.stateful else [f"  %th_{w} = getelementptr i8, ptr %th_state, i64 {o}" for w, o in (("next", 0), ("left", 8), ("done", 12), ("part", 64))]
    params = [*self.args, "i32 %core_id", "i32 %num_cores", *(["ptr %th_state"] if self.stateful else [])]
    body = [f"define internal void @{name}.body({', '.join(params)}) #1 {{", "entry:", *self.slots, *state,
            *self.lines[self.body_start:], "  br label %exit", "exit:"]
    # non-temporal stores are weakly ordered: they land before the kernel reports done
    if self.nontemporal: body.append(f"  call void {self.declare('llvm.x86.sse.sfence', 'void', '')}()")
    body += ["  ret void", "}"]
    # the ABI's function: the body's arguments out of the args array
    wrap, args = [f"define void @{name}(ptr %args, i32 %core_id, i32 %num_cores) #0 {{"], []
    words = [*("ptr" for _ in k.buffers), *(self.t(v.dtype) for v in k.vars), *(["ptr"] if self.stateful else [])]
    for i, w in enumerate(words):
      wrap.append(f"  %a{i}.at = getelementptr i64, ptr %args, i64 {i}")
      wrap.append(f"  %a{i} = load {'ptr' if w == 'ptr' else 'i64'}, ptr %a{i}.at")
      if w not in ("ptr", "i64"): wrap.append(f"  %a{i}.v = trunc i64 %a{i} to {w}")
      args.append(f"{w} %a{i}{'' if w in ('ptr', 'i64') else '.v'}")
    args[len(k.buffers) + len(k.vars):len(k.buffers) + len(k.vars)] = ["i32 %core_id", "i32 %num_cores"]
    wrap += [f"  call void @{name}.body({', '.join(args)})", "  ret void", "}"]
    mark = [f"; {STATE_MARK}{self.part_stride}"] if self.stateful else []
    return "\n".join([*mark, *body, *wrap, *self.decls.values(), *_attributes(any(u.op in _LIBM for u in self.order)), *(["!0 = !{i32 1}"] if self.nontemporal else []), ""])


class LLVMRenderer(Renderer):
  """LLVM IR for this host's CPU (see the module doc): `vec` lanes of its vector unit, `registers` vector registers."""
  device = "CPU"
  inner_sums = True

  def __init__(self, vec: int = 16, registers: int = 32, stream_bytes: int | None = None):
    self.vec, self.registers = vec, registers
    self.stream_bytes = last_level_cache() if stream_bytes is None else stream_bytes
    if vec > 1: self.vector_transcendentals = frozenset({dtypes.float32})  # libm's exp2f takes one lane per call


  def render(self, k: LoweredKernel) -> str:
    self.check_dtypes(k, "the LLVM renderer")
    return LLVMWriter(k, self.stream_bytes).write()


CPULLVMRenderer = LLVMRenderer  # tinygrad's name for it
