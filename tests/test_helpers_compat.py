"""tinygrad's helpers that scripts import (GlobalCounters, colored, fetch, trange) and nn.datasets.mnist."""
import gzip
import pathlib
import urllib.error

import numpy as np
import pytest

from tinyhybrid import GlobalCounters, Tensor, TinyJit, fetch
from tinyhybrid.device import Buffer
from tinyhybrid.dtype import dtypes
from tinyhybrid.helpers import colored, trange


def test_global_counters_count_kernels_ops_and_memory():
  a, b = Tensor(np.arange(1000, dtype=np.float32)).realize(), Tensor(np.ones(1000, dtype=np.float32)).realize()
  GlobalCounters.reset()
  (a + b).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_ops == 1000  # one add per element
  assert GlobalCounters.global_mem == 3 * 4000  # two inputs and the output, float32
  GlobalCounters.reset()
  assert (GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem) == (0, 0, 0)


def test_global_counters_count_jit_replays():
  f = TinyJit(lambda x: (x * 2).realize())
  x = Tensor(np.ones(64, dtype=np.float32)).realize()
  for _ in range(3): f(x)
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.kernel_count == 1 and GlobalCounters.global_ops == 64


def test_mem_used_follows_buffers():
  before = GlobalCounters.mem_used
  b = Buffer("CPU", 1 << 20, dtypes.float32).ensure_allocated()
  assert GlobalCounters.mem_used == before + (4 << 20)
  del b
  assert GlobalCounters.mem_used == before


def test_colored():
  assert colored("ok", "green") == "\x1b[32mok\x1b[0m"
  assert colored("ok", "RED") == "\x1b[91mok\x1b[0m"  # upper case: the bright variant
  assert colored("ok", "blue", background=True) == "\x1b[44mok\x1b[0m"
  assert colored("ok", None) == "ok"
  assert list(trange(3)) == [0, 1, 2]


def test_fetch_caches_and_gunzips(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path / "cache"))
  src = tmp_path / "data.gz"
  src.write_bytes(gzip.compress(b"hello"))
  got = fetch(src.as_uri(), gunzip=True)
  assert got.read_bytes() == b"hello"
  src.write_bytes(gzip.compress(b"changed"))
  assert fetch(src.as_uri(), gunzip=True).read_bytes() == b"hello"  # from the cache
  assert fetch(src.as_uri(), gunzip=True, allow_caching=False).read_bytes() == b"changed"
  assert Tensor.from_url(src.as_uri()).dtype is dtypes.uint8


def test_fetch_local_paths_names_and_checksums(tmp_path, monkeypatch):
  import hashlib
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path / "cache"))
  (src := tmp_path / "w.bin").write_bytes(b"weights")
  assert fetch(str(src)) == src and fetch("./rel/x.bin") == pathlib.Path("./rel/x.bin")  # local paths, as tinygrad's
  to = tmp_path / "here" / "w.bin"  # a name with a '/' is the file itself
  assert fetch(src.as_uri(), name=to, sha256=hashlib.sha256(b"weights").hexdigest().upper()) == to and to.read_bytes() == b"weights"
  with pytest.raises(RuntimeError, match="sha256"): fetch(src.as_uri(), name="bad", sha256="0" * 64)
  assert not (tmp_path / "cache" / "downloads" / "bad").exists()


def test_a_failed_fetch_leaves_nothing(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path / "cache"))
  with pytest.raises(urllib.error.URLError): fetch((tmp_path / "missing").as_uri(), name="x")
  assert not list((tmp_path / "cache" / "downloads").iterdir())


