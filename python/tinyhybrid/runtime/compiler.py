"""Compiling C kernels with the system compiler, cached on disk by source and compiler. On x86-64 Linux a batch is
compiled to an object file that runtime/elf.py loads into this process (no linker run); elsewhere to a shared library
that the dynamic loader opens."""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from tinyhybrid.device import CompileError
from tinyhybrid.runtime import diskcache
from tinyhybrid.runtime.elf import ElfError, LoadedObject, NeedsLinker, load_object
from tinyhybrid.digest import sha256

CFLAGS = ("-O2", "-march=native", "-shared", "-fPIC", "-ffp-contract=off", "-fno-math-errno")
IN_PROCESS = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
LIB_SUFFIX = ".o" if IN_PROCESS else ".so"  # what a cached kernel build is


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


@functools.cache
def _flags() -> tuple[str, ...]:
  """CFLAGS for this compiler. gcc 12 writes AVX512-FP16 moves with masks that binutils 2.40 does not assemble
  ("unsupported masking for `vmovsh'"), so where the host has AVX512-FP16 gcc computes halves through F16C instead."""
  cc = c_compiler()
  if is_clang(): return CFLAGS
  try: target = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True).stdout
  except OSError: return CFLAGS
  return CFLAGS + ("-mno-avx512fp16",) if re.search(r"-mavx512fp16\s+\[enabled\]", target) else CFLAGS


def compiler_key() -> str:
  """The compiler and its version, for cache keys."""
  cc = c_compiler()
  return f"{cc}\0{_compiler_id(cc)}"


class Toolchain:
  """How a batch of kernel sources becomes one object file (a shared library where objects are not loaded in
  process), and what identifies its output in the cache."""
  def key(self) -> str: raise NotImplementedError
  def build(self, kernels: list[tuple[str, str, str]], out: Path, what: str) -> None:
    """Builds (name, symbol, source) kernels into out, each kernel's function exported as its symbol; CompileError
    when they do not build."""
    raise NotImplementedError


# how a source becomes a library: part of every cache key, so a change here never loads an old library
_FORMAT = "object-1" if IN_PROCESS else "batch-1"


@functools.cache
def _c_key() -> str: return chr(0).join((compiler_key(), _FORMAT, *_flags()))


class CToolchain(Toolchain):
  """The system's C compiler, run as a process (c_compiler)."""
  def key(self) -> str: return _c_key()

  def build(self, kernels: list[tuple[str, str, str]], out: Path, what: str) -> None:
    # the function's name is a single C token: a macro gives it the symbol's name without touching the source
    text = "".join(f"#define {name} {sym}\n{src}\n#undef {name}\n" for name, sym, src in kernels)
    cc = c_compiler()
    # the library is written beside its place in the cache (a rename across filesystems fails: TMPDIR is often a tmpfs)
    so_tmp = diskcache.temp_beside(out)
    with tempfile.TemporaryDirectory() as tmp:
      (c_file := Path(tmp) / "kernels.c").write_text(text)
      cmd = [cc, *(f for f in _flags() if f != "-shared"), "-c", "-o", str(so_tmp), str(c_file)] if IN_PROCESS else \
        [cc, *_flags(), "-o", str(so_tmp), str(c_file), "-lm"]
      try: res = subprocess.run(cmd, capture_output=True, text=True)
      except BaseException:
        so_tmp.unlink(missing_ok=True)
        raise
    if res.returncode != 0:
      so_tmp.unlink(missing_ok=True)
      raise CompileError(f"{what} failed to compile with {cc}:\n{res.stderr.strip()}\n--- source ---\n{text}")
    diskcache.install(so_tmp, out)


C_TOOLCHAIN = CToolchain()


def kernel_symbol(name: str, src: str, toolchain: Toolchain = C_TOOLCHAIN) -> str:
  """The exported name of a kernel's function: its name and a hash of its source and the toolchain, so kernels of one
  name built together stay apart, and a library found in the cache is the one wanted."""
  return f"{name}_{sha256(chr(0).join((src, toolchain.key())).encode()).hexdigest()[:24]}"


