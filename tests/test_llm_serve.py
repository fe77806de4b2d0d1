"""The OpenAI-compatible server and the CLI, on a tiny llama with a trained byte-level BPE and llama 3's chat template:
the `openai` client lists the model, completes a chat whole and streamed (the SSE chunks parse, and the streamed text
is the whole one), completes text; malformed requests get HTTP 400 with OpenAI's error body and the server goes on;
concurrent requests each get the answer they would alone. The CLI answers a prompt, chats on stdin, benchmarks, and
refuses a prompt longer than the context."""
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
pytest.importorskip("jinja2")
openai = pytest.importorskip("openai")
from llm_models import write_tiny_chat  # noqa: E402

from tinyhybrid.llm import cli  # noqa: E402
from tinyhybrid.llm.runner import LLM  # noqa: E402
from tinyhybrid.llm.serve import LLMServer  # noqa: E402

CTX = 160


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
  path = write_tiny_chat(tmp_path_factory.mktemp("serve") / "chat.gguf", CTX)
  return path


@pytest.fixture(scope="module")
def server(model_path):
  srv = LLMServer(("127.0.0.1", 0), LLM.load(model_path), log=False)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
  srv.shutdown()
  srv.server_close()


@pytest.fixture(scope="module")
def client(server):
  return openai.OpenAI(base_url=server[1] + "/v1", api_key="none", max_retries=0, timeout=120)


def post(url: str, body: bytes | dict, path: str = "/v1/chat/completions") -> tuple[int, dict]:
  data = body if isinstance(body, bytes) else json.dumps(body).encode()
  req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=120) as r: return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e: return e.code, json.loads(e.read())


HI = [{"role": "user", "content": "Hello, who are you?"}]


def test_models_and_chat(client, server):
  assert [m.id for m in client.models.list().data] == ["tiny-chat"]
  r = client.chat.completions.create(model="tiny-chat", messages=HI, max_tokens=12, temperature=0)
  assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
  assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 12
  llm = server[0].llm
  ids = llm.chat_ids(HI)
  assert r.usage.prompt_tokens == len(ids)
  # the answer is the model's greedy continuation of the chat template's prompt
  want = [t for t in llm.model.generate(ids, max_new=r.usage.completion_tokens)]
  assert r.choices[0].message.content == llm.tok.decode([t for t in want if not llm.tok.is_end(t)])


def test_stream_parses_and_matches(client):
  whole = client.chat.completions.create(model="m", messages=HI, max_tokens=20, temperature=0)
  stream = client.chat.completions.create(model="m", messages=HI, max_tokens=20, temperature=0, stream=True,
                                          stream_options={"include_usage": True})
  chunks = list(stream)
  assert all(c.object == "chat.completion.chunk" for c in chunks)
  assert chunks[0].choices[0].delta.role == "assistant"
  text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
  assert text == whole.choices[0].message.content
  finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
  assert finishes == [whole.choices[0].finish_reason]
  assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_raw_stream_ends_with_done(server):
  req = urllib.request.Request(server[1] + "/v1/chat/completions", headers={"Content-Type": "application/json"},
                               data=json.dumps({"messages": HI, "stream": True, "max_tokens": 4, "temperature": 0}).encode())
  with urllib.request.urlopen(req, timeout=120) as r:
    assert r.headers["Content-Type"] == "text/event-stream"
    events = [ln for ln in r.read().decode().split("\n\n") if ln]
  assert events[-1] == "data: [DONE]" and all(e.startswith("data: ") for e in events)
  for e in events[:-1]: assert json.loads(e[6:])["object"] == "chat.completion.chunk"


def test_completions(client, server):
  r = client.completions.create(model="m", prompt="Once upon a time", max_tokens=8, temperature=0)
  assert r.object == "text_completion" and r.usage.completion_tokens <= 8
  streamed = "".join(c.choices[0].text for c in client.completions.create(model="m", prompt="Once upon a time", max_tokens=8,
                                                                             temperature=0, stream=True))
  assert streamed == r.choices[0].text
  # the default length is OpenAI's 16 tokens
  status, body = post(server[1], {"prompt": "Once", "temperature": 0}, "/v1/completions")
  assert status == 200 and body["usage"]["completion_tokens"] <= 16


