"""The Tensor API on a tensor's graph node, as tinygrad's UOp has it (mixin/uop_api.py): `t.uop.sum(axis=0)` is the
node of `t.sum(axis=0)`. Values against NumPy, through Tensor(node)."""
import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes
from tinyhybrid.uop.ops import KernelInfo, UOp

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5


def value(u: UOp) -> np.ndarray: return Tensor(u).numpy()


@pytest.mark.parametrize("name,kwargs,want", [
  ("sum", {}, X.sum()), ("sum", {"axis": 1}, X.sum(1)), ("sum", {"axis": -1}, X.sum(-1)), ("sum", {"axis": (0, 2)}, X.sum((0, 2))),
  ("sum", {"axis": 1, "keepdim": True}, X.sum(1, keepdims=True)), ("prod", {"axis": 0}, X.prod(0)), ("max", {"axis": 2}, X.max(2)),
  ("min", {}, X.min()), ("mean", {"axis": 1}, X.mean(1)), ("std", {}, X.std(ddof=1)), ("var", {"axis": 2}, X.var(2, ddof=1)),
  ("argmax", {"axis": 1}, X.argmax(1))])
def test_reductions_of_a_node_are_the_tensors(name, kwargs, want):
  got = value(getattr(Tensor(X).uop, name)(**kwargs))
  assert got.shape == np.shape(want)
  np.testing.assert_allclose(got, want, rtol=1e-5)


def test_a_reduce_with_an_accumulation_type():
  h = Tensor([1.0, 2, 3], dtype=dtypes.float16).uop.sum(axis=0, dtype=dtypes.float32)
  assert h.dtype is dtypes.float32 and Tensor(h).item() == 6.0


def test_movement_of_a_node():
  u = Tensor(X).uop
  np.testing.assert_equal(value(u.permute(2, 0, 1)), X.transpose(2, 0, 1))
  np.testing.assert_equal(value(u.shrink(((0, 1), None, (1, 3)))), X[0:1, :, 1:3])
  np.testing.assert_equal(value(u.pad(((0, 0), (1, 0), (0, 2)))), np.pad(X, ((0, 0), (1, 0), (0, 2))))
  np.testing.assert_equal(value(u.flip(1)), X[:, ::-1])
  np.testing.assert_equal(value(u.reshape(4, -1)), X.reshape(4, 6))
  np.testing.assert_equal(value(u.flatten(1)), X.reshape(2, 12))
  np.testing.assert_equal(value(u.flatten()), X.reshape(-1))
  np.testing.assert_equal(value(u.shrink(((0, 1), None, None)).expand(3, 3, 4)), np.broadcast_to(X[:1], (3, 3, 4)))
  assert u.T.shape == (4, 3, 2)


def test_a_nodes_operands_may_be_nodes_and_numbers():
  u, w = Tensor(X).uop, Tensor(X[0].T.copy()).uop  # (2, 3, 4) @ (4, 3)
  np.testing.assert_allclose(value(u.matmul(w)), X @ X[0].T, rtol=1e-5)
  np.testing.assert_allclose(value(u.softmax(-1)), np.exp(X) / np.exp(X).sum(-1, keepdims=True), rtol=1e-5)
  np.testing.assert_equal(value(u + 1), X + 1)  # a bare constant takes the node's shape
  np.testing.assert_equal(value(2 * u), 2 * X)
  np.testing.assert_equal(value(u.maximum(0.0)), np.maximum(X, 0))
  a, b = u.chunk(2, dim=2)
  np.testing.assert_equal(value(a.cat(b, dim=2)), X)


def test_operators_uop_arithmetic_lacks():
  u, w = Tensor(X).uop, Tensor(X[0].T.copy()).uop
  np.testing.assert_allclose(value(u @ w), X @ X[0].T, rtol=1e-5)
  np.testing.assert_allclose(value(w.T @ w), X[0] @ X[0].T, rtol=1e-5)
  np.testing.assert_allclose(value(u ** 2), X ** 2, rtol=1e-6)
  assert Tensor(~Tensor([1, 2]).uop).tolist() == [-2, -3]


