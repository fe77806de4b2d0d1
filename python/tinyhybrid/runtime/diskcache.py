"""The on-disk cache (compiled kernels, program binaries, BEAM's choices, downloads): each entry is written whole beside
its place and renamed in, so a reader never sees half of one and a cache on another filesystem than TMPDIR works; each
is sealed with a trailer holding its length and hash, checked when it is read, and an entry that fails the check is
deleted so it is built again. The cache is kept under CACHE_SIZE MiB by evicting the entries read least recently."""
from __future__ import annotations

import os
import struct
import threading
import time
import uuid
from pathlib import Path
from tinyhybrid.digest import sha256

_TRAILER = struct.Struct("<8sQ32s")  # magic, payload length, sha256 of the payload
_MAGIC = b"THCACHE1"
# a file read within this many seconds is not evicted (a build or a load may be using it), and a read refreshes the
# time eviction goes by only when the last refresh is older than this
_RECENT_S = 60.0
# what eviction walks: the cache's own entries (downloads are the user's files; PoCL keeps its own cache)
_EVICTABLE = ("kernels", "cl", "cuda", "beam", "oob", "kv")


def cache_root() -> Path:
  """Where compiled kernels and BEAM's choices are kept (TINYHYBRID_CACHE overrides)."""
  return Path(os.getenv("TINYHYBRID_CACHE", Path.home() / ".cache" / "tinyhybrid"))


def subdir(name: str) -> Path:
  d = cache_root() / name
  d.mkdir(parents=True, exist_ok=True)
  return d


def temp_beside(path: Path) -> Path:
  """A name in path's folder that no other process or thread uses: a file written there renames onto path atomically."""
  return path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:12]}.tmp")


def _trailer(payload: bytes | memoryview) -> bytes: return _TRAILER.pack(_MAGIC, len(payload), sha256(payload).digest())


def install(tmp: Path, path: Path) -> None:
  """Seals a file written at tmp (temp_beside(path)) and renames it onto path."""
  try:
    with open(tmp, "r+b") as f:
      payload = f.read()
      f.write(_trailer(payload))
    os.replace(tmp, path)
  finally: tmp.unlink(missing_ok=True)
  _usage.add(path.stat().st_size)


def write(path: Path, data: bytes) -> None:
  """Writes an entry whole: a reader sees the old one, none, or this one."""
  tmp = temp_beside(path)
  tmp.write_bytes(data)
  install(tmp, path)


def link(path: Path, target: Path) -> None:
  """Makes path an entry that is the same as target's (a kernel built in a batch: its entry is the batch's library)."""
  tmp = temp_beside(path)
  try:
    os.symlink(target.name if target.parent == path.parent else target, tmp)
    os.replace(tmp, path)
  finally: tmp.unlink(missing_ok=True)


# what was checked already: real path -> (size, mtime), so a library many entries link to is hashed once per process
_checked: dict[str, tuple[int, int]] = {}


def read(path: Path) -> bytes | None:
  """An entry's payload, or None when it is missing or damaged (then it is deleted, so the caller builds it again)."""
  real = os.path.realpath(path)
  try:
    with open(real, "rb") as f: blob = f.read()
  except OSError:
    discard(path)
    return None
  if len(blob) < _TRAILER.size or _trailer(memoryview(blob)[:-_TRAILER.size]) != blob[-_TRAILER.size:]:
    discard(path)
    return None
  _touch(real)
  return blob[:-_TRAILER.size]


def valid(path: Path) -> bool:
  """Whether an entry is there and whole. A file that the dynamic loader opens itself (a kernel library) stays one
  file, its trailer after the bytes the loader reads."""
  real = os.path.realpath(path)
  try: st = os.stat(real)
  except OSError:
    discard(path)
    return False
  if _checked.get(real) == (st.st_size, st.st_mtime_ns):
    _touch(real)
    return True
  if read(path) is None: return False
  st = os.stat(real)  # the read may have refreshed its time
  _checked[real] = (st.st_size, st.st_mtime_ns)
  return True


def discard(path: Path) -> None:
  """Deletes an entry, and the file it links to (a damaged batch is damaged for every entry that links to it)."""
  real = os.path.realpath(path)
  _checked.pop(real, None)
  for p in {str(path), real}:
    try: os.unlink(p)
    except FileNotFoundError: pass


def _touch(real: str) -> None:
  try:
    if time.time() - os.stat(real).st_mtime > _RECENT_S: os.utime(real)
  except OSError: pass


def limit_bytes() -> int:
  """CACHE_SIZE, in MiB (read on every write, so a process can change it)."""
  return int(os.getenv("CACHE_SIZE", "4096")) << 20


class _Usage:
  """The cache's size, counted once per process and then kept up as entries are written; past the limit the entries
  read least recently go until a fifth of the limit is free."""
  def __init__(self) -> None:
    self.lock = threading.Lock()
    self.root: Path | None = None
    self.total = 0

  def _files(self, root: Path) -> list[tuple[float, int, str]]:
    out = []
    for sub in _EVICTABLE:
      for dirpath, _, names in os.walk(root / sub):
        for n in names:
          p = os.path.join(dirpath, n)
          try: st = os.lstat(p)
          except OSError: continue
          if os.path.islink(p):
            if not os.path.exists(p): os.unlink(p)  # its target was evicted
            continue
          out.append((st.st_mtime, st.st_size, p))
    return out

  def add(self, nbytes: int) -> None:
    with self.lock:
      root = cache_root()
      if root != self.root: self.root, self.total = root, sum(s for _, s, _ in self._files(root))
      else: self.total += nbytes
      if self.total <= (limit := limit_bytes()): return
      files = sorted(self._files(root))
      self.total = sum(s for _, s, _ in files)
      now = time.time()
      for mtime, size, p in files:
        if self.total <= limit * 4 // 5 or now - mtime < _RECENT_S: break
        try: os.unlink(p)
        except FileNotFoundError: pass
        _checked.pop(p, None)
        self.total -= size
      self._files(root)  # drops the links to what went


_usage = _Usage()
