"""Reductions, cumulative ops, matmul, sorting, losses and attention against torch: values and gradients, dtypes,
0-d and zero-size shapes, keepdim and negative axes, and the exception types of misuse (tinygrad's, torch's)."""
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinyhybrid import Tensor, dtypes

RNG = np.random.default_rng(13)
INF, NAN = math.inf, math.nan


def _data(shape, dtype=np.float32, low=-2.0, high=2.0) -> np.ndarray:
  if np.issubdtype(dtype, np.floating): return RNG.uniform(low, high, size=shape).astype(dtype)
  if dtype == np.bool_: return RNG.integers(0, 2, size=shape).astype(bool)
  info = np.iinfo(dtype)
  return RNG.integers(max(info.min, -4), min(info.max, 4) + 1, size=shape).astype(dtype)


class Batch:
  """Our lazy results next to torch's values, realized in one schedule by check(): a test's kernels then compile as
  one batch (a cold run stays short), and every mismatch is reported by name, not just the first."""
  def __init__(self): self.items: list = []

  def add(self, name: str, ours: Tensor, theirs, atol=1e-5, rtol=1e-5, dtype=None) -> None:
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else np.asarray(theirs)
    self.items.append((name, ours, theirs, atol, rtol, dtype))

  def op(self, name: str, fn, tfn, *arrays, grad=True, atol=1e-5, rtol=1e-5) -> None:
    """fn on Tensors and tfn on torch tensors of the same arrays; with grad also the gradients of sum(out * w), random w."""
    grad = grad and all(np.issubdtype(a.dtype, np.floating) for a in arrays)
    ts, tts = [Tensor(a, requires_grad=grad) for a in arrays], [torch.tensor(a, requires_grad=grad) for a in arrays]
    out, tout = fn(*ts), tfn(*tts)
    self.add(name, out, tout, atol, rtol)
    if not grad: return
    w = RNG.uniform(-1, 1, size=tout.shape).astype(np.float32)
    (out * Tensor(w)).sum().backward()
    (tout * torch.tensor(w)).sum().backward()
    for i, (t, tt) in enumerate(zip(ts, tts)):
      self.add(f"{name} grad {i}", t.grad, tt.grad if tt.grad is not None else np.zeros(tt.shape, np.float32), atol, rtol)

  def check(self) -> None:
    self.items[0][1].realize(*[it[1] for it in self.items[1:]])
    bad = []
    for name, ours, theirs, atol, rtol, dtype in self.items:
      try:
        if dtype is not None: assert ours.dtype is dtype, f"dtype {ours.dtype} != {dtype}"
        got = ours.numpy()
        assert got.shape == theirs.shape, f"shape {got.shape} != {theirs.shape}"
        if got.dtype == np.bool_ or theirs.dtype == np.bool_: np.testing.assert_equal(got, theirs)
        else: np.testing.assert_allclose(got.astype(np.float64), theirs.astype(np.float64), atol=atol, rtol=rtol)  # NaN/inf too
      except AssertionError as e: bad.append(f"{name}: {str(e).strip()[:600]}")
    assert not bad, "\n".join(bad)


def _tdims(shape, axis):
  if axis is None: return tuple(range(len(shape)))
  return tuple(a % max(len(shape), 1) for a in ((axis,) if isinstance(axis, int) else axis)) if shape else ()


def _tprod(x, dims, keepdim):
  for d in sorted(dims, reverse=True): x = x.prod(d, keepdim=True)
  return x if keepdim else x.reshape([s for i, s in enumerate(x.shape) if i not in dims])


# name -> (ours(x, axis, keepdim), torch(x, dims, keepdim)); torch's dims=() means all of them, which is what a 0-d needs
REDUCE = {
  "sum": (lambda x, a, k: x.sum(a, k), lambda x, d, k: x.sum(d, keepdim=k)),
  "prod": (lambda x, a, k: x.prod(a, k), _tprod),
  "max": (lambda x, a, k: x.max(a, k), lambda x, d, k: x.amax(d, keepdim=k)),
  "min": (lambda x, a, k: x.min(a, k), lambda x, d, k: x.amin(d, keepdim=k)),
  "mean": (lambda x, a, k: x.mean(a, k), lambda x, d, k: x.mean(d, keepdim=k)),
  "var": (lambda x, a, k: x.var(a, k), lambda x, d, k: x.var(d, keepdim=k)),
  "std": (lambda x, a, k: x.std(a, k), lambda x, d, k: x.std(d, keepdim=k)),
  "var0": (lambda x, a, k: x.var(a, k, correction=0), lambda x, d, k: x.var(d, keepdim=k, correction=0)),
  "logsumexp": (lambda x, a, k: x.logsumexp(a, k), lambda x, d, k: x.logsumexp(d or tuple(range(x.ndim)), keepdim=k)),
}


