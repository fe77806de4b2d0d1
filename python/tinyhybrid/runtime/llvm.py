"""Compiling LLVM IR in this process with llvmlite (DEV=CPU:LLVM, renderer/llvmir.py): no compiler process, and no C
compiler needed on the machine. A batch's modules are parsed, linked into one, optimized for this host's CPU and its
features (a short list of passes, see _PASSES) and emitted as an ELF object that runtime/elf.py loads
as it loads the C compiler's; built objects are cached on disk as the C compiler's are (runtime/compiler.py)."""
from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Any

from tinyhybrid.device import CompileError
from tinyhybrid.runtime import diskcache
from tinyhybrid.runtime.compiler import Toolchain

_FORMAT = "llvm-object-1"  # part of every cache key: a change in how IR becomes an object never loads an old one
# The passes a kernel's IR goes through before code generation. Not clang's -O2 pipeline: the renderer has done what
# most of it is for (its vectors are explicit, each value is placed in the outermost loop it can be, loops are unrolled
# as the kernel's plan says), and -O2 costs 5 ms a kernel where these cost 1 (bench/cpu_backends.py). What is left:
# inline the body into the ABI's function, turn stack slots into SSA values, fold and simplify, merge repeated values.
_PASSES = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg", "new_gvn", "instruction_combine", "aggressive_dce",
           "simplify_cfg")


@functools.cache
def llvm() -> Any:
  """llvmlite's binding, its native target initialized (once)."""
  try: import llvmlite.binding as binding
  except ImportError:
    raise RuntimeError("the CPU device's LLVM renderer (DEV=CPU:LLVM) needs llvmlite: pip install 'tinyhybrid[llvm]'") from None
  binding.initialize_native_target()
  binding.initialize_native_asmprinter()
  return binding


@functools.cache
def host() -> tuple[str, str, str]:
  """This process's target triple, CPU name and CPU features, as LLVM reads them."""
  b = llvm()
  return b.get_process_triple(), b.get_host_cpu_name(), b.get_host_cpu_features().flatten()


_machines = threading.local()  # a target machine per thread: LLVM's code generation is not shared between threads


def _machine() -> Any:
  if (tm := getattr(_machines, "tm", None)) is None:
    triple, cpu, features = host()
    # position-independent, as the C compiler's objects (-fPIC): calls to libm go through the loader's table
    tm = _machines.tm = llvm().Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=2, reloc="pic", codemodel="small")
  return tm


@functools.cache
def _key() -> str:
  import llvmlite
  return "\0".join(("llvmlite", llvmlite.__version__, ".".join(map(str, llvm().llvm_version_info)), *host(), _FORMAT))


class LLVMToolchain(Toolchain):
  def key(self) -> str: return _key()

  def build(self, kernels: list[tuple[str, str, str]], out: Path, what: str) -> None:
    b, tm = llvm(), _machine()
    ctx = b.create_context()  # a context per build: builds run in several threads at once
    module = None
    for name, sym, src in kernels:
      try:
        m = b.parse_assembly(src, context=ctx)
        m.verify()
      except RuntimeError as e: raise CompileError(f"kernel {name}: LLVM rejects its IR: {e}\n--- source ---\n{src}") from None
      m.get_function(name).name = sym
      if module is None: module = m
      else: module.link_in(m)
    assert module is not None, "an empty batch"
    module.triple, module.data_layout = host()[0], str(tm.target_data)
    builder = b.create_pass_builder(tm, b.create_pipeline_tuning_options(speed_level=2))
    passes = b.create_new_module_pass_manager()
    for name in _PASSES: getattr(passes, f"add_{name}_pass")()
    passes.run(module, builder)
    diskcache.write(out, tm.emit_object(module))


LLVM_TOOLCHAIN = LLVMToolchain()
