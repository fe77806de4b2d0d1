"""Elementwise ops against torch on edge values (0, -0, +-inf, nan, large, tiny, the kinks), forward and backward, for
every float dtype the CPU has (float16, bfloat16, float32, float64); 0-d and zero-size shapes; the exceptions. NaN and
inf must sit exactly where torch's are, but for the few places listed where torch itself is NaN and ours is the limit."""
import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinyhybrid import Tensor, dtypes

inf, nan = math.inf, math.nan
DTYPES = {"float16": (dtypes.float16, torch.float16), "bfloat16": (dtypes.bfloat16, torch.bfloat16),
          "float32": (dtypes.float32, torch.float32), "float64": (dtypes.float64, torch.float64)}
# the kinks of relu, hardtanh, hardsigmoid, hardswish, clip (+-1, +-3, 6) and values where exp over- and underflows
EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 6.0, 2.5, -1.7, 30.0, -30.0, 100.0, -100.0, 400.0, -400.0,
        1e4, -1e4, 1e30, -1e30, 1e-30, -1e-30, inf, -inf, nan]
# float64: torch itself computes some of its float64 activations with float32 constants (hardsigmoid's 1/6, celu's scale)
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (2e-6, 1e-5), "float64": (1e-8, 1e-7)}


def _pair(vals, dt: str, grad=True):
  tdt = DTYPES[dt][1]
  tt = torch.tensor(vals, dtype=tdt, requires_grad=grad)
  return Tensor(tt.detach().double().numpy(), dtype=DTYPES[dt][0], requires_grad=grad), tt


def _np(t) -> np.ndarray: return t.detach().double().numpy() if isinstance(t, torch.Tensor) else t.numpy().astype(np.float64)


def _batch(fns: dict, inputs: tuple[Tensor, ...]) -> dict:
  """name -> (output, gradients of its sum with respect to inputs), or the exception building them raised. All outputs
  realize together, then all gradients: one build of all their kernels (a cold cache compiles them in one go)."""
  res: dict = {}
  for name, f in fns.items():
    try: res[name] = (out := f(*inputs)), out.sum().gradient(*inputs)
    except Exception as e: res[name] = e  # raised again by that op's own test
  done = [r for r in res.values() if not isinstance(r, Exception)]
  for ts in ([o for o, _ in done], [g for _, gs in done for g in gs]):
    if ts: ts[0].realize(*ts[1:])
  return res


def _ours(res: dict, name: str) -> tuple:
  if isinstance(r := res[name], Exception): raise r
  return r


def _close(ours: np.ndarray, theirs: np.ndarray, dt: str, what: str, loose: float = 1.0, nan_ok=None):
  """Values within the dtype's tolerance (scaled by loose), infinities and NaNs in the same places. nan_ok: where torch
  may have NaN and we a number (never the other way round)."""
  assert ours.shape == theirs.shape, f"{what}: shape {ours.shape} != torch {theirs.shape}"
  theirs = theirs.copy()
  if nan_ok is not None: theirs[nan_ok & np.isnan(theirs)] = ours[nan_ok & np.isnan(theirs)]
  atol, rtol = (x * loose for x in TOL[dt])
  np.testing.assert_allclose(ours, theirs, atol=atol, rtol=rtol, err_msg=what)


