"""Machine code for DEV=CPU:X86: the x86 renderer's assembly text (renderer/isa/x86.py) read into instructions, encoded
by the C++ encoder (tinyhybrid._core.x86, drivers/cpu/x86_encode.cpp) and mapped executable in this process (mmap,
then mprotect to read-execute). No tool runs and no file is written: a kernel builds in well under a millisecond,
so nothing is cached on disk."""
from __future__ import annotations

import functools
import re

from tinyhybrid.device import CompileError
from tinyhybrid.runtime.elf import LoadedObject, load_code

_MEM = re.compile(r"(byte|word|dword|qword|xmmword|ymmword|zmmword) ptr \[([^\]]*)\]")
_SIZES = {"byte": 1, "word": 2, "dword": 4, "qword": 8, "xmmword": 16, "ymmword": 32, "zmmword": 64}


_TERM = re.compile(r"([+-]?)\s*([^\s+-]+)")
_NUMBER = re.compile(r"-?(\d+|0x[0-9a-fA-F]+)")


@functools.lru_cache(maxsize=1 << 14)
def _operand(text: str):
  """One operand of the renderer's assembly: a register name, an immediate, a memory reference or a label (the same
  few hundred spellings recur in every kernel: each is read once)."""
  if m := _MEM.fullmatch(text):
    base = index = label = None
    scale, disp = 1, 0
    for sign, term in _TERM.findall(m.group(2)):
      if "*" in term:
        index, s = term.split("*")
        scale = int(s)
      elif _NUMBER.fullmatch(term) and term[0] != "-": disp += int(term, 0) * (-1 if sign == "-" else 1)
      elif term.startswith("."): label = term  # [rip + .Lconst]: the label's address
      else: base = term
    if label is not None: return ("mem", _SIZES[m.group(1)], "rip", None, 1, disp, label)
    return ("mem", _SIZES[m.group(1)], base, index, scale, disp)
  if _NUMBER.fullmatch(text): return int(text, 0)
  if text.startswith("."): return ("label", text)
  return text


def parse(src: str) -> list[tuple]:
  """The instructions of assembly text as the encoder takes them: (mnemonic, *operands), ("label", name)."""
  out: list[tuple] = []
  for line in src.splitlines():
    line = line.split(";", 1)[0].strip()
    if not line: continue
    if line.endswith(":"):
      out.append(("label", line[:-1]))
      continue
    mn, _, rest = line.partition(" ")
    if mn == "data":  # constant bytes, written in hex
      out.append(("data", bytes.fromhex(rest.strip())))
      continue
    if mn == "lock":  # a prefix: part of the mnemonic
      more, _, rest = rest.partition(" ")
      mn = f"lock {more}"
    out.append((mn, *(_operand(o.strip()) for o in rest.split(",") if o.strip())))
  return out


def assemble(name: str, src: str) -> tuple[bytes, dict[str, int]]:
  """A kernel's machine code and its labels' offsets."""
  from tinyhybrid._core import x86
  # the renderer's text carries its instructions (renderer/isa/x86.Assembly); text from elsewhere is read
  try: return x86.assemble(getattr(src, "program", None) or parse(src))
  except ValueError as e: raise CompileError(f"kernel {name}: the x86 encoder refuses its code: {e}\n--- source ---\n{src}") from None


def load(name: str, src: str) -> LoadedObject:
  """The kernel mapped executable, its function at its name."""
  code, labels = assemble(name, src)
  return load_code(code, {name: labels[name]})
