"""A loaded model with its tokenizer and chat template, and the generation loop the terminal chat and the server share:
text out as tokens come, stopping at an end-of-turn token, a token limit, a stop string or the end of the context."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any, Iterator

from tinyhybrid.llm.dense import DenseTransformer
from tinyhybrid.llm.model import Transformer
from tinyhybrid.llm.routing import END_THINK, END_TOOL, THINK, TOOL, StreamRouter
from tinyhybrid.llm.sampling import Sampler, SamplingParams
from tinyhybrid.llm.template import ChatTemplate
from tinyhybrid.llm.tokenizer import Tokenizer


class ContextError(ValueError):
  """A prompt that does not fit the model's context (the message gives both sizes)."""


@dataclass
class Delta:
  text: str                        # new text (may be empty)
  finish_reason: str | None = None  # on the last one: "stop" (end of turn or a stop string) or "length"


@dataclass
class Usage:
  prompt_tokens: int = 0
  completion_tokens: int = 0


class LLM:
  def __init__(self, model: DenseTransformer | Transformer, tok: Tokenizer, template: ChatTemplate, name: str, kv: dict[str, Any] | None = None):
    self.model, self.tok, self.template, self.name, self.kv = model, tok, template, name, kv or {}

  @staticmethod
  def load(path: str | pathlib.Path, max_context: int | None = None, progress: bool = False, kv_dtype: str = "f32") -> LLM:
    model, kv = Transformer.from_gguf(path, max_context, progress=progress, kv_dtype=kv_dtype)
    tok = Tokenizer.from_gguf_kv(kv)
    name = kv.get("general.name") or kv.get("general.basename") or pathlib.Path(path).stem
    return LLM(model, tok, ChatTemplate(kv.get("tokenizer.chat_template"), tok), str(name), kv)

  @property
  def max_context(self) -> int: return self.model.max_context

  def chat_prompt(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    """The chat as the model reads it, through its template, ending where the assistant's answer begins."""
    return self.template.render(messages, add_generation_prompt=True, **kwargs)

  def chat_ids(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]: return self.tok.encode(self.chat_prompt(messages, **kwargs))

  def router(self, prompt: str) -> StreamRouter:
    """Routes the answer to prompt into content, reasoning and tool calls, by the tags this model's vocabulary has."""
    have = self.tok.token_to_id
    think, tools = THINK in have and END_THINK in have, TOOL in have and END_TOOL in have
    return StreamRouter(thinking=think and prompt.rstrip().endswith(THINK), think=think, tools=tools)

  def check_fits(self, ids: list[int]) -> None:
    if len(ids) >= self.max_context:
      raise ContextError(f"the prompt has {len(ids)} tokens, but the context holds {self.max_context} "
                         f"(at most {self.max_context - 1} for the prompt, to leave room for an answer)")

  def stream(self, ids: list[int], params: SamplingParams | None = None, max_tokens: int | None = None, stop: list[str] | None = None,
             usage: Usage | None = None) -> Iterator[Delta]:
    """The answer to prompt ids, as Deltas; the last one carries the finish reason. usage (if given) is filled in."""
    self.check_fits(ids)
    if max_tokens is not None and max_tokens <= 0: raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    stop = [s for s in (stop or []) if s]
    u = usage if usage is not None else Usage()
    u.prompt_tokens, u.completion_tokens = len(ids), 0
    dec, held = self.tok.stream_decoder(), ""
    sampler = Sampler(params)
    for tid in self.model.generate(list(ids), sample=sampler):
      if self.tok.is_end(tid):
        yield Delta(held + dec(), "stop")
        return
      u.completion_tokens += 1
      held += dec(tid)
      if stop:
        hit = min((i for i in (held.find(s) for s in stop) if i >= 0), default=-1)
        if hit >= 0:
          yield Delta(held[:hit], "stop")
          return
        # hold back what could still become a stop string
        keep = max((k for s in stop for k in range(1, min(len(s), len(held) + 1)) if held.endswith(s[:k])), default=0)
        out, held = held[:len(held) - keep], held[len(held) - keep:]
      else: out, held = held, ""
      if max_tokens is not None and u.completion_tokens >= max_tokens:
        yield Delta(out + held + dec(), "length")
        return
      if out: yield Delta(out)
    yield Delta(held + dec(), "length")  # the context is full
