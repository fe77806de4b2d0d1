"""The CPU device: C kernels compiled with the system compiler, run on the host's cores."""
from __future__ import annotations

from tinyhybrid.device import Allocator, Compiled, CompiledProgram, to_ctypes_words
from tinyhybrid.renderer.cstyle import CRenderer
from tinyhybrid.runtime.compiler import KERNEL_FN, compile_shared, load_kernel


def _compile(name: str, src: str) -> CompiledProgram:
  lib, addr = load_kernel(compile_shared(src, name), name)
  fn = KERNEL_FN(addr)

  def call(args: list[int], threads: int) -> None:
    words = to_ctypes_words(args)
    for core in range(threads): fn(words, core, threads)
  return CompiledProgram(name, src, addr, call, keepalive=(lib, fn))


def make_device(name: str) -> Compiled: return Compiled(name, Allocator(), CRenderer(), _compile)