@pytest.mark.parametrize("shape,axis,keepdim", [((), None, False), ((), 0, True), ((), -1, False), ((7,), 0, True),
                                                ((3, 4, 5), None, False), ((3, 4, 5), None, True), ((3, 4, 5), -1, False),
                                                ((3, 4, 5), (0, 2), True), ((3, 4, 5), (-3, 1), False)], ids=str)
def test_reduce(shape, axis, keepdim):
  b = Batch()
  for name, (ours, theirs) in REDUCE.items():
    if name in ("var", "std") and not shape: continue  # n - correction == 0: test_var_std_degenerate
    b.op(name, lambda x: ours(x, axis, keepdim), lambda x: theirs(x, _tdims(shape, axis), keepdim),
         _data(shape, low=0.5 if name == "prod" else -2.0), atol=1e-4)
  b.check()


@pytest.mark.parametrize("shape,axis,correction", [((1, 2, 3, 1, 5), (0, 3), 1), ((1, 2, 3, 1, 5), (0, 3), 5),
                                                   ((1, 2, 3, 1, 5), (0, 4), 5), ((1,), 0, 0), ((1,), 0, 1), ((), None, 1),
                                                   ((2, 3), 1, 3), ((4, 0), 1, 1)], ids=str)
def test_var_std_degenerate(shape, axis, correction):
  # torch divides by max(0, n - correction): 0/0 is NaN and x/0 is inf, never an error
  x, b = _data(shape), Batch()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torch warns "degrees of freedom is <= 0"
    for f in ("var", "std"):
      theirs = getattr(torch.tensor(x), f)(axis, correction=correction)
      b.add(f, getattr(Tensor(x), f)(axis, correction=correction), theirs, 1e-6, 1e-6)
      b.add(f + "_mean", getattr(Tensor(x), f + "_mean")(axis, correction=correction)[1], torch.tensor(x).mean(axis), 1e-6, 1e-6)
  if correction == 0 and x.size: b.op("var grad", lambda t: t.var(axis, correction=0), lambda t: t.var(axis, correction=0), x)
  b.check()


def test_zero_size_identities():
  # tinygrad's identities over an empty axis (torch raises for max/min): max dtype.min, min dtype.max, any False, all True
  z, tz, b = Tensor.ones(1, 0, 3, 0, 5), torch.ones(1, 0, 3, 0, 5), Batch()
  for f, want in (("sum", 0.0), ("prod", 1.0), ("max", -INF), ("min", INF), ("mean", NAN), ("logsumexp", -INF)):
    b.add(f, getattr(z, f)((1, 3)), np.full((1, 3, 5), want, np.float32))
  b.add("max keepdim", z.max((1, 3), keepdim=True), np.full((1, 1, 3, 1, 5), -INF, np.float32))
  b.add("any", z.any((1, 3)), tz.any(1).any(2))
  b.add("all", z.all((1, 3)), tz.all(1).all(2))
  for dt, lo, hi in ((dtypes.int32, -2**31, 2**31 - 1), (dtypes.uint8, 0, 255), (dtypes.int8, -128, 127),
                     (dtypes.bool, False, True)):
    b.add(f"max {dt}", Tensor.ones(0, dtype=dt).max(), np.array(lo), dtype=dt)
    b.add(f"min {dt}", Tensor.ones(0, dtype=dt).min(), np.array(hi), dtype=dt)
  for t in (Tensor([]), Tensor.ones(2, 0)):
    for f, want in (("sum", 0.0), ("max", -INF), ("min", INF), ("mean", NAN)):
      b.add(f"{f} {t.shape}", getattr(t, f)(), np.array(want, np.float32))
  b.add("sum rows", Tensor.ones(0, 3).sum(0), np.zeros(3, np.float32))
  b.add("sum cols", Tensor.ones(0, 3).sum(1), np.zeros(0, np.float32))
  x = Tensor.ones(2, 0, requires_grad=True)
  x.sum(1).sum().backward()  # the gradient reaches a zero-size input as zeros of its shape
  b.add("grad", x.grad, np.zeros((2, 0), np.float32))
  b.check()


DT_NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16,
         dtypes.int32: np.int32, dtypes.uint32: np.uint32, dtypes.int64: np.int64, dtypes.uint64: np.uint64,
         dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}
# tinygrad's result dtypes: sums accumulate in at least int32/uint32 (half stays half), mean and var of ints are float32
SUM_DT = {dtypes.bool: dtypes.int32, dtypes.int8: dtypes.int32, dtypes.uint8: dtypes.uint32, dtypes.int16: dtypes.int32,
          dtypes.uint16: dtypes.uint32}


