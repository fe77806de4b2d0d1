"""ONNX models on tinyhybrid: `OnnxRunner(model)({"input": x})` returns {"output": Tensor}.

The onnx package parses the model; every node becomes Tensor ops (python/tinyhybrid/nn/onnx_ops.py), so a whole
model stays one lazy graph until its outputs are read. Values that only describe shapes (initializers, Constant
nodes, Shape, and small integer arithmetic on them) are also kept as numpy arrays and evaluated on the host, so a
Reshape or Slice whose arguments come from a Shape subgraph needs no kernel and no device read-back. If, Loop, Scan
and SequenceMap run their subgraphs from Python, reading their conditions back when they are computed on the device.
"""
from __future__ import annotations

import os
from typing import Any, cast

import ml_dtypes
import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, numpy_helper

from tinyhybrid.device import np_storage
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.tensor import Tensor

# a node's value: a Tensor, a list of Tensors (an ONNX sequence), or None (an absent optional value)
Value = Any

_DTYPES: dict[int, DType] = {
  TensorProto.FLOAT: dtypes.float32, TensorProto.UINT8: dtypes.uint8, TensorProto.INT8: dtypes.int8, TensorProto.UINT16: dtypes.uint16,
  TensorProto.INT16: dtypes.int16, TensorProto.INT32: dtypes.int32, TensorProto.INT64: dtypes.int64, TensorProto.BOOL: dtypes.bool,
  TensorProto.FLOAT16: dtypes.float16, TensorProto.DOUBLE: dtypes.float64, TensorProto.UINT32: dtypes.uint32,
  TensorProto.UINT64: dtypes.uint64, TensorProto.BFLOAT16: dtypes.bfloat16}

# host values with at most this many elements take part in host evaluation (shape arithmetic, not data)
HOST_MAX = 1024


def onnx_dtype(elem_type: int) -> DType:
  """The DType of an ONNX TensorProto.DataType."""
  if (dt := _DTYPES.get(elem_type)) is None:
    raise NotImplementedError(f"ONNX dtype {TensorProto.DataType.Name(elem_type)} is not supported")
  return dt


