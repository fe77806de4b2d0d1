"""Tensor: a lazy, device-aware array whose value is a UOp graph. Operations build the graph; realize() (or
reading the data) schedules it into kernels, compiles them and runs them. The method names and semantics follow
tinygrad's Tensor."""
from __future__ import annotations

import contextlib
import functools
import itertools
import math
import pathlib
import weakref
from typing import Any, Callable, ClassVar, Iterable, Iterator, Sequence, cast  # noqa: F401 (cast: tinygrad programs import it from here)

import numpy as np

from tinyhybrid.device import Buffer, Device, is_storage
from tinyhybrid.dtype import np_storage
from tinyhybrid.dtype import fp8_decode, fp8_encode
from tinyhybrid.engine import realize as engine
from tinyhybrid.dtype import DType, DTypeLike, _from_np_dtype, dtypes, strong_dtype, to_dtype
# names tinygrad's programs and tests import from tinygrad.tensor
from tinyhybrid.dtype import _to_np_dtype, least_upper_dtype, least_upper_float, sum_acc_dtype  # noqa: F401
from tinyhybrid.helpers import fetch, postorder, prod
from tinyhybrid.uop import GroupOp, Ops
from tinyhybrid.uop.ops import UOp, bound_value, check_shape, movement, sint
from tinyhybrid.uop.shape import max_shape, shape_of
from tinyhybrid.mixin.api import TensorAPI
from tinyhybrid.mixin import uop_api
from tinyhybrid.uop.buffers import base_buffer, buffer_uop, buffer_view, contiguous_buffer, strip_reshapes, view_base
from tinyhybrid.schedule.multi import check_shardable, copy_to, is_realized_multi, multi_devices, select_shard
from tinyhybrid.uop.sharding import shard_bounds

ConstType = int | float | bool


def is_numpy_ndarray(x: Any) -> bool: return isinstance(x, np.ndarray)  # tinygrad's test helper, importable from here


def _flatten_list(x: Any) -> tuple[list, tuple[int, ...]]:
  """A nested list's items in row-major order and its shape; ragged lists are an error."""
  if isinstance(x, (np.ndarray, np.generic)): x = x.tolist()  # numpy items inside a list read as the Python values
  if isinstance(x, (bytes, bytearray)): x = list(x)  # bytes inside a list: a row of their values, as in tinygrad
  if not isinstance(x, (list, tuple)): return [x], ()
  if len(x) == 0: return [], (0,)
  parts = [_flatten_list(e) for e in x]
  if any(p[1] != parts[0][1] for p in parts): raise ValueError(f"Tensor: ragged nested list, sub-shapes {[p[1] for p in parts]}")
  return [v for p in parts for v in p[0]], (len(x),) + parts[0][1]


def _list_array(flat: list, shape: tuple[int, ...], dt: DType) -> np.ndarray:
  """Python values as an array of dt. Values out of an int dtype's range wrap (floats truncate first), as a C cast and
  numpy's astype do, where np.array raises OverflowError."""
  npdt = np_storage(dt) if dt is not dtypes.bfloat16 else np.dtype(np.float32)
  if dt in dtypes.fp8s: npdt = np.dtype(np.float64)  # the values, rounded once to the fp8 by _from_numpy
  try:
    with np.errstate(over="ignore"): return np.array(flat, dtype=npdt).reshape(shape)
  except (OverflowError, ValueError):
    if not dt._is_int: raise
  mask = (1 << (8 * dt.itemsize)) - 1
  words = [(int(v) if not isinstance(v, float) or math.isfinite(v) else 0) & mask for v in flat]  # NaN and inf: 0
  return np.array(words, dtype=np.dtype(f"u{dt.itemsize}")).view(npdt).reshape(shape)


_unique_ids = itertools.count()
_BIND, _DEFINE_VAR, _WEAKINT = Ops.BIND, Ops.DEFINE_VAR, dtypes.weakint  # read on every Tensor(uop): enum lookups are slow


def _new_memory(u: UOp) -> UOp:
  """u, computed into memory of its own. The UNIQUE source gives every call its own node: two tensors built the same
  way from constants (Tensor.zeros(3).contiguous(), twice) are then two buffers, and assigning to one leaves the other
  alone, as in tinygrad. The scheduler numbers UNIQUEs by position, so schedules still repeat."""
  return UOp(Ops.CONTIGUOUS, u.dtype, (u, UOp(Ops.UNIQUE, dtypes.void, (), next(_unique_ids))))


class _LiveTensors:
  """Every live tensor, so a realize can point all of them at the buffers it filled. Iteration is in creation order:
  the same program then realizes the same tensors in the same order on every run, which keeps its schedules (and so
  the schedule cache's keys) the same from one training step to the next."""
  def __init__(self) -> None:
    self._refs: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
    self._next = itertools.count()

  def add(self, t: Tensor) -> None: self._refs[next(self._next)] = t
  def __iter__(self) -> Iterator[Tensor]: return iter(list(self._refs.values()))


_all_tensors = _LiveTensors()
# Assigns through a view (`cache[i:j].assign(x)`), in creation order, held until they run (the view is often a
# temporary): a realize that reads their buffer runs them first, so the write is seen through every tensor on that
# memory (tinygrad's view assign).
_view_writes: list[Tensor] = []


