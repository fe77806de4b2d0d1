"""The Tensor API on tensor-graph UOps, as tinygrad's UOp has it (`t.uop.sum(axis=0)`, `x.uop.softmax()`,
`grad.custom_kernel(...)`): tinygrad shares one set of mixins between the two classes. Here the API is written once, on
Tensor, and a UOp's method of it runs the Tensor method on the node and answers the result's node (the same graph a
Tensor program builds). tensor.py installs the methods, so the IR never imports the frontend; a name UOp has already
(its arithmetic, `where`, `cast`, the kernel DSL's) keeps its own meaning."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, cast

from tinyhybrid.mixin.api import TensorAPI

if TYPE_CHECKING:
  from tinyhybrid.uop.ops import UOp

# Tensor methods outside the mixins that have a meaning on a graph node; the rest (realize, numpy, backward, assign,
# to, shard, the training flags) are about a tensor's storage or autograd state, which a node does not have
_TENSOR_METHODS = ("contiguous", "contiguous_backward", "detach", "clone", "custom_kernel", "gradient", "sequential",
                   "element_size", "nbytes")
_STATE = frozenset({"manual_seed"})  # the global random seed: a Tensor class setting
_OPERATORS = ("__matmul__", "__rmatmul__", "__pow__", "__rpow__", "__invert__")  # those UOp arithmetic lacks


def _api_names(tensor: type) -> dict[str, Any]:
  """Every public method of the Tensor API, by name, as found on its class (function, classmethod or property)."""
  found: dict[str, Any] = {}
  for cls in TensorAPI.__mro__:
    for name, member in vars(cls).items():
      if not name.startswith("_") and name not in _STATE: found.setdefault(name, member)
  found.update({name: getattr(tensor, name) for name in _TENSOR_METHODS + _OPERATORS})
  return found


def install(uop: type, tensor: type) -> None:
  """Gives `uop` every Tensor API method it lacks, each run through `tensor`."""
  def to_tensor(x: Any) -> Any:
    # a node with a device or a shape is a value (a tensor's graph); one without is a constant or a symbolic size,
    # which the Tensor methods take as they are
    if isinstance(x, uop) and (cast(Any, x).shape or cast(Any, x).device is not None): return tensor(x)
    if isinstance(x, (list, tuple)) and any(isinstance(v, uop) for v in x): return type(x)(to_tensor(v) for v in x)
    return x

  def to_uop(x: Any) -> Any:
    if isinstance(x, tensor): return cast(Any, x).uop
    if isinstance(x, (list, tuple)) and any(isinstance(v, tensor) for v in x): return type(x)(to_uop(v) for v in x)
    return x

  def lifted(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def method(self: UOp, *args: Any, **kwargs: Any) -> Any:
      args, kwargs = tuple(to_tensor(a) for a in args), {k: to_tensor(v) for k, v in kwargs.items()}
      return to_uop(getattr(tensor(self), name)(*args, **kwargs))
    return method

  def lifted_static(name: str) -> Callable:
    def build(*args: Any, **kwargs: Any) -> Any: return to_uop(getattr(tensor, name)(*args, **kwargs))
    build.__name__ = build.__qualname__ = name
    return staticmethod(build)

  # the kernel DSL's indexing and reshapes defer to this for a tensor's graph node (KernelDSL._tensor_node)
  def tensor_api(self: UOp, name: str, *args: Any, **kwargs: Any) -> Any: return lifted(name, getattr(tensor, name))(self, *args, **kwargs)
  setattr(uop, "_tensor_api", tensor_api)  # noqa: B010 (a name mypy can not see on UOp)
  for name, member in _api_names(tensor).items():
    if hasattr(uop, name): continue
    if isinstance(member, property): setattr(uop, name, property(lambda self, n=name: to_uop(getattr(tensor(self), n))))
    elif isinstance(member, (classmethod, staticmethod)): setattr(uop, name, lifted_static(name))
    else: setattr(uop, name, lifted(name, member))
