"""Realize semantics: which tensors share memory after a realize, an assign or a clone."""
import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes
from tinyhybrid.helpers import GlobalCounters
from tinyhybrid.engine import realize as engine


def test_clone_is_a_copy():
  x = Tensor([1.0, 2.0])
  c = x.clone()
  x.assign(Tensor([5.0, 6.0])).realize()
  np.testing.assert_equal(c.numpy(), [1.0, 2.0])
  np.testing.assert_equal(x.numpy(), [5.0, 6.0])


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "lazy"])
def test_constants_realized_together_are_two_buffers(contiguous):
  a, b = Tensor.zeros(2), Tensor.zeros(2)
  if contiguous: a, b = a.contiguous(), b.contiguous()
  Tensor.realize(a, b)
  a.assign(Tensor([1.0, 2.0])).realize()
  np.testing.assert_equal(b.numpy(), [0.0, 0.0])
  np.testing.assert_equal(a.numpy(), [1.0, 2.0])


def test_assign_to_lazy_constants_does_not_alias():
  a, b = Tensor.zeros(2), Tensor.zeros(2)
  a.assign(Tensor([1.0, 2.0])).realize()
  b.assign(Tensor([3.0, 4.0])).realize()
  np.testing.assert_equal(a.numpy(), [1.0, 2.0])
  np.testing.assert_equal(b.numpy(), [3.0, 4.0])


def test_assign_neither_casts_nor_moves():
  # tinygrad's rule and words: a silent cast could lose precision; python values take the target's dtype
  a = Tensor.zeros(4).contiguous().realize()
  with pytest.raises(RuntimeError, match="assign dtype mismatch dtypes.float != dtypes.int"): a.assign(Tensor([1, 2, 3, 4]))
  with pytest.raises(RuntimeError, match="assign device mismatch CPU != CPU:1"): a.assign(Tensor([1.0, 2, 3, 4], device="CPU:1"))
  a.assign([1, 2, 3, 4]).realize()
  a.assign(a + 1).realize()
  a.assign(7).realize()
  assert a.tolist() == [7.0] * 4 and a.dtype == Tensor.zeros(1).dtype


def test_assign_through_a_view_of_a_contiguous_to_be_computed():
  # the write lands in the contiguous() value's memory (tinygrad's rule: a CONTIGUOUS is storage to write into)
  out = Tensor.zeros(4, 4).contiguous()
  keep = out
  out[:, 2:3].assign(Tensor.ones(4, 1)).realize()
  expected = np.zeros((4, 4), np.float32)
  expected[:, 2] = 1
  np.testing.assert_equal(out.numpy(), expected)
  assert keep is out


def test_views_still_see_assigns():
  x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  v = x.reshape(2, 2)
  x.assign(x * 10).realize()
  np.testing.assert_equal(v.numpy(), [[10.0, 20.0], [30.0, 40.0]])


def test_pending_assigns_land_in_order():
  c = Tensor.zeros(3)
  c.assign(Tensor([1.0, 2.0, 3.0]))
  c.assign(c + 1)
  np.testing.assert_equal(c.numpy(), [2.0, 3.0, 4.0])


def test_contiguous_keeps_the_schedule_cache_warm():
  def step() -> np.ndarray: return (Tensor.ones(4).contiguous() * 2).numpy()
  step()
  before = len(engine.schedule_cache)
  for _ in range(3): np.testing.assert_equal(step(), [2.0] * 4)
  assert len(engine.schedule_cache) == before  # fresh UNIQUEs each call, one plan


def test_a_realized_constant_is_not_handed_to_a_lazy_twin():
  a, b = Tensor.ones(3), Tensor.ones(3)
  c = Tensor.ones(3) + 1  # holds the same constant graph inside
  a.realize()
  a.assign(Tensor([5.0, 6.0, 7.0])).realize()
  np.testing.assert_equal(b.numpy(), [1.0, 1.0, 1.0])
  np.testing.assert_equal(c.numpy(), [2.0, 2.0, 2.0])
  np.testing.assert_equal(a.numpy(), [5.0, 6.0, 7.0])


def test_identical_graphs_over_a_buffer_still_share_their_result():
  x = Tensor([1.0, 2.0]).realize()
  a, b = x * 2, x * 2
  a.realize()
  assert b.uop is a.uop  # computed once, as in tinygrad
  np.testing.assert_equal(b.numpy(), [2.0, 4.0])


