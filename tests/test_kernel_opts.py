"""Kernel optimizations: numerics of optimized kernels (heuristics, each action alone, BEAM) against numpy/torch."""
import json
import re
from math import prod
from dataclasses import replace

import numpy as np
import pytest
import torch

from tinyhybrid import Context, Device, Tensor, dtypes
from tinyhybrid.codegen import search
from tinyhybrid.codegen.heuristic import hand_coded_optimizations
from tinyhybrid.codegen.lower import Lowerer
from tinyhybrid.codegen.kernel import KernelOptError, KernelParts, Opt, OptOps, rsize
from tinyhybrid.codegen.opt import apply_opts, merge_loops
from tinyhybrid.codegen import finalize
from tinyhybrid.codegen.search import actions
from tinyhybrid.device import Buffer
from tinyhybrid.engine.realize import kernel_cache, schedule_cache
from tinyhybrid.renderer.cstyle import CRenderer, last_level_cache
from tinyhybrid.runtime import diskcache
from tinyhybrid.runtime.compiler import is_clang
from tinyhybrid.schedule.kernelize import create_schedule, normalize
from tinyhybrid.uop import AxisType

RNG = np.random.default_rng(6)


def _f(*shape): return RNG.standard_normal(shape).astype(np.float32)


def kernel_of(t: Tensor):
  """The one kernel computing t (its inputs realized): the lowered kernel and its input Buffers."""
  key, inputs, _ = normalize([t.uop])
  spec = create_schedule(key, len(inputs))
  assert len(spec.items) == 1, "inputs should be realized"
  return Lowerer(spec.items[0]).lower(), inputs


def run_plan(t: Tensor, opts) -> np.ndarray:
  """t computed by its kernel with exactly these opts, split across every core of the device."""
  k, inputs = kernel_of(t)
  dev = Device["CPU"]
  fk = finalize(k, opts, dev.renderer.vec)
  prg = dev.compile(fk.name, dev.renderer.render(fk))
  bufs = {i: b for i, b in enumerate(inputs)}
  out = Buffer("CPU", k.buffers[0].size, k.buffers[0].dtype)
  bufs[k.buffers[0].index] = out
  prg.call([bufs[b.index].address for b in k.buffers], max(1, min(fk.outer, dev.max_threads)))
  return out.numpy().reshape(t.shape)


def _conv_ref(x, w, **kw): return torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), **kw).numpy()


# (name, tensor builder over realized inputs, reference): each is one kernel
CASES = {
  "matmul_odd": lambda a=_f(17, 33), b=_f(33, 5): ((Tensor(a).realize() @ Tensor(b).realize()), a @ b),
  "matmul": lambda a=_f(48, 64), b=_f(64, 80): ((Tensor(a).realize() @ Tensor(b).realize()), a @ b),
  "matmul_long_k": lambda a=_f(16, 1024), b=_f(1024, 64): ((Tensor(a).realize() @ Tensor(b).realize()), a @ b),
  "sum_full": lambda x=_f(4096): (Tensor(x).realize().sum(), x.sum(dtype=np.float64)),
  "sum_odd": lambda x=_f(1001): (Tensor(x).realize().sum(), x.sum(dtype=np.float64)),
  "sum_axis0": lambda x=_f(64, 48): (Tensor(x).realize().sum(0), x.sum(0)),
  "sum_axis1": lambda x=_f(24, 160): (Tensor(x).realize().sum(1), x.sum(1)),
  "max_axis1": lambda x=_f(24, 160): (Tensor(x).realize().max(1), x.max(1)),
  "conv": lambda x=_f(2, 4, 12, 12), w=_f(8, 4, 3, 3): (Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1), _conv_ref(x, w, padding=1)),
  "conv_stride": lambda x=_f(1, 3, 11, 9), w=_f(4, 3, 3, 3): (Tensor(x).realize().conv2d(Tensor(w).realize(), stride=2), _conv_ref(x, w, stride=2)),
  "add_bcast": lambda a=_f(33, 64), b=_f(64): (Tensor(a).realize() + Tensor(b).realize(), a + b),
  "mul_bcast_col": lambda a=_f(40, 48), b=_f(40, 1): (Tensor(a).realize() * Tensor(b).realize(), a * b),
  "where_relu": lambda a=_f(7, 96): ((Tensor(a).realize() > 0).where(Tensor(a).realize(), -1.0).relu(), np.maximum(np.where(a > 0, a, -1), 0)),
  "int_add": lambda a=RNG.integers(-9, 9, (5, 64)).astype(np.int32): (Tensor(a).realize() * 3 + 1, a * 3 + 1),
  # rows of 14 and 7 are one vector of 16 (8) with dead lanes: they must not be read, stored or reduced
  "conv_14": lambda x=_f(2, 8, 14, 14), w=_f(8, 8, 3, 3): (Tensor(x).realize().conv2d(Tensor(w).realize(), padding=1), _conv_ref(x, w, padding=1)),
  "conv1x1_7": lambda x=_f(2, 16, 7, 7), w=_f(8, 16, 1, 1): (Tensor(x).realize().conv2d(Tensor(w).realize()), _conv_ref(x, w)),
  "max_row_13": lambda x=_f(9, 13) - 5: (Tensor(x).realize().max(1), x.max(1)),
  "sum_row_14": lambda x=_f(12, 14): (Tensor(x).realize().sum(1), x.sum(1)),
  "add_14": lambda a=_f(6, 14), b=_f(14): (Tensor(a).realize() + Tensor(b).realize(), a + b),
}


