"""CUDA C++ for NVIDIA GPUs (compiled by NVRTC, runtime/cuda_compiler.py): the GPU frame of renderer/gpu.py in CUDA's
words (`__global__`, blockIdx/threadIdx, `__shared__`, `__syncthreads()`). A vector value is its lanes, each a
scalar variable, computed lane by lane (NVRTC compiles such code ~50x faster than the same work on vector structs with
operators); a vector load or a reduce's vector accumulator is a `th_v<T, N>`, a struct of N lanes aligned like the
hardware's vector loads (16 bytes at most), so an aligned vector load is one ld.global.v4. half is cuda_fp16.h's, computed natively
(sm_53 and later); bfloat16 is stored as cuda_bf16.h's __nv_bfloat16 and computed in float, every result rounded to
bfloat16 as the hardware type would. The OCP fp8s are stored as cuda_fp8.h's __nv_fp8_e4m3 and __nv_fp8_e5m2 and
computed in float the same way, converted by the C renderer's helpers (renderer/cstyle.py fp8_helpers: torch's
rounding, saturation and NaNs, where cuda_fp8.h's own conversions saturate E5M2 too and write other NaNs); the fnuz
ones are not rendered. Contractions into fma happen only where the kernel asks (a reduce's multiply-add): the compiler
runs with --fmad=false, as the other backends keep mul and add apart."""
from __future__ import annotations

import re

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.renderer import NV_TENSOR_CORES
from tinyhybrid.renderer.cstyle import FP8_FORMATS, CStyleLanguage, floor_div_helpers, MATH
from tinyhybrid.renderer.gpu import GPUWriter
from tinyhybrid.uop import AxisType, Ops
from tinyhybrid.uop.ops import UOp

_TYPES = {"__bf16": "float", "bool": "bool", "signed char": "signed char", "unsigned char": "unsigned char", "short": "short",
          "unsigned short": "unsigned short", "int": "int", "unsigned int": "unsigned int", "long": "long long",
          "unsigned long": "unsigned long long", "weakint": "long long", "half": "half", "float": "float", "double": "double",
          "weakfloat": "double"}
# half from each integer type, correctly rounded
_INT_TO_HALF = {"signed char": "__int2half_rn", "unsigned char": "__uint2half_rn", "short": "__short2half_rn",
                "unsigned short": "__ushort2half_rn", "int": "__int2half_rn", "unsigned int": "__uint2half_rn",
                "long long": "__ll2half_rn", "unsigned long long": "__ull2half_rn"}

# Sources are self-contained, and several can be compiled as one program (a schedule's new kernels are built
# together): everything before the kernel is guarded.
_PRELUDE = """#ifndef TH_PRELUDE
#define TH_PRELUDE
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
""" + floor_div_helpers('__device__ inline ', 'long long', 'unsigned long long') + """__device__ inline float th_fma(float a, float b, float c) { return fmaf(a, b, c); }
__device__ inline double th_fma(double a, double b, double c) { return fma(a, b, c); }
template <typename T> __device__ inline T th_fma(T a, T b, T c) { return a * b + c; }
template <typename To, typename From> __device__ inline To th_bitcast(From x) { To r; memcpy(&r, &x, sizeof(r)); return r; }
/* vectors: N lanes, aligned as the widest load that fits them */
constexpr int th_align(int n) { return n >= 16 ? 16 : n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : 1; }
template <typename T, int N> struct alignas(th_align(sizeof(T) * N)) th_v {
  typedef T elem;
  T s[N];
  th_v() = default;
  __device__ th_v(T x) { for (int i = 0; i < N; i++) s[i] = x; }
};
template <typename V> __device__ inline V th_ldu(const typename V::elem* p)
  { V r; for (int i = 0; i < (int)(sizeof(r.s) / sizeof(r.s[0])); i++) r.s[i] = p[i]; return r; }
template <typename V> __device__ inline V th_mld(const typename V::elem* p, unsigned int m)
  { V r((typename V::elem)0); for (int i = 0; i < (int)(sizeof(r.s) / sizeof(r.s[0])); i++) if ((m >> i) & 1u) r.s[i] = p[i]; return r; }
#endif
"""
_HALF = "#include <cuda_fp16.h>"
_FP8 = "#include <cuda_fp8.h>"
_FP8_STORAGE = {dtypes.fp8e4m3: "__nv_fp8_e4m3", dtypes.fp8e5m2: "__nv_fp8_e5m2"}
_BF16 = """#include <cuda_bf16.h>
#ifndef TH_BF16
#define TH_BF16
__device__ inline float th_round_bf16(float f) { return __bfloat162float(__float2bfloat16_rn(f)); }
#endif"""