def test_a_write_through_a_view_is_seen_by_the_whole_tensor():
  x = Tensor.zeros(4).contiguous().realize()
  before = x * 1  # built before the write: a view write is seen by every tensor on that memory, as in tinygrad
  x[1:3].assign(Tensor([5.0, 6.0]))  # the view is a temporary: the pending write must not be lost with it
  after = x + 1
  np.testing.assert_equal(x.numpy(), [0.0, 5.0, 6.0, 0.0])
  np.testing.assert_equal(after.numpy(), [1.0, 6.0, 7.0, 1.0])
  np.testing.assert_equal(before.numpy(), [0.0, 5.0, 6.0, 0.0])


def test_view_writes_land_in_order():
  x = Tensor.zeros(3).contiguous().realize()
  x[0:2].assign(Tensor([1.0, 2.0]))
  x[1:3].assign(Tensor([3.0, 4.0]))
  np.testing.assert_equal(x.numpy(), [1.0, 3.0, 4.0])


def _kernels_to_realize(*ts: Tensor) -> int:
  GlobalCounters.reset()
  Tensor.realize(*ts)
  return GlobalCounters.kernel_count


def test_assigns_of_one_value_are_one_kernel_with_a_store_each():
  # the value is computed once and stored to every target (engine/multi.py places an allreduce's chunks this way)
  x = np.arange(24, dtype=np.float32).reshape(4, 6)
  a, b = Tensor.zeros(4, 6).contiguous().realize(), Tensor.zeros(24).contiguous().realize()
  c = Tensor.zeros(2, 4, 6).contiguous().realize()
  v = Tensor(x).exp2() - 3
  n = _kernels_to_realize(a.assign(v), b.reshape(4, 6).assign(v), c[1].assign(v))
  assert n == 1
  want = np.exp2(x) - 3
  np.testing.assert_allclose(a.numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), want.reshape(24), rtol=1e-6)
  np.testing.assert_allclose(c.numpy(), np.stack([np.zeros_like(want), want]), rtol=1e-6)


def test_assigns_of_one_value_stay_apart_when_the_value_reads_a_target():
  # a.assign(a + 1) and b.assign(a + 1): b gets the value of a before the write, so the stores are not one kernel
  a, b = Tensor.ones(8).contiguous().realize(), Tensor.zeros(8).contiguous().realize()
  v = a + 1
  n = _kernels_to_realize(a.assign(v), b.assign(v))
  assert n > 1
  np.testing.assert_equal(a.numpy(), np.full(8, 2, np.float32))
  np.testing.assert_equal(b.numpy(), np.full(8, 2, np.float32))


def test_a_realized_tensor_is_not_computed_again_for_its_gradient_history():
  # y keeps how it was computed (for backward) under its buffer: reading y runs one kernel, not y's sum again
  x = np.arange(36, dtype=np.float32).reshape(6, 6)
  t = Tensor(x, requires_grad=True)
  y = (t.sum(0) * 2).realize()
  assert _kernels_to_realize(z := y + 1) == 1
  np.testing.assert_allclose(z.numpy(), x.sum(0) * 2 + 1)
  (y * 3).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), np.full((6, 6), 6, np.float32))


def test_a_result_of_a_realized_tensor_keeps_the_way_back_to_its_parameters():
  # y's graph (under its buffer) reaches w; z computed from y alone must still take w's gradient through it
  w = Tensor(np.ones((3, 3), np.float32), requires_grad=True)
  x = np.arange(9, dtype=np.float32).reshape(3, 3)
  y = (Tensor(x) @ w).realize()
  z = (y * 2).realize()
  z.sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), np.repeat(2 * x.sum(0)[:, None], 3, 1))


def test_an_assign_through_a_same_size_bitcast_writes_the_memory():
  # a bitcast of memory to a type of the same size is a view of it (tinygrad's disk-tensor tests write so): the write
  # was computed into new memory and lost to the tensor that owns it
  t = Tensor.zeros(4, dtype=dtypes.int32).contiguous().realize()
  u = t.bitcast(dtypes.float32)
  u.assign(Tensor([1.0, 2.0, -3.0, 0.5])).realize()
  want = np.array([1.0, 2.0, -3.0, 0.5], dtype=np.float32)
  np.testing.assert_array_equal(t.numpy(), want.view(np.int32))
  np.testing.assert_array_equal(u.numpy(), want)
  v = Tensor.zeros(2, 3, dtype=dtypes.uint32).contiguous().realize()
  v[1].bitcast(dtypes.float32).assign(Tensor([1.5, 2.5, -1.0])).realize()  # through a view of part of the memory
  np.testing.assert_array_equal(v.numpy(), np.array([[0, 0, 0], [1.5, 2.5, -1.0]], dtype=np.float32).view(np.uint32))


