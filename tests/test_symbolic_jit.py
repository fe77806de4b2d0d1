"""TinyJit with bound Variables (tinygrad's test_symbolic_jit cases): the variables passed to a jitted function, or in
the shapes of its inputs, take a new value on each call; the replay patches their values and recompiles nothing.
Every case runs with the JIT on and off."""
import numpy as np
import pytest

from tinyhybrid import Context, Device, Tensor, TinyJit, Variable
from tinyhybrid.engine import realize
from tinyhybrid.engine.jit import JitError

RNG = np.random.default_rng(11)


def rand(*shape: int) -> Tensor: return Tensor(RNG.standard_normal(shape).astype(np.float32))


def close(x: np.ndarray, y: np.ndarray) -> None: np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-5)


def caches() -> tuple[int, int, int]: return len(realize.schedule_cache), len(realize.kernel_cache), len(Device["CPU"]._cache)


@pytest.fixture(params=[1, 0], ids=["jit", "nojit"])
def jit(request):
  with Context(JIT=request.param): yield request.param


def run_values(jf: TinyJit, call, check, values, only_programs: bool = False) -> None:
  """Calls jf through `call(i)` for each value; from the third call on (a replay) the call schedules and compiles
  nothing (only_programs: compiles no program, but may schedule)."""
  for n, i in enumerate(values):
    before = caches()
    out = call(i)
    if n >= 2: assert caches()[2 if only_programs else 0:] == before[2 if only_programs else 0:], f"call {n} (value {i}) compiled something"
    check(i, out)


def test_plus1(jit):
  jf = TinyJit(lambda a: (a + 1).realize())
  a = rand(3, 10)
  run_values(jf, lambda i: jf(a[:, :Variable("i", 1, 10).bind(i)]), lambda i, out: close(out[:3, :i].numpy(), a.numpy()[:, :i] + 1), range(1, 10))
  if jit: assert len(jf.captured.jit_cache) == 1


def test_symbolic_output_follows_the_value(jit):
  jf = TinyJit(lambda a: (a * 2).realize())
  a = rand(3, 10)
  for i in (2, 3, 7, 4):
    out = jf(a[:, :Variable("i", 1, 10).bind(i)])
    assert out.shape == (3, Variable("i", 1, 10).bind(i))  # a replay's returned view carries this call's value
    close(out.reshape(3, i).numpy(), a.numpy()[:, :i] * 2)


def test_add_two_symbolic_inputs(jit):
  jf = TinyJit(lambda a, b: (a + b).realize())
  a, b = rand(3, 10), rand(3, 10)
  def call(i):
    v = Variable("i", 1, 10).bind(i)
    return jf(a[:, :v], b[:, :v])
  run_values(jf, call, lambda i, out: close(out[:3, :i].numpy(), a.numpy()[:, :i] + b.numpy()[:, :i]), range(1, 6))


def test_reshape_of_fresh_inputs(jit):
  jf = TinyJit(lambda a: (a + 1).realize())
  arrays = {i: RNG.standard_normal((3, i)).astype(np.float32) for i in range(1, 6)}
  # a reshape of a whole buffer of another size on each call: the replay reads it compactly in the new shape. Without
  # the JIT each size is its own schedule (the buffer's size is in its key), with the same program
  run_values(jf, lambda i: jf(Tensor(arrays[i]).reshape(3, Variable("i", 1, 10).bind(i))),
             lambda i, out: close(out.reshape(3, i).numpy(), arrays[i] + 1), range(1, 6), only_programs=not jit)


def test_matmul_symbolic_inner_dim(jit):
  jf = TinyJit(lambda a, b: (a @ b).realize())
  a, b = rand(3, 10), rand(10, 5)
  def call(i):
    v = Variable("i", 1, 10).bind(i)
    return jf(a[:, :v], b[:v, :])
  run_values(jf, call, lambda i, out: close(out.numpy(), a.numpy()[:, :i] @ b.numpy()[:i]), range(1, 6))


