"""ONNX ops as Tensor ops: the op registry, node execution, host (numpy) evaluation of shape arithmetic, and the
elementwise, reduction, shape, indexing, control-flow and sequence ops. Neural-network ops are in onnx_nn.py.

An op is a function of its inputs (positional, None where an optional input is absent) and its attributes (keyword
arguments with the ONNX names). When a later opset turned an attribute into an input of the same name (Squeeze's axes,
Slice's starts, Clip's min), one function serves both. Inputs listed in `consts` arrive as numpy arrays: shapes, axes
and counts the op needs on the host. An op returns a Tensor, a tuple of them, a list (an ONNX sequence) or a numpy
array, which marks a value known on the host."""
from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, Literal, NamedTuple

import numpy as np

from tinyhybrid.dtype import DType, dtypes, fp8_decode
from tinyhybrid.helpers import prod
from tinyhybrid.nn.onnx import HOST_MAX, Node, Scope, np_dtype, onnx_dtype, to_tensor
from tinyhybrid.tensor import Tensor


class Impl(NamedTuple):
  fn: Callable[..., Any]
  consts: tuple[int, ...]
  ctx: bool  # the function takes ctx=Ctx (its node and scope: output count, subgraphs, host values)


class Ctx(NamedTuple):
  node: Node
  scope: Scope


_OPS: dict[tuple[str, str], list[tuple[int, Impl]]] = {}
_HOST: dict[str, Callable[..., np.ndarray | None]] = {}


def op(*names: str, since: int = 1, consts: tuple[int, ...] = (), domain: str = "ai.onnx"):
  """Registers fn as the ONNX ops `names` from opset `since` on (the newest version not above the model's opset wins)."""
  def deco(fn):
    impl = Impl(fn, consts, "ctx" in inspect.signature(fn).parameters)
    for n in names: _OPS.setdefault((domain, n), []).append((since, impl))
    return fn
  return deco


def host(*names: str):
  """Registers a numpy version of a shape op, used when all its inputs are small host values; None declines."""
  def deco(fn):
    for n in names: _HOST[n] = fn
    return fn
  return deco


def lookup(op_type: str, domain: str, opset: int) -> Impl:
  found = [(since, impl) for since, impl in _OPS.get((domain, op_type), []) if since <= opset]
  if not found:
    name = op_type if domain == "ai.onnx" else f"{domain}.{op_type}"
    raise NotImplementedError(f"ONNX op '{name}' (opset {opset}) is not supported")
  return max(found, key=lambda f: f[0])[1]


def _trim(args: list) -> list:
  """Drops absent trailing inputs, so their defaults (or the attribute of the same name) apply."""
  while args and args[-1] is None: args = args[:-1]
  return args


def run_node(node: Node, scope: Scope) -> None:
  names = node.inputs
  if (h := _HOST.get(node.op)) is not None and node.domain == "ai.onnx":
    hs = [scope.host_of(n) if n else None for n in names]
    if all(a is not None and a.size <= HOST_MAX and a.dtype.kind in "biuf" for a, n in zip(hs, names) if n):
      if (out := h(*_trim(hs), **node.attrs)) is not None:
        for name, v in zip(node.outputs, out if isinstance(out, tuple) else (out,)): scope.set(name, np.asarray(v))
        return
  impl = node.impl
  args = [scope.const(n) if i in impl.consts else scope.get(n) for i, n in enumerate(names)]
  kwargs = {**node.attrs, "ctx": Ctx(node, scope)} if impl.ctx else node.attrs
  ret = impl.fn(*_trim(args), **kwargs)
  rets = ret if isinstance(ret, tuple) else (ret,)
  if len(rets) < len(node.outputs) and any(node.outputs[len(rets):]):
    raise NotImplementedError(f"ONNX op '{node.op}' (opset {node.opset}): output {node.outputs[len(rets)]!r} is not supported")
  for name, v in zip(node.outputs, rets):
    if name: scope.set(name, v)


# ***** helpers *****

def ints(x: Any) -> list[int]: return [int(v) for v in np.asarray(x).reshape(-1)]
def scalar(x: Any) -> Any: return np.asarray(x).reshape(-1)[0].item()
def norm_axes(axes: Any, ndim: int) -> list[int]: return [a + ndim if a < 0 else a for a in ints(axes)]
def py_value(v: Any, t: Tensor) -> Any:
  """v as a Python constant of t's kind, so a fill keeps t's dtype."""
  return bool(v) if t.dtype is dtypes.bool else int(v) if t.dtype._is_int else float(v)
def nonneg(i: Tensor, n: int) -> Tensor: return (i < 0).where(i + n, i)


# ***** host versions of the shape ops (numpy, exact for the integer arithmetic shapes use) *****

