"""tinygrad parity of the Variable and symbolic-shape API: ops over symbolic dims against NumPy for several bound values,
a GPT-2 style attention with a symbolic start position against the concrete one (and NumPy), the Variable methods
tinygrad programs use, and the UOp attributes tinygrad's tests read off Tensor.uop."""
from __future__ import annotations

import math
from typing import Optional, Union

import numpy as np
import pytest

from tinyhybrid import Tensor, TinyJit, Variable, dtypes, nn
from tinyhybrid.uop import Ops
from tinyhybrid.dtype import _from_np_dtype
from tinyhybrid.uop.ops import UOp, resolve, smax, smin, srender, sym_infer

RNG = np.random.default_rng(13)
A = RNG.standard_normal((6, 8)).astype(np.float32)
X1 = RNG.standard_normal((1, 2, 12)).astype(np.float32)
W1 = RNG.standard_normal((3, 2, 3)).astype(np.float32)
X2 = RNG.standard_normal((1, 2, 9, 9)).astype(np.float32)
W2 = RNG.standard_normal((2, 2, 2, 2)).astype(np.float32)


def _nan_var(a: np.ndarray, axis: int) -> np.ndarray:
  return a.var(axis, ddof=1) if a.shape[axis] > 1 else np.full(a.shape[:axis] + a.shape[axis + 1:], np.nan, np.float32)


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
  e = np.exp(a - a.max(axis, keepdims=True))
  return e / e.sum(axis, keepdims=True)


def _conv1d(n: int) -> np.ndarray:
  return np.array([[[(X1[0, :, i:i + 3] * W1[o]).sum() for i in range(n - 2)] for o in range(3)]], np.float32)