class Tensor(TensorAPI):
  """A lazy n-dimensional array. `Tensor([1, 2, 3])`, `Tensor(np_array)`, `Tensor.zeros(2, 3)`, ..."""
  __slots__ = ("uop", "device", "requires_grad", "grad", "__weakref__")
  training: ClassVar[bool] = False
  no_grad: ClassVar[bool] = False

  class train(contextlib.ContextDecorator):
    """`with Tensor.train():` (or as a decorator) sets Tensor.training for the block, as in tinygrad."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None: self.prev, Tensor.training = Tensor.training, self.mode
    def __exit__(self, *exc: Any) -> None: Tensor.training = self.prev

  class test(contextlib.ContextDecorator):
    """`with Tensor.test():` sets Tensor.no_grad for the block, as in tinygrad."""
    def __init__(self, mode: bool = True): self.mode = mode
    def __enter__(self) -> None: self.prev, Tensor.no_grad = Tensor.no_grad, self.mode
    def __exit__(self, *exc: Any) -> None: Tensor.no_grad = self.prev

  def __init__(self, data: Any, device: str | tuple[str, ...] | None = None, dtype: DTypeLike | None = None, requires_grad: bool | None = None):
    self.uop: UOp = self._init_uop(data, device, dtype)
    if requires_grad and self.uop.dtype in dtypes.weaks: self.uop = _committed(self.uop)  # a parameter has storage
    self.requires_grad: bool | None = requires_grad
    self.grad: Tensor | None = None
    _all_tensors.add(self)  # only once it is whole: a failed construction leaves no half-made tensor behind

  def _init_uop(self, data: Any, device: str | tuple[str, ...] | None, dtype: DTypeLike | None) -> UOp:
    if isinstance(device, (tuple, list)) and len(device) == 1: device = device[0]  # one device is no sharding
    self.device = Device.canonicalize(device)
    dt = to_dtype(dtype) if dtype is not None else None
    if isinstance(data, UOp):
      # a CONST (or a graph of constants only, a cast of one) given without a device stays deviceless, as in tinygrad:
      # realize leaves it alone; work on it runs on the other operand's device, or the default one
      if device is None and (data.op is Ops.CONST or (data.device is None and (data.op is Ops.CAST or data.op in GroupOp.ALU)
                                                      and all(n.op in _CONST_GRAPH for n in data.toposort()))):
        self.device = None  # type: ignore[assignment]
      elif device is None and (own := data.device) is not None: self.device = own  # a graph's own device (or devices)
      if (op := data.op) is _BIND or op is _DEFINE_VAR or (data.dtype is _WEAKINT and data.device is None):
        # a bound Variable (or a sint expression of them) as a scalar tensor whose value is the variable's; like a
        # Python int it stays weakly typed (the other operand's int type wins) until it is stored
        try: bound_value(data)
        except ValueError as e: raise RuntimeError(f"unbound Variable: {e}") from None
      return data if dt is None or data.dtype is dt else data.cast(dt)
    if isinstance(data, Tensor): data = data.numpy()
    if isinstance(data, pathlib.Path):  # the file's bytes as dtype (uint8 by default) on its DISK device, moved to `device`
      disk, dt = Device.canonicalize(f"DISK:{data.resolve()}"), dt or dtypes.uint8
      u = buffer_uop(Buffer(disk, size := data.stat().st_size // dt.itemsize, dt), (size,))
      if device is None: self.device = disk
      else: u = copy_to(u, self.device)
      return u
    if isinstance(data, (bool, int, float)):
      return UOp.const(dt or dtypes.from_py(data), data)
    if data is None: return UOp.const(dt or dtypes.weakfloat, 0)  # a zero, weakly a float unless a dtype is given (tinygrad's)
    if isinstance(data, bytes):
      # the bytes are the values' memory (as in tinygrad): another dtype reads them as its items
      if dt is not None and dt.itemsize != 1: return Tensor(data, device=device).bitcast(dt).uop
      arr: np.ndarray = np.frombuffer(data, dtype=np.uint8)
      dt = dt or dtypes.uint8
    elif isinstance(data, np.ndarray):
      arr = data
      if dt is None: dt = _from_np_dtype(arr.dtype)
    elif isinstance(data, (list, tuple)):
      flat, shape = _flatten_list(data)
      dt = strong_dtype(dt or (dtypes.from_py(flat) if flat else dtypes.default_float))
      arr = _list_array(flat, shape, dt)
    else:
      raise TypeError(f"Tensor: can't make a tensor from {type(data).__name__}")
    return Tensor._from_numpy(arr, dt, self.device)

  @staticmethod
  def _from_numpy(arr: np.ndarray, dt: DType, device: str | tuple[str, ...]) -> UOp:
    if type(device) is tuple:  # a replica on each device
      return UOp(Ops.MSTACK, dt, tuple(Tensor._from_numpy(arr, dt, d) for d in device), (device, None))
    if is_storage(device): return copy_to(Tensor._from_numpy(arr, dt, "CPU"), device)  # DISK: copied in when realized
    shape = arr.shape  # ascontiguousarray makes a 0-d array 1-d
    if dt is dtypes.bfloat16:  # numpy has no bfloat16: round float32 to its top 16 bits (nearest even)
      bits = np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32)
      arr = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    elif dt in dtypes.fp8s:  # numpy has no fp8: the values rounded to their bit patterns (as a cast rounds)
      arr = fp8_encode(arr, dt)
    else:
      arr = np.ascontiguousarray(arr, dtype=np_storage(dt))
    buf = Buffer(device, arr.size, dt, initial=arr)  # type: ignore[arg-type]  # a str: tuples returned above
    return buffer_uop(buf, shape)

  # ** basic properties **
  @property
  def shape(self) -> tuple[int, ...]:
    try: return self.uop.__dict__["_shape"] or ()  # cached on the node (uop/shape.py): the common case, inline
    except KeyError: return shape_of(self.uop) or ()
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str:
    return f"<Tensor <UOp {self.device} {self.uop.op.name}> on {self.device} with shape {self.shape} dtype {self.dtype}{' grad' if self.requires_grad else ''}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool: raise TypeError("__bool__ on Tensor is not defined: use .item() or .any()/.all()")

  # ** the primitives every other operation is built from **
  def _wrap(self, u: UOp, shape: tuple | None = None) -> Tensor:
    # the shape now, while the sources' nodes still have their Python objects (and their cached shapes): a node keeps
    # its sources' objects alive once its shape is known, so no shape below a live tensor is ever worked out again.
    # A caller that knows the shape (an elementwise op, a reshape) passes it
    if shape is None: shape_of(u)
    else: u.__dict__["_shape"], u.__dict__["_srcs"] = shape, u.src
    t = Tensor.__new__(Tensor)
    t.uop, t.device, t.grad = u, self.device if self.device is not None else (u.device or Device.canonicalize(None)), None
    t.requires_grad = None
    _all_tensors.add(t)
    return t

  def _mop(self, op: Ops, arg: Any) -> Tensor:
    """A movement op whose arg is plain ints; _smop takes one with sints of bound Variables."""
    return self._wrap(UOp(op, self.dtype, (self.uop,), arg), arg if op is Ops.RESHAPE or op is Ops.EXPAND else None)

  def _smop(self, op: Ops, arg: Any) -> Tensor: return self._wrap(movement(op, self.uop, arg, strict=True))

  def _reduce(self, op: Ops, axis: tuple[int, ...], keepdim: bool = False) -> Tensor:
    # a 0-d tensor takes axis 0 or -1 (as torch does) and reduces nothing
    axis = tuple(sorted({self._resolve_dim(a) for a in axis})) if self.ndim else ()
    # over a zero-size axis the kernel's loop runs zero times and leaves the op's identity: 0, 1, or dtype.min for max
    # (-inf, False), as in tinygrad
    ret = self._wrap(UOp(Ops.REDUCE, self.dtype, (self.uop,), (op, axis))) if axis else self
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axis))

  def _alu(self, op: Ops, *src: Tensor) -> Tensor:
    dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else None
    shape = self.shape
    u = UOp(op, dt, (self.uop, *[s.uop for s in src]))
    # sources of one shape (the callers broadcast them): the result's; anything else is checked by shape_of
    return self._wrap(u, shape if all(s.shape == shape for s in src) else None)

  def cast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    return self if self.dtype is dt else self._wrap(UOp(Ops.CAST, dt, (self.uop,)))

  def bitcast(self, dtype: DTypeLike) -> Tensor:
    dt = to_dtype(dtype)
    if is_storage(self.device):  # DISK: a view of the same bytes
      from tinyhybrid.engine.storage import bitcast_view
      if not buffer_view(self.uop): self.realize()
      return self._wrap(bitcast_view(self.device, self.uop, dt))
    if (isz := self.dtype.itemsize) != (osz := dt.itemsize):
      # another item size rescales the last axis (as in tinygrad): the bytes move through unsigned words and shifts,
      # lowest first (little-endian), so it is elementwise work on any shape (a symbolic one too)
      last = self.shape[-1] if self.shape else None
      if last is None or (last * isz % osz if type(last) is int else osz > isz):
        raise RuntimeError(f"bitcast: {self.dtype} ({isz} bytes) to {dt} ({osz} bytes) needs a last axis of whole {osz}-byte items, "
                           f"shape {self.shape}")
      word = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
      x = self.bitcast(word[isz])
      if isz > osz: x = Tensor.stack(*[(x >> (8 * osz * k)).cast(word[osz]) for k in range(isz // osz)], dim=-1).flatten(-2)
      else:
        x = x.reshape(*self.shape[:-1], last // (r := osz // isz), r).cast(word[osz])
        x = functools.reduce(lambda a, b: a | b, [x[..., k] << (8 * isz * k) for k in range(r)])
      return x.bitcast(dt)
    return self if self.dtype is dt else self._wrap(UOp(Ops.BITCAST, dt, (self.uop,)))

  # ** creation **
  @staticmethod
  def full(shape: sint | Sequence[sint], fill_value: ConstType, dtype: DTypeLike | None = None, device: str | None = None,
           buffer: bool = True, **kwargs) -> Tensor:
    """shape filled with fill_value (a number, or a bound Variable's value). A full tensor is a broadcast constant
    until it is realized, when it gets memory of its own; tinygrad's `buffer` (False: keep it a constant) changes
    nothing here."""
    shape = (shape,) if isinstance(shape, (int, UOp)) else tuple(shape)
    check_shape(shape, "full: ", unbound=True)
    requires_grad = kwargs.pop("requires_grad", None)
    if isinstance(fill_value, UOp):  # a bound Variable (or an expression of them): its value, read when the kernel runs
      t = Tensor(fill_value, device=device, dtype=dtype, **kwargs)
      if t.dtype in dtypes.weaks: t = t.cast(strong_dtype(t.dtype))
    else:
      dt = to_dtype(dtype) if dtype is not None else strong_dtype(dtypes.from_py(fill_value))
      t = Tensor(UOp.const(dt, fill_value), device=device, **kwargs)
    if shape: t = t.reshape((1,) * len(shape)).expand(shape)
    # a leaf that asks for gradients gets memory of its own: as a constant graph it would be the very node of every
    # other constant of its shape and value (`Tensor.ones(4) * 1` multiplies it by itself), and gradients are keyed by node
    if requires_grad: t = t._wrap(_new_memory(t.uop))
    t.requires_grad = requires_grad
    return t

  @staticmethod
  def from_blob(ptr: int, shape: tuple[int, ...], **kwargs) -> Tensor:
    """A tensor over the host memory at ptr, without copying or owning it: the memory must outlive the tensor."""
    t = Tensor.empty(*shape, **kwargs)
    base_buffer(t.uop).arg.attach(ptr)
    return t

  @staticmethod
  def from_url(url: str, gunzip: bool = False, **kwargs) -> Tensor:
    """The bytes of the file at url (downloaded once, see helpers.fetch) as a uint8 tensor, as in tinygrad."""
    return Tensor(np.frombuffer(fetch(url, gunzip=gunzip).read_bytes(), dtype=np.uint8), **kwargs)

  @staticmethod
  def _iota(n: int, device: str | None = None) -> Tensor:
    """0, 1, ..., n-1 as int32: the loop index itself once lowered, so it costs no memory traffic."""
    return Tensor(UOp(Ops.IOTA, dtypes.int32, (), n), device=device)

  @staticmethod
  def empty(*shape, dtype: DTypeLike | None = None, device: str | None = None, **kwargs) -> Tensor:
    shape = Tensor._shape_arg(shape)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    t = Tensor.__new__(Tensor)
    t.device, t.grad, t.requires_grad = Device.canonicalize(device), None, kwargs.get("requires_grad")
    # a symbolic shape gets the memory of its largest value (see uop/shape.py max_shape)
    if type(t.device) is tuple:
      t.uop = UOp(Ops.MSTACK, dt, tuple(buffer_uop(Buffer(d, prod(max_shape(shape)), dt), shape) for d in t.device), (t.device, None))
    else: t.uop = buffer_uop(Buffer(t.device, prod(max_shape(shape)), dt), shape)
    _all_tensors.add(t)
    return t

  @staticmethod
  def _shape_arg(shape: tuple) -> tuple[sint, ...]:
    s = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    return check_shape(s, unbound=True)

  # ** realize and read **
  def realize(self, *lst: Tensor) -> Tensor:
    """Compute this tensor (and lst) now."""
    _realize(ts := [t for t in (self, *lst) if t.device is not None])  # a deviceless const is its own value
    for t in ts:  # realized by request: state from now on, even if made from host data (function's implicit inputs)
      if (b := t.uop.base).op is Ops.BUFFER and isinstance(b.arg, Buffer): b.arg.from_host = False
    return self

  # ** autograd **
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """d(self)/d(target) for each target (self must be a scalar unless gradient is given); a target that self does not
    depend on gets zeros. As in tinygrad, only float tensors have gradients, and a weak one (Tensor(2.0)) is no target."""
    from tinyhybrid.gradient import compute_gradient
    if gradient is None and self.shape != ():
      raise AssertionError(f"when no gradient is provided, backward must be called on a scalar tensor (this one has shape {self.shape})")
    if not (self.dtype._is_float and all(t.dtype._is_float for t in targets)): raise RuntimeError("only float Tensors have gradient")
    if any(t.dtype in dtypes.weaks for t in targets): raise RuntimeError("cannot take gradient wrt a weak Tensor")
    if gradient is None: gradient = Tensor(1.0, device=self.device, dtype=self.dtype)
    grads = compute_gradient(self, gradient, [t.uop for t in targets])
    out = []
    for t in targets:
      if (g := grads.get(t.uop)) is None: g = t.zeros_like()
      # (a target computed from constants only has no device in its graph: its gradient is put on the target's)
      out.append(g.to(t.device) if type(g.device) is str and type(t.device) is str and g.device != t.device else g)
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulates d(self)/d(t) into t.grad for every tensor t in the graph that has requires_grad set; when none has,
    for every float one with a device that did not opt out (tinygrad's rule). A second backward adds into the same
    grad tensor."""
    if not self.dtype._is_float: raise RuntimeError("only float Tensors have gradient")
    nodes = set(self.uop.toposort())
    live = [t for t in list(_all_tensors) if t.uop in nodes and t is not self]
    targets = [t for t in live if t.requires_grad]
    # as tinygrad does when nothing asks for gradients: every live float tensor in the graph that did not opt out
    # (requires_grad=False, is_param_(False)), lazy ones too, that has a device and a dtype of its own (not weak)
    if not targets:
      targets = [t for t in live if t.requires_grad is None and t.dtype._is_float and t.dtype not in dtypes.weaks and t.device is not None]
    for t, g in zip(targets, self.gradient(*targets, gradient=gradient)):
      g = g.cast(t.dtype) if g.dtype is not t.dtype else g
      if t.grad is None: t.grad = g
      elif buffer_view(t.grad.uop): t.grad.assign(t.grad + g)  # in its memory, lazily
      else: t.grad.uop = (t.grad + g).uop  # still lazy: the same tensor, its graph extended (no realize here)
    return self

  def assign(self, x: Any) -> Tensor:
    """Writes x into this tensor's memory (broadcast to its shape; a tensor x must have its dtype, device and, when
    sharded, axis: RuntimeError otherwise, as in tinygrad); lazy like any op."""
    if isinstance(x, (bool, int, float)): x = self.const_like(x)
    elif not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)  # a list, numpy array, bytes
    if x.dtype in dtypes.weaks: x = x.cast(least_upper_dtype(self.dtype, x.dtype))  # a weak value takes the tensor's type
    elif self.dtype in dtypes.weaks and least_upper_dtype(self.dtype, x.dtype) is x.dtype: self.uop = self.cast(x.dtype).uop  # and v.v.
    if x.uop.device is None and type(self.device) is str: x = Tensor(x.uop, device=self.device)  # constants only: any device
    # tinygrad's checks and words: an assign never casts (a silent cast can lose precision) nor moves the value
    if x.dtype is not self.dtype: raise RuntimeError(f"assign dtype mismatch {self.dtype} != {x.dtype}")
    # a device without kernels (DISK) takes values from any device: they are copied in
    storage = is_storage(self.device)
    if x.device is not None and x.device != self.device and not storage: raise RuntimeError(f"assign device mismatch {self.device} != {x.device}")
    if x.shape != self.shape: x = x.expand(self.shape)
    if x.shape != self.shape: raise ValueError(f"assign: cannot assign shape {x.shape} to shape {self.shape}")
    if storage and x.device is not None and x.device != self.device: x = x.to(self.device)
    if type(self.device) is tuple and x.uop.axis != self.uop.axis:
      raise RuntimeError(f"multi axis mismatch {self.uop.axis} != {x.uop.axis}")
    if _bitcast_of_memory(self.uop):
      src = self.uop.src[0]
      # a bitcast of memory to a type of the same size is a view of it, as in tinygrad: the write lands in that memory
      mem = Tensor(src, device=self.device).assign(x.bitcast(src.dtype))
      if mem.uop.op is Ops.STORE and all(w is not mem for w in _view_writes): _view_writes.append(mem)  # seen by all on that memory
      self.uop = UOp(Ops.BITCAST, self.dtype, (mem.uop,))
      return self
    if self.uop.op is Ops.STORE: self.realize()  # an earlier assign still pending: it lands first
    if self.uop.op is Ops.AFTER: self.uop = self.uop.src[0]  # the graph kept for backward computed values this overwrites
    if self.uop.op in GroupOp.Movement: self._compute_base_of_view()
    if type(self.device) is tuple:  # sharded: each shard's memory takes its part of the value (engine/multi.py)
      if not is_realized_multi(self.uop): self.realize()
      nodes = set(x.uop.toposort())
      # the value reads the target other than elementwise (x.assign(x.T)): computed into memory of its own first
      if any(s in nodes for s in self.uop.src) and any(n.op in GroupOp.Movement or n.op is Ops.REDUCE for n in nodes if n not in self.uop.src):
        x = x.contiguous()
      self.uop = UOp(Ops.STORE, self.dtype, (self.uop, x.uop))
      return self
    # a lazy target gets memory of its own (not shared with a tensor that happens to have the same graph)
    if not buffer_view(self.uop): self.uop = self.contiguous().realize().uop
    value = x.uop
    if _reads_buffer_differently(value, self.uop): value = x.contiguous().uop
    if storage:  # nothing to fuse a write into on a device without kernels: its bytes go in now
      from tinyhybrid.engine.storage import check_assign
      check_assign(self.device, self.uop, value)
      self.uop = UOp(Ops.STORE, self.dtype, (self.uop, value))
      return self.realize()
    self.uop = UOp(Ops.STORE, self.dtype, (self.uop, value))
    if contiguous_buffer(self.uop.src[0]) is None: _view_writes.append(self)
    return self

  def _compute_base_of_view(self) -> None:
    """A write through a view of a value still to be computed, a contiguous() or a sharded tensor's shards, lands in
    that value's memory, as in tinygrad: the tensors that hold the value are computed into memory first, and the view
    is then of that memory."""
    base = self.uop
    while base.op in GroupOp.Movement: base = base.src[0]
    if base.op is not Ops.CONTIGUOUS and (base.op is not Ops.MSTACK or is_realized_multi(base)): return
    if not (owners := [t for t in list(_all_tensors) if t.uop is base]): return
    Tensor.realize(*owners)
    self.uop = self.uop.substitute({base: owners[0].uop})

  def clone(self, device: str | None = None) -> Tensor:
    """A copy with its own memory (on `device` if given): lazy, as any op, and gradients flow through it."""
    moves = device is not None and Device.canonicalize(device) != self.device
    # memory has a type of its own: a weak value (Tensor(3.5)) commits to its strong type
    src = self if self.dtype not in dtypes.weaks else self.cast(strong_dtype(self.dtype))
    if moves: ret = src.to(device)
    elif self.device is None: ret = Tensor(_new_memory(src.uop), device=Device.canonicalize(device))  # memory needs a device
    else: ret = src._wrap(_new_memory(src.uop))
    # the gradient comes along (as in tinygrad); requires_grad only as an opt-out: the copy is not a leaf of its own
    if self.grad is not None: ret.grad = self.grad.clone(device)
    ret.requires_grad = False if self.requires_grad is False else None
    return ret

  def to(self, device: str | tuple[str, ...] | None) -> Tensor:
    """This tensor on another device (the same tensor when it is already there): lazy, a COPY node that a copy command
    on the destination's queue carries out when it is realized (or, between CPU:N devices, that a kernel reads in
    place), and that gradients flow back through; to a tuple of devices, a replica on each (shard with axis None). A
    sharded tensor is gathered, lazily too (on the destination when it is one of its devices, else on the first one
    and copied from there)."""
    dev = Device.canonicalize(device)
    if dev == self.device: return self
    if type(dev) is tuple: return self.shard(dev)
    if type(self.device) is tuple and any(type(d) is not int for d in self.shape):
      out = Tensor(self.numpy(), device=dev, dtype=self.dtype)
    elif type(self.device) is tuple:
      devs = self.device
      i = devs.index(dev) if dev in devs else 0
      out = self._wrap(select_shard(self.uop, devs, i, None))
      out.device = devs[i]
      out = out.to(dev)
    elif self.device is None: out = Tensor(self.uop, device=dev)  # a constant without a device is made where it is used
    elif all(type(d) is int for d in self.shape):
      out = self._wrap(copy_to(self.uop, dev))
      out.device = dev
    else:  # a symbolic shape: its memory (laid out in the shape's largest value) copied now
      from tinyhybrid.engine.multi import copy_buffer
      out = Tensor.empty(self.shape, dtype=self.dtype, device=dev)
      if prod(max_shape(self.shape)): copy_buffer(base_buffer(out.uop).arg, base_buffer(self.contiguous().realize().uop).arg)
    out.requires_grad = self.requires_grad
    return out

  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor split across devices along axis (equal consecutive pieces), or with axis None a replica on each
    (tinygrad's multi-device tensor: its device is the tuple of devices)."""
    if type(self.device) is tuple: raise RuntimeError(f"shard: the tensor is already sharded across {self.device}")
    if not isinstance(devices, (tuple, list)): raise TypeError(f"shard: devices is a tuple of device names, not {type(devices).__name__}")
    devs = Device.canonicalize(tuple(devices))
    if len(set(devs)) != len(devs): raise ValueError(f"shard: a device is listed twice in {devs}")
    if axis is not None:
      axis = self._resolve_dim(axis)
      check_shardable(self.shape, axis, len(devs))
      size = self.shape[axis]
      parts = [self.uop if size == hi - lo else self.shrink(tuple((lo, hi) if i == axis else None for i in range(self.ndim))).uop
               for lo, hi in shard_bounds(size, len(devs))]
    else: parts = [self.uop] * len(devs)
    u = UOp(Ops.MSTACK, self.dtype, tuple(copy_to(p, d) for p, d in zip(parts, devs)), (devs, axis))
    out = Tensor.__new__(Tensor)
    out.uop, out.device, out.grad, out.requires_grad = u, devs, None, self.requires_grad
    shape_of(u)
    _all_tensors.add(out)
    return out

  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """Shards this tensor in place (see shard)."""
    s = self.shard(devices, axis)
    self.uop, self.device = s.uop, s.device
    return self

  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor sharded as y is (a plain tensor for a plain y)."""
    if type(y.device) is not tuple: return self.to(y.device)
    if (self.device, self.uop.axis) == (y.device, y.uop.axis): return self
    return self.shard(y.device, y.uop.axis)

  def replace(self, x: Tensor) -> Tensor:
    """Makes this tensor the value of x (same shape), without a copy: x's dtype and device (or devices) too."""
    if x.shape != self.shape: raise ValueError(f"replace: shape {x.shape} does not match {self.shape}")
    self.uop, self.device = x.uop, x.device
    return self

  def to_(self, device: str | None) -> Tensor:
    """Moves this tensor to device in place."""
    moved = self.to(device)
    self.uop, self.device = moved.uop, moved.device
    return self

  def sequential(self, layers: list) -> Tensor:
    """Applies each callable in turn."""
    out = self
    for f in layers: out = f(out)
    return out

  def contiguous_backward(self) -> Tensor: return self._wrap(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)))

  def __iadd__(self, x: Any) -> Tensor: return self.assign(self + x)
  def __isub__(self, x: Any) -> Tensor: return self.assign(self - x)
  def __imul__(self, x: Any) -> Tensor: return self.assign(self * x)
  def __itruediv__(self, x: Any) -> Tensor: return self.assign(self / x)

  def detach(self) -> Tensor: return self._wrap(UOp(Ops.DETACH, self.dtype, (self.uop,)))

  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    return self

  # tinygrad's name for "not opted out of gradients": an optimizer's params are the tensors with is_param (the others
  # are buffers it only realizes). Here it is requires_grad is not False: is_param_(False) opts out, True opts back in.
  @property
  def is_param(self) -> bool: return self.requires_grad is not False
  @is_param.setter
  def is_param(self, v: bool) -> None:
    if not v: self.requires_grad = False
    elif self.requires_grad is False: self.requires_grad = None
  def is_param_(self, is_param: bool = True) -> Tensor:
    self.is_param = is_param
    return self

  def contiguous(self) -> Tensor:
    if contiguous_buffer(self.uop) is not None: return self
    if self.uop.op is Ops.MSTACK and all(contiguous_buffer(s) is not None for s in self.uop.src): return self
    return self._wrap(_new_memory(self.uop))

  def _buffer(self) -> Buffer:
    u = self.uop
    if self.device is None or not self.dtype._is_float or u.op is Ops.STORE or buffer_view(u) or not _computes_from_memory(u):
      self.realize()
    else:
      # a lazy float result is read without cutting its graph (as in tinygrad): a backward() after .numpy() still
      # reaches the tensors it was computed from. The AFTER node reads the computed buffer, so it runs once
      c = self.contiguous().realize()
      if self.uop is u: self.uop = UOp(Ops.AFTER, self.dtype, (c.uop, u))
      return contiguous_buffer(c.uop)  # type: ignore[return-value]
    if (buf := contiguous_buffer(self.uop)) is None: buf = contiguous_buffer(self.contiguous().realize().uop)
    return buf  # type: ignore[return-value]

  def numpy(self) -> np.ndarray:
    """The values as a numpy array (a copy)."""
    if any(type(d) is not int for d in self.shape):
      raise ValueError(f"numpy: shape {self.shape} is symbolic; shrink or reshape it to ints first (t[:n], t.reshape(n))")
    if self.dtype in dtypes.weaks: return self.cast(strong_dtype(self.dtype)).numpy()  # (its storage's type; self stays weak)
    if 0 in self.shape: return np.zeros(self.shape, dtype=_np_out_dtype(self.dtype))
    engine.check_not_capturing("numpy")  # .item(), .tolist() and .data() read through here too
    if type(self.device) is tuple:  # sharded: the shards gathered (one replica's, for a replicated tensor)
      self.realize()
      devs, axis = self.uop.arg
      shards = [Tensor(s, device=d).numpy() for s, d in zip(self.uop.src, devs)]
      return shards[0] if axis is None else np.concatenate(shards, axis=axis)
    out = self._buffer().numpy()
    if self.dtype is dtypes.bfloat16: out = (out.astype(np.uint32) << 16).view(np.float32)
    if self.dtype in dtypes.fp8s: out = fp8_decode(out, self.dtype)  # float32 values, as tinygrad's
    return out.reshape(self.shape)

  def data(self) -> memoryview:
    """The values as a memoryview with this tensor's shape."""
    arr = self.numpy()
    if not arr.flags.c_contiguous: arr = arr.copy()  # (np.ascontiguousarray would make a 0-d array 1-d)
    if not self.shape: return memoryview(arr)  # type: ignore[arg-type]  # an ndarray is a buffer
    if 0 in self.shape: return memoryview(arr.reshape(-1))  # type: ignore[arg-type]  # no items: flat, as in tinygrad
    return memoryview(arr.reshape(-1).view(np.uint8)).cast(arr.dtype.char, self.shape)  # type: ignore[arg-type, return-value]  # bytes to items

  def tolist(self) -> Any: return self.numpy().tolist()

  def item(self) -> ConstType:
    if self.numel() != 1: raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return self.numpy().reshape(()).item()

  def _resolve_dim(self, dim: int, extra: bool = False) -> int:
    total = self.ndim + int(extra)
    if not -max(1, total) <= dim < max(1, total):
      raise IndexError(f"dimension {dim} is out of range for a tensor of shape {self.shape}")
    return dim + total if dim < 0 else dim

  # ** functions (function.py): a body over placeholders, called on tensors **
  def as_param(self, slot: int) -> Tensor:
    """A placeholder for a tensor like this one (dtype, shape, device, sharding) as argument `slot` of a body."""
    return Tensor(UOp.param(slot, self.dtype, self.shape, self.device, axis=self.uop.axis if type(self.device) is tuple else None))

  def call(self, *lst: Tensor, fxn: Tensor | UOp, grad_fxn: Callable | None = None) -> Tensor:
    """fxn, a body over placeholders (UOp.param, as_param), on (self, *lst): placeholder i reads argument i.
    grad_fxn(grad, call) -> one gradient per argument (call.src[1:]) stands in for the chain rule through the body."""
    from tinyhybrid.function import call
    return call(fxn.uop if isinstance(fxn, Tensor) else fxn, (self, *lst), grad_fxn)

  def custom_kernel(self, *lst: Tensor, fxn: Callable, grad_fxn: Callable | None = None) -> list[Tensor]:
    """Runs a kernel written in tinygrad's kernel DSL (UOp.range, indexed placeholders, store, set/after, end; see
    function.custom_kernel) on (self, *lst) and returns them as the kernel left them."""
    from tinyhybrid.function import custom_kernel
    return custom_kernel((self, *lst), fxn, grad_fxn)

  def callify(self, *lst: Tensor) -> Tensor:
    """tinygrad scopes these tensors' graph as one call; here every realize already schedules a graph as a unit, so
    the tensors are left as they are (their values are the same either way)."""
    return self

  # ** the schedule API (engine/realize.py): planning apart from running **
  def linear_with_vars(self, *lst: Tensor) -> tuple[engine.Linear, dict[str, int]]:
    """The plan that realizes these tensors (its .src: one item per kernel) and its bound Variables' values by name
    (tinygrad's Tensor.linear_with_vars); engine.realize.run_linear runs it, and the tensors then read their results.
    Sharded tensors, and graphs that copy between devices, are planned when the plan runs (Linear.across)."""
    tensors, across = [self, *lst], [t for t in (self, *lst) if type(t.device) is tuple]
    linear = engine.Linear(_plan_with_writes([t for t in tensors if type(t.device) is not tuple], across=across))
    if across: linear.across.append(functools.partial(_realize, across))
    return linear, {v.arg[0]: val for st in linear.steps for v, val in st.var_vals.items()}

  def schedule_linear(self, *lst: Tensor) -> engine.Linear:
    """linear_with_vars for tensors without bound Variables: the plan alone."""
    linear, var_vals = self.linear_with_vars(*lst)
    if var_vals: raise AssertionError(f"schedule_linear: the graph has bound Variables {sorted(var_vals)}; use linear_with_vars")
    return linear