def compile_shared(kernels: list[tuple[str, str]], toolchain: Toolchain = C_TOOLCHAIN) -> list[tuple[Path, str]]:
  """(library, symbol) for each (name, source). Kernels found in the cache are loaded from it; the others are built
  together, one compiler run for all (the run's fixed cost is most of a small kernel's), and each is entered in the
  cache as a link to that library. If the run fails, each is built alone, so the error names the kernel at fault."""
  out, missing, d = [], [], diskcache.subdir("kernels")
  for name, src in kernels:
    sym = kernel_symbol(name, src, toolchain)
    path = d / f"{sym}{LIB_SUFFIX}"
    out.append((path, sym))
    if not diskcache.valid(path): missing.append((name, sym, src, path))
  if len(missing) == 1:
    name, sym, src, path = missing[0]
    toolchain.build([(name, sym, src)], path, f"kernel {name}")
  elif missing:
    batch = sha256(chr(0).join(sym for _, sym, _, _ in missing).encode()).hexdigest()[:24]
    lib = d / f"batch-{batch}{LIB_SUFFIX}"
    try:
      if not diskcache.valid(lib): toolchain.build([(name, sym, src) for name, sym, src, _ in missing], lib, f"{len(missing)} kernels")
    except CompileError:
      for name, sym, src, path in missing: toolchain.build([(name, sym, src)], path, f"kernel {name}")
      return out
    for *_, path in missing: diskcache.link(path, lib)
  return out


KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32, ctypes.c_uint32)


# the objects loaded so far, by file (a batch's kernels are links to one file, mapped once; size and time tell a file
# built again in a reused inode)
_objects: dict[tuple[int, int, int, int], LoadedObject] = {}
_objects_lock = threading.Lock()


def _dlopen(path: Path, symbol: str) -> tuple[ctypes.CDLL, int]:
  lib = ctypes.CDLL(str(path))
  return lib, ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value or 0


def _linked(obj: Path, data: bytes) -> Path:
  """A shared library linked from the object file's bytes (cached beside it), for an object the loader does not take
  (runtime/elf.NeedsLinker: gcc's half-float helpers from the static libgcc, say)."""
  if diskcache.valid(lib := obj.with_suffix(".linked.so")): return lib
  so_tmp = diskcache.temp_beside(lib)
  with tempfile.TemporaryDirectory() as tmp:
    (o := Path(tmp) / "kernels.o").write_bytes(data)
    res = subprocess.run([c_compiler(), "-shared", "-o", str(so_tmp), str(o), "-lm"], capture_output=True, text=True)
  if res.returncode != 0:
    so_tmp.unlink(missing_ok=True)
    raise CompileError(f"linking {obj.name} failed:\n{res.stderr.strip()}")
  diskcache.install(so_tmp, lib)
  return lib


def _open(path: Path, symbol: str) -> tuple[Any, int]:
  if not IN_PROCESS: return _dlopen(path, symbol)
  st = path.stat()
  with _objects_lock:
    if (obj := _objects.get(key := (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))) is None:
      if (data := diskcache.read(path)) is None: raise OSError(f"{path} is damaged")
      try: obj = _objects[key] = load_object(data)
      except NeedsLinker:
        try: return _dlopen(lib := _linked(path, data), symbol)
        except OSError:  # a linked library the loader refuses is built again with its object
          diskcache.discard(lib)
          raise
  if symbol not in obj.symbols: raise ElfError(f"{path} has no function {symbol}")
  return obj, obj.symbols[symbol]


def load_kernel(path: Path, name: str, src: str, toolchain: Toolchain = C_TOOLCHAIN) -> tuple[Any, int]:
  """What keeps a kernel's code alive, and its function's address, for a kernel compile_shared gave `path` for. A
  build the loader refuses (or one without the function) is deleted and built again, once."""
  symbol = kernel_symbol(name, src, toolchain)
  try: return _open(path, symbol)
  except (OSError, AttributeError, ElfError): diskcache.discard(path)
  return _open(compile_shared([(name, src)], toolchain)[0][0], symbol)