class CUDAWriter(GPUWriter):
  TYPES = {**_TYPES, "float8_e4m3": "float", "float8_e5m2": "float"}
  HELPER_QUAL, MEMCPY = "__device__ inline ", "memcpy"

  def __init__(self, k: LoweredKernel):
    super().__init__(k)
    self.lane_names: dict[UOp, list[str]] = {}

  def vtype(self, scalar: str, n: int) -> str: return f"th_v<{scalar}, {n}>"
  def fma(self, t: str) -> str: return "th_fma"

  # ** vectors, lane by lane **

  def lanes(self, u: UOp) -> list[str]:
    """The names of a vector's lanes: its lanes' own, or the members of its struct (a load, an accumulator)."""
    if (hit := self.lane_names.get(u)) is not None: return hit
    return [f"{self.names[u]}.s[{i}]" for i in range(u.dtype.count)]

  def lane(self, u: UOp, i: int) -> UOp:  # type: ignore[override]
    """Lane i of u as a scalar node named after it (a scalar u is the same in every lane)."""
    if u.dtype.count == 1: return u
    g = UOp(Ops.GEP, u.dtype.scalar(), (u,), (i,))
    self.names[g] = self.lanes(u)[i]
    return g

  def name(self, u: UOp) -> None:
    if u.op is Ops.WMMA: return  # a step of its reduce (mma)
    n = u.dtype.count
    if u.op is Ops.GEP:
      self.names[u] = self.lanes(u.src[0])[u.arg[0]]
    elif n == 1 or u.op is Ops.LOAD: super().name(u)
    elif u.op is Ops.VECTORIZE: self.lane_names[u] = [self.names[s] for s in u.src]
    elif u.op is Ops.CONST: self.lane_names[u] = [self.literal(u.arg, u.dtype.scalar())] * n
    else:
      out = []
      for i in range(n):
        lu = UOp(u.op, u.dtype.scalar(), tuple(self.lane(s, i) for s in u.src), u.arg)
        super().name(lu)
        out.append(self.names[lu])
      self.lane_names[u] = out

  def mma(self, acc: UOp, term: UOp) -> str:
    """acc = A @ B + acc on the tensor cores: mma.sync with the fragments packed two 16-bit values to a register
    (the lower half holds the element of the lower index), in place on the accumulator's lanes."""
    a, b, c = self.lanes(term.src[0]), self.lanes(term.src[1]), self.lanes(acc)
    bf = term.src[0].dtype.scalar() is dtypes.bfloat16
    pack = self.helper("th_pack_bf" if bf else "th_pack_h", "__device__ inline unsigned int th_pack_bf(float lo, float hi) "
                       "{ return th_bitcast<unsigned int>(__floats2bfloat162_rn(lo, hi)); }" if bf else
                       "__device__ inline unsigned int th_pack_h(half lo, half hi) { return th_bitcast<unsigned int>(__halves2half2(lo, hi)); }")
    regs = lambda xs: [f"{pack}({xs[i]}, {xs[i + 1]})" for i in range(0, len(xs), 2)]  # noqa: E731
    ins = [f'"r"({x})' for x in regs(a) + regs(b)]
    if acc.dtype.scalar() is dtypes.half:  # two halves to a register, in place
      outs = [f'"+r"(*(unsigned int*)&{c[i]})' for i in range(0, len(c), 2)]
    else: outs = [f'"+f"({x})' for x in c]
    nd, na, nb = len(outs), len(a) // 2, len(b) // 2
    grp = lambda lo, n: "{" + ", ".join(f"%{i}" for i in range(lo, lo + n)) + "}"  # noqa: E731
    asm = f"mma.sync.aligned.{term.arg.split('.')[0]}.row.col.{'.'.join(term.arg.split('.')[1:])} {grp(0, nd)}, {grp(nd, na)}, {grp(nd + na, nb)}, {grp(0, nd)};"
    return f'asm("{asm}" : {", ".join(outs)} : {", ".join(ins)});'

  def update(self, acc: UOp, term: UOp) -> str:
    if term.op is Ops.WMMA: return self.mma(acc, term)
    if acc.dtype.count > 1:  # lane by lane
      out = []
      for i in range(acc.dtype.count):
        a = self.lane_acc(acc, i)
        if term in self.fused:
          x, y = (self.names[self.lane(s, i)] for s in term.src)
          out.append(f"{self.names[a]} = th_fma({x}, {y}, {self.names[a]});")
        else: out.append(self.update(a, self.lane(term, i)))
      return " ".join(out)
    if acc.dtype is dtypes.half and acc.arg[0] is Ops.MAX:
      a, v = self.names[acc], self.names[term]  # type: ignore[assignment]
      return f"{a} = (__hgt({v}, {a}) || __hisnan({v})) ? {v} : {a};"
    return super().update(acc, term)

  def lane_acc(self, acc: UOp, i: int) -> UOp:
    """Lane i of a vector accumulator, as an accumulator of its own."""
    a = UOp(Ops.REDUCE, acc.dtype.scalar(), (self.lane(acc, i),), acc.arg)
    self.names[a] = self.lanes(acc)[i]
    return a

  def store(self, st: UOp) -> None:
    index, val = st.src
    if val.dtype.count == 1: return super().store(st)
    buf, idx = (self.names[x] for x in index.src)
    lanes = self.lanes(val)
    if index.arg is True:  # one vector store
      t = self.ctype(val)
      self.emit(f"{{ {t} th_st; " + " ".join(f"th_st.s[{i}] = {x};" for i, x in enumerate(lanes)) + f" *({t}*)({buf} + {idx}) = th_st; }}")
    else:
      for i, x in enumerate(lanes): self.emit(f"{buf}[{idx} + {i}] = {x};")

  def math(self, op: Ops, dt: DType, t: str, x: str) -> str:
    if dt.scalar() is dtypes.double: return f"{MATH[op]}({x})"
    return f"{MATH[op]}f({x})" if dt.scalar() is dtypes.float else f"(({t}){MATH[op]}f((float){x}))"

  def storage(self, dt: DType) -> str:
    """The type a buffer of dt holds."""
    if (f8 := _FP8_STORAGE.get(dt.scalar())) is not None: return f8
    return "__nv_bfloat16" if dt.scalar() is dtypes.bfloat16 else self.scalar(dt)

  def cast(self, u: UOp, t: str, x: str) -> str:
    dt, src = u.dtype, u.src[0].dtype
    if src is dtypes.half and dt is not dtypes.half: x = f"__half2float({x})"  # half's own conversions are ambiguous
    if dt is dtypes.bool: return f"({x} != 0)"
    if dt is dtypes.bfloat16: return f"th_round_bf16((float){x})"
    if dt in FP8_FORMATS: return self.fp8_cast(u, x)
    if dt is dtypes.half:
      if src is dtypes.double: return f"__double2half({x})"
      if (fn := _INT_TO_HALF.get(self.scalar(src))) is not None: return f"{fn}({x})"
      return f"__float2half_rn((float){x})"
    return f"(({t}){x})"

  def bitcast(self, u: UOp, t: str, x: str) -> str:
    src = u.src[0].dtype
    if (f8 := self.fp8_bitcast(u, t, x)) is not None: return f8
    if u.dtype is dtypes.bfloat16:  # through its 16 bits (a half's bits, not its value)
      return f"__bfloat162float(__ushort_as_bfloat16({f'(unsigned short){x}' if src._is_int else f'th_bitcast<unsigned short>({x})'}))"
    if src is dtypes.bfloat16: return f"th_bitcast<{t}>(__bfloat16_as_ushort(__float2bfloat16_rn({x})))"
    return f"th_bitcast<{t}>({x})"

  def load_scalar(self, buf: str, idx: str, dt: DType) -> str:
    if dt in FP8_FORMATS: return f"{self.fp8(dt, 'dec')}({buf}[{idx}].__x)"
    return f"__bfloat162float({buf}[{idx}])" if dt is dtypes.bfloat16 else f"{buf}[{idx}]"

  def store_scalar(self, buf: str, idx: str, v: str, dt: DType) -> str:
    if dt in FP8_FORMATS: return f"{buf}[{idx}].__x = {self.fp8(dt, 'enc')}({v});"
    return f"{buf}[{idx}] = {f'__float2bfloat16_rn({v})' if dt is dtypes.bfloat16 else v};"

  def vload(self, u: UOp, t: str, ptr: str) -> str:
    mask = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.uint), None)
    gate = next((self.names[s] for s in u.src[1:] if s.dtype is dtypes.bool), None)
    if mask is not None: ret = f"th_mld<{t}>({ptr}, {mask})"  # lanes past the end of the data are never read
    elif u.src[0].arg is True: ret = f"(*(const {t}*)({ptr}))"
    else: ret = f"th_ldu<{t}>({ptr})"
    return ret if gate is None else f"({gate} ? {ret} : ({t})(0))"

  def expr(self, u: UOp, t: str) -> str:
    if u.op is Ops.MAX and u.dtype is dtypes.half:
      a, b = (self.names[x] for x in u.src)
      return f"((__hgt({a}, {b}) || __hisnan({a})) ? {a} : {b})"
    return super().expr(u, t)

  # ** the frame **

  def special(self, kind: AxisType, dim: int) -> str: return f"{'blockIdx' if kind is AxisType.GLOBAL else 'threadIdx'}.{'xyz'[dim]}"
  def barrier(self) -> str: return "__syncthreads();"
  def local_array(self, t: str, name: str, n: int) -> str: return f"__shared__ {t} {name}[{n}];"
  def buffer_param(self, i: int) -> str: return f"{self.storage(self.k.buffers[i].dtype)}* __restrict__ data{i}"
  def var_param(self, v: UOp) -> str: return f"long long {self.names[v]}"

  def finish(self) -> str:
    used = {u.dtype.scalar() for u in self.k.ast.toposort()} | {b.dtype.scalar() for b in self.k.buffers}
    headers = ([_HALF] if dtypes.half in used or dtypes.bfloat16 in used else []) + ([_BF16] if dtypes.bfloat16 in used else [])
    if used & set(FP8_FORMATS): headers.append(_FP8)
    threads = prod(self.k.launch[1]) if self.k.launch is not None else 1
    header = f'extern "C" __global__ void __launch_bounds__({threads}) {self.k.name}(' + ", ".join(self.param_decls) + ") {"
    statics = ["  " + line for v in self.statics.values() for line in v.split("\n")]
    return "\n".join([*headers, _PRELUDE, *self.helpers.values(), header, *statics, *self.lines, "}\n"])


