"""An OpenAI-compatible HTTP server for a loaded model, and the chat page at /.

GET /v1/models; POST /v1/chat/completions (the file's chat template) and POST /v1/completions (raw text), each
answered whole or, with "stream": true, as server-sent events in OpenAI's chunk format ending with "data: [DONE]".
Requests run one at a time on one worker thread, in the order they came (the model has one KV cache); connections
are served by threads of their own, so a request waits in the queue, never on another's socket. A malformed request
gets HTTP 400 with OpenAI's error body ({"error": {"message", "type", "param", "code"}}), and the server goes on."""
from __future__ import annotations

import json
import pathlib
import queue
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

from tinyhybrid.llm.runner import LLM, ContextError, Delta, Usage
from tinyhybrid.llm.sampling import SamplingParams

STATIC = pathlib.Path(__file__).parent / "static"  # the chat page and its assets (package data: they ship in the wheel)
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


class RequestError(Exception):
  """A request the server refuses: HTTP status and OpenAI's error fields."""
  def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400, type_: str = "invalid_request_error"):
    super().__init__(message)
    self.status, self.param, self.code, self.type = status, param, code, type_

  def body(self) -> dict[str, Any]: return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


# ** reading a request **

def _field(body: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = None, check: Any = None, what: str = "") -> Any:
  v = body.get(name, default)
  if v is None: return default
  if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)): raise RequestError(f"'{name}' must be {what}", name)
  if not isinstance(v, types) or (check is not None and not check(v)): raise RequestError(f"'{name}' must be {what}, got {json.dumps(v)[:80]}", name)
  return v


def sampling_of(body: dict[str, Any]) -> tuple[SamplingParams, int | None, list[str]]:
  temperature = float(_field(body, "temperature", (int, float), 1.0, lambda x: 0 <= x <= 2, "a number from 0 to 2"))  # OpenAI's default
  top_p = float(_field(body, "top_p", (int, float), 1.0, lambda x: 0 < x <= 1, "a number in (0, 1]"))
  top_k = _field(body, "top_k", int, 0, lambda x: x >= 0, "an integer >= 0")
  rep = float(_field(body, "repetition_penalty", (int, float), 1.0, lambda x: x > 0, "a positive number"))
  seed = _field(body, "seed", int, None, None, "an integer")
  for name in ("frequency_penalty", "presence_penalty"):
    if _field(body, name, (int, float), 0, None, "a number") != 0: raise RequestError(f"'{name}' is not supported (use repetition_penalty)", name, "unsupported_parameter")
  if _field(body, "n", int, 1, None, "an integer") != 1: raise RequestError("only n=1 is supported", "n", "unsupported_parameter")
  max_tokens = _field(body, "max_completion_tokens", int, None, lambda x: x > 0, "a positive integer")
  if max_tokens is None: max_tokens = _field(body, "max_tokens", int, None, lambda x: x > 0, "a positive integer")
  stop = body.get("stop")
  if stop is None: stop = []
  elif isinstance(stop, str): stop = [stop]
  elif not (isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop)):
    raise RequestError("'stop' must be a string or a list of up to 4 strings", "stop")
  _field(body, "stream", bool, False, None, "a boolean")
  return SamplingParams(temperature, top_k, top_p, rep, seed), max_tokens, stop


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
  msgs = body.get("messages")
  if not isinstance(msgs, list) or not msgs: raise RequestError("'messages' must be a non-empty list", "messages")
  for i, m in enumerate(msgs):
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
      raise RequestError(f"messages[{i}] must be an object with a string 'role'", f"messages[{i}]")
    c = m.get("content")
    if not (c is None or isinstance(c, str) or (isinstance(c, list) and all(isinstance(p, dict) for p in c))):
      raise RequestError(f"messages[{i}].content must be a string or a list of content parts", f"messages[{i}].content")
  return msgs


# ** the work queue **