def _tol(name): return dict(rtol=1e-4, atol=1e-4 * (100 if name.startswith("sum") else 1))


@pytest.mark.parametrize("name", list(CASES))
def test_default_heuristics(name):
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  np.testing.assert_allclose(run_plan(t, hand_coded_optimizations(k)), ref, **_tol(name))


def _sample(plans, per_op=1):
  """A few plans of each kind of last action (compiling every one would take minutes)."""
  seen = {}
  for p in plans: seen.setdefault(p[-1].op, []).append(p)
  return [p for ps in seen.values() for p in ps[:per_op]]


@pytest.mark.parametrize("name", list(CASES))
def test_each_action(name):
  """Actions that apply, each on its own and after the default plan."""
  t, ref = CASES[name]()
  k, _ = kernel_of(t)
  base = tuple(hand_coded_optimizations(k))
  plans = _sample([(a,) for a in actions(k.ast)]) + _sample([base + (a,) for a in actions(apply_opts(k.ast, base))])
  ran = 0
  for plan in plans:
    try: got = run_plan(t, plan)
    except KernelOptError: continue
    np.testing.assert_allclose(got, ref, **_tol(name), err_msg=f"plan {plan}")
    ran += 1
  assert ran > 0


def test_opts_that_do_not_apply():
  t, _ = CASES["matmul_odd"]()
  k, _ = kernel_of(t)
  for bad in [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 17), Opt(OptOps.GROUP, 1), Opt(OptOps.THREAD, 1), Opt(OptOps.BLOCK, 1, 33)]:
    with pytest.raises(KernelOptError): apply_opts(k.ast, [bad])


def test_vectors_and_cores_in_the_source():
  """The default plan of a big matmul is register tiled with vectors, blocked, and split across cores."""
  a, b = Tensor(_f(64, 1024)).realize(), Tensor(_f(1024, 1024)).realize()
  k, _ = kernel_of(a @ b)
  dev = Device["CPU"]
  opts = hand_coded_optimizations(k, dev.renderer)
  assert {o.op for o in opts} >= {OptOps.UPCAST, OptOps.THREAD, OptOps.BLOCK}
  fk = finalize(k, opts, dev.renderer.vec)
  src = dev.renderer.render(fk)
  assert fk.outer > 1 and (f"ext_vector_type({dev.renderer.vec})" in src and "th_fma" in src or dev.renderer.vec == 1)  # vectors need clang
  np.testing.assert_allclose(run_plan(a @ b, opts), a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 5), (8, 3), (7, 9)])
def test_lanes_along_the_reduction_are_summed_across_accumulators(rows, cols):
  """A matmul of rows that are contiguous along k (x @ w.T) keeps its lanes along k: each output tile's accumulators
  are summed by swapping halves between them (expand._transposed_fold), not lane by lane."""
  x, w = Tensor(_f(rows * 4, 96)).realize(), Tensor(_f(cols * 6, 96)).realize()
  k, _ = kernel_of(x @ w.T)
  dev = Device["CPU"]
  opts = hand_coded_optimizations(k, dev.renderer)
  src = dev.renderer.render(finalize(k, opts, dev.renderer))
  np.testing.assert_allclose(run_plan(x @ w.T, opts), x.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)
  if dev.renderer.vec > 1 and "acc1" in src:  # several vector accumulators: no lane of one is added to another lane
    assert not re.search(r"acc\d+\[\d+\] \+", src)


@pytest.mark.parametrize("m,n,k,blocked", [(128, 1152, 6272, True), (1024, 3072, 768, False)])
def test_rows_past_half_the_shared_cache_are_swept_in_blocks(m, n, k, blocked):
  """x @ w.T where neither operand's share fits a core's cache: each tile of x's rows sweeps all of w's rows. Past half
  the shared cache (a weight gradient's 29 MB against 32 MB) the reduce is blocked, so a block of w's rows, at most 2
  core caches, is swept from the cache; below that it is not (the blocks' partial outputs would cost more)."""
  ren = CRenderer(16, registers=32)  # AVX-512's vectors, whatever the host's
  ren.cores, ren.core_cache, ren.shared_cache = 2, 1 << 20, 32 << 20
  x, w = Tensor.empty(m, k), Tensor.empty(n, k)
  kern, _ = kernel_of(x @ w.T)
  opts = hand_coded_optimizations(replace(kern, ast=merge_loops(kern.ast, 16)), ren)
  block = [o for o in opts if o.op is OptOps.BLOCK]
  assert bool(block) == blocked, opts
  if blocked:
    per_step = prod(o.arg for o in opts if o.op is OptOps.UNROLL)
    assert 64 <= block[0].arg * per_step and n * block[0].arg * per_step * 4 <= 2 << 20, opts
    xs, ws = Tensor(_f(m, k)).realize(), Tensor(_f(n, k)).realize()
    np.testing.assert_allclose(run_plan(xs @ ws.T, opts), xs.numpy() @ ws.numpy().T, rtol=1e-4, atol=1e-2)


