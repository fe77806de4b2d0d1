"""TinyJit: capture on the second call, replay from the third with new inputs; errors on changed inputs; JIT=0."""
import numpy as np
import pytest

from tinyhybrid import Context, Device, Tensor, TinyJit, dtypes
from tinyhybrid.engine.jit import JitError

RNG = np.random.default_rng(3)


def test_replay_follows_new_inputs():
  calls = []

  @TinyJit
  def f(a, b):
    calls.append(1)  # Python side effects run only on the first two calls
    return ((a + b) * 2).relu().sum(0)

  for _ in range(6):
    a_np, b_np = RNG.standard_normal((5, 7)).astype(np.float32), RNG.standard_normal((5, 7)).astype(np.float32)
    out = f(Tensor(a_np), Tensor(b_np))
    np.testing.assert_allclose(out.numpy(), np.maximum((a_np + b_np) * 2, 0).sum(0), rtol=1e-5, atol=1e-6)
  assert len(calls) == 2


def test_multiple_outputs_and_realize_inside():
  @TinyJit
  def g(x):
    y = (x * 3).contiguous().realize()  # a realize in the middle is captured too
    return y + 1, y.max()

  for i in range(4):
    x_np = RNG.standard_normal(10).astype(np.float32)
    a, m = g(Tensor(x_np))
    np.testing.assert_allclose(a.numpy(), x_np * 3 + 1, rtol=1e-6)
    np.testing.assert_allclose(m.item(), (x_np * 3).max(), rtol=1e-6)


def test_inputs_must_keep_shape_and_dtype():
  @TinyJit
  def f(a): return a * 2

  for _ in range(3): f(Tensor.ones(4))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor.ones(5))
  with pytest.raises(JitError, match="inputs changed"): f(Tensor.ones(4, dtype="int32"))


def test_lazy_and_strided_inputs_are_made_contiguous():
  @TinyJit
  def f(a): return a + 1

  for i in range(4):
    base = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) * (i + 1))
    np.testing.assert_array_equal(f(base.T).numpy(), (np.arange(12, dtype=np.float32).reshape(3, 4) * (i + 1)).T + 1)


def test_jit_off():
  calls = []

  @TinyJit
  def f(a):
    calls.append(1)
    return a * 2

  with Context(JIT=0):
    for _ in range(4): f(Tensor.ones(3))
  assert len(calls) == 4


def test_profile_records_each_kernel_with_its_name():
  import time
  from tinyhybrid.device import profile_events
  a = Tensor(np.arange(64, dtype=np.float32)).realize()
  profile_events.clear()
  before = time.monotonic_ns()
  with Context(PROFILE=1):
    (a - (a + 1).sum()).realize()  # two kernels: the sum, then a read of it for every element
    Device[Device.DEFAULT].synchronize()  # a run's events are recorded once it is done
  after = time.monotonic_ns()
  assert len(profile_events) >= 2, profile_events
  for ev in profile_events:
    assert ev.name and before <= ev.start_ns <= ev.end_ns <= after
  assert [e.start_ns for e in profile_events] == sorted(e.start_ns for e in profile_events)
  profile_events.clear()
  ((a + 2).sum()).realize()  # PROFILE off: nothing recorded
  assert profile_events == []


def test_inputs_realized_with_gradient_history():
  # a realized tensor that keeps its history for autograd (an AFTER over its buffer) is still a plain input
  @TinyJit
  def f(a): return a * 3

  for i in range(4):
    w = Tensor(np.full(5, float(i), np.float32), requires_grad=True)
    x = (w + 1).realize()
    np.testing.assert_array_equal(f(x).numpy(), np.full(5, (i + 1) * 3, np.float32))


def test_intermediates_of_a_capture_share_memory_and_replays_stay_right():
  # eight realizes in a row, each making a 256 KB intermediate only the next one reads (a model's layers): the capture
  # holds them weakly, so each dies with its realize and the next reuses its memory; the replay keeps that plan
  @TinyJit
  def layers(x, w):
    for i in range(8): x = (x @ w.T + i).relu().contiguous().realize()
    return x.sum(1)

  w_np = (RNG.standard_normal((256, 256)) / 16).astype(np.float32)
  w, alloc = Tensor(w_np).realize(), Device[Device.DEFAULT].allocator
  for call in range(5):
    x_np = RNG.standard_normal((256, 256)).astype(np.float32)
    used = alloc.used
    out = layers(Tensor(x_np).realize(), w)
    if call == 1: held = alloc.used - used  # the capture's
    ref = x_np
    for i in range(8): ref = np.maximum(ref @ w_np.T + i, 0)
    np.testing.assert_allclose(out.numpy(), ref.sum(1), rtol=1e-4, atol=1e-3)
  # two intermediates live at a time, and the output, on every device: the plan reads the runs, not the addresses the
  # allocator gave (a driver that frees to the system gives other addresses)
  assert held <= 3 * 256 * 256 * 4 + 4096, held