@pytest.mark.parametrize("dt", list(DT_NP) + [dtypes.bfloat16], ids=str)
def test_reduce_dtypes(dt):
  x = _data((3, 5), DT_NP.get(dt, np.float32))
  if dt is dtypes.bfloat16: x = torch.tensor(x).bfloat16().float().numpy()  # values bfloat16 holds exactly
  t, tt = Tensor(x, dtype=dt), torch.tensor(x.astype(np.float64))  # float64 holds every value exactly
  sdt, fdt = SUM_DT.get(dt, dt), (dt if dt._is_float else dtypes.float32)
  tol = 2e-2 if dt is dtypes.bfloat16 else 2e-3 if dt is dtypes.float16 else 1e-6
  cases = [("sum", t.sum(1), tt.sum(1), sdt), ("prod", t.prod(1), tt.prod(1), dt), ("max", t.max(1), tt.amax(1), dt),
           ("min", t.min(0), tt.amin(0), dt), ("mean", t.mean(1), tt.mean(1), fdt), ("var", t.var(1), tt.var(1), fdt),
           ("argmax", t.argmax(1), tt.argmax(1), dtypes.int32), ("argmin", t.argmin(0), tt.argmin(0), dtypes.int32),
           ("any", t.any(1), tt.bool().any(1), dtypes.bool), ("all", t.all(0), tt.bool().all(0), dtypes.bool),
           ("cumsum", t.cumsum(1), tt.cumsum(1), sdt), ("cumprod", t.cumprod(1), tt.cumprod(1), dt),
           ("cummax", t.cummax(1)[0], tt.cummax(1).values, dt), ("cummin", t.cummin(0)[0], tt.cummin(0).values, dt),
           ("cummax idx", t.cummax(1)[1], tt.cummax(1).indices, dtypes.int32),
           ("sort", t.sort(1)[0], tt.sort(dim=1, stable=True).values, dt),
           ("argsort", t.argsort(1), tt.sort(dim=1, stable=True).indices, dtypes.int32)]
  b = Batch()
  for name, ours, theirs, want_dt in cases:
    want = theirs.numpy()
    if dt._is_int and name in ("prod", "cumprod"): want = want.astype(np.int64).astype(DT_NP[dt])  # wraps as the dtype does
    b.add(name, ours, want, tol, tol, want_dt)
  b.check()


def test_min_max_extremes_and_ties():
  # ints at the dtype's limits (no overflow from negation), unsigned, bools, NaN and first-index ties, as torch
  b = Batch()
  i32, u8 = (dtypes.int32, torch.int32), (dtypes.uint8, torch.uint8)
  bl, f32 = (dtypes.bool, torch.bool), (dtypes.float32, torch.float32)
  for vals, (dt, tdt) in (([0, -2**31], i32), ([-2**31, 0], i32), ([2**31 - 1, -2**31], i32), ([0, 255, 7], u8),
                          ([False, True], bl), ([True, False], bl), ([True, True], bl), ([2, 2], f32), ([3, 2, 2], f32),
                          ([1, 3, 3, 1], f32), ([-INF, -INF], f32), ([1.0, NAN, 3.0, NAN], f32)):
    t, tt = Tensor(vals, dtype=dt), torch.tensor(vals, dtype=tdt)
    ti = tt.int() if tdt is torch.bool else tt
    for f, want in (("min", tt.min()), ("max", tt.max()), ("argmin", ti.argmin()), ("argmax", ti.argmax())):
      b.add(f"{f} {vals}", getattr(t, f)(), want.numpy(), 0, 0)
  x = _data((4, 6), np.int8)
  for axis, kd in ((0, False), (1, True), (-1, False), (None, True)):
    b.add(f"argmax {axis} {kd}", Tensor(x).argmax(axis, kd), torch.tensor(x).argmax(axis, keepdim=kd), 0, 0)
    b.add(f"argmin {axis} {kd}", Tensor(x).argmin(axis, kd), torch.tensor(x).argmin(axis, keepdim=kd), 0, 0)
  b.add("argmax 0-d", Tensor(3.0).argmax(0), np.array(0))
  b.add("argmin 0-d", Tensor(3.0).argmin(-1), np.array(0))
  # the gradient of a tied max is shared evenly, as torch's amax/max() share it
  b.op("tied max", lambda t: t.max(), lambda t: t.amax(), np.array([1.0, 3.0, 3.0, -1.0], np.float32))
  b.op("tied min", lambda t: t.min(1), lambda t: t.amin(1), np.array([[1.0, 1.0, 3.0], [0.0, 2.0, 0.0]], np.float32))
  b.check()


SOFTMAX = {"softmax": (lambda x, a: x.softmax(a), lambda x, a: F.softmax(x, a)),
           "log_softmax": (lambda x, a: x.log_softmax(a), lambda x, a: F.log_softmax(x, a)),
           "softmin": (lambda x, a: x.softmin(a), lambda x, a: F.softmin(x, a))}


