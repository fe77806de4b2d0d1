"""tinyhybrid.llm.model against transformers: tiny models with random weights written to .gguf files as llama.cpp
would (tests/llm_models.py), in float32 and quantized; the logits of a prompt must match (quantized: transformers
runs the dequantized weights), greedy generation must give the same tokens, and a JIT'd decode step must neither
compile nor allocate. Bad files and prompts are refused with clear errors. The decode steps' products multiply
int8-quantized activations by default (llm/quantized.py int_matvec, as llama.cpp's do): the comparisons to 2e-5 run
with INT_MATVEC=0, and test_int8_activations checks the default against transformers within that quantization's
error."""
import gc
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from llm_models import TinySpec, finish_gguf, write_gguf  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from tinyhybrid import Device, GlobalCounters, dtypes  # noqa: E402
from tinyhybrid.engine import realize  # noqa: E402
from tinyhybrid.helpers import Context  # noqa: E402
from tinyhybrid.llm.model import Transformer  # noqa: E402

RNG = np.random.default_rng(3)
PROMPT = [int(t) for t in RNG.integers(0, 600, 11)]  # one prompt chunk of 8, then single tokens


@pytest.fixture(autouse=True)
def float_products(request):
  if "int8" in request.node.name: yield
  else:
    with Context(INT_MATVEC=0): yield


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """name -> (path, transformers model), built once per module and only when a test asks for it."""
  d, built = tmp_path_factory.mktemp("llm"), {}
  def get(name: str, spec: TinySpec, quant: str | None = None):
    if name not in built: built[name] = (str(d / f"{name}.gguf"), write_gguf(d / f"{name}.gguf", spec, quant=quant))
    return built[name]
  return get


def hf_logits(hf, ids: list[int]) -> np.ndarray:
  with torch.no_grad(): return hf(torch.tensor([ids])).logits[0].numpy()


def check_logits(path: str, hf, ids: list[int], tol: float = 2e-5) -> Transformer:
  model, _ = Transformer.from_gguf(path)
  ref = hf_logits(hf, ids)
  out = model.logits(ids, 0)
  np.testing.assert_allclose(out, ref[-1], rtol=tol, atol=tol * np.abs(ref[-1]).max())
  # the same positions one token at a time through the decode step, the cache filled by the steps before
  model.cached.clear()
  for i, t in enumerate(ids[:4]): np.testing.assert_allclose(model.logits([t], i), ref[i], rtol=tol, atol=tol * np.abs(ref[i]).max())
  return model


