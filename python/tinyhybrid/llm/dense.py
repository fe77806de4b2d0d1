"""The dense llama family of decoder-only transformers, built from a .gguf file's metadata and tensors (llama.cpp's
names) and run as fast as this machine allows: llama, mistral, qwen2 (q/k/v biases), qwen3 (q/k norms) and gemma
(scaled embeddings, GELU). llm/model.py's DenseTransformer.from_gguf hands these architectures here. Grouped-query
attention, RoPE with the file's scaling (linear, YaRN, or llama3's per-frequency factors in rope_freqs.weight),
RMSNorm, a gated FFN, tied embeddings.

Weights stay as the file stores them (llm/quantized.py): each matmul unpacks them in its own kernel. The KV cache is
one realized buffer per layer, written with assign at a position that is a bound Variable, so every position runs
the same kernels: a decode step is one TinyJit replay, patched with the new token and position. The prompt is run
in chunks of a few fixed sizes (each its own TinyJit), so a prompt of any length reuses compiled kernels."""
from __future__ import annotations

import dataclasses
import math
import pathlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, overload

import numpy as np

from tinyhybrid.device import Device
from tinyhybrid.dtype import dtypes
from tinyhybrid.engine.jit import TinyJit
from tinyhybrid.engine.realize import run_once
from tinyhybrid.llm.gguf import GGUFTensor, gguf_read
from tinyhybrid.llm.quantized import MappedRows, QuantizedWeight, eight_lanes, joined
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop.ops import UOp, Variable, sint

ARCHS = ("llama", "mistral", "qwen2", "qwen3", "gemma")
KV_DTYPES = {"f32": dtypes.float32, "f16": dtypes.float16, "q8_0": dtypes.int8}  # --kv_dtype
# llama.cpp's "normal" RoPE rotates adjacent pairs (its converter interleaves llama's q/k rows to match); these
# architectures use the NeoX form, which rotates the two halves of each head
NEOX_ROPE = ("qwen2", "qwen3", "gemma")


def _int8_output(device: str | tuple[str, ...]) -> bool:
  """Whether a decode step's output layer multiplies by int_matvec. With AVX-512 float32 is as fast on a 32000-row
  panel weight (Q6_K: 2.3 against 2.5 ms), exact, and stores none of int_matvec's partial sums (Q6_K's 8-element
  blocks' go through memory, 4 MB of them at a time: quantized.PARTIAL_BYTES); with 8-lane vectors (AVX2) its float
  product took 10 of a 30 ms step, and int_matvec 2.5."""
  return eight_lanes(device)


