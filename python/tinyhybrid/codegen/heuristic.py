"""Default optimizations: a good plan for a kernel without search (tinygrad's hand_coded_optimizations, for CPUs
with wide vectors). In order: vectorize the axis contiguous in memory, tile registers along the axes a load is
reused across, unroll small reduce axes, block a long reduce for the cache, and split a loop across the cores."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tinyhybrid.codegen.lower import LoweredKernel
from tinyhybrid.codegen.kernel import LANES, KernelOptError, KernelParts, Opt, OptOps, rkind, rsize, stride
from tinyhybrid.codegen.opt import apply_opt
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import AxisType, GroupOp, Ops
from tinyhybrid.uop.ops import UOp

if TYPE_CHECKING:
  from tinyhybrid.renderer import Renderer

BLOCK_K = 128       # reduce steps per cache block
FREE_REGISTERS = 6  # vector registers a register tile leaves for the loads and broadcasts of its step
MAX_ACC_LANES = 256  # past this a tile's loads outgrow the first-level cache's bandwidth, whatever the registers


def register_budget(ren: Renderer | None) -> tuple[int, int]:
  """(float lanes of a vector register, accumulator lanes a register tile may hold) for the CPU ren renders for
  (AVX-512 without one): AVX-512's 32 registers of 16 give 256 lanes, AVX2's 16 of 8 give 80 (a 2x32 tile). On AVX2
  code a 1024^2 matmul ran at 148 GFLOPS with 64 or 96 lanes and 105 with 128 (spills), where AVX-512's tile gave 102."""
  if ren is not None and ren.scalar_registers: return 1, max(1, ren.registers - FREE_REGISTERS)
  lanes, regs = (max(ren.vec, 1), ren.registers) if ren is not None and ren.vec > 1 else (16, 32)
  return lanes, min(MAX_ACC_LANES, lanes * (regs - FREE_REGISTERS))


class _Plan:
  def __init__(self, ast: UOp):
    self.opts: list[Opt] = []
    self.ast = ast
    self.parts = KernelParts.of(ast)

  def apply(self, op: OptOps, axis: int, arg: int = 0) -> bool:
    try: self.ast = apply_opt(self.ast, o := Opt(op, axis, arg))
    except KernelOptError: return False
    self.opts.append(o)
    self.parts = KernelParts.of(self.ast)
    return True


def _loads(p: KernelParts) -> list[UOp]: return [u.src[0].src[1] for u in p.value.toposort() if u.op is Ops.LOAD and u.src[0] is not p.out]


def _lanes(p: KernelParts, kinds: tuple[AxisType, ...]) -> int:
  n = 1
  for r in p.all_ranges():
    if rkind(r) in kinds: n *= rsize(r)
  return n


def _few_registers(lanes: int, acc_lanes: int) -> bool:
  """Vector registers for fewer than 16 vectors of accumulators: AVX2's 16 of 8 lanes (not AVX-512, NEON or scalar
  code)."""
  return 1 < lanes and acc_lanes < 16 * lanes