class Job:
  """One generation, run by the worker; its Deltas (then None, or an exception) go to the request's thread."""
  def __init__(self, ids: list[int], params: SamplingParams, max_tokens: int | None, stop: list[str]):
    self.ids, self.params, self.max_tokens, self.stop = ids, params, max_tokens, stop
    self.out: queue.Queue[Delta | BaseException | None] = queue.Queue()
    self.usage, self.cancelled = Usage(), False

  def results(self) -> Iterator[Delta]:
    while (d := self.out.get()) is not None:
      if isinstance(d, BaseException): raise d
      yield d


class LLMServer(ThreadingHTTPServer):
  daemon_threads = True
  allow_reuse_address = True

  def __init__(self, address: tuple[str, int], llm: LLM, log: bool = True, max_tokens: int | None = None):
    self.llm, self.log, self.max_tokens = llm, log, max_tokens  # max_tokens: the answer length when a request sets none
    self.jobs: queue.Queue[Job | None] = queue.Queue()
    super().__init__(address, Handler)
    self.worker = threading.Thread(target=self._work, name="llm-worker", daemon=True)
    self.worker.start()

  def _work(self) -> None:
    while (job := self.jobs.get()) is not None:
      try:
        for d in self.llm.stream(job.ids, job.params, job.max_tokens, job.stop, job.usage):
          if job.cancelled: break
          job.out.put(d)
      except BaseException as e: job.out.put(e)  # noqa: BLE001 (handed to the request's thread, which answers it)
      job.out.put(None)

  def submit(self, job: Job) -> Job:
    self.jobs.put(job)
    return job

  def server_close(self) -> None:
    self.jobs.put(None)
    super().server_close()


