"""tinygrad's kernel DSL on UOps: a kernel written by hand as loops (UOp.range), indexed placeholders (UOp.placeholder,
`C[i, j]`), stores, accumulators (`.set`, `.after`) and ends, for Tensor.custom_kernel. These methods only build the
graph; codegen/custom.py turns a finished kernel into this project's kernel IR."""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from tinyhybrid.dtype import DType, dtypes
from tinyhybrid.helpers import prod
from tinyhybrid.uop import AddrSpace, AxisType, Ops

if TYPE_CHECKING:
  from tinyhybrid.uop.ops import UOp

_INDEXABLE = (Ops.PARAM, Ops.RESHAPE, Ops.AFTER)


class KernelDSL:
  """The DSL's methods, mixed into UOp."""
  __slots__ = ()

  @staticmethod
  def range(end: int | UOp, axis_id: int, axis_type: AxisType = AxisType.LOOP, dtype: DType = dtypes.weakint) -> UOp:
    """A loop from 0 to end (exclusive): its value is the index. axis_type: LOOP, REDUCE (an accumulator's loop) or
    UPCAST (unrolled, for contract)."""
    from tinyhybrid.uop.ops import UOp
    return UOp(Ops.RANGE, dtypes.weakint, (UOp.const(dtypes.weakint, end) if isinstance(end, int) else end,),
               (axis_id, AxisType.LOOP if axis_type is AxisType.WEAK else axis_type))

  @staticmethod
  def placeholder(shape: tuple[int, ...], dtype: DType, slot: int, addrspace: AddrSpace = AddrSpace.GLOBAL, device: str | None = None) -> UOp:
    """A kernel's argument `slot` (GLOBAL: Tensor.custom_kernel's tensor of that position), or with REG a
    register array of the kernel's own (its slot numbers it among the registers)."""
    from tinyhybrid.uop.ops import ParamArg, UOp
    return UOp(Ops.PARAM, dtype, (), ParamArg(slot, tuple(shape), device or "", addrspace=addrspace))

  def sink(*srcs: UOp | None, arg: Any = None) -> UOp:  # type: ignore[misc]  # (a method on one node, or UOp.sink(*nodes))
    from tinyhybrid.uop.ops import UOp
    return UOp(Ops.SINK, dtypes.void, tuple(s for s in srcs if s is not None), arg)

  @staticmethod
  def group(*srcs: UOp | None) -> UOp:
    from tinyhybrid.uop.ops import UOp
    live = tuple(s for s in srcs if s is not None)
    return live[0] if len(live) == 1 else UOp(Ops.GROUP, dtypes.void, live)

  def _tensor_node(self: Any) -> bool:
    """Whether this is a tensor's graph node rather than the DSL's (a placeholder, its views and states): such a node
    is reshaped and indexed as its Tensor is, through the Tensor API mixin/uop_api.py gives UOps (`_tensor_api`)."""
    base = self
    while base.op in (*_INDEXABLE, Ops.INDEX) and base.op is not Ops.PARAM: base = base.src[0]
    return base.op is not Ops.PARAM and hasattr(self, "_tensor_api") and bool(self.shape or self.device is not None)

  def __getitem__(self: Any, idx: Any) -> UOp:
    """An element of a placeholder (or of its reshape, or of its state after some stores): INDEX(self, *indices).
    Trailing full slices (`src[i, :]`) leave a row to index further. A tensor's graph node is indexed as the Tensor
    is (`t.uop[1:3]`)."""
    from tinyhybrid.uop.ops import UOp
    if self._tensor_node(): return self._tensor_api("__getitem__", idx)
    if self.op not in (*_INDEXABLE, Ops.INDEX):
      raise TypeError(f"a {self.op} cannot be indexed: index a placeholder (UOp.placeholder) or a Tensor")
    idx = list(idx) if isinstance(idx, tuple) else [idx]
    while idx and isinstance(idx[-1], slice) and idx[-1] == slice(None): idx.pop()
    if any(isinstance(i, slice) for i in idx): raise TypeError("kernel indexing takes ints and ranges, and full slices at the end only")
    ids = tuple(UOp.const(dtypes.weakint, i) if isinstance(i, int) else i for i in idx)
    if self.op is Ops.INDEX: return UOp(Ops.INDEX, self.dtype, (*self.src, *ids))
    return UOp(Ops.INDEX, self.dtype, (self, *ids))

  def index(self: Any, *idx: Any) -> UOp:
    """An element of a contracted vector (STACK) by its lane, or INDEX as self[idx]."""
    if self.op is Ops.STACK and len(idx) == 1 and isinstance(idx[0], int): return self.src[idx[0]]
    return self[idx]

  def load(self: Any) -> UOp:
    """The element's value (tinygrad's explicit load): an element read as a value is loaded already."""
    if self.op is not Ops.INDEX: raise TypeError(f"load: only an element (a placeholder indexed) is loaded, not a {self.op}")
    return self

  def store(self: Any, value: Any) -> UOp:
    from tinyhybrid.uop.ops import UOp
    return UOp(Ops.STORE, dtypes.void, (self, value if isinstance(value, UOp) else UOp.const(self.dtype, value)))

  def end(self: Any, *ranges: UOp) -> UOp:
    """The loops `ranges` close after self (a store, or a state)."""
    from tinyhybrid.uop.ops import UOp
    return UOp(Ops.END, dtypes.void, (self, *ranges)) if ranges else self

  def after(self: Any, *deps: UOp) -> UOp:
    """self (a placeholder's memory) as it is after deps: stores, or, inside a loop, the loop's previous iterations."""
    from tinyhybrid.uop.ops import UOp
    return UOp(Ops.AFTER, self.dtype, (self, *deps)) if deps else self

  def set(self: Any, value: Any, end: Any = ()) -> UOp:
    """Stores value at this element (in the loops `end`, which then close) and gives the memory after the store."""
    return self.src[0].after(self.store(value).end(*(end if isinstance(end, (tuple, list)) else (end,))))

  def contract(self: Any, *ranges: UOp) -> UOp:
    """The value at every index of the UPCAST ranges, as one vector (STACK), lanes in row-major order."""
    from tinyhybrid.uop.ops import UOp
    if not all(r.arg[1] is AxisType.UPCAST for r in ranges): raise ValueError("contract: every range must be an UPCAST range")
    sizes = [int(r.src[0].arg) for r in ranges]
    lanes = [self.substitute({r: UOp.const(dtypes.weakint, i) for r, i in zip(ranges, at)}) for at in itertools.product(*map(range, sizes))]
    return UOp(Ops.STACK, self.dtype, tuple(lanes))

  def reshape(self: Any, *shape: Any) -> UOp:
    """A placeholder's elements as another shape (a tensor's graph node is reshaped as its Tensor is)."""
    from tinyhybrid.uop.ops import UOp
    if self._tensor_node(): return self._tensor_api("reshape", *shape)
    new = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
    if self.op not in _INDEXABLE or prod(new) != prod(self.shape): raise ValueError(f"reshape: {self.shape} cannot become {new} here")
    return UOp(Ops.RESHAPE, self.dtype, (self,), new)

  def unshard(self: Any, axis: int) -> UOp:
    """A value on several devices, one piece each (MSTACK of the pieces), as one value split on `axis` across them."""
    from tinyhybrid.uop.ops import UOp
    if self.op is not Ops.MSTACK: raise ValueError(f"unshard: a {self.op} is not on several devices")
    return UOp(Ops.MSTACK, self.dtype, self.src, (self.arg[0], axis))

  def flatten(self: Any, start_dim: int = 0, end_dim: int = -1) -> UOp:
    if self._tensor_node(): return self._tensor_api("flatten", start_dim, end_dim)
    shape = self.shape or ()
    start, end = start_dim % max(len(shape), 1), end_dim % max(len(shape), 1)
    return self.reshape(shape[:start] + (prod(shape[start:end + 1]),) + shape[end + 1:])
  def numel(self: Any) -> int: return prod(self.shape)
