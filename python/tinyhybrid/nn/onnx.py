"""ONNX models on tinyhybrid: `OnnxRunner(model)({"input": x})` returns {"output": Tensor}.

The onnx package parses the model; every node becomes Tensor ops (python/tinyhybrid/nn/onnx_ops.py), so a whole
model stays one lazy graph until its outputs are read. Values that only describe shapes (initializers, Constant
nodes, Shape, and small integer arithmetic on them) are also kept as numpy arrays and evaluated on the host, so a
Reshape or Slice whose arguments come from a Shape subgraph needs no kernel and no device read-back. If, Loop, Scan
and SequenceMap run their subgraphs from Python, reading their conditions back when they are computed on the device.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import Any, cast

import ml_dtypes
import numpy as np
import onnx
import onnx.inliner  # submodules `import onnx` leaves out
import onnx.parser
from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, numpy_helper

from tinyhybrid.dtype import np_storage
from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.tensor import Tensor

# a node's value: a Tensor, a list of Tensors (an ONNX sequence), or None (an absent optional value)
Value = Any

_DTYPES: dict[int, DType] = {
  TensorProto.FLOAT: dtypes.float32, TensorProto.UINT8: dtypes.uint8, TensorProto.INT8: dtypes.int8, TensorProto.UINT16: dtypes.uint16,
  TensorProto.INT16: dtypes.int16, TensorProto.INT32: dtypes.int32, TensorProto.INT64: dtypes.int64, TensorProto.BOOL: dtypes.bool,
  TensorProto.FLOAT16: dtypes.float16, TensorProto.DOUBLE: dtypes.float64, TensorProto.UINT32: dtypes.uint32,
  TensorProto.UINT64: dtypes.uint64, TensorProto.BFLOAT16: dtypes.bfloat16, TensorProto.FLOAT8E4M3FN: dtypes.fp8e4m3,
  TensorProto.FLOAT8E4M3FNUZ: dtypes.fp8e4m3fnuz, TensorProto.FLOAT8E5M2: dtypes.fp8e5m2, TensorProto.FLOAT8E5M2FNUZ: dtypes.fp8e5m2fnuz}

# the types numpy lacks, as ml_dtypes has them (host values of these dtypes are ml_dtypes arrays)
_ML_TYPES = {dtypes.bfloat16: ml_dtypes.bfloat16, dtypes.fp8e4m3: ml_dtypes.float8_e4m3fn, dtypes.fp8e5m2: ml_dtypes.float8_e5m2,
             dtypes.fp8e4m3fnuz: ml_dtypes.float8_e4m3fnuz, dtypes.fp8e5m2fnuz: ml_dtypes.float8_e5m2fnuz}

# onnx < 1.19 gives bfloat16, float8 and int4 values as structured arrays of its own (the bits in one named field)
_ML_FIELDS = {"bfloat16": ml_dtypes.bfloat16, "e4m3fn": ml_dtypes.float8_e4m3fn, "e4m3fnuz": ml_dtypes.float8_e4m3fnuz,
              "e5m2": ml_dtypes.float8_e5m2, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "int4": ml_dtypes.int4, "uint4": ml_dtypes.uint4}

_ML_NP = {np.dtype(m) for m in _ML_TYPES.values()}

# host values with at most this many elements take part in host evaluation (shape arithmetic, not data)
HOST_MAX = 1024


def onnx_dtype(elem_type: int) -> DType:
  """The DType of an ONNX TensorProto.DataType."""
  if (dt := _DTYPES.get(elem_type)) is None:
    # DataType.Name would raise its own ValueError, naming neither the model nor the runner
    if elem_type not in TensorProto.DataType.values(): raise ValueError(f"ONNX: {elem_type} is not an element type (a malformed model)")
    raise NotImplementedError(f"ONNX dtype {TensorProto.DataType.Name(elem_type)} is not supported")
  return dt


def np_of(dt: DType) -> np.dtype:
  """The numpy dtype of host values of `dt` (ml_dtypes' bfloat16 and float8s, not their raw bits)."""
  return np.dtype(_ML_TYPES[dt]) if dt in _ML_TYPES else np_storage(dt)


def _ml(arr: np.ndarray) -> np.ndarray:
  """The array with an old onnx's structured stand-in for bfloat16, float8 or int4 viewed as the ml_dtypes type."""
  names = arr.dtype.names
  return arr.view(_ML_FIELDS[names[0]]) if names and len(names) == 1 and names[0] in _ML_FIELDS else arr


class _Malformed(ValueError):
  """A tensor of the model that cannot be read; OnnxRunner names the model in the ValueError it raises instead."""


def _array(t: TensorProto) -> np.ndarray:
  """The values of a TensorProto whose external data is already read in (OnnxRunner does that when it loads a model)."""
  if t.data_type == TensorProto.UNDEFINED or t.data_type not in TensorProto.DataType.values():
    raise _Malformed(f"tensor {t.name!r} has no valid element type ({t.data_type})")
  # numpy_helper would read remaining external data relative to the working directory: never let it
  if t.data_location == TensorProto.EXTERNAL: raise _Malformed(f"tensor {t.name!r} has external data that was not loaded")
  try: arr = numpy_helper.to_array(t)
  except (ValueError, TypeError, KeyError) as e: raise _Malformed(f"tensor {t.name!r} is malformed: {e}") from e
  return _ml(arr)


def np_dtype(arr: np.ndarray) -> DType:
  if (ml := next((d for d, m in _ML_TYPES.items() if arr.dtype == np.dtype(m)), None)) is not None: return ml
  try: return {np.dtype(np.bool_): dtypes.bool, **{np.dtype(n): getattr(dtypes, n) for n in
          ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")}}[arr.dtype]
  except KeyError: raise NotImplementedError(f"ONNX: arrays of numpy dtype {arr.dtype} are not supported") from None


def to_tensor(x: Any, dtype: DType | None = None) -> Tensor:
  """A Tensor from a numpy array (ml_dtypes bfloat16 and float8s included), a Python number or list, or a Tensor."""
  if isinstance(x, Tensor): return x if dtype is None else x.cast(dtype)
  arr = np.asarray(x)
  dt = dtype or np_dtype(arr)
  # numpy has no bfloat16 or float8 of its own: their values go through float32 (exactly), which Tensor rounds back
  return Tensor(arr.astype(np.float32) if arr.dtype in _ML_NP else arr, dtype=dt)


def _attr(a: AttributeProto, opsets: dict[str, int]) -> Any:
  T = AttributeProto
  if a.type == T.FLOAT: return a.f
  if a.type == T.INT: return a.i
  if a.type == T.STRING: return a.s.decode()
  if a.type == T.TENSOR: return _array(a.t)
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
    return v.numpy().astype(_ML_TYPES[v.dtype]) if v.dtype in _ML_TYPES else v.numpy()


class Graph:
  """A GraphProto ready to run: initializers as Tensors (with a host copy), nodes with their ops looked up."""

  def __init__(self, g: onnx.GraphProto, opsets: dict[str, int]):
    self.inits: dict[str, np.ndarray] = {t.name: _array(t) for t in g.initializer}
    self.input_names = [i.name for i in g.input if i.name not in self.inits]
    self.input_types = {i.name: i.type for i in g.input}
    self.output_names = [o.name for o in g.output]
    self.nodes = [Node(n, opsets) for n in g.node]
    self._init_tensors: dict[str, Tensor] = {}
    # a constant float32 weight that only MatMul reads as its (K, N) right operand, with N >= K, is laid out (N, K) and
    # read through a transpose (as onnxruntime prepacks it): the product then runs with vectors along K, as
    # nn.Linear's x @ w.T does (a 128 x 768 @ 768 x 3072 product: 167 -> 267 GFLOPS on 2 AVX-512 cores)
    readers: dict[str, list[tuple[str, int]]] = {}
    for node in self.nodes:
      for i, name in enumerate(node.inputs): readers.setdefault(name, []).append((node.op, i))
    self._k_major = {name for name, arr in self.inits.items() if arr.ndim == 2 and arr.dtype == np.float32 and arr.shape[1] >= arr.shape[0]
                     and all(r == ("MatMul", 1) for r in readers.get(name, [("", 0)])) and name not in self.output_names}

  def run(self, feeds: dict[str, Value], parent: Scope | None = None) -> list[Value]:
    from tinyhybrid.nn.onnx_ops import run_node
    scope = Scope(parent)
    for name, arr in self.inits.items():
      scope.host[name] = arr
      # weights become Tensors once per Graph, not once per run (a Loop body runs many times)
      if name not in self._init_tensors: self._init_tensors[name] = to_tensor(arr.T.copy()).T if name in self._k_major else to_tensor(arr)
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
    if not isinstance(model, (str, os.PathLike, bytes, bytearray, onnx.ModelProto)):
      raise TypeError(f"OnnxRunner: expected a path, bytes or ModelProto, got {type(model).__name__}")
    # external data is looked for only in the model file's directory: bytes and a ModelProto have none
    if isinstance(model, (str, os.PathLike)):
      path = os.fsdecode(os.fspath(model))
      what, base = repr(path), os.path.realpath(os.path.dirname(os.path.abspath(path)))
    else: what, base = "the ModelProto given" if isinstance(model, onnx.ModelProto) else f"the {len(model)} bytes given", None
    if not isinstance(model, onnx.ModelProto): model = _parse(model, what)
    try:
      _load_external(model, base, what)
      # model-local functions are expanded into their callers, so the runner only ever sees standard ops
      if len(model.functions):
        _check_functions(model)
        # the inliner's C++ assertions (a call with more inputs than the function has, ...) arrive as RuntimeError; and
        # onnx 1.17 re-parses the C++ result in Python, which can fail (DecodeError) for a model C++ read without complaint
        try: model = cast(onnx.ModelProto, onnx.inliner.inline_local_functions(model))
        except (RuntimeError, DecodeError) as e: raise _Malformed(f"its local functions cannot be inlined: {e}") from e
      self.opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
      self.graph = Graph(model.graph, self.opsets)
    # onnx's C++ checks raise a ValidationError of their own (no ValueError); _Malformed carries numpy_helper's and the inliner's errors
    except (_Malformed, onnx.checker.ValidationError) as e: raise ValueError(f"OnnxRunner: {what} is not a valid ONNX model: {e}") from e
    self.inputs: dict[str, onnx.TypeProto] = {n: self.graph.input_types[n] for n in self.graph.input_names}

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Value]:
    missing = [n for n in self.graph.input_names if n not in inputs and not self.inputs[n].HasField("optional_type")]
    if missing: raise ValueError(f"OnnxRunner: missing inputs {missing}; the model takes {self.graph.input_names}")
    dims: dict[str, int] = {}  # a named (symbolic) dimension takes one size across all inputs
    feeds = {n: _input_value(inputs.get(n), self.inputs[n], n, dims) for n in self.graph.input_names}
    return {n: to_tensor(v) if isinstance(v, np.ndarray) else v for n, v in zip(self.graph.output_names, self.graph.run(feeds))}


# what onnx.load raises for a file that is not a model: binary protobuf, its text and JSON forms, and onnx's own text
_PARSE_ERRORS = (DecodeError, text_format.ParseError, json_format.ParseError, onnx.parser.ParseError)


def _parse(model: str | os.PathLike | bytes | bytearray, what: str) -> onnx.ModelProto:
  """A serialized model parsed; input that is not one raises ValueError naming it (not protobuf's DecodeError)."""
  # the runner reads external data itself (_load_external), refusing locations outside the model's directory
  try: proto = onnx.load(os.fspath(model), load_external_data=False) if isinstance(model, (str, os.PathLike)) else onnx.load_from_string(bytes(model))
  except _PARSE_ERRORS as e: raise ValueError(f"OnnxRunner: {what} is not an ONNX model: {e}") from e
  # protobuf reads many byte strings as some message (every field is optional): a model has at least a graph
  if not proto.HasField("graph") or not proto.opset_import: raise ValueError(f"OnnxRunner: {what} is not an ONNX model: it has no graph or no opset")
  return proto


def _tensors(m: onnx.ModelProto) -> Iterator[TensorProto]:
  """Every TensorProto of the model: initializers and tensor attributes, in subgraphs and model-local functions too."""
  # a stack, not recursion: subgraphs nest as deep as protobuf lets them
  graphs, nodes = [m.graph], [n for f in m.functions for n in f.node]
  while graphs or nodes:
    if graphs:
      g = graphs.pop()
      yield from g.initializer
      for sp in g.sparse_initializer: yield from (sp.values, sp.indices)
      nodes.extend(g.node)
      continue
    for a in nodes.pop().attribute:
      if a.HasField("t"): yield a.t
      yield from a.tensors
      for sp in [*([a.sparse_tensor] if a.HasField("sparse_tensor") else []), *a.sparse_tensors]: yield from (sp.values, sp.indices)
      graphs.extend([*([a.g] if a.HasField("g") else []), *a.graphs])


def _load_external(m: onnx.ModelProto, base: str | None, what: str) -> None:
  """Reads the data of every tensor kept in an external file into the tensor. A location is resolved against the
  model's directory `base` and must stay inside it: the model is untrusted input, and an absolute path, a `..` or a
  symbolic link out of the directory would let it read any file the process can (and a model given as bytes would
  otherwise read relative to the working directory)."""
  for t in _tensors(m):
    if t.data_location != TensorProto.EXTERNAL: continue
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    where = f"OnnxRunner: tensor {t.name!r} of {what} keeps its data in the external file {loc!r}"
    if base is None:
      raise ValueError(f"{where}, but a model given as bytes or a ModelProto has no directory to find it in: load the model from its file")
    if not loc or "\0" in loc: raise ValueError(f"{where}, which is not a file name")
    if os.path.isabs(loc) or os.path.splitdrive(loc)[0]: raise ValueError(f"{where}: an absolute path, where only files in the model's directory {base!r} are read")
    path = os.path.realpath(os.path.join(base, loc))
    if os.path.commonpath([base, path]) != base:
      raise ValueError(f"{where}, which resolves to {path!r}, outside the model's directory {base!r}")
    t.raw_data = _read_span(path, info, where)
    t.data_location = TensorProto.DEFAULT
    del t.external_data[:]


def _read_span(path: str, info: dict[str, str], where: str) -> bytes:
  """The bytes at the tensor's offset and length in the file, both checked against its size before anything is read."""
  def num(key: str) -> int | None:
    if (v := info.get(key)) is None: return None
    # at most 20 digits: int() of a longer string can be slow, or refused with a ValueError that names nothing
    if not (v.isascii() and v.isdigit() and len(v) <= 20): raise ValueError(f"{where}: its {key} {v[:40]!r} is not a byte count")
    return int(v)
  offset, length = num("offset") or 0, num("length")
  # O_NOFOLLOW: the path is resolved already, so a link here was swapped in since; O_NONBLOCK: a FIFO must not hang open()
  flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
  try: fd = os.open(path, flags)
  except OSError as e: raise ValueError(f"{where}, which cannot be opened: {e.strerror}") from e
  try:
    # checked on the descriptor, not the path: fdopen refuses a directory with IsADirectoryError of its own
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode): raise ValueError(f"{where}, which is not a regular file")
    if offset > st.st_size or (length is not None and offset + length > st.st_size):
      span = f"offset {offset}" + ("" if length is None else f", length {length}")
      raise ValueError(f"{where}: its data ({span}) reaches past the end of the {st.st_size}-byte file")
    f = os.fdopen(fd, "rb")
  except BaseException:
    os.close(fd)
    raise
  with f:
    f.seek(offset)
    data = f.read(st.st_size - offset if length is None else length)
  if length is not None and len(data) != length: raise ValueError(f"{where}: the file ended after {len(data)} of its {length} bytes")
  return data


def _check_functions(m: onnx.ModelProto) -> None:
  """Refuses duplicate or recursive model-local functions before onnx's inliner sees them: up to 1.19 at least, it
  recurses around a cycle until the process crashes (a segfault, not an exception), and it takes one of two duplicates."""
  Id = tuple[str, str, str]
  ids: list[Id] = [(f.domain, f.name, f.overload) for f in m.functions]
  if len(known := set(ids)) != len(ids):
    d = next(i for n, i in enumerate(ids) if i in ids[:n])
    raise _Malformed(f"it has two local functions {d[0]}::{d[1]}")
  calls: dict[Id, list[Id]] = {}
  for f, fid in zip(m.functions, ids):
    nodes, calls[fid] = list(f.node), []
    while nodes:  # the function's nodes, and those of the subgraphs in their attributes
      n = nodes.pop()
      if (c := (n.domain, n.op_type, n.overload)) in known: calls[fid].append(c)
      for a in n.attribute: nodes.extend(nd for g in [*([a.g] if a.HasField("g") else []), *a.graphs] for nd in g.node)
  # depth-first with a stack of its own, as a chain of calls can be long; `path` holds the functions being expanded
  done: set[Id] = set()
  for root in ids:
    if root in done: continue
    stack, path, on_path = [iter(calls[root])], [root], {root}
    while stack:
      if (nxt := next(stack[-1], None)) is None:
        stack.pop()
        done.add(p := path.pop())
        on_path.discard(p)
      elif nxt in on_path:
        cycle = " -> ".join(f"{d}::{o}" for d, o, _ in path[path.index(nxt):] + [nxt])
        raise _Malformed(f"its local function {nxt[0]}::{nxt[1]} calls itself ({cycle})")
      elif nxt not in done:
        stack.append(iter(calls[nxt]))
        path.append(nxt)
        on_path.add(nxt)


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
  # _ml: an old onnx's structured bfloat16 array holds the bits, which astype would read as integers
  else: t = to_tensor(_ml(np.asarray(x)).astype(np.float32) if want in _ML_TYPES else np.asarray(x, np_storage(want)), want)
  if t.dtype is not want: raise TypeError(f"OnnxRunner: input {name!r} must be {want}, got {t.dtype}")
  if tp.tensor_type.HasField("shape"):
    if (n := len(tp.tensor_type.shape.dim)) != t.ndim: raise ValueError(f"OnnxRunner: input {name!r} must have {n} dimensions, got shape {t.shape}")
    for i, (d, s) in enumerate(zip(tp.tensor_type.shape.dim, t.shape)):
      want_s = d.dim_value if d.HasField("dim_value") else dims.setdefault(d.dim_param, s) if d.HasField("dim_param") else s
      if want_s != s:
        what = f"{want_s}" if d.HasField("dim_value") else f"{want_s} (the size of {d.dim_param!r} in another input)"
        raise ValueError(f"OnnxRunner: input {name!r} dimension {i} must be {what}, got shape {t.shape}")
  return t