def test_adjacent_reduce_loops_walked_as_one_merge():
  """A weight gradient summed over a batch and its tokens reduces over one loop of 4 x 32; a convolution's window
  (its loads shift by the loop's parts) keeps its loops."""
  dy, x = Tensor(_f(4, 32, 24)).realize(), Tensor(_f(4, 32, 40)).realize()
  grad = (dy.unsqueeze(-1) * x.unsqueeze(-2)).sum((0, 1))
  k, _ = kernel_of(grad)
  merged = KernelParts.of(merge_loops(k.ast))
  assert [rsize(r) for r in merged.reduce_ranges] == [128]
  np.testing.assert_allclose(grad.numpy(), np.einsum("btn,btk->nk", dy.numpy(), x.numpy()), rtol=1e-4, atol=1e-4)  # merged on the way
  img, w = Tensor(_f(1, 3, 8, 8)).realize(), Tensor(_f(4, 3, 3, 3)).realize()
  conv = img.conv2d(w, padding=1)
  k, _ = kernel_of(conv)
  assert len(KernelParts.of(merge_loops(k.ast)).reduce_ranges) == len(KernelParts.of(k.ast).reduce_ranges) > 1
  np.testing.assert_allclose(conv.numpy(), torch.nn.functional.conv2d(torch.tensor(img.numpy()), torch.tensor(w.numpy()), padding=1).numpy(),
                             rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("epilogue", ["relu", "bias_relu", "bias_gelu", "bias_residual"])
def test_a_blocked_matmul_applies_its_epilogue_once(epilogue):
  # relu(x @ w + b): the blocked reduce keeps partial sums in the output, and the last block applies the epilogue to
  # the whole sum (a plan without BLOCK ran these at half a plain matmul's speed); the epilogue's loads (a bias, a
  # residual) are gated to that block. The heuristics block only under a cheap epilogue, since every block computes
  # it: a GELU (exp) is not, but a plan may still block it
  a, w, b, r = _f(16, 512), _f(512, 512), _f(512), _f(16, 512)
  x, wt, bt, rt = Tensor(a).realize(), Tensor(w).realize(), Tensor(b).realize(), Tensor(r).realize()
  ref = torch.tensor(a) @ torch.tensor(w) + (0 if epilogue == "relu" else torch.tensor(b))
  t = x @ wt + (0 if epilogue == "relu" else bt)
  if epilogue == "bias_residual": t, ref = t + rt, ref + torch.tensor(r)
  elif epilogue == "bias_gelu": t, ref = t.gelu(), torch.nn.functional.gelu(ref, approximate="tanh")
  else: t, ref = t.relu(), ref.relu()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k)
  cheap = hand_coded_optimizations(kernel_of((x @ wt + bt).relu())[0])
  block = next(o for o in cheap if o.op is OptOps.BLOCK)
  assert (block in opts) == (epilogue != "bias_gelu")
  if block not in opts: opts = cheap
  np.testing.assert_allclose(run_plan(t, opts), ref.numpy(), rtol=1e-4, atol=1e-4)
  for amt in (64, 256):  # more blocks and fewer
    plan = [Opt(OptOps.BLOCK, block.axis, amt) if o == block else o for o in opts]
    np.testing.assert_allclose(run_plan(t, plan), ref.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"plan {plan}")
  # a cast after the sum would round the partial sums: no BLOCK then
  kh, _ = kernel_of((x @ wt).cast(dtypes.half))
  with pytest.raises(KernelOptError): apply_opts(kh.ast, [block])


def test_full_sum_uses_every_core():
  x = _f(1 << 16)
  t = Tensor(x).realize().sum()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k)
  assert any(o.op is OptOps.GROUP for o in opts) and finalize(k, opts, 16).outer > 1
  for _ in range(3): np.testing.assert_allclose(run_plan(t, opts), x.sum(dtype=np.float64), rtol=1e-4)  # repeat: the cores' slots are reused


def test_padding_masks_and_nan():
  # a padded convolution whose rows are whole vectors of masked loads, and a vectorized max keeping NaN as torch does
  x, w = _f(1, 2, 7, 56), _f(3, 2, 3, 3)
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=1).numpy(), _conv_ref(x, w, padding=1), rtol=1e-4, atol=1e-4)
  y = _f(4, 64)
  y[1, 5] = np.nan
  np.testing.assert_array_equal(np.isnan(Tensor(y).max(1).numpy()), [False, True, False, False])


def test_lane_masks():
  """Vector loads across the padding of a convolution: constant masks (window unrolled), masks that depend on the
  loops (not unrolled), and a gate shared by all lanes (the row is padding)."""
  t, ref = CASES["conv"]()
  up, up_all, kx, ky = Opt(OptOps.UPCAST, 4, 4), Opt(OptOps.UPCAST, 4, 12), Opt(OptOps.UNROLL, 7, 3), Opt(OptOps.UNROLL, 6, 3)
  for plan in [(up,), (up_all, kx), (up, ky)]:
    np.testing.assert_allclose(run_plan(t, plan), ref, rtol=1e-4, atol=1e-4, err_msg=f"plan {plan}")


def _forget_kernels():
  """Drops the plans realize keeps, so the next realize lowers (and optimizes) again."""
  schedule_cache.clear()
  kernel_cache.clear()


def test_beam_search_and_its_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  a, b = _f(8, 4), _f(4, 8)
  _forget_kernels()
  with Context(BEAM=2): np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  saved = list((tmp_path / "beam").glob("*.json"))
  assert saved and all(isinstance(json.loads(diskcache.read(p) or b"null"), list) for p in saved)  # sealed entries
  # a second run takes the plans from disk and times nothing
  monkeypatch.setattr(search, "_Timer", lambda *a: pytest.fail("BEAM searched again"))
  _forget_kernels()
  with Context(BEAM=2): np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  _forget_kernels()


