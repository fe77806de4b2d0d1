"""The Python UOp class: the C++ node type, plus tinygrad's Python-side conveniences."""
from __future__ import annotations

from typing import Any

from tinyhybrid import _core
from tinyhybrid.uop import Ops


class UOp(_core.UOp):
  """A node of the UOp graph: UOp(op, dtype=None, src=(), arg=None, tag=None).

  Nodes are interned: building the same (op, dtype, src, arg, tag) twice gives the same object."""
  __slots__ = ()

  def f(self, op: Ops, **kwargs: Any) -> UOp:
    return UOp(op, kwargs.pop("dtype", self.dtype), (self,), **kwargs)


_core.register_uop_class(UOp)
Variable = UOp
sint = int | UOp


def ssimplify(x: sint) -> sint:
  """x simplified, as a Python int when it is constant (ints pass through)."""
  return x.ssimplify() if isinstance(x, UOp) else x


def sym_infer(x: sint, var_vals: dict) -> int:
  """The value of x with its variables set (ints pass through)."""
  return _core.sym_infer(x, var_vals) if isinstance(x, UOp) else x
