"""The NULL device: schedules, lowers and renders kernels, but compiles and runs nothing (compile benchmarks)."""
from __future__ import annotations

from tinyhybrid.device import Allocator, Compiled, CompiledProgram
from tinyhybrid.renderer.cstyle import CRenderer


def _build(kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
  return [CompiledProgram(name, src, 0, lambda args, threads: None) for name, src in kernels]


def make_device(name: str) -> Compiled: return Compiled(name, Allocator(), CRenderer(), _build)