def test_reshapes_of_a_buffer_index_it_flat():
  """A buffer's memory is flat, so reshapes of it (through a detach) index it through one reshape: a (4, 60, 3, 3)
  weight read as (4, 9, 60) leaves no modulo in the kernel (through each reshape in turn: three)."""
  from tinyhybrid.codegen import to_program
  from tinyhybrid.schedule.localize import localize
  w = Tensor(np.arange(4 * 60 * 9, dtype=np.float32).reshape(4, 60, 3, 3)).realize()
  t = w.detach().reshape(4, 540).reshape(4, 9, 60).permute(0, 2, 1) * 2
  key, inputs, _ = normalize([t.uop])
  p = to_program(localize(create_schedule(key, len(inputs)).items[-1])[0], Device["CPU"].renderer)
  assert "%" not in p.src[p.src.index("void "):], p.src
  np.testing.assert_allclose(t.numpy(), w.numpy().reshape(4, 9, 60).transpose(0, 2, 1) * 2)


def test_dead_lanes_of_a_padded_vector():
  """A row of 14 runs as one vector of 16: the source masks its loads to 14 lanes and stores 8 + 4 + 2 of them."""
  x = Tensor(_f(3, 14)).realize()
  k, _ = kernel_of(x * 2)
  ren = CRenderer(16, registers=32)  # AVX-512's vectors, whatever the host's
  fk = finalize(k, hand_coded_optimizations(k, ren), ren)
  src = ren.render(fk)
  assert "th_float16" in src and "16383u" in src, src  # the live lanes' mask
  np.testing.assert_allclose(run_plan(x * 2, fk.opts), x.numpy() * 2)


def test_constant_lane_gates_fold():
  """Nibbles unpacked by a stack (a cat: each half gated by its lane's position) and summed, as a quantized matvec
  reads its codes: with the lanes unrolled, every gate is a constant, so the kernel loads 16 bytes at once and
  selects nothing lane by lane."""
  p = Tensor(RNG.integers(0, 256, (64, 4, 32)).astype(np.uint8)).realize()
  x = Tensor(_f(1, 256)).realize()
  w = Tensor.stack(p & 15, p >> 4, dim=2).reshape(64, 256).cast(dtypes.float32)
  t = x.matmul(w.T)
  k, _ = kernel_of(t)
  ren = CRenderer(16, registers=32)  # AVX-512's vectors, whatever the host's
  fk = finalize(k, hand_coded_optimizations(k, ren), ren)
  src = ren.render(fk)
  assert "(*(th_unsigned_char16*)(data2" in src and "[0] != 0) ?" not in src, src
  codes = np.stack([p.numpy() & 15, p.numpy() >> 4], axis=2).reshape(64, 256).astype(np.float32)
  np.testing.assert_allclose(run_plan(t, fk.opts), x.numpy() @ codes.T, rtol=1e-5, atol=1e-3)


@pytest.mark.skipif(not is_clang(), reason="vector stores are clang's ext_vector_type (gcc renders scalar code)")
def test_stores_past_the_cache_bypass_it():
  """A kernel that stores more than the renderer's stream_bytes (the host's last-level cache) stores its aligned
  vectors non-temporally and fences them before it returns; the values are the same."""
  x = _f(1 << 16)
  t = (Tensor(x).realize() * 3 - 1).relu()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k)
  dev = Device["CPU"]
  fk = finalize(k, opts, dev.renderer.vec)
  big, small = CRenderer(stream_bytes=(1 << 18) - 1).render(fk), CRenderer(stream_bytes=1 << 18).render(fk)  # stores 256 KiB
  assert big.count("__builtin_nontemporal_store") >= 1 and "__builtin_ia32_sfence" in big
  assert "nontemporal" not in small and "sfence" not in small
  prg = dev.compile(fk.name, big)
  out = Buffer("CPU", k.buffers[0].size, k.buffers[0].dtype)
  inp = Buffer("CPU", x.size, k.buffers[1].dtype)
  inp.copyin(memoryview(x.data))
  prg.call([out.address, inp.address], max(1, min(fk.outer, dev.max_threads)))
  np.testing.assert_array_equal(out.numpy(), np.maximum(x * 3 - 1, 0))
  assert 1 << 20 <= last_level_cache() <= 1 << 34


