"""Loading a compiler's x86-64 object file (ELF relocatable, `cc -c`) into this process's memory, with no linker: its
code and data sections laid out in one mapping, relocations applied, calls to the C library (libm's expf, memset)
sent through jump stubs inside the mapping, then the mapping made read-execute. A CPU kernel build is then one
compiler run where it was a compiler run and a linker run, about half the time of a small batch.

Only what a compiler emits for position-independent code is handled (64-bit and PC-relative data references, calls
through the PLT, GOT loads). A valid object with anything else in it (another relocation, a call to a function no
loaded library has) is a NeedsLinker error, and the caller links it into a shared library instead; bytes that are
not an x86-64 object at all are a plain ElfError."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import struct
from dataclasses import dataclass

SHT_SYMTAB, SHT_RELA, SHT_NOBITS = 2, 4, 8
SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHN_UNDEF, SHN_ABS, SHN_COMMON = 0, 0xFFF1, 0xFFF2
R_X86_64_NONE, R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_GOTPCREL = 0, 1, 2, 4, 9
R_X86_64_PC64, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX = 24, 41, 42
_GOT_LOADS = (R_X86_64_GOTPCREL, R_X86_64_GOTPCRELX, R_X86_64_REX_GOTPCRELX)
_STUB = b"\xff\x25\x00\x00\x00\x00"  # jmp qword ptr [rip + 0]: the 8-byte address that follows
_PAGE = mmap.PAGESIZE


class ElfError(ValueError):
  """An object file this loader does not take (another machine, a relocation it does not know, a missing symbol)."""


class NeedsLinker(ElfError):
  """A valid object this loader does not take, which a linker does: a call to a function no loaded library has (gcc's
  half-float helpers live in the static libgcc), a relocation or a section it does not handle."""


@dataclass
class LoadedObject:
  """An object file in memory: its defined functions' and data's addresses. The mapping lives as long as this does."""
  symbols: dict[str, int]
  memory: mmap.mmap


def _system_library(name: str, **kw) -> ctypes.CDLL:
  """A C library by glibc's name for it (lib<name>.so.6), else wherever ctypes finds it: find_library runs ldconfig or
  a compiler, a process this module otherwise never starts."""
  try: return ctypes.CDLL(f"lib{name}.so.6", **kw)
  except OSError: return ctypes.CDLL(ctypes.util.find_library(name), **kw)


@functools.cache
def _libc() -> ctypes.CDLL: return _system_library("c", use_errno=True)


@functools.cache
def _libraries() -> tuple[ctypes.CDLL, ...]:
  """Where a kernel's calls go: libm, then what the process has loaded (libc)."""
  return _system_library("m", mode=ctypes.RTLD_GLOBAL), ctypes.CDLL(None, mode=ctypes.RTLD_GLOBAL)


def _external(name: str) -> int:
  """The address of a C library function a kernel calls (libm's, libc's)."""
  for lib in _libraries():
    try: return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
    except AttributeError: continue
  raise NeedsLinker(f"the object calls {name!r}, which no loaded library has")


