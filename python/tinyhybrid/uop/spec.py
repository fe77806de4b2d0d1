"""SPEC: each pass boundary checks its graph against the type rules of every op (the rules live in C++, next to the
checks node construction makes: src/cpp/ir/spec.cpp). SPEC=1 checks the rules every stage obeys, SPEC=2 adds the
stricter rules of the late stages. A violation raises RuntimeError naming the pass, the stage, the op and the rule,
with the smallest failing subgraph.

The stages: "tensor graph" (what the scheduler gets), "kernel graph" (one kernel's graph, before lowering), "lowered"
(the kernel IR the optimizer leaves) and "linearized" (the order the renderer emits)."""
from __future__ import annotations

from typing import Sequence

from tinyhybrid import _core
from tinyhybrid.helpers import SPEC
from tinyhybrid.uop.ops import UOp


def spec_check(root: UOp, stage: str, pass_name: str) -> None:
  """Check the graph under root at `stage`, when SPEC is set."""
  if (level := int(SPEC.value)) > 0: _core.spec_check(root, stage, level, pass_name)


def spec_check_linear(program: Sequence[UOp], pass_name: str) -> None:
  """Check a linearized program (sources must come before their users), when SPEC is set."""
  if (level := int(SPEC.value)) > 0: _core.spec_check_linear(program, level, pass_name)
