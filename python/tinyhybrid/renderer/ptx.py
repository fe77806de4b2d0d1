"""PTX straight from the kernel IR, without NVRTC (tinygrad's PTX renderer): the nodes are placed as for the C-family
languages (CStyleWriter.write: each at the depth of the innermost loop it uses, a reduce after its loops), and each
becomes instructions on virtual registers, which ptxas allocates. Registers are untyped by size (%h 16-bit, %r
32-bit, %rd 64-bit) and the instructions typed, plus %p predicates for bools. A vector value is a list of lane
registers: lane-wise instructions, and one ld/st.global.v2/v4 per 16 bytes where the access is aligned.

The grid: a GLOBAL range is %ctaid, a LOCAL or GROUP_REDUCE one %tid; a grouped reduce's partial results go through
.shared memory behind bar.sync. Loops are branches around labels. int8 values live in 16-bit registers and are
narrowed after every operation; bfloat16 is computed in f32 and rounded (cvt.rn.bf16.f32) after every operation;
half is native f16 (sm_53 and later) except for division and the transcendental functions, computed in f32.
exp2, log2 and sin are the hardware's approximations (ex2/lg2/sin.approx) for f32 and half; PTX has no f64 form of
them, so those of double are decomposed into other instructions first (codegen/decomp/transcendental.py), to within an ulp."""
from __future__ import annotations

import re
import struct

from tinyhybrid.codegen.gpu import grid
from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.renderer import NV_TENSOR_CORES, Renderer
from tinyhybrid.renderer.cstyle import CStyleWriter, var_name
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp, identity_element

# dtype name -> (instruction type, register class)
_TYPES = {"bool": ("pred", "p"), "signed char": ("s16", "h"), "unsigned char": ("u16", "h"), "short": ("s16", "h"),
          "unsigned short": ("u16", "h"), "int": ("s32", "r"), "unsigned int": ("u32", "r"), "long": ("s64", "rd"),
          "unsigned long": ("u64", "rd"), "weakint": ("s64", "rd"), "half": ("f16", "h"), "__bf16": ("f32", "r"),
          "float": ("f32", "r"), "double": ("f64", "rd"), "weakfloat": ("f64", "rd")}
_MEM = {"bool": "u8", "signed char": "s8", "unsigned char": "u8", "half": "b16", "__bf16": "b16"}  # as held in memory
_BITS = {"h": 16, "r": 32, "rd": 64}
_SPECIAL = (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP)
_APPROX = {Ops.EXP2: "ex2.approx.f32", Ops.LOG2: "lg2.approx.f32", Ops.SIN: "sin.approx.f32", Ops.SQRT: "sqrt.rn.f32",
           Ops.TRUNC: "cvt.rzi.f32.f32", Ops.RECIPROCAL: "rcp.rn.f32"}
