"""Python over NumPy for the PYTHON device (tinygrad's DEV=PYTHON): the GPU frame of renderer/gpu.py, run by every
work-item of a batch of work-groups in lockstep. A kernel is a Python function whose values are NumPy arrays with one
entry per work-item (a lane): the work-group's and work-item's ids are arrays, a loop of the kernel is a Python loop
that every lane takes together, and a vector value holds its lanes along a first axis, (lanes of the vector, work-items).
A value the same in every work-item (a constant, a loop counter) stays a NumPy scalar and broadcasts.

Because the work-items of a group run together, local memory and barriers need no code: a grouped reduce combines
the partial results of the other work-items of its group by reading their lanes (at the place renderer/gpu.py gives
them in local memory), and a tensor-core instruction gathers its fragments from the 32 lanes of its warp, multiplies
and scatters the result back, with the instruction's layout (TensorCore.a_elem, b_elem, c_elem). Memory accesses,
casts and the tensor-core step are the helpers of runtime/lanes.py, which check every address a live lane touches.

Types compute as the GPU backends' do: half natively (NumPy rounds every result), bfloat16 and the OCP fp8s (fp8e4m3,
fp8e5m2) in float with every result rounded to the type (stored as their bits: bfloat16's top 16, an fp8's byte), a
fused multiply-add only where the kernel's reduce asks. The fnuz fp8s are not rendered."""
from __future__ import annotations

import math
import re

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.renderer import NV_TENSOR_CORES, Renderer
from tinyhybrid.renderer.cstyle import MATH, var_name
from tinyhybrid.renderer.gpu import GPUWriter
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp, identity_element

# the NumPy type a dtype computes in (bfloat16 and the fp8s in float32: runtime/lanes.py stores them as their bits)
NP_TYPES = {"float8_e4m3": "float32", "float8_e5m2": "float32", "bool": "bool_", "signed char": "int8", "unsigned char": "uint8",
            "short": "int16", "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32", "long": "int64", "unsigned long": "uint64", "weakint": "int64",
            "half": "float16", "__bf16": "float32", "float": "float32", "double": "float64", "weakfloat": "float64"}
_BINARY = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&",
           Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>", Ops.FDIV: "/"}
_NP_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
assert set(_NP_MATH) == set(MATH)
# the types computed in float32 and rounded to a narrower format, by the name runtime/lanes.py gives the format
_NARROW = {dtypes.bfloat16: "bf16", dtypes.fp8e4m3: "e4m3", dtypes.fp8e5m2: "e5m2"}
_STORAGE = {dtypes.bfloat16: "np.uint16", dtypes.fp8e4m3: "np.uint8", dtypes.fp8e5m2: "np.uint8"}


def _narrow(dt: DType) -> str | None: return _NARROW.get(dt.scalar())


def _round(e: str, fmt: str) -> str: return f"th.round_bf16({e})" if fmt == "bf16" else f"th.round_fp8({e}, '{fmt}')"