def test_a_realize_reads_each_buffer_before_writing_it():
  # m's pending assign reads w as it was before w's; realized together (w's assign first among the roots), m still
  # sees the old w (as BatchNorm's running statistics, computed from a forward pass, beside the weights' update)
  w, m = Tensor([1.0, 2.0, 3.0]).realize(), Tensor.zeros(3).contiguous().realize()
  m.assign(w * 2 + 1)
  w.assign(w + 10)
  Tensor.realize(w, m)
  np.testing.assert_equal(m.numpy(), [3.0, 5.0, 7.0])
  np.testing.assert_equal(w.numpy(), [11.0, 12.0, 13.0])


def test_readers_of_an_overwritten_buffer_share_work_with_the_write():
  # the lazy reader (old) and the assign both need x's reduce: one realize computes it once, before w changes
  w = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  s = (w * w).sum(1)
  old = s + 1
  w.assign(w - s.reshape(2, 1))
  GlobalCounters.reset()
  w.realize()
  assert GlobalCounters.kernel_count == 3, "the sum, the reader and the write"
  np.testing.assert_equal(old.numpy(), [6.0, 26.0])
  np.testing.assert_equal(w.numpy(), [[-4.0, -3.0], [-22.0, -21.0]])


def test_reading_a_buffer_before_and_after_its_assign_in_one_kernel_raises():
  w = Tensor([1.0, 2.0]).realize()
  y = w * 3
  w.assign(w + 1)
  both = y + w  # y's read of the old w fuses into the kernel that reads the new one
  del y
  with pytest.raises(RuntimeError, match="old contents of a buffer and an assign"): both.realize()


def test_an_elementwise_update_writes_in_place():
  # p.assign(p * 0.9 + g): each value is read where it is written, so the kernel stores into p (no copy after it)
  p, g = Tensor.ones(4, 3, 2, 2).contiguous().realize(), Tensor.full((4, 3, 2, 2), 2.0).contiguous().realize()
  GlobalCounters.reset()
  p.assign(p * 0.5 + g).realize()
  assert GlobalCounters.kernel_count == 1
  np.testing.assert_equal(p.numpy(), np.full((4, 3, 2, 2), 2.5, np.float32))
  # a view of the target reads other values than the one written: computed apart first
  q = Tensor.arange(6).reshape(2, 3).float().contiguous().realize()
  q.assign(q.flip(1) + q).realize()
  np.testing.assert_equal(q.numpy(), [[2.0, 2.0, 2.0], [8.0, 8.0, 8.0]])


def test_a_reader_that_holds_the_same_assign_joins_its_schedule():
  # `new` reads a's old contents (through times_a) and the assign: realizing a copy of it used to recurse forever
  a = Tensor.ones(4).contiguous().realize()
  times_a = a * 3
  a.assign(Tensor.full((4,), 2.0))
  new = a + (times_a - 1).contiguous()
  assert new.tolist() == [4.0] * 4 and a.tolist() == [2.0] * 4


def test_an_assign_through_a_chain_of_bitcasts_lands_in_memory():
  b = Tensor([1.0, 2.0, 3.0, 4.0], dtype=dtypes.float32).realize()
  bits = np.array([4.0, 3.0, 2.0, 1.0], np.float32).view(np.int32)
  b.bitcast(dtypes.uint32).bitcast(dtypes.int32).assign(Tensor(bits, dtype=dtypes.int32))  # lazy: read through b
  assert b.tolist() == [4.0, 3.0, 2.0, 1.0]


def test_writes_through_views_that_feed_each_other_run_in_order():
  # each cache's write reads the one before it (a KV cache per layer): reading the last must run every write first
  caches = [Tensor.zeros(8, 4).contiguous().realize() for _ in range(3)]
  for i, c in enumerate(caches): c[:3].assign(Tensor.ones(3, 4) * (i + 1)).realize()
  caches[0][3:4].assign(Tensor.ones(1, 4) * 10)
  c1 = caches[0][:4].sum(0, keepdim=True)
  caches[1][3:4].assign(c1)
  c2 = caches[1][:4].sum(0, keepdim=True)
  caches[2][3:4].assign(c2)
  assert caches[2][:4].sum().item() == 4 * (3 * 3 + (2 * 3 + 13))


