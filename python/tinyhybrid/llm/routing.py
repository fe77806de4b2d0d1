"""What a chat model writes, routed into the fields of an OpenAI chat answer: text inside <think>...</think> is
`reasoning_content`, each <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen's and Hermes' format) is one
of `tool_calls`, and the rest is `content`. The tags arrive split across tokens as often as not, so text that could
still become a tag is held back until the next piece decides it."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator

THINK, END_THINK, TOOL, END_TOOL = "<think>", "</think>", "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class Routed:
  """A piece of the answer: kind is "content" or "reasoning" (text), or "tool_call" (call: name, arguments as JSON)."""
  kind: str
  text: str = ""
  call: dict[str, str] | None = None


class StreamRouter:
  """Routes a model's text as it streams. thinking: the prompt ended inside <think> (templates that open the block
  for the model), so the answer starts as reasoning. think, tools: whether those tags are routed at all (a model whose
  vocabulary lacks them writes them as plain text)."""

  def __init__(self, thinking: bool = False, think: bool = True, tools: bool = True, reasoning: bool = False):
    self.mode = "reasoning" if thinking or reasoning else "content"  # reasoning: tinygrad's name for thinking
    self.opening = {tag: mode for tag, mode, on in ((THINK, "reasoning", think), (TOOL, "tool", tools)) if on}
    self.buf, self.strip = "", False  # strip: drop the newlines a closed block leaves before the content goes on

  def feed(self, text: str) -> list[Routed]:
    self.buf += text
    out: list[Routed] = []
    while True:
      tags = self.opening if self.mode == "content" else {END_THINK if self.mode == "reasoning" else END_TOOL: "content"}
      if (hit := min(((i, t) for t in tags if (i := self.buf.find(t)) >= 0), default=None)) is not None:
        i, tag = hit
        before, self.buf = self.buf[:i], self.buf[i + len(tag):]
        if self.mode == "tool": out.append(_call(before))
        else: out += self._text(before)
        self.mode, self.strip = tags[tag], tags[tag] == "content"
        continue
      if self.mode == "tool": return out  # a call is parsed whole, at its closing tag
      keep = max((k for t in tags for k in range(1, len(t)) if self.buf.endswith(t[:k])), default=0)
      out += self._text(self.buf[:len(self.buf) - keep])
      self.buf = self.buf[len(self.buf) - keep:]
      return out

  def route(self, piece: str, final: bool = False) -> Iterator[tuple[str, str]]:
    """tinygrad's face of feed (and finish, when final): (field, text) pairs, the field "reasoning_content" or
    "content", or "tool_calls" with the call as JSON."""
    for r in self.feed(piece) + (self.finish() if final else []):
      if r.kind == "tool_call": yield "tool_calls", json.dumps(r.call)
      else: yield ("reasoning_content" if r.kind == "reasoning" else "content"), r.text

  def finish(self) -> list[Routed]:
    """What is left when the answer ends: an unclosed tool call is what the model wrote, as content."""
    rest, self.buf = self.buf, ""
    if self.mode == "tool": return [Routed("content", TOOL + rest)]
    return self._text(rest)

  def _text(self, text: str) -> list[Routed]:
    if self.strip and self.mode == "content":
      text = text.lstrip("\n")
      self.strip = not text
    return [Routed(self.mode, text)] if text else []


def _call(body: str) -> Routed:
  """A tool call's JSON as OpenAI's function call (arguments as a JSON string); what does not parse as one stays text."""
  try: obj: Any = json.loads(body)
  except ValueError: obj = None
  if not isinstance(obj, dict) or not isinstance(obj.get("name"), str): return Routed("content", TOOL + body + END_TOOL)
  args = obj.get("arguments", obj.get("parameters", {}))
  return Routed("tool_call", call={"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})
