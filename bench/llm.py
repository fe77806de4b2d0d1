#!/usr/bin/env python3
"""The LLM stack against transformers (eager PyTorch on the CPU) and tinygrad.llm, on the same weights in the same
run. The model is built here (tests/llm_models.py): a 2-layer llama, dim 512, 8 heads (4 kv heads), FFN 1376, a
2048-token vocabulary, random weights, written as a .gguf in float32 and in Q8_0 (transformers runs the Q8_0
file's dequantized weights in float32). One JSON line per case:

  decode_f32, decode_q8_0   greedy decode tokens/s after a 16-token prompt (ratio > 1: we are faster)
  ttft_256                  time to the first token of a 256-token prompt, ms (ratio > 1: we are faster)
  decode_mem                bytes allocated by the second JIT'd decode step (target 0)

  python bench/llm.py            # all cases
  python bench/llm.py ttft_256   # one case
  python bench/llm.py --vs llamacpp [F16|Q8_0|Q4_K_M]   # the 0.5B model against llama.cpp (llm_vs_llamacpp.py)

tinygrad 0.14's wheel lacks tinygrad/llm/kernels (its AMD-only kernels, which model.py imports): a stand-in module
gives it plain nn.Linear and no custom kernels, which is what it runs on the CPU anyway."""
from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
import types
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
os.environ.setdefault("DEV", "CPU")  # tinygrad has no CPU default without it
from llm_models import TinySpec, write_gguf  # noqa: E402

from tinyhybrid import GlobalCounters  # noqa: E402
from tinyhybrid.llm.model import Transformer  # noqa: E402

SPEC = TinySpec(dim=512, layers=2, heads=8, kv_heads=4, hidden=1376, vocab=2048, ctx=1024, seed=1)
PROMPT = [int(i) for i in np.random.default_rng(0).integers(0, SPEC.vocab, 256)]
DECODE_STEPS = 64

try:
  import torch
  torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
except ImportError: torch = None


def _tinygrad_transformer() -> Any:
  try:
    from tinygrad import nn
  except ImportError: return None
  if "tinygrad.llm.kernels.amd" not in sys.modules:
    try: import tinygrad.llm.kernels.amd  # noqa: F401
    except ImportError:
      amd = types.ModuleType("tinygrad.llm.kernels.amd")
      amd.Linear, amd.amd_custom_kernels_supported = nn.Linear, lambda device: False
      amd.gated_delta_prefill = amd.flash_attention = None
      sys.modules["tinygrad.llm.kernels"], sys.modules["tinygrad.llm.kernels.amd"] = types.ModuleType("tinygrad.llm.kernels"), amd
  from tinygrad.llm.model import Transformer as TGTransformer
  return TGTransformer


def emit(case: str, unit: str, ours: float, anchors: dict[str, float | None], higher_is_better: bool, **extra: Any) -> None:
  line: dict[str, Any] = {"bench": "llm", "case": case, "unit": unit, "ours": round(ours, 4)}
  for name, v in anchors.items():
    line[name] = None if v is None else round(v, 4)
    line[f"ratio_{name}"] = None if v is None else round(ours / v if higher_is_better else v / ours, 3)
  print(json.dumps({**line, **extra}), flush=True)


def rounds(fns: dict[str, Callable[[], float]], n: int = 3) -> dict[str, float]:
  """Each fn returns a time; the best of n rounds, the contenders alternating (a burst of other work on a shared
  machine then slows each of them, not just one)."""
  best: dict[str, float] = {}
  for _ in range(n):
    for name, fn in fns.items():
      gc.collect()
      gc.disable()
      try: best[name] = min(best.get(name, float("inf")), fn())
      finally: gc.enable()
  return best


# ** decode: seconds per token **

def ours_decode(model: Transformer) -> Callable[[], float]:
  def run() -> float:
    model.cached.clear()
    gen = model.generate(PROMPT[:16])
    for _ in range(4): next(gen)
    st = time.perf_counter()
    for _ in range(DECODE_STEPS): next(gen)
    return (time.perf_counter() - st) / DECODE_STEPS
  return run


