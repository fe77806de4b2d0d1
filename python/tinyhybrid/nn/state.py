"""Model state: walking a model for its tensors (get_state_dict, get_parameters, load_state_dict) and reading and
writing model files (safetensors, torch .pt/.pth, gguf). Names and semantics follow tinygrad's nn.state."""
from __future__ import annotations

import io
import json
import os
import pathlib
import pickle
import struct
import time
import zipfile
import zlib
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from tinyhybrid.device import Buffer, BufferSpec, Device
from tinyhybrid.dtype import np_storage
from tinyhybrid.dtype import TORCH_NAMES, DType, dtypes
from tinyhybrid.helpers import DEBUG, prod
from tinyhybrid.uop.buffers import buffer_uop
from tinyhybrid.tensor import Tensor

FileLike = Tensor | str | os.PathLike


def _read_bytes(fn: FileLike) -> tuple[bytes, str]:
  """The bytes of a file given by path or as a 1-D uint8 tensor, and a name for error messages."""
  if isinstance(fn, Tensor):
    if fn.ndim != 1 or fn.dtype is not dtypes.uint8: raise ValueError(f"a file tensor must be 1-D uint8, not {fn.shape} {fn.dtype}")
    return fn.numpy().tobytes(), "<tensor>"
  return pathlib.Path(fn).read_bytes(), str(fn)


def _from_raw(data: bytes | bytearray | np.ndarray, dtype: DType, shape: tuple[int, ...], owned: bool = False) -> Tensor:
  """A realized tensor on the default device holding these raw little-endian bytes as dtype (one copy, no kernel).
  owned: data is a contiguous, 64-byte aligned array no one else holds, which a device whose memory is the host's takes
  as the buffer's own (no copy), and releases with it (not kept in the allocator's cache: the model loaders' reads)."""
  arr = np.frombuffer(data, dtype=np_storage(dtype)) if not isinstance(data, np.ndarray) else data
  if arr.size != prod(shape): raise ValueError(f"{arr.nbytes} bytes do not hold {shape} of {dtype}")
  device = Device.canonicalize(None)
  if owned and Device[device].allocator.is_host_memory:
    buf = Buffer(device, arr.size, dtype, opaque=arr.reshape(-1).view(np.uint8), options=BufferSpec(nolru=True))
  else: buf = Buffer(device, arr.size, dtype, initial=arr)
  return Tensor(buffer_uop(buf, tuple(shape)), device=device)


def _raw_bytes(t: Tensor) -> np.ndarray:
  """A tensor's contiguous little-endian bits as a numpy array of its storage type."""
  if t.dtype in dtypes.weaks: raise ValueError(f"{t.dtype} has no storage: cast to a concrete dtype first")
  # the buffer's own bits: numpy() would widen bfloat16 to float32
  return t._buffer().numpy() if t.numel() else np.empty(0, np_storage(t.dtype))


# ** state dict **

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type[Tensor] = Tensor) -> dict[str, Tensor]:
  """Every tensor reachable from obj through attributes, lists, tuples and dicts, keyed by its dotted path
  (`{"l1.weight": ..., "layers.0.bias": ...}`)."""
  if isinstance(obj, tensor_type): return {prefix.strip("."): obj}
  if hasattr(obj, "_asdict"): return get_state_dict(obj._asdict(), prefix, tensor_type)  # a namedtuple keeps field names
  if isinstance(obj, OrderedDict): return get_state_dict(dict(obj), prefix, tensor_type)
  if hasattr(obj, "__dict__"): return get_state_dict(obj.__dict__, prefix, tensor_type)
  state_dict: dict[str, Tensor] = {}
  if isinstance(obj, (list, tuple)):
    for i, x in enumerate(obj): state_dict.update(get_state_dict(x, f"{prefix}{i}.", tensor_type))
  elif isinstance(obj, dict):
    for k, v in obj.items(): state_dict.update(get_state_dict(v, f"{prefix}{k}.", tensor_type))
  return state_dict


