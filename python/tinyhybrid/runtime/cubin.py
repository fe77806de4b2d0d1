"""What a kernel's launch needs from the cubin NVRTC builds (an ELF file): its code, and from the `.nv.info` attributes
its register count, where its parameters start in constant bank 0 and how many bytes they take, and its static shared
memory. The attribute numbers are NVIDIA's (EIATTR_REGCOUNT 0x2f in `.nv.info`, EIATTR_PARAM_CBANK 0x0a in
`.nv.info.<kernel>`); each attribute is a format byte, an attribute byte and a 16-bit size, then (format 4) that many
bytes of value."""
from __future__ import annotations

import struct
from dataclasses import dataclass

_EIATTR_PARAM_CBANK, _EIATTR_REGCOUNT, _EIFMT_SVAL = 0x0A, 0x2F, 0x04


@dataclass(frozen=True)
class CubinKernel:
  name: str
  code: bytes
  registers: int
  param_offset: int  # byte offset of the first parameter in constant bank 0
  param_bytes: int
  shared_bytes: int  # its static shared memory section (with the 1 KB sm_80 on reserve per block, as NVRTC lays it out)


def _sections(elf: bytes) -> dict[str, tuple[int, int, int]]:
  """name -> (type, file offset, size) of each section of a 64-bit little-endian ELF file."""
  if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1: raise ValueError("not a 64-bit little-endian ELF file (a cubin)")
  shoff, = struct.unpack_from("<Q", elf, 0x28)
  shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
  heads = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
  strtab = heads[shstrndx][4]
  return {_cstr(elf, strtab + h[0]).decode(): (h[1], h[4], h[5]) for h in heads}


def _attributes(elf: bytes, at: int, size: int) -> list[tuple[int, bytes]]:
  out, pos = [], at
  while pos + 4 <= at + size:
    fmt, attr, n = struct.unpack_from("<BBH", elf, pos)
    if fmt == _EIFMT_SVAL:
      out.append((attr, elf[pos + 4:pos + 4 + n]))
      pos += 4 + n
    else: pos += 4  # a value in the size field itself
  return out


def _cstr(elf: bytes, at: int) -> bytes: return elf[at:elf.index(b"\0", at)]


def _symbol_index(elf: bytes, secs: dict[str, tuple[int, int, int]], name: str) -> int:
  """The function's index in the symbol table, which .nv.info's per-function attributes name."""
  (_, symtab, size), strtab = secs[".symtab"], secs[".strtab"][1]
  for i in range(size // 24):
    if _cstr(elf, strtab + struct.unpack_from("<I", elf, symtab + 24 * i)[0]) == name.encode(): return i
  raise ValueError(f"the cubin's symbol table has no {name!r}")


def kernel_info(elf: bytes, name: str) -> CubinKernel:
  secs = _sections(elf)
  if (text := secs.get(f".text.{name}")) is None: raise ValueError(f"the cubin holds no kernel {name!r}")
  index = _symbol_index(elf, secs, name)
  registers = next((struct.unpack_from("<II", v)[1] for a, v in _attributes(elf, *secs[".nv.info"][1:]) if a == _EIATTR_REGCOUNT
                    and struct.unpack_from("<I", v)[0] == index), 0) if ".nv.info" in secs else 0
  offset, nbytes = 0x210, 0  # Hopper's parameter base (0x160 before it), when the cubin does not say
  for a, v in _attributes(elf, *secs[f".nv.info.{name}"][1:]) if f".nv.info.{name}" in secs else []:
    if a == _EIATTR_PARAM_CBANK: offset, nbytes = struct.unpack_from("<HH", v, 4)
  shared = secs[f".nv.shared.{name}"][2] if f".nv.shared.{name}" in secs else 0
  return CubinKernel(name, elf[text[1]:text[1] + text[2]], registers, offset, nbytes, shared)
