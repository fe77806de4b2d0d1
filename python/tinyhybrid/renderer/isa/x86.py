"""x86-64 machine code for the CPU device (DEV=CPU:X86), written from the kernel IR with no compiler: the nodes are
placed as for the C-family languages (CStyleWriter.write), each selected into instructions on virtual registers by
the rules of `ISEL` (a PatternMatcher: the C++ engine picks a node's rule by its op and dtype), then given physical
registers by linear scan (codegen/late/regalloc.py), with spills to a stack frame. The result is Intel-syntax assembly
text (what DEBUG=4 prints), which runtime/x86.py encodes with the C++ encoder and maps executable.

The kernel ABI is the C renderer's (renderer/cstyle.py) under the System V calling convention: rdi = the args array,
esi = core_id, edx = num_cores. Integers and bools live in 64-bit general registers, each kept as its dtype's value
sign- or zero-extended to 64 bits; floats in xmm registers; vectors of float32, int32 and uint32 (AVX2) in xmm and ymm
registers (renderer/isa/x86_vector.py). half and bfloat16 are computed in float and rounded after every operation, as the
C renderer does; exp2, log2 and sin are decomposed into arithmetic (codegen/decomp/transcendental.py), so a kernel calls
nothing. rax, rcx and rdx are kept for division and shift counts, r10, r11 and xmm13-15 for reloading spilled values.
Where the register tile of a reduce would not fit, what only its fused multiply-adds read is placed at its first use
and the accumulators' terms are taken in turns, so that a loaded value lives from its load to its last product.
What the selector has no rule for is refused at render time, naming the op and the kernel; nothing falls back."""
from __future__ import annotations

import functools
import math
import struct

from tinyhybrid.codegen.late.regalloc import Ins, Mem, Reg, VReg, linear_scan, rewrite
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import disable_gc
from tinyhybrid.renderer import Renderer
from tinyhybrid.renderer.cstyle import CHUNKS, STATE_MARK, CStyleWriter
from tinyhybrid.renderer.isa.x86_convert import _WIDE, FLOATS, INTS, X86Conversions, _unsigned
from tinyhybrid.renderer.isa.x86_vector import LANE_DTYPES, VECTOR_RULES, X86Vectors, const_lanes
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element
from tinyhybrid.uop.upat import PatternMatcher, UPat

GPR_POOL = ["rbx", "rsi", "rdi", "rbp", "r8", "r9", "r12", "r13", "r14", "r15"]
CALLEE_SAVED = ("rbx", "rbp", "r12", "r13", "r14", "r15")
SCRATCH = {"g": ["r10", "r11"], "x": ["xmm13", "xmm14", "xmm15"]}
_LOW = {"rax": ("eax", "ax", "al"), "rbx": ("ebx", "bx", "bl"), "rcx": ("ecx", "cx", "cl"), "rdx": ("edx", "dx", "dl"),
        "rsi": ("esi", "si", "sil"), "rdi": ("edi", "di", "dil"), "rbp": ("ebp", "bp", "bpl"), "rsp": ("esp", "sp", "spl")}
_SIZE = {1: "byte", 2: "word", 4: "dword", 8: "qword", 16: "xmmword", 32: "ymmword"}
# registers whose move to themselves does nothing (a 32-bit move clears the upper half)
_WHOLE = frozenset((*GPR_POOL, "rax", "rcx", "rdx", "r10", "r11", *(f"{p}mm{i}" for p in "xy" for i in range(16))))



@functools.cache
def reg_name(r: str, bits: int) -> str:
  """A 64-bit register's name when read or written `bits` wide (xmm registers keep theirs)."""
  if r.startswith("xmm"): return r if bits <= 128 else "ymm" + r[3:]
  if bits == 64: return r
  if r in _LOW: return _LOW[r][{32: 0, 16: 1, 8: 2}[bits]]
  return r + {32: "d", 16: "w", 8: "b"}[bits]


def operand_text(o) -> str:
  """An operand in the encoder's form (spelled) as the assembly text spells it."""
  if type(o) is not tuple: return str(o)
  if o[0] == "label": return o[1]
  _, size, base, index, scale, disp, *label = o
  parts = [label[0] if label else base] if base is not None else []
  if index is not None: parts.append(f"{index}*{scale}")
  text = " + ".join(parts)
  if disp or not parts: text += f" {'-' if disp < 0 else '+'} {abs(disp)}" if parts else str(disp)
  return f"{_SIZE[size]} ptr [{text}]"


def _bits(dt: DType) -> int: return 64 if dt is dtypes.weakint else max(8, dt.itemsize * 8)


# which operand of an instruction it writes: every register operand is read, except a first one the instruction only
# writes (most), and these read their first operand too (or only read it)
_READ_FIRST = {"cmp", "test", "vucomiss", "vucomisd", "idiv", "div"}
_READ_WRITE_FIRST = {"add", "sub", "and", "or", "xor", "neg", "not", "shl", "shr", "sar", "lock xadd", "vfmadd231ss",
                     "vfmadd231sd", "vfmadd231ps"}
_CC = ("e", "ne", "l", "le", "g", "ge", "b", "be", "a", "ae", "s", "ns", "p", "np", "o", "no")


@functools.cache
def _first_operand(mn: str, n: int) -> str:
  """How an instruction of n operands treats its first register operand: "w" written, "r" read, "rw" both ("xadd":
  lock xadd, whose register operand is read and written)."""
  if mn in _READ_FIRST: return "r"
  if mn == "lock xadd": return "xadd"  # its register (the second operand) is exchanged: read, then written
  if mn in _READ_WRITE_FIRST or mn.startswith("cmov") or mn == "imul" and n == 2: return "rw"
  return "w"


def _effects(mn: str, ops: list) -> tuple[tuple[VReg, ...], tuple[VReg, ...]]:
  defs: list[VReg] = []
  uses: list[VReg] = []
  first = _first_operand(mn, len(ops))
  for i, o in enumerate(ops):
    t = type(o)
    if t is Mem:
      if type(o.base) is VReg: uses.append(o.base)
      if type(o.index) is VReg: uses.append(o.index)
    elif t is Reg and type(o.r) is VReg:
      if i > 0 or first != "w": uses.append(o.r)
      if i == 0 and first in ("w", "rw") or first == "xadd": defs.append(o.r)
  return tuple(defs), tuple(uses)