def get_parameters(obj: Any) -> list[Tensor]:
  """The tensors of get_state_dict(obj), in the same order."""
  return list(get_state_dict(obj).values())


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = True, consume: bool = False,
                    realize: bool = True) -> list[Tensor]:
  """Points each tensor of model at the state_dict tensor of the same name (moved to its device) and realizes them;
  returns the loaded tensors. strict: a key missing on either side is a KeyError; otherwise missing ones are skipped
  and extra ones ignored. consume: delete each entry from state_dict once it is loaded."""
  start, model_state = time.perf_counter(), get_state_dict(model)
  if unexpected := sorted(state_dict.keys() - model_state.keys()):
    if strict: raise KeyError(f"load_state_dict: unexpected key(s) in state_dict: {unexpected}")
    if DEBUG >= 1: print(f"WARNING: unused weights in state_dict: {unexpected}")
  ret = []
  for k, v in model_state.items():
    if k not in state_dict:
      if strict: raise KeyError(f"load_state_dict: missing key {k!r} in state_dict (model expects shape {v.shape})")
      if DEBUG >= 1: print(f"WARNING: not loading {k}")
      continue
    new = state_dict[k]
    if new.shape != v.shape:
      # a scalar and a 1-element vector are the same value, as in tinygrad
      if {new.shape, v.shape} != {(), (1,)}:
        # tinygrad's words: programs match on them
        raise ValueError(f"Shape mismatch in layer `{k}`: Expected shape {v.shape}, but found {new.shape} in state dict.")
      new = new.reshape(v.shape)
    # a sharded model tensor keeps its sharding: a state-dict tensor on one device is split along its axis
    v.replace(new if type(new.device) is tuple else new.shard(v.device, v.uop.axis) if type(v.device) is tuple else new.to(v.device))
    if consume: del state_dict[k]
    ret.append(v)
  if realize and ret: Tensor.realize(*ret)
  if verbose:
    nbytes = sum(t.nbytes() for t in ret)
    print(f"loaded {len(ret)} tensors ({nbytes / 1e6:.2f} MB) in {(time.perf_counter() - start) * 1e3:.2f} ms")
  return ret


# ** safetensors **
# The format is read and written by the safetensors library (Hugging Face's reference implementation): its parser is
# well kept and checks what matters on untrusted files (header size and JSON, dtypes, offsets covering the data
# exactly, no overlap), so a malformed file is an error there and never a bad read here.

_SAFE_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "I8": dtypes.int8, "U8": dtypes.uint8, "I16": dtypes.int16, "U16": dtypes.uint16, "I32": dtypes.int32,
  "U32": dtypes.uint32, "I64": dtypes.int64, "U64": dtypes.uint64, "F16": dtypes.float16, "BF16": dtypes.bfloat16,
  "F32": dtypes.float32, "F64": dtypes.float64, "F8_E4M3": dtypes.fp8e4m3, "F8_E5M2": dtypes.fp8e5m2,
  "F8_E4M3FNUZ": dtypes.fp8e4m3fnuz, "F8_E5M2FNUZ": dtypes.fp8e5m2fnuz}


def _safe_parse(data: bytes, name: str) -> tuple[dict[str, dict[str, Any]], int, dict[str, Any]]:
  """The library's entries ({name: {"dtype", "shape", "data"}}), the data start and the JSON header of a file."""
  import safetensors  # (the library's Rust module is 0.7 MB resident: imported where a file is read or written)
  try: entries = dict(safetensors.deserialize(data))
  except safetensors.SafetensorError as e: raise ValueError(f"{name}: not a valid safetensors file: {e}") from None
  # the library validated the header but does not hand it out: read it for the file's order and the metadata
  data_start = 8 + int.from_bytes(data[:8], "little")
  return entries, data_start, json.loads(data[8:data_start])


def _safe_header(fn: str | os.PathLike) -> tuple[int, dict[str, Any]]:
  """The data start and JSON header of a .safetensors file, checked by the library (header, dtypes, offsets against
  the file's size) without reading the data."""
  import safetensors
  try:
    with safetensors.safe_open(str(fn), framework="numpy"): pass
    with open(fn, "rb") as f: header = json.loads(f.read(size := int.from_bytes(f.read(8), "little")))
  except (safetensors.SafetensorError, ValueError) as e: raise ValueError(f"{fn}: not a valid safetensors file: {e}") from None
  return 8 + size, header


def safe_load_metadata(fn: FileLike) -> tuple[Tensor, int, dict[str, Any]]:
  """(the file as a uint8 tensor, where its data starts, its JSON header): the header maps each tensor name to
  {"dtype", "shape", "data_offsets"} (relative to the data start) and "__metadata__" to the optional text metadata.
  A file given by path is the tensor of its DISK device: nothing is read beyond the header."""
  if isinstance(fn, Tensor):
    data, name = _read_bytes(fn)
    _, data_start, header = _safe_parse(data, name)
    return fn, data_start, header
  data_start, header = _safe_header(fn)
  return Tensor(pathlib.Path(fn)), data_start, header


