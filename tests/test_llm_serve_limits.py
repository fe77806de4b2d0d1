"""The server against hostile or careless clients, on test_llm_serve.py's tiny llama, over raw sockets to 127.0.0.1
where urllib would hide what the server sent: an over-long body is refused with 413 unread; an idle or stalled
connection is closed after the idle timeout; out-of-range, NaN and infinite sampling numbers get 400; over-long and
NUL path components get 404; a non-streamed request whose client hung up stops generating, so the next one is served at
once; a Host header other than the loopback names gets 403 unless allowed."""
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
pytest.importorskip("tokenizers")
pytest.importorskip("transformers")
pytest.importorskip("jinja2")
from llm_models import write_tiny_chat  # noqa: E402

from tinyhybrid.llm import cli  # noqa: E402
from tinyhybrid.llm import serve as serve_mod  # noqa: E402
from tinyhybrid.llm.runner import LLM  # noqa: E402
from tinyhybrid.llm.serve import LLMServer  # noqa: E402

CTX = 160
IDLE = 1.0  # the test server's idle timeout, seconds
HI = [{"role": "user", "content": "Hello, who are you?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  path = write_tiny_chat(tmp_path_factory.mktemp("serve_limits") / "chat.gguf", CTX)
  srv = LLMServer(("127.0.0.1", 0), LLM.load(path), log=False, idle_timeout=IDLE)
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  yield srv, srv.server_address[1]
  srv.shutdown()
  srv.server_close()


def exchange(port: int, data: bytes, timeout: float = 10) -> tuple[bytes, float]:
  """Sends data and reads until the server closes the connection: what came back, and when (seconds from the send)."""
  with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
    s.sendall(data)
    st, got = time.monotonic(), []
    while c := s.recv(65536): got.append(c)
    return b"".join(got), time.monotonic() - st


def request(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None, close: bool = True) -> bytes:
  hs = {"Host": "127.0.0.1", **({"Content-Type": "application/json", "Content-Length": str(len(body))} if method == "POST" else {}),
        **({"Connection": "close"} if close else {}), **(headers or {})}
  return f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in hs.items()) + b"\r\n" + body


def parse(resp: bytes) -> tuple[int, dict]:
  head, _, body = resp.partition(b"\r\n\r\n")
  return int(head.split(b" ", 2)[1]), json.loads(body) if body.startswith(b"{") else {}


def chat(port: int, body: dict, timeout: float = 60) -> tuple[int, dict]:
  req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(req, timeout=timeout) as r: return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e: return e.code, json.loads(e.read())


def is_error(err: dict, code: str | None = None) -> bool:
  return set(err.get("error", {})) == {"message", "type", "param", "code"} and (code is None or err["error"]["code"] == code)


# ** 1: the body's size **

def test_huge_content_length_gets_413_unread(server):
  resp, dt = exchange(server[1], request("POST", "/v1/chat/completions", headers={"Content-Length": "4000000000"}, close=False))
  status, err = parse(resp)
  assert status == 413 and is_error(err, "request_too_large") and dt < 5  # answered, then closed, with no body sent
  # with Expect: 100-continue the client waits to be told to send: it is told 413 instead
  resp, _ = exchange(server[1], request("POST", "/v1/completions", headers={"Content-Length": "4000000000", "Expect": "100-continue"}, close=False))
  assert b"100 Continue" not in resp and parse(resp)[0] == 413
  # a chunked body has no length to check first: refused too, rather than read as the next request
  resp, _ = exchange(server[1], request("POST", "/v1/completions", b"5\r\nhello\r\n0\r\n\r\n", headers={"Transfer-Encoding": "chunked"}, close=False))
  assert parse(resp)[0] == 411
  assert chat(server[1], {"messages": HI, "max_tokens": 2, "temperature": 0})[0] == 200


def test_body_limit_is_overridable(server, monkeypatch):
  monkeypatch.setattr(server[0], "max_body", 1000)
  small = json.dumps({"messages": HI, "max_tokens": 2, "temperature": 0}).encode()
  big = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}], "max_tokens": 2}).encode()
  assert parse(exchange(server[1], request("POST", "/v1/chat/completions", small))[0])[0] == 200
  # the client sent the whole body: the 413 still reaches it (the server reads and drops the rest before closing)
  status, err = parse(exchange(server[1], request("POST", "/v1/chat/completions", big, close=False))[0])
  assert status == 413 and "1000" in err["error"]["message"]
  assert serve_mod.MAX_BODY >= 1 << 20


