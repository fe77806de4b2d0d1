"""Reverse-mode autodiff over the tensor graph: one derivative rule per op, applied from the output back to the
targets. The rules build ordinary tensor-graph nodes, so gradients are lazy and fuse like any other computation.

A composite function (pow, sigmoid, clip, ...) may carry its own rule, torch's formula, on its output node
(with_gradient): the chain rule through its pieces meets 0 * inf at extreme inputs and picks one side of a tie or a
kink where torch has a fixed convention. The node's tag names the rule, its constant parameters and the paths (src
indices) from the node down to the rule's inputs: it is part of the graph, so it costs the forward pass nothing, it
survives substitutions (a realize rewrites the graphs around it), and the same function of the same inputs is the
same node. A node's Python object can not hold it: that object dies with the last Python reference to it, while the
node lives on in the graphs that use it."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from tinyhybrid.dtype import dtypes
from tinyhybrid.uop import Ops
from tinyhybrid.schedule.multi import select_shard
from tinyhybrid.uop.ops import UOp
from tinyhybrid.uop.shape import shape_of

if TYPE_CHECKING:
  from tinyhybrid.tensor import Tensor

Grads = tuple["Tensor | None", ...]
Rule = Callable[..., Grads]  # rule(g, out, inputs, *params)
_GRAD_TAG = "grad"
_named_rules: dict[str, Rule] = {}
_rule_names: dict[Rule, str] = {}


def grad_rule(rule: Rule) -> Rule:
  """Registers a derivative rule for with_gradient under its qualified name (what a node's tag holds)."""
  name = f"{rule.__module__}.{rule.__qualname__}"
  _named_rules[name], _rule_names[rule] = rule, name
  return rule


def outputs_grad_rule(rule: Rule) -> Rule:
  """A grad_rule for one computation with several outputs (a custom kernel's): each output's node carries it with the
  same params and inputs and its output index last, and the rule runs once, given every output's gradient in output
  order (None where an output has none) in place of g: rule(gs, out, inputs, *params)."""
  _outputs_rules.add(rule)
  return grad_rule(rule)


_outputs_rules: set[Rule] = set()


def with_gradient(out: Tensor, inputs: tuple[Tensor, ...], rule: Rule, *params: Any) -> Tensor:
  """out, whose gradient is rule(g, out, inputs, *params) (one entry per input, None for none) instead of the chain
  rule through the nodes between out and inputs. rule is a grad_rule, params are plain constants (they go in the tag,
  so a rule's node is the same node wherever the same function is built). out must be computed from the inputs."""
  if any(out.uop is i.uop for i in inputs): return out  # the function is the identity here (x ** 1): no node of its own
  paths = _paths(out.uop, [i.uop for i in inputs])
  if paths is None: return out
  return out._wrap(out.uop.replace(tag=(_GRAD_TAG, _rule_names[rule], tuple(params), paths)), out.shape)


def _paths(root: UOp, inputs: list[UOp]) -> tuple[tuple[int, ...], ...] | None:
  """For each input, the src indices leading from root down to it (breadth first: the shortest), or None."""
  found: dict[UOp, tuple[int, ...]]
  want, found = set(inputs), {}
  level: list[tuple[UOp, tuple[int, ...]]] = [(root, ())]
  seen = {root}
  while level and len(found) < len(want):
    nxt = []
    for u, path in level:
      for i, s in enumerate(u.src):
        if s in seen: continue
        seen.add(s)
        if s in want: found[s] = path + (i,)
        else: nxt.append((s, path + (i,)))
    level = nxt
  return tuple(found[i] for i in inputs) if len(found) == len(want) else None


def _custom(u: UOp) -> tuple[Rule, tuple, tuple[UOp, ...]] | None:
  """The rule a node's tag names, its params and its inputs (found along the tag's paths), or None. A path that no
  longer leads through the function's own nodes (one of them realized: an AFTER or a buffer now) gives None, and the
  node's gradient is the chain rule through its pieces."""
  tag = u.tag
  if type(tag) is not tuple or len(tag) != 4 or tag[0] != _GRAD_TAG: return None
  inputs = []
  for path in tag[3]:
    n = u
    for i in path:
      if i >= len(n.src) or (n is not u and n.op in (Ops.AFTER, Ops.BUFFER)): return None
      n = n.src[i]
    inputs.append(n)
  return _named_rules[tag[1]], tag[2], tuple(inputs)


def _interior(u: UOp, inputs: tuple[UOp, ...]) -> set[UOp]:
  """The nodes strictly between u and its rule's inputs (what the rule steps over)."""
  stop, seen, stack = set(inputs), set(), list(u.src)
  while stack:
    n = stack.pop()
    if n in stop or n in seen: continue
    seen.add(n)
    stack.extend(n.src)
  return seen


def _expanded_axes(src_shape: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
  return tuple(i for i, (s, n) in enumerate(zip(src_shape, shape)) if s != n)


def _rules() -> dict[Ops, Callable[[Tensor, Tensor, list[Tensor]], Grads]]:
  ln2 = math.log(2)
  def max_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    # torch's: the larger side takes it, a tie splits it in half, and with a NaN (no order) both take it
    a, b = x
    half = (a == b).where(g * 0.5, g)
    return (a < b).where(0, half), (b < a).where(0, half)
  def reduce_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    op, axes = out.uop.arg
    src = x[0]
    ge = g.expand(src.shape)
    if op is Ops.ADD: return (ge,)
    if op is Ops.MAX:
      # spread evenly over the elements equal to the max (over the NaNs where it is NaN), as torch's amax
      hit = src == (mx := out.expand(src.shape))
      if src.dtype._is_float: hit = hit | (src.isnan() & mx.isnan())
      hit = hit.cast(g.dtype)
      return (hit * ge / hit.sum(axes, keepdim=True).expand(src.shape),)
    if op is Ops.MUL:
      # d(prod x)/dx_j is the product of the others: out / x_j without zeros; with one zero, the others' product at
      # the zero and 0 elsewhere; with two or more, 0 everywhere
      zero = src == 0
      nzero = zero.cast(dtypes.int32).sum(axes, keepdim=True).expand(src.shape)
      others = zero.where(1, src).prod(axes, keepdim=True).expand(src.shape)
      return (ge * zero.where((nzero == 1).where(others, 0), out.expand(src.shape) / zero.where(1, src)),)
    raise NotImplementedError(f"gradient of REDUCE {op}")
  def expand_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    axes = _expanded_axes(x[0].shape, out.shape)
    # summed in the accumulator dtype (float32 for half and bfloat16) as torch does, then back to the gradient's dtype
    return (g.sum(axes, keepdim=True).cast(g.dtype) if axes else g,)
  def mstack_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    # each source gets its device's shard of the gradient; a replica's copies are one value, whose gradient is taken
    # once (source 0's), not once per device
    devices, axis = out.uop.arg
    def shard(i: int) -> Tensor:
      t = g._wrap(select_shard(g.uop, devices, i, axis))
      t.device = devices[i]
      return t
    return tuple(None if axis is None and i else shard(i) for i in range(len(x)))
  def mselect_grad(g: Tensor, out: Tensor, x: list[Tensor]) -> Grads:
    # the whole value taken (axis None): its gradient is g on every device; one shard taken: g there, zeros elsewhere
    devices, i, axis = out.uop.arg
    if axis is None: return (g.shard(devices),)
    zero = g.zeros_like().uop
    t = g._wrap(UOp(Ops.MSTACK, g.dtype, tuple(g.uop if j == i else zero for j in range(len(devices))), (devices, axis)))
    t.device = devices
    return (t,)
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
    Ops.FDIV: lambda g, out, x: (g / x[1], -g * out / x[1]),
    Ops.SQRT: lambda g, out, x: (g / (2 * out),),
    Ops.EXP2: lambda g, out, x: (g * out * ln2,),
    Ops.LOG2: lambda g, out, x: (g / (x[0] * ln2),),
    Ops.SIN: lambda g, out, x: (g * x[0].cos(),),
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
    Ops.COPY: lambda g, out, x: (g.to(x[0].device),),  # the gradient goes back to where the value came from
    Ops.MSTACK: mstack_grad,
    Ops.MSELECT: mselect_grad,
  }


_RULES = _rules()
_NO_GRAD = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.DETACH, Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.AND, Ops.OR, Ops.XOR,
            Ops.SHL, Ops.SHR, Ops.FLOORDIV, Ops.FLOORMOD, Ops.CDIV, Ops.CMOD, Ops.BITCAST}