def test_the_host_sizes_register_tiles():
  from tinyhybrid.codegen.heuristic import register_budget
  from tinyhybrid.runtime.host import host_vector_unit, vector_unit_of
  assert vector_unit_of("x86_64", {"sse2", "avx", "avx2", "fma", "avx512f"}).lanes == 16
  assert (u := vector_unit_of("x86_64", {"sse2", "avx", "avx2", "fma"})).lanes == 8 and u.registers == 16 and u.name == "AVX2"
  assert vector_unit_of("x86_64", {"sse2"}).lanes == 4 and vector_unit_of("aarch64", set()).registers == 32
  unit = host_vector_unit()
  assert Device["CPU"].renderer.registers == unit.registers and Device["CPU"].renderer.vec in (unit.lanes, 1)
  # AVX-512's tile is 256 accumulator lanes; AVX2's must fit its 16 registers of 8 with room for the loads
  assert register_budget(CRenderer(16, registers=32)) == (16, 256) and register_budget(CRenderer(8, registers=16)) == (8, 80)
  a, b = _f(256, 256), _f(256, 256)
  t = Tensor(a).realize() @ Tensor(b).realize()
  k, _ = kernel_of(t)
  for ren, budget in ((CRenderer(16, registers=32), 256), (CRenderer(8, registers=16), 80)):
    opts = hand_coded_optimizations(k, ren)
    tile = 1
    for o in opts:
      if o.op is OptOps.UPCAST: tile *= o.arg
    assert budget // 2 < tile <= budget, (ren.vec, opts)
    np.testing.assert_allclose(run_plan(t, opts), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows,outs,plan", [(16, 64, "inner"), (64, 512, "swap"), (256, 512, "default")])
def test_a_linear_layers_loops_keep_the_swept_operand_in_a_cores_cache(rows, outs, plan):
  # x @ w.T accumulates vectors along the reduce axis; for each tile of one output loop the kernel sweeps the other
  # loop's operand. A core's cache of 64 KB, 2 cores: w's half fits (split the inner loop across the cores), only x's
  # half fits (move its loop inside and split it), or neither (the default split of the outer loop)
  from tinyhybrid.codegen.kernel import rkind
  a, w = _f(rows, 256), _f(outs, 256)
  t = Tensor(a).realize() @ Tensor(w).realize().T
  k, _ = kernel_of(t)
  ren = CRenderer(16, registers=32)
  ren.cores, ren.core_cache = 2, 64 << 10
  opts = hand_coded_optimizations(k, ren)
  assert Opt(OptOps.UNROLL, 1, 16) in opts and sum(o.op is OptOps.UPCAST for o in opts) == 2  # a register tile of K vectors
  thread = next(o for o in opts if o.op is OptOps.THREAD)
  assert (thread.axis, any(o.op is OptOps.SWAP for o in opts)) == {"inner": (2, False), "swap": (0, True), "default": (0, False)}[plan]
  if plan == "swap":  # the split loop is inside the other
    loops = KernelParts.of(apply_opts(k.ast, opts)).loops
    assert [rkind(r) for r in loops if rkind(r) in (AxisType.LOOP, AxisType.THREAD)] == [AxisType.LOOP, AxisType.THREAD]
  np.testing.assert_allclose(run_plan(t, opts), a @ w.T, rtol=1e-4, atol=1e-4)


def test_a_weight_computed_in_the_kernel_gets_a_tile_of_one_vector_by_more_rows():
  # x @ w with w dequantized from 4-bit codes inside the kernel (a quantized LLM's prefill): computing a vector of w
  # costs several operations, so the tile takes one vector of w's axis and 8 rows of x, where a plain float w gets
  # 4 vectors by 4 rows
  codes, scale = RNG.integers(0, 256, (256, 128), dtype=np.uint8), _f(1, 128)
  x = _f(64, 256)
  w_ref = (codes & 15).astype(np.float32) * scale - 8 * scale
  ren = CRenderer(16, registers=32)
  computed = Tensor(x).realize() @ ((Tensor(codes).realize() & 15).cast(dtypes.float32) * Tensor(scale).realize() - 8 * Tensor(scale).realize())
  plain = Tensor(x).realize() @ Tensor(w_ref).realize()
  tiles = {}
  for name, t in (("computed", computed), ("plain", plain)):
    k, _ = kernel_of(t)
    opts = hand_coded_optimizations(k, ren)
    tiles[name] = sorted(o.arg for o in opts if o.op is OptOps.UPCAST)
    np.testing.assert_allclose(run_plan(t, opts), x @ w_ref, rtol=1e-4, atol=1e-3)
  assert tiles == {"computed": [8, 16], "plain": [4, 64]}, tiles


def test_half_values_are_loaded_as_vectors_and_widened():
  # a quantized weight's fp16 scales, 16 of them at once: one vector load and one widening (F16C's vcvtph2ps), not
  # 16 scalar loads and conversions
  h = RNG.standard_normal((64, 256)).astype(np.float16)
  t = Tensor(h).realize().float() * 3
  k, _ = kernel_of(t)
  ren = CRenderer(16, registers=32)
  src = ren.render(finalize(k, hand_coded_optimizations(k, ren), ren))
  assert "th_half16" in src and "__builtin_convertvector" in src and "th_th_" not in src, src
  np.testing.assert_array_equal(t.numpy(), h.astype(np.float32) * 3)


@pytest.mark.parametrize("rows,tile", [(4, [2, 96]), (16, [8, 32])])
def test_a_short_vector_axis_is_taken_whole_where_the_other_axis_cannot_fill_the_tile(rows, tile):
  # weights (rows, 64) times values (64, 96), per chunk (a flash decode's weighted values: 4 queries, a head of 96):
  # with 4 rows the tile is 6 vectors by 2 rows (192 lanes, one pass over each chunk) rather than 2 vectors by 4 (128);
  # with 16 rows, 2 vectors by 8 fill the 256 lanes and stay
  e, v = _f(4, 8, rows, 64), _f(4, 8, 64, 96)
  t = Tensor(e).realize() @ Tensor(v).realize()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(16, registers=32))
  assert sorted(o.arg for o in opts if o.op is OptOps.UPCAST) == tile, opts
  np.testing.assert_allclose(run_plan(t, opts), e @ v, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("outs,vectors", [(512, 4), (64, 1)])
def test_a_matrix_vector_product_takes_several_output_vectors(outs, vectors):
  # one row times a weight whose rows are contiguous along the outputs (a panel): with no register tile, several
  # vectors of outputs give independent accumulators and read a panel in one pass; a short output axis keeps one
  x, w = _f(1, 256), _f(256, outs)
  t = Tensor(x).realize() @ Tensor(w).realize()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(16, registers=32))
  assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [16 * vectors], opts
  np.testing.assert_allclose(run_plan(t, opts), x @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,tiled", [((256, 192), True), ((6, 4096), True), ((4096, 3), False)])
def test_a_transposing_copy_is_tiled_along_both_axes(shape, tiled):
  # b.T.contiguous() stores vectors along b's columns: lane by lane each reads one of 8 rows of b, so the plan also
  # upcasts the axis b is contiguous along, and the tile is transposed in registers (an axis of 3 stays a loop)
  a = _f(*shape)
  t = Tensor(a).realize().T.contiguous()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(8, registers=16))
  assert sum(o.op is OptOps.UPCAST for o in opts) == (2 if tiled else 1), opts
  np.testing.assert_array_equal(run_plan(t, opts), a.T)
  plain = hand_coded_optimizations(kernel_of(Tensor(a).realize() + 1)[0], CRenderer(8, registers=16))
  assert sum(o.op is OptOps.UPCAST for o in plain) == 1, plain


