"""The on-disk cache on ordinary machines: a TMPDIR on another filesystem (a tmpfs /tmp), damaged entries of every kind
(rebuilt, never loaded), threads writing one entry at once, and the size cap."""
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tinyhybrid.runtime import diskcache
from tinyhybrid.runtime.compiler import LIB_SUFFIX

# a program whose kernels are new in a fresh cache: prints its values, which the test checks against NumPy's
PROGRAM = """
import numpy as np
from tinyhybrid import Tensor
a = np.arange(24, dtype=np.float32).reshape(4, 6)
print(repr(((Tensor(a) * 3 + 1).relu().sum(1)).numpy().tolist()))
"""
EXPECTED = ((__import__("numpy").arange(24, dtype="float32").reshape(4, 6) * 3 + 1).sum(1)).tolist()


def run(cache: Path, *, tmpdir: Path | None = None, **env: str) -> list[float]: return run_logged(cache, tmpdir=tmpdir, **env)[0]


def run_logged(cache: Path, *, tmpdir: Path | None = None, **env: str) -> tuple[list[float], str]:
  """PROGRAM's values, and what it wrote to stderr (BEAM's progress bars)."""
  full = {**os.environ, "TINYHYBRID_CACHE": str(cache), "POCL_CACHE_DIR": str(cache / "pocl"), **env}
  if tmpdir is not None: full["TMPDIR"] = str(tmpdir)
  res = subprocess.run([sys.executable, "-c", PROGRAM], env=full, capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr[-3000:]
  return eval(res.stdout.strip().splitlines()[-1]), res.stderr


def other_filesystem(than: Path) -> Path:
  for cand in ("/dev/shm", "/run", "/tmp"):
    if os.path.isdir(cand) and os.access(cand, os.W_OK) and os.stat(cand).st_dev != os.stat(than).st_dev: return Path(cand)
  pytest.skip("no writable folder on a filesystem other than the cache's")


def test_kernels_build_when_tmpdir_is_another_filesystem(tmp_path: Path):
  fs = other_filesystem(tmp_path)
  tmpdir = fs / f"tinyhybrid-test-{os.getpid()}"
  tmpdir.mkdir(exist_ok=True)
  try:
    assert os.stat(tmpdir).st_dev != os.stat(tmp_path).st_dev
    assert run(tmp_path / "cache", tmpdir=tmpdir) == EXPECTED
    assert list((tmp_path / "cache" / "kernels").glob(f"*{LIB_SUFFIX}"))
    assert not list(tmpdir.iterdir())  # nothing left behind
  finally:
    for p in tmpdir.iterdir(): p.unlink()
    tmpdir.rmdir()


def test_entries_round_trip_and_damage_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  path = diskcache.subdir("beam") / "entry.json"
  diskcache.write(path, b"[1, 2, 3]")
  assert diskcache.read(path) == b"[1, 2, 3]"
  raw = path.read_bytes()
  for damaged in (raw[: len(raw) // 2], raw[:-1] + bytes([raw[-1] ^ 1]), b"", b"[1, 2, 4]" + raw[9:]):
    path.write_bytes(damaged)
    assert diskcache.read(path) is None
    assert not path.exists()  # deleted, so the next use builds it again


def test_a_link_to_a_damaged_batch_drops_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  d = diskcache.subdir("kernels")
  diskcache.write(batch := d / "batch-x.so", b"\x7fELF" + bytes(100))
  diskcache.link(entry := d / "k.so", batch)
  assert diskcache.valid(entry) and diskcache.read(entry) == b"\x7fELF" + bytes(100)
  with open(batch, "r+b") as f: f.truncate(50)
  assert not diskcache.valid(entry)
  assert not entry.is_symlink() and not batch.exists()


def _kernel_files(cache: Path, sub: str, pattern: str) -> list[Path]:
  return sorted(p for p in (cache / sub).glob(pattern) if not p.is_symlink())


@pytest.mark.parametrize("damage", ["truncate", "garbage_with_a_good_seal"])
def test_a_damaged_cpu_library_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str):
  cache = tmp_path / "cache"
  monkeypatch.setenv("TINYHYBRID_CACHE", str(cache))
  assert run(cache) == EXPECTED
  libs = _kernel_files(cache, "kernels", f"*{LIB_SUFFIX}")
  assert libs
  for lib in libs:
    if damage == "truncate":
      with open(lib, "r+b") as f: f.truncate(lib.stat().st_size // 2)
    else: diskcache.write(lib, b"this is not a shared library")  # passes the seal's check; the loader refuses it
  assert run(cache) == EXPECTED
  for lib in _kernel_files(cache, "kernels", f"*{LIB_SUFFIX}"): assert lib.read_bytes()[:4] == b"\x7fELF"


def test_a_truncated_cl_binary_is_rebuilt(tmp_path: Path):
  pytest.importorskip("cffi")
  from tinyhybrid.runtime.ops_cl import device_ids
  try: device_ids()
  except RuntimeError as e: pytest.skip(str(e))
  cache = tmp_path / "cache"
  assert run(cache, DEV="CL") == EXPECTED
  bins = _kernel_files(cache, "cl", "*.bin")
  assert bins
  for b in bins:
    with open(b, "r+b") as f: f.truncate(b.stat().st_size // 2)  # PoCL crashed on this before the seal
  assert run(cache, DEV="CL") == EXPECTED
  assert _kernel_files(cache, "cl", "*.bin")


def test_a_beam_entry_of_the_wrong_type_is_searched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  cache = tmp_path / "cache"
  assert run(cache, BEAM="1") == EXPECTED
  entries = sorted((cache / "beam").glob("*.json"))
  assert entries
  monkeypatch.setenv("TINYHYBRID_CACHE", str(cache))
  for e in entries: diskcache.write(e, json.dumps({"not": "a list"}).encode())  # a whole entry of the wrong JSON type
  assert run(cache, BEAM="1") == EXPECTED
  for e in entries: assert isinstance(json.loads(diskcache.read(e) or b"null"), list)


def test_cachelevel_0_keeps_no_beam_choice_and_ignore_beam_cache_searches_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  cache = tmp_path / "cache"
  assert run(cache, BEAM="1", CACHELEVEL="0") == EXPECTED
  assert not list((cache / "beam").glob("*.json"))  # tinygrad's CACHELEVEL=0: nothing read or written
  assert run(cache, BEAM="1") == EXPECTED
  entries = sorted((cache / "beam").glob("*.json"))
  assert entries
  monkeypatch.setenv("TINYHYBRID_CACHE", str(cache))
  for e in entries: diskcache.write(e, b"[]")  # a valid choice: no actions
  values, log = run_logged(cache, BEAM="1")
  assert values == EXPECTED and "BEAM" not in log  # the cached choice, no search
  values, log = run_logged(cache, BEAM="1", IGNORE_BEAM_CACHE="1")
  assert values == EXPECTED and "BEAM" in log  # searched again


def test_cachelevel_0_turns_the_key_value_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  from tinyhybrid.helpers import Context, diskcache_get, diskcache_put
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  with Context(CACHELEVEL=0):
    assert diskcache_put("t", "k", 5) == 5 and diskcache_get("t", "k") is None
  assert not (tmp_path / "kv").exists() or not list((tmp_path / "kv").iterdir())
  diskcache_put("t", "k", 6)
  assert diskcache_get("t", "k") == 6
  with Context(CACHELEVEL=0): assert diskcache_get("t", "k") is None


def test_threads_writing_one_entry_never_show_half_of_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  path = diskcache.subdir("cl") / "shared.bin"
  payloads = [bytes([i]) * (1 << 16) for i in range(8)]
  seen, errors = [], []

  def writer(i: int) -> None:
    try:
      for _ in range(20):
        diskcache.write(path, payloads[i])
        diskcache.link(path.with_name("link.bin"), path)
        if (got := diskcache.read(path)) is not None: seen.append(got)
    except Exception as e: errors.append(e)
  threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert not errors
  assert seen and all(s in payloads for s in seen)
  assert sorted(p.name for p in path.parent.iterdir()) == ["link.bin", "shared.bin"]  # no temp file left


def test_the_cache_is_kept_under_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path))
  monkeypatch.setenv("CACHE_SIZE", "1")  # MiB
  monkeypatch.setattr(diskcache, "_usage", diskcache._Usage())
  d = diskcache.subdir("kernels")
  old = [d / f"old{i}.so" for i in range(3)]
  for i, p in enumerate(old):
    diskcache.write(p, bytes(300 << 10))
    os.utime(p, (1000 + i, 1000 + i))  # read long ago, oldest first
  diskcache.link(d / "to_old0.so", old[0])
  keep = tmp_path / "downloads" / "user.bin"
  keep.parent.mkdir()
  keep.write_bytes(bytes(2 << 20))  # downloads are the user's: never evicted, not counted
  diskcache.write(new := d / "new.so", bytes(300 << 10))
  left = sorted(p.name for p in d.iterdir())
  assert left == ["new.so", "old2.so"], left  # the least recently read went first, and the link to one of them
  assert sum(p.stat().st_size for p in d.iterdir()) <= (1 << 20) * 4 // 5
  assert keep.exists() and new.exists()


def test_cache_keys_hash_as_hashlib_does():
  # CPython's own SHA-256 (no OpenSSL loaded): the same digests, so keys written before stay valid
  import hashlib

  from tinyhybrid import digest
  for data in (b"", b"abc", bytes(range(256)) * 1000, memoryview(b"a view")):
    assert digest.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
