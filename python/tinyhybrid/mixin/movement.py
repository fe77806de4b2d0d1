"""Movement: reshape, permute, expand, pad, shrink, flip and what is built from them."""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, Sequence

from tinyhybrid.helpers import prod
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp, bound_value, check_shape, movement, resolve, sint, sint_eq, ssimplify, valid_dim

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor


def _dims(args: tuple) -> tuple:
  return tuple(args[0]) if len(args) == 1 and isinstance(args[0], (tuple, list)) else tuple(args)


def _sint(x: sint) -> sint: return x if isinstance(x, UOp) else int(x)


class MovementMixin:
  __slots__ = ()

  @property
  def max_shape(self: Tensor) -> tuple[int, ...]:
    """The shape with every symbolic dimension at its largest value (what the memory behind it holds)."""
    from tinyhybrid.uop.shape import max_shape
    return tuple(max_shape(self.shape))

  def max_numel(self: Tensor) -> int: return prod(self.max_shape)

  def reshape(self: Tensor, shape: sint | Sequence[sint | None], *args: sint | None) -> Tensor:
    """A view with another shape of the same number of elements; one dimension may be -1 (inferred), None keeps it."""
    new: tuple[Any, ...] = _dims((shape, *args)) if args else ((shape,) if isinstance(shape, (int, float, UOp)) else tuple(shape))
    new = tuple(self.shape[i] if s is None else s for i, s in enumerate(new))
    check_shape(tuple(s for s in new if not (type(s) is int and s == -1)), "reshape: ")
    # a sint in either shape makes a product a UOp: then the sizes are compared at the variables' bound values
    numel = self.numel()
    if new.count(-1) > 1: raise RuntimeError(f"reshape: only one dimension can be inferred (-1), got {new} for shape {self.shape}")
    if -1 in new:
      known = prod([s for s in new if s != -1])
      if type(known) is not int or type(numel) is not int: return self._reshape_symbolic(new)
      # torch: a -1 beside a 0 could be anything
      if known == 0: raise RuntimeError(f"reshape: the -1 in {new} is ambiguous for shape {self.shape} ({numel} elements)")
      if numel % known: raise ValueError(f"reshape: cannot reshape {self.shape} to {new}")
      new = tuple(numel // known if s == -1 else s for s in new)
    total = prod(new)
    if type(total) is not int or type(numel) is not int: return self._reshape_symbolic(new)
    if any(s < 0 for s in new) or total != numel:
      raise ValueError(f"reshape: cannot reshape tensor of shape {self.shape} ({numel} elements) to {new}")
    return self if new == self.shape else self._mop(Ops.RESHAPE, new)

  def _reshape_symbolic(self: Tensor, new: tuple) -> Tensor:
    """reshape where a shape holds bound Variables: the sizes must agree at the bound values (so a symbolic shape can
    be reshaped to the concrete one of its values, and back), as in tinygrad."""
    numel = ssimplify(prod(self.shape))
    if sum(1 for s in new if type(s) is int and s == -1) > 1:
      raise RuntimeError(f"reshape: only one dimension can be inferred (-1), got {new} for shape {self.shape}")
    if any(type(s) is int and s == -1 for s in new):
      known = ssimplify(prod([s for s in new if not (type(s) is int and s == -1)]))
      if bound_value(known) == 0 or bound_value(numel) % bound_value(known): raise ValueError(f"reshape: cannot reshape {self.shape} to {new}")
      new = tuple(ssimplify(numel // known) if type(s) is int and s == -1 else s for s in new)
    new = tuple(ssimplify(s) for s in new)
    check_shape(new, "reshape: ")
    if (n := bound_value(prod(new))) != (m := bound_value(numel)):
      raise ValueError(f"reshape: cannot reshape tensor of shape {self.shape} ({m} elements at the bound values) to {new} ({n} elements)")
    if new == self.shape: return self
    # a reshape of a reshape is one reshape of its source: `a.reshape(3, vi)` of a realized (3, i) then reads the buffer
    # without the concrete i, so one kernel serves every value
    src = self.uop.src[0] if self.uop.op is Ops.RESHAPE else self.uop
    return self._wrap(movement(Ops.RESHAPE, src, new, strict=True))

  def view(self: Tensor, shape: int | Sequence[int], *args: int) -> Tensor: return self.reshape(shape, *args)

  def permute(self: Tensor, order: int | Sequence[int], *args: int) -> Tensor:
    """Reorders the dimensions: result dimension i is this tensor's dimension order[i]."""
    order = tuple(self._resolve_dim(d) for d in (_dims((order, *args)) if args else ((order,) if isinstance(order, int) else order)))
    if sorted(order) != list(range(self.ndim)):
      raise RuntimeError(f"permute: {order} is not a permutation of the {self.ndim} dimensions of {self.shape}")
    return self if order == tuple(range(self.ndim)) else self._mop(Ops.PERMUTE, order)

  def expand(self: Tensor, shape: sint | Sequence[sint], *args: sint) -> Tensor:
    """Broadcasts dimensions of size 1 (and prepends new ones); -1 keeps a dimension."""
    new = _dims((shape, *args)) if args else ((shape,) if isinstance(shape, (int, UOp)) else tuple(shape))
    if len(new) < self.ndim: raise ValueError(f"expand: cannot expand {self.shape} to fewer dimensions {new}")
    cur = (1,) * (len(new) - self.ndim) + self.shape
    new = tuple(c if n == -1 else n for c, n in zip(cur, new))
    # (a sint is != any other value, itself included: such a mismatch is checked again symbolically)
    if any(resolve(c != n) and resolve(c != 1) for c, n in zip(cur, new)) and not all(sint_eq(c, n) or c == 1 for c, n in zip(cur, new)):
      raise ValueError(f"expand: cannot expand {self.shape} to {new}")
    t = self.reshape(cur) if cur != self.shape else self
    if new == cur: return t
    return t._mop(Ops.EXPAND, new) if type(sum(new)) is int else t._smop(Ops.EXPAND, new)

  def pad(self: Tensor, padding: Sequence[int] | Sequence[tuple[int, int] | None], mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pads with `value` (mode constant) or by reflect, replicate or circular. padding is per dimension (before, after),
    or flat in torch's order (last dimension first)."""
    if mode not in ("constant", "reflect", "replicate", "circular"): raise NotImplementedError(f"pad mode {mode!r}")
    pads: list[Any]  # (before, after) per dimension: as given, then ints or sints
    if not any(isinstance(p, (tuple, list)) or p is None for p in padding):  # flat, torch's order (ints or sints)
      flat = list(padding)
      if len(flat) % 2 or len(flat) // 2 > self.ndim: raise ValueError(f"pad: bad padding {padding} for shape {self.shape}")
      pads = [(0, 0)] * (self.ndim - len(flat) // 2) + [(flat[i], flat[i + 1]) for i in range(len(flat) - 2, -1, -2)]
    else:
      if len(padding) != self.ndim: raise ValueError(f"pad: {len(padding)} pads for {self.ndim} dimensions")
      pads = [(0, 0) if p is None else tuple(p) for p in padding]  # type: ignore[arg-type]
    if any(len(p) != 2 for p in pads): raise ValueError(f"pad: each dimension takes (before, after), got {padding} for shape {self.shape}")
    pads = [tuple(v if isinstance(v, UOp) else operator.index(v) for v in p) for p in pads]  # numpy ints too
    if mode != "constant": return self._pad_mode(pads, mode)
    if type(sum(map(sum, pads))) is not int:  # symbolic padding: amounts of bound Variables, not negative as bound
      # (a pad that goes negative only for other values of its variables is allowed, as in tinygrad: a cache padded to
      # its length, max_context - start_pos - seqlen, is for the values the program binds)
      if not all(bound_value(v) >= 0 if isinstance(v, UOp) and v.dtype._is_int else valid_dim(v) for p in pads for v in p):
        raise ValueError(f"pad: symbolic padding {pads} must be >= 0")
      pads = [(ssimplify(b), ssimplify(a)) for b, a in pads]
      padded = self._smop(Ops.PAD, tuple(pads))
      return padded if value == 0 else self.ones_like(dtype="bool")._smop(Ops.PAD, tuple(pads)).where(padded, value)
    # negative padding shrinks first
    t = self.shrink(tuple((-min(b, 0), s + min(a, 0)) for s, (b, a) in zip(self.shape, pads)))
    pos = tuple((max(b, 0), max(a, 0)) for b, a in pads)
    if all(p == (0, 0) for p in pos): return t
    if value == 0: return t._mop(Ops.PAD, pos)
    mask = t.ones_like(dtype="bool")._mop(Ops.PAD, pos)
    return mask.where(t._mop(Ops.PAD, pos), value)

  def _pad_mode(self: Tensor, pads: list, mode: str) -> Tensor:
    if any(isinstance(v, UOp) for p in pads for v in p) or any(isinstance(s, UOp) for s in self.shape):
      raise NotImplementedError(f"pad: mode {mode!r} needs concrete padding and shape, got {pads} for {self.shape}")
    # reflect and replicate see the whole dimension: pad by the positive amounts first, then crop the negative ones;
    # circular crops first and wraps what is left (torch's orders)
    t = self
    if mode == "circular" and any(v < 0 for p in pads for v in p):
      crop = tuple((-min(b, 0), s + min(a, 0)) for s, (b, a) in zip(t.shape, pads))
      if any(lo > hi for lo, hi in crop): raise ValueError(f"pad: negative padding {pads} removes more than the shape {self.shape}")
      t, pads = t.shrink(crop), [(max(b, 0), max(a, 0)) for b, a in pads]
    for d, (b, a) in enumerate(pads):
      b, a = max(b, 0), max(a, 0)
      if b == 0 and a == 0: continue
      n = t.shape[d]
      if mode == "reflect" and (b >= n or a >= n):
        raise ValueError(f"pad: reflect padding {b, a} must be less than the size {n} of dimension {d} of {self.shape}")
      if mode == "circular" and (b > n or a > n):
        raise ValueError(f"pad: circular padding {b, a} wraps around dimension {d} of {self.shape} more than once")
      if mode == "replicate" and n == 0: raise ValueError(f"pad: replicate padding of the empty dimension {d} of {self.shape}")
      sl = lambda s, e: t.shrink(tuple((s, e) if i == d else None for i in range(t.ndim)))  # noqa: E731
      if mode == "reflect": before, after = (sl(1, b + 1).flip(d) if b else None), (sl(n - a - 1, n - 1).flip(d) if a else None)
      elif mode == "replicate": before, after = (sl(0, 1).expand_dim(d, b) if b else None), (sl(n - 1, n).expand_dim(d, a) if a else None)
      else: before, after = (sl(n - b, n) if b else None), (sl(0, a) if a else None)
      t = t.cat(*[x for x in (after,) if x is not None], dim=d) if before is None else before.cat(*[x for x in (t, after) if x is not None], dim=d)
    crop = tuple((-min(b, 0), s + min(a, 0)) for s, (b, a) in zip(t.shape, pads))
    if any(lo > hi for lo, hi in crop): raise ValueError(f"pad: negative padding {pads} removes more than the shape {self.shape}")
    return t.shrink(crop)

  def expand_dim(self: Tensor, d: int, n: int) -> Tensor:
    return self.expand(tuple(n if i == d else s for i, s in enumerate(self.shape)))

  def shrink(self: Tensor, arg: Sequence[tuple[int, int] | None]) -> Tensor:
    """Keeps [start, end) of each dimension (None keeps all of it)."""
    if len(arg) != self.ndim: raise ValueError(f"shrink: {len(arg)} ranges for {self.ndim} dimensions")
    try: bounds = tuple((0, s) if a is None else (int(a[0]), int(a[1])) for a, s in zip(arg, self.shape))
    except TypeError: bounds = tuple((0, s) if a is None else (_sint(a[0]), _sint(a[1])) for a, s in zip(arg, self.shape))  # sints
    if any(type(b) is not int or type(e) is not int or type(s) is not int or not 0 <= b <= e <= s for (b, e), s in zip(bounds, self.shape)):
      if all(type(b) is int and type(e) is int and type(s) is int for (b, e), s in zip(bounds, self.shape)):
        raise ValueError(f"shrink: {bounds} out of range for {self.shape}")
      # symbolic: checked at the bound values, as tinygrad does (the kernels serve other values unchecked)
      if any(not 0 <= bound_value(b) <= bound_value(e) <= bound_value(s) for (b, e), s in zip(bounds, self.shape)):
        raise ValueError(f"shrink: {bounds} out of range for {self.shape} at the bound values")
      if bounds == tuple((0, s) for s in self.shape): return self
      return self._smop(Ops.SHRINK, bounds)
    return self if bounds == tuple((0, s) for s in self.shape) else self._mop(Ops.SHRINK, bounds)

  def flip(self: Tensor, axis: int | Sequence[int], *args: int) -> Tensor:
    """Reverses the order of the given dimensions."""
    given = [self._resolve_dim(a) for a in (_dims((axis, *args)) if args else ((axis,) if isinstance(axis, int) else axis))]
    if len(set(given)) != len(given): raise RuntimeError(f"flip: a dimension appears more than once in {tuple(given)} (shape {self.shape})")
    return self if not given else self._mop(Ops.FLIP, tuple(i in given for i in range(self.ndim)))

  def transpose(self: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    order[self._resolve_dim(dim0)], order[self._resolve_dim(dim1)] = order[self._resolve_dim(dim1)], order[self._resolve_dim(dim0)]
    return self.permute(order)

  @property
  def T(self: Tensor) -> Tensor: return self.permute(tuple(range(self.ndim))[::-1])  # noqa: N802

  def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = self._resolve_dim(start_dim), self._resolve_dim(end_dim)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])

  def unflatten(self: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    d = self._resolve_dim(dim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

  def rearrange(self: Tensor, formula: str, **sizes: int) -> Tensor:
    """einops' rearrange: `"b c (h w) -> b (c h) w"`, giving the sizes of split axes (`h=4`); `...` stands for the
    dimensions not named, and `1` or `()` for an axis of size 1. A malformed formula raises AssertionError (as tinygrad
    and einops do); a formula that does not fit the shape raises RuntimeError or ValueError, as the reshape would."""
    if formula.count("->") != 1: raise AssertionError(f"rearrange: {formula!r} needs exactly one '->'")
    (lhs, lgrouped), (rhs, rgrouped) = (_einops_groups(side, formula) for side in formula.split("->"))
    left, right = [n for g in lhs for n in g], [n for g in rhs for n in g]
    if sorted(left) != sorted(right) or len(set(left)) != len(left):
      raise AssertionError(f"rearrange: both sides of {formula!r} must name the same axes, each once")
    if any("..." in g for g, grouped in zip(lhs, lgrouped) if grouped):
      raise AssertionError(f"rearrange: '...' can't be grouped on the left of {formula!r}")
    if unknown := set(sizes) - set(left): raise AssertionError(f"rearrange: sizes given for axes not in {formula!r}: {sorted(unknown)}")
    if "..." in left:  # the dimensions no name covers, an axis each (inside a group on the right: merged)
      if len(lhs) - 1 > self.ndim:
        raise RuntimeError(f"rearrange: {formula!r} names {len(lhs) - 1} dimensions, more than shape {self.shape}")
      ell = [f"...{i}" for i in range(self.ndim - len(lhs) + 1)]

      def spread(groups: list[list[str]], grouped: list[bool]) -> list[list[str]]:
        return [h for g, gr in zip(groups, grouped)
                for h in ([[n] for n in ell] if g == ["..."] and not gr else [[n for x in g for n in (ell if x == "..." else [x])]])]
      lhs, rhs = spread(lhs, lgrouped), spread(rhs, rgrouped)
      left, right = [n for g in lhs for n in g], [n for g in rhs for n in g]
    if len(lhs) != self.ndim:
      raise RuntimeError(f"rearrange: {formula!r} names {len(lhs)} dimensions, the shape {self.shape} has {self.ndim}")
    size: dict[str, int] = {}
    for g, d in zip(lhs, self.shape):
      if len(g) == 1 and g[0] in sizes and sizes[g[0]] != d:
        raise AssertionError(f"rearrange: size {sizes[g[0]]} given for axis {g[0]!r} of size {d} ({formula!r}, shape {self.shape})")
      known = prod(sizes[n] for n in g if n in sizes)
      free = [n for n in g if n not in sizes]
      if len(free) > 1: raise RuntimeError(f"rearrange: give the sizes of all but one of {free} ({formula!r}, shape {self.shape})")
      if (d % known if free else d != known):
        raise ValueError(f"rearrange: axes {g} don't split a dimension of {d} ({formula!r}, shape {self.shape})")
      size.update({n: sizes[n] for n in g if n in sizes} | ({free[0]: d // known} if free else {}))
    t = self.reshape(tuple(size[n] for n in left)).permute(tuple(left.index(n) for n in right))
    return t.reshape(tuple(prod(size[n] for n in g) for g in rhs))

  def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if resolve(s != 1)))
    given = [self._resolve_dim(d) for d in ((dim,) if isinstance(dim, int) else dim)]
    if len(set(given)) != len(given):
      raise RuntimeError(f"squeeze: a dimension appears more than once in {tuple(given)} (shape {self.shape})")
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in given or resolve(s != 1)))

  def unsqueeze(self: Tensor, dim: int) -> Tensor:
    d = self._resolve_dim(dim, extra=True)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])

  def repeat(self: Tensor, repeats: int | Sequence[int], *args: int) -> Tensor:
    reps = _dims((repeats, *args)) if args else ((repeats,) if isinstance(repeats, int) else tuple(repeats))
    if len(reps) < self.ndim: raise ValueError(f"repeat: {len(reps)} repeats for the {self.ndim} dimensions of {self.shape}")
    if any(r < 0 for r in reps): raise RuntimeError(f"repeat: negative repeats {reps} for shape {self.shape}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    t = self.reshape(tuple(x for s in base for x in (1, s)))
    t = t.expand(tuple(x for r, s in zip(reps, base) for x in (r, s)))
    return t.reshape(tuple(r * s for r, s in zip(reps, base)))

  def cat(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
    """Concatenates along `dim`: each piece is padded to the full length and the pieces are added. `Tensor.cat((a, b))`
    takes the tensors as one sequence too."""
    tensors = _tensors("cat", self, args)
    first = tensors[0]
    if first.ndim == 0: raise IndexError(f"cat: zero-dimensional tensors cannot be concatenated, got shapes {[t.shape for t in tensors]}")
    d = first._resolve_dim(dim)
    for t in tensors:
      if t.ndim != first.ndim or any(not sint_eq(a, b) for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d):
        raise RuntimeError(f"cat: shapes {[x.shape for x in tensors]} differ outside dimension {d}")
    if len(tensors) == 1: return first
    off: sint
    total, off, out = ssimplify(sum(t.shape[d] for t in tensors)), 0, None
    for t in tensors:
      p = t.pad(tuple((off, ssimplify(total - off - t.shape[d])) if i == d else None for i in range(t.ndim)))
      out, off = p if out is None else out + p, ssimplify(off + t.shape[d])
    return out  # type: ignore[return-value]

  def stack(self: Tensor | Sequence[Tensor], *args: Tensor, dim: int = 0) -> Tensor:
    """Joins tensors of one shape along a new dimension `dim`; `Tensor.stack((a, b))` takes them as one sequence too."""
    tensors = _tensors("stack", self, args)
    d = tensors[0]._resolve_dim(dim, extra=True)
    if any(t.ndim != tensors[0].ndim or not all(sint_eq(a, b) for a, b in zip(t.shape, tensors[0].shape)) for t in tensors):
      raise RuntimeError(f"stack: all tensors need the same shape, got {[t.shape for t in tensors]}")
    return tensors[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in tensors[1:]], dim=d)

  def split(self: Tensor, sizes: int | Sequence[int], dim: int = 0) -> tuple[Tensor, ...]:
    d = self._resolve_dim(dim)
    n = self.shape[d]
    if not isinstance(n, int): raise AssertionError(f"split: does not support symbolic shape in split dimension {d}: {self.shape}")
    if isinstance(sizes, int):
      if sizes <= 0 and n: raise RuntimeError(f"split: split size must be positive, got {sizes} for dimension {d} of {self.shape}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] if n else [0]
    if any(s < 0 for s in sizes) or sum(sizes) != n:
      raise RuntimeError(f"split: sizes {list(sizes)} must be >= 0 and add up to {n}, dimension {d} of {self.shape}")
    offs = [sum(sizes[:i]) for i in range(len(sizes))]
    return tuple(self.shrink(tuple((o, o + s) if i == d else None for i in range(self.ndim))) for o, s in zip(offs, sizes))

  def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
    """At most `chunks` pieces of ceil(n / chunks) along dim (the last may be smaller); an empty dimension gives `chunks`
    empty pieces."""
    if chunks <= 0: raise RuntimeError(f"chunk: chunks must be positive, got {chunks}")
    d = self._resolve_dim(dim)
    n = self.shape[d]
    if not isinstance(n, int): raise AssertionError(f"chunk: does not support symbolic shape in split dimension {d}: {self.shape}")
    return list(self.split(-(-n // chunks) if n else [0] * chunks, d))


def _tensors(op: str, first: Any, rest: tuple) -> list:
  """The tensors of cat/stack: self and the others, or (called on the class) one tuple or list of them."""
  if isinstance(first, (tuple, list)):
    if rest: raise ValueError(f"{op}: pass the tensors as one sequence or as separate arguments, not both")
    if not first: raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    return list(first)
  return [first, *rest]


def _einops_groups(side: str, formula: str) -> tuple[list[list[str]], list[bool]]:
  """One side of an einops formula as its dimensions, each the list of axis names it holds ([] for `1` or `()`), and
  whether each was written in parentheses."""
  groups: list[list[str]] = []
  grouped: list[bool] = []
  cur: list[str] | None = None
  for tok in side.replace("(", " ( ").replace(")", " ) ").replace("\u2026", "...").split():
    if tok == "(":
      if cur is not None: raise AssertionError(f"rearrange: nested parentheses in {formula!r}")
      cur = []
    elif tok == ")":
      if cur is None: raise AssertionError(f"rearrange: unbalanced parentheses in {formula!r}")
      groups.append(cur)
      grouped.append(True)
      cur = None
    elif tok == "1" or tok == "..." or (tok.isidentifier() and not tok.startswith("_") and not tok.endswith("_")):
      names = [] if tok == "1" else [tok]
      if cur is not None: cur += names
      else:
        groups.append(names)
        grouped.append(False)
    else: raise AssertionError(f"rearrange: {tok!r} is not an axis name ({formula!r})")
  if cur is not None: raise AssertionError(f"rearrange: unbalanced parentheses in {formula!r}")
  return groups, grouped
