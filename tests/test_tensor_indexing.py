"""Indexing against torch (and numpy where torch has no equivalent, e.g. negative slice steps): __getitem__ with ints,
slices, None, Ellipsis, int/bool tensors and lists; __setitem__; gather, scatter, scatter_reduce; masked ops; one_hot,
roll, diag/diagonal, unfold, nonzero, masked_select; forward values, gradients and the errors bad indices raise.

Every distinct kernel is compiled once (cached on disk), so the plain-view getitem cases are checked in one batch: all
of their results are concatenated into one tensor and realized by one kernel, then split and compared per case."""
import numpy as np
import pytest
import torch

from tinyhybrid import Tensor, dtypes
from batching import realize_batched

RNG = np.random.default_rng(1)
A = RNG.uniform(-5, 5, size=(3, 5, 7)).astype(np.float32)
A_INT = np.arange(3 * 5 * 7, dtype=np.int32).reshape(3, 5, 7) - 50
_ = slice(None)


def _id(idx) -> str:
  def one(i):
    if isinstance(i, slice):
      return f"{'' if i.start is None else i.start}:{'' if i.stop is None else i.stop}{'' if i.step is None else ':' + str(i.step)}"
    if i is Ellipsis: return "..."
    if isinstance(i, np.ndarray): return f"arr{list(i.shape)}"
    return repr(i).replace(" ", "")
  return ",".join(one(i) for i in (idx if isinstance(idx, tuple) else (idx,)))


def _close(ours: np.ndarray, ref, exact: bool = False) -> None:
  ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
  assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
  if exact: np.testing.assert_array_equal(ours, ref)
  else: np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


# ** basic getitem: one batched kernel; the reference is numpy (its basic indexing is torch's, plus negative steps) **
BASIC = [
  0, -1, 2, (1, 2), (-3, -5, -7), (2, 4, 6), (_, 1), (_, _, -1), (..., 0), (0, ...), (1, ..., 3), (...,),
  slice(1, 3), slice(-2, None), slice(None, -1), slice(5, 10), slice(-10, 2), slice(2, 1), slice(3, 3),
  (_, slice(None, None, 2)), (_, slice(1, None, 2)), (_, _, slice(None, None, 3)), (_, _, slice(1, 6, 4)),
  (_, _, slice(0, 7, 7)), (_, slice(None, None, 5)), (_, _, slice(2, None, 10)),
  slice(None, None, -1), (_, slice(None, None, -2)), (_, _, slice(None, None, -3)), (_, slice(3, 0, -1)),
  (_, _, slice(5, 1, -2)), (_, _, slice(-1, -8, -4)), (_, slice(1, 4, -1)), (slice(2, 0, -1), slice(None, None, -2), slice(6, None, -5)),
  None, (None, 0), (_, None, 1), (..., None), (None, ..., None), (1, None, slice(None, None, -2), None, 3), (None, None),
  (0, slice(None, None, 2), slice(None, None, -3)), (slice(1, None), 2, slice(1, -1, 2)), (-1, -1, slice(None, None, -1)),
  (True,), (_, False), (), (..., slice(None, None, 2), None),
]


@pytest.fixture(scope="module")
def basic_batch():
  x = Tensor(A)
  return realize_batched([x[idx] for idx in BASIC])


@pytest.mark.parametrize("i", range(len(BASIC)), ids=[_id(b) for b in BASIC])
def test_getitem_basic(basic_batch, i):
  _close(basic_batch[i], A[BASIC[i]], exact=True)


@pytest.mark.parametrize("idx", [(1, slice(None, None, -2)), (slice(None, None, 2), 3), (_, slice(1, 4), slice(None, None, -3))], ids=_id)
def test_getitem_basic_standalone(idx):
  # the same paths realized as their own kernels (not through the batch's concatenation)
  _close(Tensor(A)[idx].numpy(), A[idx], exact=True)


def test_getitem_chained_views():
  x = Tensor(A)
  y = x[1:, ::-1][:, 1::2][..., ::3].permute(2, 0, 1)[::-1]
  ref = A[1:, ::-1][:, 1::2][..., ::3].transpose(2, 0, 1)[::-1]
  _close(y.numpy(), ref, exact=True)
  # views of non-contiguous realized tensors and of lazy expressions
  z = (x.permute(2, 0, 1) * 2)[3:, ::-2, 1]
  _close(z.numpy(), (A.transpose(2, 0, 1) * 2)[3:, ::-2, 1])


