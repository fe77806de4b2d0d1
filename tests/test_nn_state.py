"""nn.state: state dicts, and model files (safetensors, torch .pt/.pth, gguf) checked against the libraries that
write them (torch, safetensors, gguf and its numpy reference dequantizers)."""
import gc
import os
import sys
from collections import OrderedDict, namedtuple

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as GQ

sys.path.insert(0, os.path.dirname(__file__))
from llm_models import finish_gguf  # noqa: E402

from tinyhybrid import Device, Tensor, dtypes  # noqa: E402
from tinyhybrid.nn.quant import GGML_QUANT, dequantize
from tinyhybrid.nn.state import get_parameters, get_state_dict, gguf_load, load_state_dict, safe_load, safe_load_metadata, safe_save, torch_load


gc.freeze()  # the imported libraries' objects (torch's are many) stay out of the collections below, which are then cheap


@pytest.fixture(autouse=True)
def _collect_garbage():
  # works around a core bug: uop/shape.py's shape_of reads the cached shape of sources whose Python wrappers it does
  # not keep alive, so cyclic garbage that holds such a wrapper (e.g. a kernel writer's self-referencing closure),
  # when collected mid-call, makes it raise KeyError('_shape'). Remove once shape_of keeps those wrappers.
  gc.collect()


class _Lin:
  def __init__(self, i: int, o: int): self.weight, self.bias = Tensor.ones(o, i), Tensor.zeros(o)


class _Net:
  def __init__(self):
    self.layers = [_Lin(2, 3), (_Lin(3, 1),)]
    self.extra = {"scale": Tensor([1.0]), "nested": OrderedDict(t=Tensor.ones(2))}
    self.point = namedtuple("P", "x y")(Tensor([0.0]), 5)
    self.name, self.nothing = "net", None


# ** state dict **

def test_get_state_dict_walks_attributes_lists_tuples_dicts():
  net = _Net()
  sd = get_state_dict(net)
  assert list(sd) == ["layers.0.weight", "layers.0.bias", "layers.1.0.weight", "layers.1.0.bias", "extra.scale", "extra.nested.t", "point.x"]
  assert sd["layers.1.0.weight"] is net.layers[1][0].weight
  assert get_parameters(net) == list(sd.values())
  sub = get_state_dict(net.layers[0], prefix="l.")
  assert list(sub) == ["l.weight", "l.bias"] and sub["l.bias"] is net.layers[0].bias
  t = Tensor([1])
  assert get_state_dict(t)[""] is t and get_parameters(3) == [] and get_parameters([t, {"k": t}]) == [t, t]


def test_load_state_dict_values_and_identity():
  net = _Net()
  before = get_state_dict(net)
  new = {k: Tensor(np.arange(v.numel(), dtype=np.float32).reshape(v.shape) + 1) for k, v in before.items()}
  ret = load_state_dict(net, new, verbose=False)
  assert ret == list(before.values())  # the model's own tensors, loaded in place
  assert net.layers[0].weight is before["layers.0.weight"]
  np.testing.assert_equal(net.layers[0].weight.numpy(), np.arange(6, dtype=np.float32).reshape(3, 2) + 1)
  np.testing.assert_equal(net.extra["nested"]["t"].numpy(), [1, 2])
  # the loaded model computes with the new values
  np.testing.assert_allclose((Tensor.ones(1, 2) @ net.layers[0].weight.T + net.layers[0].bias).numpy(), [[4, 9, 14]])


def test_load_state_dict_scalar_vs_one_element_and_consume():
  m = {"a": Tensor([0.0]), "b": Tensor(0.0)}
  sd = {"a": Tensor(3.0), "b": Tensor([4.0])}
  load_state_dict(m, sd, verbose=False, consume=True)
  assert m["a"].shape == (1,) and m["a"].item() == 3.0 and m["b"].shape == () and m["b"].item() == 4.0
  assert sd == {}