def _np_slice(n: int, s: int, e: int, st: int) -> slice:
  r = range(*slice(s, e, st).indices(n))
  return slice(r.start, r.stop if r.stop >= 0 else None, r.step) if len(r) else slice(0, 0)


def _slices(shape: tuple, starts, ends, axes=None, steps=None) -> tuple[slice, ...]:
  axes_ = norm_axes(axes, len(shape)) if axes is not None else list(range(len(ints(starts))))
  steps_ = ints(steps) if steps is not None else [1] * len(axes_)
  idx = [slice(None)] * len(shape)
  for a, s, e, st in zip(axes_, ints(starts), ints(ends), steps_): idx[a] = _np_slice(shape[a], s, e, st)
  return tuple(idx)


def _unsqueezed(shape: tuple, axes) -> list[int]:
  out = list(shape)
  for a in sorted(norm_axes(axes, len(shape) + len(ints(axes)))): out.insert(a, 1)
  return out


def _reshaped(shape: tuple, new, allowzero: int) -> list[int]:
  return [shape[i] if v == 0 and not allowzero else v for i, v in enumerate(ints(new))]


def _binary(fn: Callable[[Any, Any], Any]):
  """Before opset 7 a binary op broadcast only when asked (broadcast=1), b's dimensions lined up from axis on. Serves
  Tensors and the host's numpy arrays alike."""
  def impl(a: Any, b: Any, broadcast: int = 0, axis: int | None = None) -> Any:
    if broadcast and axis is not None: b = b.reshape(list(b.shape) + [1] * (a.ndim - (axis + a.ndim if axis < 0 else axis) - b.ndim))
    return fn(a, b)
  return impl


def _host_cast(x: np.ndarray, to: int, saturate: int = 1, round_mode: str = "up") -> np.ndarray | None:
  return x.astype(_NP[dt]) if (dt := onnx_dtype(to)) in _NP else None


_NP = {dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16, dtypes.int32: np.int32,
       dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64, dtypes.float16: np.float16,
       dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.bool: np.bool_}

host("Identity")(lambda x: x)
host("Cast")(_host_cast)
host("Shape")(lambda x, start=None, end=None: np.array(x.shape[start:end], np.int64))
host("Size")(lambda x: np.array(x.size, np.int64))
host("Concat")(lambda *xs, axis: np.concatenate(xs, axis))
host("Unsqueeze")(lambda x, axes: x.reshape(_unsqueezed(x.shape, axes)))
host("Squeeze")(lambda x, axes=None: np.squeeze(x, tuple(norm_axes(axes, x.ndim)) if axes is not None else None))
host("Reshape")(lambda x, shape, allowzero=0: x.reshape(_reshaped(x.shape, shape, allowzero)))
host("Slice")(lambda x, starts, ends, axes=None, steps=None: x[_slices(x.shape, starts, ends, axes, steps)])
host("Gather")(lambda x, i, axis=0: np.take(x, i, axis))

def _host_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  # ONNX integer division truncates toward zero
  return (a / b).astype(a.dtype) if a.dtype.kind == "f" else np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))


for _name, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": _host_div, "Equal": np.equal, "Less": np.less,
                   "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal, "And": np.logical_and,
                   "Or": np.logical_or}.items():
  host(_name)(_binary(_fn))  # type: ignore[arg-type]
host("Mod")(lambda a, b, fmod=0: np.fmod(a, b) if fmod else np.mod(a, b))
host("Neg")(np.negative)
host("Abs")(np.abs)
host("Not")(np.logical_not)
host("Where")(np.where)
host("Max")(lambda *xs: functools.reduce(np.maximum, xs))
host("Min")(lambda *xs: functools.reduce(np.minimum, xs))
host("Range")(lambda s, l, d: np.arange(scalar(s), scalar(l), scalar(d), dtype=s.dtype))


