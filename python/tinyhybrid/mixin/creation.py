"""Creation: zeros, ones, arange, eye, the *_like forms, and triangular masks."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tinyhybrid.dtype import dtypes, to_dtype
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, sint

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor


class CreationMixin:
  __slots__ = ()

  @classmethod
  def zeros(cls, *shape, **kwargs) -> Tensor: return cls.full(cls._shape_arg(shape), 0.0 if "dtype" not in kwargs else 0, **kwargs)  # type: ignore[attr-defined]
  @classmethod
  def ones(cls, *shape, **kwargs) -> Tensor: return cls.full(cls._shape_arg(shape), 1.0 if "dtype" not in kwargs else 1, **kwargs)  # type: ignore[attr-defined]

  @staticmethod
  def const(b: Any, dtype: Any = None) -> Tensor:
    """A deviceless constant (tinygrad's Tensor.const): it takes the device of what it is combined with. A tuple or
    list gives a 1-D tensor of its values."""
    from tinyhybrid.tensor import Tensor
    from tinyhybrid.uop.ops import UOp
    if isinstance(b, (tuple, list)): return Tensor(list(b), dtype=dtype)
    return Tensor(UOp.const(to_dtype(dtype) if dtype is not None else dtypes.from_py(b), b))

  @classmethod
  def invalids(cls, *shape, device: str | None = None, dtype: Any = None) -> Tensor:
    """A tensor whose values are unspecified (tinygrad's anonymous buffer; here, as Tensor.empty)."""
    return cls.empty(*shape, device=device, dtype=dtype)  # type: ignore[attr-defined]

  @classmethod
  def arange(cls, start: float | UOp, stop: float | UOp | None = None, step: float = 1, **kwargs) -> Tensor:
    """start, start+step, ... below stop; ints give default_int, floats default_float."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be zero")
    if sym := not all(isinstance(v, (int, float)) for v in (start, stop, step)):
      # bound Variables (sints) in start/stop: a symbolic length, an iota of its largest value shrunk to it
      up = step.vmin > 0 if isinstance(step, UOp) else step > 0
      if isinstance(step, float) or (isinstance(step, UOp) and not (step.dtype._is_int and (up or step.vmax < 0))):
        raise TypeError(f"arange: a symbolic range needs an int step of known sign, got {step!r}")
      n = ((stop - start + step - (1 if up else -1)) // step).ssimplify()  # type: ignore[union-attr, operator]  # a UOp: sym
      if not isinstance(n, int) and n.vmin < 0: n = n.maximum(0).ssimplify()
    else: n = max(0, math.ceil((stop - start) / step))
    if unknown := kwargs.keys() - {"dtype", "device", "requires_grad"}: raise TypeError(f"arange: unexpected keyword(s) {sorted(unknown)}")
    given = kwargs.pop("dtype", None)
    dt = to_dtype(given) if given is not None else (dtypes.default_int if sym or all(isinstance(v, int) for v in (start, stop, step)) else dtypes.default_float)
    if not sym and n > 0 and (dt._is_int or dt is dtypes.bool):
      # the values must fit: an int range too large for default_int becomes int64, as in tinygrad; a given dtype raises
      lo, hi = sorted((start, start + (n - 1) * step))
      if given is None and (lo < dt.min or hi > dt.max): dt = dtypes.int64
      if lo < dt.min or hi > dt.max: raise OverflowError(f"arange: [{start}, {stop}) with step {step} is not representable in {dt}")
    if isinstance(n, int) and n == 0: return cls.full((0,), 0, dtype=dt, **kwargs)  # type: ignore[attr-defined]
    idx = cls._iota(n, kwargs.get("device")) if isinstance(n, int) else cls._iota(n.vmax, kwargs.get("device")).shrink(((0, n),))  # type: ignore[attr-defined]
    return (idx.cast(dt) * step + start).cast(dt) if (start, step) != (0, 1) else idx.cast(dt)

  @classmethod
  def linspace(cls, start: float, stop: float, steps: int, **kwargs) -> Tensor:
    if steps < 0: raise ValueError(f"linspace: steps must be non-negative, got {steps}")
    dt = to_dtype(kwargs.pop("dtype", None) or dtypes.default_float)
    if dt is dtypes.bool: raise ValueError("linspace: dtype bool is not supported")
    if steps == 1: return cls.full((1,), start, dtype=dt, **kwargs)  # type: ignore[attr-defined]
    return (start + cls.arange(steps, **kwargs).cast(dtypes.float64) * ((stop - start) / (steps - 1))).cast(dt)

  @classmethod
  def eye(cls, n: int, m: int | None = None, **kwargs) -> Tensor:
    m = n if m is None else m
    if n < 0 or m < 0: raise ValueError(f"eye: n and m must be non-negative, got n={n}, m={m}")
    dt = kwargs.pop("dtype", None) or dtypes.default_float
    rows = cls.arange(n, **kwargs).reshape(n, 1)
    cols = cls.arange(m, **kwargs).reshape(1, m)
    return (rows == cols).cast(dt)

  def tril(self: Tensor, diagonal: sint = 0) -> Tensor: return self._tri(diagonal, lower=True)
  def triu(self: Tensor, diagonal: sint = 0) -> Tensor: return self._tri(diagonal, lower=False)
  def _tri(self: Tensor, diagonal: sint, lower: bool) -> Tensor:
    r, c = self.shape[-2], self.shape[-1]
    rows = self.arange(r, device=self.device).reshape(r, 1)
    cols = self.arange(c, device=self.device).reshape(1, c)
    keep = (cols <= rows + diagonal) if lower else (cols >= rows + diagonal)
    return keep.where(self, self.zeros_like() if self.dtype is not dtypes.bool else False)

  def full_like(self: Tensor, fill_value: Any, **kwargs) -> Tensor:
    if type(self.device) is tuple and kwargs.get("device") is None and self.uop.op is Ops.MSTACK and self.uop.arg[1] is not None:
      # sharded on an axis: the new tensor is sharded the same way (as in tinygrad)
      return self.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), **kwargs).shard(self.device, self.uop.arg[1])
    return self.full(self.shape, fill_value, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def zeros_like(self: Tensor, **kwargs) -> Tensor: return self.full_like(0, **kwargs)
  def empty_like(self: Tensor, **kwargs) -> Tensor:
    return self.empty(self.shape, dtype=kwargs.pop("dtype", self.dtype), device=kwargs.pop("device", self.device), **kwargs)
  def ones_like(self: Tensor, **kwargs) -> Tensor: return self.full_like(1, **kwargs)
