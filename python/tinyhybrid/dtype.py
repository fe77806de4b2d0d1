"""dtypes with tinygrad's names. The DType objects live in the C++ core (interned); this module adds the
namespace, the promotion lattice and conversions to NumPy."""
from __future__ import annotations

import functools
import math
import struct
from typing import Any, Callable, Final, TypeAlias

import numpy as np

from tinyhybrid import _core
from tinyhybrid.uop import AddrSpace  # noqa: F401 (tinygrad's import path: tinygrad.dtype.AddrSpace)
from tinyhybrid.helpers import DEFAULT_FLOAT, DEFAULT_INT

DType = _core.DType
ConstType = float | int | bool


class InvalidType:
  """tinygrad's marker for a value that is never read (a masked-off lane's). One object: InvalidType() is Invalid,
  also after pickling. Our graph says the same with gates (a WHERE under a mask), so it is for code that names it;
  as a Python value its dtype is bool, as in tinygrad."""
  _instance: InvalidType | None = None
  def __new__(cls) -> InvalidType:
    if cls._instance is None: cls._instance = object.__new__(cls)
    return cls._instance
  def __reduce__(self) -> tuple: return (InvalidType, ())
  def __repr__(self) -> str: return "Invalid"


Invalid = InvalidType()


def _d(name: str) -> DType: return DType.from_name(name)


