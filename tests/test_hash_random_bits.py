"""Tensor.keccak against hashlib, and the generator's parts (threefry, random_bits) against a Python-int threefry and
tinygrad's values."""
import hashlib

import numpy as np
import pytest

from tinyhybrid import Tensor, dtypes
from tinyhybrid.mixin.random import _threefry_host

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("n", [0, 12, 135, 136, 137, 300])
def test_sha3_256_of_batches_against_hashlib(n):
  msgs = RNG.integers(0, 256, size=(3, n), dtype=np.uint8)
  got = Tensor(msgs).keccak().numpy()
  assert got.shape == (3, 32) and got.dtype == np.uint8
  for m, g in zip(msgs, got): assert g.tobytes() == hashlib.sha3_256(m.tobytes()).digest()


@pytest.mark.parametrize("cfg", ["sha3_224", "sha3_384", "sha3_512", "shake_128", "shake_256"])
def test_other_configurations(cfg):
  msg = b"The quick brown fox jumps over the lazy dog"
  got = Tensor(msg).keccak(cfg).numpy().tobytes()
  want = getattr(hashlib, cfg)(msg)
  assert got == (want.digest(len(got)) if cfg.startswith("shake") else want.digest())
  assert len(got) == {"sha3_224": 28, "sha3_384": 48, "sha3_512": 64, "shake_128": 16, "shake_256": 32}[cfg]


def test_keccak_reads_any_dtype_as_its_bytes_and_keeps_leading_dims():
  x = RNG.standard_normal((2, 2, 5)).astype(np.float32)
  got = Tensor(x).keccak().numpy()
  assert got.shape == (2, 2, 32)
  for idx in np.ndindex(2, 2): assert got[idx].tobytes() == hashlib.sha3_256(x[idx].tobytes()).digest()
  assert Tensor(b"abc").keccak((136, 6)).numpy().tobytes() == hashlib.sha3_256(b"abc").digest()
  with pytest.raises(ValueError): Tensor(b"abc").keccak("md5")
  with pytest.raises(ValueError): Tensor(b"abc").keccak((100, 6))


def test_threefry_against_python_ints():
  x = np.array([0, 1, 2**40 + 5, 2**64 - 1, 123456789], dtype=np.uint64)
  k = np.array([7, 2**63 + 3, 0, 12345, 2**64 - 1], dtype=np.uint64)
  got = Tensor(x).threefry(Tensor(k)).numpy()
  for xi, ki, g in zip(x.tolist(), k.tolist(), got.tolist()):
    lo, hi = _threefry_host(ki & 0xFFFFFFFF, ki >> 32, xi & 0xFFFFFFFF, xi >> 32)
    assert g == hi << 32 | lo
  with pytest.raises(TypeError): Tensor([1, 2]).threefry(Tensor([3, 4]))


def test_threefry_and_random_bits_are_tinygrads():
  tinygrad = pytest.importorskip("tinygrad")
  x = np.array([0, 1, 2**40 + 5, 2**64 - 1], dtype=np.uint64)
  k = np.array([7, 2**63 + 3, 0, 12345], dtype=np.uint64)
  np.testing.assert_array_equal(Tensor(x).threefry(Tensor(k)).numpy(), tinygrad.Tensor(x).threefry(tinygrad.Tensor(k)).numpy())
  key, ctr = np.array([1, 2], dtype=np.uint32), np.array([2**32 - 3, 7], dtype=np.uint32)
  for num in (1, 7, 64):
    ours = Tensor.random_bits(Tensor(key), Tensor(ctr), num).numpy()
    theirs = tinygrad.Tensor.random_bits(tinygrad.Tensor(key), tinygrad.Tensor(ctr), num).numpy()
    assert ours.dtype == np.uint32 and ours.shape == (num,)
    np.testing.assert_array_equal(ours, theirs)
  assert Tensor.random_bits(Tensor(key), Tensor(ctr), 0).shape == (0,)
  with pytest.raises(ValueError): Tensor.random_bits(Tensor(key).cast(dtypes.int32), Tensor(ctr), 4)


def _tree_hash(data: bytes, piece: int, leaf: int) -> bytes:
  """Tensor.hash's tree with hashlib: SHAKE-128 of each leaf of a zero-padded piece, of their digests, up to one."""
  def piece_digest(p: bytes) -> bytes:
    return hashlib.shake_128(b"".join(hashlib.shake_128(p[i:i + leaf]).digest(16) for i in range(0, piece, leaf))).digest(16)
  chunks = -(-len(data) // piece)
  while chunks > 1:
    data = data.ljust(chunks * piece, b"\0")
    data = b"".join(piece_digest(data[i * piece:(i + 1) * piece]) for i in range(chunks))
    chunks = -(-chunks // (piece // 16))
  return piece_digest(data.ljust(piece, b"\0"))


@pytest.mark.parametrize("n", [12, 1000])
def test_hash_tree_against_hashlib(n, monkeypatch):
  # tinygrad's tree (1 MiB pieces of 4 KiB leaves) on small pieces, so two levels stay cheap: 1000 bytes are 4 pieces
  from tinyhybrid.mixin import hashing
  monkeypatch.setattr(hashing, "HASH_PIECE", 256)
  monkeypatch.setattr(hashing, "HASH_LEAF", 64)
  data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
  got = Tensor(data).hash()
  assert got.dtype is dtypes.uint8 and got.shape == (16,)
  assert got.numpy().tobytes() == _tree_hash(data.tobytes(), 256, 64)
  floats = np.arange(n // 4, dtype=np.float32)  # any dtype hashes as its bytes
  assert Tensor(floats).hash().numpy().tobytes() == _tree_hash(floats.tobytes(), 256, 64)
