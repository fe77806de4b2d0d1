"""The NULL device: schedules, lowers and renders kernels, but runs nothing (compile benchmarks). Plain NULL renders C
and compiles nothing. With a renderer and an architecture in tinygrad's target syntax it is a compile-only GPU:
NULL:CUDA:sm_90 renders CUDA C++ and compiles every kernel with NVRTC for sm_90, NULL:PTX:sm_90 renders PTX and
assembles it with ptxas; neither needs a GPU or a driver. Its `compiler` is the real one (compile(src) -> bytes)."""
from __future__ import annotations

from typing import Any

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, Target
from tinyhybrid.renderer.cstyle import CRenderer


def _noop(args: list[int], launch: Any) -> None: pass


def _build(kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
  return [CompiledProgram(name, src, 0, _noop) for name, src in kernels]


class NullDevice(Compiled):
  """A device that compiles with `compiler` (None: nothing) and runs nothing."""
  def __init__(self, name: str, renderer: Any, compiler: Any = None):
    self.compiler = compiler
    super().__init__(name, Allocator(), renderer, _build if compiler is None else self._compile)

  def _compile(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    from tinyhybrid.runtime.cuda_compiler import build_kernels
    build_kernels(self.compiler, kernels)
    return _build(kernels)


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is None:
    if t.arch is not None: raise ValueError(f"{name}: an architecture needs a renderer (NULL:CUDA:sm_90, NULL:PTX:sm_90)")
    return NullDevice(name, CRenderer())
  arch = t.arch or "sm_90"
  from tinyhybrid.runtime.cuda_compiler import CUDACompiler, PTXCompiler
  if t.renderer == "CUDA":
    from tinyhybrid.renderer.cuda import CUDARenderer
    return NullDevice(name, CUDARenderer(arch), CUDACompiler(arch))
  from tinyhybrid.renderer.ptx import PTXRenderer
  return NullDevice(name, PTXRenderer(arch), PTXCompiler(arch))