class Handler(BaseHTTPRequestHandler):
  server: LLMServer
  protocol_version = "HTTP/1.1"

  def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
    if self.server.log: sys.stderr.write(f"{self.address_string()} {format % args}\n")

  def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
    self.send_response(status)
    self.send_header("Content-Type", content_type)
    self.send_header("Content-Length", str(len(body)))
    self.end_headers()
    self.wfile.write(body)

  def _json(self, obj: Any, status: int = 200) -> None: self._send(status, json.dumps(obj).encode())

  def do_GET(self) -> None:  # noqa: N802 (http.server's name)
    path = self.path.split("?", 1)[0]
    created = int(time.time())
    if path == "/v1/models": return self._json({"object": "list", "data": [{"id": self.server.llm.name, "object": "model", "created": created, "owned_by": "tinyhybrid"}]})
    if path == "/health": return self._json({"status": "ok"})
    if path in ("/", "/index.html"): path = "/chat.html"
    f = (STATIC / path.lstrip("/")).resolve()
    if f.parent == STATIC.resolve() and f.is_file() and f.suffix in _TYPES: return self._send(200, f.read_bytes(), _TYPES[f.suffix])
    self._json(RequestError(f"no such path {path}", status=404, code="not_found").body(), 404)

  def do_POST(self) -> None:  # noqa: N802
    path = self.path.split("?", 1)[0]
    try:
      try: n = int(self.headers.get("Content-Length", "0"))
      except ValueError: raise RequestError("bad Content-Length") from None
      raw = self.rfile.read(n) if n > 0 else b""
      try: body = json.loads(raw)
      except (json.JSONDecodeError, UnicodeDecodeError) as e: raise RequestError(f"the body is not valid JSON: {e}") from None
      if not isinstance(body, dict): raise RequestError("the body must be a JSON object")
      if path == "/v1/chat/completions": return self._chat(body)
      if path == "/v1/completions": return self._completion(body)
      raise RequestError(f"no such path {path}", status=404, code="not_found")
    except RequestError as e: self._json(e.body(), e.status)
    except ContextError as e: self._json(RequestError(str(e), "messages", "context_length_exceeded").body(), 400)
    except (BrokenPipeError, ConnectionResetError): pass
    except Exception as e:  # noqa: BLE001 (a failure answers this request only; the server goes on)
      self._json(RequestError(f"internal error: {type(e).__name__}: {e}", status=500, type_="server_error").body(), 500)

  # ** the endpoints **

  def _chat(self, body: dict[str, Any]) -> None:
    msgs = _messages(body)
    params, max_tokens, stop = sampling_of(body)
    llm = self.server.llm
    try: ids = llm.chat_ids(msgs)
    except ValueError as e: raise RequestError(str(e), "messages") from None
    llm.check_fits(ids)
    job = self.server.submit(Job(ids, params, max_tokens or self.server.max_tokens, stop))
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": body.get("model") or llm.name}
    if body.get("stream"):
      include_usage = isinstance(body.get("stream_options"), dict) and bool(body["stream_options"].get("include_usage"))
      def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
      def events() -> Iterator[dict[str, Any]]:
        yield chunk({"role": "assistant", "content": ""})
        for d in job.results():
          if d.text: yield chunk({"content": d.text})
          if d.finish_reason: yield chunk({}, d.finish_reason)
        if include_usage: yield {**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(job.usage)}
      return self._stream(events(), job)
    text, finish = self._collect(job)
    self._json({**head, "object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": finish}], "usage": _usage(job.usage)})

  def _completion(self, body: dict[str, Any]) -> None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str): prompt = prompt[0]
    if not isinstance(prompt, str): raise RequestError("'prompt' must be a string", "prompt")
    params, max_tokens, stop = sampling_of(body)
    if "max_tokens" not in body and "max_completion_tokens" not in body: max_tokens = 16  # OpenAI's default for completions
    llm = self.server.llm
    ids = llm.tok.prompt(prompt)
    if not ids: raise RequestError("'prompt' has no tokens", "prompt")
    try: llm.check_fits(ids)
    except ContextError as e: raise RequestError(str(e), "prompt", "context_length_exceeded") from None
    job = self.server.submit(Job(ids, params, max_tokens, stop))
    head = {"id": f"cmpl-{uuid.uuid4().hex[:24]}", "object": "text_completion", "created": int(time.time()), "model": body.get("model") or llm.name}
    if body.get("stream"):
      def events() -> Iterator[dict[str, Any]]:
        for d in job.results():
          if d.text or d.finish_reason: yield {**head, "choices": [{"index": 0, "text": d.text, "logprobs": None, "finish_reason": d.finish_reason}]}
      return self._stream(events(), job)
    text, finish = self._collect(job)
    self._json({**head, "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}], "usage": _usage(job.usage)})

  # ** answering **

  def _collect(self, job: Job) -> tuple[str, str]:
    text, finish = [], "stop"
    for d in job.results():
      text.append(d.text)
      finish = d.finish_reason or finish
    return "".join(text), finish

  def _stream(self, events: Iterator[dict[str, Any]], job: Job) -> None:
    """Server-sent events, one JSON chunk each, then data: [DONE]. The response ends with the connection (no length)."""
    self.send_response(200)
    self.send_header("Content-Type", "text/event-stream")
    self.send_header("Cache-Control", "no-cache")
    self.send_header("Connection", "close")
    self.end_headers()
    self.close_connection = True
    try:
      for ev in events:
        self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
        self.wfile.flush()
      self.wfile.write(b"data: [DONE]\n\n")
      self.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
      job.cancelled = True  # the client left: the worker stops at its next token
      for _ in job.results(): pass
    except Exception as e:  # noqa: BLE001 (the headers are out: report it in the stream)
      try: self.wfile.write(f"data: {json.dumps(RequestError(str(e), status=500, type_='server_error').body())}\n\ndata: [DONE]\n\n".encode())
      except OSError: pass


def _usage(u: Usage) -> dict[str, int]:
  return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.prompt_tokens + u.completion_tokens}


def serve(llm: LLM, host: str = "127.0.0.1", port: int = 8000, max_tokens: int | None = None) -> None:
  server = LLMServer((host, port), llm, max_tokens=max_tokens)
  print(f"serving {llm.name} on http://{host}:{server.server_address[1]}/ (OpenAI API at /v1)", file=sys.stderr)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()
