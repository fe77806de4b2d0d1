"""tinygrad's function API: UOp.param / Tensor.as_param bodies run by Tensor.call, the `function` decorator (implicit
inputs, methods, nesting, gradients, grad_fxn), and callify. Values against NumPy, gradients against torch."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, UOp, dtypes, function
from tinyhybrid.function import _function


def test_call_runs_a_body_over_params():
  a, b = Tensor.randn(10, 10), Tensor.randn(10, 10)
  body = UOp.param(0, dtypes.float, (10, 10)) * UOp.param(0, dtypes.float, (10, 10)) + UOp.param(1, dtypes.float, (10, 10))
  np.testing.assert_allclose(Tensor.call(a, b, fxn=body).numpy(), a.numpy() ** 2 + b.numpy(), rtol=1e-6)


def test_call_of_a_tensor_body_and_its_gradient_match_torch():
  an, bn = np.random.randn(4, 8).astype(np.float32), np.random.randn(8, 3).astype(np.float32) + 3
  a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
  body = (a.as_param(0) @ b.as_param(1)).exp2() * b.as_param(1).reciprocal().sum(0)
  out = Tensor.call(a, b, fxn=body)
  out.mean().backward()
  ta, tb = torch.tensor(an, requires_grad=True), torch.tensor(bn, requires_grad=True)
  tout = torch.exp2(ta @ tb) * tb.reciprocal().sum(0)
  tout.mean().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5)
  np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_call_grad_fxn_replaces_the_chain_rule():
  a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
  # a deliberately different derivative: the backward must use this one, not the body's
  def grad_fxn(g, call): return (g * 10, g * call.src[1])
  c = Tensor.call(a, b, fxn=a.as_param(0) + b.as_param(1), grad_fxn=grad_fxn)
  (c * Tensor([1., 2., 3.])).sum().backward()
  np.testing.assert_equal(a.grad.numpy(), [10., 20., 30.])
  np.testing.assert_equal(b.grad.numpy(), [1., 2., 3.])


def test_call_sharded_arguments():
  devs = ("CPU:0", "CPU:1")
  an, bn = np.random.randn(10, 4).astype(np.float32), np.random.randn(10, 4).astype(np.float32)
  a, b = Tensor(an).shard(devs, axis=0), Tensor(bn).shard(devs, axis=0)
  c = Tensor.call(a, b, fxn=(a.as_param(0) * b.as_param(1)).sum(axis=0))
  np.testing.assert_allclose(c.numpy(), (an * bn).sum(0), rtol=1e-5)


def test_call_checks_its_arguments():
  body = UOp.param(0, dtypes.float, (4,)) + UOp.param(1, dtypes.float, (4,))
  with pytest.raises(RuntimeError, match="argument 1"): Tensor.call(Tensor.ones(4), fxn=body)
  with pytest.raises(RuntimeError, match="shape"): Tensor.call(Tensor.ones(4), Tensor.ones(5), fxn=body)
  with pytest.raises(RuntimeError, match="int"): Tensor.call(Tensor.ones(4), Tensor.ones(4, dtype=dtypes.int32), fxn=body)
  with pytest.raises(RuntimeError, match="weak"): UOp.param(0, dtypes.weakfloat, (4,))


def test_function_values_methods_and_nesting():
  @function
  def add(a: Tensor, b: Tensor) -> Tensor: return a + b
  np.testing.assert_equal(add(Tensor([1, 2, 3]), Tensor([4, 5, 6])).numpy(), [5, 7, 9])
  x = Tensor([1, 2, 3])
  np.testing.assert_equal(add(x, x).numpy(), [2, 4, 6])

  class Scale:
    def __init__(self): self.w = Tensor([10., 20., 30.]).contiguous().realize()
    @function
    def __call__(self, x: Tensor) -> Tensor: return x * self.w  # self is an argument: its weights are explicit
  s = Scale()
  np.testing.assert_equal(s(Tensor([1., 2., 3.])).numpy(), [10., 40., 90.])
  np.testing.assert_equal(add(s(Tensor([1., 1., 1.])), Tensor([1., 1., 1.])).numpy(), [11., 21., 31.])

  @function
  def pair(a: Tensor, b: Tensor): return a + 1, b * 2
  p, q = pair(Tensor([1., 2.]), Tensor([3., 4.]))
  np.testing.assert_equal(p.numpy(), [2., 3.])
  np.testing.assert_equal(q.numpy(), [6., 8.])


def test_function_implicit_state_is_an_error_unless_allowed():
  w = Tensor([1., 2., 3.]).contiguous().realize()  # state: a realized buffer the function reads but is not given
  def body(x: Tensor) -> Tensor: return x * w
  with pytest.raises(RuntimeError, match=r"has 1 implicit buffer\(s\), but allow_implicit=False"): function(body)(Tensor([1., 1., 1.]))
  np.testing.assert_equal(function(body, allow_implicit=True)(Tensor([4., 5., 6.])).numpy(), [4., 10., 18.])
  # pending work and host data are not state, as in tinygrad
  a = Tensor([1, 2, 3])
  a += 1
  c = Tensor([2, 2, 2]).contiguous()
  np.testing.assert_equal(function(lambda b: a + b + c)(Tensor([10, 20, 30]).realize()).numpy(), [14, 25, 36])


def test_function_gradients_match_torch():
  an, bn = np.random.randn(2, 3).astype(np.float32), np.random.randn(3, 2).astype(np.float32)
  w = Tensor(np.ones((2, 2), np.float32), requires_grad=True).realize()
  @function(allow_implicit=True)
  def f(a: Tensor, b: Tensor) -> Tensor: return (a @ b).relu() * w
  a, b = Tensor(an, requires_grad=True), Tensor(bn, requires_grad=True)
  (f(a, b).contiguous() * 3).sum().backward()
  ta, tb, tw = (torch.tensor(x, requires_grad=True) for x in (an, bn, np.ones((2, 2), np.float32)))
  ((ta @ tb).relu() * tw * 3).sum().backward()
  for ours, theirs in ((a, ta), (b, tb), (w, tw)): np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_function_grad_fxn_and_depth():
  def grad_fxn(g, call): return (g * 0 + 7,)
  @function(grad_fxn=grad_fxn)
  def sq(x: Tensor) -> Tensor: return x * x
  x = Tensor([1., 2.], requires_grad=True)
  sq(x).sum().backward()
  np.testing.assert_equal(x.grad.numpy(), [7., 7.])

  @function
  def bad(x: Tensor) -> Tensor: raise ValueError("inside")
  with pytest.raises(ValueError, match="inside"): bad(Tensor([1.]))
  assert _function.depth == 0
  with pytest.raises(RuntimeError, match="return type"): function(lambda x: 3)(Tensor([1.]))


def test_callify_keeps_values():
  a, b = Tensor([1., 2, 3]), Tensor([4., 5, 6])
  c, d = a + b, a * b
  assert c.callify(d) is c
  assert c.tolist() == [5., 7., 9.] and d.tolist() == [4., 10., 18.]


