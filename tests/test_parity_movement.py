"""tinygrad/torch parity of the movement and indexing API: the argument forms tinygrad accepts (varargs or a sequence,
-1 and negative axes, the class-level `Tensor.stack((a, b))`), 0-d and zero-size shapes, the pad modes with negative
padding, gather/scatter/scatter_reduce, getitem's list-as-tuple rule and Variable indices, and the exception types
tinygrad raises for misuse. Values and gradients are compared with torch (loss = sum(out * w) for a random w); the
cases are realized in one batch (see batching.py) so the file compiles a handful of kernels."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinyhybrid import Tensor, Variable, dtypes
from batching import realize_batched

RNG = np.random.default_rng(13)
IDX = np.array([[0, 2, 1, 0], [3, 0, 2, 1], [1, 1, 0, 3]])  # an index for (3, 4)-shaped gathers/scatters along either dim
UNIQ = np.array([[2, 0, 1, 3], [0, 3, 2, 1], [1, 2, 3, 0]])  # a permutation per row: scatter without collisions


def _ti(a: np.ndarray) -> Tensor: return Tensor(a.astype(np.int32))
def _tt(a: np.ndarray) -> torch.Tensor: return torch.tensor(a, dtype=torch.int64)
def _pad(pads: tuple, mode: str) -> tuple: return lambda x: x.pad(pads, mode=mode), lambda x: F.pad(x, pads, mode=mode)
def _sr(red: str, **kw) -> tuple:  # scatter_reduce along 0 with IDX
  return lambda x, s: x.scatter_reduce(0, _ti(IDX), s, red, **kw), lambda x, s: x.scatter_reduce(0, _tt(IDX), s, red, **kw)
def _ms(mask: np.ndarray) -> tuple: return lambda x: x.masked_select(Tensor(mask)), lambda x: x.masked_select(torch.tensor(mask))


# name: (input shapes, ours, torch's); a function returns a tensor or a tuple of them; values and gradients are compared
CASES: dict = {
  # argument forms: varargs, tuple, list, -1, None, negative axes
  "reshape_tuple": ([(4, 3, 6)], lambda x: x.reshape((-1, 3, 6)), lambda x: x.reshape((-1, 3, 6))),
  "reshape_list": ([(4, 3, 6)], lambda x: x.reshape([12, -1]), lambda x: x.reshape([12, -1])),
  "reshape_varargs": ([(4, 3, 6)], lambda x: x.reshape(2, -1, 9), lambda x: x.reshape(2, -1, 9)),
  "reshape_none": ([(4, 3, 6)], lambda x: x.reshape(None, 18), lambda x: x.reshape(4, 18)),
  "reshape_0d_up": ([()], lambda x: x.reshape(1, 1, 1), lambda x: x.reshape(1, 1, 1)),
  "reshape_to_0d": ([(1,)], lambda x: x.reshape(()), lambda x: x.reshape(())),
  "reshape_zero": ([(0, 6)], lambda x: x.reshape(2, -1, 3), lambda x: x.reshape(2, -1, 3)),
  "view_tuple": ([(2, 6)], lambda x: x.view((4, 3)), lambda x: x.view((4, 3))),
  "permute_tuple": ([(3, 4, 5, 6)], lambda x: x.permute((-2, -1, 1, 0)), lambda x: x.permute((-2, -1, 1, 0))),
  "permute_list": ([(3, 4, 5)], lambda x: x.permute([2, 0, 1]), lambda x: x.permute([2, 0, 1])),
  "permute_0d": ([()], lambda x: x.permute(()), lambda x: x.permute(())),
  "expand_tuple": ([(3, 1)], lambda x: x.expand((2, -1, 4)), lambda x: x.expand((2, -1, 4))),
  "transpose_neg": ([(2, 3, 4)], lambda x: x.transpose(-1, -3), lambda x: x.transpose(-1, -3)),
  "flip_tuple": ([(4, 3, 6)], lambda x: x.flip((0, -1)), lambda x: x.flip((0, -1))),
  "flip_varargs": ([(4, 3, 6)], lambda x: x.flip(2, 1), lambda x: x.flip(2, 1)),
  "flip_empty": ([(4, 3)], lambda x: x.flip(()), lambda x: x.flip(())),
  "flip_0d": ([()], lambda x: x.flip(()), lambda x: x.flip(())),
  "squeeze_tuple": ([(1, 3, 1, 2)], lambda x: x.squeeze((0, -2)), lambda x: x.squeeze((0, -2))),
  "squeeze_not_one": ([(1, 3)], lambda x: x.squeeze(1), lambda x: x.squeeze(1)),
  "squeeze_0d": ([()], lambda x: x.squeeze(0), lambda x: x.squeeze(0)),
  "squeeze_zero": ([(0, 1, 2)], lambda x: x.squeeze(), lambda x: x.squeeze()),
  "unsqueeze_neg": ([(3, 2)], lambda x: x.unsqueeze(-3), lambda x: x.unsqueeze(-3)),
  "unsqueeze_0d": ([()], lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(-1)),
  "flatten_0d": ([()], lambda x: x.flatten(), lambda x: x.flatten()),
  "flatten_range": ([(2, 3, 4, 5)], lambda x: x.flatten(-3, -2), lambda x: x.flatten(-3, -2)),
  "unflatten_neg1": ([(3, 12)], lambda x: x.unflatten(-1, (2, -1, 3)), lambda x: x.unflatten(-1, (2, -1, 3))),
  "repeat_tuple": ([(2, 3)], lambda x: x.repeat((2, 1, 2)), lambda x: x.repeat((2, 1, 2))),
  "repeat_zero": ([(2, 3)], lambda x: x.repeat(0, 2), lambda x: x.repeat(0, 2)),
  "repeat_0d": ([()], lambda x: x.repeat(3), lambda x: x.repeat(3)),
  "repeat_interleave_flat": ([(2, 3)], lambda x: x.repeat_interleave(2), lambda x: x.repeat_interleave(2)),
  # cat and stack: a sequence on the class, negative dims, zero sizes, 0-d pieces
  "stack_class_tuple": ([(2, 3)] * 3, lambda a, b, c: Tensor.stack((a, b, c), dim=-1), lambda a, b, c: torch.stack((a, b, c), -1)),
  "stack_class_list": ([(2, 3)] * 2, lambda a, b: Tensor.stack([a, b], dim=1), lambda a, b: torch.stack([a, b], 1)),
  "stack_class_args": ([(2, 3)] * 2, lambda a, b: Tensor.stack(a, b, dim=-3), lambda a, b: torch.stack((a, b), -3)),
  "stack_0d": ([(), ()], lambda a, b: a.stack(b), lambda a, b: torch.stack((a, b))),
  "stack_zero": ([(0, 2), (0, 2)], lambda a, b: a.stack(b, dim=1), lambda a, b: torch.stack((a, b), 1)),
  "stack_one": ([(2, 3)], lambda a: Tensor.stack((a,), dim=2), lambda a: torch.stack((a,), 2)),
  "cat_class_tuple": ([(2, 3), (1, 3)], lambda a, b: Tensor.cat((a, b)), lambda a, b: torch.cat((a, b))),
  "cat_neg_dim": ([(2, 3), (2, 1), (2, 0)], lambda a, b, c: a.cat(b, c, dim=-1), lambda a, b, c: torch.cat((a, b, c), -1)),
  "cat_all_zero": ([(0, 3), (0, 3)], lambda a, b: a.cat(b), lambda a, b: torch.cat((a, b))),
  "cat_one": ([(2, 3)], lambda a: a.cat(dim=1), lambda a: torch.cat((a,), 1)),
  # split and chunk edge cases
  "split_big": ([(3, 2)], lambda x: x.split(5), lambda x: x.split(5)),
  "split_zero_piece": ([(4, 2)], lambda x: x.split([0, 3, 0, 1]), lambda x: x.split([0, 3, 0, 1])),
  "split_empty_dim": ([(0, 2)], lambda x: x.split(2), lambda x: x.split(2)),
  "split_neg_dim": ([(2, 5)], lambda x: x.split([2, 3], dim=-1), lambda x: x.split([2, 3], dim=-1)),
  "chunk_more_than_n": ([(3, 2)], lambda x: x.chunk(5), lambda x: x.chunk(5)),
  "chunk_uneven": ([(13, 2)], lambda x: x.chunk(6), lambda x: x.chunk(6)),
  "chunk_empty_dim": ([(0, 2)], lambda x: x.chunk(3), lambda x: x.chunk(3)),
  # roll: several shifts and dims, flat, zero size
  "roll_multi": ([(2, 4, 6)], lambda x: x.roll((1, 2, -1), (0, 1, 2)), lambda x: x.roll((1, 2, -1), (0, 1, 2))),
  "roll_tuple_one": ([(2, 4)], lambda x: x.roll((1,)), lambda x: x.roll((1,))),
  "roll_big": ([(2, 4)], lambda x: x.roll(-5, -1), lambda x: x.roll(-5, -1)),
  "roll_same_dim": ([(5, 3)], lambda x: x.roll((1, 2), (0, 0)), lambda x: x.roll((1, 2), (0, 0))),
  "roll_zero": ([(0, 3)], lambda x: x.roll(2, 0), lambda x: x.roll(2, 0)),
  # diagonal, meshgrid, unfold
  "diagonal_neg": ([(5, 5)], lambda x: x.diagonal(-2), lambda x: x.diagonal(-2)),
  "diagonal_rect": ([(3, 5)], lambda x: x.diagonal(offset=2), lambda x: x.diagonal(offset=2)),
  "diagonal_past": ([(3, 5)], lambda x: x.diagonal(offset=7), lambda x: x.diagonal(offset=7)),
  "diagonal_dims": ([(2, 3, 4, 5)], lambda x: x.diagonal(1, -1, 1), lambda x: x.diagonal(1, -1, 1)),
  "diag_vector": ([(3,)], lambda x: x.diag(), lambda x: x.diag()),
  "meshgrid_ij": ([(3,), (), (4,)], lambda a, b, c: a.meshgrid(b, c), lambda a, b, c: torch.meshgrid(a, b, c, indexing="ij")),
  "meshgrid_xy": ([(3,), (4,), (2,)], lambda a, b, c: a.meshgrid(b, c, indexing="xy"),
                  lambda a, b, c: torch.meshgrid(a, b, c, indexing="xy")),
  "meshgrid_one": ([(3,)], lambda a: a.meshgrid(indexing="xy"), lambda a: torch.meshgrid(a, indexing="xy")),
  "unfold_size0": ([(3, 3, 3)], lambda x: x.unfold(1, 0, 8), lambda x: x.unfold(1, 0, 8)),
  "unfold_step_big": ([(3, 3, 3)], lambda x: x.unfold(2, 2, 8), lambda x: x.unfold(2, 2, 8)),
  "unfold_neg_dim": ([(2, 3, 7)], lambda x: x.unfold(-1, 3, 2), lambda x: x.unfold(-1, 3, 2)),
  "unfold_whole": ([(8,)], lambda x: x.unfold(0, 8, 3), lambda x: x.unfold(0, 8, 3)),
  "unfold_0d": ([()], lambda x: x.unfold(-1, 1, 2), lambda x: x.unfold(-1, 1, 2)),
  # pad: every mode, flat and grouped, negative amounts
  "pad_grouped_none": ([(3, 3)], lambda x: x.pad((None, (1, 2)), value=2.0), lambda x: F.pad(x, (1, 2), value=2.0)),
  "pad_list": ([(3, 3)], lambda x: x.pad([1, 0, 0, 2]), lambda x: F.pad(x, [1, 0, 0, 2])),
  "pad_neg_value": ([(3, 4)], lambda x: x.pad((-1, 2, 2, -2), value=-np.inf), lambda x: F.pad(x, (-1, 2, 2, -2), value=-np.inf)),
  "pad_0d": ([()], lambda x: x.pad(()), lambda x: F.pad(x, ())),
  "reflect_max": ([(1, 1, 5, 5)], lambda x: x.pad((4, 4, 0, 4), mode="reflect"), lambda x: F.pad(x, (4, 4, 0, 4), mode="reflect")),
  "reflect_neg": ([(3, 3, 3, 3)], lambda x: x.pad((-1, 2, 2, -1), mode="reflect"), lambda x: F.pad(x, (-1, 2, 2, -1), mode="reflect")),
  "reflect_neg_all": ([(1, 1, 5, 5)], *_pad((3, -5, 1, -5), "reflect")),
  "reflect_3d": ([(1, 1, 4, 5, 5)], lambda x: x.pad((1, 2, 3, 1, 1, 2), mode="reflect"),
                 lambda x: F.pad(x, (1, 2, 3, 1, 1, 2), mode="reflect")),
  "replicate_neg": ([(1, 1, 5, 5)], *_pad((3, -3, 0, -3), "replicate")),
  "replicate_big": ([(1, 1, 5, 5)], *_pad((3, 11, 0, 30), "replicate")),
  "replicate_grouped": ([(2, 3, 4)], lambda x: x.pad((None, (2, 0), (1, 3)), mode="replicate"),
                        lambda x: F.pad(x, (1, 3, 2, 0), mode="replicate")),
  "circular_full": ([(1, 1, 5, 5)], lambda x: x.pad((5, 2, 3, 5), mode="circular"), lambda x: F.pad(x, (5, 2, 3, 5), mode="circular")),
  "circular_neg": ([(1, 1, 5, 5)], lambda x: x.pad((1, -1, -2, 3), mode="circular"), lambda x: F.pad(x, (1, -1, -2, 3), mode="circular")),
  "circular_3d": ([(1, 1, 5, 5, 5)], lambda x: x.pad((1, 2, 3, 5, 1, 2), mode="circular"),
                  lambda x: F.pad(x, (1, 2, 3, 5, 1, 2), mode="circular")),
  # getitem: ints, slices, None, ..., int arrays (lists, tuples, tensors), a list of index lists as a tuple, masks
  "gi_neg_int": ([(4, 5)], lambda x: x[-1, -2], lambda x: x[-1, -2]),
  "gi_steps": ([(7, 6)], lambda x: x[5:0:-2, ::4], lambda x: x.flip(0)[1:7:2, ::4]),
  "gi_none_ell": ([(2, 3, 4)], lambda x: x[None, ..., 1, None], lambda x: x[None, ..., 1, None]),
  "gi_empty_slice": ([(4, 5)], lambda x: x[3:1], lambda x: x[3:1]),
  "gi_list": ([(5, 3)], lambda x: x[[4, 0, -1, 0]], lambda x: x[[4, 0, -1, 0]]),
  "gi_list_of_lists": ([(4, 5)], lambda x: x[[[0, 2], [1, -1]]], lambda x: x[[0, 2], [1, -1]]),
  "gi_list_with_slice": ([(4, 5)], lambda x: x[[slice(None), [1, 3]]], lambda x: x[:, [1, 3]]),
  "gi_tuple_index": ([(4, 5)], lambda x: x[(1, 3), (0, 4)], lambda x: x[(1, 3), (0, 4)]),
  "gi_tensor_2d": ([(4, 5)], lambda x: x[_ti(np.array([[0, 3], [2, 1]])), 1:4], lambda x: x[_tt(np.array([[0, 3], [2, 1]])), 1:4]),
  "gi_broadcast": ([(3, 2)], lambda x: x[[[0, 0], [1, 2]], [0]], lambda x: x[[[0, 0], [1, 2]], [0]]),
  "gi_split_adv": ([(3, 4, 5)], lambda x: x[[0, 2], :, [1, 3]], lambda x: x[[0, 2], :, [1, 3]]),
  "gi_adv_ell": ([(3, 4, 5)], lambda x: x[..., [4, 0]], lambda x: x[..., [4, 0]]),
  "gi_0d_tensor": ([(4, 5)], lambda x: x[Tensor(2), 1:], lambda x: x[torch.tensor(2), 1:]),
  "gi_bool_mask": ([(3, 4)], lambda x: x[Tensor(np.eye(3, 4, dtype=bool))], lambda x: x[torch.tensor(np.eye(3, 4, dtype=bool))]),
  "gi_bool_list": ([(3, 4)], lambda x: x[[True, False, True]], lambda x: x[torch.tensor([True, False, True])]),
  "gi_empty_list": ([(3, 4)], lambda x: x[[]], lambda x: x[torch.tensor([], dtype=torch.int64)]),
  # gather / scatter / scatter_reduce / masks
  "gather0": ([(4, 4)], lambda x: x.gather(0, _ti(IDX)), lambda x: x.gather(0, _tt(IDX))),
  "gather_neg_dim": ([(3, 5)], lambda x: x.gather(-1, _ti(IDX)), lambda x: x.gather(-1, _tt(IDX))),
  "gather_small": ([(4, 6)], lambda x: x.gather(1, _ti(IDX[:2, :3])), lambda x: x.gather(1, _tt(IDX[:2, :3]))),
  "gather_empty": ([(3, 4)], lambda x: x.gather(1, _ti(np.zeros((3, 0)))), lambda x: x.gather(1, _tt(np.zeros((3, 0))))),
  "scatter_src": ([(3, 4), (3, 4)], lambda x, s: x.scatter(1, _ti(UNIQ), s), lambda x, s: x.scatter(1, _tt(UNIQ), s)),
  "scatter_value": ([(4, 4)], lambda x: x.scatter(0, _ti(IDX), 2.5), lambda x: x.scatter(0, _tt(IDX), 2.5)),
  "scatter_sum": ([(4, 4), (3, 4)], *_sr("sum")),
  "scatter_sum_noself": ([(4, 4), (3, 4)], *_sr("sum", include_self=False)),
  "masked_fill": ([(3, 4)], lambda x: x.masked_fill(Tensor(np.eye(3, 4, dtype=bool)), -2.0),
                  lambda x: x.masked_fill(torch.tensor(np.eye(3, 4, dtype=bool)), -2.0)),
  "masked_select": ([(3, 4)], *_ms(np.eye(3, 4, dtype=bool))),
  "masked_select_bcast": ([(2, 3)], *_ms(np.array([True, False, True]))),
}

# forward only: torch's gradient for these is defined differently (ties, products with zeros) or not at all
FORWARD_ONLY = {
  "scatter_reduce_prod": ([(4, 4), (3, 4)], *_sr("prod")),
  "scatter_reduce_mean": ([(4, 4), (3, 4)], *_sr("mean", include_self=False)),
  "scatter_reduce_mean_self": ([(4, 4), (3, 4)], *_sr("mean")),
  "scatter_reduce_amax": ([(4, 4), (3, 4)], *_sr("amax")),
  "scatter_reduce_amin": ([(4, 4), (3, 4)], *_sr("amin", include_self=False)),
  "scatter_src_bigger": ([(3, 4), (4, 5)], lambda x, s: x.scatter(1, _ti(UNIQ), s), lambda x, s: x.scatter(1, _tt(UNIQ), s)),
  "scatter_add_value": ([(4, 4)], lambda x: x.scatter(0, _ti(IDX), 1.5, reduce="add"),
                        lambda x: x.scatter(0, _tt(IDX), 1.5, reduce="add")),
  "scatter_mul_value": ([(4, 4)], lambda x: x.scatter(0, _ti(IDX), 2.0, reduce="multiply"),
                        lambda x: x.scatter(0, _tt(IDX), 2.0, reduce="multiply")),
  "scatter_collide": ([(4,), (2,)], lambda x, s: x.scatter(0, _ti(np.array([1, 1])), s),
                      lambda x, s: x.scatter(0, _tt(np.array([1, 1])), s)),  # the last write wins, as on torch's CPU
}


def _outs(o): return list(o) if isinstance(o, (tuple, list)) else [o]


@pytest.fixture(scope="module")
def results():
  per_case, todo = {}, []
  for name, (shapes, ours_fn, torch_fn) in {**CASES, **FORWARD_ONLY}.items():
    grad = name in CASES
    xs = [RNG.uniform(-3, 3, size=s).astype(np.float32) for s in shapes]
    ins = [Tensor(x, requires_grad=grad) for x in xs]
    tins = [torch.tensor(x, requires_grad=grad) for x in xs]
    outs, touts = _outs(ours_fn(*ins)), _outs(torch_fn(*tins))
    tgrads, grads = [], []
    if grad:
      ws = [RNG.uniform(-1, 1, size=tuple(t.shape)).astype(np.float32) for t in touts]
      grads = sum(((o * Tensor(w)).sum() for o, w in zip(outs, ws)), Tensor(0.0)).gradient(*ins)
      tloss = sum((t * torch.tensor(w)).sum() for t, w in zip(touts, ws))
      tgrads = list(torch.autograd.grad(tloss, tins, allow_unused=True)) if tloss.requires_grad else [None] * len(tins)
      tgrads = [torch.zeros_like(t) if g is None else g for g, t in zip(tgrads, tins)]
    per_case[name] = (len(todo), len(outs), touts, tgrads)
    todo += outs + list(grads)
  arrays = realize_batched(todo)
  return {name: (arrays[i:i + n], arrays[i + n:i + n + len(tg)], to, tg) for name, (i, n, to, tg) in per_case.items()}


def _close(ours: np.ndarray, ref) -> None:
  ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
  assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES) + list(FORWARD_ONLY))
def test_forward(results, name):
  outs, _, touts, _ = results[name]
  assert len(outs) == len(touts)
  for o, t in zip(outs, touts): _close(o, t)


@pytest.mark.parametrize("name", list(CASES))
def test_backward(results, name):
  _, grads, _, tgrads = results[name]
  for g, t in zip(grads, tgrads): _close(g, t)


def test_split_chunk_return_types():
  # tinygrad: split gives a tuple, chunk a list (and as many empty pieces as asked for an empty dimension, as torch)
  assert isinstance(Tensor.ones(5).split(2), tuple) and isinstance(Tensor.ones(5).chunk(2), list)
  assert [t.shape for t in Tensor.ones(0, 2).chunk(3)] == [t.shape for t in torch.ones(0, 2).chunk(3)]


# ** int-valued ops (forward, exact) **
@pytest.mark.parametrize("data,n", [([1, 2, 4], 6), ([[1, 2, 3], [0, 3, 5]], 8), ([[0, 3], [5, 1]], 6), (3, 5)])
def test_one_hot(data, n):
  want = F.one_hot(torch.tensor(data), n).numpy()
  got = Tensor(data).one_hot(n)
  assert got.dtype is dtypes.int32
  np.testing.assert_array_equal(got.numpy(), want)


def test_int_and_bool_movement():
  a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 12
  x = Tensor(a)
  for pads, mode in (((1, 2, 0, 1), "reflect"), ((2, 1), "circular")):
    np.testing.assert_array_equal(x.pad(pads, mode=mode).numpy(), F.pad(torch.tensor(a), pads, mode=mode).numpy())
  np.testing.assert_array_equal(x.roll((1, -2), (0, 2)).numpy(), np.roll(a, (1, -2), (0, 2)))
  np.testing.assert_array_equal(x.gather(2, _ti(np.zeros((2, 3, 1)) + 3)).numpy(), a[:, :, 3:])
  b = a % 3 == 0
  np.testing.assert_array_equal(Tensor(b).pad((1, 1), mode="replicate").numpy(), np.pad(b, ((0, 0), (0, 0), (1, 1)), mode="edge"))
  np.testing.assert_array_equal(Tensor(b).unfold(2, 2, 2).numpy(), torch.tensor(b).unfold(2, 2, 2).numpy())


DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"]


@pytest.mark.parametrize("dt", DTYPES)
def test_every_dtype(dt):
  # every op here only moves or selects values, so each dtype's result is exact; one kernel per dtype
  a = (np.arange(60).reshape(3, 4, 5) % 7 + (dt == "bool")) % (2 if dt == "bool" else 100)
  x = Tensor(a).cast(dt)
  idx = np.array([[2, 0], [1, 1]])
  ops = [
    (x.pad((1, 2), mode="reflect"), np.pad(a, ((0, 0), (0, 0), (1, 2)), mode="reflect")),
    (x.pad((0, 0, 2, 1), mode="replicate"), np.pad(a, ((0, 0), (2, 1), (0, 0)), mode="edge")),
    (x.pad((3, 1), mode="circular"), np.pad(a, ((0, 0), (0, 0), (3, 1)), mode="wrap")),
    (x.pad(((1, 0), None, (0, 1))), np.pad(a, ((1, 0), (0, 0), (0, 1)))),
    (x[idx, :, [4, -1]], a[idx, :, [4, -1]]),
    (x[[[0, 2]], 1:, ::-2], a[[[0, 2]], 1:, ::-2]),
    (x.gather(2, _ti(np.zeros((3, 4, 2)) + 3)), a[:, :, 3:4].repeat(2, 2)),
    (x.roll((1, -2), (0, 2)).flip(1), np.roll(a, (1, -2), (0, 2))[:, ::-1]),
    (Tensor.stack((x, x), dim=-1).unfold(1, 2, 2), np.lib.stride_tricks.sliding_window_view(np.stack((a, a), -1), 2, 1)[:, ::2].copy()),
    (x.diagonal(1, -1, 1), np.diagonal(a, 1, 2, 1)),
    (x.repeat(1, 2, 1).rearrange("a (b c) d -> d a b c", b=2), np.tile(a, (1, 2, 1)).reshape(3, 2, 4, 5).transpose(3, 0, 1, 2)),
  ]
  res = realize_batched([o for o, _ in ops])
  for (o, want), got in zip(ops, res):
    assert o.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


# ** indices beyond getitem's basics **
def test_variable_index():
  t = Tensor.arange(12).reshape(3, 4)
  v = Variable("v", 0, 2).bind(1)
  np.testing.assert_array_equal(t[v, Tensor([0, 1, 2])].numpy(), [4, 5, 6])
  np.testing.assert_array_equal(t[:, v].numpy(), [1, 5, 9])
  with pytest.raises(IndexError): t[Variable("w", 3, 5).bind(4)]


def test_index_past_int32():
  # a dimension longer than int32 counts: the positions compared with the index are int64
  big = Tensor([1, 2]).reshape(1, 2).expand(2**30 + 2, 2).reshape(-1)
  np.testing.assert_array_equal(big[Tensor(np.array([1, 2**31 + 2], dtype=np.int64))].numpy(), [2, 1])


def test_masked_select_empty():
  # torch (and tinygrad 0.14) give an empty tensor; the corpus's expectedFailure predates that
  out = Tensor([], dtype=dtypes.float32).masked_select(Tensor([], dtype=dtypes.bool))
  assert out.shape == (0,) and out.dtype is dtypes.float32


def test_rearrange_values():
  x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
  t = Tensor(x)
  np.testing.assert_array_equal(t.rearrange("... -> (...)").numpy(), x.reshape(-1))
  np.testing.assert_array_equal(t.rearrange("b ... w -> (...) b w").numpy(), x.transpose(1, 2, 0, 3).reshape(12, 2, 6))
  np.testing.assert_array_equal(t.rearrange("b c h (w1 w2) -> (b w2) c h w1", w1=2).numpy(),
                                x.reshape(2, 3, 4, 2, 3).transpose(0, 4, 1, 2, 3).reshape(6, 3, 4, 2))
  np.testing.assert_array_equal(t.rearrange("b c h w -> (b) (c) () h w").numpy(), x[:, :, None])
  np.testing.assert_array_equal(Tensor.ones(2, 3).rearrange("camelCase \u00df -> \u00df camelCase").shape, (3, 2))


# ** exception types: tinygrad's (which are torch's where torch checks the same thing) **
X = lambda: Tensor.ones(3, 4)  # noqa: E731
TX = lambda: torch.ones(3, 4)  # noqa: E731
ERRORS = [
  # (ours, torch's or None, type)
  (lambda: X().reshape(-1, -1, 2), lambda: TX().reshape(-1, -1, 2), RuntimeError),
  (lambda: X().reshape(5, 3), lambda: TX().reshape(5, 3), (ValueError, RuntimeError)),
  (lambda: Tensor.ones(0, 3).reshape(-1, 0), lambda: torch.ones(0, 3).reshape(-1, 0), RuntimeError),
  (lambda: X().permute(0, 0), lambda: TX().permute(0, 0), RuntimeError),
  (lambda: X().permute((0,)), lambda: TX().permute((0,)), RuntimeError),
  (lambda: X().permute(0, 2), lambda: TX().permute(0, 2), IndexError),
  (lambda: X().flip((0, 0)), lambda: TX().flip((0, 0)), RuntimeError),
  (lambda: X().flip((1, -1)), lambda: TX().flip((1, -1)), RuntimeError),
  (lambda: X().squeeze((0, 0)), lambda: TX().squeeze((0, 0)), RuntimeError),
  (lambda: Tensor(1.0).squeeze(1), lambda: torch.tensor(1.0).squeeze(1), IndexError),
  (lambda: X().repeat(-1, 2), lambda: TX().repeat(-1, 2), RuntimeError),
  (lambda: X().roll((1, 2)), lambda: TX().roll((1, 2)), RuntimeError),
  (lambda: X().roll(1, (0, 1)), lambda: TX().roll(1, (0, 1)), RuntimeError),
  (lambda: X().diagonal(dim1=0, dim2=-2), lambda: TX().diagonal(dim1=0, dim2=-2), RuntimeError),
  (lambda: X().diagonal(dim1=2), lambda: TX().diagonal(dim1=2), IndexError),
  (lambda: Tensor.ones(3).meshgrid(indexing="bad"), lambda: torch.meshgrid(torch.ones(3), indexing="bad"), RuntimeError),
  (lambda: Tensor.ones(3).meshgrid(X()), lambda: torch.meshgrid(torch.ones(3), TX(), indexing="ij"), RuntimeError),
  (lambda: Tensor.ones(8).unfold(0, 9, 3), lambda: torch.ones(8).unfold(0, 9, 3), RuntimeError),
  (lambda: Tensor.ones(8).unfold(1, 8, 3), lambda: torch.ones(8).unfold(1, 8, 3), IndexError),
  (lambda: Tensor.ones(8).unfold(0, 1, -1), lambda: torch.ones(8).unfold(0, 1, -1), RuntimeError),
  (lambda: Tensor.ones(8).unfold(0, 1, 0), lambda: torch.ones(8).unfold(0, 1, 0), RuntimeError),
  (lambda: X().cat(Tensor.ones(3, 3)), lambda: torch.cat((TX(), torch.ones(3, 3))), RuntimeError),
  (lambda: X().cat(Tensor.ones(4)), lambda: torch.cat((TX(), torch.ones(4))), RuntimeError),
  (lambda: Tensor(1.0).cat(Tensor(1.0)), None, IndexError),
  (lambda: X().stack(Tensor.ones(4, 3)), lambda: torch.stack((TX(), torch.ones(4, 3))), RuntimeError),
  (lambda: Tensor.stack(X(), dim=3), lambda: torch.stack((TX(),), 3), IndexError),
  (lambda: Tensor.stack((X(), X()), X()), None, ValueError),
  (lambda: X().split([1, 1]), lambda: TX().split([1, 1]), RuntimeError),
  (lambda: X().split(0), lambda: TX().split(0), RuntimeError),
  (lambda: X().chunk(0), lambda: TX().chunk(0), RuntimeError),
  (lambda: X().pad((2, 0, 2)), lambda: F.pad(TX(), (2, 0, 2)), (ValueError, RuntimeError)),
  (lambda: X().pad((1, 1), mode="typo"), lambda: F.pad(TX(), (1, 1), mode="typo"), NotImplementedError),
  # (tinygrad: ValueError, torch: RuntimeError; the corpus takes either)
  (lambda: Tensor.ones(1, 1, 5).pad((3, 5), mode="reflect"), lambda: F.pad(torch.ones(1, 1, 5), (3, 5), mode="reflect"),
   (ValueError, RuntimeError)),
  (lambda: Tensor.ones(1, 1, 5).pad((3, 6), mode="circular"), lambda: F.pad(torch.ones(1, 1, 5), (3, 6), mode="circular"),
   (ValueError, RuntimeError)),
  (lambda: X().gather(0, Tensor([1])), lambda: TX().gather(0, torch.tensor([1])), RuntimeError),
  (lambda: X().gather(0, _ti(np.zeros((2, 5)))), lambda: TX().gather(0, _tt(np.zeros((2, 5)))), RuntimeError),
  (lambda: X().gather(0, Tensor([[0.5]])), lambda: TX().gather(0, torch.tensor([[0.5]])), RuntimeError),
  (lambda: X().scatter(0, _ti(np.zeros((2, 5))), X()), lambda: TX().scatter(0, _tt(np.zeros((2, 5))), TX()), RuntimeError),
  (lambda: X().scatter(0, _ti(IDX[:2]), Tensor.ones(1, 4)), lambda: TX().scatter(0, _tt(IDX[:2]), torch.ones(1, 4)), RuntimeError),
  (lambda: X().half().scatter(0, _ti(IDX[:2]), X()), lambda: TX().half().scatter(0, _tt(IDX[:2]), TX()), RuntimeError),
  (lambda: X().scatter(0, _ti(IDX[:2]), X(), reduce="add"), None, TypeError),
  (lambda: X().scatter(0, _ti(IDX[:2]), 1.0, reduce="sum"), None, TypeError),
  (lambda: Tensor.ones(4).scatter(dim=1, index=Tensor([0]), src=Tensor.ones(4), reduce="add"), None, TypeError),
  (lambda: X().scatter_reduce(0, _ti(IDX[:2]), X(), "max"), lambda: TX().scatter_reduce(0, _tt(IDX[:2]), TX(), "max"), RuntimeError),
  (lambda: X().half().scatter_reduce(0, _ti(IDX[:2]), X(), "sum"), lambda: TX().half().scatter_reduce(0, _tt(IDX[:2]), TX(), "sum"),
   RuntimeError),
  (lambda: X().one_hot(4), lambda: F.one_hot(TX(), 4), RuntimeError),
  (lambda: Tensor([1, 2]).one_hot(-1), None, ValueError),  # tinygrad's rule: num_classes is given (torch infers it)
  (lambda: X().masked_select(Tensor.ones(3, 4, dtype=dtypes.int32)), lambda: TX().masked_select(torch.ones(3, 4, dtype=torch.int32)), RuntimeError),
  (lambda: X()[3], lambda: TX()[3], IndexError),
  (lambda: X()[[0, 3]], lambda: TX()[[0, 3]], IndexError),
  (lambda: X()[0, 0, 0], lambda: TX()[0, 0, 0], IndexError),
  (lambda: X()[..., ...], None, IndexError),  # torch takes it
  (lambda: X()[[0.5]], None, IndexError),  # torch truncates to 0
  (lambda: X()[[0, 1], [[0], [1], [2]], [0]], lambda: TX()[[0, 1], [[0], [1], [2]], [0]], IndexError),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_error_types(i):
  ours, theirs, exc = ERRORS[i]
  with pytest.raises(exc) as e: ours()
  assert type(e.value) in (exc if isinstance(exc, tuple) else (exc,)), f"{type(e.value).__name__}: {e.value}"
  if theirs is not None:
    with pytest.raises(exc if isinstance(exc, tuple) else (exc,)): theirs()


@pytest.mark.parametrize("formula,kw,exc", [
  ("a b c d (...) -> a b c ... d", {}, AssertionError), ("a b (c d ... -> a b c ... d", {}, AssertionError),
  ("a b* c d ... -> a b c ... d", {}, AssertionError), ("a b c d -> a b c d -> a b c d", {}, AssertionError),
  ("a ... c ... -> ... a ... c", {}, AssertionError), ("a b c d e -> f b c d e", {}, AssertionError),
  ("(...) -> (...)", {}, AssertionError),
  ("_a b c d e -> _a b c d e", {}, AssertionError), ("a b c d e_ -> a b c d e_", {}, AssertionError),
  ("a b c d ...pre -> a b c d ...pre", {}, AssertionError), ("(a) (()) b c d -> a b c d", {}, AssertionError),
  ("(a)) b c d e -> a b c d e", {}, AssertionError), ("a b c d e -> a b c d e", {"f": 2}, AssertionError),
  ("a b c d e -> a b c d e", {"a": 3}, AssertionError), ("a b c d -> a b c d", {}, RuntimeError), (" -> ", {}, RuntimeError),
  ("(a1 a2) b c d e -> a1 a2 b c d e", {}, RuntimeError), ("(a1 a2) b c d e -> a1 a2 b c d e", {"a1": 3}, ValueError),
])
def test_rearrange_error_types(formula, kw, exc):
  with pytest.raises(exc) as e: Tensor.zeros(4, 3, 1, 1, 1).rearrange(formula, **kw)
  assert type(e.value) is exc


def test_generic_faces_alu_const_like_ufix_usum_uprod():
  from tinyhybrid.uop import Ops
  a_np = np.array([1.5, -2.0, 3.0], dtype=np.float32)
  a = Tensor(a_np)
  np.testing.assert_array_equal(a.alu(Ops.MUL, a).numpy(), a_np * a_np)
  np.testing.assert_array_equal(a.alu(Ops.CMPLT, a.const_like(0.0)).numpy(), a_np < 0)
  with pytest.raises(ValueError): a.alu(Ops.RANGE)
  c = a.const_like(7, dtypes.int32)
  assert c.dtype is dtypes.int32 and c.shape == (3,) and c.tolist() == [7, 7, 7]
  assert a.ufix(a) is a and a.ufix(2).tolist() == [2.0, 2.0, 2.0]
  np.testing.assert_array_equal(a.usum(a, 1).numpy(), a_np + a_np + 1)
  np.testing.assert_array_equal(a.uprod([a, a]).numpy(), a_np ** 3)
  t, f = Tensor([True, False, False]), Tensor([False, False, True])
  assert t.usum(f).tolist() == [True, False, True] and t.uprod(f).tolist() == [False, False, False]


def test_deviceless_const_and_invalids():
  a = Tensor([1.0, 2.0])
  two = Tensor.const(2.0)
  assert two.device is None and two.shape == () and (two * a).tolist() == [2.0, 4.0]
  assert Tensor.const(3).dtype is dtypes.weakint and Tensor.const(3).tolist() == 3  # weak until stored, as in tinygrad
  assert Tensor.const((1, 2), dtypes.uint64).tolist() == [1, 2]
  t = Tensor.invalids(2, 3, dtype=dtypes.int16)
  assert t.shape == (2, 3) and t.dtype is dtypes.int16