def test_a_value_shared_by_pending_view_writes_is_computed_once():
  D, N = 16, 8
  caches = [Tensor.zeros(4, D).contiguous().realize() for _ in range(N)]
  W = [Tensor.full((D, 2 * D), 0.01).contiguous().realize() for _ in range(N)]
  x = Tensor.ones(1, D).contiguous().realize()
  ref_x, ref_c = np.ones((1, D), np.float32), None
  for i in range(N):
    shared = (x @ W[i]).contiguous()
    caches[i][0:1].assign(shared[:, :D])
    x = shared[:, D:] + caches[i][:1]
    s = ref_x @ np.full((D, 2 * D), 0.01, np.float32)
    ref_c, ref_x = s[:, :D], s[:, D:] + s[:, :D]
  GlobalCounters.reset()
  np.testing.assert_allclose(caches[-1][:1].numpy(), ref_c, rtol=1e-5)
  assert GlobalCounters.kernel_count <= 3 * N + 1  # each product once (recomputed per pending write, it was ~8x this)


def test_assigning_a_graph_of_constants_onto_another_device():
  from tinyhybrid.uop.ops import UOp
  s = Tensor.empty(4, device="CPU:1", dtype=dtypes.float)
  c = Tensor(UOp.const(2.0).cast(dtypes.float))
  assert c.device is None  # constants only: deviceless, as in tinygrad
  s.assign(c)
  assert s.tolist() == [2.0] * 4


def test_a_cheap_expanded_value_fuses_into_elementwise_work_but_not_into_a_reduce():
  a, b = Tensor.empty(1, 16).realize(), Tensor.empty(1, 16).realize()
  d = Tensor.empty(8192, 16).realize()
  GlobalCounters.reset()
  (a * b * d).realize()  # a*b is done once per output either way: one kernel
  assert GlobalCounters.kernel_count == 1
  x, y = Tensor.empty(64, 1).realize(), Tensor.empty(64, 1).realize()
  w = Tensor.empty(64, 256).realize()
  GlobalCounters.reset()
  ((x * y).expand(64, 256) * w).sum(0).realize()  # read once per step of the reduce: computed apart (two kernels)
  assert GlobalCounters.kernel_count == 2


def test_cheap_index_arithmetic_is_recomputed_where_it_is_read():
  x = Tensor(np.random.default_rng(0).random((4, 32), dtype=np.float32)).realize()
  GlobalCounters.reset()
  out = x.argmax(-1).realize()  # the max, then the first position holding it: n - arange(n) is not a kernel of its own
  assert GlobalCounters.kernel_count == 2 and out.tolist() == x.numpy().argmax(-1).tolist()
  w = Tensor.rand(64, 64)  # a lazily initialized weight (threefry: dozens of operations a value) still gets a buffer
  GlobalCounters.reset()
  (Tensor.ones(8, 64) @ w).realize()
  assert GlobalCounters.kernel_count >= 2


def test_writes_written_with_uops_run_before_the_memory_is_read():
  # tinygrad's `t.uop = t.uop.after(t.uop.store(v))`: the memory after the stores, which may be to views and to other
  # memory, in order
  t = Tensor.zeros(6).contiguous().realize()
  t.uop = t.uop.after(t.uop.store((t + 1).uop))
  np.testing.assert_equal(t.numpy(), np.ones(6))
  t.uop = t.uop.after(t[:2].uop.after(t[:2].uop.store(Tensor([7.0, 8.0]).uop)))
  np.testing.assert_equal(t.numpy(), [7, 8, 1, 1, 1, 1])
  a, b, c = Tensor.zeros(4).contiguous(), Tensor.zeros(4).contiguous(), Tensor.arange(4).float().contiguous()
  Tensor.realize(a, b, c)
  a2 = Tensor(a.uop.after(a.uop.store((c * 2).uop), b.uop.store(c.uop)))
  np.testing.assert_equal(a2.numpy(), [0, 2, 4, 6])
  np.testing.assert_equal(b.numpy(), [0, 1, 2, 3])
  np.testing.assert_equal(a.numpy(), [0, 2, 4, 6])
  np.testing.assert_equal((a2 + 1).numpy(), [1, 3, 5, 7])  # done once: a second realize does not write again
  np.testing.assert_equal(b.numpy(), [0, 1, 2, 3])
  # read inside a larger graph: the graph reads the memory after the write
  np.testing.assert_equal((Tensor(a.uop.after(a.uop.store((a + 1).uop))) * 2).numpy(), [2, 6, 10, 14])
  np.testing.assert_equal(a.numpy(), [1, 3, 5, 7])


