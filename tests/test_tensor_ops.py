"""Tensor elementwise, reduce and matmul ops against torch: forward values and gradients."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes

RNG = np.random.default_rng(0)


def _pair(shape, dtype=np.float32, low=-2.0, high=2.0, grad=True):
  x = RNG.uniform(low, high, size=shape).astype(dtype)
  t = Tensor(x, requires_grad=grad and np.issubdtype(dtype, np.floating))
  tt = torch.tensor(x, requires_grad=grad and np.issubdtype(dtype, np.floating))
  return t, tt


def _check(ours, theirs, atol=1e-5, rtol=1e-5):
  a = ours.numpy()
  b = theirs.detach().numpy()
  assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"
  np.testing.assert_allclose(a, b, atol=atol, rtol=rtol)


def _check_grad(fn_ours, fn_torch, shapes, atol=1e-4, rtol=1e-4, low=-2.0, high=2.0):
  pairs = [_pair(s, low=low, high=high) for s in shapes]
  out, out_t = fn_ours(*[p[0] for p in pairs]), fn_torch(*[p[1] for p in pairs])
  _check(out, out_t, atol, rtol)
  w = RNG.uniform(-1, 1, size=out_t.shape).astype(np.float32)
  (out * Tensor(w)).sum().backward()
  (out_t * torch.tensor(w)).sum().backward()
  for (t, tt) in pairs:
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), atol=atol, rtol=rtol)


UNARY = [
  ("neg", lambda x: -x, lambda x: -x, {}),
  ("exp", lambda x: x.exp(), lambda x: x.exp(), {}),
  ("log", lambda x: x.log(), lambda x: x.log(), {"low": 0.1}),
  ("sqrt", lambda x: x.sqrt(), lambda x: x.sqrt(), {"low": 0.1}),
  ("sin", lambda x: x.sin(), lambda x: x.sin(), {}),
  ("cos", lambda x: x.cos(), lambda x: x.cos(), {}),
  ("relu", lambda x: x.relu(), lambda x: x.relu(), {}),
  ("sigmoid", lambda x: x.sigmoid(), lambda x: x.sigmoid(), {}),
  ("tanh", lambda x: x.tanh(), lambda x: x.tanh(), {}),
  ("gelu", lambda x: x.gelu(), lambda x: torch.nn.functional.gelu(x, approximate="tanh"), {}),
  ("silu", lambda x: x.silu(), lambda x: torch.nn.functional.silu(x), {}),
  ("abs", lambda x: x.abs(), lambda x: x.abs(), {}),
  ("reciprocal", lambda x: x.reciprocal(), lambda x: x.reciprocal(), {"low": 0.5}),
  ("square", lambda x: x.square(), lambda x: x.square(), {}),
  ("softplus", lambda x: x.softplus(), lambda x: torch.nn.functional.softplus(x), {}),
  ("leaky_relu", lambda x: x.leaky_relu(0.1), lambda x: torch.nn.functional.leaky_relu(x, 0.1), {}),
  ("elu", lambda x: x.elu(), lambda x: torch.nn.functional.elu(x), {}),
  ("asinh", lambda x: x.asinh(), lambda x: x.asinh(), {}),
]


@pytest.mark.parametrize("name,ours,theirs,kw", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, ours, theirs, kw):
  _check_grad(ours, theirs, [(3, 5)], **kw)


BINARY = [
  ("add", lambda a, b: a + b, lambda a, b: a + b),
  ("sub", lambda a, b: a - b, lambda a, b: a - b),
  ("mul", lambda a, b: a * b, lambda a, b: a * b),
  ("div", lambda a, b: a / b, lambda a, b: a / b),
  ("maximum", lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b)),
  ("minimum", lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b)),
  ("where", lambda a, b: (a > b).where(a, b), lambda a, b: torch.where(a > b, a, b)),
]


@pytest.mark.parametrize("name,ours,theirs", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((0, 4), (1, 4))])
def test_binary_broadcast(name, ours, theirs, shapes):
  _check_grad(ours, theirs, list(shapes), low=0.5 if name == "div" else -2.0)


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32])
def test_int_arith_wraps(dt):
  a = RNG.integers(-100 if np.issubdtype(dt, np.signedinteger) else 0, 100, size=(17,)).astype(dt)
  b = RNG.integers(1, 100, size=(17,)).astype(dt)
  ta, tb = Tensor(a), Tensor(b)
  assert ta.dtype is Tensor(a).dtype
  with np.errstate(over="ignore"): want = a * b + a  # numpy wraps like C (torch lacks uint32 arithmetic)
  np.testing.assert_array_equal((ta * tb + ta).numpy(), want)
  np.testing.assert_array_equal((ta // tb).numpy(), np.floor_divide(a, b))
  np.testing.assert_array_equal((ta % tb).numpy(), np.remainder(a, b))
  np.testing.assert_array_equal((ta < tb).numpy(), a < b)


def test_fmod_against_torch_with_infinities_and_zeros():
  inf = float("inf")
  a = np.array([5.5, -5.5, 5.5, -5.5, inf, 3.0, 0.0, -0.0, 7.0, 2.5], np.float32)
  b = np.array([2.0, 2.0, -inf, inf, 3.0, 0.0, 2.0, 2.0, 7.0, -1.5], np.float32)
  np.testing.assert_array_equal(Tensor(a).fmod(Tensor(b)).numpy(), torch.fmod(torch.tensor(a), torch.tensor(b)).numpy())


def test_weak_python_constants_keep_dtype():
  assert (Tensor([1, 2], dtype=dtypes.int8) * 2).dtype is dtypes.int8
  assert (Tensor([1, 2], dtype=dtypes.half) + 1.5).dtype is dtypes.half
  assert (Tensor([1, 2]) * 1.5).dtype is dtypes.float32
  assert (Tensor([1, 2], dtype=dtypes.int8) + Tensor([1, 2], dtype=dtypes.uint8)).dtype is dtypes.int16


@pytest.mark.parametrize("dt", [np.float16, np.float64])
def test_float_dtypes(dt):
  a = RNG.uniform(-3, 3, size=(11,)).astype(dt)
  t = Tensor(a)
  np.testing.assert_allclose((t * t + 1).numpy(), (a * a + 1).astype(dt), rtol=1e-3 if dt == np.float16 else 1e-12)
  np.testing.assert_allclose(t.exp().numpy(), np.exp(a), rtol=5e-3 if dt == np.float16 else 1e-12)


REDUCE = [
  ("sum", lambda x, a: x.sum(a), lambda x, a: x.sum(a) if a is not None else x.sum()),
  ("max", lambda x, a: x.max(a), lambda x, a: x.amax(a) if a is not None else x.max()),
  ("min", lambda x, a: x.min(a), lambda x, a: x.amin(a) if a is not None else x.min()),
  ("mean", lambda x, a: x.mean(a), lambda x, a: x.mean(a) if a is not None else x.mean()),
  ("var", lambda x, a: x.var(a), lambda x, a: x.var(a) if a is not None else x.var()),
  ("std", lambda x, a: x.std(a), lambda x, a: x.std(a) if a is not None else x.std()),
  ("prod", lambda x, a: x.prod(a), lambda x, a: x.prod(a) if a is not None else x.prod()),
  ("logsumexp", lambda x, a: x.logsumexp(a), lambda x, a: x.logsumexp(a if a is not None else (0, 1))),
  ("softmax", lambda x, a: x.softmax(a if a is not None else -1), lambda x, a: x.softmax(a if a is not None else -1)),
  ("log_softmax", lambda x, a: x.log_softmax(a if a is not None else -1), lambda x, a: x.log_softmax(a if a is not None else -1)),
]


@pytest.mark.parametrize("name,ours,theirs", REDUCE, ids=[r[0] for r in REDUCE])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reduce(name, ours, theirs, axis):
  _check_grad(lambda x: ours(x, axis), lambda x: theirs(x, axis), [(4, 6)], low=0.5 if name == "prod" else -2.0)


def test_argmax_argmin_any_all():
  x = RNG.integers(0, 5, size=(4, 6)).astype(np.float32)
  t = Tensor(x)
  np.testing.assert_array_equal(t.argmax(1).numpy(), torch.tensor(x).argmax(1).numpy())
  np.testing.assert_array_equal(t.argmin(0).numpy(), torch.tensor(x).argmin(0).numpy())
  assert t.argmax().item() == int(torch.tensor(x).argmax())
  np.testing.assert_array_equal((t > 3).any(1).numpy(), (x > 3).any(1))
  np.testing.assert_array_equal((t > 0).all(0).numpy(), (x > 0).all(0))


@pytest.mark.parametrize("fn", ["cumsum", "cumprod", "cummax"])
def test_cumulative(fn):
  x = RNG.uniform(0.5, 1.5, size=(3, 5)).astype(np.float32)
  ours = getattr(Tensor(x), fn)(1)
  ours = (ours[0] if fn == "cummax" else ours).numpy()  # cummax gives (values, indices), as in tinygrad and torch
  theirs = getattr(torch.tensor(x), fn)(1)
  np.testing.assert_allclose(ours, (theirs.values if fn == "cummax" else theirs).numpy(), rtol=1e-5)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((4,), (4, 3)), ((2, 3, 4), (4, 2)), ((5,), (5,)), ((2, 1, 3, 4), (3, 4, 2))])
def test_matmul(sa, sb):
  _check_grad(lambda a, b: a @ b, lambda a, b: a @ b, [sa, sb])


def test_losses():
  logits = RNG.standard_normal((5, 7)).astype(np.float32)
  y = RNG.integers(0, 7, size=(5,))
  t = Tensor(logits, requires_grad=True)
  tt = torch.tensor(logits, requires_grad=True)
  loss = t.sparse_categorical_crossentropy(Tensor(y.astype(np.int32)))
  loss_t = torch.nn.functional.cross_entropy(tt, torch.tensor(y))
  np.testing.assert_allclose(loss.item(), loss_t.item(), rtol=1e-5)
  loss.backward(); loss_t.backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), atol=1e-6)
  p = RNG.uniform(0.05, 0.95, size=(6,)).astype(np.float32)
  q = RNG.integers(0, 2, size=(6,)).astype(np.float32)
  np.testing.assert_allclose(Tensor(p).binary_crossentropy(Tensor(q)).item(),
                             torch.nn.functional.binary_cross_entropy(torch.tensor(p), torch.tensor(q)).item(), rtol=1e-5)


def test_scaled_dot_product_attention():
  q, k, v = (RNG.standard_normal((2, 3, 4, 8)).astype(np.float32) for _ in range(3))
  ours = Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v), is_causal=True).numpy()
  theirs = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=True)
  np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-5)


def test_errors_name_op_and_shapes():
  with pytest.raises(ValueError, match="broadcast"): Tensor.ones(3, 4) + Tensor.ones(5)
  with pytest.raises(ValueError, match="reshape"): Tensor.ones(3, 4).reshape(5, 3)
  with pytest.raises(RuntimeError, match="matmul"): Tensor.ones(3, 4) @ Tensor.ones(5, 2)  # as torch and tinygrad raise


def test_realized_values_survive_a_failing_op():
  t = Tensor([1.0, 2.0, 3.0]) * 2
  t.realize()
  with pytest.raises(ValueError): t.reshape(7)
  np.testing.assert_array_equal(t.numpy(), [2.0, 4.0, 6.0])