def test_a_node_is_indexed_as_its_tensor():
  # the kernel DSL's indexing (placeholders, test_custom_kernel.py) stays; a tensor's node takes Tensor indexing
  t = Tensor(X)
  for idx in [(1,), (slice(0, 1), 2), (Ellipsis, slice(None, None, 2)), (None, 1, slice(1, 3)), (0, [2, 0])]:
    np.testing.assert_equal(value(t.uop[idx]), X[tuple(np.newaxis if i is None else i for i in idx)])
  np.testing.assert_equal(value(Tensor.arange(12).reshape(3, 4).uop[Tensor([0, 2]).uop]), np.arange(12).reshape(3, 4)[[0, 2]])
  with pytest.raises(TypeError, match="cannot be indexed"): UOp.range(4, 0)[0]


def test_where_of_a_node_with_number_branches():
  cond = Tensor([True, False, True]).uop
  assert Tensor(cond.where(1, 0)).tolist() == [1, 0, 1]
  assert Tensor(cond.where(1.5, 0)).tolist() == [1.5, 0, 1.5]


def test_builders_on_the_class():
  assert Tensor(UOp.arange(5)).tolist() == [0, 1, 2, 3, 4]
  np.testing.assert_equal(value(UOp.eye(3)), np.eye(3, dtype=np.float32))


def test_a_custom_kernel_from_nodes():
  def add_one(B: UOp, A: UOp) -> UOp:
    i = UOp.range(A.numel(), 0)
    return B.flatten()[i].store(A.flatten()[i] + 1).end(i).sink(arg=KernelInfo(name="add_one"))
  a = Tensor(X)
  out = Tensor.empty_like(a).uop.custom_kernel(a.uop, fxn=add_one)
  assert isinstance(out, list) and all(isinstance(o, UOp) for o in out)
  np.testing.assert_equal(value(out[0]), X + 1)


def test_names_a_node_has_keep_their_own_meaning():
  # UOp arithmetic and the kernel DSL stay as they were: a loop index reshaped is an error, not a tensor op
  i = UOp.range(4, 0)
  with pytest.raises(ValueError, match="cannot become"): i.reshape(2, 2)
  assert (i + 1).op.name == "ADD" and (i + 1).shape is None


@pytest.mark.parametrize("scalar", [lambda: Tensor(2.0, dtype=dtypes.float32), lambda: Tensor([2.0]).reshape(()).contiguous().realize()],
                         ids=["constant", "buffer"])
def test_a_0d_source_broadcasts_in_alu_and_its_gradient_sums(scalar):
  # tinygrad: an ALU of a node and a 0-d node needs no EXPAND; the 0-d source's gradient is the sum over the broadcast
  from tinyhybrid.uop import Ops
  x, w = Tensor([1.0, 2.0, 3.0]), scalar()
  m = x.uop.alu(Ops.MUL, w.uop)
  assert m.src[1] is w.uop and m.shape == (3,)
  np.testing.assert_equal(Tensor(m).numpy(), [2.0, 4.0, 6.0])
  gx, gw = Tensor(m).sum().gradient(x, w)
  assert gw.shape == () and gw.item() == 6.0
  np.testing.assert_equal(gx.numpy(), [2.0, 2.0, 2.0])
  s = w.sin()  # used directly and through a broadcast: both edges' gradients, each at s's shape
  dw = (Tensor(x.uop.alu(Ops.MUL, s.uop)).sum() + s).gradient(w)[0]
  np.testing.assert_allclose(dw.item(), 7 * np.cos(2.0), rtol=1e-6)


def test_buf_uop_is_the_memory_under_a_node():
  from tinyhybrid.uop import Ops
  t = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  base = t.uop.buf_uop
  assert base.op is Ops.BUFFER and t.reshape(2, 2)[1:].uop.buf_uop is base and base.buf_uop is base
  a, b = [Tensor(Tensor([0]).realize().uop.buf_uop) for _ in range(2)]  # tinygrad's test_assign_changes_buffer_alt
  Tensor.realize(a.contiguous().assign(1), b.contiguous().assign(2))
  assert (a + b).item() == 3
  s = Tensor.arange(4).float().contiguous().shard(("CPU:1", "CPU:2"), axis=0).realize()
  assert s.uop.buf_uop.op is Ops.MSTACK and all(x.op is Ops.BUFFER for x in s.uop.buf_uop.src)
