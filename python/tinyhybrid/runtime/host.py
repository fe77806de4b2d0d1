"""What the CPU this process runs on offers kernels: float lanes per vector register and vector registers, read from
the kernel's CPU flags (Linux's /proc/cpuinfo) or the machine type, and a core's own cache. The default
optimizations size register tiles from these (codegen/heuristic.py): a tile planned for AVX-512's 32 registers of 16
floats spills on AVX2's 16 of 8, and they order a matmul's loops so that what each core sweeps again stays in its cache."""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VectorUnit:
  lanes: int      # float32 lanes per vector register
  registers: int  # vector registers
  name: str


def vector_unit_of(machine: str, flags: set[str]) -> VectorUnit:
  """The vector unit of a CPU of this machine type (platform.machine()) with these feature flags."""
  if machine in ("x86_64", "AMD64", "i686", "i386"):
    if "avx512f" in flags: return VectorUnit(16, 32, "AVX-512")
    if "avx2" in flags or "avx" in flags: return VectorUnit(8, 16, "AVX2" if "avx2" in flags else "AVX")
    return VectorUnit(4, 16, "SSE")
  if machine in ("aarch64", "arm64"): return VectorUnit(4, 32, "NEON")
  return VectorUnit(4, 16, machine or "unknown")


@functools.cache
def host_cpu_flags() -> frozenset[str]:
  """This host's CPU feature flags, as Linux names them (avx2, fma, f16c, avx512f, ...)."""
  return frozenset(_cpu_flags())


def _cpu_flags() -> set[str]:
  try: text = Path("/proc/cpuinfo").read_text()
  except OSError: return set()
  for line in text.splitlines():
    key, _, value = line.partition(":")
    if key.strip() in ("flags", "Features"): return set(value.split())
  return set()


@functools.cache
def host_vector_unit() -> VectorUnit:
  """This host's vector unit."""
  return vector_unit_of(platform.machine(), _cpu_flags())


@functools.cache
def cache_sizes() -> dict[int, int]:
  """Bytes of this host's CPU caches by level (Linux's sysfs; empty where it does not say)."""
  out: dict[int, int] = {}
  for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
    try: level, size = (d / "level").read_text().strip(), (d / "size").read_text().strip().upper()
    except OSError: continue
    if level.isdigit() and size[:-1].isdigit() and size[-1] in "KMG":
      out[int(level)] = max(out.get(int(level), 0), int(size[:-1]) << {"K": 10, "M": 20, "G": 30}[size[-1]])
  return out


def core_cache_bytes() -> int:
  """Bytes of one core's own cache, its level 2 (1 MiB where the system does not say)."""
  return cache_sizes().get(2, 1 << 20)


def shared_cache_bytes() -> int:
  """Bytes of the cache the cores share, level 3 (32 MiB where the system does not say; a CPU without one: level 2)."""
  sizes = cache_sizes()
  return sizes.get(3, sizes.get(2, 32 << 20))