CASES = {  # name: (spec, quant); nn/quant.py's unpacking of every type is checked against gguf's in test_nn_state.py
  "llama_f32": (TinySpec(), None), "llama_f16": (TinySpec(), "F16"), "llama_q8_0": (TinySpec(), "Q8_0"), "llama_q4_0": (TinySpec(), "Q4_0"),
  "mistral_f32": (TinySpec(arch="mistral"), None), "qwen2_f32": (TinySpec(arch="qwen2"), None), "qwen3_q8_0": (TinySpec(arch="qwen3"), "Q8_0"),
  "gemma_f32": (TinySpec(arch="gemma"), None), "llama_tied_q8_0": (TinySpec(tie=True), "Q8_0"),
  # k-quants are blocks of 256: wider models
  "llama_q4_k": (TinySpec(dim=256, hidden=256), "Q4_K"), "llama_iq4_xs": (TinySpec(dim=256, hidden=256), "IQ4_XS"),
  "llama_q4_k_m": (TinySpec(dim=256, hidden=256), "Q4_K_M"), "qwen2_q6_k": (TinySpec(arch="qwen2", dim=256, hidden=256), "Q6_K"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_logits_match_transformers(files, name):
  spec, quant = CASES[name]
  path, hf = files(name, spec, quant)
  check_logits(path, hf, PROMPT)


@pytest.mark.parametrize("quant", ["BF16", "Q4_1", "Q5_0", "Q5_1", "MXFP4"])
def test_other_types_match_transformers(files, quant):
  # the rest of the 32-wide block types, each unpacked inside the matmuls: the prompt's last logits
  path, hf = files(f"llama_{quant.lower()}", TinySpec(), quant)
  model, _ = Transformer.from_gguf(path, max_context=64)
  ref = hf_logits(hf, PROMPT)[-1]
  np.testing.assert_allclose(model.logits(PROMPT, 0), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("quant", ["IQ4_NL"])
def test_iq4_files_match_transformers(files, quant):  # (IQ4_XS: CASES)
  # IQ4's 4-bit codes pick one of 16 non-linear levels (a lookup inside the matmul's kernel)
  path, hf = files(f"llama_{quant.lower()}", TinySpec(dim=256, hidden=256), quant)
  model, _ = Transformer.from_gguf(path, max_context=64)
  ref = hf_logits(hf, PROMPT)[-1]
  np.testing.assert_allclose(model.logits(PROMPT, 0), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("kind, dim, layer_bytes, tol", [("f16", 64, 2 * 64 * 16 * 2, 2e-3), ("q8_0", 128, 2 * 64 * (32 + 2), 2e-2)])
def test_kv_cache_types(files, kind, dim, layer_bytes, tol):
  # --kv_dtype: keys and values rounded as they are written (f16: llama.cpp's default cache; q8_0: int8 codes and a
  # half scale per 32 values), read back as float32, in the prompt's kernels and the decode steps' JIT. layer_bytes:
  # one layer's keys, 2 kv heads x 64 positions (a head of 16, or of 32 for q8_0's blocks)
  path, hf = files(f"llama_f32_dim{dim}", TinySpec(dim=dim))
  model, _ = Transformer.from_gguf(path, max_context=64, kv_dtype=kind)
  assert [b.cache_k.nbytes() for b in model.blocks] == [layer_bytes] * 2
  ref = hf_logits(hf, PROMPT)[-1]
  got = model.logits(PROMPT, 0)
  np.testing.assert_allclose(got, ref, rtol=0, atol=tol * np.abs(ref).max())
  assert not np.allclose(got, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())  # it is the rounded cache that was read
  with torch.no_grad():  # and decode steps (the JIT's) over it
    ref_ids = hf.generate(torch.tensor([PROMPT]), max_new_tokens=3, do_sample=False, min_new_tokens=3)[0, len(PROMPT):].tolist()
  assert list(model.generate(list(PROMPT), max_new=3)) == ref_ids


def test_kv_cache_type_errors(files):
  spec, quant = CASES["llama_f32"]
  path, _ = files("llama_f32", spec, quant)
  with pytest.raises(ValueError, match="kv_dtype 'q4'"): Transformer.from_gguf(path, kv_dtype="q4")
  with pytest.raises(ValueError, match="multiple of 32, not 16"): Transformer.from_gguf(path, kv_dtype="q8_0")


@pytest.mark.parametrize("name", ["llama_q4_0", "llama_q4_k_m", "qwen2_q6_k"])
def test_int8_activations(files, name):
  # the default decode step (int8 activations per block; each product within ~0.5% of its range, and exact where
  # the activations are, tests/test_llm_quantized.py): the first position's logits within 3% of their range of
  # transformers' float32 ones. Later positions are not compared: these random models' attention is so sharp that
  # the products' 0.5% moved the third position's logits by 65% of their range (q4_k_m, INT_MATVEC=1 against 0)
  spec, quant = CASES[name]
  path, hf = files(name, spec, quant)
  model, _ = Transformer.from_gguf(path, max_context=64)
  assert any(w.panel for b in model.blocks for w in (b.attn_out, b.down))
  ref = hf_logits(hf, PROMPT[:1])[0]
  got = model.logits(PROMPT[:1], 0)
  np.testing.assert_allclose(got, ref, rtol=0, atol=0.03 * np.abs(ref).max())
  assert not np.allclose(got, ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())  # the int8 products were the ones run


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q5_K_M", "Q3_K_S", "Q2_K"])
def test_mixed_type_files_match_transformers(files, mix):
  # llama.cpp's quantizer mixes types across the projections that are one matmul here (q, k, v; gate, up): each run
  # of one type is its own matmul, the products side by side
  from tinyhybrid.llm.quantized import JoinedWeight
  path, hf = files(f"llama_{mix.lower()}", TinySpec(dim=256, hidden=256), mix)
  model, _ = Transformer.from_gguf(path, max_context=64)
  joined = [w for b in model.blocks for w in (b.qkv, b.gate_up) if isinstance(w, JoinedWeight)]
  assert joined and all(len({p.ggml_type for p in w.parts}) == len(w.parts) > 1 for w in joined)
  ref = hf_logits(hf, PROMPT)[-1]
  np.testing.assert_allclose(model.logits(PROMPT, 0), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
  with torch.no_grad():
    ref_ids = hf.generate(torch.tensor([PROMPT]), max_new_tokens=4, do_sample=False, min_new_tokens=4)[0, len(PROMPT):].tolist()
  assert list(model.generate(list(PROMPT), max_new=4)) == ref_ids


def test_long_prompt_chunks(files):
  # 64 + 8 + 3 tokens: every prompt chunk size, the later ones attending over what the earlier ones cached
  path, hf = files("llama_f32", *CASES["llama_f32"])
  ids = [int(t) for t in RNG.integers(0, 600, 75)]
  model, _ = Transformer.from_gguf(path)
  ref = hf_logits(hf, ids)
  np.testing.assert_allclose(model.logits(ids, 0), ref[-1], rtol=2e-5, atol=2e-5 * np.abs(ref[-1]).max())
  # a prompt that extends the cached one runs only its new tokens
  more = ids + [5, 6, 7]
  assert model.reusable_prefix(more) == len(ids)
  np.testing.assert_allclose(model.logits(more[len(ids):], len(ids)), hf_logits(hf, more)[-1], rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("rope", [{"rope_type": "linear", "factor": 4.0},
                                  {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 64},
                                  {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}], ids=lambda r: r["rope_type"])
def test_rope_scaling(files, rope):
  arch = "qwen2" if rope["rope_type"] == "yarn" else "llama"
  path, hf = files(f"rope_{rope['rope_type']}", TinySpec(arch=arch, rope=rope))
  ids = [int(t) for t in RNG.integers(0, 600, 100)]  # positions far enough for the scaling to matter
  model, _ = Transformer.from_gguf(path)
  ref = hf_logits(hf, ids)[-1]
  np.testing.assert_allclose(model.logits(ids, 0), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
  _, plain = files(f"rope_{rope['rope_type']}_none", TinySpec(arch=arch))
  assert np.abs(hf_logits(plain, ids)[-1] - ref).max() > 1e-3  # the scaling changes the answer: the match above means something


@pytest.mark.parametrize("name", ["llama_f32", "llama_q8_0"])
def test_greedy_generation_matches_transformers(files, name):
  path, hf = files(name, *CASES[name])
  model, _ = Transformer.from_gguf(path)
  ours = list(model.generate(list(PROMPT), max_new=24))
  with torch.no_grad():
    ref = hf.generate(torch.tensor([PROMPT]), max_new_tokens=24, do_sample=False, min_new_tokens=24)[0, len(PROMPT):].tolist()
  assert ours == ref


def caches() -> tuple[int, int, int]: return len(realize.schedule_cache), len(realize.kernel_cache), len(Device["CPU"]._cache)


def cache_keys() -> list[set]: return [set(realize.schedule_cache), set(realize.kernel_cache), Device["CPU"].program_keys()]


def test_warmup_keeps_only_its_captures(files):
  # each chunk size's schedules and kernels are let go once captured; generating after compiles nothing
  path, hf = files("llama_q8_0", *CASES["llama_q8_0"])
  model, _ = Transformer.from_gguf(path, max_context=64)
  before = cache_keys()
  model.warmup()
  assert model.decode_jit.captured is not None and all(j.captured is not None for j in model.prefill_jits.values())
  warm = cache_keys()
  assert all(after <= b for after, b in zip(warm, before))
  ours = list(model.generate(list(PROMPT), max_new=6))
  assert cache_keys() == warm
  with torch.no_grad():
    ref = hf.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False, min_new_tokens=6)[0, len(PROMPT):].tolist()
  assert ours == ref


def test_decode_step_is_one_replay_that_allocates_nothing(files):
  path, _ = files("llama_q8_0", *CASES["llama_q8_0"])
  model, _ = Transformer.from_gguf(path, max_context=64)
  gen = model.generate(list(PROMPT))
  for _ in range(3): next(gen)  # the decode JIT runs, captures, replays
  assert model.decode_jit.cnt >= 2 and model.decode_jit.captured is not None
  before, mem, runs = caches(), GlobalCounters.mem_used, GlobalCounters.kernel_count
  for _ in range(5): next(gen)
  assert caches() == before, "a decode step scheduled or compiled something"
  assert GlobalCounters.mem_used == mem, "a decode step allocated memory"
  assert (GlobalCounters.kernel_count - runs) % len(model.decode_jit.captured.jit_cache) == 0


@pytest.mark.parametrize("name", ["llama_q4_k_m", "llama_f32"])
def test_loading_leaves_nothing_in_the_kernel_caches(files, name):
  # the kernels that unpack and pack the weights run once: a loaded model's memory holds none of their schedules,
  # lowered kernels or programs (the 0.5B model's warm-up peaked 5 MB higher on them)
  path, hf = files(name, *CASES[name])
  before, runs = cache_keys(), GlobalCounters.kernel_count
  model, _ = Transformer.from_gguf(path, max_context=64)
  # (the caches are bounded: loading's entries may have pushed some of the old ones out)
  assert GlobalCounters.kernel_count > runs and all(after <= b for after, b in zip(cache_keys(), before))
  ref = hf_logits(hf, list(PROMPT))[-1]  # and the model runs, its kernels compiled again
  np.testing.assert_allclose(model.logits(list(PROMPT), 0), ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())


def test_looked_up_embedding_rows_do_not_stay_in_the_process(files):
  # the embedding stays in the file's mapped pages, and each lookup maps 64-256 KiB around its row: a generation lets
  # them go after every step, so a long one does not bring the whole table into the process's memory
  path, _ = files("llama_q8_0", *CASES["llama_q8_0"])
  model, _ = Transformer.from_gguf(path, max_context=64)
  def resident_kib() -> int:
    total, ours = 0, False
    for line in open("/proc/self/smaps"):
      head = line.split()
      if "-" in head[0] and not head[0].endswith(":"): ours = line.rstrip().endswith(path)
      elif ours and head[0] == "Rss:": total += int(head[1])
    return total
  assert resident_kib() == 0 and any(line.rstrip().endswith(path) for line in open("/proc/self/maps"))
  gen = model.generate(list(PROMPT))
  for _ in range(4):
    next(gen)
    assert resident_kib() == 0


def test_each_layer_runs_once_a_step(files):
  # a decode step and a prompt chunk run a fixed number of kernels per layer: one layer more adds the same kernels
  # whatever the depth (a lazy residual stream once made each layer's realize recompute every layer before it)
  counts = []
  for layers in (1, 2, 3):
    path, _ = files(f"llama_q8_0_{layers}l", TinySpec(layers=layers), "Q8_0")
    model, _ = Transformer.from_gguf(path, max_context=64)
    model.warmup()  # captures the decode step and each prompt chunk
    counts.append((len(model.decode_jit.captured.jit_cache), len(model.prefill_jits[8].captured.jit_cache)))
  for step in range(2): assert counts[2][step] - counts[1][step] == counts[1][step] - counts[0][step], counts


@pytest.mark.parametrize("name", ["llama_q4_0", "llama_q8_0", "llama_q4_k", "llama_iq4_xs", "llama_q4_k_m"])
def test_weights_stay_quantized(files, name):
  # everything the model allocates, weights, KV cache and activations of a prompt chunk and decode steps, takes
  # less than the weights alone would as float32: the matmuls read the quantized bytes, nothing is unpacked to memory
  spec, quant = CASES[name]
  path, hf = files(name, spec, quant)
  f32_bytes = 4 * sum(p.numel() for n, p in hf.named_parameters() if "norm" not in n)
  gc.collect()  # the models of earlier tests are gone before counting
  mem = GlobalCounters.mem_used
  model, _ = Transformer.from_gguf(path, max_context=64)
  list(model.generate(list(PROMPT), max_new=4))
  used = GlobalCounters.mem_used - mem
  # (Q4_K_M keeps attn_v, ffn_down and the output in Q6_K: 6.6 bits a weight)
  assert model.weight_bytes < f32_bytes * (0.3 if quant == "Q8_0" else 0.2 if quant == "Q4_K_M" else 0.16)
  # unpacking even the embedding alone (a quarter of these weights) to float32 would cross the bound
  assert used < f32_bytes * (0.45 if quant == "Q8_0" else 0.3), (used, model.weight_bytes, f32_bytes)


def test_generate_stops_at_the_context(files):
  path, _ = files("llama_f32", *CASES["llama_f32"])
  model, _ = Transformer.from_gguf(path, max_context=16)
  assert model.max_context == 16
  assert len(list(model.generate(list(PROMPT)))) == 16 - len(PROMPT)


# ** bad input **

def test_prompt_longer_than_the_context(files):
  path, _ = files("llama_f32", *CASES["llama_f32"])
  model, _ = Transformer.from_gguf(path, max_context=16)
  with pytest.raises(ValueError, match="16"): next(model.generate(list(range(16))))
  with pytest.raises(ValueError, match="vocabulary"): model.logits([600], 0)


def _rewrite(src: str, dst, arch: str | None = None, tensor_type=None) -> None:
  """A copy of a gguf with another architecture name, or its first matrix's type changed to tensor_type."""
  r = gguf.GGUFReader(src)
  w = gguf.GGUFWriter(str(dst), arch or r.fields["general.architecture"].contents())
  for f in r.fields.values():
    if f.name.startswith("GGUF.") or f.name == "general.architecture": continue
    name = f.name.replace(r.fields["general.architecture"].contents(), arch) if arch and f.name.startswith(r.fields["general.architecture"].contents() + ".") else f.name
    v = f.contents()
    vt = f.types[0]
    if vt == gguf.GGUFValueType.ARRAY: w.add_key_value(name, v, vt, sub_type=f.types[-1])
    else: w.add_key_value(name, v, vt)
  swapped = False
  for t in r.tensors:
    data, typ = np.asarray(t.data), t.tensor_type
    if tensor_type is not None and not swapped and len(t.shape) == 2 and t.shape[0] % 256 == 0:
      size = gguf.GGML_QUANT_SIZES[tensor_type]
      data, typ, swapped = np.zeros((int(t.shape[1]), int(t.shape[0]) // size[0] * size[1]), np.uint8), tensor_type, True
    w.add_tensor(t.name, data, raw_dtype=typ)
  finish_gguf(w)


def test_unsupported_architecture_and_type(files, tmp_path):
  path, _ = files("llama_f32", *CASES["llama_f32"])
  _rewrite(path, bad := tmp_path / "falcon.gguf", arch="falcon")
  with pytest.raises(ValueError, match="falcon"): Transformer.from_gguf(bad)
  path256, _ = files("llama_q4_k", *CASES["llama_q4_k"])
  _rewrite(path256, bad := tmp_path / "iq2.gguf", tensor_type=gguf.GGMLQuantizationType.IQ2_XXS)
  with pytest.raises(ValueError, match="IQ2_XXS"): Transformer.from_gguf(bad)


def test_truncated_and_missing_files(files, tmp_path):
  path, _ = files("llama_f32", *CASES["llama_f32"])
  data = open(path, "rb").read()
  for n in (len(data) - 100, 1000, 10):
    (p := tmp_path / f"cut{n}.gguf").write_bytes(data[:n])
    with pytest.raises(ValueError, match=f"cut{n}.gguf"): Transformer.from_gguf(p)
  with pytest.raises(FileNotFoundError): Transformer.from_gguf(tmp_path / "missing.gguf")


@pytest.mark.parametrize("pos", [0, 63, 64, 150])
def test_flash_decode_is_softmax_attention_over_the_positions_up_to_its_own(pos):
  # a decode step's attention in chunks of FLASH_CHUNK positions, each its own maximum and sum, combined in a second
  # step; positions past pos (the rest of the last chunk: stale or zero cache slots) are masked
  from tinyhybrid import Tensor
  from tinyhybrid.llm.dense import FLASH_CHUNK, flash_decode, flash_chunks
  KV, G, hd, n = 2, 3, 8, flash_chunks(pos)
  rng = np.random.default_rng(pos)
  q, k, v = (rng.standard_normal(s).astype(np.float32) * 3 for s in ((KV, G, hd), (KV, n, FLASH_CHUNK, hd), (KV, n, FLASH_CHUNK, hd)))
  got = flash_decode(Tensor(q), Tensor(k), Tensor(v), pos).numpy().reshape(KV, G, hd)
  kk, vv = k.reshape(KV, -1, hd)[:, :pos + 1], v.reshape(KV, -1, hd)[:, :pos + 1]
  s = np.einsum("kgd,kld->kgl", q, kk) / np.sqrt(hd)
  p = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(got, np.einsum("kgl,kld->kgd", p / p.sum(-1, keepdims=True), vv), rtol=1e-5, atol=1e-5)
