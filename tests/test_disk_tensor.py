"""DISK devices (tinygrad's): a file's bytes as a device's memory, views of it, copies to and from it, and the model
files read through it. Values are checked against the file's bytes and NumPy."""
import os
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from tinyhybrid import Device, Tensor, dtypes
from tinyhybrid.nn.state import get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save
from tinyhybrid.uop.buffers import buffer_uop, byte_range
from tinyhybrid.device import Buffer
from tinyhybrid.uop import Ops
from tinyhybrid.uop.ops import movement


def disk(path) -> str: return f"disk:{path}"


def test_names_and_device(tmp_path):
  fn = tmp_path / "f.bin"
  t = Tensor.empty(4, 4, device=disk(fn))
  assert t.device == f"DISK:{fn}" and Device.canonicalize(f"DISK:{fn}") == t.device
  assert not fn.exists()  # opened on first use
  with pytest.raises(ValueError, match="DISK:/path"): Device.canonicalize("DISK")
  t.realize()
  assert t.numpy().shape == (4, 4) and fn.stat().st_size == 64  # the file grows to hold the buffer


def test_reads_rows_and_bitcasts(tmp_path):
  (fn := tmp_path / "r.bin").write_bytes(bytes(range(256)) * 2)
  t = Tensor.empty(16, 32, device=disk(fn), dtype=dtypes.uint8)
  assert t[1].to(Device.DEFAULT).tolist() == list(range(32, 64))
  want = np.frombuffer(bytes(range(256)) * 2, np.uint8).reshape(16, 32)[1].view(np.uint16).tolist()
  assert t[1].bitcast(dtypes.uint16).to(Device.DEFAULT).tolist() == want
  assert t.bitcast(dtypes.uint16)[1].to(Device.DEFAULT).tolist() == want
  assert t.bitcast(dtypes.uint16).shape == (16, 16) and t.bitcast(dtypes.uint32)[3, 2:4].numpy().tolist() == \
    np.frombuffer(bytes(range(256)) * 2, np.uint32).reshape(16, 8)[3, 2:4].tolist()
  # a view of a view: rows 2..5 of a shrunk uint32 view, seen as uint16
  (fn2 := tmp_path / "v.bin").write_bytes(bytes(range(10, 24)))
  v = Tensor.empty(3, dtype=dtypes.uint32, device=disk(fn2)).shrink(((0, 2),))
  assert (v.bitcast(dtypes.uint16).to("CPU") + 1).tolist() == (np.frombuffer(bytes(range(10, 18)), np.uint16) + 1).tolist()
  assert (Tensor.empty(5, dtype=dtypes.int16, device=disk(fn2)).to("CPU").bitcast(dtypes.uint16) + 1).tolist() == \
    (np.frombuffer(bytes(range(10, 20)), np.uint16) + 1).tolist()


def test_non_contiguous_views_and_compute_are_errors(tmp_path):
  dt = Tensor([0, 1, 2, 3, 4, 5]).to(disk(tmp_path / "s.bin"))
  with pytest.raises(RuntimeError, match="non-contiguous view is not supported"): dt[::2].tolist()
  with pytest.raises(RuntimeError, match="non-contiguous view is not supported"): dt.reshape(2, 3).T.tolist()
  with pytest.raises(RuntimeError, match="non-contiguous view is not supported"): dt[::2] = Tensor([10, 20, 30])
  with pytest.raises(NotImplementedError, match="runs no kernels"):
    Tensor.empty(4, dtype=dtypes.int16, device=disk(tmp_path / "c.bin")).cast(dtypes.float16).to(None).realize()
  with pytest.raises(RuntimeError):  # 3 bytes are no whole number of float16s
    Tensor.empty(3, dtype=dtypes.int8, device=disk(tmp_path / "b.bin")).bitcast(dtypes.float16)
  m = Tensor.arange(12).reshape(3, 4).clone().to(disk(tmp_path / "a.bin"))
  with pytest.raises(RuntimeError):
    m[Tensor([0, 2]), Tensor([1, 3])] = 99
  assert dt.tolist() == [0, 1, 2, 3, 4, 5] and m.numpy().tolist() == np.arange(12).reshape(3, 4).tolist()  # nothing half-written


