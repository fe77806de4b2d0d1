"""runtime/elf.py: a compiler's x86-64 object file loaded into memory with no linker, relocations applied, libm's
functions called through stubs, the mapping read-execute only; and what it refuses."""
import ctypes
import os
import platform
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from tinyhybrid.runtime.compiler import c_compiler
from tinyhybrid.runtime.elf import ElfError, load_object

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the loader is for x86-64 objects")

SRC = r"""
#include <math.h>
static const float table[4] = {1.5f, 2.5f, 3.5f, 4.5f};
float scale = 0.25f;  /* writable data: the loader places .data too */
void transc(const unsigned long long* args, unsigned int core, unsigned int cores) {
  float* out = (float*)args[0]; const float* x = (const float*)args[1];
  for (int i = 0; i < 256; i++) out[i] = expf(x[i]) + sinf(x[i]) * 0.3f + log2f(x[i] + 3.0f) + 1.7f;
}
void lookup(const unsigned long long* args, unsigned int core, unsigned int cores) {
  float* out = (float*)args[0];
  for (int i = 0; i < 256; i++) out[i] = table[i & 3] * (float)i * scale;
  __atomic_fetch_add((long long*)args[1], 1, __ATOMIC_RELAXED);
}
"""
FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64), ctypes.c_uint32, ctypes.c_uint32)


def _object(tmp_path, src: str) -> bytes:
  (c := tmp_path / "k.c").write_text(src)
  subprocess.run([c_compiler(), "-O2", "-march=native", "-fPIC", "-c", "-fno-math-errno", "-o", str(o := tmp_path / "k.o"), str(c)], check=True)
  return o.read_bytes()


def _perms(addr: int) -> str:
  for line in open("/proc/self/maps"):
    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
    if lo <= addr < hi: return line.split()[1]
  raise AssertionError("address not mapped")


def test_kernels_run_from_a_loaded_object(tmp_path):
  obj = load_object(_object(tmp_path, SRC))
  assert {"transc", "lookup", "scale"} <= set(obj.symbols)
  x = np.linspace(-2, 2, 256, dtype=np.float32)
  out, count = np.zeros(256, np.float32), np.zeros(1, np.int64)
  FN(obj.symbols["transc"])((ctypes.c_uint64 * 2)(out.ctypes.data, x.ctypes.data), 0, 1)
  ref = np.exp(x) + np.sin(x) * np.float32(0.3) + np.log2(x + np.float32(3)) + np.float32(1.7)
  np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6)
  for _ in range(3): FN(obj.symbols["lookup"])((ctypes.c_uint64 * 2)(out.ctypes.data, count.ctypes.data), 0, 1)
  np.testing.assert_array_equal(out, np.array([1.5, 2.5, 3.5, 4.5], np.float32)[np.arange(256) & 3] * np.arange(256, dtype=np.float32) * np.float32(0.25))
  assert count[0] == 3
  assert _perms(obj.symbols["transc"]) == "r-xp" and _perms(obj.symbols["scale"]) == "rw-p"  # code is never writable
  ctypes.c_float.from_address(obj.symbols["scale"]).value = 0.5  # data is
  FN(obj.symbols["lookup"])((ctypes.c_uint64 * 2)(out.ctypes.data, count.ctypes.data), 0, 1)
  assert out[5] == 2.5 * 5 * 0.5


def test_what_the_loader_refuses(tmp_path):
  with pytest.raises(ElfError, match="ELF"): load_object(b"this is not a shared library")
  data = bytearray(_object(tmp_path, SRC))
  struct.pack_into("<H", data, 18, 183)  # e_machine: AArch64
  with pytest.raises(ElfError, match="x86-64"): load_object(bytes(data))
  unknown = "extern float no_such_function_anywhere(float);\nfloat f(float x) { return no_such_function_anywhere(x); }\n"
  with pytest.raises(ElfError, match="no_such_function_anywhere"): load_object(_object(tmp_path, unknown))


def test_an_object_calling_what_only_the_linker_finds_is_linked(tmp_path, monkeypatch):
  # gcc's half-float helpers are in the static libgcc, which no loaded library exports: such a batch is linked into a
  # shared library beside its object (here: expf made unresolvable)
  from tinyhybrid.runtime import compiler, elf
  if not compiler.IN_PROCESS: pytest.skip("kernels are shared libraries here")
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  real = elf._external
  def no_expf(name: str) -> int:
    if name == "expf": raise elf.NeedsLinker("expf")
    return real(name)
  monkeypatch.setattr(elf, "_external", no_expf)
  src = "#include <math.h>\nvoid k_exp(unsigned long long* args) { float* f = (float*)args[0]; f[0] = expf(f[0]); }\n"
  (path, _), = compiler.compile_shared([("k_exp", src)])
  keep, addr = compiler.load_kernel(path, "k_exp", src)
  assert isinstance(keep, ctypes.CDLL) and path.with_suffix(".linked.so").exists()
  x = np.array([1.5], np.float32)
  ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_uint64))(addr)((ctypes.c_uint64 * 1)(x.ctypes.data))
  np.testing.assert_allclose(x[0], np.exp(1.5), rtol=1e-6)


def test_gcc_builds_half_kernels(tmp_path):
  # gcc 12 on an AVX512-FP16 host writes masked half moves binutils 2.40 rejects: it gets -mno-avx512fp16, and its
  # half comparisons then call libgcc's helpers, which only the linker finds
  if shutil.which("gcc") is None: pytest.skip("no gcc")
  code = ("import numpy as np\nfrom tinyhybrid import Tensor, dtypes\nfrom tinyhybrid.runtime.compiler import _flags\n"
          "a = np.array([1, -2, 3.5, 0, 7], np.float16)\nb = np.array([1, 2, -3.5, 0, 6], np.float16)\n"
          "print(int('-mno-avx512fp16' in _flags()), (Tensor(a) < Tensor(b)).tolist() == (a < b).tolist(),"
          " (Tensor(a) * Tensor(b)).numpy().tolist() == (a * b).tolist())\n")
  env = {**os.environ, "CC": "gcc", "TINYHYBRID_CACHE": str(tmp_path), "DEV": "CPU"}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  fp16_flag, lt_ok, mul_ok = out.stdout.split()
  target = subprocess.run(["gcc", "-march=native", "-Q", "--help=target"], capture_output=True, text=True).stdout
  assert fp16_flag == str(int(bool(re.search(r"-mavx512fp16\s+\[enabled\]", target))))
  assert lt_ok == "True" and mul_ok == "True"