_CONST_GRAPH = {Ops.CONST, Ops.CAST, *GroupOp.ALU}


def _computes_from_memory(u: UOp) -> bool:
  return any(n.op is Ops.BUFFER for n in u.toposort())  # BUFFERs are leaves: a graph that has one meets it early


# ** realize: engine/realize.py plans and runs UOp graphs and hands back what they became; the live tensors follow here **

def _committed(u: UOp) -> UOp:
  """A weak-typed value as the type it commits to (a constant stays a constant)."""
  return UOp.const(strong_dtype(u.dtype), u.arg) if u.op is Ops.CONST else u.cast(strong_dtype(u.dtype))


def _realize(tensors: list[Tensor]) -> None:
  """Realizing is planning, then running. Sharded tensors (a tuple of devices) go through engine/multi.py, which
  realizes their shards here."""
  for t in tensors:  # weakness ends where storage begins: a weak value is stored as the type it commits to
    if t.dtype in dtypes.weaks: t.uop = _committed(t.uop)
  if any(type(t.device) is tuple for t in tensors):
    realize_sharded([t for t in tensors if type(t.device) is tuple])
    tensors = [t for t in tensors if type(t.device) is not tuple]
  for st in _plan_with_writes(tensors): engine.run_step(st)


def _plan_with_writes(tensors: list[Tensor], across: list[Tensor] | None = None) -> list[engine.Step]:
  """_plan, once the writes made with UOps that the tensors' graphs read are assigns (_as_assigns)."""
  for t in tensors:
    if t.uop.op is Ops.AFTER: _as_assigns(t.uop)  # (at the root a realized view hides it from planning)
  while True:
    try: return _plan(tensors, across=across)
    except engine.UnrunWrites as e:  # deeper in a graph than its root
      if not _as_assigns(e.after): raise