def _vector_amount(size: int, tile: bool, vec: int, acc_lanes: int, rows: bool, window: bool = False) -> int:
  """Lanes to upcast the vector axis by: a register tile (matmul, convolution) takes up to 4 vectors of it. With few
  registers (_few_registers), an axis that no vector divides is tiled by one vector with its last lanes masked, the
  most rows of the reused axis with it: a 3x3 conv's rows of 28 as chunks of 8, 8, 8 and 4 by 2 output channels ran at 30 GFLOPS on 2 AVX2 cores, by 7 lanes and 8 channels at 89
  (14 as 8, 4 and 2 by 4 channels 40, by 7 and 8 channels 89). rows: the tile has a reused axis (else its vectors
  are a matrix-vector product's independent accumulators, as many as divide)."""
  # with few registers at most 2 vectors, so the reused axis gets 4 rows: 64-row products with a panel weight, 4
  # vectors by 2 rows 42.4 ms (a prefill chunk of bench/llm.py's model), 2 vectors by 4 rows 29.2
  few = rows and _few_registers(vec, acc_lanes)
  for a in (((2 * vec, vec) if few else (4 * vec, 2 * vec, vec)) if tile else (vec,)):
    if size % a == 0: return a
  if tile and size > vec and few and (part := next((d for d in range(vec - 1, vec // 2, -1) if size % d == 0), 0)): return part
  # a conv's row of up to 2 vectors that none divides, with 16 registers of accumulators (AVX-512): one masked vector
  # of it, for 16 output channels (step 2). 28x28 3x3 at batch 8 on 2 Zen 4 cores: the whole row by 8 channels 105
  # GFLOPS, 14 lanes by 16 channels 178; a row of 56 stays whole (4 vectors by 4 channels 170, 14 lanes by 16 155)
  if tile and window and vec < size <= 2 * vec and rows and 16 * vec <= acc_lanes and \
     (part := next((d for d in range(vec - 1, vec // 2, -1) if size % d == 0), 0)): return part
  if vec // 4 <= size <= 4 * vec: return size  # the whole axis, in chunks of different widths
  return next((a for a in (8, 4) if size % a == 0), 1)


# ALU operations per element from which the operand varying along the vector axis costs more than a load: a weight
# dequantized inside the kernel (a Q4_K weight: mask, convert, scale, offset). Its register tile then takes one vector
# of that axis and up to 8 of the reused one, so each computed vector serves more multiply-adds. A Q4_K weight times
# 64 rows, 4 vectors by 4 rows -> 1 by 8: 8192 x 1536 12.2 -> 9.6 ms, 1536 x 4096 6.0 -> 4.9 ms (1 by 16 was slower
# there, 8.0 ms: 16 rows of a 4096-long reduce outgrow the cache); Q6_K's 1536 x 4096 stays at 6.7-7.2 ms
COMPUTED_OPERAND_OPS = 3


def _operand_ops(red: UOp, vec: UOp, reused: list[UOp]) -> int:
  """How many ALU operations of red's source compute from loads that move along vec but along none of reused."""
  moves: dict[UOp, tuple[bool, bool]] = {}  # node -> (some load under it moves along vec, some along a reused axis)
  n = 0
  for u in red.src[0].toposort():
    if u.op is Ops.LOAD:
      ix = u.src[0].src[1]
      moves[u] = (stride(ix, vec) != 0, any(stride(ix, r) != 0 for r in reused))
      continue
    along_vec, along_reused = False, False
    for s in u.src:
      v, r = moves.get(s, (False, False))
      along_vec, along_reused = along_vec or v, along_reused or r
    moves[u] = (along_vec, along_reused)
    if u.op in GroupOp.AnyALU and u.dtype.scalar() not in (dtypes.weakint, dtypes.bool) and along_vec and not along_reused: n += 1
  return n


def _streams(red: UOp | None, vec: UOp, lanes: int) -> bool:
  """Whether a reduce with no register tile (a matrix-vector product with vectors along its outputs) takes several
  vectors of the output axis anyway: independent accumulators, so each step's multiply-add does not wait for the
  last one's, and a panel's rows read in one pass (a half 8192 x 1536 weight in panels of 64 rows: 1.4 ms with one
  vector, 0.70 with four). Only where the outputs leave a few tiles for each core."""
  return red is not None and rsize(vec) >= 8 * lanes


TILE_ROWS = (8, 6, 4, 3, 2)  # what step 2 of the plan tries to tile a reused axis by, the most first


def _tile_rows(r: UOp, cols: int, acc_lanes: int) -> int:
  """The rows of reused axis r that step 2 of the plan tiles a register tile of `cols` vector lanes by."""
  return next((a for a in TILE_ROWS if rsize(r) % a == 0 and cols * a <= acc_lanes), 1)


def _balanced_tile(axes: list[UOp], vectors: int, registers: int) -> list[tuple[UOp, int]] | None:
  """For a tile of vectors along the reduce (x @ w.T): the rows of two output axes, as square as the registers allow,
  where tiling the first as far as it goes would leave the second untiled. With AVX2's 16 registers, 8 rows by one
  output load 9 vectors for 8 multiply-adds; 4 rows by 3 outputs (12 accumulators, the 3 outputs' vectors and one
  row's) load 7 for 12: 128 x 2304 x 768 ran at 91 GFLOPS, and at 181. AVX-512's 8 by 3 stays."""
  if len(axes) < 2: return None
  first = next((a for a in TILE_ROWS if rsize(axes[0]) % a == 0 and a <= vectors), 1)
  if any(rsize(axes[1]) % b == 0 and first * b <= vectors for b in TILE_ROWS): return None
  fits = [(a, b) for a in TILE_ROWS if rsize(axes[0]) % a == 0 for b in TILE_ROWS if rsize(axes[1]) % b == 0 and a * b <= registers - 4]
  if not fits: return None
  a, b = max(fits, key=lambda ab: (ab[0] * ab[1] / (ab[0] + ab[1]), ab[0]))
  return [(axes[0], a), (axes[1], b)]


def _whole_vector_axis(size: int, amt: int, lanes: int, acc_lanes: int, tile_with: list[UOp]) -> int:
  """amt lanes of the vector axis, or all of a short one (up to 6 vectors) where the reused axis is too short to fill
  the register tile otherwise: a flash decode's weighted values, a head of 96 by 4 queries, as 6 vectors by 2 (one
  pass over a chunk's values) rather than 2 by 4 (three passes; 16 layers at 2048 positions: 6.9 -> 5.2 ms)."""
  if not tile_with or size == amt or size % lanes or size > 6 * lanes: return amt
  r = tile_with[0]
  return size if size * _tile_rows(r, size, acc_lanes) >= 1.5 * amt * _tile_rows(r, amt, acc_lanes) else amt


def _transposed_axis(p: KernelParts, vec: UOp, loads: list[UOp]) -> UOp | None:
  """The output loop along which some load is contiguous while the store's vectors run along vec, which that load
  crosses rows of. Loaded one lane at a time, a vector of the store reads a cache line from each of 8 rows, and a
  1024^2 float transpose ran at 2.5 GB/s on 2 AVX2 cores; by 8 x 8 tiles, at 11.3."""
  return next((r for r in p.loops if r is not vec and rsize(r) % 2 == 0 and rkind(r) is AxisType.LOOP and
               any(stride(ld, r) == 1 and abs(stride(ld, vec) or 0) >= 64 for ld in loads)), None)


def _block_swept(plan: _Plan, rows: int, reduce_len: int, ren: Renderer) -> None:
  """Neither operand's share fits a core's cache, so each tile of outer rows sweeps all `rows` of the inner operand
  along the whole reduce, from memory once they outgrow half the shared cache: then the reduce is blocked (BLOCK, the
  blocks' loop outermost) so that a block of those rows, at most 2 core caches, is swept from the caches instead. On 2
  Zen 4 cores (1 MB L2, 32 MB L3): a conv's weight gradient 128 x 1152 over 6272, whose rows are 29 MB, 10.1 ms in one
  sweep, 6.0 in blocks of 448. Below that the blocks' partial outputs cost more than they save: 1024 x 3072 over 768
  (9.4 MB of rows) 10.1 -> 16.4 ms in blocks of 128."""
  parts = plan.parts
  red = [r for r in parts.reduce_ranges if rkind(r) is AxisType.REDUCE]
  if rows * reduce_len * 4 <= ren.shared_cache // 2 or not red or not _cheap_epilogue(parts): return
  r = max(red, key=rsize)
  per_step = reduce_len // rsize(r)  # values of the reduce in one step of its loop (the unrolled ones)
  fits = [d for d in range(1, rsize(r)) if rsize(r) % d == 0 and rows * d * per_step * 4 <= 2 * ren.core_cache and d * per_step >= 64]
  if fits: plan.apply(OptOps.BLOCK, r.arg[0], max(fits))


def _cheap_epilogue(p: KernelParts) -> bool:
  """Whether what the kernel computes from its reduce's result is cheap enough to compute after every block of a
  blocked reduce (opt.py's BLOCK evaluates it in each block and keeps the last block's; its loads are gated to the
  last block): a bias, a residual and an activation such as relu, not a GELU's exp."""
  if p.reduce is None: return True
  inside = set(p.reduce.toposort())
  rest = [u for u in p.value.toposort() if u not in inside]
  return sum(u.op in GroupOp.AnyALU and u.dtype is not dtypes.weakint for u in rest) <= 6 and \
    not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.FDIV, Ops.RECIPROCAL) for u in rest)


def hand_coded_optimizations(k: LoweredKernel, ren: Renderer | None = None) -> list[Opt]:
  lanes, acc_lanes = register_budget(ren)
  plan = _Plan(k.ast)
  p = plan.parts
  out_idx, loads = p.out.src[1], _loads(p)
  red = p.reduce
  # 1. vectors along the output axis contiguous in memory (in a reduce, only if no load then gathers from far apart,
  # a stride of 2 staying within two cache lines: a row reduce rather accumulates vectors along its row)
  vec = next((r for r in reversed(p.loops) if stride(out_idx, r) == 1 and rsize(r) > 1 and
              (red is None or all(stride(ld, r) in (0, 1, 2) for ld in loads))), None)
  # reuse: an output axis along which some load stays put, so one loaded value serves several outputs; the best
  # ones keep a vector load (one contiguous along `vec`) in place. Only loads read anew every reduce step and
  # differing between outputs count: a value read once per output tile (a per-channel scale) costs nothing to repeat
  streamed = [ld for ld in loads if any(stride(ld, r) != 0 for r in p.reduce_ranges) and any(stride(ld, r) != 0 for r in p.loops)]
  reuse = {r: sum(1 + 2 * (vec is not None and stride(ld, vec) != 0) for ld in streamed if stride(ld, r) == 0) for r in p.loops}
  reused = sorted((r for r in p.loops if reuse[r] and red is not None), key=lambda r: -reuse[r])
  acc_vec = 1  # lanes each accumulator of the register tile holds
  window = any(1 < rsize(r) <= 4 for r in p.reduce_ranges)  # a conv's window (unrolled in step 3)
  tile_with = [r for r in reused if r is not vec]
  # the sums the work is in: the inner sums where the reduce has them (int_matvec's blocks), else the reduce's own
  hot = next(iter(p.inner_sums), red)
  if vec is not None and hot is not None and dtypes.is_int(hot.dtype) and hot.dtype.itemsize < 4 and _few_registers(lanes, acc_lanes):
    # narrow integer sums (int_matvec's int16 blocks) with AVX2's 16 registers: a register holds 16 of them, so up to
    # 4 registers of the vector axis and no rows (a Q4_K decode's blocks by 4 x 16 lanes 10.1 ms a step, by 64 2.6)
    wide = lanes * 4 // hot.dtype.itemsize
    amt = next((a for a in (4 * wide, 2 * wide, wide) if rsize(vec) % a == 0), 1)
    plan.apply(OptOps.UPCAST, vec.arg[0], amt)
    # and two of another output loop (two panels) where their accumulators take at most half the registers: each core
    # then reads two streams of weights, which memory serves faster than one (2 Zen 3 cores read 28 GB/s with one stream
    # each, 45 with four a core; a decode product of a 56 MB Q4_K weight 2.5-2.7 -> 1.9-2.2 ms)
    if 2 * max(1, amt // wide) <= (ren.registers if ren is not None else 32) // 2:
      if (other := next((r for r in p.loops if r is not vec and rsize(r) % 2 == 0), None)) is not None: plan.apply(OptOps.UPCAST, other.arg[0], 2)
    reused = []
  elif vec is not None and red is not None and tile_with and rsize(vec) % lanes == 0 and _operand_ops(red, vec, tile_with) >= COMPUTED_OPERAND_OPS:
    plan.apply(OptOps.UPCAST, vec.arg[0], lanes)
  elif vec is not None and (amt := _vector_amount(rsize(vec), bool(tile_with) or _streams(red, vec, lanes), lanes, acc_lanes, bool(tile_with),
                                                   window)) > 1:
    plan.apply(OptOps.UPCAST, vec.arg[0], _whole_vector_axis(rsize(vec), amt, lanes, acc_lanes, tile_with))
  elif red is not None:
    # no output vector: accumulate along a reduce axis contiguous in memory, in vector accumulators (several of them
    # when there is no register tile to hold the loads in flight)
    rvec = next((r for r in reversed(p.reduce_ranges) if any(stride(ld, r) == 1 for ld in loads)), None)
    if rvec is not None:
      amt = next((a for a in ((lanes, 8, 4) if reused else (4 * lanes, 2 * lanes, lanes, 8, 4)) if rsize(rvec) % a == 0 and rsize(rvec) >= 2 * a), 1)
      if amt > 1 and plan.apply(OptOps.UNROLL, rvec.arg[0], amt): acc_vec = amt

  # 1b. a copy that transposes (a load contiguous along another output axis than the store): a square tile of both
  # axes, so each lane's load reads a vector of its own and the tile is transposed in registers
  if red is None and vec is not None and (across := _transposed_axis(p, vec, loads)) is not None:
    plan.apply(OptOps.UPCAST, across.arg[0], next((a for a in (8, 4, 2) if rsize(across) % a == 0), 1))

  # 2. register tile: upcast the reused output axes while the accumulators fit the registers. Vectors accumulated
  # along the reduce axis are multiplied straight from memory (an FMA's memory operand): only 8 registers stay free
  registers = ren.registers if ren is not None else 32
  # each accumulator takes a register whatever its lanes: 4-lane partial sums (a reduce of 196 positions) by 8 x 2
  # spilled on AVX2 (a 14x14 conv's weight gradient 36.8 ms; by 4 x 3, 27.8)
  if acc_vec > 1: acc_lanes = min(max(acc_lanes, min(lanes * (registers - 8), 384)), acc_vec * (registers - 4))
  square = _balanced_tile(tile_with, acc_lanes // acc_vec, registers) if acc_vec > 1 else None
  for r, amt in square or (): plan.apply(OptOps.UPCAST, r.arg[0], amt)
  # a conv's window (a small reduce axis, unrolled below) with one vector of its row: 16 rows of the most reused axis
  # where the registers hold them (AVX-512), and no other axis. 3x3 convs at batch 8 on 2 Zen 4 cores (clang): 14x14 by
  # 16 output channels 186 GFLOPS, by 8 channels and 2 images 171; 7x7 (7 lanes, a register each) 129, by 8 channels
  # and 4 images (32 registers of accumulators) 122; the 7x7 stem 88 against 45. A 1x1 conv (no window) lost by 16
  # rows: 14x14x1024 -> 256 at batch 1, 3.0 -> 6.0 ms (LLVM's code; its weight rows' broadcasts outrun the loads)
  first = next((r for r in reused if r is not vec), None)
  for r in reused:
    if r is vec or square is not None: continue
    tile = _lanes(plan.parts, (AxisType.UPCAST,)) * acc_vec
    if r is first and window and rsize(r) % 16 == 0 and tile * 16 <= acc_lanes and plan.apply(OptOps.UPCAST, r.arg[0], 16): break
    for amt in TILE_ROWS:
      if rsize(r) % amt == 0 and tile * amt <= acc_lanes and plan.apply(OptOps.UPCAST, r.arg[0], amt): break

  # 3. unroll small reduce axes: e.g. a convolution's window, whose padding masks then become constants
  if red is not None:
    for r in plan.parts.reduce_ranges:
      if rkind(r) is AxisType.REDUCE and rsize(r) <= 4 and _lanes(plan.parts, LANES) * rsize(r) <= 4096: plan.apply(OptOps.UNROLL, r.arg[0], rsize(r))

  # 4. a long reduce over a load that jumps far each step (matmul's B): block it, the block's loop outermost, so a block
  # of that load stays in cache while each core's output rows sweep over it
  parts = plan.parts
  big = [r for r in parts.reduce_ranges if rkind(r) is AxisType.REDUCE and rsize(r) >= 2 * BLOCK_K and rsize(r) % BLOCK_K == 0 and
         any((s := stride(ld, r)) is not None and s >= 512 for ld in _loads(parts))]
  loops = [r for r in parts.loops if rkind(r) is AxisType.LOOP]
  if big and loops and _lanes(parts, (AxisType.UPCAST,)) >= 64 and _cheap_epilogue(parts):
    rows = max(loops, key=lambda r: abs(stride(parts.out.src[1], r) or 0))
    if plan.apply(OptOps.THREAD, rows.arg[0]) and plan.apply(OptOps.BLOCK, big[0].arg[0], BLOCK_K):
      plan.apply(OptOps.UNROLL, big[0].arg[0], 4)  # fewer loop steps around the tile's multiply-adds

  # 5. cores: a tile accumulating along the reduce axis (x @ w.T, nn.Linear's weight) sweeps, for each tile of one
  # output loop, all of the other loop's operand: that inner one is read again and again, so it should stay in a
  # core's own cache. The inner loop of the two is split across the cores when its share fits; else the outer one,
  # moved inside, when its share does (on 2 AVX-512 cores, 1.3x to 1.4x; neither fits: the default below)
  pair = [r for r in plan.parts.loops if rkind(r) is AxisType.LOOP]
  if acc_vec > 1 and ren is not None and len(pair) == 2 and all(reuse.get(p.find(r.arg[0]), 0) for r in pair):
    reduce_len = prod(rsize(r) for r in p.reduce_ranges)
    share = {r: rsize(p.find(r.arg[0])) * reduce_len * 4 // max(ren.cores, 1) for r in pair}  # float32 bytes per core
    outer, inner = pair
    if share[inner] <= ren.core_cache * 0.6: plan.apply(OptOps.THREAD, inner.arg[0])
    elif share[outer] <= ren.core_cache * 0.6 and plan.apply(OptOps.THREAD, outer.arg[0]): plan.apply(OptOps.SWAP, outer.arg[0], inner.arg[0])
    else: _block_swept(plan, rsize(p.find(inner.arg[0])), reduce_len, ren)
  parts = plan.parts
  if not any(rkind(r) in (AxisType.THREAD, AxisType.GROUP_REDUCE) for r in parts.all_ranges()):
    loops = [r for r in parts.loops if rkind(r) is AxisType.LOOP]
    pick = next((r for r in loops if rsize(r) >= 16 or rsize(r) % 2 == 0), max(loops, key=rsize, default=None))
    if pick is not None and rsize(pick) > 1: plan.apply(OptOps.THREAD, pick.arg[0])
    elif not loops and (rr := [r for r in parts.reduce_ranges if rkind(r) is AxisType.REDUCE and rsize(r) >= 64]):
      plan.apply(OptOps.GROUP, rr[0].arg[0])
  return plan.opts