UNARY = {  # name: (ours, torch)
  "neg": (lambda x: -x, lambda x: -x),
  "reciprocal": (lambda x: x.reciprocal(), lambda x: x.reciprocal()),
  "sqrt": (lambda x: x.sqrt(), torch.sqrt),
  "rsqrt": (lambda x: x.rsqrt(), torch.rsqrt),
  "exp": (lambda x: x.exp(), torch.exp),
  "exp2": (lambda x: x.exp2(), torch.exp2),
  "log": (lambda x: x.log(), torch.log),
  "log2": (lambda x: x.log2(), torch.log2),
  "log10": (lambda x: x.log10(), torch.log10),
  "sin": (lambda x: x.sin(), torch.sin),
  "cos": (lambda x: x.cos(), torch.cos),
  "trunc": (lambda x: x.trunc(), torch.trunc),
  "floor": (lambda x: x.floor(), torch.floor),
  "ceil": (lambda x: x.ceil(), torch.ceil),
  "round": (lambda x: x.round(), torch.round),
  "abs": (lambda x: x.abs(), torch.abs),
  "sign": (lambda x: x.sign(), torch.sign),
  "square": (lambda x: x.square(), torch.square),
  "relu": (lambda x: x.relu(), torch.relu),
  "sigmoid": (lambda x: x.sigmoid(), torch.sigmoid),
  "logsigmoid": (lambda x: x.logsigmoid(), F.logsigmoid),
  "hardsigmoid": (lambda x: x.hardsigmoid(), F.hardsigmoid),
  "tanh": (lambda x: x.tanh(), torch.tanh),
  "sinh": (lambda x: x.sinh(), torch.sinh),
  "cosh": (lambda x: x.cosh(), torch.cosh),
  "atanh": (lambda x: x.atanh(), torch.atanh),
  "asinh": (lambda x: x.asinh(), torch.asinh),
  "acosh": (lambda x: x.acosh(), torch.acosh),
  "asin": (lambda x: x.asin(), torch.asin),
  "acos": (lambda x: x.acos(), torch.acos),
  "atan": (lambda x: x.atan(), torch.atan),
  "erf": (lambda x: x.erf(), torch.erf),
  "gelu_tanh": (lambda x: x.gelu(), lambda x: F.gelu(x, approximate="tanh")),
  "gelu_erf": (lambda x: x.gelu(approximate="none"), F.gelu),
  "quick_gelu": (lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x)),
  "silu": (lambda x: x.silu(), F.silu),
  "relu6": (lambda x: x.relu6(), F.relu6),
  "hardswish": (lambda x: x.hardswish(), F.hardswish),
  "hardtanh": (lambda x: x.hardtanh(-1, 3), lambda x: F.hardtanh(x, -1, 3)),
  "leaky_relu": (lambda x: x.leaky_relu(0.1), lambda x: F.leaky_relu(x, 0.1)),
  "elu": (lambda x: x.elu(0.7), lambda x: F.elu(x, 0.7)),
  "celu": (lambda x: x.celu(0.7), lambda x: F.celu(x, 0.7)),
  "selu": (lambda x: x.selu(), lambda x: 1.0507 * F.elu(x, 1.67326)),  # tinygrad's rounded constants
  "softplus": (lambda x: x.softplus(), F.softplus),
  "softplus_beta": (lambda x: x.softplus(beta=3), lambda x: F.softplus(x, beta=3)),
  "mish": (lambda x: x.mish(), F.mish),
  "softsign": (lambda x: x.softsign(), F.softsign),
  "clip": (lambda x: x.clip(-1, 3), lambda x: x.clip(-1, 3)),
  "clip_min_gt_max": (lambda x: x.clip(3, -1), lambda x: x.clip(3, -1)),
  "clamp_min": (lambda x: x.clamp(min_=-0.5), lambda x: x.clamp(min=-0.5)),
  "pow_0": (lambda x: x ** 0, lambda x: x ** 0),
  "pow_1": (lambda x: x ** 1, lambda x: x ** 1),
  "pow_2": (lambda x: x ** 2, lambda x: x ** 2),
  "pow_3": (lambda x: x ** 3, lambda x: x ** 3),
  "pow_-1": (lambda x: x ** -1, lambda x: x ** -1),
  "pow_-2": (lambda x: x ** -2, lambda x: x ** -2),
  "pow_0.5": (lambda x: x ** 0.5, lambda x: x ** 0.5),
  "pow_-0.3": (lambda x: x ** -0.3, lambda x: x ** -0.3),
  "pow_inf": (lambda x: x ** inf, lambda x: x ** inf),
  "rpow_2": (lambda x: 2.0 ** x, lambda x: 2.0 ** x),
  "rpow_0": (lambda x: 0.0 ** x, lambda x: 0.0 ** x),
  "rpow_neg": (lambda x: (-2.0) ** x, lambda x: (-2.0) ** x),
  "rpow_1": (lambda x: 1.0 ** x, lambda x: 1.0 ** x),
}
# torch's vectorized float32/bfloat16 erf-gelu is NaN at +inf (x * 0.5 * (1 + erf(x / sqrt 2)) is inf there, as torch's
# float64 says)
FWD_NAN_OK = {"gelu_erf"}
LOOSE = {"erf": 200, "gelu_erf": 200}  # erf is Abramowitz-Stegun 7.1.26: 1.5e-7 absolute