def _as_assigns(after: UOp) -> bool:
  """Makes the writes of a graph written with UOps (tinygrad's `t.uop.after(t.uop.store(v))`: an AFTER of memory and
  the void STOREs to make first, which may write other memory and nest as AFTERs of views) the assigns they are, in
  order, in every live tensor's graph: a write to the AFTER's own memory becomes its assign node (that memory after
  the write), a write through a view is pending on that memory (read after it, as every view write), and a write to
  other memory runs now. Whether there were any. (Our own AFTERs, a realized view with the graph that computed it,
  have no STORE among their sources.)"""
  writes: list[UOp] = []
  nest: list[UOp] = []
  def collect(u: UOp) -> bool:
    found = False
    for dep in u.src[1:]:
      if dep.op is Ops.STORE and dep.dtype is dtypes.void: writes.append(dep)
      elif not (dep.op is Ops.AFTER and collect(dep)): continue
      found = True
    if found: nest.append(u)
    return found
  if not collect(after): return False
  memory = after.src[0]
  made: dict[UOp, UOp] = {}
  if not buffer_view(memory):  # writes into a value still to be computed (Tensor.zeros(16)): into its memory, made now
    made[memory] = Tensor(memory).contiguous().realize().uop
    for t in list(_all_tensors):
      if t.uop is memory: t.uop = made[memory]
    writes, memory = [st.substitute(made) for st in writes], made[memory]
  targets: dict[UOp, Tensor] = {}  # a second write to the same memory assigns after the first (which then runs)
  for st in writes:
    target, value = st.src
    t = targets.setdefault(target, Tensor(target))
    t.assign(Tensor(value, device=target.device))
  own = targets.pop(memory, None)
  _apply_becomes({u: own.uop if own is not None and u is after else u.src[0].substitute(made) if made else u.src[0] for u in nest})
  for t in targets.values():  # (a write through a view waits on its memory; one to DISK has run already)
    if t.uop.op is Ops.STORE and contiguous_buffer(t.uop.src[0]) is not None: t.realize()
  return True


