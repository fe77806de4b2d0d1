"""Bound Variables: binding, scalar tensors of a variable, symbolic shapes (shrink, slices, reshape, reductions,
creation), one compiled kernel for every value, and the errors for what is not supported."""
import numpy as np
import pytest

from tinyhybrid import Context, Device, Tensor, UOp, Variable, dtypes
from tinyhybrid.engine import realize
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import bound_value

RNG = np.random.default_rng(5)
A_NP = RNG.standard_normal((3, 10)).astype(np.float32)


def vi(i: int, name: str = "i") -> UOp: return Variable(name, 1, 10).bind(i)


def compiled() -> int: return len(Device["CPU"]._cache)


# ** Variable, bind, unbind **

def test_variable_bind_unbind():
  v = Variable("i", 1, 10)
  assert v.op is Ops.DEFINE_VAR and v.arg == ("i", 1, 10) and v.dtype is dtypes.weakint
  assert v is Variable("i", 1, 10)  # interned
  b = v.bind(3)
  assert b.op is Ops.BIND and b.unbind() == (v, 3) and b is v.bind(3)
  assert (b.vmin, b.vmax) == (1, 10)  # a bound variable keeps its range: kernels are compiled for all of it
  assert v.bind(np.int64(4)).unbind()[1] == 4


def test_variable_errors():
  with pytest.raises(ValueError, match="outside the range"): Variable("i", 1, 10).bind(11)
  with pytest.raises(ValueError, match="outside the range"): Variable("i", 1, 10).bind(0)
  with pytest.raises(TypeError, match="takes an int"): Variable("i", 1, 10).bind(2.5)
  with pytest.raises(TypeError, match="only a bound Variable"): Variable("i", 1, 10).unbind()
  with pytest.raises(TypeError, match="only a Variable"): vi(3).bind(4)
  with pytest.raises(TypeError, match="name"): Variable("", 1, 10)
  with pytest.raises(TypeError, match="ints"): Variable("i", 1.0, 10)
  with pytest.raises(TypeError, match="int dtype"): Variable("i", 1, 10, dtypes.float)


# ** a variable as a value **

@pytest.mark.parametrize("i", [1, 4, 9])
def test_variable_as_value(i):
  v = vi(i)
  # weakly typed, as a Python int is (tinygrad's rule): the other operand's int type wins, and a read commits it
  assert Tensor(v).item() == i and Tensor(v).dtype is dtypes.weakint and Tensor(v).shape == ()
  assert (Tensor(v) + Tensor([1], dtype=dtypes.int8)).dtype is dtypes.int8
  assert Tensor(v, dtype="float32").item() == float(i)
  assert Tensor(v * 2 + 1).item() == 2 * i + 1
  a = Tensor(A_NP)
  np.testing.assert_allclose((a + v).numpy(), A_NP + i, rtol=1e-6)
  np.testing.assert_allclose((a * v).numpy(), A_NP * i, rtol=1e-6)
  np.testing.assert_allclose((a - v).numpy(), A_NP - i, rtol=1e-6)
  np.testing.assert_allclose((a / v).numpy(), A_NP / i, rtol=1e-6)
  assert (Tensor([1, 2], dtype="int8") + v).dtype is dtypes.int8  # a weak variable promotes like a Python int
  assert (Tensor([1., 2.]) * v).dtype is dtypes.float32
  assert (Tensor([1, 2]) * v).tolist() == [i, 2 * i]


def test_variable_value_one_kernel_for_all_values():
  a = Tensor(A_NP).realize()
  (a * vi(1)).realize()
  n_sched, n_prog = len(realize.schedule_cache), compiled()
  for i in (2, 3, 7): np.testing.assert_allclose((a * vi(i)).numpy(), A_NP * i, rtol=1e-6)
  assert (len(realize.schedule_cache), compiled()) == (n_sched, n_prog)


def test_unbound_variable_is_an_error():
  v = Variable("i", 1, 10)
  with pytest.raises(RuntimeError, match="unbound"): Tensor(v)  # tinygrad's type and word
  with pytest.raises(RuntimeError, match="unbound"): Tensor(A_NP) + v
  with pytest.raises(ValueError, match="bound"): Tensor(A_NP).shrink(((0, 3), (0, v)))
  with pytest.raises(ValueError, match="bound"): Tensor.ones(3, v)


def test_one_variable_two_values_is_an_error():
  a = Tensor(A_NP)
  with pytest.raises(ValueError, match="bound to both"): (a[:, :vi(2)].sum() + a[:, :vi(3)].sum()).realize()
  with pytest.raises(ValueError, match="named 'i'"): (a + vi(2) + Variable("i", 1, 20).bind(2)).realize()


# ** symbolic shapes **

