"""Reading .gguf files: the container (header, key-values, tensor infos, alignment) is parsed here, and a tensor's
bytes are read from the file when its data is asked for (GGUFTensor.data), so a model's load holds one tensor's raw
bytes at a time beside what it keeps. gguf_load hands back every tensor as a Tensor (quantized ones lazily
dequantized on the device, nn/quant.py); gguf_read keeps quantized tensors as their raw blocks, which the LLM's fused
dequantize-matmul kernels read (llm/quantized.py)."""
from __future__ import annotations

import io
import mmap
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyhybrid.device import Device
from tinyhybrid.dtype import DType, dtypes, np_storage
from tinyhybrid.helpers import prod
from tinyhybrid.nn.quant import GGML_QUANT, dequantize
from tinyhybrid.nn.state import FileLike, _from_raw, _read_bytes
from tinyhybrid.tensor import Tensor

GGML_NATIVE: dict[int, DType] = {0: dtypes.float32, 1: dtypes.float16, 24: dtypes.int8, 25: dtypes.int16, 26: dtypes.int32,
                                 27: dtypes.int64, 28: dtypes.float64, 30: dtypes.bfloat16}


def ggml_type_name(typ: int) -> str:
  """llama.cpp's name of a ggml type id (the file's own word for it in error messages), or the number."""
  try:
    import gguf
    return gguf.GGMLQuantizationType(typ).name
  except (ImportError, ValueError): return str(typ)


