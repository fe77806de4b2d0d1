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
  w.add_name(name)
  w.add_context_length(spec.ctx)
  w.add_embedding_length(spec.dim)
  w.add_block_count(spec.layers)
  w.add_feed_forward_length(spec.hidden)
  w.add_head_count(spec.heads)
  w.add_head_count_kv(spec.kv_heads)
  w.add_layer_norm_rms_eps(1e-5)
  w.add_rope_freq_base(spec.rope_theta)
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
