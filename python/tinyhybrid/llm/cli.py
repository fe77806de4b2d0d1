"""python -m tinyhybrid.llm --model path.gguf: chat in the terminal (tinygrad.llm's flags). --prompt TEXT answers once
and exits, --benchmark [N] prints prefill and decode speed, --serve [PORT] runs the OpenAI-compatible server."""
from __future__ import annotations

import argparse
import sys
import time

from tinyhybrid.helpers import GlobalCounters
from tinyhybrid.llm.dense import KV_DTYPES
from tinyhybrid.llm.runner import LLM, ContextError
from tinyhybrid.llm.sampling import SamplingParams


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog="python -m tinyhybrid.llm", description="Run a llama-family .gguf model: chat, one prompt, benchmark or serve.")
  p.add_argument("--model", "-m", required=True, help="path to a .gguf file")
  p.add_argument("--max_context", type=int, default=4096, help="context length (capped at the model's), default 4096")
  p.add_argument("--kv_dtype", choices=tuple(KV_DTYPES), default="f16",
                 help="the KV cache's element type (f32: exact; f16: half the memory, llama.cpp's default; q8_0: 8.5 bits a "
                      "value), default f16")
  p.add_argument("--serve", nargs="?", type=int, const=8000, metavar="PORT", help="serve the OpenAI-compatible API and a chat page (default port 8000)")
  p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
  p.add_argument("--allowed-hosts", default="", metavar="NAME[,NAME...]",
                 help="served on a loopback address: Host names to answer besides localhost, 127.0.0.1 and [::1] (* for any)")
  p.add_argument("--prompt", "-p", help="answer this prompt and exit (as one chat turn; with --raw as plain text to continue)")
  p.add_argument("--raw", action="store_true", help="with --prompt: continue the text as it is, without the chat template")
  p.add_argument("--benchmark", nargs="?", type=int, const=20, metavar="COUNT", help="print prefill and decode tokens/s (default 20 decode steps)")
  p.add_argument("--warmup", action="store_true", help="compile and capture the kernels before the first request")
  p.add_argument("--max_tokens", type=int, default=None, help="answer length limit in tokens (served: when a request sets none)")
  p.add_argument("--temperature", type=float, default=0.0, help="0 (the default) picks the likeliest token")
  p.add_argument("--top_k", type=int, default=0)
  p.add_argument("--top_p", type=float, default=1.0)
  p.add_argument("--repetition_penalty", type=float, default=1.0)
  p.add_argument("--seed", type=int, default=None)
  return p.parse_args(argv)


def benchmark(llm: LLM, steps: int) -> None:
  model = llm.model
  n_prompt = max(1, min(128, model.max_context // 4))
  ids = [i % model.vocab_size for i in range(1, n_prompt + 1)]
  model.warmup()  # compile and capture the kernels first
  st = time.perf_counter()
  gen = model.generate(ids)
  next(gen)
  prefill = time.perf_counter() - st
  print(f"prefill: {n_prompt} tokens in {prefill * 1e3:.2f} ms, {n_prompt / prefill:.1f} tok/s")
  times = []
  for i in range(min(steps, model.max_context - n_prompt - 1)):
    GlobalCounters.reset()
    st = time.perf_counter()
    next(gen)
    times.append(dt := time.perf_counter() - st)
    print(f"decode {i:3d}: {dt * 1e3:7.2f} ms, {1 / dt:8.1f} tok/s, {GlobalCounters.kernel_count} kernels, {GlobalCounters.mem_used / 1e6:.1f} MB used")
  if times:
    print(f"decode: {len(times)} tokens, {len(times) / sum(times):.1f} tok/s (best step {1 / min(times):.1f} tok/s)")


def main(argv: list[str] | None = None) -> int:
  args = parse_args(argv)
  try:
    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.repetition_penalty, args.seed)
    llm = LLM.load(args.model, args.max_context, progress=True, kv_dtype=args.kv_dtype)
  except (ValueError, FileNotFoundError, ImportError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  m = llm.model
  print(f"using model \"{llm.name}\" ({m.summary()}), max context {m.max_context}", file=sys.stderr)
  if args.warmup or args.serve is not None: m.warmup()
  if args.serve is not None:
    from tinyhybrid.llm.serve import serve
    serve(llm, args.host, args.serve, args.max_tokens, [h for h in args.allowed_hosts.split(",") if h.strip()])
    return 0
  if args.benchmark is not None:
    benchmark(llm, args.benchmark)
    return 0
  if args.prompt is not None:
    try:
      ids = llm.tok.prompt(args.prompt) if args.raw else llm.chat_ids([{"role": "user", "content": args.prompt}])
      for d in llm.stream(ids, params, args.max_tokens):
        sys.stdout.write(d.text)
        sys.stdout.flush()
    except ContextError as e:
      print(f"error: {e}", file=sys.stderr)
      return 1
    sys.stdout.write("\n")
    return 0
  messages: list[dict] = []
  while True:
    try: line = input(">>> ")
    except (EOFError, KeyboardInterrupt):
      print()
      return 0
    if not line.strip(): continue
    messages.append({"role": "user", "content": line})
    try: ids = llm.chat_ids(messages)
    except ValueError as e:
      print(f"error: {e}", file=sys.stderr)
      messages.pop()
      continue
    reply = ""
    try:
      for d in llm.stream(ids, params, args.max_tokens):
        reply += d.text
        sys.stdout.write(d.text)
        sys.stdout.flush()
    except ContextError as e:
      print(f"error: {e}; start a new chat to go on", file=sys.stderr)
      messages.pop()
      continue
    except KeyboardInterrupt: pass
    sys.stdout.write("\n\n")
    messages.append({"role": "assistant", "content": reply})


if __name__ == "__main__": sys.exit(main())