def test_writes_are_the_files_bytes(tmp_path):
  fn = tmp_path / "ones.bin"
  out = Tensor.ones(10, 10, device="CPU").contiguous().to(disk(fn)).realize()
  del out
  assert fn.read_bytes() == struct.pack("<f", 1.0) * 100
  np.testing.assert_equal(Tensor.empty(10, 10, device=disk(fn)).numpy(), np.ones((10, 10), np.float32))


def test_setitem_and_assign(tmp_path):
  dt = Tensor([[1], [2]]).to(disk(tmp_path / "si.bin"))
  dt[1] = [3]
  assert dt.tolist() == [[1], [3]]
  x = Tensor.empty(4, device=disk(tmp_path / "k.bin"), dtype=dtypes.int32)
  x.assign(Tensor.full((4,), 42, dtype=dtypes.int32)).realize()
  assert x.tolist() == [42] * 4
  x[1:3].assign(Tensor.full((2,), 99, dtype=dtypes.int32)).realize()
  x[3] = 7
  assert x.tolist() == [42, 99, 99, 7]
  y = Tensor.empty(10, device=disk(tmp_path / "i64.bin"), dtype=dtypes.int64)
  for i in range(5): y[2 * i:2 * i + 2].assign(np.array([i, -i]))
  assert y.tolist() == [v for i in range(5) for v in (i, -i)]
  for data, sl in (([0, 1, 2, 3], slice(0, 2)), ([[0, 1, 2, 3], [4, 5, 6, 7]], slice(1, 2))):
    t, ref = Tensor(data, device="CPU").to(disk(tmp_path / f"sl{len(data)}.bin")), np.array(data)
    t[sl] = (val := -ref[sl] - 10)
    ref[sl] = val
    np.testing.assert_equal(t.numpy(), ref)
    np.testing.assert_equal(t.reshape(-1).numpy(), ref.reshape(-1))
  src = Tensor([1, 2, 3, 4], dtype=dtypes.int32).to(disk(tmp_path / "d2d_src.bin"))
  dst = Tensor.empty(4, device=disk(tmp_path / "d2d_dst.bin"), dtype=dtypes.int32)
  dst.assign(src.to("CPU")).realize()
  assert dst.tolist() == [1, 2, 3, 4] and (tmp_path / "d2d_dst.bin").read_bytes() == np.arange(1, 5, dtype=np.int32).tobytes()


def test_assign_through_bitcast_views(tmp_path):
  t = Tensor.empty(32, device=disk(tmp_path / "h.bin"), dtype=dtypes.uint8)
  t[0:8].bitcast(dtypes.int64).assign([12345])
  assert int.from_bytes(t[0:8].data(), "little") == 12345
  f = t[8:24].bitcast(dtypes.float32)
  f.assign(Tensor([1.0, 2.0, 3.0, 4.0], device="CPU"))
  assert f.tolist() == [1.0, 2.0, 3.0, 4.0] and (tmp_path / "h.bin").read_bytes()[8:24] == np.arange(1, 5, dtype=np.float32).tobytes()
  t.bitcast(dtypes.uint16).assign(Tensor.full((16,), 0x4248, dtype=dtypes.uint16)).realize()
  assert t.bitcast(dtypes.float16).numpy().tolist() == [3.140625] * 16 and t.bitcast(dtypes.uint32).tolist() == [0x42484248] * 8


def test_bfloat16_from_disk(tmp_path):
  vals = torch.tensor([10000, -1, -1000, -10000, 20], dtype=torch.float32).bfloat16()
  (fn := tmp_path / "bf.bin").write_bytes(vals.view(torch.int16).numpy().tobytes())
  got = Tensor.empty(5, dtype=dtypes.bfloat16, device=disk(fn)).to(Device.DEFAULT).cast(dtypes.float).tolist()
  assert got == vals.float().tolist() == [9984.0, -1.0, -1000.0, -9984.0, 20.0]