def hf_decode(hf: Any) -> Callable[[], float]:
  def run() -> float:
    with torch.no_grad():
      out = hf(input_ids=torch.tensor([PROMPT[:16]]), use_cache=True)
      past, tok = out.past_key_values, out.logits[0, -1].argmax()
      for i in range(DECODE_STEPS + 4):
        if i == 4: st = time.perf_counter()
        out = hf(input_ids=tok.view(1, 1), past_key_values=past, use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax()
        int(tok)
    return (time.perf_counter() - st) / DECODE_STEPS
  return run


def tg_decode(tg: Any) -> Callable[[], float]:
  def run() -> float:
    tg._cached_tokens = []
    gen = tg.generate(list(PROMPT[:16]))
    for _ in range(4): next(gen)
    st = time.perf_counter()
    for _ in range(DECODE_STEPS): next(gen)
    return (time.perf_counter() - st) / DECODE_STEPS
  return run


def case_decode(quant: str | None) -> None:
  with tempfile.TemporaryDirectory() as d:
    fn = os.path.join(d, "bench.gguf")
    hf = write_gguf(fn, SPEC, quant=quant)
    model, _ = Transformer.from_gguf(fn, max_context=SPEC.ctx)
    fns = {"ours": ours_decode(model)}
    if torch is not None: fns["transformers"] = hf_decode(hf)
    if (TG := _tinygrad_transformer()) is not None: fns["tinygrad"] = tg_decode(TG.from_gguf(fn, SPEC.ctx)[0])
    t = rounds(fns)
  tps = {k: 1 / v for k, v in t.items()}
  emit(f"decode_{(quant or 'f32').lower()}", "tok/s", tps.pop("ours"), {k: tps.get(k) for k in ("transformers", "tinygrad")}, True,
       target_ratio_transformers=2.0, target_ratio_tinygrad=1.0)


# ** time to first token **

def case_ttft_256() -> None:
  with tempfile.TemporaryDirectory() as d:
    fn = os.path.join(d, "bench.gguf")
    hf = write_gguf(fn, SPEC)
    model, _ = Transformer.from_gguf(fn, max_context=SPEC.ctx)
    def ours() -> float:
      model.cached.clear()
      st = time.perf_counter()
      next(model.generate(list(PROMPT)))
      return time.perf_counter() - st
    def transformers() -> float:
      with torch.no_grad():
        st = time.perf_counter()
        int(hf(input_ids=torch.tensor([PROMPT]), use_cache=True).logits[0, -1].argmax())
        return time.perf_counter() - st
    fns: dict[str, Callable[[], float]] = {"ours": ours}
    if torch is not None: fns["transformers"] = transformers
    for f in fns.values(): f(), f()  # compile, capture
    t = rounds(fns, 5)
  emit("ttft_256", "ms", t.pop("ours") * 1e3, {"transformers": t["transformers"] * 1e3 if "transformers" in t else None}, False,
       target_ratio_transformers=1.0)


# ** memory **

def case_decode_mem() -> None:
  with tempfile.TemporaryDirectory() as d:
    fn = os.path.join(d, "bench.gguf")
    write_gguf(fn, SPEC, quant="Q8_0")
    model, _ = Transformer.from_gguf(fn, max_context=SPEC.ctx)
    gen = model.generate(PROMPT[:16])
    for _ in range(3): next(gen)  # the JIT captures on its second call
    before = GlobalCounters.mem_used
    next(gen)
    after = GlobalCounters.mem_used
  emit("decode_mem", "bytes", after - before, {}, False, mem_used=before, target=0)


CASES: dict[str, Callable[[], None]] = {"decode_f32": lambda: case_decode(None), "decode_q8_0": lambda: case_decode("Q8_0"),
                                        "ttft_256": case_ttft_256, "decode_mem": case_decode_mem}

if __name__ == "__main__":
  if sys.argv[1:2] == ["--vs"]:  # --vs llamacpp [F16|Q8_0|Q4_K_M ...]: bench/llm_vs_llamacpp.py
    if sys.argv[2:3] != ["llamacpp"]: sys.exit("bench/llm.py --vs: the one anchor is llamacpp")
    import llm_vs_llamacpp
    llm_vs_llamacpp.main([t for t in sys.argv[3:] if t in llm_vs_llamacpp.TYPES] or list(llm_vs_llamacpp.TYPES))
  else:
    for name in sys.argv[1:] or list(CASES): CASES[name]()
