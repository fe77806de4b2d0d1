"""The model's own tokenizer, rebuilt from the .gguf file's tokenizer.* metadata, as llama.cpp reads it.

Two vocabularies:
- "gpt2": byte-level BPE (llama 3, qwen, mistral's tekken, ...). The text is split into words by the regexes of the
  file's pre-tokenizer preset (tokenizer.ggml.pre; PRESETS below, those of the models' tokenizer.json files), each
  word's UTF-8 bytes are mapped to GPT-2's printable byte alphabet and merged by the ranked merges. The regex split
  and the merging run in the `tokenizers` package (HF's Rust implementation: the reference for these files); which
  preset, vocabulary, merges and special tokens it gets is decided here.
- "llama": SentencePiece (llama 1/2, mistral v0.1, gemma). Ours, llama.cpp's algorithm: spaces become "▁" (with one
  in front when the vocabulary asks for it), the text's characters are merged pairwise, best score first, while the
  pair is a token, and a character that is no token falls back to its UTF-8 bytes' <0xXX> tokens.

In both, control and user-defined tokens written in the text ("<|eot_id|>") are that token, never split."""
from __future__ import annotations

import codecs
import heapq
import re
from typing import Any, Callable

# tokenizer.ggml.pre -> the split regexes of its tokenizer.json (applied in order, each match kept as a word)
_LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_UP, _LO = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+{_CONTR}?|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*{_CONTR}?|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = rf"[^\r\n\p{{L}}\p{{N}}]?{_UP}*{_LO}+|[^\r\n\p{{L}}\p{{N}}]?{_UP}+{_LO}*|\p{{N}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
PRESETS: dict[str, tuple[str, ...]] = {
  "llama3": (_LLAMA3,), "qwen2": (_QWEN2,), "gpt-4o": (_GPT4O,), "tekken": (_TEKKEN,), "gpt2": (_GPT2,),
}
# the names files use for them (the ones the seeds' tinygrad.llm accepts, and llama.cpp's for the same splits)
PRESET_ALIASES = {"llama-v3": "llama3", "llama-bpe": "llama3", "smaug-bpe": "llama3", "falcon3": "llama3", "pixtral": "tekken",
                  "olmo": "llama3", "kimi-k2": "llama3", "glm4": "llama3", "qwen35": "qwen2", "qwen35moe": "qwen2",
                  "deepseek-r1-qwen": "qwen2", "gpt-2": "gpt2", "default": "gpt2", "mpt": "gpt2", "phi-2": "gpt2"}
# llama.cpp takes a word that is a whole token as that token before merging for these (HF: ignore_merges)
IGNORE_MERGES = {"llama3"}

# token types (llama.cpp's llama_token_type)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# the texts of tokens that end a turn in the chat formats llama.cpp knows (its end-of-generation set)
_END_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "</s>",
              "<|end_of_text|>", "<｜end▁of▁sentence｜>")


def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's byte alphabet: printable bytes stand for themselves, the others for code points from 256 on."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  out, n = {b: chr(b) for b in keep}, 0
  for b in range(256):
    if b not in out:
      out[b] = chr(256 + n)
      n += 1
  return out


