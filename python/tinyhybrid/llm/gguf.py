"""Reading .gguf files. The container (header, key-values, tensor infos, alignment) is read by the gguf package's
GGUFReader, the format's reference reader from llama.cpp; tensor data is copied to the device as bytes. gguf_load
hands back every tensor as a Tensor (quantized ones lazily dequantized on the device, nn/quant.py); gguf_read keeps
quantized tensors as their raw blocks, which the LLM's fused dequantize-matmul kernels read (llm/quantized.py)."""
from __future__ import annotations

import os
import pathlib
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from tinyhybrid.dtype import np_storage
from tinyhybrid.dtype import DType, dtypes
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
  """One tensor of a gguf file: its row-major shape and ggml type, and its data on the device: a Tensor of that shape
  for the native types, or the (blocks, bytes per block) uint8 blocks of a quantized type."""
  name: str
  shape: tuple[int, ...]
  ggml_type: int
  data: Tensor

  @property
  def quantized(self) -> bool: return self.ggml_type in GGML_QUANT

  def dequantize(self) -> Tensor:
    """The tensor as a float Tensor of its shape (lazy: a quantized one is unpacked by the kernels that read it)."""
    return dequantize(self.data, self.ggml_type).reshape(self.shape) if self.quantized else self.data


def gguf_read(fn: FileLike, progress: bool = False) -> tuple[dict[str, Any], dict[str, GGUFTensor]]:
  """(key-value metadata, tensors by name) of a .gguf file, quantized tensors kept as blocks. A type we have no
  kernels for raises ValueError naming it and the tensor; a truncated or corrupt file raises ValueError naming the
  file. progress: a progress bar over the bytes copied to the device."""
  if isinstance(fn, Tensor):  # the reader maps a file: give the bytes one
    blob, _ = _read_bytes(fn)
    with tempfile.TemporaryDirectory() as d:
      (path := pathlib.Path(d) / "tensor.gguf").write_bytes(blob)
      return gguf_read(path, progress)
  if not os.path.isfile(fn): raise FileNotFoundError(f"gguf: no such file {str(fn)!r}")
  kv, infos = _gguf_infos(fn)
  for name, _, typ, _ in infos:
    if typ not in GGML_NATIVE and typ not in GGML_QUANT:
      raise ValueError(f"{fn}: tensor {name!r} has ggml type {ggml_type_name(typ)}, which tinyhybrid does not support "
                       f"(supported: {', '.join(ggml_type_name(t) for t in [*GGML_NATIVE, *GGML_QUANT])})")
  from tqdm import tqdm
  out: dict[str, GGUFTensor] = {}
  with tqdm(total=sum(raw.nbytes for *_, raw in infos), unit="B", unit_scale=True, desc=f"loading {pathlib.Path(fn).name}",
            disable=not progress, leave=False) as bar:
    for name, shape, typ, raw in infos:
      if (dt := GGML_NATIVE.get(typ)) is not None: data = _from_raw(raw.view(np_storage(dt)), dt, shape)
      else: data = _from_raw(raw, dtypes.uint8, (raw.nbytes // GGML_QUANT[typ][2], GGML_QUANT[typ][2]))
      out[name] = GGUFTensor(name, shape, typ, data)
      bar.update(raw.nbytes)
  return kv, out


def gguf_load(fn: FileLike) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(key-value metadata, tensors by name) of a .gguf file. Shapes are in row-major order (gguf lists dimensions
  fastest first); quantized tensors come back as float32, lazily dequantized on the device."""
  kv, tensors = gguf_read(fn)
  return kv, {name: t.dequantize() for name, t in tensors.items()}


def _gguf_infos(fn: str | os.PathLike) -> tuple[dict[str, Any], list[tuple[str, tuple[int, ...], int, np.ndarray]]]:
  """The key-values and (name, row-major shape, ggml type, raw bytes) of each tensor, as GGUFReader finds them."""
  try: import gguf
  except ImportError: raise ImportError("reading .gguf files needs the gguf package: pip install 'tinyhybrid[gguf]'") from None
  try:
    reader = gguf.GGUFReader(fn)
    kv = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}  # GGUF.*: the reader's own
    tensors = [(rt.name, tuple(int(d) for d in reversed(rt.shape)), int(rt.tensor_type), np.ascontiguousarray(rt.data).reshape(-1).view(np.uint8))
               for rt in reader.tensors]
    for (name, *_, raw), rt in zip(tensors, reader.tensors):
      if raw.nbytes != rt.n_bytes: raise ValueError(f"tensor {name!r} is truncated ({raw.nbytes} of {rt.n_bytes} bytes)")
    return kv, tensors
  except (ValueError, IndexError, KeyError, TypeError, OverflowError) as e:  # what the reader raises on a corrupt file
    raise ValueError(f"{fn}: not a valid gguf file: {type(e).__name__}: {e}") from None