def np_dtype(arr: np.ndarray) -> DType:
  if arr.dtype.name == "bfloat16": return dtypes.bfloat16
  try: return {np.dtype(np.bool_): dtypes.bool, **{np.dtype(n): getattr(dtypes, n) for n in
          ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")}}[arr.dtype]
  except KeyError: raise NotImplementedError(f"ONNX: arrays of numpy dtype {arr.dtype} are not supported") from None


def to_tensor(x: Any, dtype: DType | None = None) -> Tensor:
  """A Tensor from a numpy array (ml_dtypes bfloat16 included), a Python number or list, or a Tensor."""
  if isinstance(x, Tensor): return x if dtype is None else x.cast(dtype)
  arr = np.asarray(x)
  dt = dtype or np_dtype(arr)
  # numpy has no bfloat16 of its own: go through float32, which Tensor rounds to bfloat16
  return Tensor(arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr, dtype=dt)


def _attr(a: AttributeProto, opsets: dict[str, int]) -> Any:
  T = AttributeProto
  if a.type == T.FLOAT: return a.f
  if a.type == T.INT: return a.i
  if a.type == T.STRING: return a.s.decode()
  if a.type == T.TENSOR: return numpy_helper.to_array(a.t)
  if a.type == T.GRAPH: return Graph(a.g, opsets)
  if a.type == T.FLOATS: return list(a.floats)
  if a.type == T.INTS: return list(a.ints)
  if a.type == T.STRINGS: return [s.decode() for s in a.strings]
  if a.type == T.GRAPHS: return [Graph(g, opsets) for g in a.graphs]
  if a.type == T.TYPE_PROTO: return a.tp
  raise NotImplementedError(f"ONNX attribute {a.name!r} of type {T.AttributeType.Name(a.type)} is not supported")


class Node:
  __slots__ = ("op", "domain", "opset", "inputs", "outputs", "attrs", "impl")

  def __init__(self, n: onnx.NodeProto, opsets: dict[str, int]):
    from tinyhybrid.nn.onnx_ops import lookup
    self.op, self.domain = n.op_type, n.domain or "ai.onnx"
    self.opset = opsets.get(self.domain, 1)
    self.inputs, self.outputs = list(n.input), list(n.output)
    # consumed_inputs (opset 1) was a memory hint with no effect on the result
    self.attrs = {a.name: _attr(a, opsets) for a in n.attribute if a.name != "consumed_inputs"}
    self.impl = lookup(self.op, self.domain, self.opset)


class Scope:
  """The values of one graph run; names not found here are looked up in the enclosing graph's scope."""

  def __init__(self, parent: Scope | None = None):
    self.vals: dict[str, Any] = {}
    self.host: dict[str, np.ndarray] = {}
    self.parent = parent

  def _find(self, name: str) -> Scope:
    s: Scope | None = self
    while s is not None:
      if name in s.vals or name in s.host: return s
      s = s.parent
    raise ValueError(f"ONNX: value {name!r} is used before it is defined (a malformed model)")

  def set(self, name: str, v: Any) -> None:
    if isinstance(v, np.ndarray): self.host[name] = v
    else: self.vals[name] = v

  def get(self, name: str) -> Value:
    """The value as the ops see it: a host array becomes a Tensor on first use (and stays one)."""
    if name == "": return None
    s = self._find(name)
    if name not in s.vals: s.vals[name] = to_tensor(s.host[name])
    return s.vals[name]

  def raw(self, name: str) -> Any:
    """The value as stored: a host array where one is known (so a subgraph's outputs stay on the host)."""
    if (h := self.host_of(name)) is not None: return h
    return self.get(name)

  def host_of(self, name: str) -> np.ndarray | None:
    s = self._find(name)
    return s.host.get(name)

  def const(self, name: str) -> Any:
    """The value as a numpy array, read back from the device when it was computed there (a shape or a count)."""
    if name == "": return None
    if (h := self.host_of(name)) is not None: return h
    v = self.get(name)
    if v is None or isinstance(v, list): return v
    return v.numpy().astype(ml_dtypes.bfloat16) if v.dtype is dtypes.bfloat16 else v.numpy()


class Graph:
  """A GraphProto ready to run: initializers as Tensors (with a host copy), nodes with their ops looked up."""

  def __init__(self, g: onnx.GraphProto, opsets: dict[str, int]):
    self.inits: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    self.input_names = [i.name for i in g.input if i.name not in self.inits]
    self.input_types = {i.name: i.type for i in g.input}
    self.output_names = [o.name for o in g.output]
    self.nodes = [Node(n, opsets) for n in g.node]
    self._init_tensors: dict[str, Tensor] = {}

  def run(self, feeds: dict[str, Value], parent: Scope | None = None) -> list[Value]:
    from tinyhybrid.nn.onnx_ops import run_node
    scope = Scope(parent)
    for name, arr in self.inits.items():
      scope.host[name] = arr
      # weights become Tensors once per Graph, not once per run (a Loop body runs many times)
      if name not in self._init_tensors: self._init_tensors[name] = to_tensor(arr)
      scope.vals[name] = self._init_tensors[name]
    for name, v in feeds.items(): scope.set(name, v)
    for node in self.nodes: run_node(node, scope)
    return [scope.raw(n) for n in self.output_names]


class OnnxRunner:
  """Runs an ONNX model (a file path, the serialized bytes as bytes or a uint8 Tensor, or an onnx.ModelProto) with
  tinyhybrid Tensors.

  `runner({"x": Tensor or np.ndarray, ...})` returns {output name: Tensor} (a list of Tensors for a sequence output,
  None for an empty optional). An op the runner does not know raises NotImplementedError when the model is loaded."""

  def __init__(self, model: str | os.PathLike | bytes | Tensor | onnx.ModelProto):
    if isinstance(model, Tensor): model = model.numpy().tobytes()
    if isinstance(model, (str, os.PathLike, bytes, bytearray)): model = _parse(model)
    if not isinstance(model, onnx.ModelProto): raise TypeError(f"OnnxRunner: expected a path, bytes or ModelProto, got {type(model).__name__}")
    # model-local functions are expanded into their callers, so the runner only ever sees standard ops
    if len(model.functions): model = cast(onnx.ModelProto, onnx.inliner.inline_local_functions(model))  # type: ignore[attr-defined]
    self.opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    self.graph = Graph(model.graph, self.opsets)
    self.inputs: dict[str, onnx.TypeProto] = {n: self.graph.input_types[n] for n in self.graph.input_names}

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Value]:
    missing = [n for n in self.graph.input_names if n not in inputs and not self.inputs[n].HasField("optional_type")]
    if missing: raise ValueError(f"OnnxRunner: missing inputs {missing}; the model takes {self.graph.input_names}")
    dims: dict[str, int] = {}  # a named (symbolic) dimension takes one size across all inputs
    feeds = {n: _input_value(inputs.get(n), self.inputs[n], n, dims) for n in self.graph.input_names}
    return {n: to_tensor(v) if isinstance(v, np.ndarray) else v for n, v in zip(self.graph.output_names, self.graph.run(feeds))}


def _parse(model: str | os.PathLike | bytes | bytearray) -> onnx.ModelProto:
  """A serialized model parsed; input that is not one raises ValueError naming it (not protobuf's DecodeError)."""
  what = repr(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else f"the {len(model)} bytes given"
  try: proto = onnx.load(os.fspath(model)) if isinstance(model, (str, os.PathLike)) else onnx.load_from_string(bytes(model))
  except DecodeError as e: raise ValueError(f"OnnxRunner: {what} is not an ONNX model: {e}") from None
  # protobuf reads many byte strings as some message (every field is optional): a model has at least a graph
  if not proto.HasField("graph") or not proto.opset_import: raise ValueError(f"OnnxRunner: {what} is not an ONNX model: it has no graph or no opset")
  return proto


def _input_value(x: Any, tp: onnx.TypeProto, name: str, dims: dict[str, int]) -> Value:
  """A user input as the runner holds it, checked against the model's declared element type and shape."""
  if tp.HasField("optional_type"):
    return None if x is None else _input_value(x, tp.optional_type.elem_type, name, dims)
  if tp.HasField("sequence_type"):
    if not isinstance(x, (list, tuple)): raise TypeError(f"OnnxRunner: input {name!r} is a sequence, got {type(x).__name__}")
    return [_input_value(e, tp.sequence_type.elem_type, name, {}) for e in x]
  want = onnx_dtype(tp.tensor_type.elem_type)
  # host data is converted to the declared type; a Tensor must already have it
  if isinstance(x, Tensor): t = x
  else: t = to_tensor(np.asarray(x).astype(np.float32) if want is dtypes.bfloat16 else np.asarray(x, np_storage(want)), want)
  if t.dtype is not want: raise TypeError(f"OnnxRunner: input {name!r} must be {want}, got {t.dtype}")
  if tp.tensor_type.HasField("shape"):
    if (n := len(tp.tensor_type.shape.dim)) != t.ndim: raise ValueError(f"OnnxRunner: input {name!r} must have {n} dimensions, got shape {t.shape}")
    for i, (d, s) in enumerate(zip(tp.tensor_type.shape.dim, t.shape)):
      want_s = d.dim_value if d.HasField("dim_value") else dims.setdefault(d.dim_param, s) if d.HasField("dim_param") else s
      if want_s != s:
        what = f"{want_s}" if d.HasField("dim_value") else f"{want_s} (the size of {d.dim_param!r} in another input)"
        raise ValueError(f"OnnxRunner: input {name!r} dimension {i} must be {what}, got shape {t.shape}")
  return t