class PythonWriter(GPUWriter):
  # ** spellings **

  def np_type(self, dt: DType) -> str:
    try: return "np." + NP_TYPES[dt.scalar().name]
    except KeyError: raise NotImplementedError(f"PythonWriter has no type for {dt}") from None

  def literal(self, v, dt: DType) -> str:
    t = self.np_type(dt)
    if dt is dtypes.bool: return "np.True_" if v else "np.False_"
    if dt._is_float:
      v = float(v)
      return f"{t}({v!r})" if math.isfinite(v) else f"{t}(float('{v!r}'))"
    return f"{t}({int(v)})"

  def special(self, kind: AxisType, dim: int) -> str: return f"{'gid' if kind is AxisType.GLOBAL else 'lid'}[{dim}]"
  def buffer_param(self, i: int) -> str: return f"data{i}"
  def var_param(self, v: UOp) -> str: return var_name(v)

  def expr(self, u: UOp, t: str) -> str:
    s = [self.names.get(x, "") for x in u.src]
    op, dt = u.op, u.dtype
    if op is Ops.CONST:
      return self.literal(u.arg, dt) if dt.count == 1 else f"th.splat({self.literal(u.arg, dt.scalar())}, {dt.count})"
    if op in (Ops.FLOORDIV, Ops.FLOORMOD) and dt._is_float: raise NotImplementedError(f"PythonWriter can't render a float {op}")
    if op is Ops.FLOORDIV: return f"({s[0]} // {s[1]})"  # NumPy's integer division is floor division, 0 for a divisor of 0
    if op is Ops.FLOORMOD: return f"({s[0]} % {s[1]})"
    if op in (Ops.CDIV, Ops.CMOD) and not dt._is_float: return f"th.{'cdiv' if op is Ops.CDIV else 'cmod'}({s[0]}, {s[1]})"
    if op in _BINARY: return f"({s[0]} {_BINARY[op]} {s[1]})"
    if op is Ops.VECTORIZE: return f"th.vec({', '.join(s)})"
    if op is Ops.GEP: return f"{s[0]}[{u.arg[0]}]" if dt.count == 1 else f"{s[0]}[{list(u.arg)}]"
    if op is Ops.LOAD: return self.load(u)
    if op is Ops.CAST: return f"th.cast({s[0]}, {t}, {_narrow(dt)!r})"
    if op is Ops.BITCAST: return f"th.bitcast({s[0]}, {self.np_type(u.src[0].dtype)}, {t}, {_narrow(u.src[0].dtype)!r}, {_narrow(dt)!r})"
    if op is Ops.WHERE: return f"np.where({s[0]}, {s[1]}, {s[2]})"
    if op is Ops.MAX: return f"th.maximum({s[0]}, {s[1]})"
    if op is Ops.NEG: return f"(-{s[0]})"
    if op is Ops.RECIPROCAL: return f"({t}(1) / {s[0]})"
    if op in _NP_MATH: return f"th.math(np.{_NP_MATH[op]}, {s[0]}, {t})"
    if op is Ops.POW: return f"np.power({s[0]}, {s[1]})"
    raise NotImplementedError(f"PythonWriter can't render {op}")

  def load(self, u: UOp) -> str:
    (buf, idx), dt = (self.names[x] for x in u.src[0].src), u.dtype
    gate = next((self.names[s] for s in u.src[1:] if s.dtype.scalar() is dtypes.bool), "None")
    mask = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.uint), "None")
    what = f"'data{u.src[0].src[0].arg}'"
    e = f"th.load({buf}, {idx}, {gate}, {what})" if dt.count == 1 else f"th.vload({buf}, {idx}, {dt.count}, {gate}, {mask}, {what})"
    if (fmt := _narrow(dt)) is None: return e
    return f"th.bf2f({e})" if fmt == "bf16" else f"th.fp82f({e}, '{fmt}')"  # stored as their bits

  def name(self, u: UOp) -> None:
    if u.op is Ops.WMMA: return  # a step of its reduce
    t = self.np_type(u.dtype)
    e = self.expr(u, t)
    if u.op in (Ops.CONST, Ops.GEP):
      self.names[u] = e
      return
    # bfloat16 and the fp8s compute in float: every result rounds, as the hardware type would
    if u.op in GroupOp.ALU and u.op not in GroupOp.Comparison and (fmt := _narrow(u.dtype)) is not None: e = _round(e, fmt)
    self.counter += 1
    self.names[u] = nm = f"v{self.counter}"
    self.emit(f"{nm} = {e}")

  def update(self, acc: UOp, term: UOp) -> str:
    a, op, dt = self.names[acc], acc.arg[0], acc.dtype.scalar()
    if term.op is Ops.WMMA: return f"{a} = th.wmma({term.arg!r}, {self.names[term.src[0]]}, {self.names[term.src[1]]}, {a})"
    if term in self.fused: upd = f"th.fma({self.names[term.src[0]]}, {self.names[term.src[1]]}, {a})"
    elif op is Ops.ADD: upd = f"({a} | {self.names[term]})" if dt is dtypes.bool else f"({a} + {self.names[term]})"
    elif op is Ops.MUL: upd = f"({a} * {self.names[term]})"
    else: upd = f"th.maximum({self.names[term]}, {a})"
    if (fmt := _narrow(dt)) is not None: upd = _round(upd, fmt)
    return f"{a} = {upd}"

  # ** the frame **

  def open_loop(self, r: UOp, nm: str) -> None:
    self.names[r] = nm
    if r.arg[1] in (AxisType.GLOBAL, AxisType.LOCAL, AxisType.GROUP_REDUCE, AxisType.WARP):
      if r.arg[1] is AxisType.WARP and self.dims[r] != 0: raise NotImplementedError("PythonWriter: a warp's lanes must be local dimension 0")
      self.emit(f"{nm} = {self.special(r.arg[1], self.dims[r])}  # {r.src[0].arg}")
      return
    self.emit(f"for {nm} in range(int({self.names[r.src[0]]})):")
    self.depth += 1

  def close_loop(self) -> None:
    if self.lines[-1].endswith(":"): self.emit("pass")
    self.depth -= 1

  def acc_init(self, acc: UOp) -> str:
    dt = acc.dtype.scalar()
    init = self.literal(identity_element(acc.arg[0], dt), dt)
    return f"{self.names[acc]} = {init if acc.dtype.count == 1 else f'th.splat({init}, {acc.dtype.count})'}"

  def combine(self) -> None:
    """Every work-item of a group that shares the reduce takes the combination of its partners' partial results, in
    the order of renderer/gpu.py's (its own first, then theirs by group index), so all of them store the same value."""
    assert self.group is not None
    from tinyhybrid.codegen.gpu import grid
    _, lo = grid(self.loops, self.rloops)
    stride = 1
    for r in lo:
      if r is self.group: break
      stride *= r.src[0].arg
    g = self.names[self.group]
    self.emit(f"th_first = lane - {g} * {stride}")
    for acc in self.reduces:
      a = self.names[acc]
      self.emit(f"th_parts, {a} = {a}, th.at({a}, th_first)")
      self.emit(f"for th_j in range(1, {self.group.src[0].arg}):")
      self.depth += 1
      part = UOp(Ops.NOOP, acc.dtype, (), a)
      self.names[part] = f"th.at(th_parts, th_first + th_j * {stride})"
      self.emit(self.update(acc, part))
      self.depth -= 1

  def after_stores(self) -> None: pass

  def store(self, st: UOp) -> None:
    index, val = st.src
    buf, idx = (self.names[x] for x in index.src)
    v, fmt = self.names[val], _narrow(val.dtype)
    if fmt is not None: v = f"th.f2bf({v})" if fmt == "bf16" else f"th.f2fp8({v}, '{fmt}')"
    self.emit(f"th.store({buf}, {idx}, {v}, {val.dtype.count}, 'data{index.src[0].arg}')")

  def finish(self) -> str:
    """The kernel's function, after BUFFERS (the NumPy storage type and element count of each buffer it takes) and VARS
    (how many variables' values follow them)."""
    bufs = ", ".join(f"({_STORAGE.get(b.dtype.scalar()) or self.np_type(b.dtype)}, {b.size})" for b in self.k.buffers)
    args = ", ".join(["th", "np", *self.param_decls, "gid", "lid", "lane"])
    return "\n".join([f"BUFFERS = ({bufs}{',' if len(self.k.buffers) == 1 else ''})", f"VARS = {len(self.k.vars)}", f"def {self.k.name}({args}):", *self.lines, ""])


