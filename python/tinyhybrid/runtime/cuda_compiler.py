"""Compilers for NVIDIA GPUs, usable without one: CUDACompiler turns CUDA C++ (renderer/cuda.py) into a cubin with
NVRTC, PTXCompiler assembles PTX (renderer/ptx.py) into a cubin with ptxas. `compile(src) -> bytes` is their public
face, as in tinygrad; a source that does not compile raises CompileError naming the kernel, with the compiler's log
and the source numbered, its faulty lines marked.

NVRTC comes from the `nvidia-cuda-nvrtc` wheel (the extra `cuda`), else from a CUDA toolkit (CUDA_PATH,
/usr/local/cuda); cuda_fp16.h and cuda_bf16.h from the `nvidia-cuda-runtime` wheel or the toolkit. ptxas from PATH,
the toolkit, or an `nvidia-cuda-nvcc` wheel. Both are loaded on first use, so the package imports without them.

Devices build a schedule's new kernels together (build_kernels): one compiler run for a batch of kernels of distinct
names, its binary cached on disk and entered in the cache under each kernel's key; a failed batch is built again
kernel by kernel, so the error names the one at fault."""
from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tinyhybrid.helpers import once
from tinyhybrid.runtime import diskcache
from tinyhybrid.device import CompileError
from tinyhybrid.digest import sha256

_NVRTC_CDEF = """
typedef int nvrtcResult; typedef struct _nvrtcProgram* nvrtcProgram;
const char* nvrtcGetErrorString(nvrtcResult);
nvrtcResult nvrtcVersion(int*, int*);
nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram*);
"""
_INSTALL_HINT = "install it with `pip install 'tinyhybrid[cuda]'` (the nvidia-cuda-nvrtc and nvidia-cuda-runtime wheels) or a CUDA toolkit"
# how a binary is cached: part of every key, so a change here never loads an old binary
_FORMAT = "cuda-1"
PTX_HEADER_END = ".address_size 64\n"  # what ends the header of every PTX source the renderer writes


def _wheel_dirs() -> list[Path]:
  """The folders of NVIDIA's wheels (nvidia/cu13, nvidia/cuda_nvrtc, ...), newest CUDA first."""
  try: import nvidia  # a namespace package of the nvidia-* wheels
  except ImportError: return []
  return sorted((p for root in nvidia.__path__ for p in Path(root).iterdir() if p.is_dir()), key=lambda p: p.name, reverse=True)