@pytest.mark.parametrize("shape,axis", [((), 0), ((), -1), ((9,), 0), ((3, 7), 1), ((3, 7), 0), ((2, 3, 4), -2), ((2, 0), 1),
                                        ((0, 3), -1)], ids=str)
def test_softmax(shape, axis):
  b = Batch()
  for name, (ours, theirs) in SOFTMAX.items():
    b.op(name, lambda x: ours(x, axis), lambda x: theirs(x, axis), _data(shape, high=4.0), atol=1e-6)
  b.check()


def test_softmax_edges():
  x, b = np.array([[0.0, -INF, 2.0], [-INF, -INF, -INF], [1e4, -1e4, 0.0]], np.float32), Batch()
  b.add("softmax", Tensor(x).softmax(1), F.softmax(torch.tensor(x), 1))
  b.add("log_softmax", Tensor(x).log_softmax(1), F.log_softmax(torch.tensor(x), 1))
  b.add("logsumexp", Tensor(x).logsumexp(1), torch.tensor(x).logsumexp(1))
  # dtype= casts first; ints softmax as default_float
  b.add("int", Tensor([1, 2, 3]).log_softmax(), F.log_softmax(torch.tensor([1.0, 2, 3]), 0), dtype=dtypes.float32)
  b.add("half", Tensor([1.0, 2.0]).softmax(dtype=dtypes.float16), F.softmax(torch.tensor([1.0, 2.0]), 0), 1e-3, 1e-3,
        dtype=dtypes.float16)
  b.check()
  with pytest.raises(IndexError): Tensor(1.0).softmax(1)
  with pytest.raises(IndexError): Tensor.ones(2, 3).log_softmax(2)


CUM = {"cumsum": (lambda x, a: x.cumsum(a), lambda x, a: x.cumsum(a)),
       "cumprod": (lambda x, a: x.cumprod(a), lambda x, a: x.cumprod(a)),
       "cummax": (lambda x, a: x.cummax(a)[0], lambda x, a: x.cummax(a).values),
       "cummin": (lambda x, a: x.cummin(a)[0], lambda x, a: x.cummin(a).values),
       "cummax idx": (lambda x, a: x.cummax(a)[1], lambda x, a: x.cummax(a).indices.int()),
       "cummin idx": (lambda x, a: x.cummin(a)[1], lambda x, a: x.cummin(a).indices.int()),
       "logcumsumexp": (lambda x, a: x.logcumsumexp(a), lambda x, a: x.logcumsumexp(a))}


@pytest.mark.parametrize("shape,axis", [((), 0), ((), -1), ((9,), 0), ((4, 6), 1), ((4, 6), -2), ((2, 3, 4), 1), ((2, 0, 4), 1),
                                        ((0, 3), 0), ((2, 3, 0), -1), ((2, 600), 1)], ids=str)
def test_cumulative(shape, axis):
  # (2, 600) is past the single-window length: the chunked scan
  b = Batch()
  for name, (ours, theirs) in CUM.items():
    low, high = (0.8, 1.2) if name == "cumprod" else (-3.0, 3.0)
    # cumprod's gradient sums products of up to ~20 that cancel to ~1e-2: float32 order alone moves it by ~1e-4
    atol = 1e-3 if name == "cumprod" else 1e-4
    b.op(name, lambda x: ours(x, axis), lambda x: theirs(x, axis), _data(shape, low=low, high=high), grad="idx" not in name,
         atol=atol, rtol=1e-4)
  b.check()


def test_cumulative_edges():
  # ties take the later index and NaN sticks (torch's rules); logcumsumexp keeps each prefix exact however far apart
  b = Batch()
  for vals in ([1, 1, 3, 3, 2], [3, 3, 1, 1], [1.0, NAN, 3.0, NAN, 0.0], [-INF, 0.0, INF, 1.0]):
    for f in ("cummax", "cummin"):
      (v, i), tv = getattr(Tensor(vals), f)(0), getattr(torch.tensor(vals), f)(0)
      b.add(f"{f} {vals}", v, tv.values, 0, 0)
      b.add(f"{f} idx {vals}", i, tv.indices, 0, 0)
  for vals in ([0.0, 100.0], [100.0, 0.0, -100.0], [-INF, 0.0, INF, 1.0], [-INF, -INF], [88.0, 89.0, -90.0]):
    b.add(f"logcumsumexp {vals}", Tensor(vals).logcumsumexp(), torch.tensor(vals).logcumsumexp(0), 1e-6, 1e-6)
  b.op("logcumsumexp grad", lambda t: t.logcumsumexp(), lambda t: t.logcumsumexp(0), np.array([0.0, 100.0], np.float32))
  x = RNG.uniform(-50, 50, size=(1300,)).astype(np.float32)  # two levels of chunks, values far apart
  b.add("long logcumsumexp", Tensor(x).logcumsumexp(), torch.tensor(x).logcumsumexp(0), 1e-4, 1e-5)
  b.add("long cumsum", Tensor(x).cumsum(), torch.tensor(x).cumsum(0), 2e-3, 1e-4)
  b.add("bool cumsum", Tensor([True, False, True]).cumsum(), np.array([1, 1, 2]), dtype=dtypes.int32)
  b.add("0-d bool cumsum", Tensor(True).cumsum(), np.array(1), dtype=dtypes.int32)
  b.add("empty int8 cumsum", Tensor.ones(2, 0, dtype=dtypes.int8).cumsum(1), np.zeros((2, 0)), dtype=dtypes.int32)
  b.check()
  for f in ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"):
    with pytest.raises(IndexError): getattr(Tensor(1.0), f)(1)
    with pytest.raises(IndexError): getattr(Tensor.ones(5), f)(-2)