def _cpu_schedule(*ts: Tensor) -> list[str]:
  """The names of the kernels a CPU (a core cache of 1 MB) runs to compute ts, in order."""
  key, inputs, _ = normalize([t.uop for t in ts])
  spec = create_schedule(key, len(inputs), cache=1 << 20)
  return [Lowerer(item).lower().name for item in spec.items]


@pytest.mark.parametrize("form,rows,copies", [("a @ b", 64, 1), ("a.T @ b", 64, 2), ("a @ b.T", 64, 0), ("a @ b", 8, 0)])
def test_a_matrix_product_reads_an_operand_strided_along_the_reduce_from_a_copy(form, rows, copies):
  # on a CPU, an operand that steps across its rows along the reduce (b of `a @ b`) is first copied with its rows
  # along the reduce, when rows of the other operand reuse it enough: few rows (a matrix-vector product) read it as is
  a_np, b_np = _f(rows, 256), _f(256, 192)
  a = Tensor(a_np if form != "a.T @ b" else np.ascontiguousarray(a_np.T)).realize()
  b = Tensor(b_np if form != "a @ b.T" else np.ascontiguousarray(b_np.T)).realize()
  t = {"a @ b": lambda: a @ b, "a.T @ b": lambda: a.T @ b, "a @ b.T": lambda: a @ b.T}[form]()
  names = _cpu_schedule(t)
  assert sum(n.startswith("E_") for n in names) == copies and sum(n.startswith("r_") for n in names) == 1, names
  np.testing.assert_allclose(t.numpy(), a_np @ b_np, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,hw,cout,copies", [(2, 32, 64, 1), (3, 45, 64, 1), (1, 32, 64, 0), (2, 32, 4, 0)])
def test_a_strided_1x1_conv_reads_its_input_from_a_copy_of_the_values_it_uses(stride, hw, cout, copies):
  # a 1x1 conv of stride 2 (ResNet's downsampling) reads every other value of its rows: on a CPU those values are
  # copied first, so its vectors load rows whole; a conv of stride 1, or one with too few output channels to reuse the
  # copy, reads its input as it is
  x_np, w_np = _f(2, 64, hw, hw), _f(cout, 64, 1, 1)
  x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
  t = x.conv2d(w, stride=stride)
  names = _cpu_schedule(t)
  assert sum(n.startswith("E_") for n in names) == copies and sum(n.startswith("r_") for n in names) == 1, names
  ref = torch.nn.functional.conv2d(torch.from_numpy(x_np), torch.from_numpy(w_np), stride=stride).numpy()
  np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,width,kernel", [(2, 65, 3), (3, 64, 3), (2, 64, 7)])
def test_a_strided_conv_reads_its_rows_from_a_copy_laid_out_phase_by_phase(stride, width, kernel):
  # a conv of stride 2-4 with a window along its rows reads them from a copy holding every stride-th value together,
  # so neighbouring outputs' taps are neighbouring addresses; the gradients go through the conv's own rules
  x_np, w_np = _f(2, 16, 48, width), _f(8, 16, kernel, kernel)
  x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
  t = x.conv2d(w, stride=stride, padding=1)
  assert any(n.startswith("E_") for n in _cpu_schedule(t)), _cpu_schedule(t)
  tx, tw = torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(w_np).requires_grad_()
  ref = torch.nn.functional.conv2d(tx, tw, stride=stride, padding=1)
  np.testing.assert_allclose(t.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
  (t * t).sum().backward()
  (ref * ref).sum().backward()
  # float32 sums in another order: an element near zero among gradients in the hundreds is off by the scale's rounding
  for got, want in ((x.grad.numpy(), tx.grad.numpy()), (w.grad.numpy(), tw.grad.numpy())):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_a_copied_operand_that_is_itself_a_product_is_computed_once():
  # x = a @ b is kept and also read, down its columns, by p @ x: the copy of x reads x's kernel, which reads the copy
  # of b; each product is computed by one kernel
  a_np, b_np, p_np = _f(64, 256), _f(256, 256), _f(64, 64)
  a, b, p = (Tensor(v).realize() for v in (a_np, b_np, p_np))
  x = a @ b
  y = p @ x
  names = _cpu_schedule(x, y)
  assert sum(n.startswith("r_") for n in names) == 2 and sum(n.startswith("E_") for n in names) == 2, names
  Tensor.realize(x, y)
  np.testing.assert_allclose(x.numpy(), a_np @ b_np, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(y.numpy(), p_np @ (a_np @ b_np), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("lanes,registers,row,channels", [(8, 16, 7, 8), (16, 32, 14, 16)])
def test_a_conv_row_no_vector_divides_is_one_masked_vector_with_few_registers(lanes, registers, row, channels):
  # a 3x3 conv over rows of 28: with AVX2's 16 registers of 8 lanes a tile of the whole row (8 + 8 + 8 + 4 lanes) fits
  # only 2 output channels, so the row is tiled by 7 lanes of one vector and 8 channels; AVX-512 by 14 lanes of one
  # vector and 16 channels (the whole row by 8 channels ran at 105 GFLOPS, this at 178)
  x_np, w_np = _f(1, 32, 28, 28), _f(64, 32, 3, 3)
  t = Tensor(x_np).realize().conv2d(Tensor(w_np).realize(), padding=1)
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(lanes, registers=registers))
  ups = [o.arg for o in opts if o.op is OptOps.UPCAST]
  assert ups[:2] == [row, channels], opts
  np.testing.assert_allclose(run_plan(t, opts), _conv_ref(x_np, w_np, padding=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("k,lanes,registers,sums,tile", [(256, 8, 16, 8, [4, 3]), (256, 16, 32, 16, [8, 3]), (196, 8, 16, 4, [4, 3]),
                                                        (196, 16, 32, 4, [8, 3])])
def test_a_linear_layers_tile_is_square_where_few_registers_hold_it(k, lanes, registers, sums, tile):
  # x @ w.T accumulates vectors along the reduce: with AVX2's 16 registers, 8 rows by 1 output would load 9 vectors
  # per 8 multiply-adds, so the tile is 4 rows by 3 outputs (12 accumulators); AVX-512's 32 registers keep 8 by 3.
  # A reduce of 196 (a 14x14 conv's positions) sums 4 lanes at a time, and each such accumulator still takes a
  # register: 8 rows by 2 outputs would be all of AVX2's 16, 8 by 8 twice AVX-512's 32
  a, w = _f(128, k), _f(96, k)
  t = Tensor(a).realize() @ Tensor(w).realize().T
  kern, _ = kernel_of(t)
  opts = hand_coded_optimizations(kern, CRenderer(lanes, registers=registers))
  assert [o.arg for o in opts if o.op is OptOps.UPCAST] == tile and Opt(OptOps.UNROLL, 1, sums) in opts, opts
  np.testing.assert_allclose(run_plan(t, opts), a @ w.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("lanes,registers,tile", [(8, 16, [16, 4]), (16, 32, [64, 4])])
def test_a_tile_along_the_outputs_takes_at_most_two_vectors_with_few_registers(lanes, registers, tile):
  # rows times a weight contiguous along its outputs (an LLM's panel weight in a prefill chunk): with AVX2's 16
  # registers, 2 vectors by 4 rows rather than 4 vectors by 2; AVX-512 keeps its 4 vectors by 4 rows
  a, w = _f(64, 128), _f(128, 512)
  t = Tensor(a).realize() @ Tensor(w).realize()
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(lanes, registers=registers))
  assert [o.arg for o in opts if o.op is OptOps.UPCAST] == tile, opts
  np.testing.assert_allclose(run_plan(t, opts), a @ w, rtol=1e-4, atol=1e-4)


def test_narrow_integer_sums_take_a_whole_panel_row_with_few_registers():
  # int_matvec's blocks: int16 codes times int16 activations summed in int16. With AVX2's 16 registers of 16 such
  # lanes the plan takes 4 registers of the output axis (64 lanes), no rows of the reused one, and two panels: 8
  # accumulators, half the registers, and two streams of weights a core
  rng = np.random.default_rng(7)
  c, x = rng.integers(-8, 8, (24, 8, 64)).astype(np.int16), rng.integers(-127, 128, (24, 8, 1)).astype(np.int16)
  t = (Tensor(c).realize() * Tensor(x).realize()).sum(1, dtype=dtypes.int16)
  k, _ = kernel_of(t)
  opts = hand_coded_optimizations(k, CRenderer(8, registers=16))
  assert [(o.axis, o.arg) for o in opts if o.op is OptOps.UPCAST] == [(2, 64), (0, 2)], opts
  np.testing.assert_array_equal(run_plan(t, opts), (c.astype(np.int32) * x).sum(1).astype(np.int16))


@pytest.mark.parametrize("lanes,dtype,ctype,width", [(8, dtypes.int16, "short", 16), (16, dtypes.int16, "short", 32), (8, dtypes.int8, "signed_char", 32),
                                                     (8, dtypes.float32, "float", 8)])
def test_narrow_values_fill_a_register_with_more_lanes(lanes, dtype, ctype, width):
  # `lanes` counts floats: a kernel whose every value is narrower (int_matvec's int16 blocks) takes as many lanes as
  # fill the same register, so AVX2 adds 16 int16 sums per instruction rather than 8; a float kernel keeps its width
  rng = np.random.default_rng(3)
  np_dt = {dtypes.int16: np.int16, dtypes.int8: np.int8, dtypes.float32: np.float32}[dtype]
  c, x = rng.integers(-3, 4, (4, 8, 64)).astype(np_dt), rng.integers(-3, 4, (4, 8, 1)).astype(np_dt)
  t = (Tensor(c).realize() * Tensor(x).realize()).sum(1, dtype=dtype)
  k, _ = kernel_of(t)
  ren = CRenderer(lanes, registers=16)
  opts = [Opt(OptOps.UPCAST, 2, 64)]
  src = ren.render(finalize(k, opts, ren))
  assert {int(n) for n in re.findall(rf"\bth_{ctype}(\d+)\b", src)} == {width}, src
  np.testing.assert_array_equal(run_plan(t, opts), (c.astype(np.int32) * x).sum(1).astype(np_dt))


def _block_sums(cols: int, n: int, rows: int = 128) -> tuple[Tensor, np.ndarray]:
  """int_matvec's shape: int16 codes (stored a column at a time, as its panels are) times int16 activations summed in
  blocks of n, each block's sum scaled in float and the blocks added up along the row; and NumPy's answer."""
  rng = np.random.default_rng(5)
  c, x = rng.integers(-8, 8, (rows, cols)).astype(np.int16), rng.integers(-127, 128, cols).astype(np.int16)
  s = rng.standard_normal(cols // n).astype(np.float32)
  codes = Tensor(np.ascontiguousarray(c.T)).realize().T
  blocks = (codes.reshape(rows, cols // n, n) * Tensor(x).realize().reshape(1, cols // n, n)).sum(2, dtype=dtypes.int16)
  y = (blocks.cast(dtypes.float32) * Tensor(s).realize().reshape(1, -1)).sum(1)
  ref = ((c.reshape(rows, -1, n).astype(np.int64) * x.reshape(1, -1, n)).sum(2).astype(np.int16).astype(np.float32) * s).sum(1)
  return y, ref


@pytest.mark.parametrize("cols,n,kernels", [(256, 32, 1), (256, 16, 1), (256, 8, 2), (32, 32, 2)])
def test_small_integer_block_sums_are_summed_inside_the_reduce_that_reads_them(cols, n, kernels):
  # where the renderer writes a loop inside a reduce's (C), a sum of 16 to 32 integers read only by a further reduce is
  # computed by that reduce's kernel instead of going through memory; shorter sums, a further reduce of one value, and
  # a renderer without inner loops keep two kernels
  y, ref = _block_sums(cols, n)
  key, inputs, _ = normalize([y.uop])
  assert len(create_schedule(key, len(inputs), cache=1 << 20, inner_sums=True).items) == kernels
  assert len(create_schedule(key, len(inputs), cache=1 << 20).items) == 2
  np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-3)


def test_an_inner_sum_is_a_loop_inside_the_reduce_loop_in_registers_of_its_width():
  # the kernel's reduce runs over the blocks; each block's int16 sum is a loop of its own inside, 16 lanes a register
  # on AVX2 (the float scaling then takes two registers a vector), the rows of a panel as the vectors; its steps count
  # in the kernel's work, which decides its threads
  y, _ = _block_sums(256, 32)
  key, inputs, _ = normalize([y.uop])
  (item,) = create_schedule(key, len(inputs), cache=1 << 20, inner_sums=True).items
  k = Lowerer(item).lower()
  assert k.work == 128 * 8 * (1 + 32)
  ren = CRenderer(8, registers=16)
  opts = hand_coded_optimizations(k, ren)
  assert [o.arg for o in opts if o.op is OptOps.UPCAST] == [64], opts
  src = ren.render(finalize(k, opts, ren))
  lines = src.splitlines()
  decl = next(i for i, ln in enumerate(lines) if re.search(r"th_short16 isum\d+ = ", ln))
  indent = lambda ln: len(ln) - len(ln.lstrip())  # noqa: E731
  inner_loop = next(ln for ln in lines[decl:] if ln.lstrip().startswith("for ("))
  reduce_loop = next(ln for ln in reversed(lines[:decl]) if ln.lstrip().startswith("for ("))
  assert indent(inner_loop) > indent(reduce_loop) and "acc0" in src and "th_float16" in src, src


def test_values_computed_from_indexes_alone_leave_the_lanes_wide():
  # a 4-bit unpacking whose shift amounts are an arange (int32 from the index, then cast) still fills AVX2's registers
  # with 16 int16 lanes: what is computed from indexes alone is worked out per chunk and is no value of the lanes
  rng = np.random.default_rng(9)
  w = rng.integers(0, 1 << 16, (4, 8, 16), dtype=np.uint16)
  shifts = Tensor.arange(0, 16, 4, dtype=dtypes.uint16).reshape(1, 1, 4, 1)
  t = ((Tensor(w).realize().reshape(4, 8, 1, 16) >> shifts) & 15).cast(dtypes.int16).sum(1, dtype=dtypes.int16)
  k, _ = kernel_of(t)
  ren = CRenderer(8, registers=16)
  opts = [Opt(OptOps.UPCAST, 3, 16), Opt(OptOps.UPCAST, 2, 4)]
  src = ren.render(finalize(k, opts, ren))
  assert {int(n) for n in re.findall(r"\bth_short(\d+)\b", src)} == {16}, src
  ref = ((w.reshape(4, 8, 1, 16).astype(np.int64) >> np.arange(0, 16, 4).reshape(1, 1, 4, 1)) & 15).sum(1).astype(np.int16)
  np.testing.assert_array_equal(run_plan(t, opts), ref)