def _toolkits() -> list[Path]:
  roots = [os.getenv("CUDA_PATH", ""), os.getenv("CUDA_HOME", ""), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
  return [Path(r) for r in roots if r and Path(r).is_dir()]


@once
def _nvrtc() -> tuple[Any, Any]:
  """(ffi, lib) of NVRTC."""
  import cffi
  ffi = cffi.FFI()
  ffi.cdef(_NVRTC_CDEF)
  cands = [str(p) for d in _wheel_dirs() for p in sorted(d.glob("lib/libnvrtc.so*")) if "builtins" not in p.name]
  cands += [str(p) for t in _toolkits() for sub in ("lib64", "lib") for p in sorted((t / sub).glob("libnvrtc.so*")) if "builtins" not in p.name]
  cands += ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"]
  for c in cands:
    try: return ffi, ffi.dlopen(c)
    except OSError: continue
  raise RuntimeError(f"NVRTC (libnvrtc.so) was not found; {_INSTALL_HINT}")


def nvrtc_available() -> bool:
  try: _nvrtc()
  except RuntimeError: return False
  return True


@functools.cache
def nvrtc_version() -> tuple[int, int]:
  ffi, lib = _nvrtc()
  major, minor = ffi.new("int*"), ffi.new("int*")
  lib.nvrtcVersion(major, minor)
  return major[0], minor[0]


@functools.cache
def cuda_include_dir() -> Path | None:
  """Where cuda_fp16.h is (None: not installed; only kernels with half or bfloat16 need it)."""
  for d in [*(w / "include" for w in _wheel_dirs()), *(t / "include" for t in _toolkits())]:
    if (d / "cuda_fp16.h").exists(): return d
  return None


@functools.cache
def ptxas_path() -> str:
  found = os.getenv("PTXAS") or shutil.which("ptxas")
  if found: return found
  for p in [*(w / "bin" / "ptxas" for w in _wheel_dirs()), *(t / "bin" / "ptxas" for t in _toolkits())]:
    if p.exists(): return str(p)
  raise RuntimeError("ptxas was not found (PATH, PTXAS, CUDA_PATH, /usr/local/cuda); install a CUDA toolkit or `pip install nvidia-cuda-nvcc`")


@functools.cache
def ptxas_version() -> str:
  out = subprocess.run([ptxas_path(), "--version"], capture_output=True, text=True).stdout.strip().splitlines()
  return out[-1] if out else "ptxas"


def kernel_names(src: str) -> list[str]:
  """The kernels a CUDA C++ or PTX source defines."""
  return re.findall(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src) + re.findall(r"\.entry (\w+)\(", src)


def annotate(src: str, bad_lines: set[int]) -> str:
  """The source with line numbers, the lines the compiler complained about marked with >>."""
  return "\n".join(f"{'>>' if i in bad_lines else '  '}{i:5d} | {line}" for i, line in enumerate(src.split("\n"), 1))


def _check_arch(arch: str) -> str:
  if not re.fullmatch(r"sm_\d+[a-z]?", arch): raise ValueError(f"{arch!r} is not an NVIDIA architecture (sm_80, sm_90, ...)")
  return arch


class CUDACompiler:
  """CUDA C++ -> cubin for one architecture with NVRTC (tinygrad's CUDACompiler)."""
  def __init__(self, arch: str = "sm_90"):
    self.arch = _check_arch(arch)
    self.options = [f"--gpu-architecture={arch}", "--fmad=false", "-default-device", "-w"]

  @functools.cached_property
  def ident(self) -> str: return f"NVRTC {'.'.join(map(str, nvrtc_version()))} {' '.join(self.options)}"

  def join(self, srcs: list[str]) -> str: return "\n".join(srcs)

  def compile(self, src: str) -> bytes:
    ffi, lib = _nvrtc()
    names = kernel_names(src)
    opts = list(self.options)
    if (inc := cuda_include_dir()) is not None: opts.append(f"-I{inc}")
    prog = ffi.new("nvrtcProgram*")
    if (err := lib.nvrtcCreateProgram(prog, src.encode(), b"kernel.cu", 0, ffi.NULL, ffi.NULL)) != 0:
      raise RuntimeError(f"nvrtcCreateProgram: {ffi.string(lib.nvrtcGetErrorString(err)).decode()}")
    try:
      args = [ffi.new("char[]", o.encode()) for o in opts]
      err = lib.nvrtcCompileProgram(prog[0], len(args), ffi.new("char*[]", args))
      size = ffi.new("size_t*")
      lib.nvrtcGetProgramLogSize(prog[0], size)
      log = ffi.new("char[]", max(size[0], 1))
      lib.nvrtcGetProgramLog(prog[0], log)
      text = ffi.string(log).decode(errors="replace").strip()
      if err != 0:
        bad = {int(m) for m in re.findall(r"kernel\.cu\((\d+)\)", text)}
        hint = "" if inc is not None or "cuda_fp16.h" not in text else f"\ncuda_fp16.h was not found; {_INSTALL_HINT}"
        raise CompileError(f"kernel {', '.join(names) or '?'} failed to compile for {self.arch} with {self.ident.split(' --')[0]}:\n{text}{hint}\n"
                           f"--- source ---\n{annotate(src, bad)}")
      lib.nvrtcGetCUBINSize(prog[0], size)
      out = ffi.new("char[]", size[0])
      lib.nvrtcGetCUBIN(prog[0], out)
      return bytes(ffi.buffer(out, size[0]))
    finally: lib.nvrtcDestroyProgram(prog)


class PTXCompiler:
  """PTX -> cubin for one architecture with ptxas (the PTX renderer's compiler in compile-only mode; on a GPU the
  driver may load the PTX itself)."""
  def __init__(self, arch: str = "sm_90"):
    self.arch = _check_arch(arch)
    self.options = [f"-arch={arch}", "-O3"]

  @functools.cached_property
  def ident(self) -> str: return f"{ptxas_version()} {' '.join(self.options)}"

  def join(self, srcs: list[str]) -> str:
    """One PTX module of several: the first's header, then every kernel's body."""
    return "\n".join([srcs[0], *(s.partition(PTX_HEADER_END)[2] for s in srcs[1:])])

  def compile(self, src: str) -> bytes:
    names = kernel_names(src)
    with tempfile.TemporaryDirectory() as tmp:
      ptx, cubin = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
      ptx.write_text(src)
      res = subprocess.run([ptxas_path(), *self.options, "-o", str(cubin), str(ptx)], capture_output=True, text=True)
      if res.returncode != 0:
        text = (res.stderr + res.stdout).replace(str(ptx), "kernel.ptx").strip()
        bad = {int(m) for m in re.findall(r"kernel\.ptx, line (\d+)", text)}
        raise CompileError(f"kernel {', '.join(names) or '?'} failed to assemble for {self.arch} with {ptxas_version()}:\n{text}\n"
                           f"--- source ---\n{annotate(src, bad)}")
      return cubin.read_bytes()


Compiler = CUDACompiler | PTXCompiler


def _key(compiler: Compiler, name: str, src: str) -> Path:
  h = sha256("\0".join((src, name, compiler.ident, _FORMAT)).encode()).hexdigest()[:32]
  return diskcache.subdir("cuda") / f"{name}-{h}.cubin"


def build_kernels(compiler: Compiler, kernels: list[tuple[str, str]]) -> list[bytes]:
  """The binary holding each (name, source) kernel: found in the cache, or built in batches of distinct names (a
  kernel of a batch shares its binary with the others)."""
  paths = [_key(compiler, name, src) for name, src in kernels]
  blobs = {i: got for i, p in enumerate(paths) if (got := diskcache.read(p)) is not None}
  batches: list[dict[str, int]] = []
  for i, (name, _) in enumerate(kernels):
    if i in blobs or any(name in b and kernels[b[name]] == kernels[i] for b in batches): continue
    if (b := next((b for b in batches if name not in b), None)) is None: batches.append(b := {})
    b[name] = i
  failed: CompileError | None
  for b in batches:
    srcs = [kernels[i][1] for i in b.values()]
    try: blob = compiler.compile(compiler.join(srcs))
    except CompileError as e:
      if len(srcs) == 1: raise
      failed = e
    else: failed = None
    if failed is not None:
      for i in b.values(): compiler.compile(kernels[i][1])  # which one: its error names it
      raise failed
    batch = diskcache.subdir("cuda") / f"batch-{sha256(blob).hexdigest()[:32]}.cubin"
    diskcache.write(batch, blob)
    for i in b.values():
      diskcache.link(paths[i], batch)
      blobs[i] = blob
  by_path = {paths[i]: blob for i, blob in blobs.items()}  # a kernel given twice has one path, one entry
  return [by_path[p] for p in paths]