def _realize_graphs(graphs: list[UOp], devices: list[str], contiguous: bool) -> list[UOp]:
  """engine/multi.py's way to realize graphs, each on its device: their realized views (contiguous: in memory of
  their own)."""
  ts = [Tensor(g, device=d) for g, d in zip(graphs, devices)]
  if contiguous: ts = [t.contiguous() for t in ts]
  _realize([t for t in ts if not buffer_view(t.uop)])
  return [t.uop.src[0] if t.uop.op is Ops.AFTER else t.uop for t in ts]  # (the views, without autograd's history)


def realize_sharded(tensors: Sequence[Tensor]) -> None:
  """Realizes tensors sharded across devices (engine/multi.py, which works on graphs): every tensor whose graph holds
  them then reads the MSTACK of their realized shards. Realizing each device's graphs is handed to it from here."""
  from tinyhybrid.engine.multi import realize_multi
  groups: dict[tuple[str, ...], list[Tensor]] = {}
  for t in tensors:
    if not is_realized_multi(t.uop): groups.setdefault(multi_devices(t.uop) or t.device, []).append(t)  # type: ignore[arg-type]
  for devices, ts in groups.items():
    roots = [t.uop for t in ts]
    new = realize_multi(roots, devices, _realize_graphs)
    # realizing the shards may have rewritten these tensors' graphs (a realized node inside them): both forms become it
    _apply_becomes({**dict(zip(roots, new)), **{t.uop: m for t, m in zip(ts, new)}})


