"""tinygrad.llm's model in its names and shapes: a TransformerConfig, blocks that pair an attention (grouped-query,
multi-head latent, or a gated delta net) with a feed-forward (dense, or a mixture of experts with shared experts),
and a Transformer over (batch, tokens) that samples on the device and generates with two TinyJits, one for prompt
chunks and one for single tokens. Built from a config (zero weights: load a state dict into it) or from a gguf file.

Transformer.from_gguf hands the dense llama family (llama, mistral, qwen2, qwen3, gemma) to llm/dense.py, which keeps
the weights quantized, fuses the projections and captures each step whole. The other families run here, with their
weights dequantized once at load:
- mixture of experts (qwen3moe, qwen2moe, olmoe, glm4moe, a llama file with experts such as Mixtral): a router picks
  num_experts_per_tok experts per token (pairwise_topk), with softmax, sigmoid, softmax-after-selection or
  sqrt-softplus gating, an optional selection bias, normalized and scaled weights, and shared experts;
- multi-head latent attention (deepseek2): keys and values cached as one compressed vector per token, queries
  absorbed into its space;
- the gated delta net (qwen35): a causal convolution and a decaying associative memory updated by the delta rule,
  every full_attention_interval-th layer a gated attention."""
from __future__ import annotations

import enum
import functools
import itertools
import pathlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import numpy as np

from tinyhybrid import nn
from tinyhybrid.dtype import dtypes
from tinyhybrid.engine.jit import TinyJit
from tinyhybrid.engine.realize import run_once
from tinyhybrid.helpers import getenv
from tinyhybrid.llm import dense
from tinyhybrid.llm.gguf import gguf_read
from tinyhybrid.nn import Linear
from tinyhybrid.tensor import Tensor
from tinyhybrid.uop.ops import UOp, resolve

# the families this module runs (dense llama-family files go to llm/dense.py)
ARCHS = ("llama", "mistral", "qwen2moe", "qwen3moe", "olmoe", "glm4moe", "deepseek2", "qwen35", "qwen35moe")


class ExpertGating(enum.IntEnum):
  """How router logits become expert scores (llama.cpp's expert_gating_func values)."""
  SOFTMAX = 1
  SIGMOID = 2
  SOFTMAX_WEIGHT = 3  # select on the logits, then softmax over the selected ones
  SQRT_SOFTPLUS = 4


