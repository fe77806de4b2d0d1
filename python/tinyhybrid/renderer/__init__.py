"""Renderers turn a lowered kernel into source for one device family. `Renderer` is what every renderer shares: its
name (`device`), which dtypes it can render, and the shape of the machine its kernels run on, which the code
generator plans for (codegen/opt.py, codegen/gpu.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.uop import GroupOp, Ops

if TYPE_CHECKING:
  from tinyhybrid.codegen.lower import LoweredKernel


@dataclass(frozen=True)
class Estimates:
  """A kernel's estimated work per run (tinygrad's): operations, bytes loaded and stored, bytes of memory touched."""
  ops: Any = 0
  lds: Any = 0
  mem: Any = 0
  def __add__(self, o: Estimates) -> Estimates: return Estimates(self.ops + o.ops, self.lds + o.lds, self.mem + o.mem)


@dataclass(frozen=True)
class TensorCore:
  """A warp-wide matrix multiply-accumulate the device has (tinygrad's TensorCore): D (MxN, dtype_out) = A (MxK,
  dtype_in) @ B (KxN) + C, with `threads` threads each holding `elements` = (A, B, C) values of the fragments.
  Which thread holds which element is the instruction's layout, given by a_elem, b_elem and c_elem: (thread,
  register) -> (row, column), written with // and % so that they take ints and index UOps alike (codegen/tc.py)."""
  name: str                           # the instruction's shape and types, e.g. m16n8k16.f32.f16.f16.f32
  dims: tuple[int, int, int]          # (N, M, K), tinygrad's order
  threads: int
  elements: tuple[int, int, int]      # values per thread of A, B and C
  dtype_in: DType
  dtype_out: DType
  def a_elem(self, lane, reg): raise NotImplementedError
  def b_elem(self, lane, reg): raise NotImplementedError
  def c_elem(self, lane, reg): raise NotImplementedError


