"""The onnx package's own backend test suite run through tinyhybrid.nn.onnx.OnnxRunner, plus direct runner tests.

Every test the suite generates runs except those excluded below, each exclusion grouped by its reason. The node tests
come from the onnx package's Python test cases, the simple, pytorch-operator, pytorch-converted and light ("real")
models from the data files it ships; nothing is downloaded. The light models (alexnet, resnet50, inception, vgg19, ...)
spend two to three minutes compiling kernels on a cold cache, so they run only with ONNX_REAL=1."""
from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper
from onnx.backend.base import Backend, BackendRep

from tinyhybrid import Tensor, dtypes
from tinyhybrid.nn.onnx import OnnxRunner, np_of


def _to_numpy(v):
  if v is None or isinstance(v, np.ndarray): return v
  if isinstance(v, list): return [_to_numpy(x) for x in v]
  return v.numpy().astype(np_of(v.dtype))  # (bfloat16 and the float8s as ml_dtypes has them)


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
  # no float4, 2-bit or 4-bit types; tinyhybrid has no strings
  "unsupported dtype: float8e8m0, float4, int4/uint4, int2/uint2": [r"FLOAT8E8M0", r"FLOAT4E2M1", r"U?INT[24]_",
                                                                     r"quantizelinear_(float4e2m1|u?int[24])_"],
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


# ***** loading: external data, malformed models *****

def _external_model(location, offset=None, length=None):
  """y = x + w, with w's two floats kept in an external file."""
  w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], data_location=TensorProto.EXTERNAL)
  for k, v in (("location", location), ("offset", offset), ("length", length)):
    if v is not None: w.external_data.add(key=k, value=str(v))
  return _model([helper.make_node("Add", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [w])


def test_external_data_next_to_the_model(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "w.bin").write_bytes(b"pad!" + np.array([1, 2, 3], np.float32).tobytes())
  os.symlink(tmp_path / "w.bin", tmp_path / "sub" / "link.bin")  # a link that stays inside the directory is followed
  for loc, off, n in (("w.bin", 4, 8), ("w.bin", 8, None), ("sub/../w.bin", 4, 8), ("sub/link.bin", 4, 8)):
    onnx.save(_external_model(loc, off, n), tmp_path / "m.onnx")
    want = [2.0, 3.0] if off == 4 else [3.0, 4.0]
    np.testing.assert_equal(OnnxRunner(tmp_path / "m.onnx")({"x": np.ones(2, np.float32)})["y"].numpy(), want, err_msg=loc)


def test_external_data_without_a_directory_is_refused(tmp_path, monkeypatch):
  # the file sits in the working directory, which is where a model from bytes used to read it
  monkeypatch.chdir(tmp_path)
  (tmp_path / "w.bin").write_bytes(np.ones(2, np.float32).tobytes())
  m = _external_model("w.bin")
  for src in (m.SerializeToString(), Tensor(m.SerializeToString()), m):
    with pytest.raises(ValueError, match=r"tensor 'w' of the .* keeps its data in the external file 'w.bin', but .* no directory"): OnnxRunner(src)
  assert m.graph.initializer[0].data_location == TensorProto.EXTERNAL  # the caller's proto is left as it was
  # a Constant's tensor inside an If branch is found too
  w = m.graph.initializer[0]
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
  branch = helper.make_graph([helper.make_node("Constant", [], ["y"], value=w)], "b", [], [y])
  m2 = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
              [helper.make_tensor_value_info("c", TensorProto.BOOL, [])], [y])
  with pytest.raises(ValueError, match="tensor 'w' of the .* keeps its data in the external file 'w.bin'"): OnnxRunner(m2.SerializeToString())
  onnx.save(m2, tmp_path / "m2.onnx")  # from its path the same model reads the file
  np.testing.assert_equal(OnnxRunner(tmp_path / "m2.onnx")({"c": np.array(True)})["y"].numpy(), [1.0, 1.0])


def test_external_data_outside_the_directory_is_refused(tmp_path):
  (d := tmp_path / "model").mkdir()
  (tmp_path / "secret.bin").write_bytes(np.ones(2, np.float32).tobytes())
  os.symlink(tmp_path / "secret.bin", d / "link.bin")
  (d / "sub").mkdir()
  os.mkfifo(d / "fifo")  # opened without blocking, then refused
  cases = {"../secret.bin": "outside the model's directory", str(tmp_path / "secret.bin"): "an absolute path",
           "link.bin": "outside the model's directory", "sub/../../secret.bin": "outside the model's directory", ".": "not a regular file",
           "sub": "not a regular file", "fifo": "not a regular file", "missing.bin": "cannot be opened", "": "not a file name"}
  for loc, why in cases.items():
    onnx.save(_external_model(loc), d / "m.onnx")
    with pytest.raises(ValueError, match=rf"tensor 'w' of '.*m\.onnx' keeps its data in the external file {loc!r}.*{why}"): OnnxRunner(d / "m.onnx")


def test_external_data_span_is_checked_against_the_file(tmp_path):
  (tmp_path / "w.bin").write_bytes(np.ones(2, np.float32).tobytes())
  cases = {(9, None): r"its data \(offset 9\) reaches past the end of the 8-byte file",
           (4, 8): r"its data \(offset 4, length 8\) reaches past the end of the 8-byte file", (0, 2**62): "reaches past the end",
           (-1, None): "its offset '-1' is not a byte count", (None, "8x"): "its length '8x' is not a byte count",
           (None, "9" * 5000): "its length '9999.*' is not a byte count",
           (4, None): r"is not a valid ONNX model: tensor 'w' is malformed"}  # the 4 bytes left hold one float, not two
  for (off, n), why in cases.items():
    onnx.save(_external_model("w.bin", off, n), tmp_path / "m.onnx")
    with pytest.raises(ValueError, match=why): OnnxRunner(tmp_path / "m.onnx")


def test_malformed_models_are_value_errors(tmp_path):
  x, y = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
  bad_type = TensorProto(name="w", data_type=110, dims=[2], raw_data=bytes(8))  # no such element type: onnx raises KeyError
  undefined = TensorProto(name="w", data_type=TensorProto.UNDEFINED, dims=[2], raw_data=bytes(8))  # onnx raises TypeError
  short = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], raw_data=bytes(4))
  for w in (bad_type, undefined, short):
    m = _model([helper.make_node("Add", ["x", "w"], ["y"])], [x], [y], [w])
    with pytest.raises(ValueError, match=r"the \d+ bytes given is not a valid ONNX model: tensor 'w'"): OnnxRunner(m.SerializeToString())
  # a Constant's tensor is read the same way
  c = _model([helper.make_node("Constant", [], ["y"], value=short)], [], [y])
  with pytest.raises(ValueError, match=r"the ModelProto given is not a valid ONNX model: tensor 'w' is malformed") as e: OnnxRunner(c)
  assert e.value.__cause__ is not None
  # onnx.load reads these by the file's extension: each format's parse error is a ValueError naming the file, chained
  for name, text in (("m.json", "{garbage"), ("m.textproto", "garbage {"), ("m.onnxtxt", "garbage {")):
    (tmp_path / name).write_text(text)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # onnx calls its text format experimental
      with pytest.raises(ValueError, match=rf"'.*{name}' is not an ONNX model") as e: OnnxRunner(tmp_path / name)
    assert e.value.__cause__ is not None
  with pytest.raises(ValueError, match="the 3 bytes given is not an ONNX model") as e: OnnxRunner(b"\xff\xff\xff")
  assert type(e.value.__cause__).__name__ == "DecodeError"
  # an input of an element type that does not exist (DataType.Name raised a ValueError naming nothing)
  bad_input = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", 77, [2])], [y])
  with pytest.raises(ValueError, match="ONNX: 77 is not an element type"): OnnxRunner(bad_input)({"x": np.zeros(2, np.float32)})