def load_object(data: bytes) -> LoadedObject:
  """The object file `data` loaded and ready to call (see the module's notes)."""
  if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1: raise ElfError("not a 64-bit little-endian ELF file")
  e_type, e_machine = struct.unpack_from("<HH", data, 16)
  if e_type != 1 or e_machine != 62: raise ElfError(f"not an x86-64 object file (type {e_type}, machine {e_machine})")
  shoff, = struct.unpack_from("<Q", data, 40)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
  secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
  names = secs[shstrndx][4]
  def sec_name(s: tuple) -> str: return data[names + s[0]:data.index(b"\0", names + s[0])].decode()
  # every allocated section but the unwind tables (no exceptions pass through kernels) gets a place in the mapping:
  # code and constants first (made read-execute), then writable data on pages of its own (left read-write)
  place: dict[int, int] = {}
  size = 0
  def lay_out(writable: bool) -> None:
    nonlocal size
    for i, (_, _, flags, _, _, sz, _, _, align, _) in enumerate(secs):
      if not flags & SHF_ALLOC or bool(flags & SHF_WRITE) != writable or sec_name(secs[i]).startswith(".eh_frame"): continue
      size = -(-size // max(align, 1)) * max(align, 1)
      place[i] = size
      size += sz
  lay_out(writable=False)
  symtab = next((s for s in secs if s[1] == SHT_SYMTAB), None)
  if symtab is None: raise ElfError("the object has no symbol table")
  strtab = secs[symtab[6]][4]
  syms = [struct.unpack_from("<IBBHQQ", data, symtab[4] + j * 24) for j in range(symtab[5] // 24)]
  def sym_name(j: int) -> str:
    off = strtab + syms[j][0]
    return data[off:data.index(b"\0", off)].decode()
  relas = [(s[7], s) for s in secs if s[1] == SHT_RELA and s[7] in place]  # sh_info: the section they apply to
  relocs = [(target, r) for target, s in relas for r in _relocs(data, s)]
  externals = sorted({sym_name(r[1] >> 32) for _, r in relocs if syms[r[1] >> 32][3] == SHN_UNDEF})
  size = -(-size // 16) * 16
  stub_at = {n: size + 16 * k for k, n in enumerate(externals)}  # a stub per external function
  size += 16 * len(externals)
  # a GOT slot per symbol whose address the code loads (-fPIC reaches even its own globals so)
  got = sorted({r[1] >> 32 for _, r in relocs if r[1] & 0xFFFFFFFF in _GOT_LOADS})
  got_at = {j: size + 8 * k for k, j in enumerate(got)}
  size += 8 * len(got)
  text_size = size = -(-size // _PAGE) * _PAGE
  lay_out(writable=True)
  mem, base = _mapping(size)
  for i, off in place.items():
    if secs[i][1] != SHT_NOBITS: mem[off:off + secs[i][5]] = data[secs[i][4]:secs[i][4] + secs[i][5]]
  for n, off in stub_at.items(): mem[off:off + 14] = _STUB + struct.pack("<Q", _external(n))

  def address(j: int) -> int:
    _, info, _, shndx, value, _ = syms[j]
    if shndx == SHN_UNDEF: return base + stub_at[sym_name(j)]
    if shndx == SHN_ABS: return value
    if shndx == SHN_COMMON or shndx not in place: raise NeedsLinker(f"symbol {sym_name(j)!r} is in a section this loader does not place")
    return base + place[shndx] + value
  for j, off in got_at.items():  # an external's slot holds the function itself, not its stub
    struct.pack_into("<Q", mem, off, _external(sym_name(j)) if syms[j][3] == SHN_UNDEF else address(j))
  for target, (r_off, r_info, addend) in relocs:
    typ, j = r_info & 0xFFFFFFFF, r_info >> 32
    where = place[target] + r_off
    p = base + where
    if typ == R_X86_64_NONE: continue
    if typ == R_X86_64_64: struct.pack_into("<Q", mem, where, (address(j) + addend) & (2**64 - 1))
    elif typ == R_X86_64_PC64: struct.pack_into("<q", mem, where, address(j) + addend - p)
    elif typ in (R_X86_64_PC32, R_X86_64_PLT32) or typ in _GOT_LOADS:
      v = (base + got_at[j] if typ in _GOT_LOADS else address(j)) + addend - p
      if not -2**31 <= v < 2**31: raise NeedsLinker(f"relocation at {r_off:#x} is out of 32-bit range")
      struct.pack_into("<i", mem, where, v)
    else: raise NeedsLinker(f"relocation type {typ} is not handled")
  if text_size: _make_executable(base, text_size, "the loaded object")
  out = {}
  for j, (_, info, _, shndx, _, _) in enumerate(syms):
    if info >> 4 == 1 and shndx not in (SHN_UNDEF, SHN_ABS) and shndx in place: out[sym_name(j)] = address(j)  # global ones
  return LoadedObject(out, mem)


def load_code(code: bytes, symbols: dict[str, int]) -> LoadedObject:
  """Position-independent machine code (no relocations: runtime/x86.py's) mapped read-execute; symbols: offsets in it."""
  mem, base = _mapping(len(code))
  mem[:len(code)] = code
  _make_executable(base, len(mem), "the kernel's code")
  return LoadedObject({n: base + off for n, off in symbols.items()}, mem)


def _mapping(size: int) -> tuple[mmap.mmap, int]:
  """Zeroed read-write memory of at least size bytes (whole pages), and its address."""
  mem = mmap.mmap(-1, max(-(-size // _PAGE) * _PAGE, _PAGE), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ | mmap.PROT_WRITE)
  return mem, ctypes.addressof(ctypes.c_char.from_buffer(mem))


def _make_executable(base: int, size: int, what: str) -> None:
  if _libc().mprotect(ctypes.c_void_p(base), ctypes.c_size_t(size), mmap.PROT_READ | mmap.PROT_EXEC) != 0:
    raise OSError(ctypes.get_errno(), f"mprotect of {what} failed")


def _relocs(data: bytes, s: tuple) -> list[tuple[int, int, int]]:
  return [struct.unpack_from("<QQq", data, s[4] + k * 24) for k in range(s[5] // 24)]
