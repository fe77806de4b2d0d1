"""The DISK device (tinygrad's): DISK:/path/to/file is that file's bytes as memory, mapped into the process. Every
buffer made on it is the file from its first byte (the file grows to hold it), and a view of one (a slice, a bitcast)
is the range it covers, so a tensor there reads and writes the file itself. It runs no kernels: tensors move to and
from it by copies (engine/storage.py), which is how model files are read without reading them whole first."""
from __future__ import annotations

import mmap
import os

import numpy as np

from tinyhybrid.device import Allocator, Compiled


class DiskAllocator(Allocator):
  """Buffers are numpy arrays over a map of the file (host memory: copies to and from them are plain memory copies)."""
  def __init__(self, dev: DiskDevice):
    super().__init__()
    self.dev = dev

  def alloc(self, nbytes: int) -> np.ndarray: return self.dev.map(nbytes)
  def free(self, mem: np.ndarray, cache: bool = True) -> None: self.dev.unmap()  # never cached: the memory is the file's

  def copyin(self, dest: np.ndarray, src: memoryview, offset: int = 0) -> None:
    if not dest.flags.writeable: raise PermissionError(f"{self.dev.name}: the file is read-only for this process")
    super().copyin(dest, src, offset)


class DiskDevice(Compiled):
  """One file. It stays open while a buffer maps it (refcount) and is opened again by the next buffer after that;
  `mem` is the latest map, `size` the largest mapped so far while open. A file the process may only read is mapped
  read-only, and writing it is then an error."""
  def __init__(self, name: str):
    super().__init__(name, DiskAllocator(self), None, None)
    self.path = name[len("DISK:"):]
    self.fd: int | None = None
    self.size: int | None = None
    self.refcount = 0
    self.writable = True
    self.mem: mmap.mmap | None = None

  def map(self, nbytes: int) -> np.ndarray:
    if self.fd is not None and self._replaced():  # a file written anew under this name (safe_save renames one in)
      os.close(self.fd)  # the maps made so far keep their own descriptors, and the old file's bytes
      self.fd = None
    if self.fd is None:
      try: self.fd, self.writable = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), True
      except PermissionError: self.fd, self.writable = os.open(self.path, os.O_RDONLY), False
    try:
      if (have := os.fstat(self.fd).st_size) < nbytes:
        if not self.writable: raise PermissionError(f"{self.name}: the file has {have} bytes, a buffer of {nbytes} needs it to grow, and it is read-only")
        os.ftruncate(self.fd, nbytes)
      mem = mmap.mmap(self.fd, nbytes, access=mmap.ACCESS_WRITE if self.writable else mmap.ACCESS_READ) if nbytes else None
    except BaseException:
      if not self.refcount: self._close()
      raise
    self.refcount += 1
    self.size = max(self.size or 0, nbytes)
    if mem is None: return np.zeros(0, dtype=np.uint8)
    self.mem = mem
    return np.frombuffer(mem, dtype=np.uint8, count=nbytes)

  def _replaced(self) -> bool:
    try: now = os.stat(self.path)
    except FileNotFoundError: return True
    was = os.fstat(self.fd)  # type: ignore[arg-type]  # open
    return (now.st_dev, now.st_ino) != (was.st_dev, was.st_ino)

  def unmap(self) -> None:
    """A buffer's map is gone (its array unmaps when the last view of it goes): the last one closes the file."""
    self.refcount -= 1
    if self.refcount == 0: self._close()

  def _close(self) -> None:
    if self.fd is not None: os.close(self.fd)
    self.fd, self.size, self.mem = None, None, None


def make_device(name: str) -> Compiled: return DiskDevice(name)