class Tokenizer:
  """encode(text) -> ids (special tokens in the text become their ids; no BOS: prompt() adds it when the file asks),
  decode(ids) -> text, stream_decoder() for text as tokens come."""

  def __init__(self, tokens: list[str], types: list[int], model: str = "gpt2", merges: list[str] | None = None,
               scores: list[float] | None = None, pre: str | None = None, bos_id: int | None = None, eos_id: int | None = None,
               eot_id: int | None = None, add_bos: bool | None = None, add_space_prefix: bool = True, unk_id: int | None = None):
    if model not in ("gpt2", "llama"): raise ValueError(f"tokenizer model {model!r} is not supported (gpt2: byte-level BPE, llama: SentencePiece)")
    self.tokens, self.types, self.model = tokens, types or [NORMAL] * len(tokens), model
    self.bos_id, self.eos_id, self.unk_id = bos_id, eos_id, unk_id
    self.add_bos = (model == "llama") if add_bos is None else add_bos
    self.add_space_prefix = add_space_prefix
    self.token_to_id = {t: i for i, t in enumerate(tokens)}
    special = [i for i, t in enumerate(self.types) if t in (CONTROL, USER_DEFINED)]
    self.special_ids = set(special)
    ends = {i for i in (eos_id, eot_id) if i is not None} | {self.token_to_id[t] for t in _END_TEXTS if t in self.token_to_id}
    self.end_ids = ends & (self.special_ids | {eos_id, eot_id})
    self.eot_id = eot_id
    # what each token is as bytes, for decoding
    if model == "gpt2":
      dec = {c: b for b, c in bytes_to_unicode().items()}
      self._bytes = [t.encode() if i in self.special_ids else bytes(dec[c] for c in t if c in dec) for i, t in enumerate(tokens)]
      self._hf = self._build_bpe(merges or [], self._preset(pre))
    else:
      self._bytes = [self._spm_bytes(i, t) for i, t in enumerate(tokens)]
      self.scores = scores if scores is not None else [0.0] * len(tokens)
      self._special_re = re.compile("|".join(re.escape(tokens[i]) for i in sorted(special, key=lambda i: -len(tokens[i])))) if special else None

  @staticmethod
  def _preset(pre: str | None) -> str:
    p = PRESET_ALIASES.get(pre or "default", pre or "default")
    if p not in PRESETS:
      raise ValueError(f"tokenizer pre-tokenizer {pre!r} is not supported (supported: {', '.join(sorted({*PRESETS, *PRESET_ALIASES}))})")
    return p

  @classmethod
  def from_gguf_kv(cls, kv: dict[str, Any]) -> Tokenizer:
    if "tokenizer.ggml.tokens" not in kv: raise ValueError("the file has no tokenizer (tokenizer.ggml.tokens is missing)")
    tokens = kv["tokenizer.ggml.tokens"]
    return cls(tokens, kv.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens)), kv.get("tokenizer.ggml.model", "gpt2"),
               kv.get("tokenizer.ggml.merges"), kv.get("tokenizer.ggml.scores"), kv.get("tokenizer.ggml.pre"),
               kv.get("tokenizer.ggml.bos_token_id"), kv.get("tokenizer.ggml.eos_token_id"), kv.get("tokenizer.ggml.eot_token_id"),
               kv.get("tokenizer.ggml.add_bos_token"), kv.get("tokenizer.ggml.add_space_prefix", True), kv.get("tokenizer.ggml.unknown_token_id"))

  # ** byte-level BPE, through the tokenizers package **

  def _build_bpe(self, merges: list[str], preset: str) -> Any:
    try: from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers
    except ImportError: raise ImportError("byte-level BPE vocabularies need the tokenizers package: pip install 'tinyhybrid[llm]'") from None
    vocab = {t: i for i, t in enumerate(self.tokens)}  # special ones too: an added token already in it keeps its id
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    hf = HFTokenizer(models.BPE(vocab, pairs, ignore_merges=preset in IGNORE_MERGES))  # type: ignore[arg-type]  # (a, b) pairs
    hf.pre_tokenizer = pre_tokenizers.Sequence([*[pre_tokenizers.Split(Regex(p), behavior="isolated") for p in PRESETS[preset]],
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    hf.decoder = decoders.ByteLevel()
    specials = sorted(self.special_ids)
    hf.add_special_tokens([AddedToken(self.tokens[i], special=True, normalized=False) for i in specials if self.types[i] == CONTROL])
    hf.add_tokens([AddedToken(self.tokens[i], special=False, normalized=False) for i in specials if self.types[i] == USER_DEFINED])
    # an added token keeps its id only if tokenizers numbers it as the file does
    if any(hf.token_to_id(self.tokens[i]) != i for i in specials):
      raise ValueError("tokenizer: the special tokens' ids do not follow the vocabulary")
    return hf

  # ** SentencePiece, llama.cpp's algorithm **

  def _spm_bytes(self, i: int, t: str) -> bytes:
    if self.types[i] == BYTE and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t): return bytes([int(t[3:5], 16)])
    if self.types[i] in (CONTROL, UNKNOWN): return t.encode()
    return t.replace("\u2581", " ").encode()

  def _spm_fragment(self, text: str) -> list[int]:
    """One run of text (no special tokens in it), "▁" already in place of the spaces."""
    if not text: return []
    syms = list(text)
    prev, nxt = list(range(-1, len(syms) - 1)), list(range(1, len(syms) + 1))
    heap: list[tuple[float, int, int, int]] = []
    def push(left: int, right: int) -> None:
      if left < 0 or right >= len(syms): return
      tid = self.token_to_id.get(syms[left] + syms[right])
      if tid is not None and self.types[tid] not in (CONTROL, USER_DEFINED):
        heapq.heappush(heap, (-self.scores[tid], left, right, len(syms[left]) + len(syms[right])))
    for i in range(len(syms) - 1): push(i, i + 1)
    while heap:
      _, left, right, size = heapq.heappop(heap)
      # stale: one side merged since this pair was pushed
      if not syms[left] or not syms[right] or nxt[left] != right or len(syms[left]) + len(syms[right]) != size: continue
      syms[left] += syms[right]
      syms[right] = ""
      nxt[left] = nxt[right]
      if nxt[right] < len(syms): prev[nxt[right]] = left
      push(prev[left], left)
      push(left, nxt[left])
    out: list[int] = []
    for s in syms:
      if not s: continue
      if (tid := self.token_to_id.get(s)) is not None: out.append(tid)
      else:
        for b in s.encode():
          bt = self.token_to_id.get(f"<0x{b:02X}>")
          if bt is not None: out.append(bt)
          elif self.unk_id is not None: out.append(self.unk_id)
          else: raise ValueError(f"tokenizer: byte 0x{b:02X} of {s!r} has no token and the vocabulary has no unknown token")
    return out

  def _spm_encode(self, text: str) -> list[int]:
    out: list[int] = []
    pos, prev_special = 0, True  # a run of text right at the start or after a special token gets the space prefix
    parts: list[tuple[str, int | None]] = []
    if self._special_re is not None:
      for m in self._special_re.finditer(text):
        if m.start() > pos: parts.append((text[pos:m.start()], None))
        parts.append((m.group(0), self.token_to_id[m.group(0)]))
        pos = m.end()
    if pos < len(text) or not parts: parts.append((text[pos:], None))
    for s, tid in parts:
      if tid is not None:
        out.append(tid)
        prev_special = True
        continue
      if self.add_space_prefix and prev_special: s = " " + s
      out += self._spm_fragment(s.replace(" ", "\u2581"))
      prev_special = False
    return out

  # ** the interface **

  def encode(self, text: str) -> list[int]:
    """The ids of text; special tokens written in it are recognized. No BOS (see prompt)."""
    if self.model == "gpt2": return self._hf.encode(text, add_special_tokens=False).ids
    return self._spm_encode(text)

  def prompt(self, text: str) -> list[int]:
    """The ids of a raw completion prompt: BOS first when the file asks for it."""
    ids = self.encode(text)
    return [self.bos_id] + ids if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id] else ids

  def token_bytes(self, tid: int) -> bytes: return self._bytes[tid]

  def decode(self, ids: list[int], skip_special: bool = False) -> str:
    """The text of ids (invalid UTF-8 replaced). A SentencePiece text loses the space its encoding put in front."""
    parts = [self._bytes[i] for i in ids if not (skip_special and i in self.special_ids)]
    if self.model == "llama" and self.add_space_prefix:  # the space the encoding put in front of the text
      first = next((k for k, i in enumerate(i for i in ids if not (skip_special and i in self.special_ids)) if i not in self.special_ids), None)
      if first is not None and parts[first].startswith(b" "): parts[first] = parts[first][1:]
    return b"".join(parts).decode(errors="replace")

  def stream_decoder(self) -> Callable[..., str]:
    """dec(id) -> the text that token completes (a character split over tokens waits for its last byte); dec() at the
    end flushes what is left."""
    d = codecs.getincrementaldecoder("utf-8")("replace")
    def _decode(tid: int | None = None) -> str: return d.decode(self._bytes[tid]) if tid is not None else d.decode(b"", final=True)
    return _decode

  def is_end(self, tid: int) -> bool: return tid in self.end_ids

  def special_text(self, tid: int | None) -> str: return self.tokens[tid] if tid is not None and 0 <= tid < len(self.tokens) else ""