# name -> (tinyhybrid on (t, v, m): v = n bound in [1, 6], m = n bound in [2, 9]; numpy on (a, n)). A symbolic result is
# cut to its bound shape before it is read.
CASES = {
  "sum0": (lambda t, v, m: t[:v].sum(0), lambda a, n: a[:n].sum(0)),
  "sum_all": (lambda t, v, m: t[:v].sum(), lambda a, n: a[:n].sum()),
  "sum1_keepdim": (lambda t, v, m: t[:, :v].sum(1, keepdim=True), lambda a, n: a[:, :n].sum(1, keepdims=True)),
  "mean0": (lambda t, v, m: t[:v].mean(0), lambda a, n: a[:n].mean(0)),
  "mean1": (lambda t, v, m: t[:, :v].mean(1), lambda a, n: a[:, :n].mean(1)),
  "var1": (lambda t, v, m: t[:, :v].var(1), lambda a, n: _nan_var(a[:, :n], 1)),
  "std0": (lambda t, v, m: t[:v].std(0), lambda a, n: np.sqrt(_nan_var(a[:n], 0))),
  "max1": (lambda t, v, m: t[:, :v].max(1), lambda a, n: a[:, :n].max(1)),
  "min0": (lambda t, v, m: t[:v].min(0), lambda a, n: a[:n].min(0)),
  "argmax1": (lambda t, v, m: t[:, :v].argmax(1), lambda a, n: a[:, :n].argmax(1)),
  "softmax1": (lambda t, v, m: t[:, :v].softmax(1), lambda a, n: _softmax(a[:, :n], 1)),
  "softmax0": (lambda t, v, m: t[:v].softmax(0), lambda a, n: _softmax(a[:n], 0)),
  "log_softmax1": (lambda t, v, m: t[:, :v].log_softmax(1), lambda a, n: np.log(_softmax(a[:, :n], 1))),
  "logsumexp1": (lambda t, v, m: t[:, :v].logsumexp(1), lambda a, n: np.log(np.exp(a[:, :n]).sum(1))),
  "cumsum1": (lambda t, v, m: t[:, :v].cumsum(1), lambda a, n: a[:, :n].cumsum(1)),
  "cat0": (lambda t, v, m: t[:v].cat(t[:2], dim=0), lambda a, n: np.concatenate([a[:n], a[:2]])),
  "cat1_same_var": (lambda t, v, m: t[:, :v].cat(t[:, 1:v + 1], dim=1), lambda a, n: np.concatenate([a[:, :n], a[:, 1:n + 1]], 1)),
  "pad": (lambda t, v, m: t[:, :v].pad(((0, 0), (1, 2))), lambda a, n: np.pad(a[:, :n], ((0, 0), (1, 2)))),
  "pad_value": (lambda t, v, m: t[:v].pad(((2, 0), None), value=1.5), lambda a, n: np.pad(a[:n], ((2, 0), (0, 0)), constant_values=1.5)),
  "pad_to_fixed": (lambda t, v, m: t[:, :v].pad((None, (0, 8 - v))), lambda a, n: np.pad(a[:, :n], ((0, 0), (0, 8 - n)))),
  "shrink_nested": (lambda t, v, m: t[:, :v][:, 1:], lambda a, n: a[:, :n][:, 1:]),
  "shrink_var_start": (lambda t, v, m: t[:, v - 1:v + 2], lambda a, n: a[:, n - 1:n + 2]),
  "negative_slice": (lambda t, v, m: t[:, :v][:, -1], lambda a, n: a[:, :n][:, -1]),
  "reshape_flat": (lambda t, v, m: t[:v].reshape(v * 8), lambda a, n: a[:n].reshape(-1)),
  "reshape_split": (lambda t, v, m: t[:v].reshape(v, 2, 4).sum(1), lambda a, n: a[:n].reshape(n, 2, 4).sum(1)),
  "reshape_infer": (lambda t, v, m: t[:v].reshape(-1, 4), lambda a, n: a[:n].reshape(-1, 4)),
  "expand": (lambda t, v, m: t[:1].expand(v, 8), lambda a, n: np.broadcast_to(a[:1], (n, 8))),
  "permute": (lambda t, v, m: t[:v].permute(1, 0), lambda a, n: a[:n].T),
  "flip": (lambda t, v, m: t[:, :v].flip(1), lambda a, n: a[:, :n][:, ::-1]),
  "matmul_inner": (lambda t, v, m: t[:, :v] @ t[:, :v].T, lambda a, n: a[:, :n] @ a[:, :n].T),
  "matmul_outer": (lambda t, v, m: t[:, :v].T @ t[:, :v], lambda a, n: a[:, :n].T @ a[:, :n]),
  "where": (lambda t, v, m: (t[:v] > 0).where(t[:v], -1.0), lambda a, n: np.where(a[:n] > 0, a[:n], -1.0)),
  "add_variable": (lambda t, v, m: t[:2] + v, lambda a, n: a[:2] + n),
  "mul_variable_sum": (lambda t, v, m: (t[:v] * v).sum(0), lambda a, n: (a[:n] * n).sum(0)),
  "ones": (lambda t, v, m: Tensor.ones(v, 3), lambda a, n: np.ones((n, 3), np.float32)),
  "full_sum": (lambda t, v, m: Tensor.full((2, v), 3.0).sum(1), lambda a, n: np.full(2, 3.0 * n, np.float32)),
  "arange": (lambda t, v, m: Tensor.arange(v), lambda a, n: np.arange(n)),
  "arange_step": (lambda t, v, m: Tensor.arange(1, 2 * v + 1, 2), lambda a, n: np.arange(1, 2 * n + 1, 2)),
  "layernorm": (lambda t, v, m: t[:, :v].layernorm(1),
                lambda a, n: (a[:, :n] - a[:, :n].mean(1, keepdims=True)) / np.sqrt(a[:, :n].var(1, keepdims=True) + 1e-5)),
  "avg_pool": (lambda t, v, m: Tensor(X1)[:, :, :m].avg_pool2d(kernel_size=(2,), stride=2),
               lambda a, n: X1[:, :, :2 * (n // 2)].reshape(1, 2, -1, 2).mean(-1)),
  "max_pool": (lambda t, v, m: Tensor(X1)[:, :, :m].max_pool2d(kernel_size=(2,), stride=2),
               lambda a, n: X1[:, :, :2 * (n // 2)].reshape(1, 2, -1, 2).max(-1)),
  "conv1d": (lambda t, v, m: Tensor(X1)[:, :, :m + 1].conv2d(Tensor(W1)), lambda a, n: _conv1d(n + 1)),
  "conv2d": (lambda t, v, m: Tensor(X2)[:, :, :m, :m].conv2d(Tensor(W2)).sum((2, 3)),
             lambda a, n: np.array([[sum((X2[0, :, i:i + 2, j:j + 2] * W2[o]).sum() for i in range(n - 1) for j in range(n - 1))
                                     for o in range(2)]], np.float32)),
  "bitcast_down": (lambda t, v, m: t[:v].bitcast(dtypes.uint8), lambda a, n: a[:n].view(np.uint8)),
  "bitcast_up": (lambda t, v, m: t[:v].bitcast(dtypes.uint64), lambda a, n: a[:n].view(np.uint64)),
}


def _concrete(t: Tensor, n: int) -> np.ndarray:
  # a symbolic result cut to the shape its variables are bound to (as tinygrad's tests do: out[:i, :j])
  shape = tuple(d if isinstance(d, int) else sym_infer(d, {"v": n, "m": n}) for d in t.shape)
  return (t.shrink(tuple((0, d) for d in shape)) if shape != t.shape else t).numpy()


@pytest.mark.parametrize("name", list(CASES))
def test_symbolic_op_matches_numpy(name: str):
  f, ref = CASES[name]
  t = Tensor(A)
  for n in (2, 3, 5):
    v, m = Variable("v", 1, 6).bind(n), Variable("m", 2, 9).bind(n)
    out = f(t, v, m)
    assert any(not isinstance(d, int) for d in out.shape) or out.shape == np.asarray(ref(A, n)).shape, (name, out.shape)
    got, want = _concrete(out, n), np.asarray(ref(A, n))
    assert got.shape == want.shape, (name, n, got.shape, want.shape)
    if got.dtype.kind in "ui": np.testing.assert_array_equal(got, want, err_msg=f"{name} at n={n}")
    else: np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, equal_nan=True, err_msg=f"{name} at n={n}")


def test_symbolic_shape_is_an_expression_of_the_variable():
  v = Variable("i", 1, 10)
  out = Tensor(A)[:, :v.bind(4)].pad((None, (1, 1))).cat(Tensor(A)[:, :2], dim=1)
  assert out.shape[0] == 6 and sym_infer(out.shape[1], {v.expr: 4}) == 8 and sym_infer(out.shape[1], {"i": 7}) == 11
  assert out.shape[1].vmin == 5 and out.shape[1].vmax == 14


# ** a GPT-2 style attention with a key/value cache, the start position an int or a bound Variable **

MAX_CONTEXT, DIM, HEADS = 16, 16, 2


class _Attention:
  def __init__(self, seed: int):
    Tensor.manual_seed(seed)
    self.c_attn, self.c_proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)

  def __call__(self, x: Tensor, start_pos: Union[Variable, int]) -> Tensor:
    bsz, seqlen, _ = x.shape
    qkv = self.c_attn(x)
    xq, xk, xv = [qkv.shrink((None, None, (i * DIM, (i + 1) * DIM))).reshape(bsz, seqlen, HEADS, DIM // HEADS) for i in range(3)]
    if not hasattr(self, "cache_kv"): self.cache_kv = Tensor.zeros(2, bsz, MAX_CONTEXT, HEADS, DIM // HEADS).contiguous().realize()
    self.cache_kv.shrink((None, None, (start_pos, start_pos + seqlen), None, None)).assign(Tensor.stack(xk, xv)).realize()
    keys = self.cache_kv[0].shrink((None, (0, start_pos + seqlen), None, None))
    values = self.cache_kv[1].shrink((None, (0, start_pos + seqlen), None, None))
    mask = Tensor.full((1, 1, seqlen, seqlen), float("-inf")).triu(1) if seqlen > 1 else None  # the prompt only (start 0)
    out = xq.transpose(1, 2).scaled_dot_product_attention(keys.transpose(1, 2), values.transpose(1, 2), mask)
    return self.c_proj(out.transpose(1, 2).reshape(bsz, seqlen, DIM))

  def numpy(self, xs: np.ndarray) -> np.ndarray:
    """The last position's output over the whole sequence xs (1, T, DIM), recomputed from scratch."""
    w, b = self.c_attn.weight.numpy(), self.c_attn.bias.numpy()
    qkv = xs[0] @ w.T + b
    q, k, v = (qkv[:, i * DIM:(i + 1) * DIM].reshape(-1, HEADS, DIM // HEADS).transpose(1, 0, 2) for i in range(3))
    s = q[:, -1:] @ k.transpose(0, 2, 1) / math.sqrt(DIM // HEADS)
    out = (_softmax(s, -1) @ v).transpose(1, 0, 2).reshape(1, DIM)
    return out @ self.c_proj.weight.numpy().T + self.c_proj.bias.numpy()


@pytest.mark.parametrize("jit", [False, True])
def test_attention_symbolic_start_pos_matches_concrete(jit: bool):
  sym, conc = _Attention(3), _Attention(3)
  step = TinyJit(lambda x, p: sym(x, p).realize()) if jit else (lambda x, p: sym(x, p))
  xs = RNG.standard_normal((1, 3, DIM)).astype(np.float32)
  # the prompt at position 0 (an int, as tinygrad's gpt2 does when start_pos.val == 0), then one token at a time
  p0 = Variable("start_pos", 0, MAX_CONTEXT).bind(0)
  assert p0.val == 0 and not isinstance(p0.val, UOp)
  np.testing.assert_allclose(sym(Tensor(xs), p0.val).numpy(), conc(Tensor(xs), 0).numpy(), atol=1e-5, rtol=1e-5)
  for pos in range(3, 9):
    x = RNG.standard_normal((1, 1, DIM)).astype(np.float32)
    xs = np.concatenate([xs, x], axis=1)
    sp = Variable("start_pos", 1, MAX_CONTEXT).bind(pos)
    assert sp > 0 and sp.val == pos  # a Variable whose min is 1 is provably positive
    got, want = step(Tensor(x), sp).numpy(), conc(Tensor(x), pos).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5, err_msg=f"position {pos}")
    np.testing.assert_allclose(got[0, -1], sym.numpy(xs)[0], atol=1e-4, rtol=1e-4, err_msg=f"position {pos} vs numpy")


@pytest.mark.parametrize("seqlen", [0, 1, 2])
def test_attention_at_position_zero(seqlen: int):
  out = _Attention(5)(Tensor.ones(1, seqlen, DIM), Variable("start_pos", 0, MAX_CONTEXT).bind(0).val)
  assert out.shape == (1, seqlen, DIM) and np.isfinite(out.numpy()).all()


# ** Variable methods **

def test_variable_methods():
  v = Variable("a", 1, 10)
  b = v.bind(3)
  assert v.expr == "a" and b.expr == "a" and b.val == 3 and b.unbind() == (v, 3)
  assert (v.vmin, v.vmax, b.vmin, b.vmax) == (1, 10, 1, 10)
  assert ((v * 2 + 1).vmin, (v * 2 + 1).vmax) == (3, 21)
  assert sym_infer(v * 2 + 1, {"a": 4}) == 9 and sym_infer(v * 2 + 1, {v: 4}) == 9 and sym_infer(7, {}) == 7
  assert (v * 2 + 1).substitute({v: v.const_like(5)}).simplify().val == 11
  assert (v + 0).simplify() is v and (v * 3 // 3).simplify() is v
  assert (v * 2 + v).render(simplify=False) == "((a*2)+a)" and (v * 2 + v).render() == "(a*3)"  # tinygrad simplifies by default
  assert UOp.const(dtypes.int, 4).val == 4
  w = Variable("b", 0, 5)
  assert (v + w * 2).variables() == [v, w] and (b + w.bind(2)).variables() == [v, w]
  e, vals = (b * w.bind(2)).unbind_all()
  assert vals == {v: 3, w: 2} and e.variables() == [v, w] and not any(u.op is Ops.BIND for u in e.toposort())


def test_variable_errors():
  v = Variable("a", 1, 10)
  # tinygrad asserts on these: the errors are AssertionErrors too
  for bad in (lambda: v.bind(11), lambda: v.bind(0), lambda: Variable("x", 5, 1)):
    with pytest.raises(ValueError): bad()
    with pytest.raises(AssertionError): bad()
  for bad in (lambda: v.unbind(), lambda: v.bind(2).bind(2), lambda: v.val, lambda: (v + 1).expr, lambda: v.bind(2.5)):
    with pytest.raises(TypeError): bad()
    with pytest.raises(AssertionError): bad()
  with pytest.raises(TypeError): Variable("", 1, 2)
  with pytest.raises(TypeError): Variable("x", 1.0, 2)


def test_variable_is_a_type():
  # tinygrad programs annotate and check with it: `tokens: Union[Tensor, Variable]`, `isinstance(tokens, Variable)`
  v = Variable("a", 1, 10)
  assert isinstance(v, Variable) and isinstance(v.bind(2), Variable) and isinstance(v * 2, Variable)
  assert not isinstance(3, Variable) and not isinstance(Tensor([1]), Variable)
  assert Union[Tensor, Variable] and Optional[Variable] and (Variable | int)


def test_truth_and_numbers_of_expressions():
  v = Variable("a", 1, 10)
  assert bool(v > 0) is True and bool(v < 1) is False and bool(v.bind(5) >= 1) is True
  with pytest.raises(ValueError): bool(v < 5)  # undecided (tinygrad's); resolve() takes a default
  assert resolve(v < 5) is True and resolve(v < 5, False) is False and resolve(v < 11, False) is True and resolve(False) is False
  assert int((v - v + 4).simplify()) == 4 and int(UOp.const(dtypes.int, 7)) == 7 and float(UOp.const(dtypes.float, 1.5)) == 1.5
  with pytest.raises(ValueError): int(v)
  with pytest.raises(TypeError): int(v.bind(3))  # what a bound value is: .val
  assert smax(1, 3, 2) == 3 and smin([4, 2]) == 2 and smax(v, 20) == 20 and srender(smax(0, v)) == "a" and srender(5) == "5"
  assert smax(v, 3).vmin == 3 and sym_infer(smin(v, 3), {'a': 7}) == 3 and sym_infer(smin(v, 3), {'a': 2}) == 2


# ** the UOp attributes tinygrad's tests read off Tensor.uop **

def test_uop_attributes_of_tensors():
  t = Tensor([[1.0, 2.0], [3.0, 4.0]])
  u = t.uop
  assert u.shape == (2, 2) and u.dtype is dtypes.float and isinstance(u.op, Ops) and isinstance(u.src, tuple)
  assert u.device == "CPU" and u.has_buffer_identity() and u.is_realized and u.base.op is Ops.BUFFER
  assert u.buffer is u.base.buffer and u.buffer.size == 4 and u.size == 4 and u.ndim == 2
  lazy = (t + 1).uop
  assert not lazy.is_realized and lazy.base is lazy and not lazy.has_buffer_identity() and lazy.device == "CPU"
  view = t.T.uop
  assert view.base.op is Ops.BUFFER and view.is_realized and view.shape == (2, 2)
  with pytest.raises(RuntimeError): view.buffer  # a permuted view is not the buffer's memory in order
  with pytest.raises(RuntimeError): lazy.buffer
  r = (t + 1).realize()
  assert r.uop.is_realized and r.uop.base.buffer is not t.uop.base.buffer
  c = t.clone()  # lazy, as in tinygrad: its own memory once realized
  assert not c.uop.has_buffer_identity() and c.realize().uop.has_buffer_identity() and c.uop.base.buffer is not t.uop.base.buffer
  np.testing.assert_equal(c.numpy(), t.numpy())
  assert Tensor.empty(0, 3).uop.shape == (0, 3) and Tensor(2.5).uop.shape == ()


def test_deviceless_const():
  t = Tensor(UOp.const(dtypes.float, 2.0))
  assert t.uop.device is None and t.device is None and "<UOp None" in repr(t)
  u = t.uop
  assert t.realize().uop is u  # nothing to compute, nowhere to put it
  np.testing.assert_equal(t.numpy(), 2.0)
  assert t.item() == 2.0 and (t * 3).device == "CPU" and (t * 3).item() == 6.0
  np.testing.assert_equal((t + Tensor([1.0, 2.0])).numpy(), [3.0, 4.0])
  np.testing.assert_equal((Tensor([1.0, 2.0]) * t).numpy(), [2.0, 4.0])
  assert (t + Tensor([1.0], device="NULL")).device == "NULL"
  c = t.clone().realize()
  assert c.uop.has_buffer_identity() and c.device == "CPU" and c.numpy() == 2.0
  assert t.clone(device="CPU").device == "CPU" and Tensor(UOp.const(dtypes.int, 3), device="CPU").device == "CPU"


# ** bitcast between item sizes (tinygrad rescales the last axis) **

@pytest.mark.parametrize("src,dst", [(np.float32, np.uint8), (np.float32, np.int8), (np.float32, np.float16), (np.float32, np.float64),
                                     (np.float32, np.uint64), (np.uint8, np.float32), (np.uint8, np.int64), (np.float16, np.float64),
                                     (np.int16, np.int32), (np.float64, np.uint16)])
def test_bitcast_item_sizes(src, dst):
  a = RNG.standard_normal((3, 8)).astype(np.float32).view(np.uint8).reshape(3, 32)[:, :16].copy().view(src)
  got = Tensor(a).bitcast(_to_dtype(dst)).numpy()
  want = a.view(dst)
  assert got.shape == want.shape
  np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
  # a non-contiguous view bitcasts its values in order, as after .contiguous()
  got = Tensor(a)[::-2].bitcast(_to_dtype(dst)).numpy()
  np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(a[::-2]).view(dst).view(np.uint8))


def test_bitcast_item_size_errors():
  with pytest.raises(RuntimeError): Tensor(np.ones((2, 3), np.float32)).bitcast(dtypes.uint64)  # 12 bytes a row, not whole 8s
  with pytest.raises(RuntimeError): Tensor(1.0).bitcast(dtypes.uint8)  # 0-d: no last axis to rescale
  assert Tensor.empty(0, 4).bitcast(dtypes.uint64).shape == (0, 2) and Tensor.empty(3, 0).bitcast(dtypes.uint8).shape == (3, 0)
  with pytest.raises(RuntimeError): Tensor(A)[:, :Variable("i", 1, 8).bind(3)].bitcast(dtypes.uint64)  # a symbolic row, may not fit


def test_symbolic_dropout_and_rand_are_errors():
  v = Variable("i", 1, 10).bind(3)
  with pytest.raises(ValueError): Tensor.rand(3, v)
  with Tensor.train():
    with pytest.raises(ValueError): Tensor(A)[:, :v].dropout(0.5)
  # not training: dropout_p is ignored, so the result is the plain attention
  q = Tensor(A).reshape(1, 1, 6, 8)
  out = q[:, :, :v].scaled_dot_product_attention(q[:, :, :v], q[:, :, :v], dropout_p=0.5)[:, :, :3].numpy()
  np.testing.assert_allclose(out, q[:, :, :3].scaled_dot_product_attention(q[:, :, :3], q[:, :, :3]).numpy(), atol=1e-6, rtol=1e-6)


def _to_dtype(np_type: type) -> dtypes:
  return _from_np_dtype(np_type)
