"""OpenCL C (1.2) for the CL device: the GPU frame of renderer/gpu.py in OpenCL's words (`__kernel`, `__global`,
`__local`, get_group_id/get_local_id, barrier(CLK_LOCAL_MEM_FENCE)) and its built-in vector types (float4, int16,
...). bool buffers are stored as uchar (OpenCL takes no pointer to bool as a kernel argument), bfloat16 as the top
16 bits of a float. half is native where the device has cl_khr_fp16; elsewhere it is computed in float and stored
through vload_half/vstore_half, rounding every result to half as the hardware type would. A dtype the device has no
type for (double without cl_khr_fp64, the fp8s) is an error at render time, before anything is launched."""
from __future__ import annotations

from dataclasses import dataclass

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.renderer.cstyle import CStyleLanguage, floor_div_helpers, MATH
from tinyhybrid.renderer.gpu import GPUWriter
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp


_TYPES = {"__bf16": "float", "bool": "bool", "signed char": "char", "unsigned char": "uchar", "short": "short",
          "unsigned short": "ushort", "int": "int", "unsigned int": "uint", "long": "long", "unsigned long": "ulong",
          "weakint": "long", "half": "half", "float": "float", "double": "double", "weakfloat": "double"}
_MASK_INT = {1: "char", 2: "short", 4: "int", 8: "long"}  # a vector comparison's result

# Sources are self-contained, and several can be built as one program (runtime/ops_cl.py builds a schedule's new
# kernels together): the prelude and helpers are guarded.
_PRELUDE = """#ifndef TH_PRELUDE
#define TH_PRELUDE
#pragma OPENCL FP_CONTRACT OFF
{extensions}""" + floor_div_helpers('inline ', 'long', 'ulong').replace("{", "{{").replace("}", "}}") + """inline float th_bf2f(ushort b) {{ return as_float((uint)b << 16); }}
inline ushort th_f2bf(float f) {{
  uint u = as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);  /* keep NaN a NaN */
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}}
inline float th_round_bf16(float f) {{ return th_bf2f(th_f2bf(f)); }}
{half}#endif
"""

# half computed in float: the storage conversions are OpenCL's own (correctly rounded, no cl_khr_fp16 needed)
_HALF_EMULATED = """inline ushort th_f2h(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
inline float th_h2f(ushort h) { return vload_half(0, (half*)&h); }
inline float th_round_half(float f) { return th_h2f(th_f2h(f)); }
"""
_HALF_FROM_DOUBLE = """inline float th_d2h(double d) { ushort h; vstore_half_rte(d, 0, (half*)&h); return th_h2f(h); }
"""


@dataclass(frozen=True)
class CLProperties:
  """What the code generator needs to know about a device: its limits and extensions."""
  name: str
  ident: str                   # platform, device and driver versions: part of every cache key
  is_cpu: bool
  compute_units: int
  max_work_group: int
  max_local: tuple[int, ...]   # per local dimension
  local_mem: int               # bytes of local memory per work-group
  max_alloc: int
  extensions: frozenset[str]


