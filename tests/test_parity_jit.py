"""TinyJit's documented behaviours as in tinygrad (its JIT "footguns" notes), with the exact exception types and the
values checked against NumPy; and the schedule API (Tensor.linear_with_vars, schedule_linear, run_linear)."""
import numpy as np
import pytest

from tinyhybrid import Tensor, TinyJit, Variable
from tinyhybrid.engine.jit import CapturedJit, JitError
from tinyhybrid.engine.realize import run_linear

RNG = np.random.default_rng(13)


def f32(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)


def test_jit_error_is_importable_and_a_runtime_error():
  assert issubclass(JitError, RuntimeError)


# ** what a replay reads: inputs, arguments, tensors made inside **

@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 5)], ids=["0d", "empty", "one", "2d"])
def test_replay_follows_inputs(shape):
  jf = TinyJit(lambda a, b: (a * 2 - b).realize())
  for _ in range(5):
    a, b = f32(*shape), f32(*shape)
    np.testing.assert_allclose(jf(Tensor(a), Tensor(b)).numpy(), a * 2 - b, rtol=1e-6)


def test_python_arguments_and_tensors_made_inside_are_frozen_at_capture():
  @TinyJit
  def f(x, k):
    return (x * k + Tensor([float(k)])).realize()
  out = [f(Tensor([10.0]), k).item() for k in range(1, 6)]
  assert out == [11.0, 22.0, 22.0, 22.0, 22.0]  # warm-up k=1, capture k=2, then the capture's k


def test_python_side_effects_run_only_on_the_first_two_calls():
  calls = []
  @TinyJit
  def f(x):
    calls.append(1)
    return (x + 1).realize()
  for i in range(5): f(Tensor([float(i)]))
  assert len(calls) == 2


@pytest.mark.parametrize("new", [lambda: Tensor.ones(5), lambda: Tensor.ones(4, dtype="int32"), lambda: Tensor.ones(2, 2)],
                         ids=["shape", "dtype", "rank"])
def test_changed_input_raises(new):
  jf = TinyJit(lambda a: (a * 2).realize())
  for _ in range(3): jf(Tensor.ones(4))
  with pytest.raises(JitError): jf(new())
  np.testing.assert_equal(jf(Tensor.ones(4)).numpy(), np.full(4, 2.0, np.float32))  # still replays


def test_views_read_through_and_other_offsets_raise():
  base_np = f32(10, 10)
  base = Tensor(base_np).realize()
  jf = TinyJit(lambda a: (a + 1).realize())
  for _ in range(4): np.testing.assert_allclose(jf(base[:, 2:4]).numpy(), base_np[:, 2:4] + 1, rtol=1e-6)
  other = f32(10, 10)
  np.testing.assert_allclose(jf(Tensor(other)[:, 2:4]).numpy(), other[:, 2:4] + 1, rtol=1e-6)  # same view, new buffer
  with pytest.raises(JitError): jf(base[:, 3:5])
  with pytest.raises(JitError): jf(Tensor(f32(10, 12))[:, 2:4])  # the buffer behind the view changed size


def test_lazy_inputs_are_realized_in_place():
  jf = TinyJit(lambda a: (a.sum(0)).realize())
  for _ in range(4):
    a_np = f32(3, 4)
    lazy = Tensor(a_np) * 3
    np.testing.assert_allclose(jf(lazy).numpy(), (a_np * 3).sum(0), rtol=1e-5)
    np.testing.assert_allclose(lazy.numpy(), a_np * 3, rtol=1e-6)


# ** argument forms **

def test_positional_and_keyword_calls_cannot_mix():
  jf = TinyJit(lambda a, b: (a - b).realize())
  for _ in range(2): jf(Tensor([1.0]), Tensor([2.0]))
  with pytest.raises(JitError): jf(a=Tensor([3.0]), b=Tensor([4.0]))
  assert jf(Tensor([5.0]), Tensor([1.0])).item() == 4.0


def test_keyword_order_does_not_matter():
  jf = TinyJit(lambda first, second: (first / second).realize())
  for _ in range(3):
    a, b = f32(6), np.abs(f32(6)) + 1
    np.testing.assert_allclose(jf(second=Tensor(b), first=Tensor(a)).numpy(), a / b, rtol=1e-6)
    np.testing.assert_allclose(jf(first=Tensor(a), second=Tensor(b)).numpy(), a / b, rtol=1e-6)