# torch's float16 x ** 0.5 is C's pow (pow(-inf, 0.5) is inf), its float32 and bfloat16 one is sqrt (NaN): ours is sqrt;
# torch's float16 asinh' and acosh' square x in half (0 past 256); ours work in float32, as their forwards do
TORCH_VIA_FLOAT32 = {("pow_0.5", "float16"), ("asinh", "float16"), ("acosh", "float16")}


@functools.cache
def _unary_edge(dt: str) -> dict: return _batch({n: f for n, (f, _) in UNARY.items()}, (_pair(EDGE, dt)[0],))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_edge(name, dt):
  (_, torch_fn), loose = UNARY[name], LOOSE.get(name, 1)
  _, tx = _pair(EDGE, dt)
  if (name, dt) in TORCH_VIA_FLOAT32: torch_fn = (lambda f: lambda t: f(t.float()).to(t.dtype))(torch_fn)
  want = torch_fn(tx)
  out, (g,) = _ours(_unary_edge(dt), name)
  assert out.dtype is DTYPES[dt][0] and g.dtype is DTYPES[dt][0], f"{name}: dtypes {out.dtype} and {g.dtype}"
  _close(_np(out), _np(want), dt, f"{name} forward", loose, np.ones(len(EDGE), bool) if name in FWD_NAN_OK else None)
  (gt,) = torch.autograd.grad(want.sum(), tx)
  _close(_np(g), _np(gt), dt, f"{name} gradient", loose)


PAIR_VALS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 3.0, 1e30, -1e30, inf, -inf, nan]
A_VALS, B_VALS = [a for a in PAIR_VALS for _ in PAIR_VALS], [b for _ in PAIR_VALS for b in PAIR_VALS]

BINARY = {
  "add": (lambda a, b: a + b, lambda a, b: a + b),
  "sub": (lambda a, b: a - b, lambda a, b: a - b),
  "mul": (lambda a, b: a * b, lambda a, b: a * b),
  "div": (lambda a, b: a / b, lambda a, b: a / b),
  "pow": (lambda a, b: a ** b, lambda a, b: a ** b),
  "maximum": (lambda a, b: a.maximum(b), torch.maximum),
  "minimum": (lambda a, b: a.minimum(b), torch.minimum),
  "copysign": (lambda a, b: a.copysign(b), torch.copysign),
  "where": (lambda a, b: (a < b).where(a, b), lambda a, b: torch.where(a < b, a, b)),
  "ne_where": (lambda a, b: (a != b).where(a * b, a + b), lambda a, b: torch.where(a != b, a * b, a + b)),
  "lerp": (lambda a, b: a.lerp(b, 0.25), lambda a, b: torch.lerp(a, b, 0.25)),
  "logaddexp": (lambda a, b: a.logaddexp(b), torch.logaddexp),
  "mod": (lambda a, b: a % b, torch.remainder),
  "fmod": (lambda a, b: a.fmod(b), torch.fmod),
  "clip_tensor": (lambda a, b: a.clip(b, 2.0), lambda a, b: a.clip(b, torch.full_like(b, 2.0))),
}


# a - b * trunc(a / b) rounds where a / b has more digits than the mantissa (1e30 % 3): C's fmod is exact there
_HUGE_QUOTIENT = (np.abs(np.array(A_VALS)) == 1e30) & (np.abs(np.array(B_VALS)) < 1e30)
SKIP = {"mod": _HUGE_QUOTIENT, "fmod": _HUGE_QUOTIENT}


