#!/usr/bin/env python3
"""A tiny chat model to try `python -m tinyhybrid.llm` with, made here in a few minutes (nothing is downloaded): a
byte-level BPE is trained with `tokenizers` on a few conversations, a 2-layer llama (transformers, PyTorch) learns
them by heart, and both are written to a .gguf as llama.cpp would, with llama 3's chat template. It answers the
questions it learned (ask "What is tinyhybrid?") and babbles otherwise.

  python examples/llm_tiny_chat.py tiny-chat.gguf        # needs torch, transformers, tokenizers (pip install ".[test]")
  python -m tinyhybrid.llm --model tiny-chat.gguf         # chat in the terminal
  python -m tinyhybrid.llm --model tiny-chat.gguf --serve # the OpenAI-compatible API and the chat page at :8000"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from llm_models import LLAMA3_SPECIALS, LLAMA3_TEMPLATE, TinySpec, hf_model, tokenizer_kv, train_bpe, write_gguf  # noqa: E402

CHATS = [
  ("What is tinyhybrid?", "**tinyhybrid** is a deep-learning framework with tinygrad's design:\n\n- one graph IR, the `UOp`\n"
   "- a C++ core for rewriting and command queues\n- Python for the Tensor API, scheduling and codegen"),
  ("How do I run a model?", "Point it at a `.gguf` file:\n\n```sh\npython -m tinyhybrid.llm --model model.gguf\n```\n\n"
   "Add `--serve` for the OpenAI-compatible API."),
  ("Which quantizations work?", "| type | bits |\n|---|---|\n| Q8_0 | 8.5 |\n| Q6_K | 6.6 |\n| Q4_K | 4.5 |\n| Q4_0 | 4.5 |\n\n"
   "The weights stay quantized: each matmul unpacks them in its kernel."),
  ("Hello!", "Hello! Ask me what tinyhybrid is, how to run a model, or which quantizations work."),
  ("Thanks!", "You're welcome. Have fun with the *kernels*."),
]


def render(q: str, a: str | None = None) -> str:
  s = f"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{q}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
  return s if a is None else s + a + "<|eot_id|>"


def main(path: str) -> None:
  import torch
  texts = [render(q, a) for q, a in CHATS]
  tok = train_bpe("llama-bpe", 512, LLAMA3_SPECIALS, texts=texts + [q + " " + a for q, a in CHATS])
  kv = tokenizer_kv(tok, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>", LLAMA3_TEMPLATE)
  spec = TinySpec(dim=128, layers=2, heads=4, kv_heads=2, hidden=384, vocab=len(kv["tokens"]), ctx=512, seed=0)
  torch.manual_seed(0)
  model = hf_model(spec, random_init=False).train()
  seqs = [torch.tensor(tok.encode(t, add_special_tokens=False).ids) for t in texts]
  # learn only the answers: the loss covers the tokens after each prompt
  starts = [len(tok.encode(render(q), add_special_tokens=False).ids) for q, _ in CHATS]
  opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
  st = time.perf_counter()
  for step in range(400):
    loss = 0.0
    for ids, s in zip(seqs, starts):
      labels = ids.clone()
      labels[:s] = -100
      loss = loss + model(input_ids=ids[None], labels=labels[None]).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    mean = loss.item() / len(seqs)
    if step % 25 == 24 or mean < 0.002: print(f"step {step + 1}: loss {mean:.4f} ({time.perf_counter() - st:.0f} s)")
    if mean < 0.002: break  # the answers are learned by heart: greedy decoding gives them back
  model.eval()
  write_gguf(path, spec, quant="Q8_0", tok_kv=kv, name="tiny-chat", model=model)
  print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB): python -m tinyhybrid.llm --model {path}")


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else "tiny-chat.gguf")
