"""Reasoning and tool calls routed out of a chat model's text (llm/routing.py): every way the stream can split the
tags gives the same answer, and the server puts them in OpenAI's fields (`reasoning_content`, `tool_calls`, finish
reason "tool_calls"), whole and streamed, read back through the `openai` client."""
import json
import os
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyhybrid.llm.routing import StreamRouter
from tinyhybrid.llm.runner import Delta

ANSWER = ('<think>\nThe user wants the weather; <b>call</b> the tool.\n</think>\n\nLet me check <that>.'
          '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "°C"}}\n</tool_call>')


def _route(pieces: list[str], **kw) -> tuple[str, str, list[dict]]:
  r, out = StreamRouter(**kw), []
  for p in pieces: out += r.feed(p)
  out += r.finish()
  assert all(p.text or p.call for p in out)  # no empty pieces reach the client
  return ("".join(p.text for p in out if p.kind == "reasoning"), "".join(p.text for p in out if p.kind == "content"),
          [p.call for p in out if p.kind == "tool_call"])


WHOLE = ("\nThe user wants the weather; <b>call</b> the tool.\n", "Let me check <that>.",
         [{"name": "get_weather", "arguments": json.dumps({"city": "Paris", "unit": "°C"}, ensure_ascii=False)}])


def test_whole_and_character_by_character():
  assert _route([ANSWER]) == WHOLE
  assert _route(list(ANSWER)) == WHOLE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, len(ANSWER)), max_size=12))
def test_any_split_gives_the_same_answer(cuts):
  cuts = sorted(set(cuts))
  assert _route([ANSWER[a:b] for a, b in zip([0, *cuts], [*cuts, len(ANSWER)])]) == WHOLE


def test_prompt_that_opened_the_block_and_tags_the_model_lacks():
  assert _route(["I should greet.</think>\n\nHi!"], thinking=True) == ("I should greet.", "Hi!", [])
  assert _route(["<think>x</think>y"], think=False) == ("", "<think>x</think>y", [])
  assert _route(['<tool_call>{"name": "f"}</tool_call>'], tools=False) == ("", '<tool_call>{"name": "f"}</tool_call>', [])


def test_calls_that_do_not_parse_stay_text():
  assert _route(["a<tool_call>not json</tool_call>b"]) == ("", "a<tool_call>not json</tool_call>b", [])
  assert _route(['<tool_call>{"arguments": {}}</tool_call>']) == ("", '<tool_call>{"arguments": {}}</tool_call>', [])
  assert _route(['a<tool_call>{"name": "f", "argu']) == ("", 'a<tool_call>{"name": "f", "argu', [])  # cut off by the length limit
  # arguments already a string, and two calls in a row
  two = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>\n<tool_call>{"name": "g", "parameters": {"y": [2]}}</tool_call>'
  assert _route([two]) == ("", "", [{"name": "f", "arguments": '{"x": 1}'}, {"name": "g", "arguments": '{"y": [2]}'}])


# ** through the server **

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
  from llm_models import write_tiny_chat

  from tinyhybrid.llm.runner import LLM
  from tinyhybrid.llm.serve import LLMServer
  from tinyhybrid.llm.template import ChatTemplate
  llm = LLM.load(write_tiny_chat(tmp_path_factory.mktemp("routing") / "chat.gguf", 512))
  seen = []
  def stream(ids, params, max_tokens, stop, usage):  # the model's answer, as the tokenizer's stream cuts it
    seen.append(llm.tok.decode(ids))
    for i in range(0, len(ANSWER), 7): yield Delta(ANSWER[i:i + 7])
    yield Delta("", "stop")
  llm.stream, llm.template = stream, ChatTemplate(TOOLS_TEMPLATE, llm.tok)
  for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>"): llm.tok.token_to_id.setdefault(tag, -1)  # a vocabulary that has them
  srv = LLMServer(("127.0.0.1", 0), llm, log=False)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield openai.OpenAI(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", api_key="none", max_retries=0, timeout=60), seen, llm
  srv.shutdown()
  srv.server_close()


# ChatML with the tools in a system turn, as Qwen's templates put them
TOOLS_TEMPLATE = ("{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
                  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "the weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def test_server_answer_whole(client):
  c, seen, _ = client
  r = c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=TOOLS)
  choice = choice_ = r.choices[0]
  assert choice.finish_reason == "tool_calls" and choice.message.content == WHOLE[1]
  assert choice_.message.model_extra["reasoning_content"] == WHOLE[0]
  (call,) = choice.message.tool_calls
  assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
  assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "°C"}
  assert "get_weather" in seen[-1]  # the tools reached the template


def test_server_answer_streamed(client):
  c, _, _ = client
  reasoning, content, calls, finish = "", "", {}, None
  for ch in c.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS, stream=True):
    d = ch.choices[0].delta
    reasoning += (d.model_extra or {}).get("reasoning_content") or ""
    content += d.content or ""
    for tc in d.tool_calls or []: calls[tc.index] = (tc.function.name, tc.function.arguments)
    finish = ch.choices[0].finish_reason or finish
  assert (reasoning, content, finish) == (WHOLE[0], WHOLE[1], "tool_calls")
  assert calls == {0: ("get_weather", WHOLE[2][0]["arguments"])}


def test_server_refuses_tools_that_are_not_a_list(client):
  c, _, _ = client
  with pytest.raises(openai.BadRequestError, match="tools"):
    c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], tools={"a": 1})  # type: ignore[arg-type]


def test_a_prompt_that_opens_the_block_starts_the_answer_as_reasoning(client):
  _, _, llm = client
  assert llm.router("<|im_start|>assistant\n<think>\n").mode == "reasoning" and llm.router("<|im_start|>assistant\n").mode == "content"