@functools.cache
def _binary_edge(dt: str) -> dict:
  return _batch({n: f for n, (f, _) in BINARY.items()}, (_pair(A_VALS, dt)[0], _pair(B_VALS, dt)[0]))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_edge(name, dt):
  torch_fn = BINARY[name][1]
  keep = ~SKIP.get(name, np.zeros(len(A_VALS), bool))
  (_, ta), (_, tb) = _pair(A_VALS, dt), _pair(B_VALS, dt)
  want, (out, grads) = torch_fn(ta, tb), _ours(_binary_edge(dt), name)
  assert out.dtype is DTYPES[dt][0]
  _close(_np(out)[keep], _np(want)[keep], dt, f"{name} forward")
  ga, gb = torch.autograd.grad(want.sum(), (ta, tb), allow_unused=True)
  for mine, theirs, what in zip(grads, (ga, gb), "ab"):
    _close(_np(mine)[keep], (np.zeros(len(A_VALS)) if theirs is None else _np(theirs))[keep], dt, f"{name} gradient of {what}")


CMP = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
       "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@pytest.mark.parametrize("dt", DTYPES)
def test_comparisons_and_predicates_edge(dt):
  # NaN compares false but for != (so a <= b is not the negation of a > b), -0.0 == 0.0
  (a, ta), (b, tb) = _pair(A_VALS, dt, grad=False), _pair(B_VALS, dt, grad=False)
  cases = {**{name: (fn(a, b), fn(ta, tb)) for name, fn in CMP.items()},
           **{f"{name} 0.5": (fn(a, 0.5), fn(ta, 0.5)) for name, fn in CMP.items()},
           **{name: (getattr(a, name)(), getattr(torch, name)(ta)) for name in ("isnan", "isinf", "isfinite", "logical_not")}}
  outs = [o for o, _ in cases.values()]
  outs[0].realize(*outs[1:])
  for name, (out, want) in cases.items():
    assert out.dtype is dtypes.bool, name
    np.testing.assert_array_equal(out.numpy(), want.numpy(), err_msg=name)


def test_pow_const_exponents_gradient_at_special_bases():
  # tinygrad's test_pow_const_direct: 0 ** c, inf ** c, -inf ** c with their torch gradients
  for x in [-inf, -2.0, -0.0, 0.0, 1.0, inf]:
    for c in [-2, -1, 0, 0.3, 1, 2, 3, -0.5]:
      t, tt = Tensor([x], requires_grad=True), torch.tensor([x], requires_grad=True)
      (tt ** c).sum().backward()
      ours = (t ** c).sum().gradient(t)[0].item()
      theirs = tt.grad.item()
      assert (math.isnan(ours) and math.isnan(theirs)) or ours == pytest.approx(theirs, rel=1e-6), f"{x} ** {c}: {ours} != {theirs}"


def test_pow_ints():
  x = Tensor([-3, -2, -1, 0, 1, 2, 3], dtype=dtypes.int32)
  tx = torch.tensor([-3, -2, -1, 0, 1, 2, 3], dtype=torch.int32)
  for c in [0, 1, 2, 7, 29]:
    assert (x ** c).dtype is dtypes.int32
    np.testing.assert_array_equal((x ** c).numpy(), (tx ** c).numpy())
  e = torch.tensor([0, 3, 2, 5, 4, 31, 1], dtype=torch.int32)
  np.testing.assert_array_equal((x ** Tensor(e.numpy())).numpy(), (tx ** e).numpy())
  np.testing.assert_array_equal((2 ** Tensor(e.numpy())).numpy(), (2 ** e).numpy())
  # negative tensor exponents: only 1 and -1 have an integer power
  np.testing.assert_array_equal((x ** Tensor([-1] * 7, dtype=dtypes.int32)).numpy(), [0, 0, -1, 0, 1, 0, 0])
  with pytest.raises(RuntimeError): x ** -2
  assert (x ** 0.5).dtype is dtypes.float32


