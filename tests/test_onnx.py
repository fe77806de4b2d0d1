"""The onnx package's own backend test suite run through tinyhybrid.nn.onnx.OnnxRunner, plus direct runner tests.

Every test the suite generates runs except those excluded below, each exclusion grouped by its reason. The node tests
come from the onnx package's Python test cases, the simple, pytorch-operator, pytorch-converted and light ("real")
models from the data files it ships; nothing is downloaded. The light models (alexnet, resnet50, inception, vgg19, ...)
spend two to three minutes compiling kernels on a cold cache, so they run only with ONNX_REAL=1."""
from __future__ import annotations

import io
import os
import warnings

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper
from onnx.backend.base import Backend, BackendRep

from tinyhybrid import Tensor, dtypes
from tinyhybrid.nn.onnx import OnnxRunner


def _to_numpy(v):
  if v is None or isinstance(v, np.ndarray): return v
  if isinstance(v, list): return [_to_numpy(x) for x in v]
  return v.numpy().astype(ml_dtypes.bfloat16) if v.dtype is dtypes.bfloat16 else v.numpy()


class TinyhybridRep(BackendRep):
  def __init__(self, runner: OnnxRunner): self.runner = runner

  def run(self, inputs, **kwargs):
    names = self.runner.graph.input_names
    if isinstance(inputs, dict): feeds = inputs
    else: feeds = dict(zip(names, inputs if isinstance(inputs, (list, tuple)) else [inputs]))
    out = self.runner(feeds)
    return tuple(_to_numpy(out[n]) for n in self.runner.graph.output_names)


class TinyhybridBackend(Backend):
  @classmethod
  def prepare(cls, model, device="CPU", **kwargs): return TinyhybridRep(OnnxRunner(model))

  @classmethod
  def supports_device(cls, device): return device == "CPU"


# Every exclusion, by reason. A pattern is a regex searched in the test name.
EXCLUDE: dict[str, list[str]] = {
  # the C renderer has no float8, float4, 2-bit or 4-bit types, and tinyhybrid has no strings
  "unsupported dtype: float8, float4, int4/uint4, int2/uint2": [r"FLOAT8E", r"FLOAT4E2M1", r"U?INT[24]_",
                                                                r"quantizelinear_(e4m3fn|e5m2|float4e2m1|u?int[24])_"],
  "unsupported dtype: string": [r"_string", r"strnorm", r"regex_full_match", r"label_encoder"],
  # image files need codecs (JPEG, PNG, WebP, ...)
  "unsupported op: ImageDecoder": [r"image_decoder"],
  "unsupported op: ai.onnx.ml TreeEnsemble, TfIdfVectorizer": [r"tree_ensemble", r"tfidfvectorizer"],
  # RoiAlign's adaptive sampling grid differs per region; DeformConv samples at learned offsets
  "unsupported op: RoiAlign, DeformConv": [r"roialign", r"deform_conv"],
  # the expected values come from numpy's random generator
  "random output: Bernoulli, training-mode Dropout": [r"bernoulli", r"test_training_dropout(_default)?(_mask)?_cpu"],
  # the expected outputs hold float32 rounding noise (~2e-7) above the test's atol of 1e-7; ours computes in float64
  "precision of the expected output: inverse DFT": [r"test_dft_inverse"],
  # the reference accumulates the float16 convolution in float16, we accumulate in float32: 1-ulp differences
  "precision of the expected output: float16 accumulation": [r"causal_conv_with_state_silu_fp16"],
  # composed of float16 ops, each rounding as the C kernels do; a single element lands one ulp from numpy's result
  "precision of the expected output: float16 op graphs": [r"attention_4d_(causal|gqa_with_past_and_present)_fp16_expanded"],
  # the onnx runner compares the elements of a sequence output with len(), which fails for its 0-d first element
  "onnx test runner: sequence of 0-d tensors": [r"test_loop16_seq_none"],
}
if not os.getenv("ONNX_REAL"):
  EXCLUDE["time budget: light models, run with ONNX_REAL=1"] = [
    r"^test_(bvlc_alexnet|densenet121|inception_v[12]|resnet50|shufflenet|squeezenet|vgg19|zfnet512)_"]