@pytest.mark.parametrize("box", [lambda t: [t], lambda t: (t,), lambda t: {"k": t}], ids=["list", "tuple", "dict"])
def test_tensors_in_containers_are_inputs(box):
  jf = TinyJit(lambda a, c: (a + (c["k"] if isinstance(c, dict) else c[0])).realize())
  for i in range(5):
    np.testing.assert_equal(jf(Tensor([1.0, 1.0]), box(Tensor([float(i), -float(i)]))).numpy(), [1.0 + i, 1.0 - i])


def test_same_tensor_inside_a_container_and_directly_is_one_input():
  jf = TinyJit(lambda a, c: (a * c[0]).realize())
  for i in range(4):
    t = Tensor([float(i), 2.0])
    np.testing.assert_equal(jf(t, [t]).numpy(), [float(i * i), 4.0])


@pytest.mark.parametrize("args", [lambda x: (x, x), lambda x: (x[:2], x[2:]), lambda x: (x, [x.reshape(2, 2)])],
                         ids=["same", "two_views", "in_container"])
def test_duplicate_inputs_raise_on_the_first_call(args):
  jf = TinyJit(lambda a, b: (a.sum() + (b[0] if isinstance(b, list) else b).sum()).realize())
  x = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  with pytest.raises(JitError, match="duplicate"): jf(*args(x))


@pytest.mark.parametrize("const", [lambda: Tensor(2), lambda: Tensor(2.5), lambda: Tensor(2).realize(), lambda: Tensor(2.0, dtype="float32").realize()],
                         ids=["int", "float", "int_realized", "float_realized"])
def test_python_scalar_inputs_raise(const):
  jf = TinyJit(lambda a, b: (a * b).realize())
  with pytest.raises(JitError): jf(Tensor([1.0, 2.0, 3.0]).realize(), const())


def test_one_element_tensors_are_fine_inputs():
  jf = TinyJit(lambda a, b: (a * b).realize())
  for i in range(4): np.testing.assert_equal(jf(Tensor([1.0, 2.0]), Tensor([float(i)])).numpy(), [i, 2.0 * i])


# ** what the function may do and return **

@pytest.mark.parametrize("read", [lambda t: t.numpy(), lambda t: t.item(), lambda t: t.tolist(), lambda t: t.data()],
                         ids=["numpy", "item", "tolist", "data"])
def test_reading_values_during_capture_raises(read):
  @TinyJit
  def f(x):
    s = x.sum()
    read(s)
    return (x * 2).realize()
  np.testing.assert_equal(f(Tensor([1.0, 2.0])).numpy(), [2.0, 4.0])  # the warm-up is a plain call
  with pytest.raises(JitError): f(Tensor([1.0, 2.0]))


def test_masked_select_and_item_shapes_raise_during_capture():
  jmask = TinyJit(lambda x, m: x.masked_select(m))
  x, m = Tensor([1, 2, 3, 4]), Tensor([True, False, True, False])
  np.testing.assert_equal(jmask(x, m).numpy(), [1, 3])
  with pytest.raises(JitError): jmask(x, m)
  jzeros = TinyJit(lambda x: Tensor.zeros(x.sum().item()))
  jzeros(Tensor([1, 1, 1]))
  with pytest.raises(JitError): jzeros(Tensor([1, 1, 1]))


@pytest.mark.parametrize("extra", [3, 2.5, "s", np.float32(1)], ids=["int", "float", "str", "numpy"])
def test_non_tensor_returns_raise_at_capture(extra):
  jf = TinyJit(lambda x: ((x * 2).realize(), [extra]))
  jf(Tensor([1.0]))
  with pytest.raises(JitError): jf(Tensor([1.0]))


def test_nested_tensor_returns_and_none_are_fine():
  @TinyJit
  def f(x): return (x + 1), {"double": [x * 2, None]}
  for i in range(4):
    a, d = f(Tensor([float(i)]))
    assert a.item() == i + 1 and d["double"][0].item() == 2 * i and d["double"][1] is None


def test_returning_none_after_work_is_fine():
  out = Tensor.zeros(2).contiguous().realize()
  @TinyJit
  def step(x):
    out.assign(out + x).realize()
  for i in range(5): assert step(Tensor([1.0, float(i)])) is None
  np.testing.assert_equal(out.numpy(), [5.0, 10.0])


@pytest.mark.parametrize("fn", [lambda a, b: None, lambda a, b: a], ids=["none", "input"])
def test_nothing_realized_raises(fn):
  jf = TinyJit(fn)
  with pytest.raises(JitError):
    for _ in range(3): jf(Tensor([1.0]), Tensor([2.0]))