def safe_load(fn: FileLike) -> dict[str, Tensor]:
  """The tensors of a .safetensors file, by name, in the file's order. From a path they are views of the file on its
  DISK device (as in tinygrad): move them (.to(), load_state_dict) to compute with them; nothing is read before."""
  t, data_start, header = safe_load_metadata(fn)
  name = "<tensor>" if isinstance(fn, Tensor) else str(fn)
  ret = {}
  for k, v in header.items():
    if k == "__metadata__": continue
    if (dt := _SAFE_DTYPES.get(v["dtype"])) is None: raise ValueError(f"{name}: tensor {k!r} has dtype {v['dtype']}, which tinyhybrid lacks")
    start, end = (data_start + o for o in v["data_offsets"])
    ret[k] = t[start:end].bitcast(dt).reshape(tuple(v["shape"]))
  return ret


def safe_save(tensors: dict[str, Tensor], fn: str | os.PathLike, metadata: dict[str, Any] | None = None) -> None:
  """Writes tensors to a .safetensors file; metadata is text only (str to str), as the format defines it."""
  if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
    raise TypeError(f"safe_save: metadata must map str to str, got {metadata!r}")
  import safetensors
  arrays = {k: _raw_bytes(t) for k, t in tensors.items()}  # kept alive here: the specs below only point at them
  specs = {k: safetensors.TensorSpec(dtype=TORCH_NAMES[t.dtype], shape=list(t.shape), data_ptr=arrays[k].ctypes.data,
                                     data_len=arrays[k].nbytes) for k, t in tensors.items()}
  safetensors.serialize_file(specs, str(fn), metadata=metadata)


# ** torch .pt/.pth files **
# torch.save writes a zip (data.pkl + one raw entry per storage) or, before torch 1.6 or with
# _use_new_zipfile_serialization=False, a stream of pickles followed by the raw storages. Both are read without torch:
# a restricted unpickler rebuilds tensors from the storages and lets through only plain containers; any other class
# becomes an inert placeholder, so loading a file never runs code from it.

_TORCH_DTYPES: dict[str, DType] = {name: dt for dt, name in TORCH_NAMES.items()}
_TORCH_STORAGES: dict[str, DType] = {
  "DoubleStorage": dtypes.float64, "FloatStorage": dtypes.float32, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool}
# numpy arrays inside checkpoints pickle through these (torch's weights_only loader allows the same)
_NUMPY_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"), ("numpy", "ndarray"),
                  ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("_codecs", "encode")}
_BUILTINS = {"set": set, "frozenset": frozenset, "slice": slice, "bytearray": bytearray}
_TORCH_MAGIC = 0x1950a86a20f9469cfc6c


class _StorageType:
  """What a pickled storage class stands for: its element dtype (None for torch's untyped, byte-addressed storage)."""
  def __init__(self, dtype: DType | None): self.dtype = dtype


class _Storage:
  """A storage named in the pickle: its key in the file, element dtype, and element offset (legacy storage views)."""
  def __init__(self, key: str, dtype: DType | None, offset: int = 0): self.key, self.dtype, self.offset = key, dtype, offset


class _Unknown:
  """An object of a class the loader does not trust: it keeps the pickled arguments and state, and does nothing."""
  def __init__(self, *args: Any, **kwargs: Any): self.args, self.kwargs, self.state = args, kwargs, None
  def __setstate__(self, state: Any) -> None: self.state = state
  def __repr__(self) -> str: return f"<unloaded {type(self).__module__}.{type(self).__name__}>"


Rebuild = Callable[[_Storage, int, tuple[int, ...], tuple[int, ...], DType], Any]