@host("ReduceProd")
def _host_prod(x: np.ndarray, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> np.ndarray:
  if axes is None or not len(axes): return x if noop_with_empty_axes else np.prod(x, keepdims=bool(keepdims))
  return np.prod(x, tuple(norm_axes(axes, x.ndim)), keepdims=bool(keepdims))


host("Expand")(lambda x, shape: x * np.ones(ints(shape), x.dtype))


# ***** elementwise *****

for _name, _fn in {"Abs": Tensor.abs, "Neg": Tensor.neg, "Reciprocal": Tensor.reciprocal, "Floor": Tensor.floor, "Ceil": Tensor.ceil,
                   "Round": Tensor.round, "Sqrt": Tensor.sqrt, "Exp": Tensor.exp, "Log": Tensor.log, "Sin": Tensor.sin, "Cos": Tensor.cos,
                   "Tan": Tensor.tan, "Asin": Tensor.asin, "Acos": Tensor.acos, "Atan": Tensor.atan, "Sinh": Tensor.sinh,
                   "Cosh": Tensor.cosh, "Asinh": Tensor.asinh, "Acosh": Tensor.acosh, "Atanh": Tensor.atanh, "Erf": Tensor.erf,
                   "Sign": Tensor.sign, "Relu": Tensor.relu, "Sigmoid": Tensor.sigmoid, "Tanh": Tensor.tanh, "Softplus": Tensor.softplus,
                   "Softsign": Tensor.softsign, "Mish": Tensor.mish, "HardSwish": Tensor.hardswish, "IsNaN": Tensor.isnan,
                   "Not": Tensor.logical_not, "BitwiseNot": Tensor.bitwise_not, "Identity": lambda x: x}.items():
  op(_name)(_fn)

# integer Div and Mod get a kernel of their own: fused under a later pad (a Concat), the division also runs on the
# padded positions, where the divisor reads as 0 and the CPU traps (SIGFPE)
for _name, _fn in {"Add": Tensor.add, "Sub": Tensor.sub, "Mul": Tensor.mul, "Equal": Tensor.eq, "Less": Tensor.lt, "LessOrEqual": Tensor.le,
                   "Greater": Tensor.gt, "GreaterOrEqual": Tensor.ge, "And": Tensor.bitwise_and, "Or": Tensor.bitwise_or,
                   "Xor": Tensor.bitwise_xor, "BitwiseAnd": Tensor.bitwise_and, "BitwiseOr": Tensor.bitwise_or,
                   "BitwiseXor": Tensor.bitwise_xor,
                   "Div": lambda a, b: a.div(b, rounding_mode="trunc").contiguous() if a.dtype._is_int else a / b}.items():
  op(_name)(_binary(_fn))


@op("Mod")
def Mod(a: Tensor, b: Tensor, fmod: int = 0) -> Tensor:
  if a.dtype._is_int: return (a.fmod(b) if fmod else a.mod(b)).contiguous()
  # C's fmod (an infinite divisor leaves a as it is); numpy's mod moves a remainder of the wrong sign by b
  r = b.isinf().where(a, a - b * (a / b).trunc())
  return r if fmod else ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)


@op("BitShift")
def BitShift(x: Tensor, y: Tensor, direction: str) -> Tensor:
  out = x << y if direction == "LEFT" else x >> y
  # a shift by a negative amount or by the width or more leaves only the sign fill
  fill = (x < 0).where(-1, 0).cast(x.dtype) if direction == "RIGHT" and not x.dtype._is_unsigned else 0
  return ((y < 0) | (y >= x.dtype.itemsize * 8)).where(fill, out)


op("Where")(lambda c, x, y: c.where(x, y))
op("Max")(lambda *xs: functools.reduce(Tensor.maximum, xs))
op("Min")(lambda *xs: functools.reduce(Tensor.minimum, xs))
op("Sum")(lambda *xs: functools.reduce(Tensor.add, xs))
op("Mean")(lambda *xs: functools.reduce(Tensor.add, xs) / len(xs))
op("IsInf")(lambda x, detect_negative=1, detect_positive=1: x.isinf(bool(detect_positive), bool(detect_negative)))
@functools.cache
def _fp8_limits(dt: DType) -> tuple[float, float, bool]:
  """The largest finite value of an fp8 type, the value past which a number rounds beyond it, and whether that value
  itself does (a tie rounds to the even significand)."""
  vals = fp8_decode(np.arange(256, dtype=np.uint8), dt).astype(np.float64)
  codes = [int(c) for c in np.argsort(vals) if np.isfinite(vals[c]) and vals[c] > 0]
  top, below = codes[-1], codes[-2]
  return float(vals[top]), float(vals[top] + (vals[top] - vals[below]) / 2), bool(top & 1)


def cast(x: Tensor, dt: DType, saturate: int = 1) -> Tensor:
  """ONNX's Cast. To a float8 type, `saturate` (the default) makes a value past the largest finite, an infinity too,
  that largest value; without it such a value is the type's infinity (E5M2) or its NaN (the others)."""
  if dt not in dtypes.fp8s or not x.dtype._is_float: return x.cast(dt)
  big, edge, tie_over = _fp8_limits(dt)
  if saturate: return (x.abs() > big).where(x.sign() * big, x).cast(dt)
  over = (x.abs() >= edge) if tie_over else (x.abs() > edge)
  return over.where(x.sign() * math.inf if dt is dtypes.fp8e5m2 else math.nan, x).cast(dt)