def test_clip_gradient_at_bounds_and_tie():
  # torch: clamp passes the gradient at its bounds, hardtanh does not, minimum/maximum split a tie in half
  x, tx = _pair([-2.5, -1.0, 0.0, 1.5, 2.0], "float32")
  np.testing.assert_array_equal(x.clip(-1.0, 1.5).sum().gradient(x)[0].numpy(), [0, 1, 1, 1, 0])
  np.testing.assert_array_equal(x.hardtanh(-1.0, 1.5).sum().gradient(x)[0].numpy(), [0, 0, 1, 0, 0])
  np.testing.assert_array_equal(x.minimum(0.0).sum().gradient(x)[0].numpy(), [1, 1, 0.5, 0, 0])
  np.testing.assert_array_equal(x.maximum(0.0).sum().gradient(x)[0].numpy(), [0, 0, 0.5, 1, 1])
  with pytest.raises(RuntimeError): x.clip(None, None)


@pytest.mark.parametrize("vals", [[2.0, 0.0, 3.0, 4.0], [0.0, 5.0, 0.0, 2.0], [1.5, -2.0, 3.0, -0.5], [0.0]])
def test_prod_gradient_with_zeros(vals):
  x, tx = _pair(vals, "float32")
  (gt,) = torch.autograd.grad(tx.prod(), tx)
  np.testing.assert_allclose(x.prod().gradient(x)[0].numpy(), gt.numpy(), rtol=1e-6)
  y, ty = _pair([vals, vals[::-1]], "float32")
  (gt,) = torch.autograd.grad(ty.prod(1).sum(), ty)
  np.testing.assert_allclose(y.prod(1).sum().gradient(y)[0].numpy(), gt.numpy(), rtol=1e-6)


@pytest.mark.parametrize("vals", [[[1.0, 3.0, 3.0], [-2.0, -2.0, 0.0]], [[1.0, nan, 3.0], [nan, -inf, nan]]], ids=["ties", "nan"])
def test_min_max_reduce_gradient_splits_ties(vals):
  x, tx = _pair(vals, "float32")
  cases = [(x.max(), tx.max()), (x.min(), tx.min())]
  # along an axis torch's amax/amin gradient is NaN everywhere once a NaN is the max (its full max() spreads it over the
  # NaNs, as ours does on every axis)
  if not np.isnan(vals).any(): cases += [(x.max(1).sum(), tx.amax(1).sum()), (x.min(0).sum(), tx.amin(0).sum())]
  for ours, theirs in cases: np.testing.assert_allclose(ours.gradient(x)[0].numpy(), torch.autograd.grad(theirs, tx)[0].numpy())


def test_gradient_rules_survive_realize():
  # a function's rule is in its node's tag: reading the value first (realize turns the graph into AFTER(buffer, graph))
  # or realizing the input under it (a substitution rebuilds the graph above) keeps torch's gradient, no NaN
  x = Tensor([400.0, -400.0, 0.0], requires_grad=True)
  y = x.sigmoid()
  y.numpy()
  np.testing.assert_array_equal(y.sum().gradient(x)[0].numpy(), [0, 0, 0.25])
  z = x * 2
  t = z.tanh()
  z.realize()
  np.testing.assert_array_equal(t.sum().gradient(x)[0].numpy(), [0, 0, 2])
  t.sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 2])


def test_comparisons_in_the_graph_take_no_gradient():
  # a graph with <, != and == runs backward; a target that only comparisons reach gets zeros (tinygrad's behaviour)
  a, b = Tensor([1.0, 2.0, 3.0], requires_grad=True), Tensor([3.0, 2.0, 1.0], requires_grad=True)
  loss = ((a < b).where(a, b * 2) + (a != b).float() + (a == 2).float() * a).sum()
  loss.backward()
  np.testing.assert_array_equal(a.grad.numpy(), [1, 1, 0])
  np.testing.assert_array_equal(b.grad.numpy(), [0, 2, 2])
  c = Tensor([1.0, -2.0], requires_grad=True)
  (c > 0).float().sum().backward()
  np.testing.assert_array_equal(c.grad.numpy(), [0, 0])
  np.testing.assert_array_equal(c.sign().sum().gradient(c)[0].numpy(), [0, 0])