class PythonRenderer(Renderer):
  """A GPU-style device's kernels as Python over NumPy. With an NVIDIA architecture (PYTHON::sm_80, tinygrad's
  target syntax) it plans for that GPU as renderer/cuda.py does, with its tensor cores; plain PYTHON has none."""
  device = "PYTHON"
  has_local = True
  max_global = (2**31 - 1, 65535, 65535)
  max_local = (1024, 1024, 64)
  max_work_group = 1024
  local_mem = 48 * 1024

  def __init__(self, arch: str | None = None, vec: int = 4):
    if arch is not None and not re.fullmatch(r"sm_\d+[a-z]?", arch): raise ValueError(f"PYTHON: {arch!r} is not an architecture it emulates (sm_80, sm_90, ...)")
    self.arch, self.vec = arch, vec
    if arch is not None: self.group_items = 128  # as renderer/cuda.py plans
    self.tensor_cores = NV_TENSOR_CORES if arch is not None and int(re.sub(r"\D", "", arch)) >= 80 else []

  def supported_dtypes(self) -> set[DType]: return super().supported_dtypes() - set(dtypes.fp8_fnuz)

  def render(self, k: LoweredKernel) -> str:
    self.check_dtypes(k, "the PYTHON renderer")
    return PythonWriter(k).write()