@pytest.mark.parametrize("off", [0, 314, 991, 4096])
def test_copy_from_disk(tmp_path, off):
  (fn := tmp_path / "big.bin").write_bytes(bytes(range(256)) * 1024)
  t = Tensor.empty(256 * 1024, device=disk(fn), dtype=dtypes.uint8)[off:]
  np.testing.assert_equal(t.to(Device.DEFAULT).realize().numpy(), np.tile(np.arange(256, dtype=np.uint8), 1024)[off:])


def test_shard_from_disk(tmp_path):
  (fn := tmp_path / "sh.bin").write_bytes(bytes(range(32)))
  t = Tensor.empty(8, 4, device=disk(fn), dtype=dtypes.uint8)[0:4].shard(("CPU:0", "CPU:1"), axis=0).realize()
  np.testing.assert_equal(t.to("CPU").numpy(), np.arange(16, dtype=np.uint8).reshape(4, 4))


def test_device_keeps_the_file_open_while_mapped(tmp_path):
  from tinyhybrid.runtime.ops_disk import DiskDevice
  (fn := tmp_path / "reuse.bin").write_bytes(bytes(range(256)))
  t1 = Tensor.empty(128, device=disk(fn), dtype=dtypes.uint8)
  t1.to("CPU").realize()
  dev = Device[f"DISK:{fn}"]
  assert isinstance(dev, DiskDevice) and dev.refcount == 1 and dev.mem is not None
  fd = dev.fd
  t2 = Tensor.empty(64, device=disk(fn), dtype=dtypes.uint8)
  t2.to("CPU").realize()
  assert dev.refcount == 2 and dev.fd == fd
  np.testing.assert_equal(t1.numpy(), np.arange(128, dtype=np.uint8))
  np.testing.assert_equal(t2.numpy(), np.arange(64, dtype=np.uint8))
  del t1, t2
  assert dev.refcount == 0 and dev.fd is None


def test_path_tensor(tmp_path):
  (fn := tmp_path / "p.bin").write_bytes(data := np.arange(100, dtype=np.uint8).tobytes())
  t = Tensor(fn)
  assert t.shape == (100,) and t.dtype is dtypes.uint8 and t.device.startswith("DISK:")
  np.testing.assert_equal(t.numpy(), np.frombuffer(data, np.uint8))
  c = Tensor(fn, device="CPU")
  assert c.device == "CPU" and c.numpy().tobytes() == data
  i16 = Tensor(fn, dtype=dtypes.int16)  # the bytes as that dtype, as tinygrad reads them: no cast
  assert i16.shape == (50,) and i16.device.startswith("DISK:")
  np.testing.assert_equal(i16.numpy(), np.frombuffer(data, np.int16))
  with pytest.raises(FileNotFoundError): Tensor(tmp_path / "missing.bin")
  (empty := tmp_path / "e.bin").touch()
  assert Tensor(empty).shape == (0,) and Tensor(empty).numpy().size == 0


def test_safetensors_through_disk(tmp_path):
  from safetensors.torch import save_file
  ref = {"w": torch.randn(16, 16), "b": torch.arange(17, dtype=torch.uint8), "i": torch.arange(17, dtype=torch.int32).reshape(17, 1, 1),
         "h": torch.randn(3, 5).bfloat16(), "s": torch.tensor(7, dtype=torch.int64), "z": torch.zeros(0, 3)}
  save_file(ref, fn := tmp_path / "m.safetensors")
  got = safe_load(fn)
  assert all(v.device == f"DISK:{fn.resolve()}" for v in got.values())
  for k, v in ref.items():
    assert got[k].shape == tuple(v.shape)
    np.testing.assert_equal(got[k].to("CPU").cast(dtypes.float32).numpy() if k == "h" else got[k].numpy(), v.float().numpy() if k == "h" else v.numpy())
  t, start, header = safe_load_metadata(fn)
  assert t.device.startswith("DISK:") and t.shape == (fn.stat().st_size,) and set(header) - {"__metadata__"} == set(ref)

  class M:
    def __init__(self): self.w, self.i = Tensor.empty(16, 16), Tensor.empty(17, 1, 1, dtype=dtypes.int32)
  m = M()
  load_state_dict(m, {k: got[k] for k in ("w", "i")}, verbose=False)
  assert m.w.device == Device.DEFAULT and np.array_equal((m.w * 2).numpy(), ref["w"].numpy() * 2)
  safe_save(get_state_dict(m), out := tmp_path / "out.safetensors")
  back = safe_load(out)
  np.testing.assert_equal(back["i"].numpy(), ref["i"].numpy())


