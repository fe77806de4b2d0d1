"""Deep graphs: every pass walks with an explicit stack (or the C++ toposort), so a program as deep as a long Python
loop of tensor ops realizes. The depth-limited cases run under a recursion limit a few hundred frames above the
test's own depth: any pass that recursed once per node would raise RecursionError there."""
import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from tinyhybrid import Ops, Tensor
from tinyhybrid.nn.onnx import OnnxRunner


@pytest.fixture
def shallow_stack():
  """A recursion limit 400 frames above the caller: far below the depth of the graphs built under it."""
  old = sys.getrecursionlimit()
  frame, depth = sys._getframe(), 0
  while frame is not None: frame, depth = frame.f_back, depth + 1
  sys.setrecursionlimit(depth + 400)
  yield
  sys.setrecursionlimit(old)


def test_user_chain_of_20000_adds():
  # the new user's program from issue 19: it died with RecursionError in codegen/lower.py
  t = Tensor([1.0, 2.0, 3.0])
  for _ in range(20000): t = t + 1
  np.testing.assert_equal(t.numpy(), np.array([20001.0, 20002.0, 20003.0], np.float32))


def test_elementwise_chain(shallow_stack):
  x = np.linspace(-1, 1, 7).astype(np.float32)
  t, ref = Tensor(x), torch.tensor(x)
  for i in range(3000):
    t, ref = (t * 0.5 + 1) if i % 2 else (t - 0.25), (ref * 0.5 + 1) if i % 2 else (ref - 0.25)
  np.testing.assert_allclose(t.numpy(), ref.numpy(), rtol=1e-6)


def test_movement_chain(shallow_stack):
  # permutes, flips and reshapes between the adds: the index pushes through thousands of views
  t, ref = Tensor.arange(6).reshape(2, 3).float(), torch.arange(6).reshape(2, 3).float()
  for _ in range(1500):
    t = (t.permute(1, 0) + 1).flip(0).permute(1, 0).reshape(6).reshape(2, 3)
    ref = (ref.permute(1, 0) + 1).flip(0).permute(1, 0).reshape(6).reshape(2, 3)
  np.testing.assert_equal(t.numpy(), ref.numpy())


def test_autograd_chain(shallow_stack):
  x = Tensor([0.5, -1.0, 2.0], requires_grad=True)
  xt = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
  t, r = x, xt
  for _ in range(1500): t, r = t * 1.001 + 0.001, r * 1.001 + 0.001
  (t * t).sum().backward()
  (r * r).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5)


def test_chain_of_kernels(shallow_stack):
  # each reduce ends a kernel: a schedule of 800 kernels, each reading the last
  t, ref = Tensor.ones(3, 4), np.ones((3, 4), np.float32)
  for _ in range(800): t, ref = t.sum(1, keepdim=True).expand(3, 4) * 0.25, np.broadcast_to(ref.sum(1, keepdims=True), (3, 4)) * 0.25
  np.testing.assert_allclose(t.numpy(), ref, rtol=1e-6)


def test_chain_through_contiguous(shallow_stack):
  # contiguous every few ops: many small kernels, each a short chain, in one realize
  t = Tensor([3.0, 4.0])
  for i in range(1200):
    t = t + 1
    if i % 50 == 0: t = t.contiguous()
  np.testing.assert_equal(t.numpy(), np.array([1203.0, 1204.0], np.float32))


def _model(**kw) -> bytes:
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
  g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
  return helper.make_model(g, **kw).SerializeToString()


def test_long_gates_and_masks(shallow_stack):
  # the conditions of a gate and the lanes of a vector mask are walked, not recursed: 3000 joined conditions
  from tinyhybrid import UOp, dtypes
  from tinyhybrid.codegen.expand import mask_size
  from tinyhybrid.codegen.lower import _and_terms
  x = UOp.variable("x", 0, 10**6)
  conds = [x < (i + 1) for i in range(3000)]
  chain = conds[0]
  for c in conds[1:]: chain = chain & c
  assert _and_terms(chain) == conds
  vx = UOp(Ops.VECTORIZE, dtypes.int.vec(4), (x.cast(dtypes.int),) * 4)
  vmask = (vx < 3)
  for i in range(3000): vmask = vmask & (vx < i + 4)
  assert mask_size(vmask) == 4
  assert mask_size(vmask & UOp(Ops.VECTORIZE, dtypes.bool.vec(4), (x < 5,) * 4)) is None  # a lane not from a comparison


@pytest.mark.parametrize("data", [b"\xff\xff\xff\xff", b"\x0a\x80", _model()[:-3]], ids=["garbage", "truncated-field", "truncated-model"])
def test_malformed_onnx_bytes(data):
  with pytest.raises(ValueError, match=rf"OnnxRunner: the {len(data)} bytes given is not an ONNX model"): OnnxRunner(data)


def test_malformed_onnx_file(tmp_path):
  bad = tmp_path / "model.onnx"
  bad.write_bytes(_model()[:-5])
  with pytest.raises(ValueError, match=r"OnnxRunner: '.*model\.onnx' is not an ONNX model"): OnnxRunner(bad)
  with pytest.raises(ValueError, match=r"OnnxRunner: '.*model\.onnx' is not an ONNX model"): OnnxRunner(str(bad))


def test_empty_onnx_is_not_a_model():
  # protobuf parses the empty string as an empty message: no graph, so not a model
  with pytest.raises(ValueError, match="OnnxRunner: the 0 bytes given is not an ONNX model: it has no graph"): OnnxRunner(b"")


def test_wellformed_onnx_still_runs():
  out = OnnxRunner(_model(opset_imports=[onnx.helper.make_opsetid("", 17)]))({"x": np.array([-1.0, 2.0], np.float32)})
  np.testing.assert_equal(out["y"].numpy(), np.array([0.0, 2.0], np.float32))


def test_onnx_undefined_value_is_value_error():
  # found by the loader fuzzer: a flipped byte in a node's input name leaves a value that nothing defines
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
  g = helper.make_graph([helper.make_node("Relu", ["x\x87"], ["y"])], "g", [x], [y])
  runner = OnnxRunner(helper.make_model(g, opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString())
  with pytest.raises(ValueError, match=r"ONNX: value 'x\\x87' is used before it is defined"): runner({"x": np.ones(2, np.float32)})


def test_schedule_works_out_each_shape_once(monkeypatch):
  # the scheduler's rules read shapes, kept on a node's Python object: a rewrite that let the objects of rebuilt nodes
  # go walked the graph below every reduce again (a ResNet-50 training step: 16 s of a 19 s schedule, quadratic)
  import tinyhybrid.uop.shape as shape
  calls, own_shape = [0], shape._own_shape
  def counted(u, srcs):
    calls[0] += 1
    return own_shape(u, srcs)
  monkeypatch.setattr(shape, "_own_shape", counted)
  x = Tensor.empty(64, 64, device="NULL", requires_grad=True)
  h = x
  for _ in range(60): h = (h @ Tensor.empty(64, 64, device="NULL")).relu()
  h.sum().backward()
  nodes = len(x.grad.uop.toposort())
  calls[0] = 0
  x.grad.realize()
  assert 0 < calls[0] < 8 * nodes, (calls[0], nodes)