@pytest.mark.parametrize("dtype", ["int32", "bool"])
def test_getitem_dtypes(dtype):
  a = A_INT if dtype == "int32" else A_INT % 3 == 0
  x = Tensor(a)
  outs = [x[1, ::-2], x[:, [4, 0, 0]], x[[2, 0], :, [-1, 1]], x[..., None, 3]]
  ta = torch.tensor(a)
  refs = [a[1, ::-2], ta[:, [4, 0, 0]], ta[[2, 0], :, [-1, 1]], ta[..., None, 3]]
  for o, r in zip(outs, refs):
    assert o.dtype is (dtypes.int32 if dtype == "int32" else dtypes.bool)
    _close(o.numpy(), r, exact=True)


def test_getitem_zero_size():
  x = Tensor(np.zeros((0, 4), np.float32))
  assert x[:, 1].shape == (0,) and x[..., 1:3].shape == (0, 2) and x[:, [0, 3]].shape == (0, 2)
  y = Tensor(A)
  assert y[2:2].shape == (0, 5, 7) and y[:, 5:].shape == (3, 0, 7) and y[[]].shape == (0, 5, 7)
  assert y[:, Tensor(np.zeros((0,), np.int32))].shape == (3, 0, 7)
  _close(y[1:1, [0, 1]].numpy(), np.zeros((0, 2, 7), np.float32))
  assert Tensor(3.0)[None].shape == (1,) and Tensor(3.0)[...].shape == () and Tensor(3.0)[()].item() == 3.0


# ** advanced (tensor / list) getitem against torch: torch's placement of the indexed dimensions **
def _t(*v): return np.array(v, dtype=np.int32)

FANCY = [
  (_t(0, 2, 2, 1),), (_t(-1, 0),), ([[0, 1], [2, 0]],), (_, _t(4, 0, 3)), (_, _, _t(6, -7, 0)),
  (_t(0, 2), _t(1, 3)), (_, _t(1, 3), _t(2, 0)), (_t(1, 2), _t(0, 4), _t(6, 5)),
  (_, _t([0], [4]), _t(1, 2, 3)), (_t([0], [2]), _, _t(0, 6)), (1, _, _t(1, 2)), (_, 0, _t(3, 4)), (_t(0, 1), 2, _, ),
  (None, _, _t(0, 1), None, _t(2, 3)), (_t(2,), ..., _t(1,)),
  (slice(None, None, 2), _t(4, 1), slice(1, None, 3)), (_t(1, 0), slice(1, 4), 5), (np.int32(2), _t(0, 1)),
]


def _ref_idx(idx):
  return tuple(torch.tensor(i, dtype=torch.long) if isinstance(i, np.ndarray) else i for i in (idx if isinstance(idx, tuple) else (idx,)))


@pytest.mark.parametrize("idx", FANCY, ids=_id)
def test_getitem_fancy(idx):
  ours = Tensor(A)[tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)]
  _close(ours.numpy(), torch.tensor(A)[_ref_idx(idx)])


def test_getitem_fancy_index_tensors():
  x = Tensor(A)
  # int64 / int8 / 0-d / negative index tensors, a lazy index expression, and tuples as index lists
  _close(x[Tensor(np.array([2, -3], np.int64))].numpy(), A[[2, 0]])
  _close(x[:, Tensor(np.array([-1, 3], np.int8))].numpy(), A[:, [4, 3]])
  _close(x[Tensor(1), :, Tensor(-2)].numpy(), A[1, :, -2])
  _close(x[(Tensor.arange(3) * 2) % 3].numpy(), A[[0, 2, 1]])
  _close(x[(0, 2), ].numpy(), A[[0, 2]])
  _close(x[np.array(2), np.array([1, -1])].numpy(), A[2, [1, -1]])
  # out-of-range values inside an index tensor select 0 (nothing is read back to check them, as in tinygrad)
  _close(Tensor([1.0, 2.0, 3.0])[Tensor([5, 1])].numpy(), np.array([0.0, 2.0], np.float32))