with warnings.catch_warnings():  # the onnx package's test cases overflow some casts on purpose while they build
  warnings.simplefilter("ignore")
  backend_test = onnx.backend.test.BackendTest(TinyhybridBackend, __name__)
for pats in EXCLUDE.values():
  for pat in pats: backend_test.exclude(pat)

# The suite makes every case for each device; this backend is CPU-only, so the CUDA twins are dropped, not skipped.
test_cases = backend_test.test_cases  # a new set of classes on every access
for case in test_cases.values():
  for name in [n for n in vars(case) if n.startswith("test_") and n.endswith("_cuda")]: delattr(case, name)
globals().update(test_cases)


# ***** the runner itself *****

def _model(nodes, inputs, outputs, inits=(), opset=17):
  g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_unsupported_op_names_op_and_opset():
  m = _model([helper.make_node("Foo", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  with pytest.raises(NotImplementedError, match=r"ONNX op 'Foo' \(opset 17\) is not supported"): OnnxRunner(m)


def test_path_bytes_and_proto(tmp_path):
  w = np.arange(6, dtype=np.float32).reshape(2, 3)
  m = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [onnx.numpy_helper.from_array(w, "w")])
  onnx.save(m, tmp_path / "m.onnx")
  x = np.ones((4, 2), np.float32)
  for src in (m, m.SerializeToString(), Tensor(m.SerializeToString()), str(tmp_path / "m.onnx")):
    out = OnnxRunner(src)({"x": x})
    assert isinstance(out["y"], Tensor)
    np.testing.assert_allclose(out["y"].numpy(), x @ w)


def test_shape_subgraph_runs_on_host():
  # Reshape(x, Concat(Gather(Shape(x), 0), [-1])): the shape arithmetic is host work, one kernel is the copy at most
  nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
           helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]), helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
           helper.make_node("Reshape", ["x", "shape"], ["y"])]
  inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"), onnx.numpy_helper.from_array(np.array([0], np.int64), "zero1"),
           onnx.numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
  m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
             inits)
  runner = OnnxRunner(m)
  x = np.random.rand(2, 3, 4).astype(np.float32)
  y = runner({"x": x})["y"]
  assert y.shape == (2, 12)
  np.testing.assert_equal(y.numpy(), x.reshape(2, 12))


def test_input_checks():
  m = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  r = OnnxRunner(m)
  with pytest.raises(ValueError, match="missing inputs"): r({})
  with pytest.raises(ValueError, match="dimension 0 must be 2"): r({"x": np.zeros(3, np.float32)})
  with pytest.raises(TypeError, match="must be dtypes.float"): r({"x": Tensor([1, 2])})
  np.testing.assert_equal(r({"x": [-1.0, 2.0]})["y"].numpy(), [0.0, 2.0])
  # a named dimension has one size across the inputs
  m2 = _model([helper.make_node("Add", ["a", "b"], ["c"])], [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in "ab"],
              [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])])
  with pytest.raises(ValueError, match="size of 'n'"): OnnxRunner(m2)({"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})


def test_torch_export_dynamic_batch():
  # torch's exporter computes reshapes from Shape/Gather/Concat chains: those run on the host, for any batch size
  torch = pytest.importorskip("torch")
  m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5),
                          torch.nn.Softmax(-1)).eval()
  f = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(m, (torch.randn(2, 3, 6, 6),), f, dynamo=False, input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}})
  runner = OnnxRunner(f.getvalue())
  for n in (1, 3):
    x = torch.randn(n, 3, 6, 6)
    np.testing.assert_allclose(runner({"x": x.numpy()})["y"].numpy(), m(x).detach().numpy(), rtol=1e-5, atol=1e-6)
