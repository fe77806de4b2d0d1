"""Tiny llama-family models and tokenizers built at test time (nothing is downloaded): a transformers model with
random weights and a byte-level BPE trained with `tokenizers` on a short text, written to a .gguf with the gguf
package's writer in llama.cpp's tensor names and metadata, quantized or not. Shared by tests/test_llm_*.py and
bench/llm.py."""
from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass, field

import numpy as np

# one text per script and the odd whitespace runs: what the tokenizer is trained on and checked against
CORPUS = [
  "The quick brown fox jumps over the lazy dog. It's 2024, and we've got 1234567 reasons; don't we?",
  "Hello world!\n\n  Indented line\twith a tab,   three spaces and trailing spaces   \n\r\nend",
  "Größe, Ärger, Straße: déjà vu à la française, naïve café résumé. ¿Qué tal? ¡Muy bien!",
  "Привет, как дела? Это тест на русском языке. Ελληνικά γράμματα και αριθμοί 3.14159",
  "日本語のテキストと漢字、カタカナ。中文字符和标点符号！한국어 문장도 있습니다.",
  "مرحبا بالعالم، هذا اختبار. שלום עולם! हिन्दी में वाक्य। ภาษาไทย เพื่อน วิ",
  "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 family, flags 🇫🇷🇯🇵 and symbols ∑∫√∞ ≠ ≤ ≥ → ← ©®™",
  "code: def f(x):\n    return x**2 + 3*x - 1  # comment\n\tif a != b and c >= 10: print('ok')",
  "Numbers 1, 22, 333, 4444, 55555 and 3.0e-10; IDs like abc123XYZ and CamelCaseWords, HELLO world.",
  "URLs https://example.com/path?q=1&r=2 and emails [email protected] <tag attr=\"v\"/> {json: [1, 2]}",
]

# pre-tokenizer split patterns of the HF tokenizer.json files, by the tokenizer.ggml.pre name llama.cpp gives them
SPLIT_PATTERNS = {
  "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
  "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
  "gpt-4o": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
            "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "tekken": "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
            "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"
            "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
}

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                   "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
                   "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
CHATML_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def train_bpe(preset: str = "llama-bpe", vocab_size: int = 600, specials: list[str] | None = None, texts: list[str] | None = None):
  """A byte-level BPE trained on the corpus with the preset's split pattern, laid out as its HF tokenizer.json is."""
  from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
  tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(SPLIT_PATTERNS[preset]), behavior="isolated"), byte_level])
  tok.decoder = decoders.ByteLevel()
  specials = LLAMA3_SPECIALS if specials is None else specials
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator((texts or CORPUS) * 4, trainer)
  return tok


def tokenizer_kv(tok, preset: str, bos: str | None, eos: str, template: str | None, add_bos: bool = True) -> dict:
  """The tokenizer.* metadata llama.cpp's converter writes for a byte-level BPE: tokens by id, their types (3 for the
  added special tokens), the merges and the pre-tokenizer's name."""
  import json
  state = json.loads(tok.to_str())
  vocab = tok.get_vocab(with_added_tokens=True)
  tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
  special = {a["content"] for a in state["added_tokens"] if a["special"]}
  merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
  kv = {"model": "gpt2", "pre": preset, "tokens": tokens, "token_type": [3 if t in special else 1 for t in tokens], "merges": merges,
        "eos_token_id": vocab[eos], "add_bos_token": add_bos and bos is not None}
  if bos is not None: kv["bos_token_id"] = vocab[bos]
  if template is not None: kv["chat_template"] = template
  return kv


@dataclass
class TinySpec:
  arch: str = "llama"      # llama | mistral | qwen2 | qwen3 | gemma (always tied)
  dim: int = 64
  layers: int = 2
  heads: int = 4
  kv_heads: int = 2
  hidden: int = 128
  vocab: int = 600
  tie: bool = False
  ctx: int = 256
  rope_theta: float = 10000.0
  rope: dict = field(default_factory=dict)  # HF rope_parameters beyond theta: {"rope_type": "linear", "factor": 2.0} ...
  seed: int = 0