def test_getitem_fancy_is_lazy_and_fused():
  # an index tensor is compared with an arange: no realize happens while the graph is built
  idx = Tensor([0, 2]) + 0
  out = Tensor(A)[idx, 1:3]
  assert out.uop.op.name not in ("BUFFER",) and out.shape == (2, 2, 7)
  _close(out.numpy(), A[[0, 2], 1:3])


def test_getitem_bool_mask():
  m0 = np.array([True, False, True])
  m2 = A[0] > 0
  x, tx = Tensor(A), torch.tensor(A)
  _close(x[m0.tolist()].numpy(), tx[m0.tolist()])
  _close(x[:, Tensor(m2)].numpy(), tx[:, torch.tensor(m2)])
  _close(x[Tensor(A > 4)].numpy(), tx[torch.tensor(A > 4)])


# ** gradients of getitem **
GRAD = [
  (1, slice(None, None, -2)), (_, slice(None, None, 3), slice(5, 0, -2)), (None, ..., 2),
  (_t(0, 0, 2),), (_, _t(1, 1, 4), slice(None, None, 2)), (_t(2, 0), _, _t(6, 6)), (_t([1], [2]), 3, _t(0, 1, 2)),
]


@pytest.mark.parametrize("idx", GRAD, ids=_id)
def test_getitem_grad(idx):
  x = Tensor(A, requires_grad=True)
  out = x[tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)]
  w = RNG.uniform(-1, 1, size=out.shape).astype(np.float32)
  (out * Tensor(w)).sum().backward()
  if any(isinstance(i, slice) and (i.step or 1) < 0 for i in idx):
    # torch has no negative steps: the gradient of sum(x[idx] * w) is w accumulated into x[idx]
    ref = np.zeros_like(A)
    np.add.at(ref, idx, w)
  else:
    tx = torch.tensor(A, requires_grad=True)
    (tx[_ref_idx(idx)] * torch.tensor(w)).sum().backward()
    ref = tx.grad
  _close(x.grad.numpy(), ref)


# ** setitem **
SETS = [
  ((0, slice(1, 4)), 5.0), ((_, slice(None, None, 2), slice(None, None, -3)), -1.5), ((..., slice(None, None, 3)), "row3"),
  ((_, _, slice(None, None, 4)), 7.0), ((_, 2), "row7"), ((slice(None, None, -1), 0, slice(0, 7, 7)), "col3"), ((1,), "bcast57"),
  ((None, 1, ..., 2), 3), ((_, slice(None, None, 3), slice(1, None, 5)), "blk22"),
  ((_t(2, 0),), "bcast57"), ((_, _t(0, 3), _t(1, 2)), -1.0), ((_t(1, 2), _, _t(6, 0)), "fancy25"), ((_, _t(4, 4, 1)), 0.5),
  ((slice(None, None, 2), _t(0, 4), slice(None, None, -3)), "fancy232"), ((_, 1, _t(1, 2)), "row2"),
]


def _val(kind):
  shapes = {"row3": (3,), "row7": (7,), "col3": (3, 1), "bcast57": (5, 7), "blk22": (2, 2), "fancy25": (2, 5), "fancy232": (2, 2, 3), "row2": (2,)}
  return RNG.uniform(-9, 9, size=shapes[kind]).astype(np.float32) if isinstance(kind, str) else kind


@pytest.mark.parametrize("idx,v", SETS, ids=[_id(s[0]) for s in SETS])
def test_setitem(idx, v):
  v = _val(v)
  x = Tensor(A.copy())
  x[tuple(Tensor(i) if isinstance(i, np.ndarray) else i for i in idx)] = Tensor(v) if isinstance(v, np.ndarray) else v
  if any(isinstance(i, np.ndarray) for i in idx) and not any(isinstance(i, slice) and (i.step or 1) < 0 for i in idx):
    ref = torch.tensor(A)
    ref[_ref_idx(idx)] = torch.tensor(v) if isinstance(v, np.ndarray) else v
  else:
    ref = A.copy()
    ref[idx] = v
  _close(x.numpy(), ref)