# ** byte_range: which views are one run of memory **

_ops = st.sampled_from(["reshape", "shrink", "permute", "expand", "flip"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.tuples(_ops, st.integers(0, 2 ** 16)), max_size=4))
def test_byte_range_matches_numpy(dims, steps):
  """byte_range(view) is (offset, length) only when numpy says the view's elements are one ascending run, and always
  then while the view is one strided view of the memory (numpy reshaped it without a copy)."""
  n = int(np.prod(dims))
  u = buffer_uop(Buffer("CPU", n, dtypes.int32), tuple(dims))
  ref, strided = np.arange(n).reshape(dims), True
  for op, r in steps:
    shape = ref.shape
    if op == "reshape":
      new = (ref.size,) if r % 2 else tuple(reversed(shape))
      if int(np.prod(new)) != ref.size: continue
      try: np.reshape(ref, new, copy=False)
      except ValueError: strided = False
      ref, u = ref.reshape(new), movement(Ops.RESHAPE, u, new)
    elif op == "shrink":
      arg = tuple((b, b + max(1, (r >> i) % (d - b + 1))) if d > b else (0, d) for i, (d, b) in enumerate(zip(shape, [(r >> (3 * i)) % max(d, 1) for i, d in enumerate(shape)])))
      arg = tuple((b, min(e, d)) for (b, e), d in zip(arg, shape))
      ref, u = ref[tuple(slice(b, e) for b, e in arg)], movement(Ops.SHRINK, u, arg)
    elif op == "permute":
      perm = tuple(np.random.default_rng(r).permutation(len(shape)).tolist())
      ref, u = ref.transpose(perm), movement(Ops.PERMUTE, u, perm)
    elif op == "expand":
      new = tuple(1 + r % 3 if d == 1 else d for d in shape)
      ref, u = np.broadcast_to(ref, new), movement(Ops.EXPAND, u, new)
    else:
      axes = tuple(bool((r >> i) & 1) for i in range(len(shape)))
      ref, u = np.flip(ref, [i for i, f in enumerate(axes) if f]), movement(Ops.FLIP, u, axes)
  flat = ref.reshape(-1)
  run = flat.size == 0 or bool(np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)))
  got = byte_range(u)
  assert (got is not None) == run if strided else got is None or run, (dims, steps)
  if got is not None and flat.size: assert got[1:] == (int(flat[0]) * 4, flat.size * 4)


def test_read_only_file_maps_read_only(tmp_path, monkeypatch):
  (fn := tmp_path / "ro.bin").write_bytes(bytes(range(16)))
  real_open = os.open

  def no_write(path, flags, *args, **kwargs):  # as for a file this process may only read (root may write any: refuse it here)
    if str(path) == str(fn) and flags & (os.O_RDWR | os.O_WRONLY): raise PermissionError(13, "Permission denied", str(path))
    return real_open(path, flags, *args, **kwargs)
  monkeypatch.setattr(os, "open", no_write)
  t = Tensor.empty(16, device=disk(fn), dtype=dtypes.uint8)
  assert t.tolist() == list(range(16)) and not Device[f"DISK:{fn}"].writable
  with pytest.raises(PermissionError, match="read-only"): t.assign(Tensor.zeros(16, dtype=dtypes.uint8)).realize()
  with pytest.raises(PermissionError, match="grow"): Tensor.empty(32, device=disk(fn), dtype=dtypes.uint8).realize().numpy()
  assert fn.read_bytes() == bytes(range(16))