def test_captures_keep_their_intermediates_in_shared_memory():
  # two functions of the same shape (an LLM's prompt and decode steps): the second capture's plan takes the memory the
  # first one's holds, since no replay runs inside another; interleaved replays, and one capture freeing its
  # intermediates, leave both right
  def make(k):
    @TinyJit
    def f(x, w):
      for i in range(4): x = (x @ w.T + i * k).relu().contiguous().realize()
      return x.sum(1)
    return f

  w_np = (RNG.standard_normal((256, 256)) / 16).astype(np.float32)
  w, alloc = Tensor(w_np).realize(), Device[Device.DEFAULT].allocator
  def check(f, k, x_np):
    ref = x_np
    for i in range(4): ref = np.maximum(ref @ w_np.T + i * k, 0)
    np.testing.assert_allclose(f(Tensor(x_np).realize(), w).numpy(), ref.sum(1), rtol=1e-4, atol=1e-3)
  f, g = make(1), make(2)
  for _ in range(3): check(f, 1, RNG.standard_normal((256, 256)).astype(np.float32))
  used = alloc.used
  for _ in range(3): check(g, 2, RNG.standard_normal((256, 256)).astype(np.float32))
  # what g's capture holds of its own: the input it ran with and its output; its two intermediates are in f's memory
  assert alloc.used - used <= 256 * 256 * 4 + 256 * 4 + 4096, alloc.used - used
  for _ in range(2):
    for fn, k in ((f, 1), (g, 2)): check(fn, k, RNG.standard_normal((256, 256)).astype(np.float32))
  f.captured.free_intermediates()
  check(g, 2, RNG.standard_normal((256, 256)).astype(np.float32))
  check(f, 1, RNG.standard_normal((256, 256)).astype(np.float32))
  g.captured.free_intermediates()
  check(f, 1, RNG.standard_normal((256, 256)).astype(np.float32))
  check(g, 2, RNG.standard_normal((256, 256)).astype(np.float32))


def test_threads_replaying_captures_that_share_memory_get_their_own_results():
  # two captures of one shape share their intermediates' memory; replays from two threads at once submit one whole
  # replay at a time, so neither reads the other's intermediates (an in-order queue would interleave their kernels)
  import threading
  def make(k):
    @TinyJit
    def f(x):
      h = (x * k + 1).contiguous().realize()
      return (h * h).sum(1).realize()
    return f
  fs = [make(2.0), make(3.0)]
  for f in fs:
    for _ in range(3): f(Tensor(np.ones((128, 128), np.float32)).realize())
  errors: list[str] = []
  def run(i):
    rng = np.random.default_rng(i)
    for _ in range(40):
      x_np = rng.standard_normal((128, 128)).astype(np.float32)
      got = fs[i](Tensor(x_np).realize()).numpy()
      if not np.allclose(got, ((x_np * (2.0 + i) + 1) ** 2).sum(1), rtol=1e-4, atol=1e-3): errors.append(f"thread {i}")
  threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors, errors


def test_a_replay_inside_a_capture_keeps_its_intermediates_apart_from_the_outer_ones():
  # the outer capture runs the inner one's kernels on the inner's scratch memory: its own intermediates, of the same
  # size and alive across that replay, must take other memory
  @TinyJit
  def inner(x):
    h = (x * 2 + 1).contiguous().realize()
    return (h * h).sum(1).realize()

  @TinyJit
  def outer(x):
    a = (x - 3).contiguous().realize()  # alive across inner's replay, as large as inner's intermediate
    b = inner(x)
    return (a.sum(1) + b).realize()

  for _ in range(3): inner(Tensor(RNG.standard_normal((64, 64)).astype(np.float32)).realize())
  for _ in range(4):
    x_np = RNG.standard_normal((64, 64)).astype(np.float32)
    want = (x_np - 3).sum(1) + ((x_np * 2 + 1) ** 2).sum(1)
    np.testing.assert_allclose(outer(Tensor(x_np).realize()).numpy(), want, rtol=1e-4, atol=1e-3)


def test_a_capture_writing_part_of_a_live_buffer_keeps_the_rest():
  # the cache exists before the capture, and the capture's first use of it is an assign into one row: the other rows
  # are the caller's, and no intermediate of the replay may borrow their memory
  cache = Tensor.arange(64).reshape(4, 16).float().contiguous().realize()
  rows = cache.numpy()

  @TinyJit
  def step(x):
    h = (x * 2).contiguous().realize()  # dies within the call, before the cache is written
    out = (h + 1).sum().realize()
    cache[1].assign(x + 3).realize()
    return out

  for call in range(5):
    x_np = RNG.standard_normal(16).astype(np.float32)
    np.testing.assert_allclose(step(Tensor(x_np).realize()).numpy(), (x_np * 2 + 1).sum(), rtol=1e-5)
    rows[1] = x_np + 3
    np.testing.assert_array_equal(cache.numpy(), rows)