def test_setitem_dtypes_and_values():
  x = Tensor(A_INT.copy())
  x[1, ::2] = 7
  x[0] = Tensor(np.full((5, 7), 2.9, np.float32)).cast(x.dtype)  # another dtype is a RuntimeError (tinygrad): cast first
  x[2, [0, 4], 1:3] = [[-1, -2], [-3, -4]]
  ref = A_INT.copy()
  ref[1, ::2] = 7
  ref[0] = 2
  ref[2, [0, 4], 1:3] = [[-1, -2], [-3, -4]]
  _close(x.numpy(), ref, exact=True)
  b = Tensor(np.zeros((4, 3), bool))
  b[1:3, ::-2] = True
  b[Tensor([3]), 1] = Tensor(True)
  rb = np.zeros((4, 3), bool)
  rb[1:3, ::-2] = True
  rb[3, 1] = True
  _close(b.numpy(), rb, exact=True)


def test_setitem_views_and_laziness():
  # a view writes through to the tensor it views (torch semantics)
  x = Tensor(A.copy())
  y = x[1:, ::-1]
  y[0, 1] = 100.0
  ref = A.copy()
  ref[1:, ::-1][0, 1] = 100.0
  _close(x.numpy(), ref)
  _close(y.numpy(), ref[1:, ::-1])
  # a lazy tensor (not yet memory) is realized, then written
  z = Tensor.zeros(3, 4)
  z[1] = 2.0
  z[:, -1] = Tensor([1.0, 2.0, 3.0])
  rz = np.zeros((3, 4), np.float32)
  rz[1] = 2.0
  rz[:, -1] = [1, 2, 3]
  _close(z.numpy(), rz)
  # overlapping source and target: the source is read before the write (numpy's result)
  w = Tensor(np.arange(6, dtype=np.float32))
  w[1:] = w[:-1]
  _close(w.numpy(), np.array([0, 0, 1, 2, 3, 4], np.float32))
  # a padded or expanded tensor is copied before the write: its source stays untouched
  s = Tensor(np.ones(3, np.float32))
  p = s.pad(((1, 1),))
  p[0] = 5.0
  _close(p.numpy(), np.array([5, 1, 1, 1, 0], np.float32))
  _close(s.numpy(), np.ones(3, np.float32))


def test_setitem_with_a_pending_reader_raises_as_tinygrad():
  # a live lazy tensor that reads the target would see the write or not depending on when it runs: tinygrad refuses
  # the write (RuntimeError), views of the written buffer see it, and the value may read the target (x[i] += y)
  x = Tensor(np.arange(4, dtype=np.float32))
  y, view = x + 1, x[1:]
  with pytest.raises(RuntimeError, match="other uses"): x[:2] = 100.0
  _close(x.numpy(), np.arange(4, dtype=np.float32))  # nothing was written
  _close(y.numpy(), np.array([1, 2, 3, 4], np.float32))
  x[:2] = 100.0  # y is realized now: it reads its own memory
  _close(view.numpy(), np.array([100, 2, 3], np.float32))
  _close(x.numpy(), np.array([100, 100, 2, 3], np.float32))
  x[1:3] += x[:2] * 2
  _close(x.numpy(), np.array([100, 300, 202, 3], np.float32))


def test_setitem_duplicate_index_last_wins():
  x = Tensor(np.zeros(5, np.float32))
  x[Tensor([1, 3, 1])] = Tensor([10.0, 20.0, 30.0])
  _close(x.numpy(), np.array([0, 30, 0, 20, 0], np.float32))


def test_setitem_in_place_ops():
  x = Tensor(A.copy())
  x[0] += 1
  x[:, 1:3] *= 2
  ref = A.copy()
  ref[0] += 1
  ref[:, 1:3] *= 2
  _close(x.numpy(), ref)


# ** gather / scatter / scatter_reduce **
@pytest.mark.parametrize("dim,ishape", [(0, (2, 5, 7)), (1, (3, 3, 2)), (-1, (2, 4, 9))])
def test_gather(dim, ishape):
  idx = RNG.integers(0, A.shape[dim], size=ishape)
  x, tx = Tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
  out, tout = x.gather(dim, Tensor(idx.astype(np.int32))), tx.gather(dim, torch.tensor(idx))
  _close(out.numpy(), tout)
  w = RNG.uniform(-1, 1, size=ishape).astype(np.float32)
  (out * Tensor(w)).sum().backward()
  (tout * torch.tensor(w)).sum().backward()
  _close(x.grad.numpy(), tx.grad)