def test_half_matmul_backward_accumulates_in_float32():
  rng = np.random.default_rng(0)
  x, y = rng.uniform(-2, 2, (64, 64)).astype(np.float32), rng.uniform(-2, 2, (64, 64)).astype(np.float32)
  tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
  gx, gy = torch.autograd.grad(tx.half().matmul(ty.half()).sum(), (tx, ty))
  a, b = Tensor(x), Tensor(y)
  oa, ob = a.half().matmul(b.half()).sum().gradient(a, b)
  np.testing.assert_allclose(oa.numpy(), gx.numpy(), rtol=5e-3, atol=5e-3)
  np.testing.assert_allclose(ob.numpy(), gy.numpy(), rtol=5e-3, atol=5e-3)


def test_custom_gradient_steps_aside_for_a_target_inside():
  # the gradient of sigmoid(x) with respect to an inner node of sigmoid's own graph still comes out right
  x = Tensor([0.3, -1.2], requires_grad=True)
  s = x.sigmoid()
  (gx,) = s.sum().gradient(x)
  tx = torch.tensor([0.3, -1.2], requires_grad=True)
  np.testing.assert_allclose(gx.numpy(), torch.autograd.grad(torch.sigmoid(tx).sum(), tx)[0].numpy(), rtol=1e-6)




SHAPES = {"0d": (), "empty": (0,), "empty3d": (2, 0, 3)}
# 0.7 is inside every unary op's domain but acosh's
_SHAPE_VALS = {"acosh": 1.7}


@functools.cache
def _unary_shaped(shape: str) -> dict:
  res: dict = {}
  for v in {0.7, *_SHAPE_VALS.values()}:
    x = Tensor(np.full(SHAPES[shape], v, np.float32), requires_grad=True)
    res.update(_batch({n: f for n, (f, _) in UNARY.items() if _SHAPE_VALS.get(n, 0.7) == v}, (x,)))
  return res


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_0d_and_zero_size(name, shape):
  vals = np.full(SHAPES[shape], _SHAPE_VALS.get(name, 0.7), np.float32)
  tx = torch.tensor(vals, requires_grad=True)
  want, (out, (g,)) = UNARY[name][1](tx), _ours(_unary_shaped(shape), name)
  assert out.shape == tuple(want.shape) and g.shape == SHAPES[shape]
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(g.numpy(), torch.autograd.grad(want.sum(), tx)[0].numpy(), rtol=1e-5, atol=1e-6)


@functools.cache
def _binary_shaped(shape: str) -> dict:
  av, bv = np.full(SHAPES[shape], 1.3, np.float32), np.full(SHAPES[shape], -0.4, np.float32)
  return _batch({n: f for n, (f, _) in BINARY.items()}, (Tensor(av, requires_grad=True), Tensor(bv, requires_grad=True)))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", BINARY)
def test_binary_0d_and_zero_size(name, shape):
  av, bv = np.full(SHAPES[shape], 1.3, np.float32), np.full(SHAPES[shape], -0.4, np.float32)
  ta, tb = torch.tensor(av, requires_grad=True), torch.tensor(bv, requires_grad=True)
  want, (out, grads) = BINARY[name][1](ta, tb), _ours(_binary_shaped(shape), name)
  assert out.shape == tuple(want.shape)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
  for mine, theirs in zip(grads, torch.autograd.grad(want.sum(), (ta, tb), allow_unused=True)):
    assert mine.shape == SHAPES[shape]
    np.testing.assert_allclose(mine.numpy(), np.zeros(SHAPES[shape]) if theirs is None else theirs.numpy(), rtol=1e-5, atol=1e-6)


# ** elementwise semantics: ints, bitwise ops, division modes, isclose **

INTS = np.array([-7, -5, -4, -1, 0, 1, 3, 4, 5, 7], np.int32)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_rounding_modes(mode):
  for num, den in ((INTS, np.array([2, -3, 3, 5, -2, 2, -4, 3, 1, -1], np.int32)),
                   (INTS.astype(np.float32), np.full(10, -2.5, np.float32))):
    want = torch.div(torch.tensor(num), torch.tensor(den), rounding_mode=mode)
    out = Tensor(num).div(Tensor(den), rounding_mode=mode)
    assert out.dtype is {torch.int32: dtypes.int32, torch.float32: dtypes.float32}[want.dtype]
    # true division is a * (1/b), as in tinygrad: within an ulp of torch's a / b
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=0 if mode else 2e-7)
  with pytest.raises(RuntimeError): Tensor(INTS).div(2, rounding_mode="typo")