MATMUL_SHAPES = [((5,), (5,)), ((5,), (5, 3)), ((4, 5), (5,)), ((2, 4, 5), (5,)), ((5,), (2, 5, 3)), ((4, 5), (5, 3)),
                 ((2, 4, 5), (2, 5, 3)), ((2, 1, 4, 5), (3, 5, 2)), ((3, 4, 5), (5, 2)), ((0, 5), (5, 3)), ((4, 0), (0, 3))]


def test_matmul():
  b = Batch()
  for sa, sb in MATMUL_SHAPES:
    b.op(f"@ {sa} {sb}", lambda x, y: x @ y, lambda x, y: x @ y, _data(sa), _data(sb))
    b.op(f"dot {sa} {sb}", lambda x, y: x.dot(y), lambda x, y: x.matmul(y), _data(sa), _data(sb), grad=False)
  # half: float32 accumulation forward and backward, as torch's
  b.op("half", lambda x, y: x @ y, lambda x, y: (x.float() @ y.float()).half(), _data((16, 32), np.float16, -1, 1),
       _data((32, 8), np.float16, -1, 1), atol=5e-3, rtol=5e-3)
  i, j = _data((3, 4), np.int8), _data((4, 2), np.int8)
  b.add("int8", Tensor(i) @ Tensor(j), torch.tensor(i) @ torch.tensor(j), dtype=dtypes.int8)
  b.add("int8 @ float", Tensor(i) @ Tensor(j.astype(np.float32)), torch.tensor(i).float() @ torch.tensor(j).float(),
        dtype=dtypes.float32)
  b.add("dtype=", Tensor(i).dot(Tensor(j), dtype=dtypes.int32), torch.tensor(i).int() @ torch.tensor(j).int(), dtype=dtypes.int32)
  b.check()
  for sa, sb in (((), (3, 3)), ((3,), ()), ((), ()), ((2, 4), (1, 3)), ((2, 1), (4, 3)), ((4,), (1, 2)), ((2, 1), (4,)),
                 ((1,), (4,)), ((2, 3, 4), (5, 4, 2))):
    with pytest.raises(RuntimeError): torch.ones(sa) @ torch.ones(sb)
    with pytest.raises(RuntimeError, match="matmul"): Tensor.ones(*sa) @ Tensor.ones(*sb)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_topk(descending):
  b = Batch()
  for shape, dim in (((), -1), ((1,), 0), ((0,), 0), ((9,), 0), ((4, 6), 1), ((4, 6), 0), ((3, 4, 5), -2)):
    x = RNG.integers(-3, 4, size=shape).astype(np.float32)  # many ties: the stable order decides the indices
    (v, i), (tv, ti) = Tensor(x).sort(dim, descending), torch.tensor(x).sort(dim=dim, descending=descending, stable=True)
    b.add(f"sort {shape}", v, tv, 0, 0)
    b.add(f"sort idx {shape}", i, ti, 0, 0, dtype=dtypes.int32)
    b.add(f"argsort {shape}", Tensor(x).argsort(dim, descending), ti, 0, 0)
    if x.size:
      b.op(f"sort grad {shape}", lambda t: t.sort(dim, descending)[0], lambda t: t.sort(dim=dim, descending=descending)[0],
           _data(shape))
  x = _data((4, 9))
  for k, dim in ((3, 1), (2, 0), (9, -1), (0, 1)):
    (v, i), (tv, ti) = Tensor(x).topk(k, dim, not descending), torch.tensor(x).topk(k, dim, not descending)
    b.add(f"topk {k} {dim}", v, tv, 0, 0)
    b.add(f"topk idx {k} {dim}", i, ti, 0, 0)
  b.op("topk grad", lambda t: t.topk(3, largest=not descending)[0], lambda t: t.topk(3, largest=not descending)[0], x)
  b.add("topk 0-d", Tensor(2.0).topk(1)[0], np.array(2.0, np.float32))
  b.check()
  with pytest.raises(ValueError): Tensor.ones(4).topk(5)
  with pytest.raises(IndexError): Tensor.ones(4).sort(1)