def test_gather_int_dtype():
  idx = np.array([[0, 4], [2, 2], [1, 0]])
  _close(Tensor(A_INT[:, :, 0]).gather(1, Tensor(idx)).numpy(), torch.tensor(A_INT[:, :, 0]).gather(1, torch.tensor(idx)), exact=True)


def test_gather_reads_only_the_rows_it_picks():
  # a lookup written as a one-hot sum (x[idx], gather, Embedding) is one indexed load per output element, not a loop
  # over every row of the table: its work does not grow with the table; out-of-range gather indices still give 0
  from tinyhybrid import GlobalCounters
  table = RNG.uniform(-1, 1, size=(50000, 8)).astype(np.float32)
  t, idx = Tensor(table).realize(), np.array([[3, 49999, 0], [7, 7, 12345]], dtype=np.int32)
  GlobalCounters.reset()
  np.testing.assert_array_equal(t[Tensor(idx)].numpy(), table[idx])
  assert GlobalCounters.global_ops < 1000, GlobalCounters.global_ops
  gidx = np.array([[0, 5, 60000, -1]], dtype=np.int32).T.repeat(8, 1)
  np.testing.assert_array_equal(t.gather(0, Tensor(gidx)).numpy(), np.where((gidx >= 0) & (gidx < 50000), table[gidx.clip(0, 49999), np.arange(8)], 0))


SRC = RNG.uniform(-3, 3, size=(4, 6)).astype(np.float32)
BASE = RNG.uniform(-3, 3, size=(5, 6)).astype(np.float32)


@pytest.mark.parametrize("dim,idx", [(0, [[0, 1, 2, 3, 4, 0], [4, 3, 1, 1, 0, 1]]), (1, [[5, 0], [1, 2], [4, 3]]), (-1, [[0, 1, 2, 3, 4, 5]])])
def test_scatter(dim, idx):
  idx = np.array(idx)
  ours = Tensor(BASE).scatter(dim, Tensor(idx), Tensor(SRC))
  _close(ours.numpy(), torch.tensor(BASE).scatter(dim, torch.tensor(idx), torch.tensor(SRC)))
  ours = Tensor(BASE).scatter(dim, Tensor(idx), 2.5)
  _close(ours.numpy(), torch.tensor(BASE).scatter(dim, torch.tensor(idx), 2.5))
  if dim == 0:  # gradients flow to both the tensor and src
    src = SRC[:idx.shape[0], :idx.shape[1]].copy()  # torch differentiates src only when it has the index's shape
    b, s = Tensor(BASE, requires_grad=True), Tensor(src, requires_grad=True)
    tb, ts = torch.tensor(BASE, requires_grad=True), torch.tensor(src, requires_grad=True)
    w = RNG.uniform(-1, 1, size=BASE.shape).astype(np.float32)
    (b.scatter(0, Tensor(idx), s) * Tensor(w)).sum().backward()
    (tb.scatter(0, torch.tensor(idx), ts) * torch.tensor(w)).sum().backward()
    _close(b.grad.numpy(), tb.grad)
    _close(s.grad.numpy(), ts.grad)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  idx = np.array([[0, 0, 4, 4, 1, 0], [0, 2, 4, 4, 1, 0], [0, 2, 2, 4, 3, 0]])  # duplicates, and rows never hit
  ours = Tensor(BASE).scatter_reduce(0, Tensor(idx), Tensor(SRC), reduce, include_self=include_self)
  ref = torch.tensor(BASE).scatter_reduce(0, torch.tensor(idx), torch.tensor(SRC), reduce, include_self=include_self)
  _close(ours.numpy(), ref)