def test_load_state_dict_errors():
  net = _Net()
  sd = {k: v.full_like(2.0) for k, v in get_state_dict(net).items()}
  missing = dict(sd)
  del missing["extra.scale"]
  with pytest.raises(KeyError, match="extra.scale"): load_state_dict(net, missing, verbose=False)
  with pytest.raises(KeyError, match="bogus"): load_state_dict(net, {**sd, "bogus": Tensor([1.0])}, verbose=False)
  with pytest.raises(ValueError, match=r"layers\.0\.bias.*\(3,\).*\(4,\)"): load_state_dict(net, {**sd, "layers.0.bias": Tensor.ones(4)}, verbose=False)
  # not strict: missing keys stay as they were, extra ones are ignored
  ret = load_state_dict(net, {**missing, "bogus": Tensor([1.0])}, strict=False, verbose=False)
  assert len(ret) == len(sd) - 1 and net.extra["scale"].item() == 1.0 and net.layers[0].bias.numpy().tolist() == [2, 2, 2]


def test_load_state_dict_verbose_prints(capsys):
  load_state_dict({"a": Tensor([1.0])}, {"a": Tensor([2.0])})
  assert "loaded 1 tensors" in capsys.readouterr().out


def test_load_state_dict_keeps_dtype_of_state():
  # as tinygrad: the model tensor takes the loaded tensor's value (and dtype)
  m = {"w": Tensor([1.0, 2.0])}
  load_state_dict(m, {"w": Tensor([3, 4], dtype=dtypes.float16)}, verbose=False)
  assert m["w"].dtype is dtypes.float16 and m["w"].numpy().tolist() == [3, 4]


# ** safetensors **

_TORCH_OF = {dtypes.float32: torch.float32, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16, dtypes.float64: torch.float64,
             dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16, dtypes.uint16: torch.uint16,
             dtypes.int32: torch.int32, dtypes.uint32: torch.uint32, dtypes.int64: torch.int64, dtypes.uint64: torch.uint64,
             dtypes.bool: torch.bool, dtypes.fp8e4m3: torch.float8_e4m3fn, dtypes.fp8e5m2: torch.float8_e5m2}


def _bits(x) -> np.ndarray:
  """Raw bits of a torch tensor or a Tensor, so every dtype (bf16, fp8) compares exactly."""
  if isinstance(x, Tensor):
    if x.dtype is dtypes.bfloat16: x = x.bitcast(dtypes.uint16)
    if x.dtype in dtypes.fp8s: x = x.bitcast(dtypes.uint8)  # numpy() gives an fp8's values as float32, as tinygrad's
    return np.ascontiguousarray(x.numpy()).reshape(-1).view(np.uint8)
  return x.contiguous().reshape(-1).view(torch.uint8).numpy()


def _torch_values(dt, shape=(2, 3)):
  g = torch.Generator().manual_seed(0)
  if dt is dtypes.bool: return torch.rand(shape, generator=g) > 0.5
  if dtypes.is_float(dt): return (torch.randn(shape, generator=g) * 10).to(_TORCH_OF[dt])
  return torch.randint(0, 100, shape, generator=g).to(_TORCH_OF[dt])


@pytest.mark.parametrize("dt", list(_TORCH_OF), ids=str)
def test_safetensors_roundtrip_against_library(tmp_path, dt):
  from safetensors.torch import load_file, save_file
  ref = {"x": _torch_values(dt), "empty": torch.zeros(0, 4, dtype=_TORCH_OF[dt]), "scalar": _torch_values(dt, ())}
  save_file(ref, tmp_path / "ref.safetensors")
  ours = safe_load(tmp_path / "ref.safetensors")
  for k, v in ref.items():
    assert ours[k].dtype is dt and ours[k].shape == tuple(v.shape)
    np.testing.assert_array_equal(_bits(ours[k]), _bits(v))
  safe_save(ours, tmp_path / "ours.safetensors")
  back = load_file(tmp_path / "ours.safetensors")
  for k, v in ref.items(): assert back[k].dtype == v.dtype and back[k].shape == v.shape and np.array_equal(_bits(back[k]), _bits(v))


def test_safetensors_metadata_order_and_tensor_source(tmp_path):
  fn = tmp_path / "m.safetensors"
  safe_save({"b": Tensor([1.0, 2.0]), "a": Tensor([[3]], dtype=dtypes.int64)}, fn, metadata={"format": "pt"})
  t, data_start, header = safe_load_metadata(fn)
  assert t.dtype is dtypes.uint8 and t.shape == (fn.stat().st_size,) and data_start == 8 + int.from_bytes(fn.read_bytes()[:8], "little")
  assert header["__metadata__"] == {"format": "pt"} and header["a"]["shape"] == [1, 1] and header["b"]["dtype"] == "F32"
  assert list(safe_load(fn)) == [k for k in header if k != "__metadata__"]
  loaded = safe_load(t)  # from the file's bytes as a tensor, as tinygrad allows
  assert loaded["b"].numpy().tolist() == [1.0, 2.0] and loaded["a"].numpy().tolist() == [[3]]
  with pytest.raises(TypeError, match="metadata"): safe_save({"a": Tensor([1.0])}, fn, metadata={"n": 1})
  # lazy and strided tensors are computed and written in row-major order
  safe_save({"lazy": Tensor.arange(6).reshape(2, 3).T * 2}, fn)
  assert safe_load(fn)["lazy"].numpy().tolist() == [[0, 6], [2, 8], [4, 10]]