def test_a_write_made_with_uops_into_a_value_still_to_compute_lands_in_its_memory():
  # a KV cache update as tinygrad's LLM code writes it: the cache a lazy Tensor.zeros, the write at a bound offset
  from tinyhybrid.uop.ops import UOp
  cache = Tensor.zeros(8)
  sp = UOp.variable("sp", 0, 4).bind(2)
  x = Tensor([5.0, 6.0, 7.0])
  total = Tensor(cache.uop.after(cache[sp:sp + 3].uop.store(x.uop)))[:sp + 3].sum()
  assert total.item() == 18.0
  np.testing.assert_equal(cache.numpy(), [0, 0, 5, 6, 7, 0, 0, 0])


def test_a_weak_target_takes_the_assigned_type():
  # Tensor(5) is weakly an int: an int16 value assigned to it stores it as int16 (tinygrad's), not an error
  t = Tensor(5)
  t.assign(Tensor(7, dtype=dtypes.int16))
  assert t.dtype is dtypes.int16 and t.item() == 7
  v = Tensor(5).reshape(1, 1).expand(2, 2)[:, 1:2]
  v.assign(Tensor.ones(2, 1, dtype=dtypes.int).contiguous().realize())
  assert v.tolist() == [[1], [1]]


def test_a_plan_runs_writes_made_with_uops():
  # linear_with_vars, as tinygrad's tests plan a graph, makes them assigns as a realize does
  t = Tensor.zeros(4).contiguous().realize()
  out = Tensor(t.uop.after(t[1:3].uop.store(Tensor([5.0, 6.0]).uop))) * 2
  linear, var_vals = out.linear_with_vars()
  engine.run_linear(linear, var_vals)
  np.testing.assert_equal(out.numpy(), [0, 10, 12, 0])
  np.testing.assert_equal(t.numpy(), [0, 5, 6, 0])


def test_a_tinyjit_replays_a_write_made_with_uops():
  from tinyhybrid import TinyJit
  from tinyhybrid.uop.ops import UOp
  cache = Tensor.zeros(12).contiguous().realize()
  @TinyJit
  def step(x: Tensor, sp: UOp) -> Tensor: return Tensor(cache.uop.after(cache[sp:sp + 2].uop.store(x.uop)))[:sp + 2].sum().realize()
  v = UOp.variable("sp", 0, 10)
  for i in range(5):
    assert step(Tensor([i + 1.0, i + 1.0]).realize(), v.bind(2 * i)).item() == 2 * sum(range(1, i + 2))
  np.testing.assert_equal(cache.numpy(), [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 0, 0])


def test_kernels_run_once_leave_no_cache_entries():
  # a model's loading runs kernels of its weights' shapes once: run_once lets go of what it scheduled and compiled,
  # and keeps what was there before it; a kernel made again compiles again and gives the same values
  from tinyhybrid import Device
  def entries() -> tuple[set, set, set]: return set(engine.schedule_cache), set(engine.kernel_cache), Device["CPU"].program_keys()
  x = np.arange(91, dtype=np.float32)  # a shape and a constant no other test uses: the kernels are new
  a = Tensor(x).realize()
  kept = (a * 3 + 1).realize()
  before = entries()
  with engine.run_once():
    once = (a.reshape(7, 13).sum(1) * 7.0625).realize()
    inside = entries()
  assert all(i - b for i, b in zip(inside, before)), "the kernel inside made no cache entries"
  # the new entries are gone, and the old ones stay but as many as the new ones pushed out (the caches are bounded)
  assert all(after <= b and not after & (i - b) and len(b - after) <= len(i - b) for after, i, b in zip(entries(), inside, before))
  np.testing.assert_allclose(once.numpy(), x.reshape(7, 13).sum(1) * 7.0625)
  np.testing.assert_allclose((a.reshape(7, 13).sum(1) * 7.0625).numpy(), x.reshape(7, 13).sum(1) * 7.0625)
  np.testing.assert_allclose(kept.numpy(), x * 3 + 1)