@pytest.mark.parametrize("descending", [False, True])
def test_sort_argsort_topk_with_nan(descending):
  b = Batch()
  x = np.array([[3, NAN, 1, NAN, -INF, 2, INF, 1], [NAN] * 8, [0, -0.0, NAN, 5, 5, NAN, -1, 0]], dtype=np.float32)
  (v, i), (tv, ti) = Tensor(x).sort(1, descending), torch.tensor(x).sort(dim=1, descending=descending, stable=True)
  b.add("sort", v, tv, 0, 0)
  b.add("sort idx", i, ti, 0, 0, dtype=dtypes.int32)
  b.add("argsort", Tensor(x).argsort(1, descending), ti, 0, 0)
  b.add("sort dim 0", Tensor(x).sort(0, descending)[0], torch.tensor(x).sort(dim=0, descending=descending, stable=True)[0], 0, 0)
  for k in (1, 3, 8):
    tv, ti = torch.tensor(x).topk(k, 1, not descending)
    v, i = Tensor(x).topk(k, 1, not descending)
    b.add(f"topk {k}", v, tv, 0, 0)
    b.add(f"topk {k} idx in range", ((i >= 0) & (i < 8)).all(), np.array(True))
  b.check()
  for row in range(x.shape[0]):  # the indices are a permutation, and they give the values back
    idx = Tensor(x).argsort(1, descending).numpy()[row]
    assert sorted(idx.tolist()) == list(range(8))
    np.testing.assert_array_equal(x[row][idx], torch.tensor(x[row]).sort(descending=descending, stable=True)[0].numpy())


RED = ["mean", "sum", "none"]


@pytest.mark.parametrize("reduction", RED)
def test_nll_loss(reduction):
  x, y, b = _data((6, 5)), RNG.integers(0, 5, size=(6,)), Batch()
  w = RNG.uniform(0.5, 2, size=(5,)).astype(np.float32)
  y[1] = 2
  r = reduction
  b.op("plain", lambda t: t.log_softmax(1).nll_loss(Tensor(y), reduction=r),
       lambda t: F.nll_loss(F.log_softmax(t, 1), torch.tensor(y), reduction=r), x)
  b.op("ignore_index", lambda t: t.nll_loss(Tensor(y), ignore_index=2, reduction=r),
       lambda t: F.nll_loss(t, torch.tensor(y), ignore_index=2, reduction=r), x)
  b.op("weight", lambda t: t.nll_loss(Tensor(y), Tensor(w), reduction=r),
       lambda t: F.nll_loss(t, torch.tensor(y), torch.tensor(w), reduction=r), x)
  x3, y3 = _data((2, 4, 3)), RNG.integers(0, 4, size=(2, 3))  # (N, C, d) and unbatched (C,)
  b.op("(N, C, d)", lambda t: t.nll_loss(Tensor(y3), reduction=r), lambda t: F.nll_loss(t, torch.tensor(y3), reduction=r), x3)
  b.op("(C,)", lambda t: t.nll_loss(Tensor(3), reduction=r), lambda t: F.nll_loss(t, torch.tensor(3), reduction=r), _data((5,)))
  b.check()


@pytest.mark.parametrize("reduction", RED)
def test_cross_entropy(reduction):
  b = Batch()
  for smoothing in (0.0, 0.3):
    ce = lambda t, y: F.cross_entropy(t, y, reduction=reduction, label_smoothing=smoothing)  # noqa: E731
    for shape in ((6, 5), (2, 4, 3), (5,)):
      cdim = 0 if len(shape) == 1 else 1
      cls = RNG.integers(0, shape[cdim], size=shape[:cdim] + shape[cdim + 1:])
      if cls.ndim: cls.flat[0] = -100  # torch's default ignore_index: left out of the loss and of the mean
      probs = torch.softmax(torch.tensor(_data(shape)), cdim).numpy()
      b.op(f"indices {shape} {smoothing}", lambda t: t.cross_entropy(Tensor(cls), reduction, smoothing),
           lambda t: ce(t, torch.tensor(cls)), _data(shape))
      b.op(f"probabilities {shape} {smoothing}", lambda t, p: t.cross_entropy(p, reduction, smoothing), ce, _data(shape), probs)
    y = RNG.integers(0, 5, size=(6,))
    b.op(f"sparse {smoothing}", lambda t: t.sparse_categorical_crossentropy(Tensor(y), -1, smoothing, reduction),
         lambda t: ce(t, torch.tensor(y)), _data((6, 5)))
  b.check()


