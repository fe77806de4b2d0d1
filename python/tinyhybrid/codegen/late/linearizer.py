"""A kernel as a list of nodes in program order (tinygrad's linearize). The renderers here write a kernel straight
from its graph, nesting each node in the loops of the ranges it depends on; this order is theirs: every node after
its sources, a loop's body after the RANGE that opens it and before the END that closes it."""
from __future__ import annotations

from tinyhybrid.uop.ops import UOp


def linearize(sink: UOp) -> list[UOp]:
  """The kernel's nodes, each after its sources (the SINK last)."""
  return list(sink.toposort())