def hf_model(spec: TinySpec, random_init: bool = True):
  import torch
  import transformers as tf
  cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM), "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
         "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM), "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
         "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM)}[spec.arch]
  kw = dict(vocab_size=spec.vocab, hidden_size=spec.dim, intermediate_size=spec.hidden, num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads, max_position_embeddings=spec.ctx, rms_norm_eps=1e-5,
            tie_word_embeddings=spec.tie or spec.arch == "gemma", rope_parameters={"rope_theta": spec.rope_theta, "rope_type": "default", **spec.rope},
            bos_token_id=None, eos_token_id=None, pad_token_id=None)
  if spec.arch in ("qwen3", "gemma"): kw["head_dim"] = spec.dim // spec.heads
  if spec.arch == "gemma": kw["hidden_activation"] = "gelu_pytorch_tanh"
  if spec.arch == "mistral": kw["sliding_window"] = None
  torch.manual_seed(spec.seed)
  model = cls[1](cls[0](**kw)).eval()
  if not random_init: return model
  with torch.no_grad():  # initializer_range 0.02 makes near-uniform logits: widen them so the argmax is decisive
    for name, p in model.named_parameters():
      if "norm" in name: p.copy_(1 + 0.1 * torch.randn_like(p))
      elif p.ndim == 2: p.normal_(0, 1 / math.sqrt(p.shape[1]) if "embed" not in name else 1.0)
      else: p.normal_(0, 0.1)
  return model