def test_gather_on_a_gpu_is_not_split():
  """A GPU splits a long reduce in two kernels (schedule/kernelize.pm_split_reduces), but not the one-hot sum of a
  lookup, which the lowering turns into one load per output: planned for an H200, the gather stays that cheap."""
  from tinyhybrid import GlobalCounters
  t = Tensor.empty(50000, 8, device="NULL:CUDA:sm_90").realize()
  GlobalCounters.reset()
  t[Tensor([[3, 49999, 0], [7, 7, 12345]], device="NULL:CUDA:sm_90")].realize()
  assert GlobalCounters.global_ops < 1000, GlobalCounters.global_ops



def test_scatter_reduce_modes_int():
  idx = np.array([[0, 1, 0], [1, 1, 0]])
  b, s = np.arange(6, dtype=np.int32).reshape(2, 3), np.array([[3, -4, 5], [7, 2, -1]], np.int32)
  for mode in ("add", "multiply"):
    _close(Tensor(b).scatter(0, Tensor(idx), 3, reduce=mode).numpy(), torch.tensor(b).scatter(0, torch.tensor(idx), 3, reduce=mode), exact=True)
  for red in ("sum", "amax", "amin"):
    ref = torch.tensor(b).scatter_reduce(1, torch.tensor(idx), torch.tensor(s), red, include_self=False)
    _close(Tensor(b).scatter_reduce(1, Tensor(idx), Tensor(s), red, include_self=False).numpy(), ref, exact=True)


# ** masks, one_hot, roll and friends **
def test_masked_fill_and_select():
  m = A[0] > 1
  x, tx = Tensor(A), torch.tensor(A)
  _close(x.masked_fill(Tensor(m), -7.0).numpy(), tx.masked_fill(torch.tensor(m), -7.0))
  _close(x.masked_fill(Tensor(A > 0), Tensor(0.5)).numpy(), tx.masked_fill(torch.tensor(A > 0), torch.tensor(0.5)))
  _close(Tensor(A_INT).masked_fill(Tensor(A_INT % 2 == 0), 1).numpy(), torch.tensor(A_INT).masked_fill(torch.tensor(A_INT % 2 == 0), 1), exact=True)
  _close(x.masked_select(Tensor(m)).numpy(), tx.masked_select(torch.tensor(m)))
  sel = A[np.broadcast_to(m, A.shape)]
  _close(x.masked_select(Tensor(m), size=30, fill_value=-1).numpy(), np.concatenate([sel, np.full(30, -1, np.float32)])[:30])
  assert x.masked_select(Tensor(np.zeros((5, 7), bool))).shape == (0,)


def test_nonzero():
  a = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
  _close(Tensor(a).nonzero().numpy(), torch.tensor(a).nonzero(), exact=True)
  _close(Tensor(a).nonzero(size=4, fill_value=-1).numpy(), np.array([[0, 1], [1, 0], [1, 2], [-1, -1]]), exact=True)
  assert Tensor(np.zeros((2, 2), np.float32)).nonzero().shape == (0, 2)


@pytest.mark.parametrize("num_classes", [4, 6])
def test_one_hot(num_classes):
  a = np.array([[0, 3], [1, 1], [2, 0]])
  ours = Tensor(a).one_hot(num_classes)
  assert ours.dtype._is_int
  _close(ours.numpy(), torch.nn.functional.one_hot(torch.tensor(a), num_classes), exact=True)


@pytest.mark.parametrize("shifts,dims", [(2, 0), (-3, 1), ((1, -2), (0, 2)), (12, -1), (4, None), (0, 1), ((1, 1), (1, 1))])
def test_roll(shifts, dims):
  x, tx = Tensor(A, requires_grad=True), torch.tensor(A, requires_grad=True)
  out, ref = x.roll(shifts, dims), tx.roll(shifts, dims)
  _close(out.numpy(), ref)
  if shifts == 2:
    w = RNG.uniform(-1, 1, size=A.shape).astype(np.float32)
    (out * Tensor(w)).sum().backward()
    (ref * torch.tensor(w)).sum().backward()
    _close(x.grad.numpy(), tx.grad)