def test_returned_tensors_are_refilled_in_place():
  jf = TinyJit(lambda x: x.sum().realize())
  r1, r2, r3 = jf(Tensor([1, 1])), jf(Tensor([2, 2])), jf(Tensor([3, 3]))
  assert (r1.item(), r2.item(), r3.item()) == (2, 6, 6) and r2 is r3  # the capture's output is the replay's


def test_unrealized_returns_are_realized():
  jf = TinyJit(lambda a, b: a @ b)
  for _ in range(4):
    a, b = f32(3, 4), f32(4, 2)
    np.testing.assert_allclose(jf(Tensor(a), Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-6)


def test_input_mutation_lands_in_the_callers_tensor():
  @TinyJit
  def f(x):
    x += 1
    return x.realize()
  a = Tensor([0.0]).contiguous().realize()
  for _ in range(5): f(a)
  assert a.item() == 5.0


# ** outputs fed back as inputs **

def test_output_fed_back_as_input_across_kernels():
  @TinyJit
  def step(x):
    y = (x + 1).realize()
    return (y * 2).realize()
  x = step(Tensor([10.0]).contiguous().realize())
  x = step(Tensor([20.0]).contiguous().realize())
  for _ in range(3): x = step(x)
  assert x.item() == 350.0
  y = Tensor([100.0]).contiguous().realize()
  for _ in range(3): y = step(y)
  assert y.item() == 814.0


def test_multiple_outputs_of_one_intermediate_fed_back():
  @TinyJit
  def f(buf, frame):
    new_buf = buf[1:].cat(frame, dim=0)
    return new_buf.contiguous(), new_buf[:1].contiguous()
  ref = np.array([[0.0], [1.0], [2.0]], np.float32)
  buf = Tensor(ref).contiguous().realize()
  for i in range(5):
    new_buf, first = f(buf, Tensor([[10.0 + i]]).contiguous().realize())
    assert first.item() == ref[1, 0]
    ref = np.concatenate([ref[1:], [[10.0 + i]]]).astype(np.float32)
    np.testing.assert_equal(new_buf.numpy(), ref)
    buf = new_buf


@pytest.mark.parametrize("prune", [False, True])
def test_output_read_and_written_by_one_kernel_is_copied_first(prune):
  # out[i] = buf[n-1-i] + new[i]: were out the input's memory, the kernel's second half would read what its first half
  # already wrote
  jf = TinyJit(lambda buf, new: (buf.flip(0) + new).realize(), prune=prune)
  ref = np.arange(1000, dtype=np.int32)
  buf = Tensor(ref).contiguous().realize()
  for i in range(6):
    buf = jf(buf, Tensor(np.full(1000, i, np.int32)))
    ref = ref[::-1] + i
    np.testing.assert_equal(buf.numpy(), ref)


# ** random, symbolic views, nesting, prune, reset, captured **

def test_random_draws_anew_and_matches_the_unjitted_stream():
  def f(x): return (x + Tensor.rand(3)).realize()
  Tensor.manual_seed(7)
  plain = [f(Tensor([0.0, 0.0, 0.0])).numpy() for _ in range(6)]
  Tensor.manual_seed(7)
  jf = TinyJit(f)
  jitted = [jf(Tensor([0.0, 0.0, 0.0])).numpy().copy() for _ in range(6)]
  assert len({tuple(r) for r in jitted}) == 6
  np.testing.assert_equal(np.stack(jitted), np.stack(plain))


def test_symbolic_view_inputs_follow_the_bound_value():
  a_np = f32(3, 10)
  a = Tensor(a_np).realize()
  jf = TinyJit(lambda x: (x * 2).sum(1).realize())
  for i in (2, 5, 3, 9, 1):
    np.testing.assert_allclose(jf(a[:, :Variable("i", 1, 10).bind(i)]).numpy(), (a_np[:, :i] * 2).sum(1), rtol=1e-5)


def test_nested_capture_raises_runtime_error_on_the_second_call():
  inner = TinyJit(lambda t: t + 1)
  outer = TinyJit(lambda t: inner(t) * 3)
  assert outer(Tensor([1])).realize().item() == 6
  with pytest.raises(RuntimeError): outer(Tensor([2])).realize()


def test_replay_inside_a_capture_is_captured():
  inner = TinyJit(lambda t: (t + 1).realize())
  for i in range(3): inner(Tensor([float(i)]))  # replaying from now on
  outer = TinyJit(lambda t: (inner(t * 2) * 3).realize())
  for i in range(5): assert outer(Tensor([float(i)])).item() == (2 * i + 1) * 3
  assert len(outer.captured.jit_cache) == 3


@pytest.mark.parametrize("form", ["call", "decorator"])
def test_prune_drops_kernels_that_read_no_input(form):
  w = Tensor([1.0, 2.0, 3.0]).realize()
  def f(x):
    y = (w * 2).contiguous().realize()  # reads no input: runs once, at the capture
    return (x + y).realize()
  jf = TinyJit(f, prune=True) if form == "call" else TinyJit(prune=True)(f)
  plain = TinyJit(f)
  for i in range(4):
    x = np.full(3, float(i), np.float32)
    np.testing.assert_equal(jf(Tensor(x)).numpy(), x + [2.0, 4.0, 6.0])
    np.testing.assert_equal(plain(Tensor(x)).numpy(), x + [2.0, 4.0, 6.0])
  assert isinstance(jf, TinyJit) and jf.prune
  assert (len(jf.captured.jit_cache), len(plain.captured.jit_cache)) == (1, 2)


def test_reset_starts_over():
  calls = []
  @TinyJit
  def f(x):
    calls.append(1)
    return (x * 2).realize()
  for _ in range(3): f(Tensor.ones(2))
  f.reset()
  assert f.captured is None
  for _ in range(3): np.testing.assert_equal(f(Tensor.ones(3)).numpy(), [2.0] * 3)  # a new shape is a new capture
  assert len(calls) == 4


def test_captured_jit_cache_lists_each_kernel_in_order():
  @TinyJit
  def f(a, b):
    s = (a @ b).realize()
    return (s.exp() + 1).sum().realize()
  jf = f
  assert jf.captured is None
  for _ in range(3): jf(Tensor(f32(3, 4)), Tensor(f32(4, 5)))
  assert isinstance(jf.captured, CapturedJit)
  names = [ei.prg.name for ei in jf.captured.jit_cache]
  assert len(names) >= 2 and all(isinstance(n, str) and n for n in names)


def test_jit_off_runs_the_function_every_call():
  from tinyhybrid import Context
  calls = []
  @TinyJit
  def f(x):
    calls.append(1)
    return x * 2
  with Context(JIT=0):
    for i in range(4): assert f(Tensor([float(i)])).item() == 2.0 * i
  assert len(calls) == 4 and f.captured is None


def test_method_jit():
  class M:
    def __init__(self): self.w = Tensor([2.0, 3.0]).realize()
    @TinyJit
    def __call__(self, x): return (x * self.w).realize()
  m = M()
  for i in range(4): np.testing.assert_equal(m(Tensor([float(i), 1.0])).numpy(), [2.0 * i, 3.0])


# ** the schedule API **

def test_linear_with_vars_then_run_linear():
  a_np, b_np = f32(4, 5), f32(5)
  a, b = Tensor(a_np).realize(), Tensor(b_np).realize()
  out, other = (a + b).sum(1), (a * 2).max()
  linear, var_vals = Tensor.linear_with_vars(out, other)
  assert var_vals == {} and len(linear.src) == 2 and all(ei.prg.name for ei in linear.src)
  run_linear(linear, var_vals)
  np.testing.assert_allclose(out.numpy(), (a_np + b_np).sum(1), rtol=1e-5)
  np.testing.assert_allclose(other.numpy(), (a_np * 2).max(), rtol=1e-6)
  assert len(Tensor.schedule_linear(out).src) == 0  # realized: nothing left to run


def test_schedule_linear_and_bound_variables():
  a_np = f32(10)
  a = Tensor(a_np).realize()
  v = Variable("n", 1, 10)
  s = a[:v.bind(3)].sum()
  with pytest.raises(AssertionError): s.schedule_linear()
  linear, var_vals = s.linear_with_vars()
  assert var_vals == {"n": 3} and len(linear.src) == 1
  run_linear(linear, {"n": 7})  # the kernel takes the variable: another value runs it for that value
  np.testing.assert_allclose(s.item(), a_np[:7].sum(), rtol=1e-5)
  t = a[:v.bind(4)].sum()
  run_linear(*t.linear_with_vars())
  np.testing.assert_allclose(t.item(), a_np[:4].sum(), rtol=1e-5)


def test_schedule_of_nothing_and_of_a_constant():
  t = Tensor([1.0, 2.0]).realize()
  assert len(t.schedule_linear().src) == 0
  z = Tensor.zeros(3).contiguous()
  linear = z.schedule_linear()
  assert len(linear.src) == 1
  run_linear(linear)
  np.testing.assert_equal(z.numpy(), np.zeros(3, np.float32))