@dataclass(frozen=True)
class GGUFTensor:
  """One tensor of a gguf file: its row-major shape and ggml type, and where its bytes are. `data` reads them (on
  each use: keep the Tensor it gives) into a Tensor of that shape for the native types, or of the (blocks, bytes per
  block) uint8 blocks of a quantized type. Nothing is read before that, so a model built tensor by tensor holds one
  tensor's raw bytes at a time, not the whole file's."""
  name: str
  shape: tuple[int, ...]
  ggml_type: int
  source: str | bytes  # the file's path, or its bytes (a file given as a Tensor)
  offset: int
  nbytes: int

  @property
  def quantized(self) -> bool: return self.ggml_type in GGML_QUANT

  @property
  def data(self) -> Tensor: return self._tensor(_read_range(self.source, self.offset, self.nbytes))

  def _tensor(self, raw: np.ndarray) -> Tensor:
    """The tensor's bytes (an array the Tensor takes as its own) as its shape in a native type, or as its blocks."""
    if (dt := GGML_NATIVE.get(self.ggml_type)) is not None: return _from_raw(raw.view(np_storage(dt)), dt, self.shape, owned=True)
    return _from_raw(raw, dtypes.uint8, (self.nbytes // GGML_QUANT[self.ggml_type][2], GGML_QUANT[self.ggml_type][2]), owned=True)

  def mapped(self) -> tuple[Tensor, mmap.mmap | None]:
    """`data`, but over the file's own pages, mapped copy-on-write instead of read: only the pages a kernel reads
    are ever brought into memory (the rows of an embedding that a prompt looks up, not its 32000). With the mapping,
    whose pages its holder may let go (MappedRows.let_go). Read as `data` (no mapping) where the tensor's bytes are
    not 64-byte aligned in the file (kernels load whole aligned vectors), the file came as bytes, or the device's
    memory is not the host's."""
    if isinstance(self.source, bytes) or self.offset % 64 or not Device[Device.canonicalize(None)].allocator.is_host_memory: return self.data, None
    start = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
    with open(self.source, "rb") as f:
      if os.fstat(f.fileno()).st_size < self.offset + self.nbytes: raise ValueError(f"{self.source}: ends inside tensor {self.name!r}")
      m = mmap.mmap(f.fileno(), self.offset + self.nbytes - start, access=mmap.ACCESS_COPY, offset=start)
    if hasattr(mmap, "MADV_RANDOM"): m.madvise(mmap.MADV_RANDOM)  # a looked-up row's page, without the kernel's read-ahead
    return self._tensor(np.frombuffer(m, np.uint8, self.nbytes, self.offset - start)), m  # the Tensor holds the mapping: unmapped with its buffer

  def dequantize(self) -> Tensor:
    """The tensor as a float Tensor of its shape (lazy: a quantized one is unpacked by the kernels that read it)."""
    return dequantize(self.data, self.ggml_type).reshape(self.shape) if self.quantized else self.data


def _read_range(source: str | bytes, offset: int, nbytes: int) -> np.ndarray:
  """nbytes at offset of a file (or of bytes), in fresh page-aligned memory of their own: anonymous pages, which go
  back to the system when the array goes (a malloc'd block may stay in the heap)."""
  out = np.frombuffer(mmap.mmap(-1, max(nbytes, 1)), np.uint8, nbytes)
  if isinstance(source, bytes):
    out[:] = np.frombuffer(source, np.uint8, nbytes, offset)
    return out
  with open(source, "rb", buffering=0) as f:
    f.seek(offset)
    view, done = memoryview(out), 0  # type: ignore[arg-type]  # an ndarray is a buffer
    while done < nbytes:
      if not (n := f.readinto(view[done:])): raise ValueError(f"{source}: ends {nbytes - done} bytes into a tensor's data at {offset}")
      done += n
  return out


def gguf_read(fn: FileLike) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
  """(key-value metadata, tensors by name) of a .gguf file, quantized tensors kept as blocks and every tensor's bytes
  left in the file until its `data` is read. A type we have no kernels for raises ValueError naming it and the
  tensor; a truncated or corrupt file raises ValueError naming the file."""
  if isinstance(fn, Tensor):
    blob, name = _read_bytes(fn)
    kv, out = _gguf_infos(io.BytesIO(blob), len(blob), blob, name)
  else:
    if not os.path.isfile(fn): raise FileNotFoundError(f"gguf: no such file {str(fn)!r}")
    name = str(fn)  # the tensors are read later, maybe from another working directory: by the absolute path
    with open(fn, "rb") as f: kv, out = _gguf_infos(f, os.path.getsize(fn), os.path.abspath(fn), name)
  for t in out.values():
    if t.ggml_type not in GGML_NATIVE and t.ggml_type not in GGML_QUANT:
      raise ValueError(f"{name}: tensor {t.name!r} has ggml type {ggml_type_name(t.ggml_type)}, which tinyhybrid does not support "
                       f"(supported: {', '.join(ggml_type_name(t) for t in [*GGML_NATIVE, *GGML_QUANT])})")
  return kv, out


def gguf_load(fn: FileLike) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(key-value metadata, tensors by name) of a .gguf file. Shapes are in row-major order (gguf lists dimensions
  fastest first); quantized tensors come back as float32, lazily dequantized on the device."""
  kv, tensors = gguf_read(fn)
  return kv, {name: t.dequantize() for name, t in tensors.items()}


# value types of the key-value section: numpy's little-endian scalars, and the two that nest
_SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
_STRING, _ARRAY = 8, 9


class _Header:
  """Reads the header of an open gguf file (version 2 or 3, little-endian), refusing a length that runs past its end
  before reading it (a corrupt length must not ask for gigabytes)."""

  def __init__(self, f: Any, size: int):
    self.f, self.size = f, size

  def take(self, n: int) -> bytes:
    if n > self.size - self.f.tell(): raise ValueError(f"a length of {n} bytes at byte {self.f.tell()} runs past the end ({self.size} bytes)")
    return self.f.read(n)

  def scalars(self, typ: int, n: int) -> np.ndarray:
    dt = np.dtype(_SCALARS[typ])
    return np.frombuffer(self.take(n * dt.itemsize), dt)

  def uint(self, typ: int = 10) -> int: return int(self.scalars(typ, 1)[0])
  def string(self) -> str: return self.take(self.uint()).decode("utf-8", errors="replace")

  def value(self, typ: int) -> Any:
    if typ == _STRING: return self.string()
    if typ == _ARRAY:
      item, n = self.uint(4), self.uint()
      if item in _SCALARS: return self.scalars(item, n).tolist()
      if n * 8 > self.size - self.f.tell(): raise ValueError(f"an array of {n} items at byte {self.f.tell()} runs past the end")
      return [self.value(item) for _ in range(n)]
    if typ not in _SCALARS: raise ValueError(f"unknown value type {typ} at byte {self.f.tell()}")
    return self.scalars(typ, 1)[0].item()


def _tensor_bytes(typ: int, shape: tuple[int, ...]) -> int:
  if (dt := GGML_NATIVE.get(typ)) is not None: return prod(shape) * dt.itemsize
  if typ in GGML_QUANT: return prod(shape) // GGML_QUANT[typ][1] * GGML_QUANT[typ][2]
  return 0  # a type we do not read: gguf_read refuses it by name


def _gguf_infos(f: Any, size: int, source: str | bytes, name: str) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
  """The key-values and tensors (not yet read) of the gguf file open as f (size bytes; source: where its tensors'
  bytes are read from later, name: the file's name for errors). Ours, not the gguf package's GGUFReader, which makes a
  numpy view per array item: a 32000-token vocabulary cost 67 MB of Python objects and left 15 MB of the heap behind."""
  try:
    h = _Header(f, size)
    if (magic := h.take(4)) != b"GGUF": raise ValueError(f"magic {magic!r}, not b'GGUF'")
    if (version := h.uint(4)) not in (2, 3): raise ValueError(f"version {version}: tinyhybrid reads versions 2 and 3")
    n_tensors, n_kv = h.uint(), h.uint()
    kv: dict[str, Any] = {}
    for _ in range(n_kv):
      key = h.string()
      kv[key] = h.value(h.uint(4))
    infos = []
    for _ in range(n_tensors):
      tname, dims = h.string(), h.uint(4)
      if dims > 8: raise ValueError(f"tensor {tname!r} has {dims} dimensions")
      shape = tuple(reversed(h.scalars(10, dims).tolist()))  # gguf lists the fastest dimension first
      infos.append((tname, shape, h.uint(4), h.uint()))
    align = kv.get("general.alignment", 32)
    if not isinstance(align, int) or align <= 0 or align & (align - 1): raise ValueError(f"general.alignment {align!r} is not a power of two")
    start = -(-f.tell() // align) * align
    tensors = {n: GGUFTensor(n, shape, typ, source, start + off, _tensor_bytes(typ, shape)) for n, shape, typ, off in infos}
    for t in tensors.values():
      if t.offset + t.nbytes > size: raise ValueError(f"tensor {t.name!r} is truncated ({max(size - t.offset, 0)} of {t.nbytes} bytes)")
    return kv, tensors
  except (ValueError, UnicodeDecodeError, OverflowError) as e:
    raise ValueError(f"{name}: not a valid gguf file: {e}") from None