def test_diag_diagonal_unfold_repeat_interleave():
  v, m = np.array([1.0, -2.0, 3.0], np.float32), A[0]
  x, tx = Tensor(A), torch.tensor(A)
  ours = [Tensor(v).diag(k) for k in (0, 1, -2)] + [Tensor(m).diag(k) for k in (0, 2, -3, 9)]
  refs = [torch.tensor(v).diag(k) for k in (0, 1, -2)] + [torch.tensor(m).diag(k) for k in (0, 2, -3, 9)]
  ours += [x.diagonal(1, 0, 2), x.diagonal(-1, -1, 1), x.unfold(2, 3, 2), x.unfold(0, 2, 1)]
  refs += [tx.diagonal(1, 0, 2), tx.diagonal(-1, -1, 1), tx.unfold(2, 3, 2), tx.unfold(0, 2, 1)]
  ours += [Tensor(v).repeat_interleave(3), Tensor(m).repeat_interleave(2, dim=0)]
  refs += [torch.tensor(v).repeat_interleave(3), torch.tensor(m).repeat_interleave(2, dim=0)]
  gx, gy = Tensor([1.0, 2.0, 3.0]).meshgrid(Tensor([4.0, 5.0]), indexing="xy")
  ours += [gx, gy]
  refs += list(torch.meshgrid(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0]), indexing="xy"))
  for o, r in zip(realize_batched(ours), refs): _close(o, r)
  assert x.size() == (3, 5, 7) and x.size(-1) == 7


def test_tril_triu_with_getitem():
  m = Tensor(A)[1, :, ::-1]
  _close(m.tril(1).numpy(), np.tril(A[1, :, ::-1], 1))
  _close(m.triu(-1).numpy(), np.triu(A[1, :, ::-1], -1))


# ** errors **
@pytest.mark.parametrize("idx,exc,words", [
  (3, IndexError, ["3", "dimension 0", "(3, 5, 7)"]), (-4, IndexError, ["-4", "dimension 0"]),
  ((0, 5), IndexError, ["5", "dimension 1", "size 5"]), ((0, 0, -8), IndexError, ["-8", "dimension 2"]),
  ((0, 0, 0, 0), IndexError, ["too many indices"]), ((..., 1, ...), IndexError, ["ellipsis"]),
  ([0, 3], IndexError, ["3", "out of bounds"]), ((_, [[5]]), IndexError, ["5"]),
  (1.5, IndexError, ["float"]), ("a", IndexError, ["str"]), ([0.5, 1.0], IndexError, ["int"]),
  (slice(None, None, 0), ValueError, ["step"]), (slice(0.5, 2), TypeError, ["slice"]),
  (([0, 1], [0, 1, 2]), IndexError, ["broadcast"]), (np.array([True, False]), IndexError, ["mask"]),
])
def test_getitem_errors(idx, exc, words):
  with pytest.raises(exc) as e: Tensor(A)[idx]
  for w in words: assert w in str(e.value), str(e.value)


def test_index_tensor_dtype_errors():
  with pytest.raises(IndexError, match="int"): Tensor(A)[Tensor([0.0, 1.0])]


def test_setitem_errors():
  x = Tensor(A.copy())
  with pytest.raises(ValueError, match="broadcast"): x[0] = Tensor(np.ones(3, np.float32))
  with pytest.raises(ValueError, match="broadcast"): x[[0, 1], 1] = Tensor(np.ones((3, 7), np.float32))
  with pytest.raises(IndexError): x[3] = 1.0
  _close(x.numpy(), A)  # nothing was written


def test_gather_scatter_errors():
  x = Tensor(A)
  with pytest.raises(RuntimeError, match="dimensions"): x.gather(0, Tensor([0, 1]))
  with pytest.raises(RuntimeError, match="int"): x.gather(0, Tensor(np.zeros((1, 1, 1), np.float32)))
  with pytest.raises(RuntimeError, match="larger"): x.gather(0, Tensor(np.zeros((1, 6, 1), np.int32)))
  with pytest.raises(IndexError): x.gather(3, Tensor(np.zeros((1, 1, 1), np.int32)))
  with pytest.raises(RuntimeError, match="reduce"): Tensor(BASE).scatter_reduce(0, Tensor([[0]]), Tensor(SRC), "max")
  with pytest.raises(TypeError, match="reduce"): Tensor(BASE).scatter(0, Tensor([[0]]), 1.0, reduce="sum")
  with pytest.raises(RuntimeError): Tensor(BASE).scatter(0, Tensor(np.zeros((5, 7), np.int32)), Tensor(SRC))
  with pytest.raises(RuntimeError): Tensor([1.0, 2.0]).one_hot(3)
  with pytest.raises(RuntimeError): Tensor([1, 2]).roll((1, 2), 0)
  with pytest.raises(TypeError): x.masked_fill(Tensor(A > 0).cast(dtypes.int32), 1.0)
  with pytest.raises(TypeError): del x[0]