@dataclass(frozen=True)
class DenseConfig:
  arch: str
  n_layers: int
  dim: int
  hidden_dim: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  vocab_size: int
  norm_eps: float
  max_context: int
  rope_theta: float = 10000.0
  rope_dim: int = 0           # dimensions of each head that rotate (the first ones); 0: all
  rope_scaling: str = "none"  # none | linear | yarn
  rope_factor: float = 1.0
  rope_orig_context: int = 0  # yarn: the context the model was trained with
  kv_dtype: str = "f32"       # the KV cache's element type: f32 | f16 (llama.cpp's default) | q8_0 (KVCache)

  @staticmethod
  def from_gguf(kv: dict[str, Any], tensors: dict[str, GGUFTensor], max_context: int | None = None, name: str = "model") -> DenseConfig:
    arch = kv.get("general.architecture")
    if arch not in ARCHS: raise ValueError(f"{name}: architecture {arch!r} is not supported (supported: {', '.join(ARCHS)})")
    def get(key: str, default: Any = None) -> Any:
      if (v := kv.get(f"{arch}.{key}", default)) is None: raise ValueError(f"{name}: metadata {arch}.{key} is missing")
      return v
    heads = get("attention.head_count")
    head_dim = get("attention.key_length", get("embedding_length") // heads)
    ctx = get("context_length")
    scaling = kv.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", "linear", "yarn"): raise ValueError(f"{name}: RoPE scaling {scaling!r} is not supported (none, linear, yarn)")
    vocab = tensors["token_embd.weight"].shape[0] if "token_embd.weight" in tensors else len(kv["tokenizer.ggml.tokens"])
    return DenseConfig(arch, get("block_count"), get("embedding_length"), get("feed_forward_length"), heads,
                       get("attention.head_count_kv", heads), head_dim, vocab, get("attention.layer_norm_rms_epsilon"),
                       min(max_context, ctx) if max_context else ctx, get("rope.freq_base", 10000.0), get("rope.dimension_count", head_dim),
                       scaling, get("rope.scaling.factor", 1.0), get("rope.scaling.original_context_length", ctx))


def rope_tables(cfg: DenseConfig, freq_factors: np.ndarray | None = None) -> tuple[Tensor, Tensor]:
  """cos and sin of every position's angles, (max_context, rope_dim/2) float32, computed once on the host in float64.
  Linear scaling divides the positions; llama3's factors divide each frequency; YaRN blends interpolated and
  original frequencies by wavelength and scales both tables (as transformers and llama.cpp do)."""
  d = cfg.rope_dim or cfg.head_dim
  freqs = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
  if freq_factors is not None: freqs = freqs / freq_factors.astype(np.float64)
  mscale = 1.0
  if cfg.rope_scaling == "linear": freqs = freqs / cfg.rope_factor
  elif cfg.rope_scaling == "yarn":
    def corr_dim(rot: float) -> float: return d * math.log(cfg.rope_orig_context / (rot * 2 * math.pi)) / (2 * math.log(cfg.rope_theta))
    lo, hi = max(math.floor(corr_dim(32)), 0), min(math.ceil(corr_dim(1)), d - 1)  # beta_fast 32, beta_slow 1
    ramp = np.clip((np.arange(d // 2, dtype=np.float64) - lo) / max(hi - lo, 0.001), 0, 1)
    freqs = freqs / cfg.rope_factor * ramp + freqs * (1 - ramp)
    mscale = 0.1 * math.log(cfg.rope_factor) + 1.0
  ang = np.arange(cfg.max_context, dtype=np.float64)[:, None] * freqs[None, :]
  return Tensor((np.cos(ang) * mscale).astype(np.float32)).realize(), Tensor((np.sin(ang) * mscale).astype(np.float32)).realize()


def rms_norm(x: Tensor, w: Tensor, eps: float) -> Tensor: return x * (x.square().mean(-1, keepdim=True) + eps).rsqrt() * w


def rotate(x: Tensor, cos: Tensor, sin: Tensor, neox: bool, rope_dim: int) -> Tensor:
  """x (T, heads, head_dim) rotated by the (T, rope_dim/2) angles; dimensions past rope_dim pass through."""
  T, H, hd = x.shape
  rot, rest = (x, None) if rope_dim == hd else (x[..., :rope_dim], x[..., rope_dim:])
  c, s = cos.reshape(T, 1, rope_dim // 2), sin.reshape(T, 1, rope_dim // 2)
  if neox:
    a, b = rot[..., :rope_dim // 2], rot[..., rope_dim // 2:]
    out = (a * c - b * s).cat(b * c + a * s, dim=-1)
  else:
    p = rot.reshape(T, H, rope_dim // 2, 2)
    a, b = p[..., 0], p[..., 1]
    out = (a * c - b * s).stack(a * s + b * c, dim=-1).reshape(T, H, rope_dim)
  return out if rest is None else out.cat(rest, dim=-1)


def _vec(t: GGUFTensor) -> Tensor: return t.dequantize().cast(dtypes.float32).contiguous()


def check_prompt(tokens: list[int], max_context: int) -> None:
  """generate's refusals: an empty prompt, and one that leaves no room in the context for an answer."""
  if not tokens: raise ValueError("generate: the prompt has no tokens")
  if len(tokens) >= max_context:
    raise ValueError(f"the prompt has {len(tokens)} tokens, more than the context of {max_context} tokens leaves room for")


# flash decode: a single token's attention reads the cache in chunks of this many positions, each its own softmax (its
# maximum, its sum and its weighted values), combined in a second step. The chunks' work spreads over the cores, and a
# chunk's keys and values (24 KB for a head of 96) stay in the first-level cache while its loops read them again
FLASH_CHUNK = 64


@overload
def flash_chunks(pos: int) -> int: ...
@overload
def flash_chunks(pos: UOp) -> UOp: ...
def flash_chunks(pos: sint) -> sint:
  """How many chunks of the cache a flash decode at position pos reads: the last one holds pos."""
  return pos // FLASH_CHUNK + 1


def flash_decode(q: Tensor, keys: Tensor, vals: Tensor, pos: sint) -> Tensor:
  """softmax(q . keys / sqrt(hd)) @ vals for the one query at position pos: q (KV, G, hd), keys and vals (KV, chunks,
  C, hd), positions past pos masked. Each chunk gets its own maximum m, sum l and weighted values o, then
  o = sum(exp(m - M) o) / sum(exp(m - M) l), M the largest m (every chunk holds a position up to pos, so m is finite).
  -> (1, KV * G * hd)"""
  (KV, G, hd), (_, n, C, _) = q.shape, keys.shape
  s = q.reshape(KV, 1, G, hd).matmul(keys.transpose(2, 3)) * (1.0 / math.sqrt(hd))  # (KV, chunks, G, C)
  at = Tensor.arange(keys.max_shape[1] * C).reshape(-1, C)[0:n]  # each chunk's positions
  s = (at <= pos).reshape(1, n, 1, C).where(s, float("-inf")).contiguous()
  m = s.max(-1, keepdim=True)  # (KV, chunks, G, 1)
  e = (s - m).exp()
  l, o = e.sum(-1, keepdim=True), e.matmul(vals)  # (KV, chunks, G, 1), (KV, chunks, G, hd)
  w = (m - m.max(1, keepdim=True)).exp()
  return ((w * o).sum(1) / (w * l).sum(1)).reshape(1, KV * G * hd)


class KVCache:
  """One layer's keys (or values), (kv heads, context, head dim), kept as --kv_dtype says: f32, f16, or q8_0
  (llama.cpp's block: 32 values as int8 codes and one half scale, absmax / 127). Written at a position, read back as
  float32 up to an end; the bounds may be bound Variables."""

  def __init__(self, heads: int, context: int, head_dim: int, kind: str):
    if kind == "q8_0" and head_dim % 32: raise ValueError(f"kv_dtype q8_0 needs a head dimension that is a multiple of 32, not {head_dim}")
    blocks = head_dim // 32 if kind == "q8_0" else 1
    self.shape = (heads, context, blocks, head_dim // blocks)
    self.data = Tensor.zeros(*self.shape, dtype=KV_DTYPES[kind]).contiguous().realize()
    self.scales = Tensor.zeros(heads, context, blocks, 1, dtype=dtypes.float16).contiguous().realize() if kind == "q8_0" else None

  def nbytes(self) -> int: return self.data.nbytes() + (self.scales.nbytes() if self.scales is not None else 0)

  def write(self, pos: UOp | int, x: Tensor) -> None:
    """x (kv heads, T, head dim) into positions pos..pos+T-1."""
    H, T, _ = x.shape
    x = x.reshape(H, T, *self.shape[2:])
    if self.scales is None:
      self.data[:, pos:pos + T].assign(x.cast(self.data.dtype))
      return
    d = x.abs().max(-1, keepdim=True) / 127.0
    self.data[:, pos:pos + T].assign((x / (d == 0).where(1.0, d)).round().cast(dtypes.int8))
    self.scales[:, pos:pos + T].assign(d.cast(dtypes.float16))

  def read_chunks(self, n: sint, size: int) -> Tensor:
    """The first n chunks of `size` positions as float32, (kv heads, n, size, head dim): the cache viewed as chunks
    first, so a variable n only shrinks the view (no index divided by a variable)."""
    H, ctx, blocks, bs = self.shape
    x = self.data.reshape(H, ctx // size, size, blocks, bs)[:, 0:n].cast(dtypes.float32)
    if self.scales is not None: x = x * self.scales.reshape(H, ctx // size, size, blocks, 1)[:, 0:n].cast(dtypes.float32)
    return x.reshape(H, x.shape[1], size, blocks * bs)

  def read(self, end: UOp | int) -> Tensor:
    """Positions 0..end-1 as float32, (kv heads, end, head dim)."""
    x = self.data[:, 0:end].cast(dtypes.float32)
    if self.scales is not None: x = x * self.scales[:, 0:end].cast(dtypes.float32)
    return x.reshape(self.shape[0], x.shape[1], self.shape[2] * self.shape[3])


class Block:
  """One transformer layer: attention with its KV cache, then the gated FFN, each behind an RMSNorm and a residual."""

  def __init__(self, cfg: DenseConfig, w: dict[str, GGUFTensor], i: int):
    self.cfg = cfg
    p = f"blk.{i}."
    def need(n: str) -> GGUFTensor:
      if (t := w.get(p + n)) is None: raise ValueError(f"tensor {p + n} is missing")
      return t
    self.attn_norm, self.ffn_norm = _vec(need("attn_norm.weight")), _vec(need("ffn_norm.weight"))
    # q, k and v are one matmul, and so are the FFN's gate and up: fewer, larger kernels
    self.qkv = joined(need("attn_q.weight"), need("attn_k.weight"), need("attn_v.weight"), panels=True)
    self.qkv_bias = _vec(need("attn_q.bias")).cat(_vec(need("attn_k.bias")), _vec(need("attn_v.bias"))).contiguous() \
      if p + "attn_q.bias" in w else None
    self.q_norm = _vec(w[p + "attn_q_norm.weight"]) if p + "attn_q_norm.weight" in w else None
    self.k_norm = _vec(w[p + "attn_k_norm.weight"]) if p + "attn_k_norm.weight" in w else None
    self.attn_out = QuantizedWeight(need("attn_output.weight"), panels=True)
    self.gate_up = joined(need("ffn_gate.weight"), need("ffn_up.weight"), panels=True)
    self.down = QuantizedWeight(need("ffn_down.weight"), panels=True)
    # whole chunks of the flash decode (a decode step reads whole FLASH_CHUNKs, positions past its own masked)
    slots = flash_chunks(cfg.max_context - 1) * FLASH_CHUNK
    self.cache_k, self.cache_v = (KVCache(cfg.n_kv_heads, slots, cfg.head_dim, cfg.kv_dtype) for _ in range(2))

  def __call__(self, x: Tensor, pos: UOp | int, cos: Tensor, sin: Tensor, mask: Tensor | None, chunks: sint | None = None) -> Tensor:
    cfg = self.cfg
    T, H, KV, hd = x.shape[0], cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    h = rms_norm(x, self.attn_norm, cfg.norm_eps)
    qkv = self.qkv.matmul(h)
    if self.qkv_bias is not None: qkv = qkv + self.qkv_bias
    # computed once here: the cache writes below run as schedules of their own (view writes run before the
    # realize that reads their buffer) and the attention is another, and each would otherwise recompute it. The
    # residual stream is realized with it: left lazy, every later layer's realize would recompute all the layers
    # before it (a decode step of n layers ran n(n+1)/2 FFNs)
    qkv = qkv.realize(x)
    q, k, v = qkv[:, :H * hd].reshape(T, H, hd), qkv[:, H * hd:(H + KV) * hd].reshape(T, KV, hd), qkv[:, (H + KV) * hd:].reshape(T, KV, hd)
    if self.q_norm is not None: q = rms_norm(q, self.q_norm, cfg.norm_eps)
    if self.k_norm is not None: k = rms_norm(k, self.k_norm, cfg.norm_eps)
    neox, rd = cfg.arch in NEOX_ROPE, cfg.rope_dim or hd
    q, k = rotate(q, cos, sin, neox, rd), rotate(k, cos, sin, neox, rd)
    self.cache_k.write(pos, k.transpose(0, 1))
    self.cache_v.write(pos, v.transpose(0, 1))
    # grouped-query attention without repeating the cache: the G = H/KV query heads of a kv head are one batch row
    G = H // KV
    if mask is None:  # one query
      n = flash_chunks(pos) if chunks is None else chunks
      o = flash_decode(q.reshape(KV, G, hd), self.cache_k.read_chunks(n, FLASH_CHUNK), self.cache_v.read_chunks(n, FLASH_CHUNK), pos)
    else:
      keys, vals = self.cache_k.read(pos + T), self.cache_v.read(pos + T)
      # a chunk of queries: the cache's length L is a variable, and a loop of a variable's length gets no vectors,
      # so it is kept the outer loop: scores transposed (KV, L, G*T), vectors along the queries
      qt = q.reshape(T, KV, G, hd).permute(1, 3, 2, 0).reshape(KV, hd, G * T)
      s = keys.matmul(qt) * (1.0 / math.sqrt(hd))  # (KV, L, G*T)
      L = s.shape[1]
      s = mask.where(s.reshape(KV, L, G, T), float("-inf")).reshape(KV, L, G * T)
      o = vals.transpose(1, 2).matmul(s.softmax(1))  # (KV, hd, G*T)
      o = o.reshape(KV, hd, G, T).permute(3, 0, 2, 1).reshape(T, H * hd).contiguous()
    x = x + self.attn_out.matmul(o)
    h = rms_norm(x, self.ffn_norm, cfg.norm_eps)
    gu = self.gate_up.matmul(h)
    g, u = gu[:, :cfg.hidden_dim], gu[:, cfg.hidden_dim:]
    return x + self.down.matmul((g.gelu() if cfg.arch == "gemma" else g.silu()) * u)


class DenseTransformer:
  """A model ready to run: DenseTransformer.from_gguf(path) -> (model, metadata); model.generate(ids) yields new token ids.
  The KV cache remembers the tokens it holds, so a prompt that extends the last one (a chat's next turn) only runs
  its new tokens."""
  PREFILL_CHUNKS = (64, 8)  # the prompt is split greedily into these sizes (and single tokens): each is one set of kernels

  def __init__(self, cfg: DenseConfig, w: dict[str, GGUFTensor], progress: bool = False):
    self.cfg, self.max_context = cfg, cfg.max_context
    if "token_embd.weight" not in w: raise ValueError("tensor token_embd.weight is missing")
    # tied embeddings: one weight, stored by row for the embedding's lookups; else the embedding stays in the file's
    # pages, of which a prompt reads only its tokens' rows
    self.token_embd: QuantizedWeight | MappedRows
    if "output.weight" in w: self.token_embd, self.output = MappedRows(w["token_embd.weight"]), QuantizedWeight(w["output.weight"], panels=True)
    else: self.token_embd = self.output = QuantizedWeight(w["token_embd.weight"])
    self.output_norm = _vec(w["output_norm.weight"])
    layers: Iterable[int] = range(cfg.n_layers)
    if progress:  # each layer's weights are read from the file and repacked here: the load's time
      from tqdm import tqdm
      layers = tqdm(layers, desc="loading", unit="layer", leave=False)
    self.blocks = [Block(cfg, w, i) for i in layers]
    self.cos, self.sin = rope_tables(cfg, w["rope_freqs.weight"].data.numpy() if "rope_freqs.weight" in w else None)
    Tensor.realize(self.output_norm, *[t for b in self.blocks for t in (b.attn_norm, b.ffn_norm, b.qkv_bias, b.q_norm, b.k_norm) if t is not None])
    self.embed_scale = math.sqrt(cfg.dim) if cfg.arch == "gemma" else 1.0
    self.cached: list[int] = []  # the tokens whose keys and values the cache holds, in order
    self.decode_jit = TinyJit(self._decode)
    self.chunks = tuple(n for n in self.PREFILL_CHUNKS if n < self.max_context)
    self.prefill_jits = {n: TinyJit(self._prefill) for n in self.chunks}
    self.pos_vars = {n: Variable(f"pos{n}", 0, self.max_context - n) for n in (*self.chunks, 1)}
    self.tok_var = Variable("tok", 0, cfg.vocab_size - 1)
    self.chunks_var = Variable("chunks", 1, flash_chunks(self.max_context - 1))

  @staticmethod
  def from_gguf(fn: str | pathlib.Path | Tensor, max_context: int | None = None, progress: bool = False,
                kv_dtype: str = "f32") -> tuple[DenseTransformer, dict[str, Any]]:
    kv, tensors = gguf_read(fn)
    return DenseTransformer.from_parts(kv, tensors, str(fn) if not isinstance(fn, Tensor) else "<tensor>", max_context, progress, kv_dtype)

  @staticmethod
  def from_parts(kv: dict[str, Any], tensors: dict[str, GGUFTensor], name: str, max_context: int | None = None, progress: bool = False,
                 kv_dtype: str = "f32") -> tuple[DenseTransformer, dict[str, Any]]:
    """From a read gguf file's metadata and tensors (gguf_read); name is the file's, for errors."""
    if kv_dtype not in KV_DTYPES: raise ValueError(f"kv_dtype {kv_dtype!r} is not one of {', '.join(KV_DTYPES)}")
    cfg = dataclasses.replace(DenseConfig.from_gguf(kv, tensors, max_context, name), kv_dtype=kv_dtype)
    try:
      with run_once(): return DenseTransformer(cfg, tensors, progress), kv
    except ValueError as e: raise ValueError(f"{name}: {e}") from None

  # ** the computation **

  def forward(self, x: Tensor, pos: UOp | int, chunks: sint | None = None) -> Tensor:
    """(T, dim) embeddings of the tokens at positions pos..pos+T-1 -> (1, vocab) float32 logits of the last one; the
    keys and values of all T go into the cache. A single token's attention is a flash decode over `chunks` chunks of
    the cache (flash_chunks(pos) unless given: the decode JIT binds it as a Variable of its own)."""
    T = x.shape[0]
    if self.embed_scale != 1.0: x = x * self.embed_scale
    cos, sin = self.cos[pos:pos + T], self.sin[pos:pos + T]
    mask = None
    if T > 1:  # causal: the query at pos+t sees keys up to pos+t
      mask = Tensor.arange(self.max_context)[0:pos + T].reshape(1, -1, 1, 1) <= (Tensor.arange(T) + pos).reshape(1, 1, 1, T)  # (1, L, 1, T)
    for blk in self.blocks: x = blk(x, pos, cos, sin, mask, chunks)
    return self.output.matmul(rms_norm(x[T - 1:T], self.output_norm, self.cfg.norm_eps), int8=_int8_output(x.device))

  def _decode(self, tok: UOp, pos: UOp, chunks: UOp) -> Tensor: return self.forward(self.token_embd.rows((tok, tok + 1)), pos, chunks).realize()
  def _prefill(self, toks: Tensor, pos: UOp) -> Tensor: return self.forward(self.token_embd.rows(toks), pos).realize()

  # ** running it **

  @property
  def weight_bytes(self) -> int:
    ws = [self.token_embd, *([self.output] if self.output is not self.token_embd else []),
          *[w for b in self.blocks for w in (b.qkv, b.attn_out, b.gate_up, b.down)]]
    return sum(w.nbytes for w in ws)

  @property
  def vocab_size(self) -> int: return self.cfg.vocab_size

  def summary(self) -> str:
    return f"{self.cfg.arch}, {self.cfg.n_layers} layers, dim {self.cfg.dim}, {self.cfg.vocab_size} tokens, {self.weight_bytes / 1e6:,.1f} MB of weights"

  def warmup(self) -> None:
    """Compiles and captures the kernels of every prompt chunk size and of a decode step (each JIT captures on its
    second call), then forgets the tokens it ran. Each size's schedules and lowered kernels are let go once it is
    captured (run_once): the capture holds the programs it replays, and the 0.5B Q4_K_M model's warm-up peaked
    1.2 MiB lower without the prompts' (a direct forward() later compiles again, from the disk cache). The decode
    step goes second: what a size holds while it is captured (its first runs' buffers and caches) adds to all the
    captures before it, and a decode step's is the largest after the longest prompt chunk's (0.7-1.2 MiB lower)."""
    for n in (*self.chunks[:1], 1, *self.chunks[1:]):
      with run_once():
        for _ in range(3): self.logits([0] * n, 0)
      # the first runs' buffers, which the next size's would not fit: the captures keep theirs in memory they share
      Device[Device.DEFAULT].allocator.free_cache()
    self.cached.clear()

  def logits(self, tokens: list[int], start_pos: int, chunk_size: int | None = None) -> np.ndarray:
    """Runs tokens at positions start_pos.. (the cache must hold the ones before), in chunks of at most chunk_size,
    and returns the last one's (vocab,) logits."""
    if not tokens: raise ValueError("logits: no tokens to run")
    if start_pos + len(tokens) > self.max_context:
      raise ValueError(f"{start_pos + len(tokens)} tokens do not fit the context of {self.max_context} tokens")
    if (bad := [t for t in tokens if not 0 <= t < self.cfg.vocab_size]): raise ValueError(f"token ids {bad[:5]} are outside the vocabulary of {self.cfg.vocab_size}")
    del self.cached[start_pos:]
    i, out = 0, None
    while i < len(tokens):
      n = next((c for c in self.chunks if c <= min(len(tokens) - i, chunk_size or c)), 1)
      if n == 1:
        p = start_pos + i
        out = self.decode_jit(self.tok_var.bind(tokens[i]), self.pos_vars[1].bind(p), self.chunks_var.bind(flash_chunks(p)))
        i += 1
        continue
      out = self.prefill_jits[n](Tensor(np.array(tokens[i:i + n], np.int32)), self.pos_vars[n].bind(start_pos + i))
      i += n
    self.cached.extend(tokens)
    assert out is not None
    logits = out.numpy().reshape(-1)
    if isinstance(self.token_embd, MappedRows): self.token_embd.let_go()
    return logits

  def reusable_prefix(self, tokens: list[int]) -> int:
    """How many leading tokens the cache already holds (at least one token is always run, for its logits)."""
    n = 0
    for a, b in zip(tokens[:-1], self.cached):
      if a != b: break
      n += 1
    return n

  def generate(self, tokens: list[int], chunk_size: int | None = None, temperature: float = 0.0,
               sample: Callable[[np.ndarray, list[int]], int] | None = None, max_new: int | None = None) -> Iterator[int]:
    """Yields the token ids that follow `tokens`, appending each to it (as tinygrad's generate does), until the
    context is full (or max_new of them). Greedy, or with temperature > 0 drawn from softmax(logits / temperature),
    or picked by sample(logits, tokens). chunk_size caps the prompt chunks (at most PREFILL_CHUNKS' largest). Refuses a
    prompt that does not fit the context."""
    check_prompt(tokens, self.max_context)
    def pick(logits: np.ndarray) -> int:
      if sample is not None: return sample(logits, tokens)
      if temperature <= 0: return int(np.argmax(logits))
      return int(np.argmax(logits / temperature - np.log(-np.log(np.random.uniform(1e-12, 1.0, logits.shape)))))  # Gumbel-max
    start = self.reusable_prefix(tokens)
    logits = self.logits(tokens[start:], start, chunk_size)
    n = 0
    while True:
      tokens.append(pick(logits))
      yield tokens[-1]
      n += 1
      if len(tokens) >= self.max_context or (max_new is not None and n >= max_new): return
      logits = self.logits(tokens[-1:], len(tokens) - 1)