def test_safetensors_malformed(tmp_path):
  fn = tmp_path / "ok.safetensors"
  safe_save({"w": Tensor.ones(4, 4)}, fn)
  good = fn.read_bytes()
  cases = {"truncated": good[:-5], "short": good[:6], "empty": b"", "garbage": b"\x07" * 64,
           "huge_header": (1 << 40).to_bytes(8, "little") + b"{}", "bad_json": (8).to_bytes(8, "little") + b"{nope!!}"}
  for name, data in cases.items():
    (p := tmp_path / f"{name}.safetensors").write_bytes(data)
    with pytest.raises(ValueError, match=f"{name}.safetensors"): safe_load(p)
    with pytest.raises(ValueError, match="safetensors"): safe_load_metadata(p)
  from safetensors.torch import save_file
  save_file({"c": torch.zeros(2, dtype=torch.complex64)}, p := tmp_path / "complex.safetensors")
  with pytest.raises(ValueError, match="C64"): safe_load(p)


# ** torch files **

def _check_torch(ours, ref):
  assert ours.dtype is {v: k for k, v in _TORCH_OF.items()}[ref.dtype] and ours.shape == tuple(ref.shape)
  np.testing.assert_array_equal(_bits(ours), _bits(ref))


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_against_torch_save(tmp_path, zipped):
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  ref = OrderedDict(
    plain=torch.randn(3, 4), half=torch.randn(5).half(), bf16=torch.randn(2, 3).bfloat16(), long=torch.arange(-3, 3),
    mask=torch.tensor([True, False, True]), byte=torch.arange(7, dtype=torch.uint8),
    transposed=base.t(), sliced=base[1:3, 2:5], offset=base.reshape(-1)[5:9], stepped=base[::2, ::3],
    expanded=torch.tensor([1.0, 2.0]).expand(3, 2), scalar=torch.tensor(2.5), empty=torch.zeros(0, 3),
    shared=base, param=torch.nn.Parameter(torch.ones(2, 2)))
  if zipped: ref.update(u16=torch.arange(5).to(torch.uint16), fp8=torch.randn(4).to(torch.float8_e4m3fn))
  extra = {"epoch": 3, "lr": [0.1, (1, "x")], "seen": {1, 2}, "best": np.float64(0.5), "hist": np.arange(3), "dtype": torch.float16}
  torch.save({"model": ref, **extra}, fn := tmp_path / "ckpt.pt", _use_new_zipfile_serialization=zipped)
  out = torch_load(fn)
  assert isinstance(out["model"], OrderedDict) and out["dtype"] is dtypes.float16 and out["hist"].tolist() == [0, 1, 2]
  assert all(out[k] == extra[k] for k in ("epoch", "lr", "seen", "best"))
  assert list(out["model"]) == list(ref)
  for k, v in ref.items(): _check_torch(out["model"][k], v.detach())