def _with_functions(funcs, nodes):
  x, y = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
  return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                           functions=funcs)


def test_invalid_local_functions_are_value_errors():
  def fn(name, *nodes): return helper.make_function("local", name, ["a"], ["b"], list(nodes), [helper.make_opsetid("", 17)])
  def call(name, ins=("a",), outs=("b",)): return helper.make_node(name, list(ins), list(outs), domain="local")
  add = helper.make_node("Add", ["a", "a"], ["b"])
  # onnx 1.23 raises its checker's ValidationError (no ValueError) for the first three; 1.17 to 1.19 crash on a cycle
  cases = {r"calls itself \(local::F -> local::F\)": _with_functions([fn("F", call("F"))], [call("F", ["x"], ["y"])]),
           r"calls itself \(local::G -> local::H -> local::G\)": _with_functions(
             [fn("F", call("G")), fn("G", call("H")), fn("H", helper.make_node("If", ["a"], ["b"], then_branch=helper.make_graph(
               [call("G")], "t", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])]), else_branch=helper.make_graph(
               [add], "e", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])])))], [call("F", ["x"], ["y"])]),
           "two local functions local::F": _with_functions([fn("F", add), fn("F", add)], [call("F", ["x"], ["y"])]),
           # a C++ assertion of the inliner, which arrives as RuntimeError
           "cannot be inlined": _with_functions([fn("F", add)], [call("F", ["x", "x"], ["y"])])}
  for why, m in cases.items():
    with pytest.raises(ValueError, match=f"the ModelProto given is not a valid ONNX model: .*{why}") as e: OnnxRunner(m)
    assert e.value.__cause__ is not None
    with pytest.raises(ValueError, match=r"the \d+ bytes given is not a valid ONNX model"): OnnxRunner(m.SerializeToString())
  # a call graph that shares a function without a cycle inlines
  ok = _with_functions([fn("F", call("G", outs=["c"]), helper.make_node("Add", ["c", "a"], ["b"])), fn("G", call("H")), fn("H", add)],
                       [call("F", ["x"], ["y0"]), call("G", ["y0"], ["y"])])
  np.testing.assert_equal(OnnxRunner(ok)({"x": np.ones(2, np.float32)})["y"].numpy(), [6.0, 6.0])