def _torch_unpickler(f: io.BytesIO, storage: Callable[[tuple], _Storage] | None = None, rebuild: Rebuild = lambda *args: None) -> pickle.Unpickler:
  """An unpickler for torch's pickles: storage(pid) makes a storage from a persistent id, rebuild(storage, offset,
  size, stride, dtype) a tensor from it; without them, a file's storages are an error."""
  def v2(st, offset, size, stride, requires_grad=False, hooks=None, metadata=None): return rebuild(st, offset, size, stride, st.dtype)
  def v3(st, offset, size, stride, requires_grad, hooks, dtype, metadata=None): return rebuild(st, offset, size, stride, dtype)
  def parameter(data, requires_grad=True, hooks=None, state=None): return data
  rebuilders = {"_rebuild_tensor": v2, "_rebuild_tensor_v2": v2, "_rebuild_tensor_v3": v3, "_rebuild_parameter": parameter,
                "_rebuild_parameter_with_state": parameter}

  # the pure-Python unpickler: the C one sizes its memo by the indices in the file, so a corrupt index makes it
  # allocate gigabytes; this one keeps the memo in a dict
  class TorchUnpickler(pickle._Unpickler):  # type: ignore[name-defined]
    def find_class(self, module: str, name: str) -> Any:
      if (module, name) == ("collections", "OrderedDict"): return OrderedDict
      if module in ("builtins", "__builtin__") and name in _BUILTINS: return _BUILTINS[name]  # __builtin__: protocol 2's name
      if module == "torch._utils":
        if name in rebuilders: return rebuilders[name]
        raise pickle.UnpicklingError(f"unsupported tensor kind {module}.{name} (quantized, sparse or device tensors are not)")
      if module in ("torch", "torch.storage"):
        if name in _TORCH_STORAGES: return _StorageType(_TORCH_STORAGES[name])
        if name in ("UntypedStorage", "_UntypedStorage"): return _StorageType(None)
        if name in _TORCH_DTYPES: return _TORCH_DTYPES[name]
        if name == "Size": return tuple
        if name.endswith("Storage") or name.startswith(("complex", "float", "int", "uint", "qint", "quint")):
          raise pickle.UnpicklingError(f"unsupported torch storage or dtype {module}.{name}")
      if (module, name) in _NUMPY_GLOBALS: return super().find_class(module, name)
      return type(name, (_Unknown,), {"__module__": module})
    def persistent_load(self, pid: Any) -> Any:
      if storage is None or not isinstance(pid, tuple) or len(pid) < 5 or pid[0] != "storage" or not isinstance(pid[1], _StorageType):
        raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
      return storage(pid)
  return TorchUnpickler(f)  # type: ignore[return-value]  # a pickle.Unpickler in pure Python


# how many times its storage's elements a tensor of overlapping strides (an unfold) may gather
_MAX_GATHER = 16


