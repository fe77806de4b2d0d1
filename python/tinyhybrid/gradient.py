"""Reverse-mode autodiff over the tensor graph: one derivative rule per op, applied from the output back to the
targets. The rules build ordinary tensor-graph nodes, so gradients are lazy and fuse like any other computation."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Grads = tuple["Tensor | None", ...]


def _expanded_axes(src_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
  return tuple(i for i, (s, n) in enumerate(zip(src_shape, shape)) if s != n)


def _rules() -> dict[Ops, Callable[[Tensor, Tensor, list[Tensor]], Grads]]:
  ln2 = math.log(2)
  def max_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    a, b = x
    tie = (a == b).cast(g.dtype) * 0.5
    return (a > b).where(g, g * tie), (b > a).where(g, g * tie)
  def reduce_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    op, axes = out.uop.arg
    src = x[0]
    ge = g.expand(src.shape)
    if op is Ops.ADD: return (ge,)
    if op is Ops.MAX:
      hit = (src == out.expand(src.shape)).cast(g.dtype)
      return (hit * ge / hit.sum(axes, keepdim=True).expand(src.shape),)
    if op is Ops.MUL: return ((out.expand(src.shape) * ge) / src,)
    raise NotImplementedError(f"gradient of REDUCE {op}")
  def expand_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    axes = _expanded_axes(x[0].shape, out.shape)
    return (g.sum(axes, keepdim=True, dtype=g.dtype) if axes else g,)
  def permute_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    order = out.uop.arg
    inv = [0] * len(order)
    for i, a in enumerate(order): inv[a] = i
    return (g.permute(inv),)
  return {
    Ops.ADD: lambda g, out, x: (g, g),
    Ops.MUL: lambda g, out, x: (g * x[1], g * x[0]),
    Ops.MAX: max_grad,
    Ops.WHERE: lambda g, out, x: (None, x[0].where(g, 0), x[0].where(0, g)),
    Ops.RECIPROCAL: lambda g, out, x: (-g * out * out,),
    Ops.SQRT: lambda g, out, x: (g / (2 * out),),
    Ops.EXP2: lambda g, out, x: (g * out * ln2,),
    Ops.LOG2: lambda g, out, x: (g / (x[0] * ln2),),
    Ops.SIN: lambda g, out, x: (g * (math.pi / 2 - x[0]).sin(),),
    Ops.TRUNC: lambda g, out, x: (g.zeros_like(),),
    Ops.CAST: lambda g, out, x: (g.cast(x[0].dtype),) if x[0].dtype._is_float else (None,),
    Ops.CONTIGUOUS: lambda g, out, x: (g,),
    Ops.AFTER: lambda g, out, x: (None, g),  # a realized tensor: its gradient flows into how it was computed
    Ops.CONTIGUOUS_BACKWARD: lambda g, out, x: (g.contiguous(),),
    Ops.RESHAPE: lambda g, out, x: (g.reshape(x[0].shape),),
    Ops.PERMUTE: permute_grad,
    Ops.EXPAND: expand_grad,
    Ops.PAD: lambda g, out, x: (g.shrink(tuple((b, b + s) for (b, _), s in zip(out.uop.arg, x[0].shape))),),
    Ops.SHRINK: lambda g, out, x: (g.pad(tuple((b, s - e) for (b, e), s in zip(out.uop.arg, x[0].shape))),),
    Ops.FLIP: lambda g, out, x: (g.flip(tuple(i for i, f in enumerate(out.uop.arg) if f)),),
    Ops.REDUCE: reduce_grad,
  }


_RULES = _rules()
_NO_GRAD = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.DETACH, Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.AND, Ops.OR, Ops.XOR,
            Ops.SHL, Ops.SHR, Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD, Ops.BITCAST}


def compute_gradient(root: Tensor, root_grad: Tensor, targets: list[UOp]) -> dict[UOp, Tensor]:
  """d(root)/d(target) for each target node reached from root, given d(loss)/d(root) = root_grad."""
  target_set = set(targets)
  nodes = list(root.uop.toposort())
  # only nodes on a path to a target need a gradient
  on_path: dict[UOp, bool] = {}
  for u in nodes: on_path[u] = u in target_set or any(on_path[s] for s in u.src)
  grads: dict[UOp, Tensor] = {root.uop: root_grad}
  for u in reversed(nodes):
    if u not in grads or u.op in _NO_GRAD or not any(on_path[s] for s in u.src): continue
    rule = _RULES.get(u.op)
    if rule is None: raise NotImplementedError(f"no gradient for {u.op.name}")
    out = root._wrap(u)
    srcs = [root._wrap(s) for s in u.src]
    for s, g in zip(u.src, rule(grads[u], out, srcs)):
      if g is None or not on_path[s]: continue
      if shape_of(s) != g.shape: g = g.reshape(shape_of(s))
      grads[s] = grads[s] + g if s in grads else g
  return {t: grads[t] for t in targets if t in grads}
