"""Picking the next token from the logits, on the host (a vocabulary's worth of floats): greedy, or sampled after a
repetition penalty, a temperature, top-k and top-p, in that order (transformers' order, and its definitions), from a
seeded generator so that a seed reproduces the output."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
  temperature: float = 0.0         # 0: greedy
  top_k: int = 0                   # 0: all tokens
  top_p: float = 1.0               # 1: all tokens
  repetition_penalty: float = 1.0  # 1: none; > 1 makes tokens already in the text less likely
  seed: int | None = None

  def __post_init__(self):
    if self.temperature < 0: raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if self.top_k < 0: raise ValueError(f"top_k must be >= 0, got {self.top_k}")
    if not 0 < self.top_p <= 1: raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.repetition_penalty <= 0: raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


class Sampler:
  """sampler(logits, ids) -> the next token id; ids are the tokens so far (prompt and output), which the repetition
  penalty reads."""

  def __init__(self, params: SamplingParams | None = None):
    self.params = params or SamplingParams()
    self.rng = np.random.default_rng(self.params.seed)

  def __call__(self, logits: np.ndarray, ids: list[int]) -> int:
    p = self.params
    x: np.ndarray = np.asarray(logits, dtype=np.float32).reshape(-1)
    if p.repetition_penalty != 1.0 and ids:
      x = x.copy()
      seen = np.unique(np.asarray(ids, dtype=np.int64))
      v = x[seen]
      x[seen] = np.where(v > 0, v / p.repetition_penalty, v * p.repetition_penalty)
    if p.temperature == 0: return int(np.argmax(x))
    x = x.astype(np.float64) / p.temperature
    if 0 < p.top_k < x.size:
      kth = np.partition(x, -p.top_k)[-p.top_k]
      x = np.where(x < kth, -np.inf, x)
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    if p.top_p < 1.0:
      order = np.argsort(-probs, kind="stable")
      cum = np.cumsum(probs[order])
      # the smallest set of the likeliest tokens whose probability reaches top_p (at least one)
      keep = order[:int(np.searchsorted(cum, p.top_p) + 1)]
      mask = np.zeros_like(probs, dtype=bool)
      mask[keep] = True
      probs = np.where(mask, probs, 0.0)
      probs /= probs.sum()
    return int(self.rng.choice(probs.size, p=probs))
