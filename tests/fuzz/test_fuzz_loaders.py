"""Malformed files for every loader: safetensors, gguf, torch (zip and legacy), onnx. A valid small file of each is
mutated (truncated, bytes flipped, spans overwritten or inserted, length fields made huge); loading it either works
(some mutations change only data) and gives tensors that can be read, or raises ValueError with a message naming the
file. Never another exception, never a crash."""
from __future__ import annotations

import functools
import io
import struct

import numpy as np
import onnx
import pytest
import torch
from fuzzlib import fuzz
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from tinyhybrid import Tensor
from tinyhybrid.nn.onnx import OnnxRunner
from tinyhybrid.nn.state import gguf_load, safe_load, safe_save, torch_load

gguf = pytest.importorskip("gguf")


@functools.cache
def valid(kind: str) -> bytes:
  """A small valid file of each kind, with a few tensors of different dtypes and shapes."""
  rng = np.random.default_rng(0)
  if kind == "safetensors":
    import tempfile
    with tempfile.TemporaryDirectory() as d:
      safe_save({"w": Tensor(rng.standard_normal((3, 4)).astype(np.float32)), "b": Tensor(np.arange(5, dtype=np.int32)),
                 "h": Tensor(np.ones((2, 2), np.float16))}, f"{d}/m.safetensors", metadata={"k": "v"})
      return open(f"{d}/m.safetensors", "rb").read()
  if kind in ("torch", "torch_legacy"):
    buf = io.BytesIO()
    torch.save({"w": torch.randn(3, 4), "b": torch.arange(5), "nested": {"x": torch.ones(2, 2, dtype=torch.float16)}}, buf,
               _use_new_zipfile_serialization=kind == "torch")
    return buf.getvalue()
  if kind == "gguf":
    import tempfile
    with tempfile.TemporaryDirectory() as d:
      w = gguf.GGUFWriter(f"{d}/m.gguf", "llama")
      w.add_uint32("answer", 42)
      w.add_string("name", "fuzz")
      w.add_tensor("w", rng.standard_normal((3, 4)).astype(np.float32))
      w.add_tensor("b", np.arange(6, dtype=np.float16))
      w.write_header_to_file()
      w.write_kv_data_to_file()
      w.write_tensors_to_file()
      w.close()
      return open(f"{d}/m.gguf", "rb").read()
  assert kind == "onnx"
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
  wt = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")
  nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
  return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [wt]), opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


KINDS = ["safetensors", "torch", "torch_legacy", "gguf", "onnx"]


@st.composite
def mutations(draw):
  """A list of edits: (kind, where as a fraction of the length, bytes)."""
  edit = st.tuples(st.sampled_from(["truncate", "flip", "overwrite", "insert", "huge_u64", "zero"]), st.floats(0, 1),
                   st.binary(min_size=1, max_size=8))
  return draw(st.lists(edit, min_size=1, max_size=3))


def mutate(data: bytes, edits: list) -> bytes:
  b = bytearray(data)
  for kind, where, junk in edits:
    i = min(int(where * len(b)), max(len(b) - 1, 0))
    if kind == "truncate": b = b[:i]
    elif kind == "flip" and b: b[i] ^= junk[0] or 0xFF
    elif kind == "overwrite": b[i:i + len(junk)] = junk
    elif kind == "insert": b[i:i] = junk
    elif kind == "huge_u64": b[i:i + 8] = struct.pack("<Q", 2**63 - 1 - junk[0])
    elif kind == "zero": b[i:i + len(junk)] = bytes(len(junk))
  return bytes(b)


def load(kind: str, path) -> None:
  """Loads the file and reads every tensor it gives back."""
  if kind == "onnx":
    out = OnnxRunner(path)({"x": np.ones((2, 3), np.float32)})
    for v in out.values():
      if isinstance(v, Tensor): v.numpy()
    return
  got = safe_load(path) if kind == "safetensors" else gguf_load(path)[1] if kind == "gguf" else torch_load(path)
  stack = [got]
  while stack:
    v = stack.pop()
    if isinstance(v, Tensor): v.numpy()
    elif isinstance(v, dict): stack.extend(v.values())
    elif isinstance(v, (list, tuple)): stack.extend(v)


@pytest.mark.parametrize("kind", KINDS)
def test_valid_files_load(kind, tmp_path):
  (p := tmp_path / f"m.{kind}").write_bytes(valid(kind))
  load(kind, p)


@pytest.mark.parametrize("kind", KINDS)
@fuzz(ci=30, long=20_000)
@given(edits=mutations())
def test_malformed_file_is_value_error(kind, edits, tmp_path_factory):
  data = mutate(valid(kind), edits)
  p = tmp_path_factory.mktemp("fuzz") / f"m.{kind}"
  p.write_bytes(data)
  try: load(kind, p)
  except ValueError as e:  # naming the file, or (a model that parses but is inconsistent) the value it lacks
    assert str(p) in str(e) or "bytes given" in str(e) or "<tensor>" in str(e) or "ONNX: value" in str(e), f"{kind}: {e!r} does not name the file"
  except NotImplementedError as e:  # an op the model names that the runner does not have (a mangled op type)
    assert kind == "onnx", f"{kind}: {e!r}"
