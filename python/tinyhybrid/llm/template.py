"""Chat messages to prompt text with the file's own chat template (tokenizer.chat_template), rendered by jinja2 the
way transformers' apply_chat_template does it (sandboxed, trim_blocks and lstrip_blocks, loop controls, its tojson,
raise_exception and strftime_now, bos_token and eos_token). A file without a template gets the format its special
tokens give away (llama 3 headers, ChatML, gemma turns, [INST]), else plain "role: text" lines."""
from __future__ import annotations

import json
import time
from typing import Any

from tinyhybrid.llm.tokenizer import Tokenizer


def _content(m: dict[str, Any]) -> str:
  c = m.get("content")
  if c is None: return ""
  if isinstance(c, str): return c
  if isinstance(c, list): return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
  raise ValueError(f"message content must be a string or a list of parts, not {type(c).__name__}")


class ChatTemplate:
  def __init__(self, source: str | None, tok: Tokenizer):
    self.source, self.tok = source, tok
    self.bos, self.eos = tok.special_text(tok.bos_id), tok.special_text(tok.eos_id)
    self._template = None
    if source is not None:
      try: from jinja2.exceptions import TemplateError
      except ImportError: raise ImportError("the model's chat template needs jinja2: pip install 'tinyhybrid[llm]'") from None
      from jinja2.ext import loopcontrols
      from jinja2.sandbox import ImmutableSandboxedEnvironment
      env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
      def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
      def raise_exception(message: str) -> None: raise TemplateError(message)
      env.filters["tojson"] = tojson
      env.globals["raise_exception"] = raise_exception
      env.globals["strftime_now"] = lambda fmt: time.strftime(fmt)
      self._template = env.from_string(source)

  def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True, tools: list | None = None, **kwargs: Any) -> str:
    """The prompt text for these messages ({"role": ..., "content": ...}), ending with the assistant's turn opened."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
      raise ValueError("messages must be a list of objects with a string 'role'")
    if self._template is not None:
      from jinja2.exceptions import TemplateError
      try:
        return self._template.render(messages=messages, add_generation_prompt=add_generation_prompt, tools=tools, bos_token=self.bos,
                                     eos_token=self.eos, **kwargs)
      except TemplateError as e: raise ValueError(f"the chat template refused these messages: {e}") from None
    return self._fallback(messages, add_generation_prompt)

  def _fallback(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    has = self.tok.token_to_id.__contains__
    if has("<|start_header_id|>"):
      turn = lambda r, c: f"<|start_header_id|>{r}<|end_header_id|>\n\n{c}<|eot_id|>"  # noqa: E731
      return self.bos + "".join(turn(m["role"], _content(m)) for m in messages) + \
        ("<|start_header_id|>assistant<|end_header_id|>\n\n" if add_generation_prompt else "")
    if has("<|im_start|>"):
      return "".join(f"<|im_start|>{m['role']}\n{_content(m)}<|im_end|>\n" for m in messages) + ("<|im_start|>assistant\n" if add_generation_prompt else "")
    if has("<start_of_turn>"):
      role = lambda r: "model" if r == "assistant" else "user"  # noqa: E731
      return self.bos + "".join(f"<start_of_turn>{role(m['role'])}\n{_content(m)}<end_of_turn>\n" for m in messages) + \
        ("<start_of_turn>model\n" if add_generation_prompt else "")
    if has("[INST]"):
      out = self.bos
      for m in messages: out += f"[INST] {_content(m)} [/INST]" if m["role"] != "assistant" else f"{_content(m)}{self.eos}"
      return out
    return "".join(f"{m['role']}: {_content(m)}\n" for m in messages) + ("assistant: " if add_generation_prompt else "")