def test_loss_errors():
  x, y = Tensor.ones(4, 3), Tensor([0, 1, 2, 0])
  p = Tensor.ones(4, 3)
  for f in (lambda: x.nll_loss(y, reduction="typo"), lambda: x.cross_entropy(y, reduction="typo"),
            lambda: x.cross_entropy(p, reduction="typo"), lambda: x.sparse_categorical_crossentropy(y, reduction="typo"),
            lambda: x.binary_crossentropy(p, reduction="typo"),
            lambda: x.binary_crossentropy_logits(p, "typo"), lambda: x.cross_entropy(y, label_smoothing=1.5)):
    with pytest.raises(ValueError): f()
  with pytest.raises(ValueError): F.cross_entropy(torch.ones(4, 3), torch.ones(4, 3), reduction="typo")
  for f, tf in ((lambda: x.cross_entropy(Tensor.ones(4, 1)), lambda: F.cross_entropy(torch.ones(4, 3), torch.ones(4, 1))),
                (lambda: x.cross_entropy(Tensor([0, 1])), lambda: F.cross_entropy(torch.ones(4, 3), torch.tensor([0, 1]))),
                (lambda: x.nll_loss(Tensor([[0, 1]])), lambda: F.nll_loss(torch.ones(4, 3), torch.tensor([[0, 1]])))):
    with pytest.raises(RuntimeError): f()
    with pytest.raises((RuntimeError, ValueError)): tf()


@pytest.mark.parametrize("reduction", RED)
def test_binary_crossentropy(reduction):
  p, y, b = _data((4, 5), low=0.05, high=0.95), RNG.integers(0, 2, size=(4, 5)).astype(np.float32), Batch()
  b.op("bce", lambda t: t.binary_crossentropy(Tensor(y), reduction),
       lambda t: F.binary_cross_entropy(t, torch.tensor(y), reduction=reduction), p)
  # probabilities at exactly 0 and 1: torch clamps each log at -100, no NaN
  edge, ye = np.array([0.0, 1.0, 0.0, 1.0], np.float32), np.array([0.0, 1.0, 1.0, 0.0], np.float32)
  b.add("bce edges", Tensor(edge).binary_crossentropy(Tensor(ye), reduction),
        F.binary_cross_entropy(torch.tensor(edge), torch.tensor(ye), reduction=reduction))
  pw = RNG.uniform(0.25, 4, size=(5,)).astype(np.float32)
  x = _data((4, 5), low=-4, high=4)
  x[0, :2], x[1, :2] = (-100.0, 100.0), (30.0, -30.0)  # large logits: no overflow, forward or backward
  q = RNG.uniform(0, 1, size=(4, 5)).astype(np.float32)
  b.op("logits", lambda t, u: t.binary_crossentropy_logits(u, reduction),
       lambda t, u: F.binary_cross_entropy_with_logits(t, u, reduction=reduction), x, q)
  b.op("pos_weight", lambda t, u: t.binary_crossentropy_logits(u, reduction, pos_weight=Tensor(pw)),
       lambda t, u: F.binary_cross_entropy_with_logits(t, u, reduction=reduction, pos_weight=torch.tensor(pw)), x, q)
  b.check()


def test_normalize():
  x, b = _data((3, 4)), Batch()
  x[1] = 0.0  # a zero row is divided by eps, not by 0
  for p, dim in ((2.0, 1), (1.0, 0), (3.0, -1), (INF, 1), (0, 1)):
    b.op(f"p={p} dim={dim}", lambda t: t.normalize(p, dim), lambda t: F.normalize(t, p, dim), x, grad=p != 0)
  b.check()


ATTN = [{}, {"is_causal": True}, {"mask": "bool"}, {"mask": "float"}, {"enable_gqa": True},
        {"enable_gqa": True, "is_causal": True}, {"scale": 0.3}]


def test_scaled_dot_product_attention():
  b = Batch()
  for kw in ATTN:
    kw = dict(kw)
    hk = 2 if kw.get("enable_gqa") else 4
    q, k, v = _data((2, 4, 5, 8)), _data((2, hk, 6, 8)), _data((2, hk, 6, 8))
    mask = kw.pop("mask", None)
    m = None if mask is None else (RNG.uniform(size=(5, 6)) > 0.3) if mask == "bool" else _data((5, 6))
    if mask == "bool": m[:, 0] = True  # every row attends somewhere
    b.op(str(kw), lambda x, y, z: x.scaled_dot_product_attention(y, z, None if m is None else Tensor(m), **kw),
         lambda x, y, z: F.scaled_dot_product_attention(x, y, z, None if m is None else torch.tensor(m), **kw), q, k, v)
  h = Tensor(_data((1, 2, 3, 8), np.float16))  # half: scores in float32, the result in half
  th = torch.tensor(h.numpy()).float()
  b.add("half", h.scaled_dot_product_attention(h, h), F.scaled_dot_product_attention(th, th, th).half(), 2e-3, 2e-3,
        dtype=dtypes.float16)
  b.check()
  q, k = Tensor.ones(1, 3, 4, 8), Tensor.ones(1, 2, 4, 8)
  # a mask with is_causal: tinygrad's RuntimeError (torch raises it only on its autograd path)
  with pytest.raises(RuntimeError): q.scaled_dot_product_attention(q, q, Tensor.ones(4, 4), is_causal=True)
  with pytest.raises(RuntimeError): q.scaled_dot_product_attention(k, k, enable_gqa=True)
  with pytest.raises(RuntimeError):
    F.scaled_dot_product_attention(torch.ones(1, 3, 4, 8), torch.ones(1, 2, 4, 8), torch.ones(1, 2, 4, 8), enable_gqa=True)


