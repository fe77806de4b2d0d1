"""runtime/elf.py: a compiler's x86-64 object file loaded into memory with no linker, relocations applied, libm's
functions called through stubs, the mapping read-execute only; and what it refuses."""
import ctypes
import platform
import struct
import subprocess

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