def test_torch_load_plain_tensor_and_module(tmp_path):
  torch.save(torch.arange(6).reshape(2, 3).t(), fn := tmp_path / "t.pth")
  assert torch_load(fn).numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
  torch.manual_seed(0)
  lin = torch.nn.Linear(3, 2)
  torch.save(lin.state_dict(), fn)
  sd = torch_load(Tensor(fn.read_bytes()))  # from the file's bytes as a tensor
  np.testing.assert_array_equal(sd["weight"].numpy(), lin.weight.detach().numpy())
  np.testing.assert_array_equal(sd["bias"].numpy(), lin.bias.detach().numpy())
  ours = _Lin(3, 2)
  load_state_dict(ours, sd, verbose=False)
  x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  np.testing.assert_allclose((Tensor(x) @ ours.weight.T + ours.bias).numpy(), lin(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
  # a whole pickled module: its classes become inert placeholders, its tensors still load
  torch.save(lin, fn)
  obj = torch_load(fn)
  assert "Linear" in repr(obj) and np.array_equal(obj.state["_parameters"]["weight"].numpy(), lin.weight.detach().numpy())


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
def test_torch_load_keeps_an_expand_an_expand(tmp_path, zipped):
  from tinyhybrid.helpers import GlobalCounters
  huge = 10**12  # 4 TB if it were gathered
  ref = {"z": torch.zeros(1).expand(huge), "rows": torch.arange(3.0).reshape(3, 1).expand(3, 50_000_000),
         "mixed": torch.arange(6.0).reshape(2, 1, 3).expand(2, 4, 3)}
  torch.save(ref, fn := tmp_path / "expanded.pt", _use_new_zipfile_serialization=zipped)
  assert fn.stat().st_size < 4096
  before = GlobalCounters.mem_used
  out = torch_load(fn)
  assert GlobalCounters.mem_used - before < 1024  # the storages' few elements, not the expands
  assert out["z"].shape == (huge,) and out["rows"].shape == (3, 50_000_000)
  assert out["z"][123_456_789:123_456_791].tolist() == [0.0, 0.0]
  np.testing.assert_array_equal(out["rows"][:, 49_999_998:].numpy(), ref["rows"][:, 49_999_998:].numpy())
  np.testing.assert_array_equal(out["mixed"].numpy(), ref["mixed"].numpy())


def test_torch_load_bounds_overlapping_strides_by_the_storage(tmp_path):
  base = torch.arange(8.0)
  ok = base.as_strided((6, 3), (1, 1))  # an unfold: overlapping rows, a few times the storage
  torch.save({"ok": ok}, fn := tmp_path / "unfold.pt")
  np.testing.assert_array_equal(torch_load(fn)["ok"].numpy(), ok.numpy())
  torch.save({"bad": torch.zeros(8000).as_strided((4000, 4000), (1, 1))}, bad := tmp_path / "overlap.pt")
  with pytest.raises(ValueError, match="asks for 16000000 elements from a storage of 8000"): torch_load(bad)


def test_torch_load_malformed(tmp_path):
  torch.save({"w": torch.ones(8, 8)}, good := tmp_path / "good.pt")
  torch.save({"w": torch.ones(8, 8)}, legacy := tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
  cases = {"garbage": b"this is not a torch file" * 4, "empty": b"", "zip_truncated": good.read_bytes()[:200],
           "legacy_truncated": legacy.read_bytes()[:-40], "legacy_head": legacy.read_bytes()[:30]}
  for name, data in cases.items():
    (p := tmp_path / f"{name}.pt").write_bytes(data)
    with pytest.raises(ValueError, match=f"{name}.pt"): torch_load(p)


def test_torch_load_runs_no_code(tmp_path, capsys):
  import pickle
  import zipfile
  class Evil:
    def __reduce__(self): return (print, ("pwned",))
  with zipfile.ZipFile(p := tmp_path / "evil.pt", "w") as zf: zf.writestr("archive/data.pkl", pickle.dumps({"x": Evil()}))
  assert "builtins.print" in repr(torch_load(p)["x"]) and "pwned" not in capsys.readouterr().out
  # legacy files are several pickles: none of them is trusted either
  p.write_bytes(pickle.dumps(Evil()) + pickle.dumps(1001))
  with pytest.raises(ValueError, match="magic"): torch_load(p)
  assert "pwned" not in capsys.readouterr().out


# ** gguf **


# where each block keeps its float16 scales: random bytes there could be inf or nan, which would test nothing
_F16_AT = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108], 12: [0, 2], 13: [0, 2], 14: [208], 20: [0], 23: [0], 39: []}


def _random_blocks(ggml_type: int, nb: int, seed: int = 0) -> np.ndarray:
  rng = np.random.default_rng(seed)
  blocks = rng.integers(0, 256, (nb, GGML_QUANT[ggml_type][2]), dtype=np.uint8)
  for o in _F16_AT[ggml_type]: blocks[:, o:o + 2] = (rng.standard_normal(nb) * 4).astype(np.float16).view(np.uint8).reshape(nb, 2)
  return blocks


@pytest.mark.parametrize("ggml_type", list(GGML_QUANT), ids=[v[0] for v in GGML_QUANT.values()])
def test_dequantize_matches_gguf_reference(ggml_type):
  blocks = _random_blocks(ggml_type, 5)
  ref = gguf.quants.dequantize(blocks, GQ(ggml_type)).reshape(-1)
  out = dequantize(Tensor(blocks), ggml_type)
  assert out.dtype is dtypes.float32 and out.shape == (5 * GGML_QUANT[ggml_type][1],)
  np.testing.assert_array_equal(out.numpy(), ref)


def test_dequantize_mxfp4_scale_extremes():
  blocks = _random_blocks(39, 4)
  blocks[:, 0] = [0, 1, 2, 254]  # subnormal, subnormal, smallest normal and huge scales
  np.testing.assert_array_equal(dequantize(Tensor(blocks), 39).numpy(), gguf.quants.dequantize(blocks, GQ.MXFP4).reshape(-1))


def test_dequantize_errors():
  with pytest.raises(ValueError, match="Q4_0"): dequantize(Tensor.zeros(2, 17, dtype=dtypes.uint8), 2)
  with pytest.raises(ValueError, match="99"): dequantize(Tensor.zeros(2, 17, dtype=dtypes.uint8), 99)


def _write_gguf(path, quant_types=(GQ.Q4_0, GQ.Q6_K, GQ.MXFP4, GQ.IQ4_NL, GQ.IQ4_XS)):
  w = gguf.GGUFWriter(path, "llama")
  w.add_uint32("llama.context_length", 128)
  w.add_float32("llama.rope.freq_base", 0.5)
  w.add_string("general.name", "tiny")
  w.add_bool("flag", True)
  w.add_array("ints", [1, -2, 3])
  w.add_array("tokenizer.ggml.tokens", ["a", "bc"])
  ref = {"f32": np.arange(12, dtype=np.float32).reshape(3, 4), "f16": np.linspace(-2, 2, 10, dtype=np.float16).reshape(2, 5),
         "i8": np.arange(-3, 3, dtype=np.int8).reshape(1, 2, 3)}
  for k, v in ref.items(): w.add_tensor(k, v)
  bf16 = np.array([[1.5, -2.0, 3.25]], dtype=np.float32)
  w.add_tensor("bf16", (bf16.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8), raw_dtype=GQ.BF16)
  ref["bf16"] = bf16
  for qt in quant_types:  # two rows of two blocks each
    blocks = _random_blocks(int(qt), 4, seed=int(qt)).reshape(2, -1)
    w.add_tensor(qt.name, blocks, raw_dtype=qt)
    ref[qt.name] = gguf.quants.dequantize(blocks, qt)
  finish_gguf(w)
  return ref


def test_gguf_load(tmp_path):
  ref = _write_gguf(fn := tmp_path / "m.gguf")
  for src in (fn, str(fn), Tensor(fn.read_bytes())):
    kv, sd = gguf_load(src)
    assert kv == {"general.architecture": "llama", "llama.context_length": 128, "llama.rope.freq_base": 0.5, "general.name": "tiny",
                  "flag": True, "ints": [1, -2, 3], "tokenizer.ggml.tokens": ["a", "bc"]}
    assert list(sd) == list(ref)
  expect_dtype = {"f32": dtypes.float32, "f16": dtypes.float16, "i8": dtypes.int8, "bf16": dtypes.bfloat16}
  for k, v in ref.items():
    assert sd[k].shape == v.shape and sd[k].dtype is expect_dtype.get(k, dtypes.float32)  # row-major, as written
    np.testing.assert_array_equal(sd[k].numpy(), v)


def test_gguf_read_reads_a_tensor_when_its_data_is_asked_for(tmp_path):
  from tinyhybrid.llm.gguf import gguf_read
  ref = _write_gguf(fn := tmp_path / "m.gguf")
  alloc = Device[Device.DEFAULT].allocator
  used, cached = alloc.used, alloc._cached
  _, tensors = gguf_read(fn)
  assert alloc.used == used  # a model built tensor by tensor holds one tensor's bytes at a time
  data = tensors["f16"].data
  assert data.dtype is dtypes.float16 and data.shape == (2, 5) and alloc.used == used + 20
  np.testing.assert_array_equal(data.numpy(), ref["f16"])
  np.testing.assert_array_equal(tensors["f16"].data.numpy(), ref["f16"])  # read again, the same
  assert tensors["Q4_0"].data.shape == (4, 18)  # a quantized type's blocks, as bytes
  del data
  assert alloc.used == used and (alloc._cached == cached or not alloc.is_host_memory)  # given back, not cached


def test_gguf_header_matches_the_gguf_packages_reader(tmp_path):
  from tinyhybrid.llm.gguf import gguf_read
  w = gguf.GGUFWriter(fn := tmp_path / "kv.gguf", "llama")
  for i, (name, add) in enumerate([("u8", w.add_uint8), ("i8", w.add_int8), ("u16", w.add_uint16), ("i16", w.add_int16), ("u32", w.add_uint32),
                                   ("i32", w.add_int32), ("u64", w.add_uint64), ("i64", w.add_int64)]):
    add(name, 100 + i if name[0] == "u" else -100 - i)
  w.add_float32("f32", 0.1)
  w.add_float64("f64", 0.1)
  w.add_bool("no", False)
  w.add_string("utf8", "héllo, 世界")
  w.add_array("floats", [0.5, -1.25])
  w.add_array("nested", [[1, 2], [3]])
  w.add_custom_alignment(64)
  w.add_tensor("t", np.arange(6, dtype=np.float32).reshape(2, 3))
  finish_gguf(w)
  kv, tensors = gguf_read(fn)
  reader = gguf.GGUFReader(fn)
  assert kv.pop("nested") == [[1, 2], [3]]  # as written (the package's reader flattens it)
  assert kv == {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.") and f.name != "nested"}
  assert (tensors["t"].offset, tensors["t"].nbytes) == (reader.tensors[0].data_offset, reader.tensors[0].n_bytes) and tensors["t"].offset % 64 == 0
  np.testing.assert_array_equal(tensors["t"].data.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))


def test_gguf_corrupt_length_is_refused_before_it_is_read(tmp_path):
  _write_gguf(fn := tmp_path / "m.gguf", quant_types=(GQ.Q8_0,))
  data = bytearray(fn.read_bytes())
  at = data.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8  # the key, its type, the array's item type
  data[at:at + 8] = (1 << 60).to_bytes(8, "little")  # 2^60 strings
  (bad := tmp_path / "huge.gguf").write_bytes(bytes(data))
  with pytest.raises(ValueError, match="huge.gguf.*runs past the end"): gguf_load(bad)


def test_gguf_malformed(tmp_path):
  _write_gguf(fn := tmp_path / "m.gguf", quant_types=(GQ.Q8_0,))
  good = fn.read_bytes()
  cases = {"empty": b"", "magic": b"GGUX" + good[4:], "version": good[:4] + b"\x63\x00\x00\x00" + good[8:], "header": good[:20],
           "kv": good[:200], "data": good[:-40], "garbage": bytes(range(256)) * 4}
  for name, data in cases.items():
    (p := tmp_path / f"{name}.gguf").write_bytes(data)
    with pytest.raises(ValueError, match=f"{name}.gguf"): gguf_load(p)
  with pytest.raises(FileNotFoundError): gguf_load(tmp_path / "missing.gguf")


def test_tensor_io_reads_a_tensor_as_a_file():
  from tinyhybrid.nn.state import TensorIO
  data = b"Hello World!"
  f = TensorIO(Tensor(data))
  assert f.read(1) == data[:1] and f.read(5) == data[1:6] and f.read(100) == data[6:] and f.read(100) == b""
  assert f.seek(2) == 2 and f.read() == data[2:] and f.seek(-3, 2) == len(data) - 3 and f.read() == data[-3:]
  with pytest.raises(ValueError): TensorIO(Tensor([1.0, 2.0]))


def test_tar_extract(tmp_path):
  import io
  import tarfile
  from tinyhybrid.nn.state import tar_extract
  files = {"a.txt": b"Hello, World!", "b.bin": bytes(range(200)) * 5, "empty": b""}
  with tarfile.open(tmp_path / "t.tar", "w") as tar:
    for name, content in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(content)
      tar.addfile(info, io.BytesIO(content))
  for src in (tmp_path / "t.tar", str(tmp_path / "t.tar"), Tensor((tmp_path / "t.tar").read_bytes())):
    got = tar_extract(src)
    assert set(got) == set(files)
    for name, content in files.items(): assert got[name].numpy().tobytes() == content
  with pytest.raises(FileNotFoundError): tar_extract(tmp_path / "missing.tar")
  (tmp_path / "bad.tar").write_bytes(b"This is not a valid tar file")
  with pytest.raises(tarfile.ReadError): tar_extract(tmp_path / "bad.tar")