@functools.cache
def precompute_freqs_cis(dim: int, end: int | UOp, theta: float = 10000.0, device: str | None = None) -> Tensor:
  """(end, dim): the cosines of every position's rotation angles, then their sines, for apply_rope (the half-split
  form). end may be a bound Variable."""
  inv_freq = 1.0 / (theta ** (Tensor.arange(0, dim, 2)[:dim // 2] / dim))
  angles = Tensor.arange(end).unsqueeze(1) * inv_freq.unsqueeze(0)
  return angles.cos().cat(angles.sin(), dim=-1).clone(device)


def apply_rope(x: Tensor, freqs_cis: Tensor) -> Tensor:
  """x (batch, heads, T, d) rotated by the (T, d) table of precompute_freqs_cis: the first half of each head pairs
  with the second (NeoX's form; llama-form files are permuted to it at load)."""
  assert x.shape[-1] % 2 == 0, f"apply_rope: the rotated dimension {x.shape[-1]} is odd"
  cos, sin = freqs_cis.reshape(1, 1, x.shape[2], -1).chunk(2, dim=-1)
  a, b = x.chunk(2, dim=-1)
  return (a * cos - b * sin).cat(b * cos + a * sin, dim=-1)


def pairwise_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
  """The k largest along the last axis and their indices, smallest of them first, by counting for each element how
  many it beats (an equal one beats those after it): no sort, one kernel. Ties keep the earlier index first."""
  n = x.shape[-1]
  idx = Tensor.arange(n)
  mine, other = x.unsqueeze(-1), x.unsqueeze(-2)
  rank = ((mine > other) | ((mine == other) & (idx.reshape(n, 1) < idx.reshape(1, n)))).sum(-1)  # 0: the smallest
  sel = ((rank.unsqueeze(-1) == Tensor.arange(n - k, n)) * idx.reshape(n, 1)).sum(-2).cast(dtypes.int32)
  return x.gather(-1, sel), sel


class ExpertWeights:
  """A Linear per expert: weight (num_experts, out_features, in_features), applied to each token's selected ones."""

  def __init__(self, num_experts: int, in_features: int, out_features: int):
    self.weight = Tensor.zeros(num_experts, out_features, in_features)

  def __call__(self, sel: Tensor, x: Tensor) -> Tensor:
    """sel (B, T, k) expert ids, x (B, T, 1 or k, in) -> (B, T, k, out)."""
    return (x.unsqueeze(-2) @ self.weight[sel].transpose(-1, -2)).contiguous().squeeze(-2)


@dataclass(frozen=True)
class SSMConfig:
  """A gated delta net's sizes (llama.cpp's ssm.* keys); kda: Kimi's variant, with a decay per channel."""
  conv_kernel: int
  state_size: int
  group_count: int
  time_step_rank: int
  inner_size: int
  kda: bool = False


@dataclass(frozen=True)
class TransformerConfig:
  num_blocks: int
  dim: int
  hidden_dim: int
  n_heads: int
  n_kv_heads: int
  norm_eps: float
  vocab_size: int
  head_dim: int
  rope_theta: float
  rope_dim: int
  v_head_dim: int
  max_context: int = 0
  qk_norm: int = 0              # the q/k norms' size: head_dim (per head) or the projection's (over all heads); 0: none
  num_experts: int = 0
  num_experts_per_tok: int = 0
  norm_topk_prob: bool = False
  expert_gating_func: ExpertGating = ExpertGating.SOFTMAX
  q_lora_rank: int = 0
  kv_lora_rank: int = 0         # > 0: multi-head latent attention
  shared_expert_dim: int = 0
  ssm_layers: tuple[bool, ...] = ()  # which blocks are gated delta nets
  attn_output_gate: bool = False
  ssm: SSMConfig | None = None
  shared_expert_gate: bool = True
  leading_dense_blocks: int = 0
  dense_hidden_dim: int = 0
  routed_scaling_factor: float = 1.0
  qkv_bias: bool = False
  expert_bias: bool = False


def _gated(gate: Tensor, up: Tensor) -> Tensor: return gate.silu().contiguous() * up


class FFNBlock:
  """What every block shares: the two RMSNorms, the feed-forward, and the residual wiring around the attention a
  subclass supplies (_attention, with its state made on first use by _init_state)."""

  def __init__(self, config: TransformerConfig):
    self.config = config
    self.attn_norm = nn.RMSNorm(config.dim, config.norm_eps)
    self.ffn_norm = nn.RMSNorm(config.dim, config.norm_eps)
    if config.num_experts > 0:
      self.ffn_gate_inp = Linear(config.dim, config.num_experts, bias=False)  # the router
      if config.expert_bias: self.exp_probs_b = {"bias": Tensor.zeros(config.num_experts)}
      self.ffn_gate_exps = ExpertWeights(config.num_experts, config.dim, config.hidden_dim)
      self.ffn_up_exps = ExpertWeights(config.num_experts, config.dim, config.hidden_dim)
      self.ffn_down_exps = ExpertWeights(config.num_experts, config.hidden_dim, config.dim)
      if config.shared_expert_dim > 0:
        self.ffn_gate_shexp = Linear(config.dim, config.shared_expert_dim, bias=False)
        self.ffn_up_shexp = Linear(config.dim, config.shared_expert_dim, bias=False)
        self.ffn_down_shexp = Linear(config.shared_expert_dim, config.dim, bias=False)
        if config.shared_expert_gate: self.ffn_gate_inp_shexp = {"weight": Tensor.zeros(config.dim)}
    else:
      self.ffn_gate = Linear(config.dim, config.hidden_dim, bias=False)
      self.ffn_up = Linear(config.dim, config.hidden_dim, bias=False)
      self.ffn_down = Linear(config.hidden_dim, config.dim, bias=False)

  def _route(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """Each token's selected experts (B, T, k) and their weights (B, T, k)."""
    cfg = self.config
    logits = self.ffn_gate_inp(x)
    bias = self.exp_probs_b["bias"] if hasattr(self, "exp_probs_b") else None
    gating, normalize = cfg.expert_gating_func, cfg.norm_topk_prob
    # a softmax renormalized over the selected experts is the softmax of their logits, and skips the full softmax
    if gating == ExpertGating.SOFTMAX and bias is None and normalize: gating, normalize = ExpertGating.SOFTMAX_WEIGHT, False
    scores = {ExpertGating.SOFTMAX_WEIGHT: lambda: logits, ExpertGating.SOFTMAX: lambda: logits.softmax(-1),
              ExpertGating.SIGMOID: lambda: logits.sigmoid(), ExpertGating.SQRT_SOFTPLUS: lambda: logits.softplus().sqrt()}[gating]()
    _, sel = pairwise_topk(scores if bias is None else scores + bias, cfg.num_experts_per_tok)
    weights = scores.gather(-1, sel)
    if gating == ExpertGating.SOFTMAX_WEIGHT: weights = weights.softmax(-1)
    if normalize: weights = weights / weights.sum(-1, keepdim=True)
    return sel, weights * cfg.routed_scaling_factor

  def _feed_forward(self, x: Tensor) -> Tensor:
    if not hasattr(self, "ffn_gate_exps"): return self.ffn_down(_gated(self.ffn_gate(x), self.ffn_up(x)))
    sel, weights = self._route(x)
    h = x.unsqueeze(2)  # (B, T, 1, D): every selected expert reads the same token
    out = (self.ffn_down_exps(sel, _gated(self.ffn_gate_exps(sel, h), self.ffn_up_exps(sel, h))) * weights.unsqueeze(-1)).sum(2)
    if hasattr(self, "ffn_gate_shexp"):
      shared = self.ffn_down_shexp(_gated(self.ffn_gate_shexp(x), self.ffn_up_shexp(x)))
      if hasattr(self, "ffn_gate_inp_shexp"): shared = shared * (x * self.ffn_gate_inp_shexp["weight"]).sum(-1, keepdim=True).sigmoid()
      out = out + shared
    return out

  def _reusable_prefix_len(self, prefix_len: int, cached_len: int) -> int: return prefix_len
  def _init_state(self, x: Tensor) -> None: raise NotImplementedError
  def _attention(self, x: Tensor, start_pos: int | UOp) -> Tensor: raise NotImplementedError

  def __call__(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    self._init_state(x)
    h = x + self._attention(self.attn_norm(x), start_pos)
    return (h + self._feed_forward(self.ffn_norm(h))).contiguous()


def _causal_mask(T: int | UOp, start_pos: int | UOp, dtype: Any) -> Tensor | None:
  """Query start_pos+t sees keys 0..start_pos+t: -inf above that diagonal (None for one query, which sees all)."""
  if not resolve(T != 1): return None
  return Tensor.full((1, 1, T, start_pos + T), float("-inf"), dtype=dtype, buffer=False).triu(start_pos + 1)


class TransformerBlock(FFNBlock):
  """Grouped-query attention with a KV cache (2, B, kv heads, context, head_dim), RoPE on the first rope_dim
  dimensions of each head, optional q/k norms, q/k/v biases and a sigmoid gate on the output (qwen35)."""

  def __init__(self, config: TransformerConfig):
    super().__init__(config)
    assert config.v_head_dim == config.head_dim, "TransformerBlock requires v_head_dim == head_dim"
    q_out = config.head_dim * config.n_heads * (2 if config.attn_output_gate else 1)
    kv_out = config.head_dim * config.n_kv_heads
    self.attn_q = Linear(config.dim, q_out, bias=config.qkv_bias)
    self.attn_k = Linear(config.dim, kv_out, bias=config.qkv_bias)
    self.attn_v = Linear(config.dim, kv_out, bias=config.qkv_bias)
    self.attn_output = Linear(config.head_dim * config.n_heads, config.dim, bias=False)
    if config.qk_norm:
      self.attn_q_norm, self.attn_k_norm = nn.RMSNorm(config.qk_norm, config.norm_eps), nn.RMSNorm(config.qk_norm, config.norm_eps)

  def _rope(self, x: Tensor, start_pos: int | UOp, T: int | UOp) -> Tensor:
    rd = self.config.rope_dim
    return apply_rope(x[..., :rd], self.freqs_cis[start_pos:start_pos + T]).cat(x[..., rd:], dim=-1)

  def _attention(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    cfg = self.config
    B, T, _ = x.shape
    q, k, v = self.attn_q(x), self.attn_k(x), self.attn_v(x)
    if cfg.qk_norm and cfg.qk_norm != cfg.head_dim: q, k = self.attn_q_norm(q), self.attn_k_norm(k)
    gate = None
    if cfg.attn_output_gate:  # each head's query is followed by its gate
      qg = q.reshape(B, T, cfg.n_heads, 2, cfg.head_dim)
      q, gate = qg[:, :, :, 0, :], qg[:, :, :, 1, :].reshape(B, T, cfg.n_heads * cfg.head_dim)
    q = q.reshape(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)
    k = k.reshape(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
    v = v.reshape(B, T, cfg.n_kv_heads, cfg.head_dim).transpose(1, 2)
    if cfg.qk_norm == cfg.head_dim: q, k = self.attn_q_norm(q), self.attn_k_norm(k)
    q, k = self._rope(q, start_pos, T), self._rope(k, start_pos, T)
    # the cache write runs first, so the read below sees this chunk's keys and values
    self.cache_kv[:, :, :, start_pos:start_pos + T, :].assign(Tensor.stack(k, v).cast(self.cache_kv.dtype)).realize()
    keys, values = self.cache_kv[0, :, :, 0:start_pos + T, :], self.cache_kv[1, :, :, 0:start_pos + T, :]
    attn = q.scaled_dot_product_attention(keys, values, attn_mask=_causal_mask(T, start_pos, x.dtype), enable_gqa=True)
    attn = attn.transpose(1, 2).reshape(B, T, -1)
    return self.attn_output(attn if gate is None else attn * gate.sigmoid())

  def _init_state(self, x: Tensor) -> None:
    if hasattr(self, "cache_kv"): return
    cfg = self.config
    self.cache_kv = Tensor.zeros(2, x.shape[0], cfg.n_kv_heads, cfg.max_context, cfg.head_dim, dtype=dtypes.default_float,
                                 device=x.device).contiguous().realize()
    self.freqs_cis = precompute_freqs_cis(cfg.rope_dim, cfg.max_context, cfg.rope_theta, device=x.device)


class MLATransformerBlock(FFNBlock):
  """Multi-head latent attention (DeepSeek-V2): a token's keys and values are one kv_lora_rank vector (plus a shared
  rotated key part), cached as is. Queries are absorbed into that space (q_nope @ k_b), and the attention's output
  leaves it through v_b, so the cache is never expanded per head."""

  def __init__(self, config: TransformerConfig):
    super().__init__(config)
    nope = config.head_dim - config.rope_dim
    if config.q_lora_rank > 0:
      self.attn_q_a = Linear(config.dim, config.q_lora_rank, bias=False)
      self.attn_q_a_norm = nn.RMSNorm(config.q_lora_rank, config.norm_eps)
      self.attn_q_b = Linear(config.q_lora_rank, config.n_heads * config.head_dim, bias=False)
    else:
      self.attn_q = Linear(config.dim, config.n_heads * config.head_dim, bias=False)
    self.attn_kv_a_mqa = Linear(config.dim, config.kv_lora_rank + config.rope_dim, bias=False)
    self.attn_kv_a_norm = nn.RMSNorm(config.kv_lora_rank, config.norm_eps)
    self.attn_k_b = {"weight": Tensor.zeros(config.n_heads, config.kv_lora_rank, nope)}
    self.attn_v_b = {"weight": Tensor.zeros(config.n_heads, config.v_head_dim, config.kv_lora_rank)}
    self.attn_output = Linear(config.n_heads * config.v_head_dim, config.dim, bias=False)

  def _attention(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    cfg = self.config
    B, T, _ = x.shape
    nope, rank, rotate = cfg.head_dim - cfg.rope_dim, cfg.kv_lora_rank, not (cfg.ssm and cfg.ssm.kda)
    q = self.attn_q_b(self.attn_q_a_norm(self.attn_q_a(x))) if cfg.q_lora_rank > 0 else self.attn_q(x)
    q = q.reshape(B, T, cfg.n_heads, cfg.head_dim).transpose(1, 2)
    q_nope, q_rope = q[..., :nope], q[..., nope:]
    freqs = self.freqs_cis[start_pos:start_pos + T]
    if rotate: q_rope = apply_rope(q_rope, freqs)
    q = (q_nope @ self.attn_k_b["weight"].transpose(-1, -2)).cat(q_rope, dim=-1)  # (B, H, T, rank + rope)
    kv_a = self.attn_kv_a_mqa(x)
    latent = self.attn_kv_a_norm(kv_a[..., :rank])
    k_rope = kv_a[..., rank:].reshape(B, T, 1, cfg.rope_dim).transpose(1, 2)
    if rotate: k_rope = apply_rope(k_rope, freqs)
    entry = latent.reshape(B, 1, T, rank).cat(k_rope.reshape(B, 1, T, cfg.rope_dim), dim=-1)
    self.cache_k[:, :, start_pos:start_pos + T, :].assign(entry.cast(self.cache_k.dtype)).realize()
    k = self.cache_k[:, :, 0:start_pos + T, :]
    scores = q @ k.transpose(-1, -2) * (1.0 / cfg.head_dim ** 0.5)
    if (mask := _causal_mask(T, start_pos, x.dtype)) is not None: scores = scores + mask
    out = (scores.softmax(-1) @ k[..., :rank]) @ self.attn_v_b["weight"].transpose(-1, -2)  # values: the latent itself
    return self.attn_output(out.transpose(1, 2).reshape(B, T, -1))

  def _init_state(self, x: Tensor) -> None:
    if hasattr(self, "cache_k"): return
    cfg = self.config
    self.cache_k = Tensor.zeros(x.shape[0], 1, cfg.max_context, cfg.kv_lora_rank + cfg.rope_dim, device=x.device).contiguous().realize()
    self.freqs_cis = precompute_freqs_cis(cfg.rope_dim, cfg.max_context, cfg.rope_theta, device=x.device)


class GatedDeltaNetBlock(FFNBlock):
  """A linear-attention layer (Qwen3.5's gated delta net, or Kimi's KDA): q, k and v from a causal depthwise
  convolution over the last conv_kernel tokens, then per value head a state S (head_v_dim, head_k_dim) that decays
  by exp(log_alpha) and is corrected by the delta rule, S += beta (v - S k) k^T, and read as S q. The convolution's
  window and S are this block's state between calls; a call at position 0 starts from zeros."""

  def __init__(self, config: TransformerConfig, ssm: SSMConfig):
    super().__init__(config)
    self.head_k_dim, self.num_k_heads, self.num_v_heads = ssm.state_size, ssm.group_count, ssm.time_step_rank
    assert self.num_v_heads % self.num_k_heads == 0, "GatedDeltaNetBlock: value heads must be a multiple of key heads"
    self.head_v_dim, self.ssm_conv_kernel = ssm.inner_size // ssm.time_step_rank, ssm.conv_kernel
    self.q_dim = ssm.state_size * ssm.group_count
    self.conv_channels = ssm.inner_size + 2 * self.q_dim
    self.attn_qkv = Linear(config.dim, self.conv_channels, bias=False)
    if ssm.kda:
      self.ssm_g_a, self.ssm_g_b = Linear(config.dim, self.head_v_dim, bias=False), Linear(self.head_v_dim, ssm.inner_size, bias=False)
      self.ssm_f_a, self.ssm_f_b = Linear(config.dim, self.head_k_dim, bias=False), Linear(self.head_k_dim, ssm.inner_size, bias=False)
    else:
      self.attn_gate = Linear(config.dim, ssm.inner_size, bias=False)
      self.ssm_alpha = Linear(config.dim, self.num_v_heads, bias=False)
    self.ssm_beta = Linear(config.dim, self.num_v_heads, bias=False)
    self.ssm_conv1d = {"weight": Tensor.zeros(self.conv_channels, self.ssm_conv_kernel)}
    self.ssm_dt = {"bias": Tensor.zeros(ssm.inner_size if ssm.kda else self.num_v_heads)}
    self.ssm_a = Tensor.zeros(self.num_v_heads, 1) if ssm.kda else Tensor.zeros(self.num_v_heads)
    self.ssm_norm, self.ssm_out = nn.RMSNorm(self.head_v_dim, config.norm_eps), Linear(ssm.inner_size, config.dim, bias=False)

  def _attention(self, x: Tensor, start_pos: int | UOp) -> Tensor:
    B, T, _ = x.shape
    if not isinstance(T, int): raise ValueError("GatedDeltaNetBlock: the number of tokens must be known (an int), not symbolic")
    kda, K, Hv, Hk = hasattr(self, "ssm_g_a"), self.ssm_conv_kernel, self.num_v_heads, self.num_k_heads
    # the position as a bound Variable: one graph serves every position, with the reset a value in it
    if not isinstance(start_pos, UOp): start_pos = UOp.variable("start_pos", 0, self.config.max_context - 1).bind(start_pos)
    fresh = Tensor(start_pos).eq(0)
    x = x.half()  # the projections read half inputs (as llama.cpp's and tinygrad's do)
    gate = (self.ssm_g_b(self.ssm_g_a(x)) if kda else self.attn_gate(x)).reshape(B, T, Hv, self.head_v_dim)
    beta = self.ssm_beta(x).sigmoid().reshape(B, T, Hv)
    alpha = self.ssm_f_b(self.ssm_f_a(x)) if kda else self.ssm_alpha(x)
    log_decay = (alpha.float() + self.ssm_dt["bias"]).softplus().reshape(B, T, Hv, -1) * self.ssm_a.reshape(Hv, -1)
    # the convolution's window: the last K-1 inputs before this call, then this call's
    window = fresh.where(0, self.conv_state).cat(self.attn_qkv(x).cast(self.conv_state.dtype), dim=1)  # (B, K-1+T, C)
    conv = functools.reduce(lambda a, b: a + b, (window[:, i:i + T] * self.ssm_conv1d["weight"][:, i] for i in range(K))).silu()
    q, k, v = conv.split([self.q_dim, self.q_dim, self.conv_channels - 2 * self.q_dim], dim=-1)
    eps = 1e-12 if kda else 1e-6
    q, k = (z.reshape(B, T, Hk, self.head_k_dim).normalize(dim=-1, eps=eps).repeat(1, 1, Hv // Hk, 1) for z in (q, k))
    v = v.reshape(B, T, Hv, self.head_v_dim)
    # per step: q (B, H, 1, Dk), k (B, H, 1, Dk), v (B, H, Dv, 1), beta (B, H, 1, 1), decay (B, H, Dv or 1, 1)
    q, k, v, beta = (z.transpose(1, 2).float() for z in (q, k, v, beta))
    q, k, v, beta = q.unsqueeze(-2) * self.head_k_dim ** -0.5, k.unsqueeze(-2), v.unsqueeze(-1), beta.unsqueeze(-1).unsqueeze(-1)
    decay = log_decay.transpose(1, 2).exp().unsqueeze(-1)
    state = fresh.where(0, self.recurrent_state.float())
    outs = []
    for t in range(T):
      state = state * decay[:, :, t]
      state = state + (v[:, :, t] - (state * k[:, :, t]).sum(-1, keepdim=True)) * beta[:, :, t] * k[:, :, t]
      outs.append((state * q[:, :, t]).sum(-1))
    core = Tensor.stack(*outs, dim=1).contiguous()  # (B, T, Hv, Dv)
    Tensor.realize(core, self.conv_state.assign(window[:, T:T + K - 1]), self.recurrent_state.assign(state.cast(self.recurrent_state.dtype)))
    z = (self.ssm_norm(core) * (gate.sigmoid() if kda else gate.silu())).cast(x.dtype)
    return self.ssm_out(z.reshape(B, T, -1))

  def _init_state(self, x: Tensor) -> None:
    if hasattr(self, "conv_state"): return
    B = x.shape[0]
    self.conv_state = Tensor.zeros(B, self.ssm_conv_kernel - 1, self.conv_channels, device=x.device).contiguous().realize()
    self.recurrent_state = Tensor.zeros(B, self.num_v_heads, self.head_v_dim, self.head_k_dim, device=x.device).contiguous().realize()


class Transformer:
  """Transformer(config): the blocks (blk), token_embd, output_norm and output, with zero weights. forward(tokens
  (B, T), start_pos, temperature) samples each row's next token on the device (the Gumbel-max trick: argmax of
  logits/temperature plus Gumbel noise, greedy as temperature goes to 0); generate(tokens) yields next tokens and
  appends them to tokens, reusing the cache for a prefix it already ran."""

  def __init__(self, config: TransformerConfig):
    dense_config = replace(config, num_experts=0, num_experts_per_tok=0, shared_expert_dim=0, hidden_dim=config.dense_hidden_dim or config.hidden_dim)
    if config.ssm: config = replace(config, qk_norm=config.head_dim)
    attention = MLATransformerBlock if config.kv_lora_rank > 0 else TransformerBlock
    def block(i: int) -> FFNBlock:
      cfg = dense_config if i < config.leading_dense_blocks else config
      if config.ssm and config.ssm_layers[i]: return GatedDeltaNetBlock(cfg, config.ssm)
      return attention(cfg)
    self.blk: list[FFNBlock] = [block(i) for i in range(config.num_blocks)]
    self.token_embd = nn.Embedding(config.vocab_size, config.dim)
    self.output_norm = nn.RMSNorm(config.dim, config.norm_eps)
    self.output = Linear(config.dim, config.vocab_size, bias=False)
    self.max_context = config.max_context
    self.has_recurrent_block = any(isinstance(b, GatedDeltaNetBlock) for b in self.blk)
    self._cached_tokens: list[int] = []
    self.prefill_jit, self.rollout_jit = TinyJit(self.forward), TinyJit(self.forward)
    self._logit_jits = (TinyJit(self.logits), TinyJit(self.logits))  # (prefill, rollout), for a sampler on the host

  @property
  def vocab_size(self) -> int: return self.output.weight.shape[0]

  def summary(self) -> str:
    cfg = self.blk[-1].config  # (leading blocks may be dense)
    kinds = ", ".join(sorted({type(b).__name__ for b in self.blk}))
    experts = f", {cfg.num_experts} experts ({cfg.num_experts_per_tok} per token)" if cfg.num_experts else ""
    nbytes = sum(p.nbytes() for p in nn.state.get_parameters(self))
    return f"{len(self.blk)} blocks ({kinds}), dim {cfg.dim}{experts}, {self.vocab_size} tokens, {nbytes / 1e6:,.1f} MB of weights"

  def logits(self, tokens: Tensor, start_pos: int | UOp) -> Tensor:
    """(B, vocab) float32 logits of each row's last token; the cache takes all of them."""
    x = self.token_embd(tokens).float()
    for block in self.blk: x = block(x, start_pos)
    return self.output(self.output_norm(x[:, -1:]))[:, -1, :].float()

  def forward(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor) -> Tensor:
    logits = self.logits(tokens, start_pos)
    gumbel = -(-Tensor.rand_like(logits).maximum(1e-12).log()).log()
    return (logits / temperature.maximum(1e-12) + gumbel).argmax(-1, keepdim=True)

  def __call__(self, tokens: Tensor, start_pos: int | UOp, temperature: Tensor) -> Tensor:
    return (self.prefill_jit if resolve(tokens.shape[1] != 1) else self.rollout_jit)(tokens.contiguous(), start_pos, temperature)

  @staticmethod
  def from_gguf(gguf: Tensor | str | pathlib.Path, max_context: int | None = None, realize: bool = bool(getenv("REALIZE", 1)),
                progress: bool = False, kv_dtype: str = "f32") -> tuple[Any, dict]:
    """(model, metadata) from a gguf file. The dense llama family gets llm/dense.py's DenseTransformer (progress and
    kv_dtype are its options); the others a Transformer here, its weights dequantized (to float16 unless HALF=0)
    and, with realize, computed once at load rather than in every matmul."""
    kv, tensors = gguf_read(gguf)
    name = str(gguf) if not isinstance(gguf, Tensor) else "<tensor>"
    arch = kv.get("general.architecture")
    if arch in dense.ARCHS and not kv.get(f"{arch}.expert_count"): return dense.DenseTransformer.from_parts(kv, tensors, name, max_context, progress, kv_dtype)
    if arch not in ARCHS:
      raise ValueError(f"{name}: architecture {arch!r} is not supported (supported: {', '.join(sorted(set(ARCHS) | set(dense.ARCHS)))})")
    try:
      with run_once(): return _from_state(kv, {n: t.dequantize() for n, t in tensors.items()}, arch, max_context, realize), kv
    except KeyError as e: raise ValueError(f"{name}: metadata or tensor {e} is missing") from None

  # ** generation **

  def warmup(self) -> None:
    """Compiles and captures both JITs (each captures on its second call)."""
    for _ in range(2): list(zip(range(2), self.generate([0])))

  def get_start_pos(self, tokens: list[int]) -> int:
    """Where to resume: after the longest prefix of tokens the caches hold (a recurrent block's state cannot be cut
    back, so it resumes only when tokens extend what it ran, else from 0)."""
    if self.has_recurrent_block:
      n = len(self._cached_tokens)
      return n if 0 < n < len(tokens) and tokens[:n] == self._cached_tokens else 0
    prefix = sum(1 for _ in itertools.takewhile(lambda ab: ab[0] == ab[1], zip(tokens[:-1], self._cached_tokens)))
    return min(block._reusable_prefix_len(prefix, len(self._cached_tokens)) for block in self.blk)

  def generate(self, tokens: list[int], chunk_size: int = 32, temperature: float = 0.0,
               sample: Callable[[np.ndarray, list[int]], int] | None = None, max_new: int | None = None) -> Iterator[int]:
    """Yields the tokens that follow `tokens`, appending each to it, until the context is full (or max_new of them).
    The prompt runs in chunks of up to chunk_size tokens, each chunk's length and position bound Variables, so every
    chunk reuses the prefill JIT. sample(logits, tokens) picks on the host instead of the device's sampling."""
    dense.check_prompt(tokens, self.max_context)
    if self.has_recurrent_block: chunk_size = 1
    v_start, v_toks = UOp.variable("start_pos", 0, self.max_context - 1), UOp.variable("toks", 1, chunk_size)
    temp = Tensor([temperature])
    prompt = Tensor(tokens + [0] * (self.max_context - len(tokens)), dtype="int32").reshape(1, self.max_context)
    start_pos, prompt_len, out, n_new = self.get_start_pos(tokens), len(tokens), None, 0
    while len(tokens) < self.max_context:
      n = min(chunk_size, len(tokens) - start_pos)
      sp, nt = v_start.bind(start_pos), v_toks.bind(n)
      step = prompt[:, sp:sp + nt] if start_pos < prompt_len or out is None else out
      if sample is None: out = self(step, sp, temp).realize()
      else:
        logits = self._logit_jits[0 if resolve(step.shape[1] != 1) else 1](step.contiguous(), sp).numpy()
      start_pos += n
      if start_pos < len(tokens): continue  # more of the prompt to run
      if sample is None: tokens.append(int(out.item()))  # type: ignore[union-attr]  # (out: the step just run)
      else:
        tokens.append(sample(logits.reshape(-1), tokens))
        out = Tensor([[tokens[-1]]], dtype="int32")
      self._cached_tokens = tokens[:-1]
      yield tokens[-1]
      n_new += 1
      if max_new is not None and n_new >= max_new: return


def _permute_rope_rows(w: Tensor, heads: int, keep: int) -> Tensor:
  """Rows of a q or k projection (heads * head_dim, in) whose rotated part is in llama.cpp's interleaved order
  (pairs adjacent) put in the half-split order apply_rope reads; the first `keep` rows of each head do not rotate."""
  hd = w.shape[0] // heads
  w = w.reshape(heads, hd, -1)
  rot = w[:, keep:].reshape(heads, (hd - keep) // 2, 2, -1).transpose(1, 2).reshape(heads, hd - keep, -1)
  return w[:, :keep].cat(rot, dim=1).reshape(heads * hd, -1)


def _from_state(kv: dict[str, Any], sd: dict[str, Tensor], arch: str, max_context: int | None, realize: bool) -> Transformer:
  """A Transformer of a non-dense family with the file's weights loaded (llama.cpp's names and layouts)."""
  def k(key: str, default: Any = KeyError) -> Any:
    if (v := kv.get(f"{arch}.{key}", default)) is KeyError: raise KeyError(f"{arch}.{key}")
    return v
  if getenv("HALF", 1): sd = {n: t.cast(dtypes.float16) for n, t in sd.items()}
  if "output.weight" not in sd: sd["output.weight"] = sd["token_embd.weight"]  # tied embeddings
  ctx, n_heads, n_kv_heads = k("context_length"), k("attention.head_count"), k("attention.head_count_kv")
  ssm, ssm_layers = None, ()
  if arch in ("qwen35", "qwen35moe"):
    ssm = SSMConfig(**{f: k(f"ssm.{f}") for f in ("conv_kernel", "state_size", "group_count", "time_step_rank", "inner_size")})
    ssm_layers = tuple((i + 1) % k("full_attention_interval") != 0 for i in range(k("block_count")))
  if arch in ("qwen35", "qwen35moe", "glm4moe"): sd = {n.replace("post_attention_norm", "ffn_norm"): t for n, t in sd.items()}
  kv_lora = k("attention.kv_lora_rank", 0)
  head_dim = k("attention.key_length_mla", k("attention.key_length", k("embedding_length") // n_heads))
  rope_dim = k("rope.dimension_count", head_dim)
  if arch == "llama" or kv_lora:  # llama.cpp's rotation pairs adjacent dimensions; apply_rope pairs the halves
    for n in list(sd):
      if n.endswith(("attn_q.weight", "attn_q_b.weight")): sd[n] = _permute_rope_rows(sd[n], n_heads, head_dim - rope_dim)
      elif arch == "llama" and n.endswith("attn_k.weight"): sd[n] = _permute_rope_rows(sd[n], n_kv_heads, 0)
      elif kv_lora and n.endswith("attn_kv_a_mqa.weight"): sd[n] = sd[n][:kv_lora].cat(_permute_rope_rows(sd[n][kv_lora:], 1, 0))
  dense_lead = k("leading_dense_block_count", 0)
  config = TransformerConfig(
    num_blocks=k("block_count") - k("nextn_predict_layers", 0), dim=k("embedding_length"),
    hidden_dim=k("expert_feed_forward_length", k("feed_forward_length", 0)), n_heads=n_heads, n_kv_heads=n_kv_heads,
    norm_eps=k("attention.layer_norm_rms_epsilon"), vocab_size=sd["token_embd.weight"].shape[0], head_dim=head_dim,
    rope_theta=k("rope.freq_base", 10000.0), rope_dim=rope_dim,
    v_head_dim=k("attention.value_length_mla", k("attention.value_length", head_dim)),
    max_context=min(max_context, ctx) if max_context is not None else ctx,
    qk_norm=int(sd["blk.0.attn_q_norm.weight"].shape[0]) if "blk.0.attn_q_norm.weight" in sd else 0,
    num_experts=k("expert_count", 0), num_experts_per_tok=k("expert_used_count", 0),
    norm_topk_prob=k("expert_weights_norm", arch in ("qwen3moe", "qwen35moe")),
    expert_gating_func=ExpertGating(k("expert_gating_func", ExpertGating.SOFTMAX)),
    kv_lora_rank=kv_lora, q_lora_rank=k("attention.q_lora_rank", 0), leading_dense_blocks=dense_lead,
    shared_expert_dim=k("expert_shared_feed_forward_length", k("expert_shared_count", 0) * k("expert_feed_forward_length", 0)),
    shared_expert_gate=f"blk.{dense_lead}.ffn_gate_inp_shexp.weight" in sd,
    dense_hidden_dim=k("feed_forward_length", 0) if dense_lead else 0, routed_scaling_factor=k("expert_weights_scale", 1.0),
    attn_output_gate=arch in ("qwen35", "qwen35moe"), ssm=ssm, ssm_layers=ssm_layers,
    qkv_bias="blk.0.attn_q.bias" in sd, expert_bias=f"blk.{dense_lead}.exp_probs_b.bias" in sd)
  model = Transformer(config)
  sd.pop("rope_freqs.weight", None)  # llama3's frequency factors: not used by this path
  nn.state.load_state_dict(model, sd, verbose=False, consume=True, realize=False)
  if realize:  # the dequantized weights computed once, not in every matmul
    params = nn.state.get_parameters(model)
    for p in params: p.replace(p.contiguous())
    Tensor.realize(*params)
  return model
