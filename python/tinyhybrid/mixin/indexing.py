"""Indexing: __getitem__, __setitem__, gather, scatter, masked ops.

Basic indices (ints, slices with any step, None, Ellipsis) become movement ops: a shrink to the bounding range, a
flip for negative steps, and for a step s > 1 a reshape into (n, s) groups that keeps the first of each group. Tensor
(advanced) indices are lazy and fuse: each one is compared with an arange of its dimension, the one-hot masks are
multiplied, and the masked values are summed over the indexed dimensions. Nothing is read back to the host, so an
index tensor's out-of-range values select zero (as in tinygrad); concrete Python ints and lists are checked and raise
IndexError. Placement of the advanced-index dimensions follows torch/numpy: together where the indexed dimensions are
adjacent, first otherwise.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Literal, Sequence

import numpy as np

from tinyhybrid.device import is_storage
from tinyhybrid.dtype import dtypes, least_upper_dtype
from tinyhybrid.helpers import ceildiv, prod
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, bound_value, sint, ssimplify

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor


def _tuple(x: int | Sequence[int]) -> tuple[int, ...]: return (x,) if isinstance(x, int) else tuple(x)


# a parsed index entry: ("none",) | ("empty",) | ("int", i) | ("slice", lo, hi, step, count) | ("adv", Tensor)
# for a slice, [lo, hi) is the range of the dimension it reads and count the number of elements it keeps;
# "empty" is the size-0 new dimension a False index adds


def _symbolic_slice(it: slice, size: sint) -> tuple:
  """A slice where the dimension or the bounds are sints of bound Variables: step 1, a negative bound (an int, or a sint
that is negative for every value) counts from the end, checked at the bound values."""
  if it.step not in (None, 1): raise ValueError(f"a slice with a symbolic bound or dimension takes step 1, got {it}")
  def bound(x: Any, default: sint) -> sint:
    if x is None: return default
    if isinstance(x, UOp):
      if x.vmax < 0: return ssimplify(size + x)
      if x.vmin < 0: raise ValueError(f"slice {it}: the bound {x.render(simplify=False)} may be negative or not, depending on its variables")
      return x.ssimplify()
    try: i = operator.index(x)
    except TypeError: raise TypeError(f"slice indices must be ints, bound Variables or None, got {it}") from None
    return ssimplify(size + i) if i < 0 else i
  lo, hi = bound(it.start, 0), bound(it.stop, size)
  if not 0 <= bound_value(lo) <= bound_value(hi) <= bound_value(size):
    raise IndexError(f"slice {it} is out of range for a dimension of size {size} at the bound values")
  return ("slice", lo, hi, 1, ssimplify(hi - lo))


def _positions(n: sint, device: str) -> Tensor:
  """0 .. n-1 to compare index values with: int32, or int64 where a dimension has more elements than int32 counts."""
  from tinyhybrid.tensor import Tensor
  big = (n.vmax if isinstance(n, UOp) else n) > 2**31 - 1
  return Tensor(UOp(Ops.IOTA, dtypes.int64, (), n), device=device) if big else Tensor.arange(n, device=device, dtype=dtypes.int32)


def _as_tuple_index(indices: Any) -> bool:
  """A list index is a tuple of indices when it holds a sequence, Tensor, slice, None, Ellipsis or Variable (torch and
  tinygrad keep numpy's old rule): x[[[0, 1], [2, 3]]] is x[[0, 1], [2, 3]]; a list of ints (or bools) is one index."""
  from tinyhybrid.tensor import Tensor
  return isinstance(indices, list) and any(i is None or i is Ellipsis or isinstance(i, (list, tuple, slice, np.ndarray, Tensor, UOp))
                                           for i in indices)


class _BoolScalar:
  __slots__ = ("value",)
  def __init__(self, value: bool): self.value = value


class _Mask:
  __slots__ = ("t",)
  def __init__(self, t: Tensor): self.t = t


class IndexingMixin:
  __slots__ = ()

  # ** parsing **
  def _index_tensor(self: Tensor, index: Any, size: int) -> Tensor:
    """A list / ndarray / Tensor index as an int tensor on this device (concrete values are range-checked)."""
    from tinyhybrid.tensor import Tensor
    if isinstance(index, Tensor):
      if is_storage(self.device):
        raise NotImplementedError(f"{self.device} runs no kernels, so it cannot gather or scatter by tensor indices: move the tensor to a device first (.to('CPU'))")
      if index.device != self.device: raise RuntimeError(f"index on {index.device}, tensor on {self.device}")
      if index.dtype is dtypes.bool: raise IndexError("internal: bool index reached _index_tensor")
      if not index.dtype._is_int: raise IndexError(f"tensors used as indices must be int tensors, got {index.dtype}")
      if index.dtype.itemsize < 4: index = index.cast(dtypes.int32)  # room for index + size
      return index if index.dtype._is_unsigned else (index < 0).where(index + size, index)
    arr = np.asarray(index)
    if arr.size == 0: arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu": raise IndexError(f"index {index!r} must contain only ints, got dtype {arr.dtype}")
    if arr.size and (arr.min() < -size or arr.max() >= size):
      bad = arr[(arr < -size) | (arr >= size)].flat[0]
      raise IndexError(f"index {bad} is out of bounds for a dimension of size {size} (tensor of shape {self.shape})")
    arr = np.where(arr < 0, arr + size, arr).astype(np.int32 if size <= 2**31 - 1 else np.int64)
    return Tensor(arr, device=self.device)

  def _parse_indices(self: Tensor, indices: Any) -> list[tuple]:
    from tinyhybrid.tensor import Tensor
    items = list(indices) if isinstance(indices, tuple) or _as_tuple_index(indices) else [indices]
    # bool masks are indices into several dimensions: replace each by the int index tensors of its nonzero positions
    expanded: list[Any] = []
    for it in items:
      if isinstance(it, np.ndarray) and it.ndim == 0: it = it.item()  # a 0-d array indexes like its scalar
      if isinstance(it, (bool, np.bool_)): expanded.append(_BoolScalar(bool(it)))
      elif isinstance(it, Tensor) and it.dtype is dtypes.bool: expanded.append(_Mask(it))
      elif isinstance(it, (list, np.ndarray)) and (arr := np.asarray(it)).dtype == np.bool_ and arr.size:
        expanded.append(_Mask(Tensor(arr, device=self.device)))
      else: expanded.append(it)
    if sum(1 for it in expanded if it is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    def consumed(it: Any) -> int:
      if it is None or it is Ellipsis or isinstance(it, _BoolScalar): return 0
      return it.t.ndim if isinstance(it, _Mask) else 1
    n_real = sum(consumed(it) for it in expanded)
    if n_real > self.ndim:
      raise IndexError(f"too many indices for tensor of dimension {self.ndim}: {n_real} indices into shape {self.shape}")
    if any(it is Ellipsis for it in expanded):
      at = next(i for i, it in enumerate(expanded) if it is Ellipsis)
      expanded[at:at + 1] = [slice(None)] * (self.ndim - n_real)
    else: expanded += [slice(None)] * (self.ndim - n_real)
    parts: list[tuple] = []
    dim = 0
    for it in expanded:
      if it is None: parts.append(("none",)); continue
      if isinstance(it, _BoolScalar): parts.append(("none",) if it.value else ("empty",)); continue
      if isinstance(it, _Mask):
        mask: Tensor = it.t
        if mask.ndim == 0:  # a 0-d mask works like a Python bool (its value is read back)
          parts.append(("none",) if mask.item() else ("empty",)); continue
        want = self.shape[dim:dim + mask.ndim]
        if mask.shape != want:
          raise IndexError(f"the shape of the mask {mask.shape} does not match the shape {want} of the indexed tensor "
                           f"{self.shape} at dimension {dim}")
        # the mask's True positions (their count is read back: the result's shape depends on it)
        nz = mask.nonzero()
        for k in range(mask.ndim): parts.append(("adv", nz[:, k]))
        dim += mask.ndim
        continue
      size = self.shape[dim]
      if isinstance(it, slice) and (isinstance(size, UOp) or isinstance(it.start, UOp) or isinstance(it.stop, UOp)):
        parts.append(_symbolic_slice(it, size))
      elif isinstance(it, slice):
        try: start, stop, step = (None if s is None else operator.index(s) for s in (it.start, it.stop, it.step))
        except TypeError: raise TypeError(f"slice indices must be ints or None, got {it}") from None
        if step == 0: raise ValueError(f"slice step cannot be zero: {it}")
        start, stop, step = slice(start, stop, step).indices(size)
        count = len(range(start, stop, step))
        if count == 0: parts.append(("slice", 0, 0, 1, 0))
        elif step > 0: parts.append(("slice", start, start + (count - 1) * step + 1, step, count))
        else: parts.append(("slice", start + (count - 1) * step, start + 1, step, count))
      elif isinstance(it, (Tensor, list, np.ndarray)): parts.append(("adv", self._index_tensor(it, size)))
      elif isinstance(it, tuple): parts.append(("adv", self._index_tensor(list(it), size)))
      elif isinstance(it, UOp):  # a bound Variable (or an expression of them) picks one position, like an int
        if not (it.dtype._is_int or it.dtype is dtypes.weakint):
          raise IndexError(f"a UOp index must be an int expression, got {it.dtype}")
        if it.vmin >= size or it.vmax < -size:
          raise IndexError(f"index {it.render(simplify=False)} is out of bounds for dimension {dim} with size {size} (tensor of shape {self.shape})")
        if it.vmax < 0: it = ssimplify(it + size)
        elif it.vmin < 0: raise IndexError(f"index {it.render(simplify=False)} may be negative or not, depending on its variables")
        parts.append(("int", it))
      else:
        try: i = operator.index(it)
        except TypeError:
          raise IndexError(f"only ints, slices, None, Ellipsis, lists and int or bool tensors are valid indices, got {type(it).__name__}") from None
        if not -size <= i < size:
          raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size} (tensor of shape {self.shape})")
        parts.append(("int", i + size if i < 0 else i))
      dim += 1
    return parts

  # ** the basic (view) part of an index **
  def _basic_view(self: Tensor, parts: list[tuple], store: bool = False) -> Tensor:
    """The view the ints, slices and Nones select (tensor-indexed dimensions kept whole). store: build it without
    PAD, so an assign can write through it."""
    real = [p for p in parts if p[0] not in ("none", "empty")]
    bounds = []
    for p, s in zip(real, self.shape):
      if p[0] == "int": bounds.append((p[1], p[1] + 1))
      elif p[0] == "slice":
        lo, hi, step, count = p[1:]
        # widen the range to a whole number of steps where the tensor has room: then no padding is needed
        if abs(step) > 1 and count > 1:
          if step > 0 and lo + count * step <= s: hi = lo + count * step
          elif step < 0 and hi - count * -step >= 0: lo = hi - count * -step
        bounds.append((lo, hi))
      else: bounds.append((0, s))
    x = self.shrink(tuple(bounds)) if real else self
    x = x.flip(tuple(d for d, p in enumerate(real) if p[0] == "slice" and p[3] < 0))
    for d, p in enumerate(real):
      if p[0] == "slice" and abs(p[3]) > 1 and p[4] > 1: x = x._every(d, abs(p[3]), p[4], store)
    # rebuild the shape in index order: ints collapse, Nones (and False) insert a dimension
    out, it = [], iter(x.shape)
    for p in parts:
      if p[0] in ("none", "empty"): out.append(1)
      else:
        n = next(it)
        if p[0] != "int": out.append(n)
    x = x.reshape(tuple(out))
    kept = [p for p in parts if p[0] != "int"]
    if any(p[0] == "empty" for p in kept): x = x.shrink(tuple((0, 0) if p[0] == "empty" else None for p in kept))
    return x

  def _every(self: Tensor, d: int, step: int, count: int, store: bool) -> Tensor:
    """Elements 0, step, 2*step, ... (count of them) of dimension d."""
    n = self.shape[d]
    pre, post = self.shape[:d], self.shape[d + 1:]
    at = lambda rng, nd: tuple(rng if i == d else None for i in range(nd))  # noqa: E731
    x = self
    if n < count * step:
      if not store: x = x.pad(at((0, count * step - n), x.ndim))
      else:
        # without padding: repeat the row m times, flatten, and read it with a row length of n + step; element j then
        # sits at row j, column j * step (< n)
        m = ceildiv(count * (n + step), n)
        x = x.reshape(pre + (1, n) + post).expand(pre + (m, n) + post).reshape(pre + (m * n,) + post)
        x = x.shrink(at((0, count * (n + step)), x.ndim)).reshape(pre + (count, n + step) + post)
        return x.shrink(tuple((0, 1) if i == d + 1 else None for i in range(x.ndim))).reshape(pre + (count,) + post)
    x = x.reshape(pre + (count, step) + post)
    return x.shrink(tuple((0, 1) if i == d + 1 else None for i in range(x.ndim))).reshape(pre + (count,) + post)

  # ** the advanced part **
  def _adv_masks(self: Tensor, dims: list[int], tensors: list[Tensor]) -> tuple[Tensor, tuple[int, ...]]:
    """The product of the one-hot masks of the index tensors, in the layout self.shape[:d0] + B + self.shape[d0:]
    (B the broadcast index shape), and B."""
    try: big = self._broadcast_shape(*(t.shape for t in tensors))
    except ValueError:
      raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes {[t.shape for t in tensors]}") from None
    d0, nb, nx = dims[0], len(big), self.ndim
    mask = None
    for d, t in zip(dims, tensors):
      ti = t.reshape((1,) * (d0 + nb - t.ndim) + t.shape + (1,) * (nx - d0))
      ar = _positions(self.shape[d], self.device).reshape((1,) * (nb + d) + (self.shape[d],) + (1,) * (nx - d - 1))
      m = ti == ar
      mask = m if mask is None else mask & m
    return mask, big  # type: ignore[return-value]

  @staticmethod
  def _pick(mask: Tensor, vals: Tensor, axes: tuple[int, ...]) -> Tensor:
    """Sum over axes of vals where mask (at most one position is set per output, so the sum is exact)."""
    if vals.dtype is dtypes.bool: return mask.where(vals, False).cast(dtypes.int32).sum(axes) != 0
    return mask.where(vals, 0).sum(axes, dtype=vals.dtype)

  @staticmethod
  def _adv_permuted(dims: list[int]) -> bool:
    return dims[0] != 0 and dims != list(range(dims[0], dims[0] + len(dims)))

  def _fancy(self: Tensor, dims: list[int], tensors: list[Tensor]) -> Tensor:
    mask, big = self._adv_masks(dims, tensors)
    d0, nb = dims[0], len(big)
    x = self.reshape(self.shape[:d0] + (1,) * nb + self.shape[d0:])
    out = IndexingMixin._pick(mask, x, tuple(nb + d for d in dims))
    if IndexingMixin._adv_permuted(dims):
      out = out.permute(*range(d0, d0 + nb), *range(d0), *range(d0 + nb, out.ndim))
    return out

  def _fancy_merge(self: Tensor, dims: list[int], tensors: list[Tensor], v: Tensor) -> Tensor:
    """self with the positions the tensor indices select replaced by v (broadcast to the getitem result's shape);
    where an index repeats, the last write wins."""
    mask, big = self._adv_masks(dims, tensors)
    d0, nb, nx = dims[0], len(big), self.ndim
    rest = tuple(s for i, s in enumerate(self.shape) if i not in dims)
    res_shape = self.shape[:d0] + big + tuple(s for i, s in enumerate(self.shape) if i >= d0 and i not in dims)
    if IndexingMixin._adv_permuted(dims): res_shape = big + rest
    v = _broadcast_value(v, res_shape, "setitem")
    if IndexingMixin._adv_permuted(dims):  # back to the pre-permute layout X[:d0] + B + rest
      v = v.permute(*range(nb, nb + d0), *range(nb), *range(nb + d0, v.ndim))
    # insert the indexed dimensions as size 1, giving the layout X[:d0] + B + X[d0:]
    shp = list(v.shape)
    for d in dims: shp.insert(nb + d, 1)
    v = v.reshape(tuple(shp))
    if prod(big) == 0 or self.numel() == 0: return self
    baxes = tuple(range(d0, d0 + nb))
    order = self.arange(1, prod(big) + 1, device=self.device).reshape((1,) * d0 + big + (1,) * (nx - d0))
    last = mask.where(order, 0).max(baxes, keepdim=True)
    sel = mask & (order == last)
    val = IndexingMixin._pick(sel, v, baxes)
    return (last != 0).reshape(tuple(s for i, s in enumerate(last.shape) if i not in baxes)).where(val, self)

  # ** getitem / setitem **
  def __getitem__(self: Tensor, indices: Any) -> Tensor:
    """x[ints, slices (any step), None, ..., int tensors or lists]; see the module docstring."""
    parts = self._parse_indices(indices)
    x = self._basic_view(parts)
    xparts = [p for p in parts if p[0] != "int"]
    adv = [(d, p[1]) for d, p in enumerate(xparts) if p[0] == "adv"]
    if not adv: return x
    return x._fancy([d for d, _ in adv], [t for _, t in adv])

  def __setitem__(self: Tensor, indices: Any, v: Any) -> None:
    """Writes v into the selected elements, as tinygrad does. A tensor of memory (a buffer or a view of one) is written
    in place, now: every tensor on that memory sees the write. A lazy tensor instead becomes the merged value
    (where(selected, v, old)), so gradients reach both the old value and v. v is broadcast to the selection; a Tensor
    v must have this dtype (RuntimeError), a Python value is cast. As in tinygrad, a live lazy tensor computed from the
    target (other than v) is a RuntimeError: realize it first."""
    from tinyhybrid.tensor import Tensor
    from tinyhybrid.uop.buffers import buffer_view
    if self.requires_grad or (isinstance(v, Tensor) and v.requires_grad):
      which = "target" if self.requires_grad else "value"
      raise NotImplementedError(f"setitem with requires_grad is not supported: the {which} has requires_grad=True (target {self.shape} "
                                f"{self.dtype}); use tensors computed from it (z = x * 1; z[i] = y * 1): gradients flow through those")
    if self.uop.op is Ops.DETACH and buffer_view(self.uop.src[0]):  # t.detach()[i] = v writes t's memory
      inner = self._wrap(self.uop.src[0])
      inner[indices] = v
      self.uop = UOp(Ops.DETACH, self.dtype, (inner.uop,))
      return
    if not isinstance(v, Tensor): v = Tensor(v, device=self.device, dtype=self.dtype)
    if v.dtype in dtypes.weaks: v = v.cast(least_upper_dtype(self.dtype, v.dtype))  # a weak value takes the tensor's type
    if v.device != self.device and v.device is not None and is_storage(self.device): v = v.to(self.device)  # into DISK
    elif v.device != self.device: raise RuntimeError(f"setitem: value on {v.device}, tensor on {self.device}")
    elif v.dtype is not self.dtype:
      raise RuntimeError(f"setitem: dtype mismatch, a {v.dtype} value of shape {v.shape} into a {self.dtype} tensor of shape "
                         f"{self.shape} (cast it first)")
    parts = self._parse_indices(indices)  # bad indices raise before anything is computed
    xparts = [p for p in parts if p[0] != "int"]
    adv = [(d, p[1]) for d, p in enumerate(xparts) if p[0] == "adv"]
    if self.uop.op is not Ops.STORE and not buffer_view(self.uop) and _setitem_concrete(self, parts) and not is_storage(self.device):
      # x[i] += y on a lazy x runs x[i].assign(x[i] + y), then x[i] = that: the value is the assign's, kept lazy
      given = v
      if v.uop.op is Ops.STORE: v = self._wrap(v.uop.src[1], v.shape)
      _check_no_other_uses(self, (v, given))
      target = self._basic_view(parts)
      if adv: vx = target._fancy_merge([d for d, _ in adv], [t for _, t in adv], v)
      else: vx = _broadcast_value(v, target.shape, "setitem")
      if target.numel() == 0: return
      self.uop = _merge_selection(self, parts, vx).uop
      return
    # x[i] += y runs x[i].assign(x[i] + y) and then x[i] = that: the write is the pending assign itself
    if v.uop.op is Ops.STORE: v.realize()
    # the tensor must be memory that a view can write into: a buffer seen through shrink/permute/flip/reshape
    if not buffer_view(self.uop): self.realize()
    if not buffer_view(self.uop) or not _writable(self.uop): self.uop = self.contiguous().realize().uop
    target = self._basic_view(parts, store=True)
    if v.uop is target.uop: return  # written already (an in-place op on this very view)
    if adv: vx = target._fancy_merge([d for d, _ in adv], [t for _, t in adv], v)
    else: vx = _broadcast_value(v, target.shape, "setitem")
    if target.numel() == 0: return
    # a tensor that keeps a graph for backward (an AFTER) keeps one that knows about this write too
    history = _setitem_history(self, parts, v) or (self.uop.op is Ops.AFTER and _setitem_concrete(self, parts))
    _check_no_other_uses(self, (v, vx, target), memory=True)
    target.assign(vx).realize()
    # the memory holds the result; the graph under it is how it was computed, for backward() (as a realize keeps it)
    if history: self.uop = UOp(Ops.AFTER, self.dtype, (self.uop, _merge_selection(self._wrap(self.uop), parts, vx).uop))

  def __delitem__(self, indices: Any) -> None: raise TypeError("Tensor does not support deleting items")

  # ** gather / scatter **
  def _check_index(self: Tensor, op: str, index: Tensor) -> None:
    from tinyhybrid.tensor import Tensor
    if not isinstance(index, Tensor): raise TypeError(f"{op}: index must be a Tensor, got {type(index).__name__}")
    if not index.dtype._is_int: raise RuntimeError(f"{op}: index must be an int tensor, got {index.dtype}")
    if index.device != self.device: raise RuntimeError(f"{op}: index on {index.device}, tensor on {self.device}")
    if index.ndim != self.ndim:
      raise RuntimeError(f"{op}: index has {index.ndim} dimensions {index.shape}, the tensor {self.ndim} {self.shape}")

  def _one_hot_along_dim(self: Tensor, num_classes: int, dim: int = -1) -> Tensor:
    """self == arange(num_classes) placed at dimension dim (self has size 1 or num_classes there)."""
    if not self.dtype._is_int: raise RuntimeError(f"one-hot of a non-int tensor ({self.dtype})")
    offset = self.ndim - self._resolve_dim(dim) - 1
    return self == _positions(num_classes, self.device).reshape((num_classes,) + (1,) * offset)

  def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[..., i, ...] = self[..., index[..., i, ...], ...] along dim (torch.gather). Out-of-range index values give 0."""
    self._check_index("gather", index)
    d = self._resolve_dim(dim)
    if any(i > s for k, (s, i) in enumerate(zip(self.shape, index.shape)) if k != d):
      raise RuntimeError(f"gather: index shape {index.shape} is larger than the tensor shape {self.shape} outside dimension {d}")
    x = self.shrink(tuple(None if k == d else (0, i) for k, i in enumerate(index.shape)))
    x = x.unsqueeze(-1).transpose(-1, d)
    mask = index.unsqueeze(-1)._one_hot_along_dim(self.shape[d])
    return IndexingMixin._pick(mask, x, (-1,))

  def _pre_scatter(self: Tensor, op: str, dim: int, index: Tensor, src: Tensor) -> tuple[Tensor, Tensor, int]:
    """src values and the one-hot mask, both shaped self.shape + (index.shape[dim],): the last axis runs over the
    source positions that may land on each element."""
    self._check_index(op, index)
    d = self._resolve_dim(dim)
    if src.device != self.device: raise RuntimeError(f"{op}: src on {src.device}, tensor on {self.device}")
    if src.ndim != self.ndim: raise RuntimeError(f"{op}: src has {src.ndim} dimensions {src.shape}, the tensor {self.ndim} {self.shape}")
    if any(i > s2 or (k != d and i > s) for k, (s, i, s2) in enumerate(zip(self.shape, index.shape, src.shape))):
      raise RuntimeError(f"{op}: index shape {index.shape} must be <= src shape {src.shape} and <= the tensor shape {self.shape} "
                         f"outside dimension {d}")
    # torch and tinygrad take no implicit cast here
    if src.dtype != self.dtype: raise RuntimeError(f"{op}: src dtype {src.dtype} differs from the tensor's {self.dtype}")
    n = self.shape[d]
    src = src.shrink(tuple((0, i) for i in index.shape))
    src = src.unsqueeze(-1).expand(*src.shape, n).transpose(-1, d)
    mask = index.unsqueeze(-1)._one_hot_along_dim(n).transpose(-1, d)
    pads = tuple((0, s - m) for s, m in zip(self.shape, src.shape[:-1])) + ((0, 0),)
    return src.pad(pads), mask.pad(pads), d

  def scatter(self: Tensor, dim: int, index: Tensor, src: Tensor | int | float | bool, reduce: Literal["add", "multiply"] | None = None) -> Tensor:
    """Out-of-place torch.scatter: self with self[..., index[i], ...] = src[i] along dim (the last write wins)."""
    from tinyhybrid.tensor import Tensor
    if reduce not in (None, "add", "multiply"): raise TypeError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    if not isinstance(src, Tensor):
      if not isinstance(index, Tensor): raise TypeError(f"scatter: index must be a Tensor, got {type(index).__name__}")
      src = Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    elif reduce is not None: raise TypeError(f"scatter: reduce={reduce!r} takes a scalar src; use scatter_reduce for a tensor src")
    if reduce == "add": return self.scatter_reduce(dim, index, src, "sum")
    if reduce == "multiply": return self.scatter_reduce(dim, index, src, "prod")
    vals, mask, _ = self._pre_scatter("scatter", dim, index, src)
    if mask.shape[-1] == 0 or self.numel() == 0: return self
    order = self.arange(1, mask.shape[-1] + 1, device=self.device)
    last = mask.where(order, 0).max(-1, keepdim=True)
    val = IndexingMixin._pick(mask & (order == last), vals, (-1,))
    return (last != 0).squeeze(-1).where(val, self)

  def scatter_reduce(self: Tensor, dim: int, index: Tensor, src: Tensor, reduce: Literal["sum", "prod", "mean", "amax", "amin"],
                     include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: combines src values landing on the same element with sum/prod/mean/amax/amin."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise RuntimeError(f"scatter_reduce: reduce must be one of 'sum', 'prod', 'mean', 'amax', 'amin', got {reduce!r}")
    vals, mask, _ = self._pre_scatter("scatter_reduce", dim, index, src)
    if mask.shape[-1] == 0 or self.numel() == 0: return self  # nothing lands anywhere
    hit = mask.any(-1)
    # the value each element starts from: itself, or (include_self=False) the reduction's identity where src lands
    base = (lambda ident: self) if include_self else (lambda ident: hit.where(ident, self))  # noqa: E731
    if reduce == "sum": return (IndexingMixin._masked_sum(mask, vals) + base(0)).cast(self.dtype)
    if reduce == "prod": return (mask.where(vals, 1).prod(-1) * base(1)).cast(self.dtype)
    if reduce == "amax": return mask.where(vals, self.dtype.min).max(-1).maximum(base(self.dtype.min)).cast(self.dtype)
    if reduce == "amin": return mask.where(vals, self.dtype.max).min(-1).minimum(base(self.dtype.max)).cast(self.dtype)
    # mean: ints floor-divide the sum by the count, as torch does
    count = mask.cast(dtypes.int32).sum(-1) + (1 if include_self else 0)
    total = IndexingMixin._masked_sum(mask, vals) + base(0)
    safe = (count == 0).where(1, count)
    out = total.div(safe, rounding_mode="floor") if self.dtype._is_int else total / safe.cast(self.dtype)
    return out.cast(self.dtype)

  @staticmethod
  def _masked_sum(mask: Tensor, vals: Tensor) -> Tensor:
    """Sum over the last axis of vals where mask, accumulated in vals' dtype (bool: as int)."""
    if vals.dtype is dtypes.bool: return mask.where(vals, False).cast(dtypes.int32).sum(-1)
    return mask.where(vals, 0).sum(-1, dtype=vals.dtype)

  # ** masks **
  def masked_fill(self: Tensor, mask: Tensor, value: Any) -> Tensor:
    """self where mask is False, value where it is True (mask broadcasts to self)."""
    from tinyhybrid.tensor import Tensor
    if mask.dtype is not dtypes.bool: raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype}")
    out = mask.where(value if isinstance(value, Tensor) else Tensor.full((), value, dtype=self.dtype, device=self.device), self).cast(self.dtype)
    if out.shape != self.shape: raise ValueError(f"masked_fill: mask shape {mask.shape} does not broadcast to {self.shape}")
    return out

  def masked_select(self: Tensor, mask: Tensor, size: int | None = None, fill_value: Any = 0) -> Tensor:
    """The elements where mask is True, flattened (the count is read back unless size is given; then the result is
    padded with fill_value or truncated to size)."""
    if mask.dtype is not dtypes.bool: raise RuntimeError(f"masked_select: mask must be a bool tensor, got {mask.dtype}")
    shape = self._broadcast_shape(self.shape, mask.shape)
    x, m = self.expand(shape).flatten(), mask.expand(shape).flatten()
    pos = self._select_positions(m, size)
    if pos.shape[0] == 0: return self.full((0,), 0, dtype=self.dtype, device=self.device)
    out = x[pos.clip(0, max(x.shape[0] - 1, 0))]
    if size is None: return out
    return (self.arange(size, device=self.device) < m.cast(dtypes.int32).sum()).where(out, fill_value).cast(self.dtype)

  def _select_positions(self: Tensor, m: Tensor, size: int | None) -> Tensor:
    """For a flat bool tensor m, the positions of its True values in order (size of them, or all when size is None)."""
    n = m.shape[0]
    if size is None: size = int(m.cast(dtypes.int32).sum().item()) if n else 0
    if size == 0 or n == 0: return self.full((size,), 0, dtype=dtypes.int32, device=self.device)
    rank = m.cast(dtypes.int32).cumsum(0)  # rank[p] = number of Trues at or before p
    want = self.arange(1, size + 1, device=self.device).reshape(size, 1)
    hit = (rank.reshape(1, n) == want) & m.reshape(1, n)
    return hit.where(self.arange(n, device=self.device).reshape(1, n), 0).sum(1, dtype=dtypes.int32)

  def nonzero(self: Tensor, size: int | None = None, fill_value: int = 0) -> Tensor:
    """The indices of the nonzero elements, shape (count, ndim) (the count is read back unless size is given)."""
    m = (self != 0).flatten() if self.ndim else (self != 0).reshape(1)
    if self.ndim == 0:
      k = size if size is not None else int(m.cast(dtypes.int32).sum().item())
      return self.full((k, 0), 0, dtype=dtypes.int32, device=self.device)
    k = size if size is not None else (int(m.cast(dtypes.int32).sum().item()) if m.shape[0] else 0)
    if k == 0: return self.full((0, self.ndim), 0, dtype=dtypes.int32, device=self.device)
    flat = self._select_positions(m, k)
    coords, rem = [], flat
    for s in reversed(self.shape):
      coords.append(rem % s)
      rem = rem // s
    out = coords[0].stack(*coords[1:], dim=1).flip(1) if len(coords) > 1 else coords[0].unsqueeze(1)
    if size is None: return out
    valid = (self.arange(k, device=self.device) < m.cast(dtypes.int32).sum()).unsqueeze(1)
    return valid.where(out, fill_value).cast(dtypes.int32)

  def one_hot(self: Tensor, num_classes: int) -> Tensor:
    """A trailing dimension of num_classes with a 1 at each value. As in tinygrad (and jax), num_classes is given:
    torch's -1 (read it back from the data) is a ValueError."""
    if not self.dtype._is_int: raise RuntimeError(f"one_hot: expected an int tensor, got {self.dtype}")
    if num_classes < 0: raise ValueError(f"one_hot: num_classes must be non-negative, got {num_classes}")
    return self.unsqueeze(-1)._one_hot_along_dim(num_classes).where(1, 0)

  # ** more views **
  def roll(self: Tensor, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Rotates elements along dims by shifts (over the flattened tensor when dims is None), like torch.roll."""
    if dims is None: return self.flatten().roll(shifts, 0).reshape(self.shape)
    ds, ss = tuple(self._resolve_dim(d) for d in _tuple(dims)), _tuple(shifts)
    if len(ds) != len(ss): raise RuntimeError(f"roll: {len(ss)} shifts for {len(ds)} dims (shape {self.shape})")
    x = self
    for d, s in zip(ds, ss):
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      k = s % n
      a = x.shrink(tuple((n - k, n) if i == d else None for i in range(x.ndim)))
      b = x.shrink(tuple((0, n - k) if i == d else None for i in range(x.ndim)))
      x = a.cat(b, dim=d)
    return x

  def shrink_to(self: Tensor, shape: Sequence[int | None], *args: int | None) -> Tensor:
    shp = _dims_or_none(shape, args)
    return self.shrink(tuple(None if s is None else (0, s) for s in shp))

  def pad_to(self: Tensor, shape: Sequence[int | None], *args: int | None, value: float = 0.0) -> Tensor:
    """Pads at the end of each dimension up to shape (None keeps a dimension), with value."""
    shp = _dims_or_none(shape, args)
    if len(shp) != self.ndim: raise ValueError(f"pad_to: {shp} has {len(shp)} dimensions, the tensor {self.ndim}")
    return self.pad(tuple((0, 0 if n is None else n - s) for s, n in zip(self.shape, shp)), value=value)

  def diag(self: Tensor, diagonal: int = 0) -> Tensor:
    """1-D: a square matrix with self on the given diagonal; 2-D: that diagonal (torch.diag)."""
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise ValueError(f"diag: expected a 1-D or 2-D tensor, got shape {self.shape}")
    n = self.shape[0]
    m = n + abs(diagonal)
    x = self.unsqueeze(-1).pad(((0, 0), (0, n))).flatten().shrink(((0, n * n),)).reshape(n, n) if n else self.reshape(0, 0)
    return x.pad(((max(-diagonal, 0), max(diagonal, 0)), (max(diagonal, 0), max(-diagonal, 0)))) if diagonal else x.reshape(m, m)

  def diagonal(self: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of dims (dim1, dim2) as the last dimension (offset > 0 above the main diagonal)."""
    d1, d2 = self._resolve_dim(dim1), self._resolve_dim(dim2)
    if d1 == d2: raise RuntimeError(f"diagonal: dim1 and dim2 are the same dimension {d1} of shape {self.shape}")
    x = self.permute(*[i for i in range(self.ndim) if i not in (d1, d2)], d1, d2)
    r, c = x.shape[-2], x.shape[-1]
    lead = (None,) * (x.ndim - 2)
    r0, c0 = max(-offset, 0), max(offset, 0)
    k = max(0, min(r - r0, c - c0))
    x = x.shrink(lead + ((min(r0, r), min(r0, r) + k), (min(c0, c), min(c0, c) + k)))
    if k == 0: return x.reshape(*x.shape[:-2], 0)
    return x.flatten(-2).pad(lead + ((0, k),)).unflatten(-1, (k, k + 1)).shrink(lead + (None, (0, 1))).squeeze(-1)

  def repeat_interleave(self: Tensor, repeats: int, dim: int | None = None) -> Tensor:
    """Each element repeated `repeats` times along dim (of the flattened tensor when dim is None)."""
    x, d = (self.flatten(), 0) if dim is None else (self, self._resolve_dim(dim))
    s = x.shape
    return x.reshape(*s[:d + 1], 1, *s[d + 1:]).expand(*s[:d + 1], repeats, *s[d + 1:]).reshape(*s[:d], s[d] * repeats, *s[d + 1:])

  def unfold(self: Tensor, dim: int, size: int, step: int) -> Tensor:
    """Windows of `size` every `step` along dim, as a new last dimension (torch.Tensor.unfold)."""
    d = self._resolve_dim(dim)
    if self.ndim == 0: return self.reshape(1).unfold(0, size, step).reshape(size)  # torch: a 0-d tensor as one element
    if size < 0: raise RuntimeError(f"unfold: size must be >= 0, got {size}")
    if step <= 0: raise RuntimeError(f"unfold: step must be > 0, got {step}")
    n = self.shape[d]
    if size > n: raise RuntimeError(f"unfold: size {size} is larger than dimension {d} of shape {self.shape}")
    nw = (n - size) // step + 1
    x = self.transpose(d, -1) if d != self.ndim - 1 else self
    pre = x.shape[:-1]
    if size == 0: out = x.shrink(tuple(None for _ in pre) + ((0, 0),)).unsqueeze(-2).expand(*pre, nw, 0)
    else:
      # movement only: repeat the row m times and read the flat result with a row length of n + step; window w then
      # starts at row w, column w * step, and its size elements follow without wrapping
      m = ceildiv(nw * (n + step), n)
      x = x.unsqueeze(-2).expand(*pre, m, n).reshape(*pre, m * n)
      x = x.shrink(tuple(None for _ in pre) + ((0, nw * (n + step)),)).reshape(*pre, nw, n + step)
      out = x.shrink(tuple(None for _ in pre) + (None, (0, size)))
    return out.transpose(d, -2) if d != self.ndim - 1 else out

  def meshgrid(self: Tensor, *args: Tensor, indexing: str = "ij") -> tuple[Tensor, ...]:
    if indexing not in ("ij", "xy"): raise RuntimeError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = (self, *args)
    if any(t.ndim > 1 for t in ts): raise RuntimeError(f"meshgrid: expected 0-d or 1-d tensors, got shapes {[t.shape for t in ts]}")
    if len(ts) == 1: return ts
    shape = [t.numel() for t in ts]
    if indexing == "xy": shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, t in enumerate(ts):
      j = (1 - i if i < 2 else i) if indexing == "xy" else i
      out.append(t.reshape(tuple(-1 if k == j else 1 for k in range(len(ts)))).expand(tuple(shape)))
    return tuple(out)

  def size(self: Tensor, dim: int | None = None) -> int | tuple[int, ...]:
    return self.shape if dim is None else self.shape[self._resolve_dim(dim)]


def _dims_or_none(shape: Any, args: tuple) -> tuple[int | None, ...]:
  """A shape given as one sequence or as separate dims, each an int or None (keep that dim)."""
  return tuple(shape) if not args and isinstance(shape, (tuple, list)) else (shape, *args)


def _broadcast_value(v: Tensor, shape: tuple[int, ...], op: str) -> Tensor:
  """v broadcast to shape for a write (leading size-1 dimensions of v may be dropped, as torch allows)."""
  while v.ndim > len(shape) and v.shape[0] == 1: v = v.reshape(v.shape[1:])
  try: return v.expand(shape)
  except ValueError: raise ValueError(f"{op}: cannot broadcast a value of shape {v.shape} to the selected shape {shape}") from None


def _writable(u: Any) -> bool:
  """A view of a buffer that writes land in: no padding and no broadcast between the view and the buffer."""
  while u.op is not Ops.BUFFER:
    if u.op in (Ops.PAD, Ops.EXPAND): return False
    u = u.src[0]
  return True


# ** setitem on a lazy tensor: the merged value **
def _setitem_concrete(x: Tensor, parts: list[tuple]) -> bool:
  """Whether the selection has int bounds throughout (a symbolic one is written in place instead)."""
  return all(type(s) is int for s in x.shape) and all(type(a) is int for p in parts if p[0] in ("int", "slice") for a in p[1:])


def _check_no_other_uses(x: Tensor, values: tuple[Tensor, ...], memory: bool = False) -> None:
  """tinygrad's rule for a target that reads memory: if another live lazy tensor was computed from it (from x's graph,
  or with memory=True from the buffers a realized x is a view of; a view of x included, a view of the buffers not),
  the merged value would leave that tensor with the old value where eager code would alias it, and a write in place
  would change what it reads: RuntimeError. Values the write is computed from (x[i] += y reads x[i]) may read it, and a
  pending assign into the same memory is a write: it runs first."""
  from tinyhybrid.uop.buffers import buffer_view
  from tinyhybrid.tensor import _all_tensors
  nodes = x.uop.toposort()
  if not any(n.op is Ops.BUFFER for n in nodes): return  # constants only: nothing can alias it
  roots = {n for n in nodes if n.op is Ops.BUFFER} if memory else {x.uop}
  v_nodes = set(UOp.sink(*[v.uop for v in values]).toposort())  # the value itself may be computed from x (x[i] = x[j] * 2)
  others = [t for t in list(_all_tensors)
            if t is not x and all(t is not v for v in values) and t.uop not in v_nodes
            and not buffer_view(t.uop.src[0] if t.uop.op is Ops.DETACH else t.uop)]  # (a detached view is the memory too)
  if memory and (writes := [t for t in others if t.uop.op is Ops.STORE and roots & set(t.uop.src[0].toposort())]):
    writes[0].realize(*writes[1:])
    others = [t for t in others if all(t is not w for w in writes)]
  if not others: return
  uses = set(roots)
  for n in UOp.sink(*[t.uop for t in others]).toposort():
    if n not in uses and any(s in uses for s in n.src): uses.add(n)
  if any(t.uop in uses for t in others):
    raise RuntimeError(f"setitem: can't setitem on a tensor with other uses: a live lazy tensor was computed from this {x.dtype} "
                       f"tensor of shape {x.shape} (realize it first, or write into a copy)")


def _setitem_history(x: Tensor, parts: list[tuple], v: Tensor) -> bool:
  """Whether an in-place write keeps the value's graph under x: v is computed from a tensor that requires grad, and not
  from x's own memory (which the write changes)."""
  from tinyhybrid.uop.buffers import base_buffer
  from tinyhybrid.tensor import Tensor, _all_tensors
  if Tensor.no_grad or not v.dtype._is_float or not _setitem_concrete(x, parts): return False
  wants = {t.uop for t in list(_all_tensors) if t.requires_grad}
  if not wants: return False
  nodes = v.uop.toposort()
  return any(n in wants for n in nodes) and base_buffer(x.uop) not in nodes


def _merge_selection(x: Tensor, parts: list[tuple], vx: Tensor) -> Tensor:
  """x with the elements that _basic_view(parts) selects replaced by vx (which has that view's shape): vx is moved back
  to x's layout (flips undone, strided picks spread out with zeros between, ranges padded) and picked by a mask that
  went through the same moves."""
  from tinyhybrid.tensor import Tensor
  real = [p for p in parts if p[0] not in ("none", "empty")]
  # the view's shape before its ints collapse and its Nones are added: one entry per dimension of x
  shape = tuple(1 if p[0] == "int" else p[4] if p[0] == "slice" else s for p, s in zip(real, x.shape))
  def back(t: Tensor) -> Tensor:
    t = t.reshape(shape)
    flips = tuple(d for d, p in enumerate(real) if p[0] == "slice" and p[3] < 0)
    if flips: t = t.flip(flips)  # element j of each flipped dimension now belongs at lo + j * |step|
    pads = []
    for d, (p, s) in enumerate(zip(real, x.shape)):
      if p[0] == "int": pads.append((p[1], s - p[1] - 1)); continue
      if p[0] != "slice": pads.append((0, 0)); continue
      lo, hi, step, count = p[1:]
      if abs(step) > 1 and count > 1:  # spread out: each element then |step| - 1 zeros, the trailing ones cut off
        pre, post = t.shape[:d], t.shape[d + 1:]
        t = t.reshape(pre + (count, 1) + post).pad(tuple((0, abs(step) - 1) if i == d + 1 else (0, 0) for i in range(t.ndim + 1)))
        t = t.reshape(pre + (count * abs(step),) + post).shrink(tuple((0, hi - lo) if i == d else None for i in range(t.ndim - 1)))
      pads.append((lo, s - lo - t.shape[d]))
    return t.pad(tuple(pads)) if any(pd != (0, 0) for pd in pads) else t
  mask = back(Tensor.full(vx.shape, True, dtype=dtypes.bool, device=x.device))
  return mask.where(back(vx), x)