def test_two_kernels_one_without_variables(jit):
  def f(a, b):
    s = (a @ b).realize()
    return (s + s).realize()
  jf = TinyJit(f)
  a, b = rand(3, 10), rand(10, 5)
  def call(i):
    v = Variable("i", 1, 10).bind(i)
    return jf(a[:, :v], b[:v, :])
  run_values(jf, call, lambda i, out: close(out.numpy(), 2 * (a.numpy()[:, :i] @ b.numpy()[:i])), range(1, 5))
  if jit: assert len(jf.captured.jit_cache) == 2


def test_two_variables(jit):
  jf = TinyJit(lambda a, b: (a @ b + 1).realize())
  a, b = rand(10, 3), rand(3, 10)
  pairs = [(i, j) for i in (2, 4) for j in (3, 5)]
  def call(n):
    i, j = pairs[n]
    return jf(a[:Variable("i", 1, 10).bind(i), :], b[:, :Variable("j", 1, 10).bind(j)])
  def check(n, out):
    i, j = pairs[n]
    close(out[:i, :j].numpy(), a.numpy()[:i] @ b.numpy()[:, :j] + 1)
  run_values(jf, call, check, range(len(pairs)))


def test_cat_symbolic(jit):
  jf = TinyJit(lambda a, b: a.cat(b, dim=1).realize())
  a, b = rand(3, 10), rand(3, 10)
  def call(i):
    return jf(a[:, :Variable("i", 1, 10).bind(i)], b[:, :Variable("j", 1, 10).bind(i % 3 + 1)])
  run_values(jf, call, lambda i, out: close(out[:3, :i + i % 3 + 1].numpy(), np.concatenate([a.numpy()[:, :i], b.numpy()[:, :i % 3 + 1]], 1)),
             range(1, 6))


def test_variable_offsets(jit):
  jf = TinyJit(lambda a: (a + 1).realize())
  a = rand(7, 12)
  run_values(jf, lambda i: jf(a[3:5, Variable("i", 1, 10).bind(i):Variable("i", 1, 10).bind(i) + 2]),
             lambda i, out: close(out.numpy(), a.numpy()[3:5, i:i + 2] + 1), range(1, 8))


def test_reduce_symbolic_axis(jit):
  jsum = TinyJit(lambda a: a.sum().realize())
  jmean0 = TinyJit(lambda a: a.mean(0).realize())
  jmax1 = TinyJit(lambda a: a.max(1).realize())
  t, a = Tensor.ones(10), rand(10, 3)
  for i in range(1, 6):
    v = Variable("i", 1, 10).bind(i)
    assert jsum(t[:v]).item() == i
    close(jmean0(a[:v]).numpy(), a.numpy()[:i].mean(0))
    close(jmax1(a[:v])[:i].numpy(), a.numpy()[:i].max(1))


def test_variable_argument(jit):
  jf = TinyJit(lambda a, v: (a * v + Tensor(v)).realize())
  a = rand(4, 5)
  run_values(jf, lambda i: jf(a, Variable("i", 1, 10).bind(i)), lambda i, out: close(out.numpy(), a.numpy() * i + i), range(1, 8))


def test_lazy_symbolic_input(jit):
  jf = TinyJit(lambda a: a.sum(1).realize())
  a = rand(3, 10)
  run_values(jf, lambda i: jf(a[:, :Variable("i", 1, 10).bind(i)] * 2), lambda i, out: close(out.numpy(), a.numpy()[:, :i].sum(1) * 2), range(1, 6))


def test_attention_symbolic_length():
  def f(q, k, v): return Tensor.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).realize()
  jf = TinyJit(f)
  q, k, v = rand(2, 1, 4, 8), rand(2, 10, 4, 8), rand(2, 10, 4, 8)
  for i in range(1, 5):
    vi = Variable("i", 1, 10).bind(i)
    close(jf(q, k[:, :vi], v[:, :vi]).numpy(), f(q, k[:, :i], v[:, :i]).numpy())


