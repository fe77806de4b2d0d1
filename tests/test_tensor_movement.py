"""Movement ops against torch: reshape/view, permute/transpose, expand, flip, pad (all modes), shrink, cat, stack,
repeat, split, chunk, roll, squeeze/unsqueeze, flatten/unflatten, repeat_interleave, and chains of them, forward
values and gradients (loss = sum(out * w) for random w, comparing x.grad with torch's).

Each distinct kernel is compiled once, so the cases are checked in batches: every forward output and every gradient is
flattened and concatenated into one tensor that one kernel computes (reductions from the gradients of expand are their
own kernels), and the batch is split again to compare each case on its own."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tinyhybrid import Tensor, dtypes
from batching import realize_batched

RNG = np.random.default_rng(2)


def _torch_shrink(x, arg): return x[tuple(slice(b, e) for b, e in arg)]


# name: (input shapes, our function, torch's function); the functions take the inputs and return a tensor or a tuple
CASES = {
  "reshape": ([(3, 4, 5)], lambda x: x.reshape(-1, 10), lambda x: x.reshape(-1, 10)),
  "reshape_noncontig": ([(3, 4, 5)], lambda x: x.permute(2, 0, 1).reshape(5, 12), lambda x: x.permute(2, 0, 1).reshape(5, 12)),
  "view_args": ([(2, 6)], lambda x: x.view(3, 2, 2), lambda x: x.view(3, 2, 2)),
  "reshape_scalar": ([(1, 1)], lambda x: x.reshape(()), lambda x: x.reshape(())),
  "permute": ([(3, 4, 5)], lambda x: x.permute(2, 0, 1), lambda x: x.permute(2, 0, 1)),
  "permute_neg": ([(3, 4, 5)], lambda x: x.permute(-1, -3, -2), lambda x: x.permute(-1, -3, -2)),
  "transpose": ([(3, 4, 5)], lambda x: x.transpose(-1, 0), lambda x: x.transpose(-1, 0)),
  "T": ([(3, 4)], lambda x: x.T, lambda x: x.T),
  "expand": ([(3, 1, 5)], lambda x: x.expand(3, 4, 5), lambda x: x.expand(3, 4, 5)),
  "expand_new_dims": ([(1, 5)], lambda x: x.expand(2, 3, -1), lambda x: x.expand(2, 3, -1)),
  "broadcast_add": ([(3, 1), (1, 4)], lambda x, y: x + y, lambda x, y: x + y),
  "flip": ([(3, 4, 5)], lambda x: x.flip(0, 2), lambda x: x.flip(0, 2)),
  "flip_permuted": ([(3, 4, 5)], lambda x: x.permute(1, 0, 2).flip(-1), lambda x: x.permute(1, 0, 2).flip(-1)),
  "pad_tuple": ([(3, 4)], lambda x: x.pad(((1, 2), (0, 3))), lambda x: F.pad(x, (0, 3, 1, 2))),
  "pad_flat": ([(2, 3, 4)], lambda x: x.pad((1, 1, 2, 0)), lambda x: F.pad(x, (1, 1, 2, 0))),
  "pad_value": ([(3, 4)], lambda x: x.pad((2, 1), value=2.5), lambda x: F.pad(x, (2, 1), value=2.5)),
  "pad_negative": ([(4, 5)], lambda x: x.pad((-1, 2, 1, -2)), lambda x: F.pad(x, (-1, 2, 1, -2))),
  "pad_reflect": ([(2, 3, 5)], lambda x: x.pad((2, 3), mode="reflect"), lambda x: F.pad(x, (2, 3), mode="reflect")),
  "pad_reflect_2d": ([(2, 4, 5)], lambda x: x.pad((1, 2, 3, 1), mode="reflect"), lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect")),
  "pad_replicate": ([(2, 3, 4)], lambda x: x.pad((3, 1, 0, 2), mode="replicate"), lambda x: F.pad(x, (3, 1, 0, 2), mode="replicate")),
  "pad_circular": ([(2, 3, 4)], lambda x: x.pad((4, 2, 1, 3), mode="circular"), lambda x: F.pad(x, (4, 2, 1, 3), mode="circular")),
  "shrink": ([(4, 5)], lambda x: x.shrink(((1, 3), (0, 4))), lambda x: _torch_shrink(x, ((1, 3), (0, 4)))),
  "shrink_none": ([(4, 5, 2)], lambda x: x.shrink((None, (2, 5), (1, 2))), lambda x: x[:, 2:5, 1:2]),
  "cat0": ([(2, 3), (4, 3), (1, 3)], lambda a, b, c: a.cat(b, c), lambda a, b, c: torch.cat([a, b, c])),
  "cat_last": ([(2, 3, 1), (2, 3, 4)], lambda a, b: a.cat(b, dim=-1), lambda a, b: torch.cat([a, b], -1)),
  "cat_empty_piece": ([(2, 3), (2, 0)], lambda a, b: a.cat(b, dim=1), lambda a, b: torch.cat([a, b], 1)),
  "cat_noncontig": ([(3, 4), (4, 3)], lambda a, b: a.flip(1).cat(b.T, dim=0), lambda a, b: torch.cat([a.flip(1), b.T])),
  "stack0": ([(2, 3), (2, 3)], lambda a, b: a.stack(b), lambda a, b: torch.stack([a, b])),
  "stack_mid": ([(2, 3), (2, 3), (2, 3)], lambda a, b, c: a.stack(b, c, dim=1), lambda a, b, c: torch.stack([a, b, c], 1)),
  "stack_last": ([(2, 3), (2, 3)], lambda a, b: a.stack(b, dim=-1), lambda a, b: torch.stack([a, b], -1)),
  "repeat": ([(2, 3)], lambda x: x.repeat(2, 1), lambda x: x.repeat(2, 1)),
  "repeat_new_dims": ([(2, 3)], lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3)),
  "split_int": ([(5, 3)], lambda x: x.split(2), lambda x: x.split(2)),
  "split_list": ([(2, 6)], lambda x: x.split([1, 3, 2], dim=1), lambda x: x.split([1, 3, 2], dim=1)),
  "chunk": ([(7, 2)], lambda x: x.chunk(3), lambda x: x.chunk(3)),
  "chunk_last": ([(2, 5)], lambda x: x.chunk(2, dim=-1), lambda x: x.chunk(2, dim=-1)),
  "roll": ([(3, 4)], lambda x: x.roll((1, -1), (0, 1)), lambda x: x.roll((1, -1), (0, 1))),
  "squeeze": ([(1, 3, 1, 2)], lambda x: x.squeeze(), lambda x: x.squeeze()),
  "squeeze_dim": ([(1, 3, 1, 2)], lambda x: x.squeeze(2), lambda x: x.squeeze(2)),
  "unsqueeze": ([(3, 2)], lambda x: x.unsqueeze(-1).unsqueeze(0), lambda x: x.unsqueeze(-1).unsqueeze(0)),
  "flatten": ([(2, 3, 4)], lambda x: x.flatten(1), lambda x: x.flatten(1)),
  "unflatten": ([(2, 12)], lambda x: x.unflatten(1, (3, 4)), lambda x: x.unflatten(1, (3, 4))),
  "repeat_interleave": ([(2, 3)], lambda x: x.repeat_interleave(2, dim=1), lambda x: x.repeat_interleave(2, dim=1)),
  "unfold": ([(3, 8, 2)], lambda x: x.unfold(1, 3, 2), lambda x: x.unfold(1, 3, 2)),
  "diagonal": ([(3, 4, 5)], lambda x: x.diagonal(1, 0, 2), lambda x: x.diagonal(1, 0, 2)),
  "roll_flat": ([(3, 4)], lambda x: x.roll(5), lambda x: x.roll(5)),
  "chain": ([(4, 3, 6)], lambda x: x.permute(2, 0, 1).reshape(6, 12)[::2, 1:].flip(0).pad(((1, 0), (0, 2))).expand(2, 4, 13),
            lambda x: F.pad(x.permute(2, 0, 1).reshape(6, 12)[::2, 1:].flip(0), (0, 2, 1, 0)).expand(2, 4, 13)),
  "chain_getitem": ([(5, 6)], lambda x: x[::-2, 1:5].T[None, ..., ::3].repeat(2, 1, 1),
                    lambda x: x.flip(0)[::2, 1:5].T[None, ..., ::3].repeat(2, 1, 1)),
  "zero_size_reshape": ([(0, 3)], lambda x: x.reshape(3, 0), lambda x: x.reshape(3, 0)),
  "zero_size_pad": ([(0, 3)], lambda x: x.pad(((1, 1), (0, 0))), lambda x: F.pad(x, (0, 0, 1, 1))),
  "zero_size_expand": ([(2, 0, 1)], lambda x: x.expand(2, 0, 3), lambda x: x.expand(2, 0, 3)),
}


def _outs(o): return list(o) if isinstance(o, (tuple, list)) else [o]


@pytest.fixture(scope="module")
def results():
  per_case, todo = {}, []
  for name, (shapes, ours_fn, torch_fn) in CASES.items():
    xs = [RNG.uniform(-3, 3, size=s).astype(np.float32) for s in shapes]
    ins = [Tensor(x, requires_grad=True) for x in xs]
    tins = [torch.tensor(x, requires_grad=True) for x in xs]
    outs, touts = _outs(ours_fn(*ins)), _outs(torch_fn(*tins))
    ws = [RNG.uniform(-1, 1, size=tuple(t.shape)).astype(np.float32) for t in touts]
    loss = sum(((o * Tensor(w)).sum() for o, w in zip(outs, ws)), Tensor(0.0))
    loss.backward()
    sum((t * torch.tensor(w)).sum() for t, w in zip(touts, ws)).backward()
    grads = [x.grad if x.grad is not None else x.zeros_like() for x in ins]
    per_case[name] = (len(todo), len(outs), touts, [t.grad if t.grad is not None else torch.zeros_like(t) for t in tins])
    todo += outs + grads
  arrays = realize_batched(todo)
  return {name: (arrays[i:i + n], arrays[i + n:i + n + len(tg)], to, tg) for name, (i, n, to, tg) in per_case.items()}


def _close(ours: np.ndarray, ref) -> None:
  ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else np.asarray(ref)
  assert ours.shape == ref.shape, f"shape {ours.shape} != {ref.shape}"
  np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_forward(results, name):
  outs, _, touts, _ = results[name]
  assert len(outs) == len(touts)
  for o, t in zip(outs, touts): _close(o, t)


@pytest.mark.parametrize("name", list(CASES))
def test_backward(results, name):
  _, grads, _, tgrads = results[name]
  for g, t in zip(grads, tgrads): _close(g, t)


@pytest.mark.parametrize("name", ["pad_reflect_2d", "chain", "cat_noncontig", "split_list"])
def test_standalone(name):
  # a few cases realized as their own kernels, outside the batch's concatenation
  shapes, ours_fn, torch_fn = CASES[name]
  xs = [RNG.uniform(-3, 3, size=s).astype(np.float32) for s in shapes]
  for o, t in zip(_outs(ours_fn(*[Tensor(x) for x in xs])), _outs(torch_fn(*[torch.tensor(x) for x in xs]))): _close(o.numpy(), t)


# ** other dtypes (forward only) **
INT_OPS = [
  lambda x: x.permute(1, 0, 2).flip(0), lambda x: x.pad(((1, 0), (0, 0), (2, 1)), value=-3), lambda x: x.reshape(4, 15)[1:3],
  lambda x: x.expand(2, 3, 4, 5).flip(0), lambda x: x.repeat(1, 2, 1), lambda x: x.roll(2, -1),
  lambda x: x.shrink(((1, 2), None, (0, 3))).cat(x[:1, :, :3], dim=0), lambda x: x[:, ::-2].stack(x[:, 1::2], dim=1),
]
INT_REFS = [
  lambda x: x.transpose(1, 0, 2)[::-1], lambda x: np.pad(x, ((1, 0), (0, 0), (2, 1)), constant_values=-3), lambda x: x.reshape(4, 15)[1:3],
  lambda x: np.broadcast_to(x, (2, 3, 4, 5))[::-1], lambda x: np.tile(x, (1, 2, 1)), lambda x: np.roll(x, 2, -1),
  lambda x: np.concatenate([x[1:2, :, :3], x[:1, :, :3]]), lambda x: np.stack([x[:, ::-2], x[:, 1::2]], 1),
]


def test_int32_batch():
  a = np.arange(60, dtype=np.int32).reshape(3, 4, 5) - 30
  outs = [f(Tensor(a)) for f in INT_OPS]
  assert all(o.dtype is dtypes.int32 for o in outs)
  flat = [o.flatten() for o in outs]
  arr = flat[0].cat(*flat[1:]).numpy()
  off = 0
  for o, ref in zip(outs, INT_REFS):
    want = ref(a)
    np.testing.assert_array_equal(arr[off:off + o.numel()].reshape(o.shape), want)
    off += o.numel()


def test_bool():
  a = (np.arange(24).reshape(2, 3, 4) % 3) == 0
  x = Tensor(a)
  np.testing.assert_array_equal(x.permute(2, 0, 1).flip(1).numpy(), a.transpose(2, 0, 1)[:, ::-1])
  np.testing.assert_array_equal(x.pad(((0, 0), (1, 1), (0, 0))).numpy(), np.pad(a, ((0, 0), (1, 1), (0, 0))))
  np.testing.assert_array_equal(x[:, :2].cat(x[:, 2:], dim=1).numpy(), a)
  np.testing.assert_array_equal(x.expand(3, 2, 3, 4).reshape(6, 12).numpy(), np.broadcast_to(a, (3, 2, 3, 4)).reshape(6, 12))


def test_views_share_nothing_lazy():
  # movement ops on an unrealized expression are fused into its kernel and give the same values
  a = RNG.uniform(-1, 1, size=(4, 6)).astype(np.float32)
  y = (Tensor(a) * 2 + 1).T.reshape(3, 8).flip(1)[1:]
  np.testing.assert_allclose(y.numpy(), (a * 2 + 1).T.reshape(3, 8)[:, ::-1][1:], rtol=1e-6)


# ** errors **
@pytest.mark.parametrize("fn,exc", [
  (lambda x: x.reshape(5, 5), ValueError), (lambda x: x.reshape(-1, -1), RuntimeError), (lambda x: x.reshape(7, -1), ValueError),
  (lambda x: x.expand(3, 5), ValueError), (lambda x: x.expand(4), ValueError), (lambda x: x.permute(0, 0), RuntimeError),
  (lambda x: x.permute(0, 1, 2), (RuntimeError, IndexError)), (lambda x: x.permute(0, 2), IndexError), (lambda x: x.flip(2), IndexError),
  (lambda x: x.shrink(((0, 5), (0, 4))), ValueError), (lambda x: x.shrink(((2, 1), None)), ValueError), (lambda x: x.shrink(((0, 1),)), ValueError),
  (lambda x: x.pad(((1, 1),)), ValueError), (lambda x: x.pad((1, 2, 3)), ValueError), (lambda x: x.pad((4, 4), mode="reflect"), ValueError),
  (lambda x: x.pad((1, 1), mode="wrap"), NotImplementedError), (lambda x: x.cat(Tensor.ones(3, 3)), RuntimeError),
  (lambda x: x.cat(Tensor.ones(3)), RuntimeError), (lambda x: x.stack(Tensor.ones(3, 3)), RuntimeError), (lambda x: x.split([1, 1]), RuntimeError),
  (lambda x: x.chunk(0), RuntimeError), (lambda x: x.repeat(2), ValueError), (lambda x: x.squeeze(5), IndexError),
  (lambda x: x.unsqueeze(4), IndexError), (lambda x: x.unflatten(1, (3, 3)), ValueError), (lambda x: x.roll(1, 3), IndexError),
  (lambda x: x.transpose(0, 2), IndexError),
])
def test_errors(fn, exc):
  with pytest.raises(exc): fn(Tensor.ones(3, 4))


def test_rearrange_against_numpy():
  x = np.arange(2 * 3 * 4 * 6, dtype=np.float32).reshape(2, 3, 4, 6)
  t = Tensor(x)
  np.testing.assert_array_equal(t.rearrange("b c h w -> b h w c").numpy(), x.transpose(0, 2, 3, 1))
  want = x.reshape(2, 3, 2, 2, 6).reshape(2, 6, 2, 6)  # (h2 h) split, then (c h2) merged
  np.testing.assert_array_equal(t.rearrange("b c (h2 h) w -> b (c h2) h w", h2=2).numpy(), want)
  np.testing.assert_array_equal(t.rearrange("b ... w -> w b ...").numpy(), x.transpose(3, 0, 1, 2))
  np.testing.assert_array_equal(t.rearrange("b c h w -> (b c) (h w)").numpy(), x.reshape(6, 24))
  np.testing.assert_array_equal(t.rearrange("b c h w -> b c h w 1").numpy(), x[..., None])
  np.testing.assert_array_equal(t[:, :1].rearrange("b 1 h w -> b h w").numpy(), x[:, 0])


# tinygrad's types: a malformed formula fails an assertion, one that does not fit the shape fails as the reshape would
@pytest.mark.parametrize("formula,kw,exc", [("b c h w", {}, AssertionError), ("b c h -> b c h", {}, RuntimeError),
                                             ("b c h w -> b c h", {}, AssertionError), ("b c (h w) x -> b c h w x", {}, RuntimeError),
                                             ("b c h w -> b c h w", {"z": 2}, AssertionError), ("b c (h2 h) w -> b c h2 h w", {"h2": 3}, ValueError),
                                             ("b c (h w -> b c h w", {}, AssertionError)])
def test_rearrange_errors(formula, kw, exc):
  with pytest.raises(exc): Tensor.zeros(2, 3, 4, 6).rearrange(formula, **kw)


def test_data_is_a_shaped_memoryview():
  m = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3)).data()
  assert m.shape == (2, 3) and m.format == "i" and m.tolist() == [[0, 1, 2], [3, 4, 5]]