def test_local_functions_without_onnx_inliner_imported():
  # onnx.inliner is a submodule `import onnx` does not load: a fresh process, as another test here may have imported it
  code = """if 1:
    import numpy as np
    from onnx import TensorProto, helper
    from tinyhybrid.nn.onnx import OnnxRunner
    f = helper.make_function("local", "Double", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])], [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Double", ["x"], ["y"], domain="local")], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)], functions=[f])
    print(OnnxRunner(m)({"x": np.ones(2, np.float32)})["y"].numpy().tolist())"""
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert out.returncode == 0 and out.stdout.strip() == "[2.0, 2.0]", out.stderr[-2000:]


def test_old_onnx_bfloat16_arrays():
  # onnx < 1.19 gives bfloat16 as a structured uint16 array of the raw bits: values, not bits, reach the model
  old = np.array([0x3FC0, 0xC000], np.uint16).view(np.dtype((np.uint16, {"bfloat16": (np.uint16, 0)})))
  m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)], [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
  np.testing.assert_equal(OnnxRunner(m)({"x": old})["y"].numpy(), [1.5, -2.0])
  mel = _model([helper.make_node("MelWeightMatrix", ["b", "n", "r", "lo", "hi"], ["y"], output_datatype=TensorProto.BFLOAT16)], [],
               [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, None)],
               [onnx.numpy_helper.from_array(np.array(v, dt), k) for k, v, dt in
                (("b", 4, np.int64), ("n", 16, np.int64), ("r", 8000, np.int64), ("lo", 0.0, np.float32), ("hi", 4000.0, np.float32))])
  assert OnnxRunner(mel)({})["y"].dtype is dtypes.bfloat16


_FP8 = [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ]


@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("to", _FP8)
def test_cast_to_float8_saturates_as_the_reference(to, saturate):
  from onnx.reference import ReferenceEvaluator
  vals = np.array([0.0, -0.0, 1.5, -3.3, 240.0, 247.9, 248.0, 250.0, 448.0, 460.0, 464.0, 470.0, 500.0, 57344.0, 61439.0,
                   61440.0, 70000.0, 1e9, np.inf, -np.inf, np.nan, -1e-9, 1e-3], np.float32)
  node = helper.make_node("Cast", ["x"], ["y"], to=to, saturate=saturate)
  g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(vals)])],
                        [helper.make_tensor_value_info("y", to, [len(vals)])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
  want = np.asarray(ReferenceEvaluator(m).run(None, {"x": vals})[0]).astype(np.float32)
  np.testing.assert_array_equal(OnnxRunner(m)({"x": vals})["y"].numpy(), want)


@pytest.mark.parametrize("to", _FP8)
def test_float8_initializers_and_inputs(to):
  from onnx.reference import ReferenceEvaluator
  ml = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
        TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}[to]
  w = np.array([0.5, -2.0, 3.0, 96.0], np.float32).astype(ml)
  init = onnx.numpy_helper.from_array(w, "w")
  nodes = [helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT), helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
           helper.make_node("Mul", ["wf", "xf"], ["y"])]
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", to, [4])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [init])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
  x = np.array([1.0, 0.25, -1.5, 2.0], np.float32).astype(ml)
  want = ReferenceEvaluator(m).run(None, {"x": x})[0]
  np.testing.assert_array_equal(OnnxRunner(m)({"x": x})["y"].numpy(), want)


def test_a_constant_matmul_weight_is_read_along_its_reduce():
  """A float32 (K, N) initializer that only MatMul reads, N >= K, is stored (N, K) and read through a transpose, so the
  product runs as nn.Linear's does; one another op also reads, or with N < K, stays as the file has it."""
  rng = np.random.default_rng(0)
  w_wide, w_tall, w_shared = (rng.standard_normal(s).astype(np.float32) for s in ((8, 24), (24, 8), (8, 8)))
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])
  nodes = [helper.make_node("MatMul", ["x", "w_wide"], ["a"]), helper.make_node("MatMul", ["a", "w_tall"], ["b"]),
           helper.make_node("MatMul", ["b", "w_shared"], ["c"]), helper.make_node("Add", ["c", "w_shared"], ["y"])]
  inits = [onnx.numpy_helper.from_array(a, n) for a, n in ((w_wide, "w_wide"), (w_tall, "w_tall"), (w_shared, "w_shared"))]
  runner = OnnxRunner(_model(nodes, [x], [y], inits))
  xs = rng.standard_normal((8, 8)).astype(np.float32)
  np.testing.assert_allclose(runner({"x": xs})["y"].numpy(), xs @ w_wide @ w_tall @ w_shared + w_shared, rtol=1e-5, atol=1e-5)
  layout = {n: t.uop.op for n, t in runner.graph._init_tensors.items()}
  assert layout["w_wide"].name == "PERMUTE" and layout["w_tall"].name != "PERMUTE" and layout["w_shared"].name != "PERMUTE"