op("Cast")(lambda x, to, saturate=1, round_mode="up": cast(x, onnx_dtype(to), saturate))
op("CastLike")(lambda x, like, saturate=1, round_mode="up": cast(x, like.dtype, saturate))
op("Elu")(lambda x, alpha=1.0: x.elu(alpha))
op("Celu")(lambda x, alpha=1.0: x.celu(alpha))
op("Selu")(lambda x, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875: x.selu(alpha, gamma))
op("LeakyRelu")(lambda x, alpha=0.01: x.leaky_relu(alpha))
op("ThresholdedRelu")(lambda x, alpha=1.0: (x > alpha).where(x, 0))
op("HardSigmoid")(lambda x, alpha=0.2, beta=0.5: x.hardsigmoid(alpha, beta))
op("PRelu", since=7)(lambda x, slope: (x < 0).where(x * slope, x))
# before opset 7 a 1-D slope runs along the channel axis
op("PRelu")(lambda x, slope: (x < 0).where(x * (slope.reshape(-1, *[1] * (x.ndim - 2)) if slope.ndim == 1 and x.ndim > 2 else slope), x))
op("Swish")(lambda x, alpha=1.0: x * (x * alpha).sigmoid())
op("Shrink")(lambda x, bias=0.0, lambd=0.5: (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype))


@op("Gelu")
def Gelu(x: Tensor, approximate: str = "none") -> Tensor:
  return x.gelu() if approximate == "tanh" else 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())


@op("Pow")
@_binary
def Pow(x: Tensor, y: Tensor) -> Tensor:
  if x.dtype._is_float: return x.pow(y.cast(x.dtype))
  # integer powers: exact in float64 for the values an integer holds, rounded before the cast back
  return x.cast(dtypes.float64).pow(y.cast(dtypes.float64)).round().cast(x.dtype)