def compute_gradient(root: Tensor, root_grad: Tensor, targets: list[UOp]) -> dict[UOp, Tensor]:
  """d(root)/d(target) for each target node reached from root, given d(loss)/d(root) = root_grad. A target in the
  graph that only comparisons, casts to int and the like lead to (sign, a mask) gets zeros, as in tinygrad and torch."""
  target_set = set(targets)
  nodes = list(root.uop.toposort())
  # only nodes on a path to a target need a gradient
  on_path: dict[UOp, bool] = {}
  for u in nodes: on_path[u] = u in target_set or any(on_path[s] for s in u.src)
  grads: dict[UOp, Tensor] = {root.uop: root_grad}
  # a graph across devices (copies, sharded values) has nodes on other devices than the root's: each node's tensor
  # is put on its own (a constant, which has none, on its user's)
  across = any(u.op is Ops.COPY or u.op is Ops.MSTACK or u.op is Ops.MSELECT for u in nodes)

  def wrap(u: UOp, user: Tensor | None = None) -> Tensor:
    t = root._wrap(u)
    if across: t.device = d if (d := u.device) is not None else (root if user is None else user).device
    return t
  # the outputs of one computation with an outputs_grad_rule, in graph order: the rule runs at the first of them, the
  # last one reached from the root, when every output's gradient is complete
  customs = {u: c for u in nodes if u.tag is not None and on_path[u] and (c := _custom(u)) is not None}
  outputs: dict[tuple, list[UOp]] = {}
  for u, c in customs.items():
    if c[0] in _outputs_rules: outputs.setdefault((c[0], c[1][:-1], c[2]), []).append(u)
  last_output = {group[0]: group for group in outputs.values()}
  rule: Rule | None
  for u in reversed(nodes):
    if not on_path[u] or (u not in grads and u not in last_output): continue
    custom = customs.get(u)
    # a target between the node and its rule's inputs needs the chain rule through the pieces
    if custom is not None and not target_set.isdisjoint(_interior(u, custom[2])): custom = None
    if custom is not None:
      rule, params, src = custom
      if rule in _outputs_rules:
        if (group := last_output.get(u)) is None: continue  # its gradient goes with the other outputs'
        gs: list[Tensor | None] = [None] * (1 + max(m.tag[2][-1] for m in group))
        for m in group: gs[m.tag[2][-1]] = grads.get(m)
        if not any(g is not None for g in gs): continue
        g_in: Any = gs
        params = params[:-1]
      else: g_in = grads[u]
    else:
      if u.op in _NO_GRAD: continue
      rule, params, src, g_in = _RULES.get(u.op), (), u.src, grads[u]
      if rule is None: raise NotImplementedError(f"no gradient for {u.op.name}")
    if not any(on_path[s] for s in src): continue
    out = wrap(u, grads[u] if u in grads else next(g for g in g_in if g is not None))
    for s, g in zip(src, rule(g_in, out, [wrap(x, out) for x in src], *params)):
      if g is None or not on_path[s]: continue
      if g.dtype is not s.dtype and s.dtype._is_float and not s.dtype._is_weak: g = g.cast(s.dtype)
      if (shape := shape_of(s)) != g.shape:  # a node with a gradient has a shape
        g = g.sum() if shape == () else g.reshape(shape)  # type: ignore[arg-type]  # (a 0-d source broadcast by its ALU)
      grads[s] = grads[s] + g if s in grads else g
  for t in targets:
    if t not in grads and t in on_path: grads[t] = wrap(t).zeros_like()
  return {t: grads[t] for t in targets if t in grads}