_CMP = {Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}
_BITWISE = {Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor"}


def ptx_version(arch: str) -> str:
  """The PTX ISA version a module for arch declares: the oldest that knows the architecture."""
  sm = int(re.sub(r"\D", "", arch))
  return "8.7" if sm >= 120 else "8.6" if sm >= 100 else "7.8" if sm >= 89 else "7.0"


def _is_float(t: str) -> bool: return t[0] == "f"
def _signed(t: str) -> str: return "s" + t[1:] if t[0] == "u" else t


class PTXWriter(CStyleWriter):
  LACKS_TRANSCENDENTAL = frozenset({dtypes.float64, dtypes.weakfloat})

  def __init__(self, k: LoweredKernel, ren: PTXRenderer):
    super().__init__(k)
    self.ren = ren
    self.v: dict[UOp, list[str]] = {}   # a node's lane registers (one for a scalar)
    self.nregs = {"p": 0, "h": 0, "r": 0, "rd": 0}
    self.shared: list[str] = []
    self.labels = 0

  # ** registers and instructions **

  def reg(self, cls: str) -> str:
    n = self.nregs[cls]
    self.nregs[cls] = n + 1
    return f"%{cls}{n}"

  def ins(self, line: str) -> None: self.emit(line + ";")
  def label(self, what: str) -> str:
    self.labels += 1
    return f"$L_{what}{self.labels}"

  def info(self, dt: DType) -> tuple[str, str]:
    try: return _TYPES[dt.scalar().name]
    except KeyError: raise NotImplementedError(f"the PTX renderer has no type for {dt}") from None

  def narrow(self, d: str, dt: DType) -> None:
    """int8 in a 16-bit register: back to its 8 bits after an operation."""
    if dt.scalar() in (dtypes.int8, dtypes.uint8):
      t = "s" if dt.scalar() is dtypes.int8 else "u"
      self.ins(f"cvt.{t}16.{t}8 {d}, {d}")

  def round_bf16(self, d: str) -> None:
    h, r = self.reg("h"), self.reg("r")
    self.ins(f"cvt.rn.bf16.f32 {h}, {d}")
    self.ins(f"cvt.u32.u16 {r}, {h}")
    self.ins(f"shl.b32 {d}, {r}, 16")

  def const(self, v, dt: DType) -> str:
    """A register holding the constant v of dtype dt."""
    t, cls = self.info(dt)
    if cls == "p":
      r, d = self.reg("r"), self.reg("p")
      self.ins(f"mov.b32 {r}, {1 if v else 0}")
      self.ins(f"setp.ne.b32 {d}, {r}, 0")
      return d
    d = self.reg(cls)
    if dt.scalar() is dtypes.half: self.ins(f"mov.b16 {d}, 0x{struct.unpack('<H', struct.pack('<e', float(v)))[0]:04X}")
    elif t == "f32":
      f = float(v)
      bits = struct.unpack("<I", struct.pack("<f", f))[0] if abs(f) < 3.5e38 or f != f else (0x7F800000 | (1 << 31 if f < 0 else 0))
      if dt.scalar() is dtypes.bfloat16 and bits & 0x7FFFFFFF <= 0x7F800000: bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
      self.ins(f"mov.b32 {d}, 0f{bits:08X}")
    elif t == "f64": self.ins(f"mov.b64 {d}, 0d{struct.unpack('<Q', struct.pack('<d', float(v)))[0]:016X}")
    else:
      bits = _BITS[cls]
      self.ins(f"mov.b{bits} {d}, 0x{int(v) & ((1 << bits) - 1):X}U")
    return d

  # ** the frame **

  def params(self) -> None:
    k = self.k
    self.param_decls: list[str] = []
    for i, b in enumerate(k.buffers):
      p = UOp(Ops.PARAM, b.dtype.ptr(b.size), (), i)
      d = self.reg("rd")
      self.ins(f"ld.param.u64 {d}, [data{i}]")
      self.ins(f"cvta.to.global.u64 {d}, {d}")
      self.v[p] = [d]
      self.param_decls.append(f".param .u64 data{i}")
    for v in k.vars:
      d = self.reg("rd")
      self.ins(f"ld.param.s64 {d}, [{var_name(v)}]")
      self.v[v] = [d]
      self.param_decls.append(f".param .s64 {var_name(v)}")
    gl, lo = grid(self.loops, self.rloops)
    self.dims = {r: d for rs in (gl, lo) for d, r in enumerate(rs)}
    self.group = next((r for r in self.rloops if r.arg[1] is AxisType.GROUP_REDUCE), None)
    self.loop_labels: dict[UOp, tuple[str, str, bool]] = {}

  def open_loop(self, r: UOp, nm: str) -> None:
    d = self.reg("rd")
    self.v[r] = [d]
    if r.arg[1] in _SPECIAL:
      s = self.reg("r")
      self.ins(f"mov.u32 {s}, %{'ctaid' if r.arg[1] is AxisType.GLOBAL else 'tid'}.{'xyz'[self.dims[r]]}")
      self.ins(f"cvt.u64.u32 {d}, {s}")
      return
    top, end = self.label("loop"), self.label("end")
    fixed = r.src[0].op is Ops.CONST  # at least one step: the test goes at the bottom
    self.loop_labels[r] = (top, end, fixed)
    self.ins(f"mov.b64 {d}, 0")
    self.emit(f"{top}:")
    if not fixed:
      p = self.reg("p")
      self.ins(f"setp.ge.s64 {p}, {d}, {self.v[r.src[0]][0]}")
      self.ins(f"@{p} bra {end}")
    self.depth += 1

  def end_loop(self, r: UOp) -> None:
    if r.arg[1] in _SPECIAL: return
    top, end, fixed = self.loop_labels[r]
    d = self.v[r][0]
    self.depth -= 1
    self.ins(f"add.s64 {d}, {d}, 1")
    if fixed:
      p = self.reg("p")
      self.ins(f"setp.lt.s64 {p}, {d}, {self.v[r.src[0]][0]}")
      self.ins(f"@{p} bra {top}")
    else: self.ins(f"bra.uni {top}")
    self.emit(f"{end}:")

  # ** nodes **

  def name(self, u: UOp) -> None:
    op, dt = u.op, u.dtype
    if op is Ops.WMMA: return  # a step of its reduce (mma)
    if op is Ops.CONST:
      r = self.const(u.arg, dt.scalar())
      self.v[u] = [r] * dt.count
      return
    if op is Ops.VECTORIZE:
      self.v[u] = [self.v[s][0] for s in u.src]
      return
    if op is Ops.GEP:
      self.v[u] = [self.v[u.src[0]][u.arg[0]]]
      return
    if op is Ops.LOAD:
      self.v[u] = self.load(u)
      return
    n = dt.count
    srcs = [self.v[s] * (n if len(self.v[s]) == 1 else 1) for s in u.src]
    self.v[u] = [self.alu(u, [s[i] for s in srcs]) for i in range(n)]

  def alu(self, u: UOp, s: list[str]) -> str:
    """One lane of an operation on registers."""
    op, dt = u.op, u.dtype.scalar()
    t, cls = self.info(dt)
    if op is Ops.CAST: return self.cast(u.src[0].dtype.scalar(), dt, s[0])
    if op is Ops.BITCAST: return self.bitcast(u.src[0].dtype.scalar(), dt, s[0])
    if op in _CMP:
      st, _ = self.info(u.src[0].dtype)
      d = self.reg("p")
      if st == "pred":
        if op is Ops.CMPLT:  # a < b on bools: !a & b
          na = self.reg("p")
          self.ins(f"not.pred {na}, {s[0]}")
          self.ins(f"and.pred {d}, {na}, {s[1]}")
        else:
          self.ins(f"xor.pred {d}, {s[0]}, {s[1]}")
          if op is Ops.CMPEQ: self.ins(f"not.pred {d}, {d}")
        return d
      cmp = "neu" if op is Ops.CMPNE and _is_float(st) else _CMP[op]  # NaN != x holds
      self.ins(f"setp.{cmp}.{st} {d}, {s[0]}, {s[1]}")
      return d
    if op is Ops.WHERE:
      d = self.reg(cls)
      if cls == "p":
        a, b, nc = self.reg("p"), self.reg("p"), self.reg("p")
        self.ins(f"and.pred {a}, {s[0]}, {s[1]}")
        self.ins(f"not.pred {nc}, {s[0]}")
        self.ins(f"and.pred {b}, {nc}, {s[2]}")
        self.ins(f"or.pred {d}, {a}, {b}")
      else: self.ins(f"selp.b{_BITS[cls]} {d}, {s[1]}, {s[2]}, {s[0]}")
      return d
    d = self.reg(cls)
    if cls == "p":
      bop = {Ops.ADD: "or", Ops.MUL: "and", Ops.MAX: "or", **_BITWISE}.get(op)
      if bop is None: raise NotImplementedError(f"PTX: {op} on bools")
      self.ins(f"{bop}.pred {d}, {s[0]}, {s[1]}")
      return d
    if dt is dtypes.half and op in (Ops.FDIV, *_APPROX):
      f = [self.reg("r") for _ in s]
      for fi, si in zip(f, s): self.ins(f"cvt.f32.f16 {fi}, {si}")
      r = self.reg("r")
      if op is Ops.FDIV: self.ins(f"div.rn.f32 {r}, {f[0]}, {f[1]}")
      else: self.ins(f"{_APPROX[op]} {r}, {f[0]}")
      self.ins(f"cvt.rn.f16.f32 {d}, {r}")
      return d
    if op in (Ops.ADD, Ops.SUB):
      self.ins(f"{'add' if op is Ops.ADD else 'sub'}{'.rn' if _is_float(t) else ''}.{t} {d}, {s[0]}, {s[1]}")
    elif op is Ops.MUL: self.ins(f"mul.{'rn' if _is_float(t) else 'lo'}.{t} {d}, {s[0]}, {s[1]}")
    elif op is Ops.NEG: self.ins(f"neg.{_signed(t)} {d}, {s[0]}")
    elif op is Ops.FDIV: self.ins(f"div.rn.{t} {d}, {s[0]}, {s[1]}")
    elif op in (Ops.CDIV, Ops.CMOD):
      if _is_float(t): raise NotImplementedError(f"PTX: {op} on {dt}")
      self.int_div(u, t, cls, d, s)
    elif op in (Ops.FLOORDIV, Ops.FLOORMOD): self.floor_div(u, t, cls, d, s)
    elif op in _BITWISE: self.ins(f"{_BITWISE[op]}.b{_BITS[cls]} {d}, {s[0]}, {s[1]}")
    elif op in (Ops.SHL, Ops.SHR):
      amt = s[1]
      if _BITS[self.info(u.src[1].dtype)[1]] != 32:
        amt = self.reg("r")
        self.ins(f"cvt.u32.{self.info(u.src[1].dtype)[0][0]}{_BITS[self.info(u.src[1].dtype)[1]]} {amt}, {s[1]}")
      self.ins(f"{'shl.b' + str(_BITS[cls]) if op is Ops.SHL else 'shr.' + t} {d}, {s[0]}, {amt}")
    elif op is Ops.MAX:
      if _is_float(t):  # (a > b || a != a) ? a : b, as the other backends
        p, q = self.reg("p"), self.reg("p")
        self.ins(f"setp.gt.{t} {p}, {s[0]}, {s[1]}")
        self.ins(f"setp.nan.{t} {q}, {s[0]}, {s[0]}")
        self.ins(f"or.pred {p}, {p}, {q}")
        self.ins(f"selp.b{_BITS[cls]} {d}, {s[0]}, {s[1]}, {p}")
      else: self.ins(f"max.{t} {d}, {s[0]}, {s[1]}")
    elif op in _APPROX:
      if t == "f64" and op in (Ops.SQRT, Ops.RECIPROCAL): self.ins(f"{_APPROX[op].replace('f32', 'f64')} {d}, {s[0]}")
      elif t == "f64" and op is Ops.TRUNC: self.ins(f"cvt.rzi.f64.f64 {d}, {s[0]}")
      elif t == "f64": raise NotImplementedError(f"PTX: {op} on {dt} (decomposed before, see LACKS_TRANSCENDENTAL)")
      else: self.ins(f"{_APPROX[op]} {d}, {s[0]}")
    else: raise NotImplementedError(f"the PTX renderer can't render {op}")
    self.narrow(d, dt)
    if dt is dtypes.bfloat16: self.round_bf16(d)
    return d

  def int_div(self, u: UOp, t: str, cls: str, d: str, s: list[str]) -> None:
    """C's truncating division and remainder; 0 for a divisor of 0 (computed even for lanes that are masked out)."""
    ins = "div" if u.op is Ops.CDIV else "rem"
    b = u.src[1]
    if b.op is Ops.CONST and b.arg != 0:
      self.ins(f"{ins}.{t} {d}, {s[0]}, {s[1]}")
      return
    q, z = self.reg(cls), self.reg("p")
    self.ins(f"setp.eq.{t} {z}, {s[1]}, 0")
    self.ins(f"{ins}.{t} {q}, {s[0]}, {s[1]}")
    self.ins(f"selp.b{_BITS[cls]} {d}, 0, {q}, {z}")

  def floor_div(self, u: UOp, t: str, cls: str, d: str, s: list[str]) -> None:
    """Python's floor division and modulo (0 for a divisor of 0)."""
    a, b = u.src
    div = u.op is Ops.FLOORDIV
    if a.vmin >= 0 and b.op is Ops.CONST and b.arg > 0 or t[0] == "u":
      return self.int_div(UOp(Ops.CDIV if div else Ops.CMOD, u.dtype, u.src), t, cls, d, s)
    bits = _BITS[cls]
    q, r, x = self.reg(cls), self.reg(cls), self.reg(cls)
    nz, neg, adj, z = self.reg("p"), self.reg("p"), self.reg("p"), self.reg("p")
    self.ins(f"div.{t} {q}, {s[0]}, {s[1]}")
    self.ins(f"rem.{t} {r}, {s[0]}, {s[1]}")
    self.ins(f"setp.ne.{t} {nz}, {r}, 0")
    self.ins(f"xor.b{bits} {x}, {r}, {s[1]}")
    self.ins(f"setp.lt.{t} {neg}, {x}, 0")
    self.ins(f"and.pred {adj}, {nz}, {neg}")
    if div:
      self.ins(f"sub.{t} {x}, {q}, 1")
      self.ins(f"selp.b{bits} {q}, {x}, {q}, {adj}")
    else:
      self.ins(f"add.{t} {x}, {r}, {s[1]}")
      self.ins(f"selp.b{bits} {q}, {x}, {r}, {adj}")
    self.ins(f"setp.eq.{t} {z}, {s[1]}, 0")
    self.ins(f"selp.b{bits} {d}, 0, {q}, {z}")

  def cast(self, src: DType, dt: DType, x: str) -> str:  # type: ignore[override]
    st, scls = self.info(src)
    t, cls = self.info(dt)
    if cls == "p":  # x != 0
      d = self.reg("p")
      if scls == "p": return x
      self.ins(f"setp.{'neu' if _is_float(st) else 'ne'}.{st} {d}, {x}, {self.const(0, src)}")
      return d
    d = self.reg(cls)
    if scls == "p": self.ins(f"selp.b{_BITS[cls]} {d}, {self.const(1, dt)}, {self.const(0, dt)}, {x}")
    elif st == t: self.ins(f"mov.b{_BITS[cls]} {d}, {x}")
    elif _is_float(t) and _is_float(st): self.ins(f"cvt{'.rn' if _BITS[cls] < _BITS[scls] else ''}.{t}.{st} {d}, {x}")
    elif _is_float(t): self.ins(f"cvt.rn.{t}.{st} {d}, {x}")
    elif _is_float(st): self.ins(f"cvt.rzi.{t}.{st} {d}, {x}")
    elif _BITS[cls] == _BITS[scls]: self.ins(f"mov.b{_BITS[cls]} {d}, {x}")
    else: self.ins(f"cvt.{t}.{st} {d}, {x}")
    self.narrow(d, dt)
    if dt is dtypes.bfloat16: self.round_bf16(d)
    return d

  def bitcast(self, src: DType, dt: DType, x: str) -> str:  # type: ignore[override]
    _, cls = self.info(dt)
    d = self.reg(cls)
    if src is dtypes.bfloat16:  # its 16 bits
      self.ins(f"cvt.rn.bf16.f32 {d}, {x}")
    elif dt is dtypes.bfloat16:
      r = self.reg("r")
      self.ins(f"cvt.u32.u16 {r}, {x}")
      self.ins(f"shl.b32 {d}, {r}, 16")
    else: self.ins(f"mov.b{_BITS[cls]} {d}, {x}")
    return d

  # ** memory **

  def address(self, base: str, idx: str, size: int) -> str:
    a = self.reg("rd")
    if size == 1: self.ins(f"add.s64 {a}, {base}, {idx}")
    else:
      off = self.reg("rd")
      self.ins(f"shl.b64 {off}, {idx}, {size.bit_length() - 1}")
      self.ins(f"add.s64 {a}, {base}, {off}")
    return a

  def mem_type(self, dt: DType) -> str: return _MEM.get(dt.scalar().name) or self.info(dt)[0]

  def load(self, u: UOp) -> list[str]:
    buf, idx = u.src[0].src
    dt, n = u.dtype.scalar(), u.dtype.count
    gate = next((self.v[s][0] for s in u.src[1:] if s.dtype is dtypes.bool), None)
    mask_src = next((s for s in u.src[1:] if s.dtype is dtypes.uint), None)
    size = dt.itemsize
    addr = self.address(self.v[buf][0], self.v[idx][0], size)
    _, cls = self.info(dt)
    lcls = "h" if dt in (dtypes.bool, dtypes.bfloat16) else cls  # what the memory's bits are loaded into
    regs = [self.reg(lcls) for _ in range(n)]
    mt = self.mem_type(dt)
    if gate is not None or mask_src is not None:
      for r in regs: self.ins(f"mov.b{_BITS[lcls]} {r}, 0")
    if mask_src is not None:  # lanes past the end of the data are never read
      preds = []
      for i in range(n):
        if mask_src.op is Ops.CONST:
          preds.append(gate if (mask_src.arg >> i) & 1 else None)
          continue
        m, p = self.reg("r"), self.reg("p")
        self.ins(f"and.b32 {m}, {self.v[mask_src][0]}, {1 << i}")
        self.ins(f"setp.ne.b32 {p}, {m}, 0")
        if gate is not None: self.ins(f"and.pred {p}, {p}, {gate}")
        preds.append(p)
      for i, (r, p) in enumerate(zip(regs, preds)):  # type: ignore[assignment]
        if mask_src.op is Ops.CONST and not (mask_src.arg >> i) & 1: continue
        self.ins(f"{f'@{p} ' if p else ''}ld.global.{mt} {r}, [{addr}+{i * size}]")
    elif n > 1 and u.src[0].arg is True:
      step = min(4, 16 // size)
      for o in range(0, n, step):
        grp = regs[o:o + min(step, n - o)]
        vec = f"v{len(grp)}." if len(grp) > 1 else ""
        dst = "{" + ", ".join(grp) + "}" if len(grp) > 1 else grp[0]
        self.ins(f"{f'@{gate} ' if gate else ''}ld.global.{vec}{mt} {dst}, [{addr}+{o * size}]")
    else:
      for i, r in enumerate(regs): self.ins(f"{f'@{gate} ' if gate else ''}ld.global.{mt} {r}, [{addr}+{i * size}]")
    if dt is dtypes.bool:
      out = [self.reg("p") for _ in regs]
      for o, r in zip(out, regs): self.ins(f"setp.ne.b16 {o}, {r}, 0")  # type: ignore[assignment]
      return out
    if dt is dtypes.bfloat16: return [self.bitcast(dtypes.ushort, dtypes.bfloat16, r) for r in regs]
    return regs

  def store_regs(self, buf: str, idx: str, dt: DType, regs: list[str], aligned: bool, space: str = "global") -> None:
    size = dt.itemsize
    addr = self.address(buf, idx, size)
    if dt is dtypes.bool:
      out = [self.reg("h") for _ in regs]
      for o, r in zip(out, regs): self.ins(f"selp.b16 {o}, 1, 0, {r}")
      regs = out
    elif dt is dtypes.bfloat16: regs = [self.bitcast(dtypes.bfloat16, dtypes.ushort, r) for r in regs]
    mt = self.mem_type(dt)
    step = min(4, 16 // size) if aligned else 1
    for o in range(0, len(regs), step):  # type: ignore[assignment]
      grp = regs[o:o + step]  # type: ignore[index, operator]
      src = "{" + ", ".join(grp) + "}" if len(grp) > 1 else grp[0]
      self.ins(f"st.{space}.{f'v{len(grp)}.' if len(grp) > 1 else ''}{mt} [{addr}+{o * size}], {src}")

  def store(self, st: UOp) -> None:
    index, val = st.src
    buf, idx = index.src
    self.store_regs(self.v[buf][0], self.v[idx][0], val.dtype.scalar(), self.v[val], index.arg is True)

  # ** reduces **

  def update_regs(self, acc: UOp, accs: list[str], terms: list[str]) -> None:
    """acc = acc op term, lane by lane."""
    op, dt = acc.arg[0], acc.dtype.scalar()
    t, cls = self.info(dt)
    for a, x in zip(accs, terms):
      if cls == "p": self.ins(f"{'and' if op is Ops.MUL else 'or'}.pred {a}, {a}, {x}")
      elif op is Ops.ADD: self.ins(f"add{'.rn' if _is_float(t) else ''}.{t} {a}, {a}, {x}")
      elif op is Ops.MUL: self.ins(f"mul.{'rn' if _is_float(t) else 'lo'}.{t} {a}, {a}, {x}")
      elif _is_float(t):  # (x > a || x != x) ? x : a
        p, q = self.reg("p"), self.reg("p")
        self.ins(f"setp.gt.{t} {p}, {x}, {a}")
        self.ins(f"setp.nan.{t} {q}, {x}, {x}")
        self.ins(f"or.pred {p}, {p}, {q}")
        self.ins(f"selp.b{_BITS[cls]} {a}, {x}, {a}, {p}")
      else: self.ins(f"max.{t} {a}, {a}, {x}")
      if op is not Ops.MAX: self.narrow(a, dt)
      if dt is dtypes.bfloat16 and op is not Ops.MAX: self.round_bf16(a)

  def reduce_section(self) -> None:
    n_out = self.n_out
    for acc in self.reduces:
      dt = acc.dtype.scalar()
      init = self.const(identity_element(acc.arg[0], dt), dt)
      regs = [self.reg(self.info(dt)[1]) for _ in range(acc.dtype.count)]
      for r in regs: self.ins(f"mov.{'pred' if r.startswith('%p') else f'b{_BITS[self.info(dt)[1]]}'} {r}, {init}")
      self.v[acc] = regs
    for j, r in enumerate(self.rloops):  # type: ignore[assignment]
      self.open_loop(r, f"ridx{n_out + j}")  # type: ignore[arg-type]
      for u in self.at.get(n_out + j + 1, ()): self.name(u)
    for acc in self.reduces:
      for term in acc.src[:acc.arg[1]]:
        if term.op is Ops.WMMA: self.mma(acc, term)
        elif term in self.fused:
          t = self.info(acc.dtype)[0]
          a, b = (self.v[x] * (acc.dtype.count if len(self.v[x]) == 1 else 1) for x in term.src)
          for ai, x, y in zip(self.v[acc], a, b):
            self.ins(f"fma.rn.{t} {ai}, {x}, {y}, {ai}")
            if acc.dtype.scalar() is dtypes.bfloat16: self.round_bf16(ai)
        else: self.update_regs(acc, self.v[acc], self.v[term] * (acc.dtype.count if len(self.v[term]) == 1 else 1))
    for r in reversed(self.rloops): self.end_loop(r)  # type: ignore[arg-type, assignment]
    if self.group is not None: self.combine()

  def pack(self, lo: str, hi: str, dt: DType) -> str:
    """Two 16-bit values in a 32-bit register, the lower half holding lo (a bf16 value lives in f32: cvt packs it)."""
    d = self.reg("r")
    if dt is dtypes.bfloat16: self.ins(f"cvt.rn.bf16x2.f32 {d}, {hi}, {lo}")
    else: self.ins(f"mov.b32 {d}, {{{lo}, {hi}}}")
    return d

  def mma(self, acc: UOp, term: UOp) -> None:
    """acc = A @ B + acc on the tensor cores (mma.sync), the fragments packed two 16-bit values to a register."""
    dt = term.src[0].dtype.scalar()
    a, b, c = self.v[term.src[0]], self.v[term.src[1]], self.v[acc]
    ra = [self.pack(a[i], a[i + 1], dt) for i in range(0, len(a), 2)]
    rb = [self.pack(b[i], b[i + 1], dt) for i in range(0, len(b), 2)]
    half = acc.dtype.scalar() is dtypes.half
    rc = [self.pack(c[i], c[i + 1], dtypes.half) for i in range(0, len(c), 2)] if half else c
    shape, *types = term.arg.split(".")
    def grp(xs: list[str]) -> str: return "{" + ", ".join(xs) + "}"
    self.ins(f"mma.sync.aligned.{shape}.row.col.{'.'.join(types)} {grp(rc)}, {grp(ra)}, {grp(rb)}, {grp(rc)}")
    if half:
      for i, r in enumerate(rc): self.ins(f"mov.b32 {{{c[2 * i]}, {c[2 * i + 1]}}}, {r}")

  def combine(self) -> None:
    """As GPUWriter.combine: every work-item leaves its accumulators in shared memory at its place; the first of the
    group (group index 0) adds up the others' after the barrier and alone goes on to the store."""
    _, lo = grid(self.loops, self.rloops)
    strides, total = {}, 1
    for r in lo:
      strides[r] = total
      total *= r.src[0].arg
    place = self.const(0, dtypes.weakint)
    for r in lo:
      p = self.reg("rd")
      self.ins(f"mad.lo.s64 {p}, {self.v[r][0]}, {strides[r]}, {place}")
      place = p
    g, gs = self.v[self.group][0], strides[self.group]  # type: ignore[index]
    bases = []
    for i, a in enumerate(self.reduces):
      dt, n = a.dtype.scalar(), a.dtype.count
      esize = 1 if dt is dtypes.bool else dt.itemsize
      self.shared.append(f".shared .align 16 .b8 th_lds{i}[{total * n * esize}];")
      base = self.reg("rd")
      self.ins(f"mov.u64 {base}, th_lds{i}")
      bases.append(base)
      idx = self.reg("rd")
      self.ins(f"mul.lo.s64 {idx}, {place}, {n}")
      self.store_regs(base, idx, dt, self.v[a], False, "shared")
    self.ins("bar.sync 0")
    self.skip = self.label("skip")
    p = self.reg("p")
    self.ins(f"setp.ne.s64 {p}, {g}, 0")
    self.ins(f"@{p} bra {self.skip}")
    j, top = self.reg("rd"), self.label("combine")
    self.ins(f"mov.b64 {j}, 1")
    self.emit(f"{top}:")
    for i, a in enumerate(self.reduces):
      dt, n = a.dtype.scalar(), a.dtype.count
      at = self.reg("rd")
      self.ins(f"mad.lo.s64 {at}, {j}, {gs}, {place}")
      self.ins(f"mul.lo.s64 {at}, {at}, {n}")
      _, cls = self.info(dt)
      addr = self.address(bases[i], at, 1 if dt is dtypes.bool else dt.itemsize)
      parts = []
      for k in range(n):
        if dt is dtypes.bool:
          h, q = self.reg("h"), self.reg("p")
          self.ins(f"ld.shared.u8 {h}, [{addr}+{k}]")
          self.ins(f"setp.ne.b16 {q}, {h}, 0")
          parts.append(q)
        else:
          r = self.reg("h" if dt is dtypes.bfloat16 else cls)  # type: ignore[assignment]
          self.ins(f"ld.shared.{self.mem_type(dt)} {r}, [{addr}+{k * dt.itemsize}]")
          parts.append(self.bitcast(dtypes.ushort, dtypes.bfloat16, r) if dt is dtypes.bfloat16 else r)  # type: ignore[arg-type]
      self.update_regs(a, self.v[a], parts)
    q = self.reg("p")
    self.ins(f"add.s64 {j}, {j}, 1")
    self.ins(f"setp.lt.s64 {q}, {j}, {self.group.src[0].arg}")  # type: ignore[union-attr]
    self.ins(f"@{q} bra {top}")

  def after_stores(self) -> None:
    if self.group is None: return
    self.emit(f"{self.skip}:")
    # inside a loop of every work-item, the next step's partial results must wait until these are read
    if any(r.arg[1] not in _SPECIAL for r in self.loops): self.ins("bar.sync 0")

  def finish(self) -> str:
    local = self.k.launch[1] if self.k.launch is not None else (1, 1, 1)
    regs = [f"  .reg .{'pred' if c == 'p' else f'b{_BITS[c]}'} %{c}<{n}>;" for c, n in self.nregs.items() if n]
    head = f".version {ptx_version(self.ren.arch)}\n.target {self.ren.arch}\n.address_size 64\n"
    entry = f".visible .entry {self.k.name}(\n  " + ",\n  ".join(self.param_decls) + f"\n) .maxntid {local[0]}, {local[1]}, {local[2]} {{"
    return "\n".join([head + entry, *regs, *("  " + s for s in self.shared), *self.lines, "  ret;", "}\n"])


class PTXRenderer(Renderer):
  """PTX for one architecture (sm_XY), planned like CUDA C (see Renderer)."""
  device = "CUDA"
  vec = 4
  has_local = True
  max_global = (2**31 - 1, 65535, 65535)
  max_local = (1024, 1024, 64)
  max_work_group = 1024
  local_mem = 48 * 1024
  group_items = 128  # as CUDA C's

  def __init__(self, arch: str = "sm_90"):
    if not re.fullmatch(r"sm_\d+[a-z]?", arch): raise ValueError(f"PTX: {arch!r} is not an architecture (sm_80, sm_90, ...)")
    self.arch = arch
    self.tensor_cores = NV_TENSOR_CORES if int(re.sub(r"\D", "", arch)) >= 80 else []  # mma.sync m16n8k16: sm_80 on

  def supported_dtypes(self) -> set[DType]: return super().supported_dtypes() - set(dtypes.fp8s)

  def render(self, k: LoweredKernel) -> str:
    self.check_dtypes(k, "the PTX renderer")
    return PTXWriter(k, self).write()