def _moves_data(nodes: list[UOp]) -> bool:
  """Whether single-device graphs (their nodes, as planning walked them) read values from other devices (COPY nodes,
  or shards of sharded values: MSELECT)."""
  return any(u.op is Ops.COPY or u.op is Ops.MSELECT for u in nodes)


def _realize_across(tensors: list[Tensor]) -> None:
  """Realizes single-device tensors whose graphs read other devices' values (engine/multi.py: the copies run first).
  A realized tensor that one wanting gradients is computed from keeps its graph under its buffer (AFTER)."""
  from tinyhybrid.engine.multi import realize_across
  roots = [t.uop for t in tensors]
  views = realize_across(roots, [t.device for t in tensors], _realize_graphs)
  history = _keeps_history(UOp.sink(*roots).toposort())
  becomes = {r: UOp(Ops.AFTER, r.dtype, (v, r)) if history and strip_reshapes(r).op is not Ops.STORE else v for r, v in zip(roots, views)}
  # realizing the copies' sources may have rewritten these tensors' graphs (a realized node inside them): both forms
  _apply_becomes({**becomes, **{t.uop: becomes[r] for t, r in zip(tensors, roots)}})


def _keeps_history(nodes: Iterable[UOp]) -> bool:
  """Whether a result computed from these nodes keeps its graph for backward (AFTER): one of them, or one in the
  history of a realized value among them, is a tensor that wants gradients."""
  if not (wants := {t.uop for t in list(_all_tensors) if t.requires_grad}): return False
  nodes = list(nodes)
  return any(u in wants for u in nodes) or any(u in wants for a in nodes if a.op is Ops.AFTER for u in a.src[1].toposort())