def _rebuild_from(raw: Callable[[str], bytes]) -> Rebuild:
  """rebuild() for _torch_unpickler, reading storages through raw(key) -> bytes (each read once)."""
  cache: dict[str, bytes] = {}

  def rebuild(st: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], dtype: DType) -> Tensor:
    if st.key not in cache: cache[st.key] = raw(st.key)
    buf = np.frombuffer(cache[st.key], dtype=np_storage(dtype), count=len(cache[st.key]) // dtype.itemsize)
    size, stride, start = tuple(size), tuple(stride), st.offset + offset
    if len(size) != len(stride) or min(size + stride + (start,)) < 0: raise ValueError(f"bad tensor size {size}, stride {stride}, offset {start}")
    if 0 in size: return _from_raw(buf[:0], dtype, size)
    # torch allows any strides (transposed, expanded, overlapping): gather the elements on the host, after checking
    # against the storage's size, so a malformed file cannot make this read past it. A dimension of stride 0 stays an
    # expand (a tiny file can hold zeros(1).expand(10**9)), and what is gathered is bounded by the storage
    if start + sum((n - 1) * s for n, s in zip(size, stride)) >= len(buf):
      raise ValueError(f"a tensor of size {size}, stride {stride}, offset {start} reads past its storage of {len(buf)} elements")
    base = tuple(1 if s == 0 else n for n, s in zip(size, stride))
    if prod(base) > _MAX_GATHER * len(buf):
      raise ValueError(f"a tensor of size {size}, stride {stride} asks for {prod(base)} elements from a storage of {len(buf)}")
    out = np.lib.stride_tricks.as_strided(buf[start:], base, tuple(s * buf.itemsize for s in stride))
    t = _from_raw(np.ascontiguousarray(out).reshape(-1), dtype, base)
    return t if base == size else t.expand(size)
  return rebuild


def _torch_zip(data: bytes) -> Any:
  with zipfile.ZipFile(io.BytesIO(data)) as zf:
    names = zf.namelist()
    prefix = names[0].split("/")[0]
    if f"{prefix}/data.pkl" not in names: raise ValueError("a zip file without data.pkl")
    if f"{prefix}/byteorder" in names and zf.read(f"{prefix}/byteorder") != b"little": raise ValueError("big-endian torch files are not supported")
    def storage(pid: tuple) -> _Storage: return _Storage(str(pid[2]), pid[1].dtype)
    rebuild = _rebuild_from(lambda key: zf.read(f"{prefix}/data/{key}"))
    return _torch_unpickler(io.BytesIO(zf.read(f"{prefix}/data.pkl")), storage, rebuild).load()


def _torch_legacy(data: bytes) -> Any:
  """The pre-zip format: pickles of the magic number, protocol version and system info, the object (storages as
  persistent ids), the list of storage keys, then each storage as an int64 element count and its raw bytes."""
  f = io.BytesIO(data)
  if _torch_unpickler(f).load() != _TORCH_MAGIC: raise ValueError("neither a zip nor a legacy torch file (wrong magic number)")
  _torch_unpickler(f).load(), _torch_unpickler(f).load()  # protocol version, system info (storages are read as little-endian)
  # first pass: learn each storage's dtype, then find where its bytes are; second pass: rebuild with them
  obj_start, dtype_of, offsets = f.tell(), {}, {}
  def storage(pid: tuple) -> _Storage:
    key, view = str(pid[2]), pid[5] if len(pid) > 5 else None
    dtype_of[key] = pid[1].dtype
    return _Storage(key, pid[1].dtype, view[1] if view else 0)
  _torch_unpickler(f, storage, lambda *args: None).load()
  keys, pos = _torch_unpickler(f).load(), f.tell()
  for key in keys:
    if (dt := dtype_of.get(str(key))) is None: raise ValueError(f"storage {key!r} is not used by the object")
    numel = int.from_bytes(data[pos:pos + 8], "little")
    offsets[str(key)], pos = (pos + 8, pos + 8 + numel * dt.itemsize), pos + 8 + numel * dt.itemsize
    if pos > len(data): raise ValueError(f"storage {key!r} of {numel} elements runs past the end of the file")
  f.seek(obj_start)
  return _torch_unpickler(f, storage, _rebuild_from(lambda key: data[slice(*offsets[key])])).load()


def torch_load(fn: FileLike) -> Any:
  """The object in a torch .pt/.pth file (usually a state dict) with its tensors as Tensors; torch is not needed."""
  data, name = _read_bytes(fn)
  try: return _torch_zip(data) if data[:4] == b"PK\x03\x04" else _torch_legacy(data)
  # what a corrupt zip or pickle can raise (zipfile: RuntimeError for encrypted entries); MemoryError from a corrupt size
  except (pickle.UnpicklingError, zipfile.BadZipFile, zlib.error, struct.error, EOFError, KeyError, IndexError, TypeError,
          AttributeError, ValueError, NotImplementedError, RuntimeError, OverflowError, MemoryError) as e:
    raise ValueError(f"{name}: not a valid torch file: {type(e).__name__}: {e}") from e


# ** archives **

class TensorIO(io.RawIOBase):
  """A 1-D uint8 tensor read as a binary file (seekable, read-only), as tinygrad's: each read copies only the bytes it
  asks for, so a file on a DISK tensor is read piece by piece."""
  def __init__(self, t: Tensor):
    if t.ndim != 1 or t.dtype is not dtypes.uint8: raise ValueError("Tensor must be 1d and of dtype uint8!")
    self._position, self._tensor = 0, t

  def readable(self) -> bool: return True
  def seekable(self) -> bool: return True

  def readinto(self, buffer: Any) -> int:
    n = max(0, min(len(buffer), len(self._tensor) - self._position))
    if n: buffer[:n] = self._tensor[self._position:self._position + n].data()
    self._position += n
    return n

  def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
    self._position = min(len(self._tensor), max(0, (offset, self._position + offset, len(self._tensor) + offset)[whence]))
    return self._position

  def tell(self) -> int: return self._position


def tar_extract(fn: FileLike) -> dict[str, Tensor]:
  """The regular files of a tar archive (a path, or a 1-D uint8 tensor of its bytes) by name, each a view of the
  archive's tensor (on a DISK device for a path, so nothing is read until a file is used). Not a tar: tarfile.ReadError."""
  import tarfile
  t = fn if isinstance(fn, Tensor) else Tensor(pathlib.Path(fn))
  with tarfile.open(fileobj=TensorIO(t), mode="r") as tar:
    return {m.name: t[m.offset_data:m.offset_data + m.size] for m in tar if m.type == tarfile.REGTYPE}


# ** gguf **

def __getattr__(name: str) -> Any:
  """gguf_load lives in tinyhybrid.llm.gguf, as in tinygrad; that module builds on this one, so it is looked up when
  first asked for."""
  if name == "gguf_load":
    from tinyhybrid.llm.gguf import gguf_load
    return gguf_load
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