@op("Clip")
def Clip(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
  if min is None and max is None: return x
  return x.clip(min, max)


def _coerced(fn: Callable[[Tensor, int], Tensor]):
  """Softmax-style ops before opset 13: the input is flattened to 2-D at axis and the op runs over the second part."""
  def impl(x: Tensor, axis: int = 1) -> Tensor:
    a = axis + x.ndim if axis < 0 else axis
    return fn(x.reshape(prod(x.shape[:a]), prod(x.shape[a:])), 1).reshape(x.shape)
  return impl


def _hardmax(x: Tensor, axis: int) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  n = x.shape[a]
  return (x.argmax(a, keepdim=True) == Tensor.arange(n).reshape([n if i == a else 1 for i in range(x.ndim)])).cast(x.dtype)


def _in_float32(fn: Callable[[Tensor, int], Tensor]) -> Callable[[Tensor, int], Tensor]:
  """fn computed in float32 for half inputs: exp and log of a half rounded twice lose a few ulps (numpy rounds once)."""
  return lambda x, axis: fn(x.float(), axis).cast(x.dtype) if x.dtype.itemsize < 4 else fn(x, axis)


for _name, _fn in {"Softmax": _in_float32(Tensor.softmax), "LogSoftmax": _in_float32(Tensor.log_softmax), "Hardmax": _hardmax}.items():
  op(_name)(_coerced(_fn))
  op(_name, since=13)(lambda x, axis=-1, _fn=_fn: _fn(x, axis))


# ***** reductions *****

def _reduce(fn: Callable[[Tensor, tuple, bool], Tensor], empty: float):
  def impl(x: Tensor, axes: Any = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    ax = norm_axes(axes, x.ndim) if axes is not None else []
    if not ax:
      if noop_with_empty_axes: return x
      ax = list(range(x.ndim))
    if any(x.shape[a] == 0 for a in ax):  # an empty reduction is the op's identity
      shape = [1 if i in ax else s for i, s in enumerate(x.shape) if keepdims or i not in ax]
      v = empty if x.dtype._is_float or math.isfinite(empty) else (x.dtype.min if empty < 0 else x.dtype.max)
      return Tensor.full(shape, py_value(v, x), dtype=x.dtype)
    return fn(x, tuple(ax), bool(keepdims)).cast(x.dtype)
  return impl


for _name, _fn, _empty in [("ReduceSum", lambda x, a, k: x.sum(a, k), 0), ("ReduceMean", lambda x, a, k: x.mean(a, k), math.nan),
                           ("ReduceMax", lambda x, a, k: x.max(a, k), -math.inf), ("ReduceMin", lambda x, a, k: x.min(a, k), math.inf),
                           ("ReduceProd", lambda x, a, k: x.prod(a, k), 1), ("ReduceL1", lambda x, a, k: x.abs().sum(a, k), 0),
                           ("ReduceL2", lambda x, a, k: (x * x).sum(a, k).sqrt(), 0),
                           ("ReduceLogSum", lambda x, a, k: x.sum(a, k).log(), -math.inf),
                           ("ReduceLogSumExp", lambda x, a, k: x.logsumexp(a, k), -math.inf),
                           ("ReduceSumSquare", lambda x, a, k: (x * x).sum(a, k), 0)]:
  op(_name, consts=(1,))(_reduce(_fn, _empty))


def _arg(x: Tensor, axis: int, keepdims: int, select_last_index: int) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  if not select_last_index: return x.argmax(a, bool(keepdims)).cast(dtypes.int64)
  return (x.shape[a] - 1 - x.flip(a).argmax(a, bool(keepdims))).cast(dtypes.int64)


op("ArgMax")(lambda x, axis=0, keepdims=1, select_last_index=0: _arg(x, axis, keepdims, select_last_index))
# argmin is the argmax of an order-reversing map: ~x for ints (no overflow at the minimum), -x for floats
op("ArgMin")(lambda x, axis=0, keepdims=1, select_last_index=0: _arg(
  x.logical_not() if x.dtype is dtypes.bool else ~x if x.dtype._is_int else -x, axis, keepdims, select_last_index))


# ***** shape and movement *****

op("Shape")(lambda x, start=None, end=None: np.array(x.shape[start:end], np.int64))
op("Size")(lambda x: np.array(x.numel(), np.int64))
op("Reshape", consts=(1,))(lambda x, shape, allowzero=0: x.reshape(_reshaped(x.shape, shape, allowzero)))
op("Unsqueeze", consts=(1,))(lambda x, axes: x.reshape(_unsqueezed(x.shape, axes)))
op("Squeeze", consts=(1,))(lambda x, axes=None: x.squeeze(tuple(norm_axes(axes, x.ndim))) if axes is not None else x.squeeze())
op("Transpose")(lambda x, perm=None: x.permute(perm if perm is not None else list(range(x.ndim))[::-1]))
op("Expand", consts=(1,))(lambda x, shape: x.expand(x._broadcast_shape(x.shape, tuple(ints(shape)))))
op("Tile", consts=(1,))(lambda x, repeats: x.repeat(ints(repeats)))
op("Concat")(lambda *xs, axis: xs[0].cat(*xs[1:], dim=axis))
op("Slice", consts=(1, 2, 3, 4))(lambda x, starts, ends, axes=None, steps=None: x[_slices(x.shape, starts, ends, axes, steps)])


@op("Flatten")
def Flatten(x: Tensor, axis: int = 1) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  return x.reshape(prod(x.shape[:a]), prod(x.shape[a:]))


@op("Split", consts=(1,))
def Split(x: Tensor, split: Any = None, *, axis: int = 0, num_outputs: int | None = None, ctx: Ctx) -> tuple[Tensor, ...]:
  n = x.shape[axis]
  if split is None:
    k = num_outputs or len(ctx.node.outputs)
    size = -(-n // k)
    sizes = [size] * (k - 1) + [n - size * (k - 1)]
  else: sizes = ints(split)
  return tuple(x.split(sizes, axis))


@op("Pad", consts=(1, 2, 3))
def Pad(x: Tensor, pads: Any = None, constant_value: Any = None, axes: Any = None, mode: str = "constant", value: float = 0.0,
        paddings: Any = None) -> Tensor:
  p = ints(pads if pads is not None else paddings)
  ax = norm_axes(axes, x.ndim) if axes is not None else list(range(x.ndim))
  full = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): full[a] = (p[i], p[i + len(ax)])
  # crop the negative pads first: every mode pads only what is left
  x = x.shrink(tuple((max(-b, 0), s - max(-e, 0)) for s, (b, e) in zip(x.shape, full)))
  full = [(max(b, 0), max(e, 0)) for b, e in full]
  v = scalar(constant_value) if constant_value is not None and np.asarray(constant_value).size else value
  return x.pad(full, {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}[mode], py_value(v, x))


@op("Gather")
def Gather(x: Tensor, indices: Tensor, *, axis: int = 0, ctx: Ctx) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  h = ctx.scope.host_of(ctx.node.inputs[1])
  # a host index is a view (a shrink) or a small constant index, with no index tensor to compare against
  idx: Any = indices if h is None else (int(h) if h.ndim == 0 else np.where(h < 0, h + x.shape[a], h))
  return x[(slice(None),) * a + (idx,)]


op("GatherElements")(lambda x, indices, axis=0: x.gather(axis, nonneg(indices, x.shape[axis])))


@op("GatherND")
def GatherND(x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  b, m = batch_dims, indices.shape[-1]
  B = prod(x.shape[:b])
  xr, ir = x.reshape(B, *x.shape[b:]), indices.reshape(B, *indices.shape[b:])
  idx = [Tensor.arange(B).reshape(B, *[1] * (ir.ndim - 2))] + [ir[..., k] for k in range(m)]
  return xr[tuple(idx)].reshape(*x.shape[:b], *indices.shape[b:-1], *x.shape[b + m:])


_SCATTER_REDUCE: dict[str, Literal["sum", "prod", "amax", "amin"]] = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


@op("ScatterElements", "Scatter")
def ScatterElements(x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
  i = nonneg(indices, x.shape[axis])
  return x.scatter(axis, i, updates) if reduction == "none" else x.scatter_reduce(axis, i, updates, _SCATTER_REDUCE[reduction])


@op("ScatterND")
def ScatterND(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  # as a scatter along one axis: the first m dimensions of x flattened, each index row made a linear position
  m, rest = indices.shape[-1], x.shape[indices.shape[-1]:]
  lin = functools.reduce(Tensor.add, [nonneg(indices[..., k], x.shape[k]) * prod(x.shape[k + 1:m]) for k in range(m)])
  n = prod(indices.shape[:-1])
  pos = lin.reshape(n, *[1] * len(rest)).expand(n, *rest)
  xf, upd = x.reshape(prod(x.shape[:m]), *rest), updates.reshape(n, *rest)
  out = xf.scatter(0, pos, upd) if reduction == "none" else xf.scatter_reduce(0, pos, upd, _SCATTER_REDUCE[reduction])
  return out.reshape(x.shape)


@op("Compress", consts=(1,))
def Compress(x: Tensor, condition: np.ndarray, axis: int | None = None) -> Tensor:
  if axis is None: x, axis = x.flatten(), 0
  axis = axis + x.ndim if axis < 0 else axis
  n = x.shape[axis]
  pos = np.nonzero(np.asarray(condition).reshape(-1)[:n])[0]
  if not len(pos): return x.shrink(tuple((0, 0) if i == axis else None for i in range(x.ndim)))
  return x[(slice(None),) * axis + (pos,)]


op("NonZero")(lambda x: x.nonzero().T.cast(dtypes.int64))


@op("Unique")
def Unique(x: Tensor, axis: int | None = None, sorted: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # noqa: A002
  a = None if axis is None else axis + x.ndim if axis < 0 else axis
  rows = x.flatten().unsqueeze(-1) if a is None else x.permute(a, *[i for i in range(x.ndim) if i != a]).reshape(x.shape[a], -1)
  n, m = rows.shape
  ri, rj = rows.unsqueeze(1), rows.unsqueeze(0)
  diff = ri != rj
  eq = diff.logical_not().all(-1)  # eq[i, j]: rows i and j are equal
  # row j sorts before row i where they first differ
  before = ((diff.cast(dtypes.int32).argmax(-1).unsqueeze(-1) == Tensor.arange(m)) & (rj < ri)).any(-1)
  first = eq.where(Tensor.arange(n), n).min(-1)  # the first row equal to row i
  rank = (before & (first == Tensor.arange(n)).unsqueeze(0)).cast(dtypes.int32).sum(-1)
  # how many there are depends on the data: read back the first occurrences, their ranks and counts
  f, r, c = first.numpy(), rank.numpy(), eq.cast(dtypes.int32).sum(-1).numpy()
  pos = np.nonzero(f == np.arange(n))[0]
  order = pos[np.argsort(r[pos], kind="stable")] if sorted else pos
  slot = np.empty(n, np.int64)
  slot[order] = np.arange(len(order))
  y = x.flatten()[order] if a is None else x[(slice(None),) * a + (order,)]
  return y, Tensor(order.astype(np.int64)), Tensor(slot[f]), Tensor(c[order].astype(np.int64))


@op("OneHot", consts=(1,))
def OneHot(indices: Tensor, depth: Any, values: Tensor, axis: int = -1) -> Tensor:
  d = int(scalar(depth))
  a = axis + indices.ndim + 1 if axis < 0 else axis
  idx = indices.cast(dtypes.int64) if not indices.dtype._is_int else indices
  hit = nonneg(idx, d).unsqueeze(a) == Tensor.arange(d).reshape([d if i == a else 1 for i in range(indices.ndim + 1)])
  return hit.where(values[1], values[0])


@op("Range", consts=(0, 1, 2))
def Range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> Tensor:
  s, lim, d = scalar(start), scalar(limit), scalar(delta)
  dt = np_dtype(np.asarray(start))
  n = max(math.ceil((lim - s) / d), 0)
  return (Tensor.arange(n).cast(dt) * d + s).cast(dt) if n else Tensor.full((0,), 0, dtype=dt)


@op("ConstantOfShape", consts=(0,))
def ConstantOfShape(shape: Any, value: np.ndarray | None = None) -> Any:
  v = value if value is not None else np.zeros(1, np.float32)
  s = ints(shape)
  if prod(s) <= HOST_MAX: return np.full(s, v.reshape(-1)[0], dtype=v.dtype)
  return Tensor.full(s, v.reshape(-1)[0].item(), dtype=np_dtype(v))


@op("Constant")
def Constant(value: Any = None, value_float: float | None = None, value_floats: list | None = None, value_int: int | None = None,
             value_ints: list | None = None, sparse_value: Any = None, value_string: Any = None, value_strings: Any = None) -> np.ndarray:
  if value is not None: return value
  if value_float is not None: return np.array(value_float, np.float32)
  if value_floats is not None: return np.array(value_floats, np.float32)
  if value_int is not None: return np.array(value_int, np.int64)
  if value_ints is not None: return np.array(value_ints, np.int64)
  raise NotImplementedError("ONNX op 'Constant': only tensor, float and int values are supported (not sparse or string)")


@op("EyeLike")
def EyeLike(x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
  n, m = x.shape
  return (Tensor.arange(n).reshape(n, 1) + k == Tensor.arange(m).reshape(1, m)).cast(onnx_dtype(dtype) if dtype is not None else x.dtype)


op("Trilu", consts=(1,))(lambda x, k=None, upper=1: x.triu(int(scalar(k)) if k is not None else 0) if upper else
                         x.tril(int(scalar(k)) if k is not None else 0))


def _cumulative(fn: Callable[[Tensor, int], Tensor], identity: int):
  def impl(x: Tensor, axis: Any, exclusive: int = 0, reverse: int = 0) -> Tensor:
    a = int(scalar(axis))
    a = a + x.ndim if a < 0 else a
    if reverse: x = x.flip(a)
    if exclusive:  # shifted by one along the axis, the identity coming in first
      shape = x.shape
      x = x.pad(tuple((1, 0) if i == a else (0, 0) for i in range(x.ndim)), value=py_value(identity, x)).shrink(tuple((0, n) for n in shape))
    out = fn(x, a).cast(x.dtype)
    return out.flip(a) if reverse else out
  return impl


op("CumSum", consts=(1,))(_cumulative(Tensor.cumsum, 0))
op("CumProd", consts=(1,))(_cumulative(Tensor.cumprod, 1))


@op("TopK", consts=(1,))
def TopK(x: Tensor, k: Any, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[Tensor, Tensor]:  # noqa: A002
  v, i = x.topk(int(scalar(k)), axis, bool(largest), bool(sorted))
  return v, i.cast(dtypes.int64)


@op("DepthToSpace")
def DepthToSpace(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs, oc = blocksize, c // (blocksize * blocksize)
  if mode == "DCR": x = x.reshape(b, bs, bs, oc, h, w).permute(0, 3, 4, 1, 5, 2)
  else: x = x.reshape(b, oc, bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return x.reshape(b, oc, h * bs, w * bs)


@op("SpaceToDepth")
def SpaceToDepth(x: Tensor, blocksize: int, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  x = x.reshape(b, c, h // bs, bs, w // bs, bs).permute((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
  return x.reshape(b, c * bs * bs, h // bs, w // bs)


@op("ReverseSequence")
def ReverseSequence(x: Tensor, sequence_lens: Tensor, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  T, B = x.shape[time_axis], x.shape[batch_axis]
  t = Tensor.arange(T).reshape([T if i == time_axis else 1 for i in range(x.ndim)])
  n = sequence_lens.reshape([B if i == batch_axis else 1 for i in range(x.ndim)])
  return x.gather(time_axis, (t < n).where(n - 1 - t, t).expand(x.shape))


@op("CenterCropPad", consts=(1,))
def CenterCropPad(x: Tensor, shape: Any, axes: list[int] | None = None) -> Tensor:
  ax = norm_axes(axes, x.ndim) if axes is not None else list(range(x.ndim))
  for a, s in zip(ax, ints(shape)):
    n = x.shape[a]
    if s < n: x = x.shrink(tuple(((n - s) // 2, (n - s) // 2 + s) if i == a else None for i in range(x.ndim)))
    elif s > n: x = x.pad(tuple(((s - n) // 2, s - n - (s - n) // 2) if i == a else (0, 0) for i in range(x.ndim)))
  return x


# ***** control flow *****

def run_graph(g: Any, feeds: list, ctx: Ctx) -> list:
  """Runs a subgraph on positional inputs, inside the scope of the node that owns it."""
  return g.run(dict(zip(g.input_names, feeds)), ctx.scope)


def _truth(v: Any) -> bool: return bool(np.asarray(v if not isinstance(v, Tensor) else v.numpy()).reshape(-1)[0])


@op("If", consts=(0,))
def If(cond: np.ndarray, else_branch: Any, then_branch: Any, ctx: Ctx) -> tuple:
  return tuple(run_graph(then_branch if _truth(cond) else else_branch, [], ctx))


@op("Loop", consts=(0, 1))
def Loop(M: Any, cond: Any, *v_initial: Any, body: Any, ctx: Ctx) -> tuple:
  trips = int(scalar(M)) if M is not None else None
  go, vals, scans, i = (_truth(cond) if cond is not None else True), list(v_initial), [], 0
  while go and (trips is None or i < trips):
    outs = run_graph(body, [np.array(i, np.int64), np.array(go), *vals], ctx)
    go, vals = _truth(outs[0]), outs[1:1 + len(vals)]
    scans.append(outs[1 + len(vals):])
    i += 1
  if not scans: return tuple(vals)
  return tuple(vals) + tuple(_stack([s[k] for s in scans], 0) for k in range(len(scans[0])))


def _stack(xs: list, axis: int) -> Tensor:
  ts = [to_tensor(x) for x in xs]
  return ts[0].stack(*ts[1:], dim=axis)


@op("Scan", since=9)
def Scan(*args: Any, body: Any, num_scan_inputs: int, scan_input_axes: list | None = None, scan_input_directions: list | None = None,
         scan_output_axes: list | None = None, scan_output_directions: list | None = None, ctx: Ctx) -> tuple:
  n_state = len(args) - num_scan_inputs
  states, xs = list(args[:n_state]), args[n_state:]
  in_axes = norm_axes(scan_input_axes, xs[0].ndim) if scan_input_axes else [0] * len(xs)
  in_dirs = scan_input_directions or [0] * len(xs)
  T = xs[0].shape[in_axes[0]]
  steps = []
  for t in range(T):
    sl = [x[(slice(None),) * a + (T - 1 - t if d else t,)] for x, a, d in zip(xs, in_axes, in_dirs)]
    outs = run_graph(body, states + sl, ctx)
    states = outs[:n_state]
    steps.append(outs[n_state:])
  n_out = len(body.output_names) - n_state
  out_dirs, out_axes = scan_output_directions or [0] * n_out, scan_output_axes or [0] * n_out
  ys = []
  for k in range(n_out):
    seq = [s[k] for s in steps][::-1 if out_dirs[k] else 1]
    y = _stack(seq, 0)
    ys.append(y.permute(_moved(y.ndim, 0, out_axes[k])))
  return tuple(states) + tuple(ys)


@op("Scan", since=8)
def Scan8(sequence_lens: Any, *args: Any, body: Any, num_scan_inputs: int, directions: list | None = None, ctx: Ctx) -> tuple:
  """Scan before opset 9: every input has a leading batch axis, scanned along axis 1 one batch entry at a time."""
  outs = [Scan(*[a[i] for a in args], body=body, num_scan_inputs=num_scan_inputs, scan_input_directions=directions, ctx=ctx)
          for i in range(args[0].shape[0])]
  return tuple(_stack([o[k] for o in outs], 0) for k in range(len(outs[0])))


def _moved(ndim: int, src: int, dst: int) -> list[int]:
  order = list(range(ndim))
  order.insert(dst + ndim if dst < 0 else dst, order.pop(src))
  return order


@op("SequenceMap")
def SequenceMap(seq: list, *extra: Any, body: Any, ctx: Ctx) -> tuple:
  outs = [run_graph(body, [seq[i]] + [e[i] if isinstance(e, list) else e for e in extra], ctx) for i in range(len(seq))]
  return tuple([o[k] for o in outs] for k in range(len(body.output_names)))


# ***** sequences and optionals *****

op("SequenceEmpty")(lambda dtype=None: [])
op("SequenceConstruct")(lambda *xs: list(xs))
op("SequenceLength")(lambda seq: np.array(len(seq), np.int64))
op("SequenceAt", consts=(1,))(lambda seq, position: seq[int(scalar(position))])
op("Optional")(lambda x=None, type=None: x)  # noqa: A002
op("OptionalHasElement")(lambda x=None: np.array(x is not None))
op("OptionalGetElement")(lambda x: x)


@op("SequenceInsert", consts=(2,))
def SequenceInsert(seq: list, x: Tensor, position: Any = None) -> list:
  p = len(seq) if position is None else int(scalar(position))
  return seq[:p] + [x] + seq[p:] if p >= 0 else seq[:len(seq) + p] + [x] + seq[len(seq) + p:]


@op("SequenceErase", consts=(1,))
def SequenceErase(seq: list, position: Any = None) -> list:
  p = -1 if position is None else int(scalar(position))
  p = p + len(seq) if p < 0 else p
  return seq[:p] + seq[p + 1:]


@op("SplitToSequence", consts=(1,))
def SplitToSequence(x: Tensor, split: Any = None, axis: int = 0, keepdims: int = 1) -> list:
  n = x.shape[axis]
  if split is None:
    parts = list(x.split(1, axis))
    return parts if keepdims else [p.squeeze(axis) for p in parts]
  s = ints(split)
  if np.asarray(split).ndim == 0: s = [s[0]] * (n // s[0]) + ([n % s[0]] if n % s[0] else [])
  return list(x.split(s, axis))


@op("ConcatFromSequence")
def ConcatFromSequence(seq: list, axis: int, new_axis: int = 0) -> Tensor:
  return _stack(seq, axis) if new_axis else seq[0].cat(*seq[1:], dim=axis)


from tinyhybrid.nn import onnx_nn, onnx_signal, onnx_vision  # noqa: E402,F401  (they register their ops)