def _plan(tensors: list[Tensor], view_writes: bool = True, across: list[Tensor] | None = None) -> list[engine.Step]:
  """Each device's step that realizes these tensors (engine.prepare, then engine.bind); its first run points them at
  their results. Pending writes the graphs read (unless view_writes is off: running one of them), and lazy tensors
  that must see a buffer before this plan writes it, are run first. Tensors whose graphs read other devices' values
  are realized here and now (_realize_across), or, given a list `across`, added to it for the caller to realize."""
  if view_writes: _run_view_writes(tensors)
  by_device: dict[str, list[Tensor]] = {}
  for t in tensors:
    if not buffer_view(t.uop): by_device.setdefault(t.device, []).append(t)
  steps: list[engine.Step] = []
  for device, ts in by_device.items():
    if is_storage(device):  # DISK: views and copies, done here and now (engine/storage.py)
      from tinyhybrid.engine.storage import realize_on_storage
      _apply_becomes(realize_on_storage(device, [t.uop for t in ts], _realize_graphs))
      continue
    # a constant (a graph that reads no buffer) is computed per tensor, as in tinygrad: two Tensor.zeros(2) realized
    # are two buffers, and a lazy tensor built the same way is handed neither (an assign to one would change it)
    consts = {u for u in {t.uop for t in ts} if not _computes_from_memory(u)}
    scalars = [t for t in ts if t.uop.op is Ops.CONST and not t.uop.src] if consts else []
    seen: set[UOp] = set()
    for t in ts:
      if t.uop in consts and t.uop in seen: t.uop = _new_memory(t.uop)
      seen.add(t.uop)
    p = engine.prepare(device, [t.uop for t in ts])
    # a graph that reads other devices' values is never compiled as it is (its copies run first), so only a graph
    # without a plan yet is looked through for them
    if p.cs is None and _moves_data(p.nodes):
      if across is None: _realize_across(ts)
      else: across.extend(ts)
      continue
    # lazy tensors that read a buffer this schedule assigns to must see the old values (a write through a view is
    # seen by every tensor on its memory instead, as in tinygrad). Those on this device join the schedule, which runs
    # every read of a buffer before the write (reads_before_writes), so work they share with it (the forward pass
    # that both a step's gradients and its BatchNorm statistics read) is done once; the rest are computed first
    if written := p.written():
      mine = set(map(id, ts))
      if readers := _readers_of(written, [t for t in _all_tensors if id(t) not in mine and not buffer_view(t.uop)]):
        own = {u for u in p.nodes if u.op is Ops.STORE}
        near = [t for t in readers if t.device == device and not _assigns_into(t.uop, written, own)]
        joined = engine.prepare(device, [t.uop for t in ts + near], p.var_vals) if near else p
        if joined.cs is None and _moves_data(joined.nodes): near, joined = [], p
        if far := [t for t in readers if all(t is not n for n in near)]: _realize(far)
        ts = ts + near
        p = engine.prepare(device, [t.uop for t in ts], p.var_vals) if far else joined
    # a live tensor made .contiguous() that this graph computes gets its memory here anyway: it is realized with the
    # rest, as in tinygrad (a later graph over it reads that memory instead of computing it again). A cached plan
    # knows whether its graph has such a node at all
    if p.contiguous_inside and (inner := _live_contiguous(p.nodes, p.roots, _all_tensors)):
      ts = ts + inner
      p = engine.prepare(device, [t.uop for t in ts], p.var_vals)
    steps.append(engine.bind(p, functools.partial(_point_at_results, ts, consts, scalars)))
  return steps