# ** 2: idle and slow clients **

def test_idle_connection_is_closed(server):
  with socket.create_connection(("127.0.0.1", server[1]), timeout=IDLE + 5) as s:
    st = time.monotonic()
    assert s.recv(100) == b"" and time.monotonic() - st < IDLE + 3  # closed, not left holding a thread
  # a kept-alive connection after its answer, and a body that stops halfway, are closed the same way
  resp, dt = exchange(server[1], request("GET", "/health", close=False), timeout=IDLE + 5)
  assert parse(resp)[0] == 200 and IDLE * 0.5 < dt < IDLE + 3
  half = request("POST", "/v1/chat/completions", headers={"Content-Length": "100"}, close=False) + b'{"messages": '
  resp, dt = exchange(server[1], half, timeout=IDLE + 5)
  assert dt < IDLE + 3 and (resp == b"" or parse(resp)[0] == 408)


def test_idle_timeout_default():
  assert 10 <= serve_mod.IDLE_TIMEOUT <= 120


# ** 3: sampling numbers **

@pytest.mark.parametrize("extra,param", [
  ('"seed": -1', "seed"), ('"seed": 18446744073709551616', "seed"), ('"temperature": 5e-324', "temperature"),
  ('"temperature": 1e999', "temperature"), ('"temperature": NaN', "temperature"), ('"repetition_penalty": 1e-300', "repetition_penalty"),
  ('"repetition_penalty": 1e300', "repetition_penalty"), ('"repetition_penalty": -Infinity', "repetition_penalty"), ('"top_p": 1e-400', "top_p"),
  ('"top_k": -1', "top_k"), ('"max_tokens": 1e999', "max_tokens"), ('"presence_penalty": 1e999', "presence_penalty"),
  ('"frequency_penalty": 3', "frequency_penalty"), ('"seed": 1' + "0" * 5000, None), ('"stop": ' + "[" * 100000, None),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_bad_numbers_get_400(server, extra, param):
  body = ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, ' + extra + "}").encode()
  status, err = parse(exchange(server[1], request("POST", "/v1/chat/completions", body))[0])
  assert status == 400 and is_error(err) and err["error"]["type"] == "invalid_request_error" and err["error"]["param"] == param, err
  if param: assert f"'{param}'" in err["error"]["message"]


def test_edge_numbers_are_served(server):
  for extra in ({"seed": 0}, {"seed": 2**64 - 1}, {"temperature": 2}, {"temperature": 1e-3}, {"repetition_penalty": 100},
                {"top_p": 1e-9, "top_k": 10**30}, {"presence_penalty": 0, "frequency_penalty": 0.0}):
    status, body = chat(server[1], {"messages": HI, "max_tokens": 2, "temperature": 1.0, **extra})
    assert status == 200 and body["choices"], (extra, body)


# ** 4: paths **

@pytest.mark.parametrize("method,path", [
  ("GET", "/" + "a" * 300), ("GET", "/static/" + "a" * 256 + "/x.js"), ("GET", "/a%00b.js"), ("GET", "/a\x00b.js"),
  ("GET", "/%2e%2e/serve.py"), ("POST", "/v1/" + "a" * 300), ("POST", "/v1/chat/completions%00"),
], ids=lambda v: ascii(v[:24]))
def test_bad_paths_get_404(server, method, path):
  status, err = parse(exchange(server[1], request(method, path, b"{}" if method == "POST" else b""))[0])
  assert status == 404 and is_error(err, "not_found")
  assert parse(exchange(server[1], request("GET", "/health"))[0])[0] == 200


# ** 5: abandoned requests **

@pytest.fixture
def slow_model(server, monkeypatch):
  """The model at a token per 50 ms that never ends a turn (an end token is swapped for another), so that a request
  without max_tokens runs to the end of the context: 6 s here. Yields the list of the tokens made."""
  llm, made = server[0].llm, []
  generate, other = llm.model.generate, next(i for i in range(llm.model.cfg.vocab_size) if not llm.tok.is_end(i))
  def slow(tokens, sample=None, max_new=None):
    for t in generate(tokens, sample=sample, max_new=max_new):
      time.sleep(0.05)
      made.append(t)
      yield other if llm.tok.is_end(t) else t
  monkeypatch.setattr(llm.model, "generate", slow)
  return made


@pytest.mark.parametrize("stream", [False, True])
def test_hung_up_request_stops_generating(server, slow_model, stream):
  body = json.dumps({"messages": HI, "temperature": 0, "stream": stream}).encode()
  with socket.create_connection(("127.0.0.1", server[1]), timeout=10) as s:
    s.sendall(request("POST", "/v1/chat/completions", body, close=False))
    time.sleep(0.5)  # generating now
  st = time.monotonic()
  status, _ = chat(server[1], {"messages": HI, "max_tokens": 2, "temperature": 0}, timeout=30)
  assert status == 200 and time.monotonic() - st < 2.5, time.monotonic() - st  # not after the first one's ~6 s
  assert len(slow_model) < 40


def test_queued_request_of_a_gone_client_is_skipped(server, slow_model):
  body = json.dumps({"messages": HI, "temperature": 0}).encode()
  first = socket.create_connection(("127.0.0.1", server[1]), timeout=10)
  first.sendall(request("POST", "/v1/chat/completions", body, close=False))
  time.sleep(0.3)
  for _ in range(3):  # queued behind the first, then gone
    with socket.create_connection(("127.0.0.1", server[1]), timeout=10) as s: s.sendall(request("POST", "/v1/chat/completions", body, close=False))
  time.sleep(0.2)
  first.close()
  st = time.monotonic()
  assert chat(server[1], {"messages": HI, "max_tokens": 2, "temperature": 0}, timeout=30)[0] == 200
  assert time.monotonic() - st < 2.5 and len(slow_model) < 40


# ** 6: the Host header **

@pytest.mark.parametrize("host,ok", [
  ("127.0.0.1", True), ("localhost:1234", True), ("LOCALHOST", True), ("[::1]:8000", True), ("[::1]", True), ("127.0.0.1:80", True),
  ("localhost.", True), ("evil.example", False), ("evil.example:80", False), ("localhost.evil.example", False), ("127.0.0.1.nip.io", False),
  ("127.0.0.1:80x", False), ("[::1]x", False), ("", False),
])
def test_host_header_is_checked(server, host, ok):
  status, err = parse(exchange(server[1], request("GET", "/v1/models", headers={"Host": host}))[0])
  assert (status == 200) if ok else (status == 403 and is_error(err, "host_not_allowed"))


def test_foreign_host_cannot_generate(server, slow_model):
  body = json.dumps({"messages": HI, "max_tokens": 4}).encode()
  status, _ = parse(exchange(server[1], request("POST", "/v1/chat/completions", body, headers={"Host": "rebind.example:8000"}))[0])
  assert status == 403 and not slow_model
  resp, _ = exchange(server[1], b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
  assert parse(resp)[0] == 403
  resp, _ = exchange(server[1], b"GET /health HTTP/1.0\r\n\r\n")  # no Host at all: not a browser, so not a rebinding page
  assert parse(resp)[0] == 200


def test_allowed_hosts(server, monkeypatch):
  ok = serve_mod.host_allowed
  assert ok("127.0.0.2:9", "127.0.0.2", ()) and ok("localhost", "127.0.0.2", ()) and not ok("evil.example", "127.0.0.2", ())
  assert ok("my.box:8000", "127.0.0.1", ("my.box",)) and ok("My.Box", "127.0.0.1", ("my.box",)) and ok("anything", "127.0.0.1", ("*",))
  assert ok("my.box", "localhost", ()) is False and ok("localhost:1", "localhost", ())
  assert ok("anything", "0.0.0.0", ()) and ok("anything", "192.168.1.5", ())  # not loopback: reachable by name anyway
  monkeypatch.setattr(server[0], "allowed_hosts", ("my.box",))
  assert parse(exchange(server[1], request("GET", "/health", headers={"Host": "my.box:8000"}))[0])[0] == 200
  assert parse(exchange(server[1], request("GET", "/health", headers={"Host": "other.box"}))[0])[0] == 403
  assert cli.parse_args(["--model", "m.gguf", "--allowed-hosts", "my.box,other.box"]).allowed_hosts == "my.box,other.box"
