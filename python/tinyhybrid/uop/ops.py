"""The Python UOp class: the C++ node type, plus tinygrad's Python-side conveniences."""
from __future__ import annotations

from typing import Any

from tinyhybrid import _core
from tinyhybrid.uop import Ops


class UOp(_core.UOp):
  """A node of the UOp graph: UOp(op, dtype=None, src=(), arg=None, tag=None).

  Nodes are interned: building the same (op, dtype, src, arg, tag) twice gives the same object."""
  __slots__ = ()

  @property
  def vmin_vmax_known(self) -> bool: return False

  def f(self, op: Ops, **kwargs: Any) -> UOp:
    return UOp(op, kwargs.pop("dtype", self.dtype), (self,), **kwargs)


_core.register_uop_class(UOp)
Variable = UOp
sint = int | UOp
