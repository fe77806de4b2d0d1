"""Compiling C kernels with the system compiler, cached on disk by source and compiler."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CFLAGS = ("-O2", "-march=native", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")


@functools.cache
def c_compiler() -> str:
  """CC if set, else clang when found, else gcc."""
  if cc := os.getenv("CC"): return cc
  for cand in ("clang", "gcc", "cc"):
    if shutil.which(cand): return cand
  raise RuntimeError("no C compiler found: install clang or gcc, or set CC")


@functools.cache
def _compiler_id(cc: str) -> str:
  try: return subprocess.run([cc, "--version"], capture_output=True, text=True, check=True).stdout.splitlines()[0]
  except (OSError, subprocess.CalledProcessError) as e: raise RuntimeError(f"C compiler {cc!r} does not run: {e}") from e


def is_clang() -> bool:
  """Whether the kernel compiler is clang (vector kernels use its ext_vector_type)."""
  return "clang" in _compiler_id(c_compiler())


def cache_root() -> Path:
  """Where compiled kernels and BEAM's choices are kept (TINYHYBRID_CACHE overrides)."""
  return Path(os.getenv("TINYHYBRID_CACHE", Path.home() / ".cache" / "tinyhybrid"))


def compiler_key() -> str:
  """The compiler and its version, for cache keys."""
  cc = c_compiler()
  return f"{cc}\0{_compiler_id(cc)}"


def cache_dir() -> Path:
  d = cache_root() / "kernels"
  d.mkdir(parents=True, exist_ok=True)
  return d


class CompileError(RuntimeError):
  """A kernel failed to compile: carries the compiler's message and the kernel's source."""


def compile_shared(src: str, name: str) -> Path:
  """The path of a shared library built from `src` (from the cache when the same source and compiler built it)."""
  cc = c_compiler()
  key = hashlib.sha256("\0".join((src, compiler_key(), *CFLAGS)).encode()).hexdigest()[:24]
  out = cache_dir() / f"{name}-{key}.so"
  if out.exists(): return out
  with tempfile.TemporaryDirectory() as tmp:
    c_file, so_tmp = Path(tmp) / f"{name}.c", Path(tmp) / f"{name}.so"
    c_file.write_text(src)
    res = subprocess.run([cc, *CFLAGS, "-o", str(so_tmp), str(c_file), "-lm"], capture_output=True, text=True)
    if res.returncode != 0:
      raise CompileError(f"kernel {name} failed to compile with {cc}:\n{res.stderr.strip()}\n--- source ---\n{src}")
    os.replace(so_tmp, out)  # atomic: concurrent compiles of the same kernel never see a partial file
  return out


KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32, ctypes.c_uint32)


def load_kernel(path: Path, name: str) -> tuple[ctypes.CDLL, int]:
  lib = ctypes.CDLL(str(path))
  return lib, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