@dataclass(frozen=True)
class MMA16816(TensorCore):
  """mma.sync.aligned.m16n8k16.row.col (sm_80 and later), the PTX ISA's fragment layouts for 16-bit inputs: lane
  l is in group l // 4 at place l % 4 of it. A (16x16, 8 per lane): row group + 8 * (r // 2 % 2), column
  place * 2 + r % 2 + 8 * (r // 4); B (16x8, 4 per lane): row place * 2 + r % 2 + 8 * (r // 2), column group;
  C and D (16x8, 4 per lane): row group + 8 * (r // 2), column place * 2 + r % 2."""
  def a_elem(self, lane, reg): return (lane // 4 + reg // 2 % 2 * 8, lane % 4 * 2 + reg % 2 + reg // 4 * 8)
  def b_elem(self, lane, reg): return (lane % 4 * 2 + reg % 2 + reg // 2 * 8, lane // 4)
  def c_elem(self, lane, reg): return (lane // 4 + reg // 2 * 8, lane % 4 * 2 + reg % 2)


def mma_16816(dtype_in: DType, dtype_out: DType) -> MMA16816:
  def t(d: DType) -> str: return {"half": "f16", "__bf16": "bf16", "float": "f32"}[d.name]
  return MMA16816(f"m16n8k16.{t(dtype_out)}.{t(dtype_in)}.{t(dtype_in)}.{t(dtype_out)}", (8, 16, 16), 32, (8, 4, 4), dtype_in, dtype_out)


# NVIDIA's, sm_80 and later: fp16 and bf16 inputs, fp32 accumulation, and fp16 accumulation for fp16
NV_TENSOR_CORES: list[TensorCore] = [mma_16816(dtypes.half, dtypes.float), mma_16816(dtypes.bfloat16, dtypes.float), mma_16816(dtypes.half, dtypes.half)]


class Renderer:
  device: str = ""
  vec: int = 1                       # the widest vector (lanes) its kernels compute in; 1: scalar code only
  registers: int = 32                # vector registers a kernel's register tile may fill (codegen/heuristic.py)
  # its registers hold one value each (machine code without vectors, renderer/isa/x86.py): a register tile is sized
  # in them; vec=1 otherwise means a compiler that vectorizes scalar C itself
  scalar_registers: bool = False
  # the element types whose vectors it computes (None: every type codegen/expand.VEC_DTYPES lists); ops on vectors of
  # other types are expanded lane by lane
  vec_dtypes: frozenset[DType] | None = None
  # float ops beyond the common ones (codegen/expand._VEC_ALU) that it computes on vectors (x86's vsqrtps)
  vector_float_ops: frozenset[Ops] = frozenset()
  cores: int = 1                     # cores a kernel's outer loop is split across
  core_cache: int = 1 << 20          # bytes of one core's own cache (its L2): what a loop may sweep again and again
  shared_cache: int = 32 << 20       # bytes of the cache the cores share (their L3): what a blocked reduce keeps out of it
  # float dtypes whose EXP2 and LOG2 are written as plain ops before the lanes are expanded
  # (codegen/decomp/transcendental.py), so that they run on vectors: a CPU's libm takes one value per call
  vector_transcendentals: frozenset[DType] = frozenset()
  # it loads half vectors and widens them to float vectors (x86's F16C: one instruction): a quantized weight's fp16
  # scales, 16 rows of them at once (otherwise 16 scalar loads and conversions, most of a decode step's scaling kernel)
  half_loads: bool = False
  # it writes a reduce's loop inside another's: a small integer sum read only by a further reduce (int_matvec's block
  # sums) is then computed in the kernel that reads it (schedule/kernelize._inner_sums), not written to memory first
  inner_sums: bool = False
  # kernels of a GPU-style device run as a grid of work-groups: output loops become GLOBAL (the group's position)
  # and LOCAL (the work-item's place in its group) ranges, and work-items of a group share local memory and barriers
  has_local: bool = False
  max_global: tuple[int, ...] = ()   # work-groups per grid dimension
  max_local: tuple[int, ...] = ()    # work-items per local dimension
  max_work_group: int = 1            # work-items per work-group
  group_items: int = 16              # work-items per group the default plan aims for (codegen/gpu.py)
  local_mem: int = 0                 # bytes of local memory per work-group
  tensor_cores: list[TensorCore] = []  # the matrix instructions the TC action can use (codegen/tc.py)

  @property
  def eight_lanes(self) -> bool:
    """Whether it renders for a CPU whose vectors hold 8 floats (AVX2): 16 registers of them, and 16 lanes of int16."""
    return not self.has_local and 1 < self.vec < 16

  def supported_dtypes(self) -> set[DType]:
    """The dtypes this renderer's kernels can read, write and compute in (tinygrad's Renderer.supported_dtypes)."""
    return set(dtypes.all)

  @property
  def code_for_op(self) -> dict[Ops, None]:
    """The ALU ops a kernel may hold when it reaches this renderer (tinygrad's name, read for membership): tinygrad's
    ALU ops here, as the transcendental ones a device lacks are decomposed before rendering
    (codegen/decomp/transcendental.py); a renderer without BYTEDOT (GroupOp.AnyALU's) gets it as int32 arithmetic
    (codegen/decomp/op.py)."""
    return dict.fromkeys(GroupOp.ALU)

  def lacking_dtypes(self, k: LoweredKernel) -> list[DType]:
    """The dtypes kernel k holds or computes in that this renderer has not (weak ones are rendered as strong ones)."""
    used = {u.dtype.scalar() for u in k.ast.toposort() if u.op is not Ops.PARAM} | {b.dtype.scalar() for b in k.buffers}
    return sorted({d for d in used if d is not dtypes.void and not d._is_weak} - self.supported_dtypes(), key=str)

  def check_dtypes(self, k: LoweredKernel, who: str) -> None:
    """Refuses, at render time, a kernel with a dtype this renderer (`who`, for the message) has not."""
    if lacking := self.lacking_dtypes(k): raise TypeError(f"kernel {k.name}: {who} has no {', '.join(map(str, lacking))}")

  def render(self, k: LoweredKernel) -> str:
    """The optimized kernel's source for this device family (each renderer writes its own)."""
    raise NotImplementedError(f"{type(self).__name__} renders no source")
