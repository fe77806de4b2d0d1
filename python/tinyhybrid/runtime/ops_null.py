"""The NULL device: schedules, lowers and renders kernels, but runs nothing (compile benchmarks). Plain NULL renders C
and compiles nothing. With a renderer and an architecture in tinygrad's target syntax it is a compile-only GPU:
NULL:CUDA:sm_90 renders CUDA C++ and compiles every kernel with NVRTC for sm_90, NULL:PTX:sm_90 renders PTX and
assembles it with ptxas; neither needs a GPU or a driver. Its `compiler` is the real one (compile(src) -> bytes)."""
from __future__ import annotations

import time
from typing import Any

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, ProfileEvent, Target, profile_events
from tinyhybrid.helpers import PROFILE
from tinyhybrid.renderer.cstyle import CRenderer


def _program(device: str, name: str, src: str) -> CompiledProgram:
  def call(args: list[int], launch: Any) -> None:
    # nothing runs; PROFILE=1 still shows each launch, as a span of no length on the host's clock
    if PROFILE:
      now = time.monotonic_ns()
      profile_events.append(ProfileEvent(name, device, now, now))
  return CompiledProgram(name, src, 0, call)


class NullDevice(Compiled):
  """A device that compiles with `compiler` (None: nothing) and runs nothing."""
  def __init__(self, name: str, renderer: Any, compiler: Any = None):
    self.compiler = compiler
    super().__init__(name, Allocator(), renderer, self._build)

  def _build(self, kernels: list[tuple[str, str]]) -> list[CompiledProgram]:
    if self.compiler is not None:
      from tinyhybrid.runtime.cuda_compiler import build_kernels
      build_kernels(self.compiler, kernels)
    return [_program(self.name, name, src) for name, src in kernels]


def make_device(name: str) -> Compiled:
  t = Target.parse(name)
  if t.renderer is None:
    if t.arch is not None: raise ValueError(f"{name}: an architecture needs a renderer (NULL:CUDA:sm_90, NULL:PTX:sm_90)")
    return NullDevice(name, CRenderer())
  if t.renderer not in ("CUDA", "PTX"): raise ValueError(f"{name}: the NULL device compiles CUDA C++ or PTX (NULL:CUDA:sm_90, NULL:PTX:sm_90)")
  arch = t.arch or "sm_90"
  from tinyhybrid.runtime.cuda_compiler import CUDACompiler, PTXCompiler
  if t.renderer == "CUDA":
    from tinyhybrid.renderer.cuda import CUDARenderer
    return NullDevice(name, CUDARenderer(arch), CUDACompiler(arch))
  from tinyhybrid.renderer.ptx import PTXRenderer
  return NullDevice(name, PTXRenderer(arch), PTXCompiler(arch))