def test_stop_strings_and_seeds(client):
  base = client.chat.completions.create(model="m", messages=HI, max_tokens=20, temperature=0).choices[0].message.content
  if len(base) > 6:
    stop = base[3:6]
    cut = client.chat.completions.create(model="m", messages=HI, max_tokens=20, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == base[:base.index(stop)] and cut.choices[0].finish_reason == "stop"
  sample = lambda seed: client.chat.completions.create(model="m", messages=HI, max_tokens=10, temperature=1.0, seed=seed).choices[0].message.content  # noqa: E731
  assert sample(11) == sample(11)


@pytest.mark.parametrize("body,param", [
  (b"{not json", None), (b"[1, 2]", None), ({"messages": "hi"}, "messages"), ({"messages": []}, "messages"),
  ({"messages": [{"content": "no role"}]}, "messages[0]"), ({"messages": HI, "temperature": "hot"}, "temperature"),
  ({"messages": HI, "max_tokens": 0}, "max_tokens"), ({"messages": HI, "n": 2}, "n"), ({"messages": HI, "stop": [1]}, "stop"),
  ({"messages": HI, "top_p": 2}, "top_p"), ({"messages": HI, "stream": "yes"}, "stream"),
])
def test_malformed_requests_get_400(server, client, body, param):
  status, err = post(server[1], body)
  assert status == 400 and set(err["error"]) == {"message", "type", "param", "code"}
  assert err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param
  assert client.chat.completions.create(model="m", messages=HI, max_tokens=2, temperature=0).choices  # still serving


def test_errors_through_the_client(client, server):
  with pytest.raises(openai.BadRequestError) as e:
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "word " * CTX}])
  assert e.value.body["code"] == "context_length_exceeded" and str(CTX) in e.value.body["message"]
  with pytest.raises(openai.BadRequestError): client.completions.create(model="m", prompt=["a", "b"])
  status, err = post(server[1], {"messages": HI}, "/v1/nothing")
  assert status == 404 and "nothing" in err["error"]["message"]


def test_concurrent_requests_are_queued(client):
  prompts = [[{"role": "user", "content": f"Tell me about number {i}"}] for i in range(4)]
  alone = [client.chat.completions.create(model="m", messages=p, max_tokens=10, temperature=0).choices[0].message.content for p in prompts]
  with ThreadPoolExecutor(4) as ex:
    together = list(ex.map(lambda p: client.chat.completions.create(model="m", messages=p, max_tokens=10, temperature=0).choices[0].message.content,
                           prompts * 2))
  assert together == alone * 2


def test_chat_page_and_assets(server):
  page = urllib.request.urlopen(server[1] + "/", timeout=30).read().decode()
  assert "<title>tinyhybrid chat</title>" in page and 'src="/markdown.js"' in page and "/v1/chat/completions" in page
  js = urllib.request.urlopen(server[1] + "/markdown.js", timeout=30).read().decode()
  assert "renderMarkdown" in js
  with pytest.raises(urllib.error.HTTPError): urllib.request.urlopen(server[1] + "/../serve.py", timeout=30)


# ** the CLI **

def test_cli_prompt_chat_and_benchmark(model_path, capsys, monkeypatch):
  assert cli.main(["--model", model_path, "--prompt", "Hi", "--max_tokens", "6"]) == 0
  out = capsys.readouterr()
  assert "tiny-chat" in out.err and out.out.endswith("\n")
  monkeypatch.setattr("sys.stdin", __import__("io").StringIO("Hello\nAgain\n"))
  assert cli.main(["--model", model_path, "--max_tokens", "4"]) == 0
  assert capsys.readouterr().out.count(">>> ") == 3
  assert cli.main(["--model", model_path, "--benchmark", "3", "--max_context", "64"]) == 0
  out = capsys.readouterr().out
  assert "prefill:" in out and "decode:" in out and "tok/s" in out


def test_cli_refuses_long_prompts_and_bad_files(model_path, capsys, tmp_path):
  assert cli.main(["--model", model_path, "--prompt", "word " * 200, "--max_context", "64"]) == 1
  assert "64" in capsys.readouterr().err
  (bad := tmp_path / "bad.gguf").write_bytes(b"GGUF" + bytes(20))
  assert cli.main(["--model", str(bad)]) == 1
  assert "bad.gguf" in capsys.readouterr().err


def test_python_dash_m(model_path):
  r = subprocess.run([sys.executable, "-m", "tinyhybrid.llm", "--model", model_path, "--prompt", "Hi", "--max_tokens", "3", "--raw"],
                     capture_output=True, text=True, timeout=300, env={**os.environ, "SKBUILD_EDITABLE_VERBOSE": "0"})
  assert r.returncode == 0 and "tiny-chat" in r.stderr, r.stderr