def test_a_device_that_fails_to_open_is_not_opened():
  # run_once and the other walks over the opened devices must not meet one whose making raised
  from tinyhybrid import Device
  with pytest.raises(ValueError, match="no renderer 'CUDA'"): Device["CPU:CUDA"]
  assert "CPU:CUDA" not in Device.opened() and "CPU:CUDA" not in Device.opened("CPU")
  with engine.run_once(): pass


def test_a_schedule_plan_shares_bytes_among_intermediates_of_other_sizes():
  # host memory: intermediates whose lives do not overlap share a buffer whatever their sizes and dtypes, the
  # largest first (a 0.5B LLM's decode step: 3.8 MiB in exactly matching sizes, 1.3 so); outputs keep their own
  from tinyhybrid.schedule.memory import plan_memory
  from tinyhybrid.uop.buffers import BufferSlot
  s = [BufferSlot(1, 1000, dtypes.float32), BufferSlot(2, 300, dtypes.int16), BufferSlot(3, 2000, dtypes.uint8), BufferSlot(4, 10, dtypes.float32)]
  kernels = [[1, 0], [2, 1], [3, 2], [4, 3]]  # a chain: each slot read by the next kernel, 4 the output
  physical, bases = plan_memory(kernels, s, keep={4}, by_bytes=True)
  # 1 (4000 bytes, kernels 0-1) and 3 (2000, kernels 2-3) share; 2 (600, kernels 1-2) overlaps both
  assert physical[0] == physical[2] and len({physical[0], physical[1], physical[3]}) == 3
  assert bases == {physical[0]: 4000}
  physical, bases = plan_memory(kernels, s, keep={4})  # device memory: only a slot of the same size and dtype
  assert len(set(physical)) == 4 and bases == {}
  # and a realize through such a plan gives the values
  x = (np.arange(1000) % 7).astype(np.float32)
  t = (Tensor(x).reshape(10, 100).sum(1).contiguous().cast(dtypes.int16).contiguous() * 3).realize()
  np.testing.assert_array_equal(t.numpy(), x.reshape(10, 100).sum(1).astype(np.int16) * 3)


def test_a_program_keeps_its_kernel_compressed_and_what_it_loads():
  # a compiled program shares its kernel's nodes while the engine's cache holds the kernel, and past that keeps it as
  # a compressed pickle (the 0.5B LLM's warm-up: 53k nodes, 4 MB at its peak) that gives back an equal one; what it
  # loads from is read off the kernel once, for a capture's plan
  x = np.arange(37, dtype=np.float32)  # a shape no other test uses: the kernel is new
  a = Tensor(x).realize()
  before = set(engine.kernel_cache)
  out = (a * 2.5 + a.max()).realize()
  ((k, prg),) = [v for key, v in engine.kernel_cache.items() if key not in before and v[1].name.startswith("E_")]
  assert prg._ast is k.ast
  prg.pack_ast()  # what the cache does when the entry goes (test_leaks: through the cache itself)
  assert isinstance(prg._ast, bytes) and len(prg._ast) < 2000 and prg.ast is k.ast  # (nodes are interned: the same)
  assert prg.reads == frozenset(range(k.outs, len(k.buffers)))
  np.testing.assert_allclose(out.numpy(), x * 2.5 + x.max())


def test_a_kernel_that_reads_a_megabyte_runs_on_the_cores_though_it_does_little_work():
  # 4096 outputs of 64 loads each (as the sums of int_matvec's stored Q6_K block sums): few iterations, 1 MB read.
  # On one core it took 1.1 ms of a 0.5B model's decode step (12 such kernels)
  from tinyhybrid import Device, TinyJit
  x = Tensor.rand(64, 4096).realize()
  f = TinyJit(lambda x: sum(x[i] for i in range(64)).realize())
  for _ in range(3): out = f(x)
  np.testing.assert_allclose(out.numpy(), x.numpy().sum(0), rtol=1e-5)
  assert f.captured is not None
  (ei,) = f.captured.jit_cache
  assert ei.threads > 1 if Device["CPU"].max_threads > 1 else ei.threads == 1
  small = TinyJit(lambda x: (x[0] + x[1]).realize())  # 32 KB: one core, where waking the others costs more
  for _ in range(3): small(x)
  assert [e.threads for e in small.captured.jit_cache] == [1]