@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.uint8])
def test_dtypes_getitem_gather_setitem(dtype):
  a = (np.arange(24).reshape(4, 6) % 7).astype(dtype)
  t = Tensor(a)
  idx = np.array([[0], [1], [2], [5]])
  np.testing.assert_array_equal(t[[0, 3], 1::2].numpy(), a[[0, 3], 1::2])
  np.testing.assert_array_equal(t.gather(1, Tensor(idx)).numpy(), np.take_along_axis(a, idx, 1))
  t[1, ::-2] = 3
  t[[2, 3], 0] = Tensor(np.array([5, 4], dtype))
  a = a.copy()
  a[1, ::-2] = 3
  a[[2, 3], 0] = [5, 4]
  np.testing.assert_array_equal(t.numpy(), a)
  assert t.numpy().dtype == a.dtype


# ** core bugs found while building indexing (tensor.py / codegen/lower.py); expected to fail until fixed there **
def test_core_bug_tensor_from_0d_ndarray_shape():
  assert Tensor(np.array(5.0, np.float32)).shape == ()


def test_core_bug_read_pending_assign_on_view():
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
  y = x[:, 1:3]
  y.assign(y * 10)
  np.testing.assert_array_equal((y + 0).numpy(), np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1:3] * 10)


def test_core_gap_assign_through_padded_then_shrunk_view():
  x = Tensor(np.arange(5, dtype=np.float32))
  v = x.pad(((0, 1),)).reshape(3, 2).shrink(((0, 3), (0, 1))).reshape(3)
  v.assign(Tensor([7.0, 8.0, 9.0])).realize()
  np.testing.assert_array_equal(x.numpy(), np.array([7, 1, 8, 3, 9], np.float32))


@pytest.mark.parametrize("name", [":,i,j", "i,:,j", "0,i,j"])
def test_several_index_tensors_gather_without_one_hot_work(name):
  from tinyhybrid.helpers import GlobalCounters
  rng = np.random.default_rng(0)
  src_np = rng.random((10, 100, 200), dtype=np.float32)
  i1, i2 = rng.integers(0, 100, (50, 60), dtype=np.int32), rng.integers(0, 200, (50, 60), dtype=np.int32)
  src, t1, t2 = Tensor(src_np).realize(), Tensor(i1).realize(), Tensor(i2).realize()
  ours, ref = {":,i,j": (lambda: src[:, t1, t2], src_np[:, i1, i2]), "i,:,j": (lambda: src[t1 % 10, :, t2], src_np[i1 % 10, :, i2]),
               "0,i,j": (lambda: src[0, t1, t2], src_np[0, i1, i2])}[name]
  GlobalCounters.reset()
  np.testing.assert_array_equal(ours().numpy(), ref)
  # the masks are fused into the sum and collapse to loads: work in the output's size, not output x 20000 (600M ops)
  assert GlobalCounters.global_ops < 50 * ref.size


def test_a_gather_of_rows_is_one_load_per_value():
  # t[idx] is a one-hot sum over t's rows, which the lowering collapses to one load per value. A long sum against few
  # outputs looks like a matrix product to the CPU's cache blocking, which split it in two stages, and the collapse
  # then no longer applied: a loop over every row (64 rows of a 32000 x 768 table took 25 ms, against 0.03)
  from tinyhybrid import GlobalCounters
  table = np.random.default_rng(0).integers(0, 256, (8192, 768), dtype=np.uint8)
  idx = np.random.default_rng(1).integers(0, 8192, 64).astype(np.int32)
  t, i = Tensor(table).realize(), Tensor(idx).realize()
  GlobalCounters.reset()
  out = t[i].numpy()
  np.testing.assert_array_equal(out, table[idx])
  assert GlobalCounters.global_ops < 64 * 768 * 16, GlobalCounters.global_ops  # not 64 * 768 * 8192