class DTypes:
  """The dtypes namespace: `dtypes.float32`, `dtypes.int`, `dtypes.is_float(dt)`, ..."""

  @staticmethod
  def is_float(x: DType) -> bool: return x._is_float
  @staticmethod
  def is_int(x: DType) -> bool: return x._is_int
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x._is_unsigned
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar() is dtypes.bool
  @staticmethod
  def from_py(x: object) -> DType:
    """The dtype of a Python value: bool, weakint for ints, weakfloat for floats; lists take the widest."""
    if isinstance(x, (bool, InvalidType)): return dtypes.bool
    if isinstance(x, float): return dtypes.weakfloat
    if isinstance(x, int): return dtypes.weakint
    if isinstance(x, (list, tuple)):
      return strong_dtype(max(dtypes.from_py(xi) for xi in x)) if x else dtypes.default_float
    raise RuntimeError(f"Could not infer dtype of {x!r} with type {type(x)}")
  @staticmethod
  def min(dtype: DType) -> ConstType:
    """The smallest value of dtype (-inf for floats, False for bool), as `dtypes.min(dt)` in tinygrad's tests."""
    return dtype.min
  @staticmethod
  def max(dtype: DType) -> ConstType:
    """The largest value of dtype (inf for floats, True for bool)."""
    return dtype.max
  @staticmethod
  def fields() -> dict[str, DType]:
    """Every dtype by each of its names (DTYPES_DICT), as tinygrad's tests loop over them."""
    return DTYPES_DICT
  @staticmethod
  def finfo(dtype: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtype._is_float or dtype._is_weak: raise ValueError(f"{dtype} is not a floating point type")
    return _FINFO[dtype.scalar().name]

  void: Final[DType] = _d("void")
  weakint: Final[DType] = _d("weakint")
  weakfloat: Final[DType] = _d("weakfloat")
  bool: Final[DType] = _d("bool")
  int8: Final[DType] = _d("int8")
  uint8: Final[DType] = _d("uint8")
  int16: Final[DType] = _d("int16")
  uint16: Final[DType] = _d("uint16")
  int32: Final[DType] = _d("int32")
  uint32: Final[DType] = _d("uint32")
  int64: Final[DType] = _d("int64")
  uint64: Final[DType] = _d("uint64")
  fp8e4m3: Final[DType] = _d("fp8e4m3")
  fp8e5m2: Final[DType] = _d("fp8e5m2")
  fp8e4m3fnuz: Final[DType] = _d("fp8e4m3fnuz")
  fp8e5m2fnuz: Final[DType] = _d("fp8e5m2fnuz")
  float16: Final[DType] = _d("float16")
  bfloat16: Final[DType] = _d("bfloat16")
  float32: Final[DType] = _d("float32")
  float64: Final[DType] = _d("float64")

  half = float16; float = float32; double = float64  # noqa: E702
  uchar = uint8; ushort = uint16; uint = uint32; ulong = uint64  # noqa: E702
  char = int8; short = int16; int = int32; long = int64  # noqa: E702

  # Context(DEFAULT_FLOAT=dtypes.half) sets a DType, the environment a name
  @property
  def default_float(self) -> DType: return v if isinstance(v := DEFAULT_FLOAT.value, DType) else to_dtype(str(v))
  @property
  def default_int(self) -> DType: return v if isinstance(v := DEFAULT_INT.value, DType) else to_dtype(str(v))

  fp8_ocp, fp8_fnuz = (fp8e4m3, fp8e5m2), (fp8e4m3fnuz, fp8e5m2fnuz)
  fp8s = fp8_ocp + fp8_fnuz
  floats = fp8s + (float16, bfloat16, float32, float64)
  uints = (uint8, uint16, uint32, uint64)
  sints = (int8, int16, int32, int64)
  ints = uints + sints
  weaks = (weakint, weakfloat)
  all = floats + ints + (bool,)  # noqa: A003


dtypes = DTypes()
# every dtype by each of its names ("float32", "float", "half", ...), as tinygrad's DTYPES_DICT
DTYPES_DICT: dict[str, DType] = {k: v for k, v in DTypes.__dict__.items()
                                 if isinstance(v, DType) and not k.startswith(("default", "void", "weak", "_"))}

_FINFO = {"half": (5, 10), "__bf16": (8, 7), "float": (8, 23), "double": (11, 52), "float8_e4m3": (4, 3),
          "float8_e5m2": (5, 2), "float8_e4m3fnuz": (4, 3), "float8_e5m2fnuz": (5, 2)}

DTypeLike: TypeAlias = str | DType


def to_dtype(dtype: DTypeLike) -> DType:
  """A DType from a DType or its name ("float32", "int", ...)."""
  if isinstance(dtype, DType): return dtype
  try: return DType.from_name(dtype.lower())
  except AttributeError: raise AttributeError(f"unknown dtype {dtype!r}") from None


def strong_dtype(dtype: DType) -> DType:
  """The dtype a weak type commits to when nothing else decides: default_int or default_float."""
  if dtype is dtypes.weakint: return dtypes.default_int
  if dtype is dtypes.weakfloat: return dtypes.default_float
  return dtype


# JAX-style promotion lattice (https://jax.readthedocs.io/en/latest/jep/9407-type-promotion.html)
_PROMO: dict[DType, list[DType]] = {
  dtypes.bool: [dtypes.weakint], dtypes.weakint: [dtypes.int8, dtypes.uint8],
  dtypes.int8: [dtypes.int16], dtypes.int16: [dtypes.int32], dtypes.int32: [dtypes.int64], dtypes.int64: [dtypes.weakfloat],
  dtypes.uint8: [dtypes.int16, dtypes.uint16], dtypes.uint16: [dtypes.int32, dtypes.uint32],
  dtypes.uint32: [dtypes.int64, dtypes.uint64], dtypes.uint64: [dtypes.weakfloat],
  dtypes.weakfloat: list(dtypes.fp8s),
  **{f: [dtypes.float16, dtypes.bfloat16] for f in dtypes.fp8s},
  dtypes.float16: [dtypes.float32], dtypes.bfloat16: [dtypes.float32], dtypes.float32: [dtypes.float64], dtypes.float64: [],
}


@functools.cache
def _ancestors(dtype: DType) -> frozenset[DType]:
  return frozenset({dtype}).union(*[_ancestors(d) for d in _PROMO[dtype]])


@functools.cache
def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype every argument promotes to without loss (by the lattice)."""
  return min(frozenset.intersection(*[_ancestors(d.scalar()) for d in ds]))


def least_upper_float(dt: DType) -> DType:
  if dt is dtypes.weakint: return dtypes.weakfloat
  return dt if dt._is_float else least_upper_dtype(dt, dtypes.default_float)


def can_lossless_cast(dt0: DType, dt1: DType) -> bool:
  """Whether every value of dt0 survives a cast to dt1. As tinygrad has it, no cast into bfloat16 counts, and a
  weakint takes any int."""
  if dt0 == dt1 or dt0 is dtypes.bool: return True
  if dt1 is dtypes.weakint: return dt0._is_int
  if dt1 is dtypes.bfloat16 or dt0.count != 1 or dt1.count != 1 or dt0 in (dtypes.weakint, dtypes.weakfloat): return False
  if dt1._is_float:
    if dt0._is_float: return dt0.itemsize < dt1.itemsize
    return dt0._is_int and dt0.itemsize * 8 - (not dt0._is_unsigned) <= dtypes.finfo(dt1)[1] + 1
  if not dt1._is_int or not dt0._is_int or (dt1._is_unsigned and not dt0._is_unsigned): return False
  return dt0.itemsize < dt1.itemsize or (dt0.itemsize == dt1.itemsize and dt0._is_unsigned == dt1._is_unsigned)


def sum_acc_dtype(dt: DType) -> DType:
  """The accumulator dtype of a sum, as in tinygrad: unsigned -> uint32+, int -> int32+, float -> float32+."""
  if dt._is_unsigned: return least_upper_dtype(dt, dtypes.uint32)
  if dt._is_int or dt is dtypes.bool: return least_upper_dtype(dt, dtypes.int32)
  return least_upper_dtype(dt, dtypes.float32)


def _to_np_dtype(dtype: DType) -> type | None:
  """The numpy scalar type that holds dtype's values (float32 for bfloat16 and fp8s), None for void."""
  if dtype in (dtypes.bfloat16, *dtypes.fp8s): return np.float32
  if dtype is dtypes.void: return None
  return np_storage(strong_dtype(dtype)).type


def _from_np_dtype(npdtype: object) -> DType:
  """The dtype of a NumPy dtype (tinygrad's name); one with no Tensor dtype (object, complex, strings, dates) is a
  TypeError."""
  d = np.dtype(npdtype)  # type: ignore[call-overload]
  if d.kind not in "biuf" or (dt := DTYPES_DICT.get(d.name)) is None:
    raise TypeError(f"NumPy arrays of dtype {d} have no Tensor dtype (bool, ints and floats do)")
  return dt


# torch's names of the dtypes (torch.float8_e4m3fn is fp8e4m3): for its files, the safetensors library's specs, and
# tensors handed over to torch
TORCH_NAMES: dict[DType, str] = {
  dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16", dtypes.uint16: "uint16",
  dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64", dtypes.uint64: "uint64", dtypes.float16: "float16",
  dtypes.bfloat16: "bfloat16", dtypes.float32: "float32", dtypes.float64: "float64", dtypes.fp8e4m3: "float8_e4m3fn",
  dtypes.fp8e5m2: "float8_e5m2", dtypes.fp8e4m3fnuz: "float8_e4m3fnuz", dtypes.fp8e5m2fnuz: "float8_e5m2fnuz"}


def _to_torch_dtype(dtype: DType) -> object | None:
  """torch's dtype of a dtype (tinygrad's name), None for one torch lacks. An fp8 is its storage, uint8, as in
  tinygrad (a torch tensor of one holds its bit patterns)."""
  import torch
  if dtype in dtypes.fp8s: return torch.uint8
  return getattr(torch, TORCH_NAMES.get(strong_dtype(dtype), ""), None)


def _from_torch_dtype(torchdtype: object) -> DType:
  """The dtype of a torch dtype (tinygrad's name); one with no Tensor dtype (complex, quantized) is a TypeError."""
  name = str(torchdtype).removeprefix("torch.")
  if (dt := next((d for d, n in TORCH_NAMES.items() if n == name), None)) is None: raise TypeError(f"torch's {torchdtype} has no Tensor dtype")
  return dt


def _commit(dtype: DType, x: ConstType) -> ConstType:
  from tinyhybrid.uop.ops import UOp
  return UOp.const(dtype, x.item() if isinstance(x, np.generic) else x).arg  # a NumPy scalar as its Python value


# truncate[dtype](x): the Python value x as dtype holds it (ints wrap, floats round, fp8 saturates as its casts do), as
# tinygrad's; it is what a constant of that dtype is committed to in the graph, so the two always agree
truncate: dict[DType, Callable[[ConstType], ConstType]] = {d: functools.partial(_commit, d) for d in (*TORCH_NAMES, dtypes.weakint, dtypes.weakfloat)}


# fp8 formats: exponent bits, mantissa bits, bias; fnuz ones have no -0 and no infinities (0x80 is their NaN), e4m3
# has no infinities (all ones is its NaN), e5m2 is IEEE's layout
_FP8 = {dtypes.fp8e4m3: (4, 3, 7), dtypes.fp8e5m2: (5, 2, 15), dtypes.fp8e4m3fnuz: (4, 3, 8), dtypes.fp8e5m2fnuz: (5, 2, 16)}


def float_to_fp16(x: float) -> float:
  """x rounded to float16 (to nearest even; past the largest finite, infinity), as a Python float (tinygrad's name)."""
  return float(truncate[dtypes.float16](x))


def float_to_bf16(x: float) -> float:
  """x rounded to bfloat16 (to nearest even), as a Python float (tinygrad's name)."""
  return float(truncate[dtypes.bfloat16](x))


def fp8_to_float(x: int, dtype: DType) -> float:
  """The value of the fp8 bit pattern x (0..255) of dtype (tinygrad's name)."""
  if dtype not in _FP8: raise ValueError(f"fp8_to_float: {dtype} is not an fp8 dtype")
  if not 0 <= x <= 255: raise ValueError(f"fp8_to_float: {x} is not a byte")
  ebits, mbits, bias = _FP8[dtype]
  sign, e, m = -1.0 if x & 0x80 else 1.0, (x >> mbits) & ((1 << ebits) - 1), x & ((1 << mbits) - 1)
  fnuz = dtype in (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
  if fnuz and x == 0x80: return math.nan
  if dtype is dtypes.fp8e4m3 and (x & 0x7f) == 0x7f: return math.nan
  if dtype is dtypes.fp8e5m2 and e == 31: return math.nan if m else sign * math.inf
  return sign * (m / (1 << mbits) * 2.0 ** (1 - bias) if e == 0 else (1 + m / (1 << mbits)) * 2.0 ** (e - bias))


@functools.cache
def _fp8_table(dtype: DType) -> np.ndarray:
  """The float32 value of each of dtype's 256 bit patterns (a NaN keeps its pattern's sign)."""
  vals = [fp8_to_float(x, dtype) for x in range(256)]
  return np.array([math.copysign(v, -1.0) if math.isnan(v) and x & 0x80 else v for x, v in enumerate(vals)], np.float32)


def fp8_decode(bits: object, dtype: DType) -> np.ndarray:
  """fp8 bit patterns (uint8, any shape) of dtype as float32 values: exact."""
  return _fp8_table(dtype)[np.asarray(bits, np.uint8)]


def fp8_encode(x: object, dtype: DType) -> np.ndarray:
  """Float values (any shape; taken as float64, so a float32 or float64 rounds once) as bit patterns (uint8) of an OCP
  fp8 dtype, rounded to nearest even. Past the largest finite, fp8e4m3 saturates to +-448 (infinities too) and
  fp8e5m2 gives +-inf, as torch's casts to float8_e4m3fn and float8_e5m2 do; a NaN is the all-ones pattern with its
  sign. The fnuz formats (no infinities, no -0, 0x80 their NaN) saturate too, as tinygrad's casts do (torch's give
  NaN past the largest finite); an infinity or a NaN is 0x80."""
  if dtype not in _FP8: raise TypeError(f"fp8_encode: {dtype} is not an fp8 dtype")
  _, m, b = _FP8[dtype]
  ieee = dtype is dtypes.fp8e5m2
  with np.errstate(invalid="ignore"): u = np.asarray(x, np.float64).view(np.uint64)  # (a signaling NaN stays a NaN)
  a = u & np.uint64(0x7FFFFFFFFFFFFFFF)
  e = (a >> np.uint64(52)).astype(np.int64)
  normal = e - 1023 >= 1 - b
  # a normal number of the format (or past it): m bits kept and the exponent rebiased; a subnormal: the significand in
  # units of the format's smallest, 2^(1-b-m)
  sh = np.where(normal, 52 - m, np.minimum(1076 - b - m - e, 63)).astype(np.uint64)
  sig = np.where(normal, a, (a & np.uint64(0xFFFFFFFFFFFFF)) | np.where(e > 0, np.uint64(1 << 52), np.uint64(0)))
  one = np.uint64(1)
  q, rem, half = sig >> sh, sig & ((one << sh) - one), one << (sh - one)
  with np.errstate(over="ignore"): q = np.where(normal, q - np.uint64((1023 - b) << m), q)  # (a subnormal's wraps, unused)
  q = q + ((rem > half) | ((rem == half) & ((q & one) == one)))  # nearest, ties to even
  if dtype in dtypes.fp8_fnuz:
    q = np.minimum(q, np.uint64(0x7F))
    out = np.where(q == 0, np.uint64(0), ((u >> np.uint64(56)) & np.uint64(0x80)) | q)
    return np.where(a >= np.uint64(0x7FF0000000000000), np.uint64(0x80), out).astype(np.uint8)
  q = np.where(q > (0x7B if ieee else 0x7E), np.uint64(0x7C if ieee else 0x7E), q)
  q = np.where(a > np.uint64(0x7FF0000000000000), np.uint64(0x7F), q)
  return (((u >> np.uint64(56)) & np.uint64(0x80)) | q).astype(np.uint8)


def float_to_fp8(x: float, dtype: DType) -> int:
  """One float as the bit pattern (an int 0..255) of an fp8 dtype (tinygrad's name; see fp8_encode)."""
  return int(fp8_encode(x, dtype))


# ** one value as the bits memory holds (tinygrad's helpers for the PYTHON device and its tests) **
def storage_fmt_for_dtype(dtype: DType) -> str:
  """The struct format of dtype's storage: bfloat16 as its 16 bits, an fp8 as its byte, the others their own."""
  return "H" if dtype is dtypes.bfloat16 else "B" if dtype in dtypes.fp8s else dtype.fmt  # type: ignore[return-value]


def to_storage_scalar(x: Any, dtype: DType) -> Any:
  """A value as dtype's storage holds it (half rounded; bfloat16's bits as an int; an fp8's byte)."""
  if dtype is dtypes.half: return float_to_fp16(x)
  if dtype is dtypes.bfloat16: return int(np.array(float_to_bf16(float(x)), np.float32).view(np.uint32)) >> 16
  if dtype in dtypes.fp8s: return float_to_fp8(float(x), dtype)
  return x


def from_storage_scalar(x: Any, dtype: DType) -> Any:
  """The value of dtype's storage x (the inverse of to_storage_scalar)."""
  if dtype is dtypes.bfloat16: return float(np.array((int(x) & 0xFFFF) << 16, np.uint32).view(np.float32))
  if dtype in dtypes.fp8s: return fp8_to_float(int(x), dtype)
  return x


def bitcast(x: Any, in_dtype: DType, out_dtype: DType) -> Any:
  """One value's bits read as another dtype of the same size."""
  if in_dtype.itemsize != out_dtype.itemsize: raise ValueError(f"bitcast: {in_dtype} and {out_dtype} differ in size")
  packed = struct.pack(storage_fmt_for_dtype(in_dtype), to_storage_scalar(x, in_dtype))
  return from_storage_scalar(struct.unpack(storage_fmt_for_dtype(out_dtype), packed)[0], out_dtype)


# numpy has no bfloat16 or fp8: those are stored as raw bits of the same width
_NP_STORAGE = {"bool": np.bool_, "signed char": np.int8, "unsigned char": np.uint8, "short": np.int16,
               "unsigned short": np.uint16, "int": np.int32, "unsigned int": np.uint32, "long": np.int64,
               "unsigned long": np.uint64, "half": np.float16, "__bf16": np.uint16, "float": np.float32,
               "double": np.float64, "float8_e4m3": np.uint8, "float8_e5m2": np.uint8, "float8_e4m3fnuz": np.uint8,
               "float8_e5m2fnuz": np.uint8}


def np_storage(dtype: DType) -> np.dtype:
  """The numpy dtype that stores values of `dtype` (raw bits where numpy has no such type)."""
  try: return np.dtype(_NP_STORAGE[dtype.scalar().name])
  except KeyError: raise TypeError(f"{dtype} has no numpy storage") from None