class OpenCLWriter(GPUWriter):
  TYPES = _TYPES
  MASK_INT = _MASK_INT
  IDX = "long"
  SUFFIX = ("l", "ul")

  def __init__(self, k: LoweredKernel, ren: OpenCLRenderer):
    super().__init__(k)
    self.ren = ren
    self.half_emulated = not ren.fp16
    if self.half_emulated: self.TYPES = {**_TYPES, "half": "float"}

  # ** types and spellings **

  def vtype(self, scalar: str, n: int) -> str: return f"{scalar}{n}"
  def vec_literal(self, t: str, items: list[str]) -> str: return f"({t})({', '.join(items)})"
  def lane(self, x: str, i: int) -> str: return f"{x}.s{i:x}"
  def convert(self, x: str, t: str) -> str: return f"convert_{t}({x})"
  def fma(self, t: str) -> str: return "fma"

  def math(self, op: Ops, dt: DType, t: str, x: str) -> str:
    return f"{MATH[op]}({x})" if dt.scalar() in (dtypes.float, dtypes.double) else f"(({t}){MATH[op]}((float){x}))"

  def rounding(self, dt: DType) -> str | None:
    if dt is dtypes.bfloat16: return "th_round_bf16"
    return "th_round_half" if dt is dtypes.half and self.half_emulated else None

  def storage(self, dt: DType) -> str:
    """The type a buffer of dt holds."""
    if dt.scalar() is dtypes.bool: return "uchar"
    if dt.scalar() is dtypes.bfloat16: return "ushort"
    return "half" if dt.scalar() is dtypes.half else self.scalar(dt)

  def cast(self, u: UOp, t: str, x: str) -> str:
    dt = u.dtype
    if dt.count > 1: return self.convert(x, t)
    if dt is dtypes.bool: return f"({x} != 0)"
    if dt is dtypes.bfloat16: return f"th_round_bf16((float){x})"
    if dt is dtypes.half and self.half_emulated: return f"th_d2h({x})" if u.src[0].dtype is dtypes.double else f"th_round_half((float){x})"
    return f"(({t}){x})"

  def bitcast(self, u: UOp, t: str, x: str) -> str:
    src = u.src[0].dtype
    if u.dtype.count > 1: return f"as_{t}({x})"
    if dtypes.bfloat16 in (u.dtype, src):  # through its 16 bits (a half's bits, not its value)
      if u.dtype is dtypes.bfloat16:
        return f"th_bf2f({x if src._is_int else f'th_f2h({x})' if self.half_emulated else f'as_ushort({x})'})"
      if u.dtype._is_int: return f"(({t})th_f2bf({x}))"
      return f"th_h2f(th_f2bf({x}))" if self.half_emulated else f"as_half(th_f2bf({x}))"
    if self.half_emulated and dtypes.half in (u.dtype, src): return f"th_h2f((ushort){x})" if u.dtype is dtypes.half else f"(({t})th_f2h({x}))"
    return f"as_{t}({x})"

  def load_scalar(self, buf: str, idx: str, dt: DType) -> str:
    if dt is dtypes.bool: return f"({buf}[{idx}] != 0)"
    if dt is dtypes.bfloat16: return f"th_bf2f({buf}[{idx}])"
    return f"vload_half({idx}, {buf})" if dt is dtypes.half and self.half_emulated else f"{buf}[{idx}]"

  def store_scalar(self, buf: str, idx: str, v: str, dt: DType) -> str:
    if dt is dtypes.bool: return f"{buf}[{idx}] = (uchar){v};"
    if dt is dtypes.bfloat16: return f"{buf}[{idx}] = th_f2bf({v});"
    return f"vstore_half_rte({v}, {idx}, {buf});" if dt is dtypes.half and self.half_emulated else f"{buf}[{idx}] = {v};"

  def vload(self, u: UOp, t: str, ptr: str) -> str:
    mask = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.uint), None)
    gate = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.bool), None)
    scalar, n = self.scalar(u.dtype), u.dtype.count
    if mask is not None:
      # lanes past the end of the data are never read
      fn = self.helper(f"th_mld_{t}", f"inline {t} th_mld_{t}(__global const {scalar}* p, uint m) {{\n  {t} r = ({t})(0);\n" +
                       "".join(f"  if (m & {1 << i}u) r.s{i:x} = p[{i}];\n" for i in range(n)) + "  return r;\n}")
      ret = f"{fn}({ptr}, {mask})"
    elif u.src[0].arg is True: ret = f"(*(__global {t}*)({ptr}))"
    else: ret = f"vload{n}(0, {ptr})"
    return ret if gate is None else f"({gate} ? {ret} : ({t})(0))"

  def vstore(self, t: str, buf: str, idx: str, v: str, aligned: bool) -> str:
    return f"*(__global {t}*)({buf} + {idx}) = {v};" if aligned else f"vstore{t[len(t.rstrip('0123456789')):]}({v}, 0, {buf} + {idx});"

  # ** the frame **

  def special(self, kind: AxisType, dim: int) -> str: return f"get_group_id({dim})" if kind is AxisType.GLOBAL else f"get_local_id({dim})"
  def barrier(self) -> str: return "barrier(CLK_LOCAL_MEM_FENCE);"
  def local_array(self, t: str, name: str, n: int) -> str: return f"__local {t} {name}[{n}];"
  def buffer_param(self, i: int) -> str: return f"__global {self.storage(self.k.buffers[i].dtype)}* restrict data{i}"

  def finish(self) -> str:
    ren = self.ren
    ext = "".join(f"#pragma OPENCL EXTENSION {e} : enable\n" for e, on in (("cl_khr_fp64", ren.fp64), ("cl_khr_fp16", ren.fp16)) if on)
    half = (_HALF_EMULATED + (_HALF_FROM_DOUBLE if ren.fp64 else "")) if self.half_emulated else ""
    local = self.k.launch[1] if self.k.launch is not None else (1, 1, 1)
    # the group's size is part of the program: the driver can compile for it alone
    header = f"__kernel __attribute__((reqd_work_group_size({', '.join(map(str, local))}))) void {self.k.name}({', '.join(self.param_decls)}) {{"
    statics = ["  " + line for v in self.statics.values() for line in v.split("\n")]
    return "\n".join([_PRELUDE.format(extensions=ext, half=half), *self.helpers.values(), header, *statics, *self.lines, "}\n"])


class OpenCLRenderer(CStyleLanguage):
  """OpenCL C for one device, planned for its limits (see Renderer)."""
  device = "CL"

  def __init__(self, props: CLProperties):
    self.props = props
    self.fp16, self.fp64 = "cl_khr_fp16" in props.extensions, "cl_khr_fp64" in props.extensions
    # a CPU (PoCL) computes in its SIMD registers: 16 floats; a GPU's work-items load 4 at a time
    self.vec = 16 if props.is_cpu else 4
    self.has_local = True
    self.max_global = (2**31 - 1,) * 3
    self.max_local = props.max_local[:3]
    self.max_work_group = props.max_work_group
    self.local_mem = props.local_mem

  def supported_dtypes(self) -> set[DType]:
    return super().supported_dtypes() - set(dtypes.fp8s) - (set() if self.fp64 else {dtypes.double})

  def render(self, k: LoweredKernel) -> str:
    if lacking := self.lacking_dtypes(k):
      why = {dtypes.double: " (the device lacks cl_khr_fp64)"}
      raise TypeError(f"kernel {k.name}: the OpenCL device {self.props.name} has no {', '.join(f'{d}{why.get(d, str())}' for d in lacking)}")
    return OpenCLWriter(k, self).write()