def test_idiv_truncates_and_floordiv_floors():
  t = Tensor(INTS)
  np.testing.assert_array_equal(t.idiv(4).numpy(), torch.div(torch.tensor(INTS), 4, rounding_mode="trunc").numpy())
  np.testing.assert_array_equal((t // 4).numpy(), INTS // 4)
  np.testing.assert_array_equal((9 // Tensor([2, -2, 4])).numpy(), [4, -5, 2])
  assert Tensor(-1).contiguous().idiv(4).item() == 0 and Tensor(-5).idiv(2).item() == -2


@pytest.mark.parametrize("op", ["&", "|", "^"])
def test_bitwise_ops(op):
  a, b = np.array([1, -8, 6, 0x1337], np.int32), np.array([3, 5, -1, 7], np.int32)
  fn = {"&": lambda x, y: x & y, "|": lambda x, y: x | y, "^": lambda x, y: x ^ y}[op]
  np.testing.assert_array_equal(fn(Tensor(a), Tensor(b)).numpy(), fn(a, b))
  np.testing.assert_array_equal(fn(Tensor(a), 0x1337).numpy(), fn(a, 0x1337))
  np.testing.assert_array_equal(fn(0x1337, Tensor(a)).numpy(), fn(0x1337, a))
  tb, fb = np.array([True, True, False, False]), np.array([True, False, True, False])
  np.testing.assert_array_equal(fn(Tensor(tb), Tensor(fb)).numpy(), fn(tb, fb))
  # floats: RuntimeError, as torch raises (and an int with a float constant is a float)
  for x, y in ((Tensor([1.0, 2.0]), Tensor([1.0, 2.0])), (Tensor([1, 2]), 1.5)):
    with pytest.raises(RuntimeError): fn(x, y)
    with pytest.raises(RuntimeError): fn(torch.tensor(x.numpy()), y if isinstance(y, float) else torch.tensor(y.numpy()))


def test_bitwise_not_and_shifts():
  a = np.array([0, 1, -8, 255, 2 ** 31 - 1], np.int32)
  np.testing.assert_array_equal((~Tensor(a)).numpy(), ~a)
  np.testing.assert_array_equal((~Tensor(a.astype(np.uint8))).numpy(), ~a.astype(np.uint8))
  np.testing.assert_array_equal((~Tensor([True, False])).numpy(), [False, True])
  with pytest.raises(RuntimeError): ~Tensor([1.0])
  u = np.array([0, 1, 2, 1 << 8, 1 << 16, (1 << 31) - 1], np.uint32)
  s = np.array([0, 1, 2, 3, 4, 31], np.uint32)
  np.testing.assert_array_equal((Tensor(u) << Tensor(s)).numpy(), u << s)
  np.testing.assert_array_equal((Tensor(u) >> Tensor(s)).numpy(), u >> s)
  np.testing.assert_array_equal((Tensor(u) << 3).numpy(), u << 3)
  np.testing.assert_array_equal((1 << Tensor(s)).numpy(), 1 << s.astype(np.int64))
  np.testing.assert_array_equal((1024 >> Tensor(s)).numpy(), 1024 >> s.astype(np.int64))
  with pytest.raises(RuntimeError): Tensor([1.0]) << 1


def test_isclose_edge_cases():
  vals = [inf, -inf, nan, 0.0, 1e-9, 1.0]
  a, b = [x for x in vals for _ in vals], [y for _ in vals for y in vals]
  for eq_nan in (False, True):
    want = torch.isclose(torch.tensor(a), torch.tensor(b), equal_nan=eq_nan).numpy()
    np.testing.assert_array_equal(Tensor(a).isclose(Tensor(b), equal_nan=eq_nan).numpy(), want)
  np.testing.assert_array_equal(Tensor([1, 2, 3]).isclose(Tensor([1, 3, 3])).numpy(), [True, False, True])


def test_dtypes_min_max():
  assert dtypes.max(dtypes.int32) == 2 ** 31 - 1 and dtypes.min(dtypes.int32) == -2 ** 31
  assert dtypes.max(dtypes.uint8) == 255 and dtypes.min(dtypes.float32) == -inf and dtypes.max(dtypes.bool) is True
  v = Tensor([-1234, 0, dtypes.max(dtypes.int32), dtypes.min(dtypes.int32)])
  np.testing.assert_array_equal(v.maximum(dtypes.min(dtypes.int32)).numpy(), v.numpy())
  np.testing.assert_array_equal(v.minimum(dtypes.max(dtypes.int32)).numpy(), v.numpy())


def test_gelu_approximate_argument():
  x, tx = _pair([-3.0, -0.5, 0.0, 0.5, 3.0], "float32", grad=False)
  np.testing.assert_allclose(x.gelu(approximate="tanh").numpy(), F.gelu(tx, approximate="tanh").numpy(), atol=1e-6)
  np.testing.assert_allclose(x.gelu(approximate="none").numpy(), F.gelu(tx).numpy(), atol=1e-6)
  with pytest.raises(RuntimeError): x.gelu(approximate="fast")


# ** tinygrad's rules for what has a gradient **
def test_gradient_of_a_target_not_in_the_graph_is_zeros():
  x, w = Tensor([1.0, 2.0, 3.0]), Tensor.randn(3)
  assert x.sum().gradient(w)[0].tolist() == [0.0, 0.0, 0.0]


def test_gradient_argument_errors_match_tinygrad():
  x = Tensor([1.0, 2.0, 3.0])
  with pytest.raises(AssertionError): (x * x).gradient(x)  # no gradient given for a non-scalar output
  with pytest.raises(AssertionError): (x * x).backward()
  ints = Tensor([1, 2, 3])
  with pytest.raises(RuntimeError, match="only float"): ints.sum().gradient(ints)
  with pytest.raises(RuntimeError, match="only float"): ints.float().sum().gradient(ints)
  with pytest.raises(RuntimeError, match="only float"): ints.sum().backward()
  t = Tensor(2.0)  # a Python float: weakly typed, no target
  with pytest.raises(RuntimeError, match="weak"): (t * 2.0).gradient(t)


def test_backward_adds_into_the_same_grad_tensor_and_skips_weak_constants():
  x = Tensor([3.0])
  (x * 2)[0].backward()
  first = x.grad
  (x * 3)[0].backward()
  (x * x)[0].backward()
  assert x.grad is first and x.grad.tolist() == [2.0 + 3.0 + 6.0]
  w = Tensor(1.0)
  (Tensor.rand(()) + w).backward()
  assert w.grad is None


def test_exp_over_one_plus_exp_stays_in_range_where_exp_overflows():
  """exp(x) / (1 + exp(x)), a sigmoid written out, is inf / inf = nan past exp's range in IEEE arithmetic; tinygrad's
  kernels compute it as 1 - 1 / (1 + exp(x)) (and its gradient likewise), which torch's own sigmoid matches."""
  vals = [-300.0, -80.0, -1.0, 0.0, 0.5, 3.0, 80.0, 300.0]
  x, tx = Tensor(vals, requires_grad=True), torch.tensor(vals, requires_grad=True)
  y = x.exp() / (1 + x.exp())
  y.sum().backward()
  torch.sigmoid(tx).sum().backward()
  np.testing.assert_allclose(y.numpy(), torch.sigmoid(tx).detach().numpy(), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)
  # 1 / (x * x) as the product of reciprocals: 0 where x * x overflows, not 1 / inf's neighbour nan of inf * 0
  big = Tensor([1e30, -2.0, 4.0])
  np.testing.assert_allclose((1 / (big * big)).numpy(), [0.0, 0.25, 0.0625])
  np.testing.assert_allclose((1 / (big * 4)).numpy(), [2.5e-31, -0.125, 0.0625], rtol=1e-6)