class X86Writer(X86Conversions, X86Vectors, CStyleWriter):
  LACKS_TRANSCENDENTAL = frozenset((*dtypes.floats, dtypes.weakfloat))

  def __init__(self, k: LoweredKernel, ren: X86Renderer):
    super().__init__(k)
    self.ren = ren
    self.code: list[Ins] = []
    self.loop_spans: list[tuple[int, int]] = []
    self.v: dict[UOp, VReg] = {}
    self.nv = self.nlabel = 0
    self.loop_state: dict[UOp, tuple] = {}
    self.acc: dict[UOp, VReg] = {}
    self.pool: dict[bytes, str] = {}  # constant vectors, by their bytes: their labels
    users: dict[UOp, list[UOp]] = {}
    self.vector_masks: dict[UOp, set[int]] = {}
    for u in self.order:
      for x in u.src: users.setdefault(x, []).append(u)
      # the gates and lane masks of vector loads: their vector masks are made where they are computed, out of the loops
      if u.op is Ops.LOAD and u.dtype.count > 1:
        for m in u.src[1:]:
          if m.op is not Ops.CONST: self.vector_masks.setdefault(m, set()).add(max(u.dtype.count, 4))
    self.users = users
    def plain_address(ix: UOp) -> bool: return all(not (r.op is Ops.LOAD and r.dtype.count == 1 and len(r.src) > 1) for r in users.get(ix, ()))
    self.offsets, self.from_memory = set(), set()
    for u in self.order:
      # index + constant read only as an address: the constant becomes the address's displacement, nothing is computed
      if u.op is Ops.ADD and u.dtype.scalar() in INTS and u.src[0].op is not Ops.CONST and self.int_imm(u.src[1]) is not None and \
         all(r.op is Ops.INDEX and r.src[1] is u and plain_address(r) for r in users[u]): self.offsets.add(u)
      # a scalar load only broadcast to vectors: each broadcast reads memory itself (vbroadcastss ymm, [mem])
      elif u.op is Ops.LOAD and u.dtype in LANE_DTYPES and len(u.src) == 1 and \
           all(r.op is Ops.VECTORIZE and all(x is u for x in r.src) for r in users[u]): self.from_memory.add(u)
    self.lane_masks: dict[tuple[UOp, int], VReg] = {}
    self.sunk: set[UOp] = set()  # nodes of the innermost loop named where a fused multiply-add reads them (need)

  # ** instructions **

  def new(self, cls: str) -> VReg:
    self.nv += 1
    return VReg(cls, self.nv)

  def ins(self, mn: str, *ops) -> None:
    defs, uses = _effects(mn, list(ops))
    self.code.append(Ins(mn, list(ops), defs, uses))

  def label(self, what: str) -> str:
    self.nlabel += 1
    return f".L{what}{self.nlabel}"

  def place(self, name: str) -> None: self.code.append(Ins("label", [name]))

  def fail(self, u: UOp, why: str = "") -> NotImplementedError:
    return NotImplementedError(f"kernel {self.k.name}: the x86 renderer can't encode {u.op} of {u.dtype}{why}")

  # ** values **

  @staticmethod
  def cls(dt: DType) -> str: return "x" if dt.scalar() in FLOATS else "g"

  def int_imm(self, u: UOp) -> int | None:
    """u's value as a 32-bit signed immediate, where u is an integer constant that fits one."""
    if u.op is not Ops.CONST or u.dtype.scalar() not in INTS: return None
    v = int(u.arg)
    if _unsigned(u.dtype) and v >= 2 ** 31: return None
    return v if -2 ** 31 <= v < 2 ** 31 else None

  def val(self, u: UOp) -> VReg:
    """u in a register: a constant is materialized where it is used (it costs a move; a register held for it through
    every loop would cost more)."""
    if (lanes := const_lanes(u)) is not None: return self.vconst(lanes if len(lanes) > 1 else lanes * u.dtype.count, u.dtype)
    if u.op is not Ops.CONST: return self.v[u]
    return self.const(u.arg, u.dtype)

  def const(self, value, dt: DType) -> VReg:
    if dt.scalar() in FLOATS:
      d = self.new("x")
      if float(value) == 0 and math.copysign(1.0, float(value)) > 0:
        self.ins("vxorps", Reg(d, 128), Reg(d, 128), Reg(d, 128))
        return d
      wide = dt.scalar() in _WIDE
      bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0] if wide else _float_bits(float(value), dt.scalar())
      t = self.new("g")
      self.ins("mov", Reg(t, 64), bits)
      self.ins("vmovq" if wide else "vmovd", Reg(d, 128), Reg(t, 64 if wide else 32))
      return d
    d = self.new("g")
    v = int(value)
    self.ins("mov", Reg(d, 64), _canonical(v, dt.scalar()))
    return d

  def normalize(self, d: VReg, dt: DType) -> None:
    """d (64 bits) back to dt's value extended to 64 bits, after an operation that may have carried past dt's width."""
    dt = dt.scalar()
    bits = _bits(dt)
    if bits == 64 or dt is dtypes.bool: return
    if _unsigned(dt): self.ins("mov" if bits == 32 else "movzx", Reg(d, 32), Reg(d, bits))
    else: self.ins("movsxd" if bits == 32 else "movsx", Reg(d, 64), Reg(d, bits))

  def copy(self, u: UOp) -> VReg:
    """A new register holding u's value (an instruction that writes its first operand then works on the copy)."""
    d = self.new(self.cls(u.dtype))
    if self.cls(u.dtype) == "x": self.ins("vmovaps", Reg(d, 128), Reg(self.val(u), 128))
    elif u.op is Ops.CONST: self.ins("mov", Reg(d, 64), _canonical(int(u.arg), u.dtype.scalar()))
    else: self.ins("mov", Reg(d, 64), Reg(self.v[u], 64))
    return d

  # ** the frame **

  def params(self) -> None:
    k = self.k
    self.args, self.core, self.ncores = self.new("g"), self.new("g"), self.new("g")
    for i, b in enumerate(k.buffers): self.v[UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)] = self.new("g")
    for v in k.vars: self.v[v] = self.new("g")
    self.state = self.new("g")
    self.exit = self.label("exit")
    if not any(r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE) for r in self.loops + self.rloops):
      self.ins("cmp", Reg(self.core, 32), 0)
      self.ins("jne", self.exit)

  def prologue(self) -> list[Ins]:
    """The arguments out of the ABI's registers and the args array (the state's address only where it is used)."""
    out: list[Ins] = []
    def put(mn: str, *ops) -> None: out.append(Ins(mn, list(ops), *_effects(mn, list(ops))))
    # through registers no value is given, so that no allocation can overwrite an argument before it is read
    put("mov", Reg("r10", 64), Reg("rdi", 64))
    put("mov", Reg("r11", 32), Reg("rsi", 32))
    put("mov", Reg("rax", 32), Reg("rdx", 32))
    put("mov", Reg(self.args, 64), Reg("r10", 64))
    put("mov", Reg(self.core, 32), Reg("r11", 32))
    put("mov", Reg(self.ncores, 32), Reg("rax", 32))
    k = self.k
    for i, b in enumerate(k.buffers): put("mov", Reg(self.v[UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)], 64), Mem(8, self.args, disp=8 * i))
    for j, v in enumerate(k.vars):
      put("mov", Reg(self.v[v], 64), Mem(8, self.args, disp=8 * (len(k.buffers) + j)))
    if self.stateful: put("mov", Reg(self.state, 64), Mem(8, self.args, disp=8 * (len(k.buffers) + len(k.vars))))
    return out

  def loop(self, lo: VReg | int, hi: VReg | int) -> tuple[VReg, tuple]:
    c = self.new("g")
    self.ins("mov", Reg(c, 64), Reg(lo, 64) if isinstance(lo, VReg) else lo)
    head, done = self.label("head"), self.label("done")
    self.place(head)
    start = len(self.code) - 1
    self.ins("cmp", Reg(c, 64), Reg(hi, 64) if isinstance(hi, VReg) else hi)
    self.ins("jge", done)
    return c, (c, head, done, start)

  def close(self, state: tuple, step: bool = True) -> None:
    c, head, done, start = state
    if step: self.ins("add", Reg(c, 64), 1)
    self.ins("jmp", head)
    self.loop_spans.append((start, len(self.code) - 1))
    self.place(done)

  def bound(self, end: VReg | int, part: VReg, parts: VReg | int, plus: int) -> VReg:
    """end * (part + plus) / parts (signed, parts > 0)."""
    t = self.new("g")
    self.ins("mov", Reg(t, 64), Reg(part, 64))
    if plus: self.ins("add", Reg(t, 64), plus)
    if isinstance(end, VReg): self.ins("imul", Reg(t, 64), Reg(end, 64))
    else: self.ins("imul", Reg(t, 64), Reg(t, 64), end)
    self.ins("mov", Reg("rax", 64), Reg(t, 64))
    self.ins("cqo")
    div = parts if isinstance(parts, VReg) else self.const(parts, dtypes.int64)
    self.ins("idiv", Reg(div, 64))
    self.ins("mov", Reg(t, 64), Reg("rax", 64))
    return t

  def open_loop(self, r: UOp, nm: str) -> None:
    end_u = r.src[0]
    end: VReg | int = imm if (imm := self.int_imm(end_u)) is not None else self.val(end_u)
    if r.arg[1] is AxisType.THREAD and r is self.loops[0]:
      self.stateful = True
      nch = min(end_u.arg, CHUNKS) if end_u.op is Ops.CONST else CHUNKS
      c = self.next_chunk()
      outer_head, outer_done = self.label("chunk"), self.label("chunks_done")
      self.place(outer_head)
      start = len(self.code) - 1
      self.ins("cmp", Reg(c, 64), nch)
      self.ins("jge", outer_done)
      lo, hi = self.bound(end, c, nch, 0), self.bound(end, c, nch, 1)
      i, inner = self.loop(lo, hi)
      self.loop_state[r] = ((c, outer_head, outer_done, start), inner)
    elif r.arg[1] in (AxisType.THREAD, AxisType.GROUP_REDUCE):
      lo, hi = self.bound(end, self.core, self.ncores, 0), self.bound(end, self.core, self.ncores, 1)
      i, inner = self.loop(lo, hi)
      self.loop_state[r] = (None, inner)
    else:
      i, inner = self.loop(0, end)
      self.loop_state[r] = (None, inner)
    self.v[r] = i

  def next_chunk(self, into: VReg | None = None) -> VReg:
    c = into or self.new("g")
    self.ins("mov", Reg(c, 64), 1)
    self.ins("lock xadd", Mem(8, self.state), Reg(c, 64))
    return c

  def end_loop(self, r: UOp) -> None:
    outer, inner = self.loop_state[r]
    self.close(inner)
    if outer is None: return
    c, head, done, start = outer
    self.next_chunk(c)
    self.ins("jmp", head)
    self.loop_spans.append((start, len(self.code) - 1))
    self.place(done)
    # the last core out resets the counters for the next launch
    t, after = self.new("g"), self.label("counted")
    self.ins("mov", Reg(t, 32), 1)
    self.ins("lock xadd", Mem(4, self.state, disp=8), Reg(t, 32))
    self.ins("add", Reg(t, 32), 1)
    self.ins("cmp", Reg(t, 32), Reg(self.ncores, 32))
    self.ins("jne", after)
    self.ins("mov", Mem(8, self.state), 0)
    self.ins("mov", Mem(4, self.state, disp=8), 0)
    self.place(after)

  # ** nodes **

  def name(self, u: UOp) -> None:
    # constant vectors are read from the pool where they are used (the registers are better spent on variables)
    if u in self.offsets or u in self.from_memory or u in self.sunk or const_lanes(u) is not None: return
    if u.dtype.count > 1 and self.ren.vec == 1: raise self.fail(u, " (this CPU has no AVX2)")
    self.select(u)

  def select(self, u: UOp) -> None:
    # a rule selects the node's instructions and records its register (set), returning None: it rewrites nothing
    ISEL.rewrite(u, self)
    if u not in self.v and u.op is not Ops.CONST: raise self.fail(u)
    for n in self.vector_masks.get(u, ()): self.lane_masks[(u, n)] = self.splat(u, dtypes.bool.vec(n)) if u.dtype is dtypes.bool else self.lane_bits(u, n)

  def need(self, u: UOp) -> VReg:
    """u's register, u named here first if it was sunk to its use."""
    self.demand(u)
    return self.val(u)

  def demand(self, u: UOp) -> None:
    if u in self.sunk and u not in self.v and u not in self.from_memory:
      for s in u.src: self.demand(s)
      self.select(u)

  def sink(self, nodes: list[UOp]) -> set[UOp]:
    """The nodes that only fused multiply-adds read, directly or through each other: named where each is first read,
    a loaded value lives from its load to its last product instead of through all the loads before (a register
    tile's values would not fit the registers otherwise)."""
    out: set[UOp] = set()
    for u in reversed(nodes):
      if u.op is not Ops.CONST and (rs := self.users.get(u)) and all(r in self.fused or r in out for r in rs): out.add(u)
    return out

  def set(self, u: UOp, d: VReg) -> None: self.v[u] = d

  def int_alu(self, x: UOp) -> None:
    a, b = x.src
    op = x.op
    if x.dtype is dtypes.bool and op in (Ops.ADD, Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND
    mn = {Ops.ADD: "add", Ops.SUB: "sub", Ops.MUL: "imul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}[op]
    i = self.int_imm(b)
    if a.op is not Ops.CONST and op is Ops.ADD:  # lea writes a sum to a third register: no copy first
      d = self.new("g")
      self.ins("lea", Reg(d, 64), Mem(8, self.v[a], None if i is not None else self.val(b), 1, i or 0))
    elif a.op is not Ops.CONST and op is Ops.MUL and i is not None:
      d = self.new("g")
      self.ins("imul", Reg(d, 64), Reg(self.v[a], 64), i)
    else:
      d = self.copy(a)
      if i is not None and mn != "imul": self.ins(mn, Reg(d, 64), i)
      elif i is not None: self.ins("imul", Reg(d, 64), Reg(d, 64), i)
      else: self.ins(mn, Reg(d, 64), Reg(self.val(b), 64))
    self.normalize(d, x.dtype)
    return self.set(x, d)

  def int_unary(self, x: UOp) -> None:
    d = self.copy(x.src[0])
    self.ins("neg", Reg(d, 64))
    self.normalize(d, x.dtype)
    return self.set(x, d)

  def shift(self, x: UOp) -> None:
    a, b = x.src
    d = self.copy(a)
    mn = "shl" if x.op is Ops.SHL else "shr" if _unsigned(x.dtype) else "sar"
    if (i := self.int_imm(b)) is not None: self.ins(mn, Reg(d, 64), i & 63)
    else:
      self.ins("mov", Reg("rcx", 64), Reg(self.val(b), 64))
      self.ins(mn, Reg(d, 64), Reg("rcx", 8))
    self.normalize(d, x.dtype)
    return self.set(x, d)

  def flag(self, cc: str) -> VReg:
    d = self.new("g")
    self.ins(f"set{cc}", Reg(d, 8))
    self.ins("movzx", Reg(d, 32), Reg(d, 8))
    return d

  def int_cmp(self, x: UOp) -> None:
    a, b = x.src
    self.compare_ints(a, b)
    cc = {Ops.CMPLT: "b" if _unsigned(a.dtype) else "l", Ops.CMPNE: "ne", Ops.CMPEQ: "e"}[x.op]
    return self.set(x, self.flag(cc))

  def compare_ints(self, a: UOp, b: UOp) -> None:
    if (i := self.int_imm(b)) is not None: self.ins("cmp", Reg(self.val(a), 64), i)
    else: self.ins("cmp", Reg(self.val(a), 64), Reg(self.val(b), 64))

  def int_max(self, x: UOp) -> None:
    a, b = x.src
    d = self.copy(b)
    self.compare_ints(a, b)
    self.ins("cmova" if _unsigned(x.dtype) else "cmovg", Reg(d, 64), Reg(self.val(a), 64))
    return self.set(x, d)

  def where(self, x: UOp) -> None:
    c, t, f = x.src
    if self.cls(x.dtype) == "g":
      d = self.copy(f)
      self.ins("test", Reg(self.val(c), 32), Reg(self.val(c), 32))
      self.ins("cmovne", Reg(d, 64), Reg(self.val(t), 64))
      return self.set(x, d)
    return self.set(x, self.select_x(self.val(c), self.val(t), self.val(f), x.dtype))

  def select_x(self, c: VReg, t: VReg, f: VReg, dt: DType) -> VReg:
    """c ? t : f for float registers, c a bool (0 or 1) in a general register."""
    m, mx, d = self.new("g"), self.new("x"), self.new("x")
    self.ins("mov", Reg(m, 64), Reg(c, 64))
    self.ins("neg", Reg(m, 64))  # all ones where c
    wide = dt.scalar() in _WIDE
    self.ins("vmovq" if wide else "vmovd", Reg(mx, 128), Reg(m, 64 if wide else 32))
    self.ins("vblendvpd" if wide else "vblendvps", Reg(d, 128), Reg(f, 128), Reg(t, 128), Reg(mx, 128))
    return d

  def int_div(self, x: UOp) -> None:
    """C's truncating / and % (CDIV, CMOD) or Python's floor ones: 0 for a divisor of 0, a signed quotient by -1 wraps."""
    a, b = x.src
    op, dt = x.op, x.dtype
    unsigned, floor = _unsigned(dt), x.op in (Ops.FLOORDIV, Ops.FLOORMOD)
    div = op in (Ops.CDIV, Ops.FLOORDIV)
    bi = self.int_imm(b)
    if bi is not None and bi > 0 and bi & (bi - 1) == 0 and (unsigned or a.vmin >= 0 or floor):
      # by a power of two: a shift (floor division) or a mask, exact for any sign when flooring
      d = self.copy(a)
      if div: self.ins("shr" if unsigned else "sar", Reg(d, 64), bi.bit_length() - 1)
      elif bi - 1 < 2 ** 31: self.ins("and", Reg(d, 64), bi - 1)
      else: raise self.fail(x, ": a mask past 32 bits")
      self.normalize(d, dt)
      return self.set(x, d)
    if floor and (unsigned or a.vmin >= 0 and bi is not None and bi > 0): floor = False
    bv = self.val(b)
    safe, one = self.new("g"), self.const(1, dtypes.int64)
    self.ins("mov", Reg(safe, 64), Reg(bv, 64))
    self.ins("cmp", Reg(bv, 64), 0)
    self.ins("cmove", Reg(safe, 64), Reg(one, 64))  # a divisor that never traps
    if not unsigned:
      self.ins("cmp", Reg(bv, 64), -1)
      self.ins("cmove", Reg(safe, 64), Reg(one, 64))
    self.ins("mov", Reg("rax", 64), Reg(self.val(a), 64))
    if unsigned:
      self.ins("xor", Reg("rdx", 32), Reg("rdx", 32))
      self.ins("div", Reg(safe, 64))
    else:
      self.ins("cqo")
      self.ins("idiv", Reg(safe, 64))
    q, r = self.new("g"), self.new("g")
    self.ins("mov", Reg(q, 64), Reg("rax", 64))
    self.ins("mov", Reg(r, 64), Reg("rdx", 64))
    d = q if div else r
    if floor:  # a remainder of the divisor's opposite sign moves the quotient down one and the remainder up by it
      s, moved = self.new("g"), self.new("g")
      self.ins("mov", Reg(s, 64), Reg(r, 64))
      self.ins("xor", Reg(s, 64), Reg(bv, 64))
      self.ins("mov", Reg(moved, 64), Reg(q, 64) if div else Reg(r, 64))
      if div: self.ins("sub", Reg(moved, 64), 1)
      else: self.ins("add", Reg(moved, 64), Reg(bv, 64))
      skip = self.label("exact")
      self.ins("test", Reg(r, 64), Reg(r, 64))
      self.ins("je", skip)
      self.ins("test", Reg(s, 64), Reg(s, 64))
      self.ins("cmovs", Reg(d, 64), Reg(moved, 64))
      self.place(skip)
    zero = self.const(0, dtypes.int64)
    if div and not unsigned:
      neg = self.new("g")
      self.ins("mov", Reg(neg, 64), Reg(self.val(a), 64))
      self.ins("neg", Reg(neg, 64))
      self.ins("cmp", Reg(bv, 64), -1)
      self.ins("cmove", Reg(d, 64), Reg(neg, 64))
    self.ins("cmp", Reg(bv, 64), 0)
    self.ins("cmove", Reg(d, 64), Reg(zero, 64))
    self.normalize(d, dt)
    return self.set(x, d)

  # floats: scalar SSE/AVX instructions on xmm registers

  def sfx(self, dt: DType) -> str: return "sd" if dt.scalar() in _WIDE else "ss"

  def float_alu(self, x: UOp) -> None:
    a, b = x.src
    mn = {Ops.ADD: "vadd", Ops.SUB: "vsub", Ops.MUL: "vmul", Ops.FDIV: "vdiv", Ops.CDIV: "vdiv"}[x.op] + self.sfx(x.dtype)
    d = self.new("x")
    self.ins(mn, Reg(d, 128), Reg(self.val(a), 128), Reg(self.val(b), 128))
    return self.set(x, self.rounded(d, x.dtype))

  def float_unary(self, x: UOp) -> None:
    a, d, s = self.val(x.src[0]), self.new("x"), self.sfx(x.dtype)
    if x.op is Ops.SQRT: self.ins(f"vsqrt{s}", Reg(d, 128), Reg(a, 128), Reg(a, 128))
    elif x.op is Ops.TRUNC: self.ins(f"vround{s}", Reg(d, 128), Reg(a, 128), Reg(a, 128), 11)  # toward 0, no exceptions
    elif x.op is Ops.RECIPROCAL: self.ins(f"vdiv{s}", Reg(d, 128), Reg(self.const(1.0, x.dtype), 128), Reg(a, 128))
    else:  # NEG: the sign bit flipped
      sign = self.const(-0.0, x.dtype)
      self.ins("vxorpd" if s == "sd" else "vxorps", Reg(d, 128), Reg(a, 128), Reg(sign, 128))
    return self.set(x, self.rounded(d, x.dtype))

  def float_max(self, x: UOp) -> None:
    """(a > b || a != a) ? a : b: NaN if either is NaN."""
    a, b = (self.val(s) for s in x.src)
    s, t, m, d = self.sfx(x.dtype), self.new("x"), self.new("x"), self.new("x")
    self.ins(f"vmax{s}", Reg(t, 128), Reg(b, 128), Reg(a, 128))   # b > a ? b : a (a where either is NaN)
    self.ins(f"vcmp{s}", Reg(m, 128), Reg(b, 128), Reg(b, 128), 3)  # b unordered
    self.ins("vblendvpd" if s == "sd" else "vblendvps", Reg(d, 128), Reg(t, 128), Reg(b, 128), Reg(m, 128))
    return self.set(x, d)

  def float_cmp(self, x: UOp) -> None:
    a, b = (self.val(s) for s in x.src)
    ucom = f"vucomi{self.sfx(x.src[0].dtype)}"
    if x.op is Ops.CMPLT:  # b > a: false when unordered
      self.ins(ucom, Reg(b, 128), Reg(a, 128))
      return self.set(x, self.flag("a"))
    self.ins(ucom, Reg(a, 128), Reg(b, 128))
    d, p = self.flag("e" if x.op is Ops.CMPEQ else "ne"), self.flag("np" if x.op is Ops.CMPEQ else "p")
    self.ins("and" if x.op is Ops.CMPEQ else "or", Reg(d, 32), Reg(p, 32))
    return self.set(x, d)

  # ** memory **

  def address(self, index: UOp, at: VReg | None = None) -> Mem:
    buf, idx = index.src
    size = _storage_size(buf.dtype.base)
    base = self.v[buf]
    if at is None and (i := self.int_imm(idx)) is not None and -2 ** 31 <= i * size < 2 ** 31: return Mem(size, base, disp=i * size)
    if at is None and idx in self.offsets and -2 ** 31 <= (disp := self.int_imm(idx.src[1]) * size) < 2 ** 31:  # type: ignore[operator]
      return Mem(size, base, self.val(idx.src[0]), size, disp)
    return Mem(size, base, at or self.val(idx), size)

  def load(self, x: UOp) -> None:
    index, dt = x.src[0], x.dtype.scalar()
    gate = next((s for s in x.src[1:] if s.dtype is dtypes.bool), None)
    if x.dtype.count > 1 or len(x.src) > (2 if gate is not None else 1): raise self.fail(x, " (a vector of a type with no vector registers here)")
    at, zero = None, None
    if gate is not None:  # a closed gate reads element 0 instead (every buffer has one) and gives 0
      at, zero = self.new("g"), self.const(0, dtypes.int64)
      idx = index.src[1]
      if idx.op is Ops.CONST: self.ins("mov", Reg(at, 64), _canonical(int(idx.arg), idx.dtype.scalar()))
      else: self.ins("mov", Reg(at, 64), Reg(self.v[idx], 64))
      self.ins("test", Reg(self.val(gate), 32), Reg(self.val(gate), 32))
      self.ins("cmove", Reg(at, 64), Reg(zero, 64))
    mem = self.address(index, at)
    if gate is None and dt in (dtypes.float32, *_WIDE):
      d = self.new("x")
      self.ins("vmovsd" if dt in _WIDE else "vmovss", Reg(d, 128), mem)
      return self.set(x, d)
    g = self.new("g")
    size = mem.size
    if dt in INTS: self.load_int(g, mem, dt)
    else: self.ins("movzx" if size < 4 else "mov", Reg(g, 32 if size < 8 else 64), mem)
    if gate is not None:
      self.ins("test", Reg(self.val(gate), 32), Reg(self.val(gate), 32))
      self.ins("cmove", Reg(g, 64), Reg(zero, 64))  # type: ignore[arg-type]
    return self.set(x, g if dt in INTS else self.float_of_bits(g, dt))

  def load_int(self, d: VReg, mem: Mem, dt: DType) -> None:
    if mem.size == 8: self.ins("mov", Reg(d, 64), mem)
    elif _unsigned(dt): self.ins("mov" if mem.size == 4 else "movzx", Reg(d, 32), mem)
    else: self.ins("movsxd" if mem.size == 4 else "movsx", Reg(d, 64), mem)

  def store(self, st: UOp) -> None:
    index, val = st.src
    dt = val.dtype.scalar()
    if val.dtype.count > 1: return self.store_vector(st)
    mem = self.address(index)
    if mem.index is not None:  # the address in one register: a spilled base, index and value need no third scratch
      p = self.new("g")
      self.ins("lea", Reg(p, 64), Mem(8, mem.base, mem.index, mem.scale, mem.disp))
      mem = Mem(mem.size, p)
    if dt in INTS:
      if (i := self.int_imm(val)) is not None: self.ins("mov", mem, i & ((1 << (8 * mem.size)) - 1) if mem.size < 4 else i)
      else: self.ins("mov", mem, Reg(self.val(val), 8 * mem.size))
      return
    v = self.val(val)
    if dt in (dtypes.float32,): self.ins("vmovss", mem, Reg(v, 128))
    elif dt in _WIDE: self.ins("vmovsd", mem, Reg(v, 128))
    else:  # half and bfloat16: their 16 bits
      g = self.new("g")
      if dt is dtypes.half:
        h = self.new("x")
        self.ins("vcvtps2ph", Reg(h, 128), Reg(v, 128), 0)
        self.ins("vmovd", Reg(g, 32), Reg(h, 128))
      else:
        self.ins("vmovd", Reg(g, 32), Reg(v, 128))
        self.ins("shr", Reg(g, 32), 16)
      self.ins("mov", mem, Reg(g, 16))

  # ** reduces **

  def step(self, acc: UOp, a: VReg, term: UOp | VReg) -> None:
    """a = a op term, in place."""
    op, dt = acc.arg[0], acc.dtype.scalar()
    t = term if isinstance(term, VReg) else self.val(term)
    if self.cls(dt) == "g":
      if dt is dtypes.bool: op = Ops.OR if op in (Ops.ADD, Ops.MAX) else Ops.AND
      if op is Ops.MAX:
        self.ins("cmp", Reg(t, 64), Reg(a, 64))
        self.ins("cmova" if _unsigned(dt) else "cmovg", Reg(a, 64), Reg(t, 64))
        return
      self.ins({Ops.ADD: "add", Ops.MUL: "imul", Ops.OR: "or", Ops.AND: "and"}[op], Reg(a, 64), Reg(t, 64))
      self.normalize(a, dt)
      return
    s = self.sfx(dt)
    if op is Ops.MAX:  # (t > a || t != t) ? t : a
      m, r = self.new("x"), self.new("x")
      self.ins(f"vmax{s}", Reg(r, 128), Reg(t, 128), Reg(a, 128))  # t > a ? t : a (a where either is NaN)
      self.ins(f"vcmp{s}", Reg(m, 128), Reg(t, 128), Reg(t, 128), 3)
      self.ins("vblendvpd" if s == "sd" else "vblendvps", Reg(r, 128), Reg(r, 128), Reg(t, 128), Reg(m, 128))
      self.ins("vmovaps", Reg(a, 128), Reg(r, 128))
      return
    r = self.new("x")
    self.ins(f"v{'add' if op is Ops.ADD else 'mul'}{s}", Reg(r, 128), Reg(a, 128), Reg(t, 128))
    self.ins("vmovaps", Reg(a, 128), Reg(r, 128))

  def round_acc(self, acc: UOp) -> None:
    """A half accumulator is a half: rounded after each step (bfloat16's is a float, as in the C renderer)."""
    if acc.dtype.scalar() is dtypes.half:
      a = self.acc[acc]
      self.ins("vmovaps", Reg(a, 128), Reg(self.rounded(a, dtypes.half), 128))

  def reduce_section(self) -> None:
    n_out = self.n_out
    for acc in self.reduces:
      if acc.dtype.count > 1:
        self.acc[acc] = self.vacc_init(acc)
        continue
      init = self.const(identity_element(acc.arg[0], acc.dtype.scalar()), acc.dtype.scalar())
      a = self.acc[acc] = self.new(init.cls)
      self.ins("vmovaps" if init.cls == "x" else "mov", Reg(a, 128 if init.cls == "x" else 64), Reg(init, 128 if init.cls == "x" else 64))
    self.sunk = self.sink(self.at.get(n_out + len(self.rloops), []))
    for j, r in enumerate(self.rloops):
      self.open_loop(r, f"ridx{n_out + j}")
      for u in self.at.get(n_out + j + 1, ()): self.name(u)
    # the accumulators' terms taken in turns, each accumulator's in its order: what the i-th terms share (a conv's
    # window, read by every output channel) is then read by consecutive instructions and lives briefly
    for i, j in sorted((i, j) for j, acc in enumerate(self.reduces) for i in range(acc.arg[1])):
      acc, term = self.reduces[j], self.reduces[j].src[i]
      if acc.dtype.count > 1: self.vterm(acc, term)
      elif term in self.fused and self.ren.fma:
        self.ins(f"vfmadd231{self.sfx(acc.dtype)}", Reg(self.acc[acc], 128), Reg(self.need(term.src[0]), 128), Reg(self.need(term.src[1]), 128))
      elif term in self.fused:
        p = self.new("x")
        self.ins(f"vmul{self.sfx(acc.dtype)}", Reg(p, 128), Reg(self.need(term.src[0]), 128), Reg(self.need(term.src[1]), 128))
        self.step(acc, self.acc[acc], p)
      else: self.step(acc, self.acc[acc], term)
      self.round_acc(acc)
    for r in reversed(self.rloops): self.end_loop(r)
    if any(r.arg[1] is AxisType.GROUP_REDUCE for r in self.rloops): self.combine()
    for acc in self.reduces: self.v[acc] = self.acc[acc]

  def combine(self) -> None:
    """Two-stage reduce, as CWriter.combine: each core leaves its accumulators in its slot of the state; the last core
    to finish adds up the others' and goes on to the store."""
    # each core's accumulators side by side, 8 bytes a scalar and 32 a vector
    offsets = [64 + sum(32 if a.dtype.count > 1 else 8 for a in self.reduces[:i]) for i in range(len(self.reduces) + 1)]
    self.stateful, self.part_stride = True, -(-(offsets[-1] - 64) // 64) * 64
    def part_of(core: VReg) -> VReg:
      p = self.new("g")
      self.ins("imul", Reg(p, 64), Reg(core, 64), self.part_stride)
      self.ins("add", Reg(p, 64), Reg(self.state, 64))
      return p
    mine = part_of(self.core)
    for i, acc in enumerate(self.reduces):
      a = self.acc[acc]
      if acc.dtype.count > 1: self.ins("vmovups", Mem(32, mine, disp=offsets[i]), Reg(a, 256))
      elif a.cls == "x": self.ins("vmovsd", Mem(8, mine, disp=offsets[i]), Reg(a, 128))
      else: self.ins("mov", Mem(8, mine, disp=offsets[i]), Reg(a, 64))
    t = self.new("g")
    self.ins("mov", Reg(t, 32), 1)
    self.ins("lock xadd", Mem(4, self.state, disp=12), Reg(t, 32))
    self.ins("add", Reg(t, 32), 1)
    self.ins("cmp", Reg(t, 32), Reg(self.ncores, 32))
    self.ins("jne", self.exit)
    self.ins("mov", Mem(4, self.state, disp=12), 0)
    c, loop = self.loop(0, self.ncores)
    skip = self.label("self")
    self.ins("cmp", Reg(c, 64), Reg(self.core, 64))
    self.ins("je", skip)
    theirs = part_of(c)
    for i, acc in enumerate(self.reduces):
      a, p = self.acc[acc], self.new(self.acc[acc].cls)
      if acc.dtype.count > 1:
        self.ins("vmovups", Reg(p, 256), Mem(32, theirs, disp=offsets[i]))
        self.vstep(acc, a, p)
        continue
      if a.cls == "x": self.ins("vmovsd", Reg(p, 128), Mem(8, theirs, disp=offsets[i]))
      else: self.ins("mov", Reg(p, 64), Mem(8, theirs, disp=offsets[i]))
      self.step(acc, a, p)
      self.round_acc(acc)
    self.place(skip)
    self.close(loop)

  # ** the program **

  def finish(self) -> str:
    code = self.prologue() + self.code + [Ins("label", [self.exit])]
    spans = [(a + len(code) - len(self.code) - 1, b + len(code) - len(self.code) - 1) for a, b in self.loop_spans]
    # xmm16-31 are left out: VEX instructions (vblendvps, vcmpss to a register, vroundss) cannot name them
    pools = {"g": list(GPR_POOL), "x": [f"xmm{i}" for i in range(13)]}
    alloc = linear_scan(code, spans, pools, {"g": 8, "x": 32})
    frame = -(-alloc.frame // 16) * 16
    def reload(reg: str, v: VReg, off: int) -> Ins:
      return Ins("mov", [Reg(reg, 64), Mem(8, "rsp", disp=off)]) if v.cls == "g" else Ins("vmovups", [Reg(reg, 256), Mem(32, "rsp", disp=off)])
    def store(reg: str, v: VReg, off: int) -> Ins:
      return Ins("mov", [Mem(8, "rsp", disp=off), Reg(reg, 64)]) if v.cls == "g" else Ins("vmovups", [Mem(32, "rsp", disp=off), Reg(reg, 256)])
    body = rewrite(code, alloc, SCRATCH, reload, store, spelled)
    saved = [r for r in CALLEE_SAVED if r in alloc.assigned.values()]
    head: list[tuple] = [("label", self.k.name), *(("push", r) for r in saved)]
    if frame: head.append(("sub", "rsp", frame))
    tail: list[tuple] = [("add", "rsp", frame)] if frame else []
    tail += [*(("pop", r) for r in reversed(saved)), ("ret",)]
    if self.pool: tail.append(("align", 32))
    for data, at in self.pool.items(): tail += [("label", at), ("data", data)]
    lines = [f"; x86-64 machine code for {self.k.name} ({len(alloc.slots)} values spilled to {alloc.frame} bytes)"]
    if self.stateful: lines.insert(0, f"; {STATE_MARK}{self.part_stride}")
    program = [ins for ins in (*head, *body, *tail) if not (ins[0] in ("mov", "vmovaps") and ins[1] == ins[2] and ins[1] in _WHOLE)]
    for ins in program:
      if ins[0] == "label": lines.append(f"{ins[1]}:")
      elif ins[0] == "data": lines.append(f"  data {ins[1].hex()}")
      else: lines.append(f"  {ins[0]} {', '.join(map(operand_text, ins[1:]))}".rstrip())
    return Assembly("\n".join(lines) + "\n", program)


class Assembly(str):
  """A kernel's assembly text (what DEBUG=4 prints, and what runtime/x86.py reads back) with the instructions it spells
  as the encoder takes them, so that the build reads no text."""
  program: list[tuple]

  def __new__(cls, text: str, program: list[tuple]) -> Assembly:
    self = super().__new__(cls, text)
    self.program = program
    return self


def spelled(ins: Ins, where) -> tuple:
  """An instruction as the encoder takes it (tinyhybrid._core.x86.assemble), its virtual registers at their places."""
  if ins.mn in ("label", "data"): return (ins.mn, ins.ops[0])
  out: list = [ins.mn]
  for o in ins.ops:
    t = type(o)
    if t is Reg: out.append(reg_name(where[o.r] if type(o.r) is VReg else o.r, o.bits))
    elif t is Mem:
      base = where[o.base] if type(o.base) is VReg else o.base
      if isinstance(base, str) and base.startswith("."): out.append(("mem", o.size, "rip", None, 1, o.disp, base))  # a pool constant
      else: out.append(("mem", o.size, base, where[o.index] if type(o.index) is VReg else o.index, o.scale, o.disp))
    elif t is str: out.append(("label", o))
    else: out.append(o)
  return tuple(out)


def _canonical(v: int, dt: DType) -> int:
  """v as dt holds it, extended to 64 bits the way a register holds dt (signed types sign-extended)."""
  bits = _bits(dt)
  v &= (1 << bits) - 1
  if not _unsigned(dt) and v >= 1 << (bits - 1): v -= 1 << bits
  return v if v < 2 ** 63 else v - 2 ** 64


def _float_bits(v: float, dt: DType) -> int:
  """The 32 bits of v as a float (half and bfloat16 are computed in float: their values are floats)."""
  import numpy as np
  with np.errstate(over="ignore"): return int(np.array(v, np.float32).view(np.uint32))


def _storage_size(dt: DType) -> int: return 8 if dt.scalar()._is_weak else max(1, dt.scalar().itemsize)


def _rule(fn_name: str):
  return lambda ctx, x: getattr(ctx, fn_name)(x)  # None: the rule emits instructions, it replaces no node


_I, _F = tuple(INTS), tuple(FLOATS)
# instruction selection: a rule per (op, kind of value); the C++ matcher picks it by the node's op. A node no rule
# takes is refused (X86Writer.name); a constant needs none (it is materialized where it is used).
ISEL = PatternMatcher(VECTOR_RULES + [
  (UPat(Ops.LOAD, dtype=(*_I, *_F), name="x"), _rule("load")),
  (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.AND, Ops.OR, Ops.XOR), dtype=_I, name="x"), _rule("int_alu")),
  (UPat(Ops.NEG, dtype=_I, name="x"), _rule("int_unary")),
  (UPat((Ops.SHL, Ops.SHR), dtype=_I, name="x"), _rule("shift")),
  (UPat(Ops.MAX, dtype=_I, name="x"), _rule("int_max")),
  (UPat((Ops.CDIV, Ops.CMOD, Ops.FLOORDIV, Ops.FLOORMOD), dtype=_I, name="x"), _rule("int_div")),
  (UPat(GroupOp.Comparison, src=(UPat(dtype=_I), UPat()), name="x"), _rule("int_cmp")),
  (UPat(GroupOp.Comparison, src=(UPat(dtype=_F), UPat()), name="x"), _rule("float_cmp")),
  (UPat((Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.CDIV), dtype=_F, name="x"), _rule("float_alu")),
  (UPat((Ops.SQRT, Ops.TRUNC, Ops.RECIPROCAL, Ops.NEG), dtype=_F, name="x"), _rule("float_unary")),
  (UPat(Ops.MAX, dtype=_F, name="x"), _rule("float_max")),
  (UPat(Ops.WHERE, dtype=(*_I, *_F), name="x"), _rule("where")),
  (UPat(Ops.CAST, dtype=(*_I, *_F), src=(UPat(dtype=(*_I, *_F)),), name="x"), _rule("cast_value")),
  (UPat(Ops.BITCAST, dtype=(*_I, *_F), src=(UPat(dtype=(*_I, *_F)),), name="x"), _rule("bitcast_value")),
])


class X86Renderer(Renderer):
  """x86-64 machine code for this host (see the module doc): vectors of 8 float32, int32 or uint32 lanes where the CPU
  has AVX2 (renderer/isa/x86_vector.py; other types lane by lane), scalar code where it has not; FMA and AVX-512's
  unsigned conversions where the CPU has them."""
  device = "CPU"
  vec_dtypes = LANE_DTYPES
  vector_float_ops = frozenset((Ops.SQRT, Ops.TRUNC))

  def __init__(self, flags: frozenset[str] = frozenset()):
    self.fma, self.avx512 = "fma" in flags, "avx512f" in flags
    avx2 = "avx2" in flags
    # 16 vector registers; three of them are kept for reloading spilled values (SCRATCH)
    self.vec, self.scalar_registers, self.registers = (8, False, 13) if avx2 else (1, True, 16)
    if avx2: self.vector_transcendentals = frozenset({dtypes.float32})

  def supported_dtypes(self) -> set[DType]: return set(INTS) | set(FLOATS) - {dtypes.weakfloat} | {dtypes.float64}

  # a kernel's selection and allocation make tens of thousands of short-lived objects: with a large heap around them
  # (a test session's, a model's) the collector's passes cost a fifth of a build
  @disable_gc()
  def render(self, k: LoweredKernel) -> str:
    self.check_dtypes(k, "the x86 renderer")
    return X86Writer(k, self).write()