class CUDARenderer(CStyleLanguage):
  """CUDA C++ for one architecture (sm_XY), planned for its limits (see Renderer)."""
  device = "CUDA"
  has_local = True
  max_global = (2**31 - 1, 65535, 65535)
  max_local = (1024, 1024, 64)
  max_work_group = 1024
  local_mem = 48 * 1024  # static shared memory per block
  # four warps: a multiprocessor holds at most 32 blocks, so smaller ones leave most of its 64 warps' slots empty
  group_items = 128

  def __init__(self, arch: str = "sm_90", vec: int = 4):
    if not re.fullmatch(r"sm_\d+[a-z]?", arch): raise ValueError(f"CUDA: {arch!r} is not an architecture (sm_80, sm_90, ...)")
    self.arch, self.vec = arch, vec  # vectors of 4: a 16-byte load of floats
    self.tensor_cores = NV_TENSOR_CORES if int(re.sub(r"\D", "", arch)) >= 80 else []  # mma.sync m16n8k16: sm_80 on

  def supported_dtypes(self) -> set[DType]: return super().supported_dtypes() - set(dtypes.fp8_fnuz)

  def render(self, k: LoweredKernel) -> str:
    self.check_dtypes(k, "the CUDA renderer")
    return CUDAWriter(k).write()