def _kquant_blocks(rows: int, cols: int, qtype, rng: np.random.Generator) -> np.ndarray:
  """Random blocks of a k-quant or IQ4 type (the gguf package has no quantizer for them) whose f16 scale fields are
  set to sane values, so the dequantized weights have magnitudes near 1/sqrt(cols)."""
  import gguf
  block, size = gguf.GGML_QUANT_SIZES[qtype]
  b = rng.integers(0, 256, (rows * cols // block, size), dtype=np.uint8)
  scale = np.float16(1.0 / (32 * math.sqrt(cols)))
  fields = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q2_K": [80, 82], "Q3_K": [108], "Q6_K": [208], "IQ4_NL": [0], "IQ4_XS": [0]}[qtype.name]
  for off in fields: b[:, off:off + 2] = np.frombuffer(np.full(len(b), scale, np.float16).tobytes(), np.uint8).reshape(-1, 2)
  return b.reshape(rows, -1)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
  """llama.cpp's converter stores llama's q and k rows with each head's two rotary halves interleaved (its RoPE rotates
  adjacent pairs, HF's rotates the halves)."""
  return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_HF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "input_layernorm": "attn_norm",
             "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf: str) -> str:
  if hf == "model.embed_tokens.weight": return "token_embd.weight"
  if hf == "model.norm.weight": return "output_norm.weight"
  if hf == "lm_head.weight": return "output.weight"
  _, _, i, rest = hf.split(".", 3)
  mod, kind = rest.rsplit(".", 1)
  return f"blk.{i}.{_HF_NAMES[mod]}.{kind}"


# llama.cpp's mixed files: the type of each 2-D tensor by the end of its name ("" for the rest), as its quantizer picks
# them (finer types for attn_v, ffn_down and output; in a real file only some layers' ffn_down are finer)
MIXES = {
  "Q4_K_M": {"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K", "output.weight": "Q6_K", "": "Q4_K"},
  "Q5_K_M": {"attn_v.weight": "Q6_K", "ffn_down.weight": "Q6_K", "output.weight": "Q6_K", "": "Q5_K"},
  "Q3_K_S": {"ffn_up.weight": "Q4_K", "": "Q3_K"},
  "Q2_K": {"attn_v.weight": "Q4_K", "attn_k.weight": "Q3_K", "ffn_down.weight": "Q3_K", "": "Q2_K"},
}


def finish_gguf(w) -> None:
  """Writes a gguf.GGUFWriter's header, key-values and tensors to its file, and closes it."""
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()


def _header(w, name: str, ctx: int, dim: int, layers: int, hidden: int, heads: int, eps: float, theta: float) -> None:
  """The model keys every architecture's file has."""
  w.add_name(name)
  w.add_context_length(ctx)
  w.add_embedding_length(dim)
  w.add_block_count(layers)
  w.add_feed_forward_length(hidden)
  w.add_head_count(heads)
  w.add_layer_norm_rms_eps(eps)
  w.add_rope_freq_base(theta)


def write_gguf(path: str | pathlib.Path, spec: TinySpec, quant: str | None = None, tok_kv: dict | None = None, name: str = "tiny", model=None):
  """Builds spec's model with transformers (random weights, unless a model built from spec is given), writes it to path
  as llama.cpp would, and returns the HF model with its weights replaced by what the file holds (the dequantized
  values, when quantized), so the two compute the same. quant: one type for every 2-D tensor, or a mix of MIXES."""
  import gguf
  import torch
  from gguf import GGMLQuantizationType as GQ
  model = hf_model(spec) if model is None else model
  rng = np.random.default_rng(spec.seed)
  mix = {k: GQ[v] for k, v in MIXES[quant].items()} if quant in MIXES else None
  qtype = mix[""] if mix is not None else GQ[quant] if quant else None
  def type_of(gname: str):
    return qtype if mix is None else next((t for end, t in mix.items() if end and gname.endswith(end)), qtype)
  w = gguf.GGUFWriter(str(path), spec.arch)
  a = spec.arch
  _header(w, name, spec.ctx, spec.dim, spec.layers, spec.hidden, spec.heads, 1e-5, spec.rope_theta)
  w.add_head_count_kv(spec.kv_heads)
  w.add_rope_dimension_count(spec.dim // spec.heads)
  if spec.arch in ("qwen3", "gemma"): w.add_key_length(spec.dim // spec.heads); w.add_value_length(spec.dim // spec.heads)
  w.add_file_type(qtype.value if qtype is not None else 0)
  rt = spec.rope.get("rope_type")
  if rt == "linear":
    w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(spec.rope["factor"])
  elif rt == "yarn":
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(spec.rope["factor"])
    w.add_rope_scaling_orig_ctx_len(spec.rope["original_max_position_embeddings"])
  elif rt == "llama3":  # llama.cpp stores llama3's per-frequency factors as a tensor
    hd = spec.dim // spec.heads
    freqs = 1.0 / (spec.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    lo_wl, hi_wl = spec.rope["original_max_position_embeddings"] / spec.rope["low_freq_factor"], spec.rope["original_max_position_embeddings"] / spec.rope["high_freq_factor"]
    factors = []
    for f in freqs:
      wl = 2 * math.pi / f
      if wl < hi_wl: factors.append(1.0)
      elif wl > lo_wl: factors.append(spec.rope["factor"])
      else:
        smooth = (spec.rope["original_max_position_embeddings"] / wl - spec.rope["low_freq_factor"]) / (spec.rope["high_freq_factor"] - spec.rope["low_freq_factor"])
        factors.append(1 / ((1 - smooth) / spec.rope["factor"] + smooth))
    w.add_tensor("rope_freqs.weight", np.array(factors, np.float32))
  if tok_kv is None:
    tok_kv = {"model": "gpt2", "pre": "llama-bpe", "tokens": [f"t{i}" for i in range(spec.vocab)], "token_type": [1] * spec.vocab,
              "merges": [], "eos_token_id": 0}
  for k, v in tok_kv.items():
    if k == "model": w.add_tokenizer_model(v)
    elif k == "pre": w.add_tokenizer_pre(v)
    elif k == "tokens": w.add_token_list(v)
    elif k == "token_type": w.add_token_types(v)
    elif k == "merges": w.add_token_merges(v)
    elif k == "scores": w.add_token_scores(v)
    elif k == "chat_template": w.add_chat_template(v)
    elif k == "add_space_prefix": w.add_add_space_prefix(v)
    elif k == "add_bos_token": w.add_add_bos_token(v)
    elif k.endswith("_token_id"): w.add_uint32(f"tokenizer.ggml.{k}", v)
    else: raise KeyError(k)
  sd = model.state_dict()
  with torch.no_grad():
    for hf_name, t in sd.items():
      if hf_name == "lm_head.weight" and (spec.tie or a == "gemma"): continue
      arr = t.float().numpy().copy()
      if a in ("llama", "mistral") and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
        arr = _permute(arr, spec.heads if "q_proj" in hf_name else spec.kv_heads)
      if a == "gemma" and hf_name.endswith("norm.weight"): arr = arr + 1  # llama.cpp's converter folds gemma's 1 + w into the file
      gname = gguf_name(hf_name)
      if qtype is None or arr.ndim != 2: w.add_tensor(gname, arr)
      else:
        tt = type_of(gname)
        if tt.name.endswith("_K") or tt.name.startswith("IQ4"): q = _kquant_blocks(*arr.shape, tt, rng)
        else: q = gguf.quants.quantize(arr, tt)
        w.add_tensor(gname, q, raw_dtype=tt)
        deq = gguf.quants.dequantize(q, tt).reshape(arr.shape)
        if a in ("llama", "mistral") and hf_name.endswith(("q_proj.weight", "k_proj.weight")):  # undo the interleave
          n = spec.heads if "q_proj" in hf_name else spec.kv_heads
          deq = deq.reshape(n, deq.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(deq.shape)
        t.copy_(torch.from_numpy(deq))
  finish_gguf(w)
  if spec.tie or a == "gemma": model.tie_weights()
  return model


def write_tiny_chat(path: str | pathlib.Path, ctx: int) -> str:
  """A tiny llama chat model (Q8_0, llama-3's template, a 600-token BPE) at path, for the server and page tests."""
  kv = tokenizer_kv(train_bpe("llama-bpe", 600), "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", LLAMA3_TEMPLATE)
  write_gguf(path, TinySpec(vocab=len(kv["tokens"]), ctx=ctx, seed=4), quant="Q8_0", tok_kv=kv, name="tiny-chat")
  return str(path)


SPM_SPECIALS = ["<unk>", "<s>", "</s>"]


def train_spm(vocab_size: int = 700, texts: list[str] | None = None):
  """A SentencePiece-style BPE as HF lays out llama's: spaces as "▁" with one in front, byte fallback through the 256
  <0xXX> tokens after <unk>, <s>, </s> (ids 3-258), merges learned on whole lines."""
  from tokenizers import Tokenizer, decoders, models, normalizers, trainers
  tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
  tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
  tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
  specials = SPM_SPECIALS + [f"<0x{b:02X}>" for b in range(256)]
  tok.train_from_iterator((texts or CORPUS) * 4, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False))
  return tok


def spm_tokenizer_kv(tok, template: str | None = None) -> dict:
  """llama.cpp's tokenizer.* metadata for a SentencePiece vocabulary: tokens with scores (a later merge scores lower)
  and types (control, byte, normal)."""
  vocab = tok.get_vocab(with_added_tokens=True)
  tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
  types = [3 if t in SPM_SPECIALS[1:] else 2 if t == "<unk>" else 6 if t.startswith("<0x") and len(t) == 6 else 1 for t in tokens]
  kv = {"model": "llama", "tokens": tokens, "token_type": types, "scores": [0.0 if ty != 1 else -float(i) for i, ty in enumerate(types)],
        "bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"], "unknown_token_id": vocab["<unk>"], "add_bos_token": True}
  if template is not None: kv["chat_template"] = template
  return kv


# ** the other families: mixture of experts and multi-head latent attention **

FAMILIES = ("qwen3moe", "deepseek2", "qwen35")


def hf_family_model(family: str, seed: int = 0):
  """A tiny transformers model of a non-dense family with random weights widened as hf_model's are: qwen3moe (q/k
  norms, 4 experts, 2 per token, renormalized), deepseek2 (multi-head latent attention; a dense first block, then
  4 routed experts and a shared one) or qwen35 (three gated delta net layers, then a gated attention)."""
  import torch
  import transformers as tf
  common = dict(vocab_size=100, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_attention_heads=4,
                max_position_embeddings=64, tie_word_embeddings=False, num_experts_per_tok=2, bos_token_id=None, eos_token_id=None, pad_token_id=None)
  if family == "qwen3moe":
    cfg = tf.Qwen3MoeConfig(**common, num_hidden_layers=2, num_key_value_heads=2, head_dim=8, num_experts=4, norm_topk_prob=True,
                            decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-5)
    cls = tf.Qwen3MoeForCausalLM
  elif family == "qwen35":
    cfg = tf.Qwen3_5TextConfig(**{k: v for k, v in common.items() if k not in ("moe_intermediate_size", "num_experts_per_tok")},
                               num_hidden_layers=4, num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8,
                               linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, rms_norm_eps=1e-6)
    cls = tf.Qwen3_5ForCausalLM
  else:
    cfg = tf.DeepseekV2Config(**common, num_hidden_layers=2, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
                              first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
                              v_head_dim=8, rms_norm_eps=1e-6)
    cls = tf.DeepseekV2ForCausalLM
  torch.manual_seed(seed)
  model = cls(cfg).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name: p.copy_((0 if family == "qwen35" and "linear_attn" not in name else 1) + 0.1 * torch.randn_like(p))  # qwen35: 1 + w
      elif name.endswith("A_log"): p.uniform_(-1, 1)
      elif p.ndim >= 2: p.normal_(0, 1.0 if "embed" in name else 1 / math.sqrt(p.shape[-1]))
      else: p.normal_(0, 0.1)
  return model


def write_family_gguf(path: str | pathlib.Path, family: str, seed: int = 0):
  """hf_family_model(family) written as llama.cpp's converter writes it (float32): experts stacked per projection,
  DeepSeek's kv_b split into per-head k_b (transposed) and v_b, its metadata as the MLA-absorbing converter writes
  it. Returns the transformers model."""
  import gguf
  model = hf_family_model(family, seed)
  c = model.config
  w = gguf.GGUFWriter(str(path), family)
  _header(w, f"tiny-{family}", c.max_position_embeddings, c.hidden_size, c.num_hidden_layers, c.intermediate_size, c.num_attention_heads,
          c.rms_norm_eps, c.rope_parameters["rope_theta"])
  w.add_file_type(0)
  if family != "qwen35":
    w.add_expert_feed_forward_length(c.moe_intermediate_size)
    w.add_expert_used_count(c.num_experts_per_tok)
  if family == "qwen35":
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(int(c.head_dim * c.rope_parameters["partial_rotary_factor"]))
    w.add_uint32("qwen35.full_attention_interval", c.layer_types.index("full_attention") + 1)
    for key, v in (("conv_kernel", c.linear_conv_kernel_dim), ("state_size", c.linear_key_head_dim), ("group_count", c.linear_num_key_heads),
                   ("time_step_rank", c.linear_num_value_heads), ("inner_size", c.linear_value_head_dim * c.linear_num_value_heads)):
      w.add_uint32(f"qwen35.ssm.{key}", v)
  elif family == "qwen3moe":
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_expert_count(c.num_experts)
  else:
    nope, rope, rank = c.qk_nope_head_dim, c.qk_rope_head_dim, c.kv_lora_rank
    w.add_head_count_kv(1)  # the latent is one shared "head"
    w.add_key_length(rank + rope)
    w.add_value_length(rank)
    w.add_uint32("deepseek2.attention.key_length_mla", nope + rope)
    w.add_uint32("deepseek2.attention.value_length_mla", c.v_head_dim)
    w.add_kv_lora_rank(rank)
    w.add_rope_dimension_count(rope)
    w.add_expert_count(c.n_routed_experts)
    w.add_expert_shared_count(c.n_shared_experts)
    w.add_leading_dense_block_count(c.first_k_dense_replace)
    w.add_expert_weights_scale(c.routed_scaling_factor)
  w.add_token_list([f"t{i}" for i in range(c.vocab_size)])
  w.add_tokenizer_model("gpt2")
  names = {**{k: v for k, v in _HF_NAMES.items()}, "self_attn.kv_a_proj_with_mqa": "attn_kv_a_mqa", "self_attn.kv_a_layernorm": "attn_kv_a_norm",
           "mlp.gate": "ffn_gate_inp", "mlp.shared_experts.gate_proj": "ffn_gate_shexp", "mlp.shared_experts.up_proj": "ffn_up_shexp",
           "mlp.shared_experts.down_proj": "ffn_down_shexp"}
  names.update({"linear_attn.in_proj_qkv": "attn_qkv", "linear_attn.in_proj_z": "attn_gate", "linear_attn.in_proj_b": "ssm_beta",
                "linear_attn.in_proj_a": "ssm_alpha", "linear_attn.conv1d": "ssm_conv1d", "linear_attn.norm": "ssm_norm",
                "linear_attn.out_proj": "ssm_out", "post_attention_layernorm": "post_attention_norm" if family == "qwen35" else "ffn_norm"})
  for hf, t in model.state_dict().items():
    arr = t.float().numpy().copy()
    if family == "qwen35":
      arr = _qwen35_layout(hf, arr, c)
      if hf.endswith("A_log"): hf, arr = hf.replace("A_log", "ssm_a"), -np.exp(arr)
      if hf.endswith("dt_bias"): hf = hf.replace("dt_bias", "dt.bias")
    if hf.endswith(("linear_attn.ssm_a", "linear_attn.dt.bias")):
      i = hf.split(".")[2]
      w.add_tensor(f"blk.{i}.ssm_a" if hf.endswith("ssm_a") else f"blk.{i}.ssm_dt.bias", arr)
      continue
    if not hf.startswith("model.layers."):
      w.add_tensor(gguf_name(hf), arr)
      continue
    _, _, i, rest = hf.split(".", 3)
    mod, _, kind = rest.rpartition(".")
    if rest == "mlp.experts.gate_up_proj":
      gate, up = np.split(arr, 2, axis=1)
      w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", gate.copy())
      w.add_tensor(f"blk.{i}.ffn_up_exps.weight", up.copy())
    elif rest == "mlp.experts.down_proj": w.add_tensor(f"blk.{i}.ffn_down_exps.weight", arr)
    elif mod == "self_attn.kv_b_proj":
      kvb = arr.reshape(c.num_attention_heads, c.qk_nope_head_dim + c.v_head_dim, c.kv_lora_rank)
      w.add_tensor(f"blk.{i}.attn_k_b.weight", kvb[:, :c.qk_nope_head_dim].transpose(0, 2, 1).copy())
      w.add_tensor(f"blk.{i}.attn_v_b.weight", kvb[:, c.qk_nope_head_dim:].copy())
    else: w.add_tensor(f"blk.{i}.{names[mod]}.{kind}", arr)
  finish_gguf(w)
  return model


def _qwen35_layout(hf: str, arr: np.ndarray, c) -> np.ndarray:
  """A Qwen3.5 tensor as llama.cpp's converter stores it: its (1 + w) norms as the weight itself, the convolution
  without its middle axis, and the value heads moved from transformers' grouped order (key head g serves value heads
  g*r..g*r+r-1) to the tiled order that repeating the key heads gives (value head p reads key head p % key heads)."""
  if hf.endswith("norm.weight") and "linear_attn" not in hf: return arr + 1
  if hf.endswith("conv1d.weight"): arr = arr[:, 0, :]
  hk, hv, dv = c.linear_num_key_heads, c.linear_num_value_heads, c.linear_value_head_dim
  r = hv // hk
  tiled = [(p % hk) * r + p // hk for p in range(hv)]  # the grouped head at each tiled position
  def heads(x: np.ndarray, axis: int, size: int) -> np.ndarray:
    parts = np.split(x, hv, axis=axis)
    assert parts[0].shape[axis] == size
    return np.concatenate([parts[j] for j in tiled], axis=axis)
  kd = c.linear_key_head_dim * hk
  if hf.endswith(("in_proj_qkv.weight", "conv1d.weight")): return np.concatenate([arr[:2 * kd], heads(arr[2 * kd:], 0, dv)])
  if hf.endswith("in_proj_z.weight"): return heads(arr, 0, dv)
  if hf.endswith(("in_proj_b.weight", "in_proj_a.weight", "dt_bias", "A_log")): return heads(arr, 0, 1)
  if hf.endswith("out_proj.weight"): return heads(arr, 1, dv)
  return arr