def test_reduce_axis_errors():
  for f in (Tensor.sum, Tensor.max, Tensor.mean, Tensor.argmax, Tensor.logsumexp):
    with pytest.raises(IndexError): f(Tensor.ones(3), 1)
    with pytest.raises(IndexError): f(Tensor.ones(3, 2), -3)
    with pytest.raises(IndexError): f(Tensor(1.0), 1)
  with pytest.raises(IndexError): Tensor.ones(3, 2).sum((0, 2))
  # argmax over an empty axis has no answer (torch raises too; tinygrad returns a garbage index)
  with pytest.raises(IndexError): Tensor.ones(2, 0).argmax(1)
  with pytest.raises(IndexError): Tensor([]).argmin()


def test_linear_allclose_newton_schulz():
  b, x, w, bias = Batch(), _data((3, 4)), _data((4, 5)), _data((5,))
  b.op("linear", lambda t, u, c: t.linear(u, c), lambda t, u, c: t @ u + c, x, w, bias)
  b.op("linear 1-D weight", lambda t, u: t.linear(u), lambda t, u: t * u, x, _data((4,)))
  b.add("allclose", Tensor(x).allclose(Tensor(x + 1e-9)), np.array(True), dtype=dtypes.bool)
  b.add("not allclose", Tensor(x).allclose(Tensor(x + 1e-3)), np.array(False))
  g = _data((6, 4))  # tall: iterated on its transpose, where G G^T is the smaller Gram matrix
  ref = g.T.astype(np.float64) / (np.linalg.norm(g) + 1e-7)
  for _ in range(3): ref = 3.4445 * ref + (-4.775 * (gram := ref @ ref.T) + 2.0315 * gram @ gram) @ ref  # Muon's quintic, in numpy
  b.add("newton_schulz", Tensor(g).newton_schulz(3, (3.4445, -4.775, 2.0315)), ref.T, 1e-4, 1e-4)
  b.check()


@pytest.mark.parametrize("shape", [(4, 3), (3, 3), (3, 5), (2, 4, 4), (5, 1)], ids=str)
def test_qr_svd(shape):
  a, b = _data(shape), Batch()
  (q, r), (tq, tr) = Tensor(a).qr(), torch.linalg.qr(torch.tensor(a), mode="complete")
  b.add("Q", q, tq, 1e-5, 1e-5)
  b.add("R", r, tr, 1e-5, 1e-5)
  (u, s, vh), ts = Tensor(a).svd(), torch.linalg.svd(torch.tensor(a)).S
  k = min(shape[-2:])
  # singular vectors are unique only up to sign: check S, the reconstruction and the orthogonality of U and Vh
  b.add("S", s, ts, 1e-5, 1e-5)
  b.add("U S Vh", u[..., :, :k] @ (s.unsqueeze(-1) * vh[..., :k, :]), a, 1e-5, 1e-5)
  eye = lambda d: np.broadcast_to(np.eye(d, dtype=np.float32), shape[:-2] + (d, d))  # noqa: E731
  b.add("U^T U", u.transpose(-2, -1) @ u, eye(shape[-2]), 1e-5, 1e-5)
  b.add("Vh Vh^T", vh @ vh.transpose(-2, -1), eye(shape[-1]), 1e-5, 1e-5)
  u2, _, vh2 = Tensor(a).svd(full_matrices=False)
  tu2, _, tvh2 = torch.linalg.svd(torch.tensor(a), full_matrices=False)
  assert u2.shape == tuple(tu2.shape) and vh2.shape == tuple(tvh2.shape)
  b.op("S grad", lambda t: t.svd()[1], lambda t: torch.linalg.svd(t).S, a, atol=1e-4, rtol=1e-4)
  b.check()
  with pytest.raises(RuntimeError): Tensor.ones(3).qr()
  with pytest.raises(RuntimeError): Tensor.ones(3).svd()