def test_changed_inputs_raise():
  add = TinyJit(lambda a, b: (a + b).realize())
  a, b = rand(3, 10), rand(3, 10)
  for i in range(1, 4):
    v = Variable("i", 1, 10).bind(i)
    add(a[:, :v], b[:, :v])
  v = Variable("i", 1, 10).bind(7)
  with pytest.raises(JitError, match="inputs changed"): add(rand(3, 7)[:, :v], rand(4, 7)[:, :v])  # a concrete dim changed
  with pytest.raises(JitError, match="inputs changed"): add(rand(3, 12)[:, :v], rand(3, 12)[:, :v])  # the buffer behind the view
  with pytest.raises(JitError, match="inputs changed"): add(a[:, :Variable("j", 1, 10).bind(2)], b[:, :Variable("j", 1, 10).bind(2)])
  with pytest.raises(JitError, match="inputs changed"): add(a[:, :v].cast("float16"), b[:, :v])
  with pytest.raises(JitError, match="bound to both"): add(a[:, :v], b[:, :Variable("i", 1, 10).bind(3)])
  close(add(a[:, :v], b[:, :v])[:, :7].numpy(), (a.numpy() + b.numpy())[:, :7])  # still replays


def test_kv_cache_attention_with_a_bound_position():
  # a decoder step as in tinygrad's llama: write this position's key and value into the cache through a view (no
  # realize), attend over the cache up to it; the position is a bound Variable, so the JIT replays one plan
  D, MAXLEN = 8, 16
  rng = np.random.default_rng(0)
  wq, wk, wv = [Tensor(rng.standard_normal((D, D), dtype=np.float32)).realize() for _ in range(3)]
  cache_k, cache_v = Tensor.zeros(MAXLEN, D).contiguous().realize(), Tensor.zeros(MAXLEN, D).contiguous().realize()

  def step(x: Tensor, pos) -> Tensor:
    q, k, v = x @ wq, x @ wk, x @ wv
    cache_k[pos:pos + 1].assign(k)
    cache_v[pos:pos + 1].assign(v)
    keys, vals = cache_k[0:pos + 1], cache_v[0:pos + 1]
    return ((q @ keys.T / D ** 0.5).softmax(-1) @ vals).realize()
  jstep = TinyJit(step)
  K, V = np.zeros((MAXLEN, D), np.float32), np.zeros((MAXLEN, D), np.float32)
  for i in range(8):
    xn = rng.standard_normal((1, D), dtype=np.float32)
    out = jstep(Tensor(xn), Variable("pos", 0, MAXLEN - 1).bind(i)).numpy()
    q, K[i], V[i] = xn @ wq.numpy(), (xn @ wk.numpy())[0], (xn @ wv.numpy())[0]
    s = q @ K[:i + 1].T / D ** 0.5
    a = np.exp(s - s.max())
    np.testing.assert_allclose(out, (a / a.sum()) @ V[:i + 1], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(cache_k.numpy(), K, rtol=1e-6, atol=1e-6)


def test_an_index_divided_by_a_variable_is_cs_own_division():
  # a view that splits a variable's length (a shrink to 16 * c, reshaped to (16, c)) divides its index by a variable:
  # a nonnegative index by a positive size is C's / and %, not the floor helpers, whose sign tests ran per element
  K = Tensor(np.arange(4 * 128 * 8, dtype=np.float32).reshape(4, 128, 8)).realize()
  for v in (3, 5):
    got = K[:, 0:16 * Variable("c", 1, 8).bind(v)].reshape(4, 16, Variable("c", 1, 8).bind(v), 8).sum(2).numpy()
    close(got, K.numpy()[:, :16 * v].reshape(4, 16, v, 8).sum(2))
  src = list(realize.kernel_cache.values())[-1][1].src
  assert src.count("th_fmod(") + src.count("th_fdiv(") == 2 and " % " in src, src  # the two helpers' definitions only