def _point_at_results(tensors: list[Tensor], consts: set[UOp], scalars: list[Tensor], st: engine.Step) -> None:
  """After a step's first run: the tensors it realized (and every live tensor whose graph holds them) read its
  buffers; a realized graph that a tensor wanting gradients is computed from stays reachable under them (AFTER)."""
  becomes = engine.results(st, history=_keeps_history(st.nodes))
  own = {id(t): becomes.pop(t.uop) for t in tensors if t.uop in consts and t.uop in becomes}
  _apply_becomes(becomes)
  for t in tensors:
    if id(t) in own: t.uop = own[id(t)]
  for t in scalars:
    if (buf := contiguous_buffer(t.uop)) is not None: engine.scalar_buffers.add(buf)  # type: ignore[arg-type]


def _apply_becomes(becomes: dict[UOp, UOp]) -> None:
  """Points every live tensor whose graph holds a realized node at that node's buffer instead."""
  if not becomes: return
  lazy: list[Tensor] = []
  for t in list(_all_tensors):
    if t.uop in becomes: t.uop = becomes[t.uop]
    elif not buffer_view(t.uop): lazy.append(t)
  # one substitution over all their graphs: they share most nodes (a model's parameters, gradients and optimizer
  # state), and each node is then rewritten once, not once per tensor that reaches it
  if lazy:
    for t, u in zip(lazy, UOp.sink(*[t.uop for t in lazy]).substitute(becomes).src): t.uop = u


def _run_view_writes(tensors: list[Tensor]) -> None:
  """Runs the pending assigns through views (_view_writes) into buffers these tensors read, and those into buffers
  that such an assign's value reads (an older one, which it sees), oldest first. A view write has no readers to
  compute first (every tensor on its memory sees it), so running one runs nothing else."""
  if not _view_writes: return
  _view_writes[:] = [w for w in _view_writes if w.uop.op is Ops.STORE]  # the ones realized since are done
  pending = [w for w in _view_writes if all(w is not t for t in tensors)]
  if not pending: return
  def reads_of(us: list[UOp]) -> set[int]: return {id(u.arg) for u in UOp.sink(*us).toposort() if u.op is Ops.BUFFER}
  needed, run = reads_of([t.uop for t in tensors]), []
  for w in reversed(pending):  # newest first: a write's value sees only the writes made before it
    if id(base_buffer(w.uop.src[0]).arg) in needed:
      run.append(w)
      needed |= reads_of([w.uop.src[1]])
  # a value computed into memory (.contiguous()) that several of these writes read, as each layer's KV-cache write
  # and the next layer's input do, is kept as a live tensor meanwhile: the first write to compute it hands its memory
  # to the later ones (_live_contiguous), which would otherwise compute it again
  kept = [Tensor(u, device=w.device) for w in run for u in postorder(w.uop.src[1], _computed_sources) if u.op is Ops.CONTIGUOUS]
  for w in reversed(run):
    if w.uop.op is not Ops.STORE: continue  # (one may be listed twice)
    # out of the list while it runs: a write whose value comes from another device is realized through
    # _realize_across, which plans again and would find it pending
    _view_writes[:] = [x for x in _view_writes if x is not w]
    for st in _plan([w], view_writes=False): engine.run_step(st)
  kept.clear()


def _computed_sources(u: UOp) -> tuple[UOp, ...]: return () if u.op is Ops.AFTER or u.op is Ops.BUFFER else u.src  # realized: history


def _live_contiguous(nodes: list[UOp], roots: list[UOp], live: Iterable[Tensor]) -> list[Tensor]:
  """One live tensor per CONTIGUOUS node the roots compute (not one only in a realized tensor's autograd history)."""
  conts = {u for u in nodes if u.op is Ops.CONTIGUOUS}.difference(roots)
  if not conts: return []
  found: dict[UOp, Tensor] = {}
  for t in live:
    if t.uop in conts: found.setdefault(t.uop, t)
  if not found: return []
  computed: set[UOp] = set()
  stack, seen = list(roots), set(roots)
  while stack:
    u = stack.pop()
    if u in found: computed.add(u)
    if u.op is Ops.AFTER or u.op is Ops.BUFFER: continue  # realized: its sources are history
    for s in u.src:
      if s not in seen:
        seen.add(s)
        stack.append(s)
  return [t for u, t in found.items() if u in computed]


def _readers_of(written: set[int], candidates: list[Tensor]) -> list[Tensor]:
  """The candidates whose lazy graph reads one of the written buffers, found in one walk over all their graphs. A
  pending assign into another buffer reads through its value (BatchNorm's running statistics, from the weights); one
  into a written buffer is part of that write, and one into shards (engine/multi.py) is realized with them."""
  if not candidates: return []
  reads: set[UOp] = set()
  for u in UOp.sink(*[t.uop for t in candidates]).toposort():
    if u.op is Ops.STORE:
      target = view_base(u.src[0])
      if target.op is Ops.BUFFER and id(target.arg) not in written and any(s in reads for s in u.src[1:]): reads.add(u)
    elif (u.op is Ops.BUFFER and id(u.arg) in written) or any(s in reads for s in u.src): reads.add(u)
  return [t for t in candidates if t.uop in reads]


def _bitcast_of_memory(u: UOp) -> bool:
  """Whether u is a bitcast (or a chain of them) of memory to types of the same size: a view of that memory."""
  return u.op is Ops.BITCAST and u.src[0].dtype.itemsize == u.dtype.itemsize and (buffer_view(u.src[0]) or _bitcast_of_memory(u.src[0]))


def _assigns_into(u: UOp, written: set[int], own: set[UOp]) -> bool:
  """Whether u's graph holds an assign into one of the written buffers other than the schedule's own ones (a reader
  that holds the same assign can share the schedule: its reads of the old contents are ordered before the write)."""
  return any(x.op is Ops.STORE and x not in own and (t := view_base(x.src[0])).op is Ops.BUFFER and id(t.arg) in written for x in u.toposort())


def _reads_buffer_differently(value: UOp, target: UOp) -> bool:
  """Whether value reads the target's buffer other than elementwise through the target itself; then it is computed
  into its own buffer before the write. Each value read at the index it is written to is safe in place (`x += 1`, an
  optimizer's update); a view of the target, or another view of its buffer, may read what the kernel already wrote."""
  base = base_buffer(target)
  nodes = list(value.toposort())
  if base not in nodes: return False
  return any((target in u.src and u.op in GroupOp.Movement) or (base in u.src and u is not target and target is not base) for u in nodes)


def _np_out_dtype(dt: DType) -> np.dtype: return np.dtype(np.float32) if dt is dtypes.bfloat16 or dt in dtypes.fp8s else np_storage(dt)


uop_api.install(UOp, Tensor)