def test_a_returned_assign_into_an_argument_follows_each_calls_argument():
  @TinyJit
  def f(a: Tensor, b: Tensor) -> Tensor: return b.assign(a + 1)
  for i in range(5):
    a = Tensor([i])
    b = Tensor.empty_like(a)
    c = f(a, b)
    assert c.item() == i + 1 and b.item() == i + 1


def test_a_constant_input_on_no_device_is_refused():
  from tinyhybrid import dtypes
  from tinyhybrid.uop.ops import UOp
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x + 1).realize()
  with pytest.raises(JitError): f(Tensor(UOp.const(2.0).cast(dtypes.float))).item()
  with pytest.raises(JitError): f(Tensor(UOp.const(2.0).cast(dtypes.float) + UOp.const(1.0).cast(dtypes.float))).item()


def test_free_intermediates_frees_what_a_replay_fills_and_keeps_state():
  from tinyhybrid import GlobalCounters, dtypes
  ext = Tensor([1, 24, 23, 45, 1])
  @TinyJit
  def f(x: Tensor) -> Tensor:
    t1 = (x * 2).contiguous().realize()
    t2 = (t1 + ext).contiguous().realize()
    return t2.sum().contiguous().realize()
  for i in range(4): assert f(Tensor([i, 1, 2, 3, 4])).item() == 114 + 2 * i
  before = GlobalCounters.mem_used
  f.captured.free_intermediates()
  assert before - GlobalCounters.mem_used >= 2 * 5 * dtypes.int32.itemsize + 4  # t1, t2 and the result
  assert f(Tensor([11, 1, 2, 3, 4])).item() == 136
  f.captured.free_intermediates()
  f.captured.free_intermediates()  # twice is fine
  assert f(Tensor([11, 1, 2, 3, 4])).item() == 136
  x = Tensor([1]).realize()
  @TinyJit
  def g(y: Tensor) -> Tensor:
    x.assign(x + y)  # state: read before it is written, never freed
    return x
  for _ in range(5): g(Tensor([1]))
  before = GlobalCounters.mem_used
  g.captured.free_intermediates()
  assert GlobalCounters.mem_used == before and x.item() == 6
  g(Tensor([2]))
  assert x.item() == 8


def test_work_under_capturing_0_is_not_replayed():
  from tinyhybrid import GlobalCounters
  @TinyJit
  def add(a: Tensor, b: Tensor) -> Tensor:
    with Context(CAPTURING=0): Tensor.zeros(4, 4).contiguous().realize()  # runs at the capture, not in replays
    return (a + b).realize()
  for i in range(4): assert add(Tensor([i]), Tensor([i])).item() == 2 * i
  assert len(add.captured.jit_cache) == 1
  GlobalCounters.reset()
  add(Tensor([5]), Tensor([5]))
  assert GlobalCounters.kernel_count == 1


def test_a_replay_plan_shares_memory_largest_first():
  # a large intermediate (runs 0-1), then a small and a large one alive together (runs 2-3): the two large ones share
  # one buffer and the small one takes its own; taken in the order they were made, the small one joined the first
  # buffer and the second large one needed a buffer of its own (twice the large size in all)
  import weakref

  from tinyhybrid.device import Buffer
  from tinyhybrid.engine.jit import _rehome
  from tinyhybrid.engine.realize import Transient
  def dead(nbytes: int) -> Transient:
    b = Buffer("CPU", nbytes, dtypes.uint8)
    return Transient(weakref.ref(b), "CPU", nbytes)
  big, small, big2 = dead(1 << 20), dead(1 << 12), dead(1 << 20)
  runs = [("CPU", None, [big], 1), ("CPU", None, [big], 1), ("CPU", None, [small, big2], 1), ("CPU", None, [small, big2], 1)]
  rehomed, scratch = _rehome(runs)  # type: ignore[arg-type]
  home_big, (home_small, home_big2) = rehomed[0][2][0], rehomed[2][2]
  assert home_big is home_big2 and home_small is not home_big and home_small.nbytes >= 1 << 12
  assert scratch == {id(home_big), id(home_small)} and rehomed[1][2][0] is home_big and rehomed[3][2][0] is home_small


def test_a_capture_plans_the_memory_of_a_schedules_shared_intermediates():
  # a schedule's intermediates of several sizes share host memory as views of one buffer: a capture holds them
  # weakly, as any intermediate, and gives them its own scratch memory
  from tinyhybrid.device import Buffer
  @TinyJit
  def f(x: Tensor) -> Tensor:  # three intermediates in a chain: the first and the third share memory
    return (((x.reshape(10, 100).sum(1).contiguous() * 2).cast(dtypes.int16).contiguous() + 1).cast(dtypes.float32).contiguous() * 3).realize()
  for i in range(4):
    x = (np.arange(1000) % (5 + i)).astype(np.float32)
    np.testing.assert_array_equal(f(Tensor(x).realize()).numpy(), ((x.reshape(10, 100).sum(1) * 2).astype(np.int16) + 1) * 3)
  assert f.captured is not None
  assert not any(b.intermediate for b in f.captured.objs if isinstance(b, Buffer))