def test_mnist_reads_idx_files(tmp_path, monkeypatch):
  from tinyhybrid.nn import datasets
  monkeypatch.setenv("TINYHYBRID_CACHE", str(tmp_path / "cache"))
  rng = np.random.default_rng(0)
  imgs = {"train": rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), "t10k": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)}
  labels = {"train": rng.integers(0, 10, 5, dtype=np.uint8), "t10k": rng.integers(0, 10, 3, dtype=np.uint8)}
  for split in ("train", "t10k"):
    (tmp_path / f"{split}-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\0" * 16 + imgs[split].tobytes()))
    (tmp_path / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\0" * 8 + labels[split].tobytes()))
  monkeypatch.setattr(datasets, "MNIST_URL", tmp_path.as_uri() + "/")
  xt, yt, xv, yv = datasets.mnist()
  assert xt.shape == (5, 1, 28, 28) and xt.dtype is dtypes.uint8 and xv.shape == (3, 1, 28, 28)
  np.testing.assert_array_equal(xt.numpy()[:, 0], imgs["train"])
  np.testing.assert_array_equal(yt.numpy(), labels["train"])
  np.testing.assert_array_equal(yv.numpy(), labels["t10k"])


def test_small_helpers(capsys):
  from tinyhybrid.helpers import Timing, argfix, ceildiv, dedup, round_up
  assert dedup([3, 1, 3, 2, 1]) == [3, 1, 2]
  assert argfix(1, 2) == argfix((1, 2)) == argfix([1, 2]) == (1, 2)
  assert (ceildiv(7, 2), ceildiv(-7, 2), round_up(7, 4), round_up(8, 4)) == (4, -3, 8, 8)
  with Timing("step ", on_exit=lambda ns: f" ({ns >= 0})"): pass
  out = capsys.readouterr().out
  assert out.startswith("step ") and out.rstrip().endswith("ms (True)")


def test_names_tinygrad_programs_import_from_tensor():
  # tinygrad's test_ops starts with `from tinygrad.tensor import _to_np_dtype`: a lint cleanup once dropped it
  from tinyhybrid.tensor import _to_np_dtype, least_upper_dtype, least_upper_float, sum_acc_dtype
  assert _to_np_dtype(dtypes.float16) is np.float16 and least_upper_dtype(dtypes.int8, dtypes.float32) is dtypes.float32
  assert least_upper_float(dtypes.int32) is dtypes.float32 and sum_acc_dtype(dtypes.int8) is dtypes.int32


def test_dev_is_a_context_var():
  """tinygrad's DEV: Context(DEV=...) changes Device.DEFAULT for the block; setting Device.DEFAULT is refused."""
  from tinyhybrid import Device, Tensor
  from tinyhybrid.helpers import Context
  orig = Device.DEFAULT
  with Context(DEV="NULL"): assert Tensor.empty(1).device == "NULL" and Device.canonicalize(None) == "NULL"
  with Context(DEV=orig.lower()): assert Device.canonicalize(None) == orig
  assert Tensor.empty(1).device == orig
  with pytest.raises(AttributeError, match="setting Device.DEFAULT is deprecated"): Device.DEFAULT = "CPU"
  from tinyhybrid.helpers import DEV
  for d, parts in (("PCI:0+AMD", ("PCI", "0", "AMD", "", "")), ("null:cuda:sm_90", ("", "", "NULL", "CUDA", "sm_90")), ("", ("",) * 5)):
    with Context(DEV=d): assert (DEV.interface, DEV.indices, DEV.device, DEV.renderer, DEV.arch) == parts and str(DEV) == d


def test_tinygrads_switches_are_importable_and_accepted():
  from tinyhybrid import helpers
  from tinyhybrid.helpers import Context
  names = ("WINO", "SPLIT_REDUCEOP", "NOLOCALS", "TRANSCENDENTAL", "NO_MEMORY_PLANNER", "USE_TC", "ALLOW_DEVICE_USAGE", "SCACHE")
  assert all(isinstance(getattr(helpers, n), helpers.ContextVar) for n in names)
  with Context(WINO=1, NO_MEMORY_PLANNER=1, SPLIT_REDUCEOP=0): assert helpers.WINO.value == 1 and helpers.SPLIT_REDUCEOP.value == 0
  assert helpers.SPLIT_REDUCEOP.value == 1
  with pytest.raises(KeyError, match="NOT_A_SWITCH"): Context(NOT_A_SWITCH=1)


def test_tinygrads_small_helpers():
  import pickle
  from tinyhybrid import helpers as h
  assert [h.cmod(a, b) for a, b in [(7, 2), (-7, 2), (7, -2), (-7, -2)]] == [1, -1, 1, -1]
  assert [h.floormod(a, b) for a, b in [(7, 2), (-7, 2), (7, -2), (5, 0)]] == [1, 1, -1, 5]
  assert [h.next_power2(x) for x in (0, 1, 2, 3, 1023, 1025)] == [1, 1, 2, 4, 1024, 2048]
  assert h.to_be32(0x12345678) == 0x78563412 and h.to_be64(0x0102030405060708) == 0x0807060504030201
  assert h.strip_parens("(a+b)") == "a+b" and h.strip_parens("(a)+(b)") == "(a)+(b)"
  assert h.get_shape([[1, 2], [3, 4], [5, 6]]) == (3, 2) and h.fully_flatten([[1, [2]], [3]]) == [1, 2, 3]
  with pytest.raises(ValueError): h.get_shape([[1], [2, 3]])
  assert h.merge_dicts([{"a": 1}, {"b": 2}]) == {"a": 1, "b": 2}
  with pytest.raises(RuntimeError): h.merge_dicts([{"a": 1}, {"a": 2}])
  assert list(h.resolve_pool_pads((1, 2), 2)) == [2, 2, 1, 1] and h.flat_to_grouped((1, 2, 3, 4)) == ((3, 4), (1, 2))
  c = h.count(1, 2)
  assert next(c) == 1 and next(pickle.loads(pickle.dumps(c))) == 3
  import gc
  with h.disable_gc():
    assert not gc.isenabled()
  assert gc.isenabled()
  assert h.system("echo hi") == "hi"
  with pytest.raises(RuntimeError): h.system("false")
  assert h.get_child({"a": [1, {"b": 5}]}, "a.1.b") == 5 and h.get_child(h, "GlobalCounters.kernel_count") == h.GlobalCounters.kernel_count
  assert h.strides_for_shape((2, 3, 4)) == (12, 4, 1) and h.strides_for_shape((3, 1, 2)) == (2, 0, 1) and h.strides_for_shape(()) == ()
  assert h.to_function_name("r_3-4\x1b[31m") == "r_32D4" and h.ansipad(h.colored("ab", "red"), 4).endswith("  ")


def test_host_profile_events():
  from tinyhybrid.helpers import Context, ProfileRangeEvent, cpu_events, cpu_profile, profile_marker
  before = len(cpu_events)
  with Context(PROFILE=1):
    with cpu_profile("load", "TINY") as ev: pass
  assert isinstance(ev, ProfileRangeEvent) and ev.en is not None and ev.en >= ev.st and cpu_events[before] is ev
  profile_marker("here")
  assert cpu_events[-1].arg == {"name": "here", "color": "gray"}


def test_thread_counts_are_context_vars():
  from tinyhybrid.helpers import NUM_CPU_THREADS, PARALLEL
  from tinyhybrid import _core
  assert NUM_CPU_THREADS.value >= 1 and 0 <= PARALLEL.value <= NUM_CPU_THREADS.value
  assert NUM_CPU_THREADS.value == int(__import__("os").environ.get("NUM_CPU_THREADS", _core.hcq.usable_cpu_count()))
