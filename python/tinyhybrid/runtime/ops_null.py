"""The NULL device: schedules, lowers and renders kernels, but compiles and runs nothing (compile benchmarks)."""
from __future__ import annotations

import time

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, ProfileEvent, profile_events
from tinyhybrid.helpers import PROFILE
from tinyhybrid.renderer.cstyle import CRenderer


def _program(device: str, name: str, src: str) -> CompiledProgram:
  def call(args: list[int], threads: int) -> None:
    # nothing runs; PROFILE=1 still shows each launch, as a span of no length on the host's clock
    if PROFILE:
      now = time.monotonic_ns()
      profile_events.append(ProfileEvent(name, device, now, now))
  return CompiledProgram(name, src, 0, call)


def make_device(name: str) -> Compiled:
  return Compiled(name, Allocator(), CRenderer(), lambda kernels: [_program(name, n, src) for n, src in kernels])