@pytest.mark.parametrize("i", [1, 3, 10])
def test_shrink_and_slice(i):
  a = Tensor(A_NP)
  for s in (a.shrink(((0, 3), (0, vi(i)))), a[:, :vi(i)]):
    assert s.shape == (3, vi(i))
    out = (s + 1) * 2
    np.testing.assert_allclose(out.reshape(3, i).numpy(), (A_NP[:, :i] + 1) * 2, rtol=1e-6)
    np.testing.assert_allclose(out[:3, :i].numpy(), (A_NP[:, :i] + 1) * 2, rtol=1e-6)
  b = Tensor(RNG.standard_normal((12, 12)).astype(np.float32))
  v = Variable("i", 1, 10).bind(i)
  np.testing.assert_allclose((b[3:5, v:v + 2] + 1).numpy(), b.numpy()[3:5, i:i + 2] + 1, rtol=1e-6)
  np.testing.assert_allclose(b[:v].sum(1)[:i].numpy(), b.numpy()[:i].sum(1), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b[-v:].sum(1)[:i].numpy(), b.numpy()[-i:].sum(1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("i", [1, 4, 10])
def test_reduce_over_symbolic_and_other_axes(i):
  a = Tensor(A_NP)
  s, x = a[:, :vi(i)], A_NP[:, :i]
  np.testing.assert_allclose(s.sum().item(), x.sum(), rtol=1e-5)
  np.testing.assert_allclose(s.sum(1).numpy(), x.sum(1), rtol=1e-5)
  np.testing.assert_allclose(s.sum(0)[:i].numpy(), x.sum(0), rtol=1e-5)
  np.testing.assert_allclose(s.max(1).numpy(), x.max(1))
  np.testing.assert_allclose(s.max(0).reshape(i).numpy(), x.max(0))
  np.testing.assert_allclose(s.mean().item(), x.mean(), rtol=1e-5)
  np.testing.assert_allclose(s.mean(1).numpy(), x.mean(1), rtol=1e-5)
  np.testing.assert_allclose(s.mean(0)[:i].numpy(), x.mean(0), rtol=1e-5)
  if i > 1: np.testing.assert_allclose(s.var(1).numpy(), x.var(1, ddof=1), rtol=1e-4)


def test_reshape_to_and_from_symbolic():
  for i in (2, 5):
    a_np = RNG.standard_normal((3, i)).astype(np.float32)
    t = Tensor(a_np).reshape(3, vi(i))
    assert t.shape == (3, vi(i))
    np.testing.assert_allclose((t * 2).reshape(3, i).numpy(), a_np * 2, rtol=1e-6)
    assert (t * 2).reshape(-1, 3).shape == (vi(i), 3)  # -1 is inferred symbolically: 3*i / 3
    np.testing.assert_allclose((t * 2).reshape(-1, 3)[:i].numpy(), (a_np * 2).reshape(-1, 3), rtol=1e-6)
    np.testing.assert_allclose(((t + 1).reshape(3 * vi(i)))[:3 * i].numpy(), (a_np + 1).reshape(-1), rtol=1e-6)
  with pytest.raises(ValueError, match="cannot reshape"): Tensor(A_NP).reshape(3, vi(4))
  with pytest.raises(ValueError, match="cannot reshape"): Tensor(A_NP)[:, :vi(4)].reshape(3, 5)


def test_symbolic_matmul_cat_pad():
  a, b = Tensor(A_NP), Tensor(RNG.standard_normal((10, 4)).astype(np.float32))
  for i in (1, 6):
    v = vi(i)
    np.testing.assert_allclose((a[:, :v] @ b[:v]).numpy(), A_NP[:, :i] @ b.numpy()[:i], rtol=1e-5, atol=1e-6)
    c = a[:, :v].cat(a[:, :2], dim=1)
    np.testing.assert_allclose(c[:, :i + 2].numpy(), np.concatenate([A_NP[:, :i], A_NP[:, :2]], 1))
    p = a[:, :2].pad(((0, 0), (v, 1)), value=7.0)
    np.testing.assert_allclose(p[:, :i + 3].numpy(), np.pad(A_NP[:, :2], ((0, 0), (i, 1)), constant_values=7.0))


def test_symbolic_creation():
  for i in (2, 7):
    v = vi(i)
    assert Tensor.zeros(3, v).shape == (3, v)
    np.testing.assert_equal((Tensor.ones(v, 4).contiguous() * 3)[:i].numpy(), np.full((i, 4), 3, np.float32))
    np.testing.assert_equal((Tensor.zeros(3, v) + v)[:, :i].numpy(), np.full((3, i), i, np.float32))
    e = Tensor.empty(3, v)
    e.assign(Tensor.full((3, v), 2.5)).realize()
    np.testing.assert_equal(e.reshape(3, i).numpy(), np.full((3, i), 2.5, np.float32))


def test_symbolic_kernels_compile_once():
  a = Tensor(A_NP)
  (a[:, :vi(1)] + 1).sum(1).realize()
  n_sched, n_prog = len(realize.schedule_cache), compiled()
  for i in (2, 5, 10):
    out = (a[:, :vi(i)] + 1).sum(1).realize()
    assert (len(realize.schedule_cache), compiled()) == (n_sched, n_prog)
    np.testing.assert_allclose(out.numpy(), (A_NP[:, :i] + 1).sum(1), rtol=1e-5)


def test_symbolic_kernel_source():
  from tinyhybrid.codegen.lower import lower
  from tinyhybrid.codegen import optimize
  from tinyhybrid.schedule.kernelize import create_schedule, normalize
  from tinyhybrid.schedule.localize import localize
  var_vals: dict = {}
  key, inputs, _ = normalize([(Tensor(A_NP)[:, :vi(4)] * 2).contiguous().uop], var_vals)
  assert var_vals == {Variable("i", 1, 10): 4} and not any(u.op is Ops.BIND for u in key.toposort())
  local, _ = localize(create_schedule(key, len(inputs)).items[0])
  k = optimize(lower(local), None)
  # the loop of the variable's length is not optimized; the fixed-size loop around it is shared by the cores
  assert k.vars == (Variable("i", 1, 10),) and [o.op.name for o in k.opts] == ["THREAD"] and k.outer == A_NP.shape[0]
  src = Device["CPU"].renderer.render(k)
  assert "long long var_i = (long long)args[2];" in src and "< var_i;" in src


def test_symbolic_errors():
  a = Tensor(A_NP)
  with pytest.raises(ValueError, match="symbolic"): a[:, :vi(3)].numpy()
  with pytest.raises(ValueError, match="symbolic"): a[:, :vi(3)].tolist()
  with pytest.raises(ValueError, match="step 1"): a[:, :vi(3):2]
  with pytest.raises(IndexError, match="out of range"): Tensor.ones(3, 2)[:, :vi(3)]
  with pytest.raises(ValueError, match="out of range"): Tensor.ones(3, 2).shrink(((0, 3), (0, vi(3))))
  with pytest.raises(ValueError, match="cannot broadcast"): a[:, :vi(3)] + a[:, :vi(3, "j")]
  # a pad is checked at the value bound (one that is negative only for other values is allowed, as in tinygrad)
  with pytest.raises(ValueError, match=">= 0"): a.pad(((0, 0), (Variable("n", -2, 2).bind(-1), 0)))
  assert bound_value(a.pad(((0, 0), (Variable("n", -2, 2).bind(1), 0))).shape[1]) == A_NP.shape[1] + 1


def test_symbolic_with_debug_and_null():
  with Context(DEBUG=2):
    np.testing.assert_allclose(Tensor(A_NP)[:, :vi(3)].sum(1).numpy(), A_NP[:, :3].sum(1), rtol=1e-5)
  out = (Tensor.ones(3, 10, device="NULL")[:, :vi(3)] + vi(3)).realize()
  assert out.shape == (3, vi(3))


def test_symbolic_kernel_shares_its_fixed_loop_across_cores():
  # attention scores over a cache of variable length: the heads' loop is split across the cores
  from tinyhybrid.engine.realize import kernel_cache
  rng = np.random.default_rng(3)
  qn, kn = rng.standard_normal((8, 1, 64), dtype=np.float32), rng.standard_normal((8, 512, 64), dtype=np.float32)
  q, k = Tensor(qn).realize(), Tensor(kn).realize()
  for n in (1, 77, 512):
    scores = (q @ k[:, :Variable("pos", 1, 512).bind(n)].transpose(1, 2)).contiguous().realize()
    np.testing.assert_allclose(scores[:, :, :n].numpy(), qn @ kn[:, :n].transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
  sym = [kk for kk, _ in kernel_cache.values() if kk.vars and kk.name.startswith("r_8_1_pos_64")]
  assert sym and all(kk.outer == 8 for kk in sym)


def test_variables_in_full_arange_and_split():
  assert Tensor.full((3,), vi(5)).tolist() == [5, 5, 5]
  assert Tensor.arange(0, 10, Variable("step", 1, 3).bind(2))[:5].tolist() == [0, 2, 4, 6, 8]
  assert Tensor.arange(Variable("b", 0, 5).bind(2), Variable("e", 10, 20).bind(14), Variable("s", 1, 3).bind(3))[:4].tolist() == [2, 5, 8, 11]
  with pytest.raises(TypeError, match="known sign"): Tensor.arange(0, 10, Variable("s", -1, 3).bind(2))
  t = Tensor.ones(10, 8).contiguous()[:vi(4), :]
  with pytest.raises(AssertionError): t.chunk(2, dim=0)  # tinygrad's type: a symbolic dimension is not split
  with pytest.raises(AssertionError): t.split(2, dim=0)


def test_an_empty_tensor_may_have_an_unbound_variable_in_its_shape():
  v = Variable("v", 1, 32)
  t = Tensor.empty(2, v, 4)  # a placeholder's shape (tinygrad allows it); work on it needs the variable bound
  assert t.max_shape == (2, 32, 4) and t.max_numel() == 256
  with pytest.raises(ValueError, match="unbound"): Tensor.ones(3, v)

