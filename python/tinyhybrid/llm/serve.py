"""An OpenAI-compatible HTTP server for a loaded model, and the chat page at /.

GET /v1/models; POST /v1/chat/completions (the file's chat template) and POST /v1/completions (raw text), each
answered whole or, with "stream": true, as server-sent events in OpenAI's chunk format ending with "data: [DONE]".
Requests run one at a time on one worker thread, in the order they came (the model has one KV cache); connections
are served by threads of their own, so a request waits in the queue, never on another's socket. A malformed request
gets HTTP 400 with OpenAI's error body ({"error": {"message", "type", "param", "code"}}), and the server goes on.

Limits, for clients that are careless or hostile:
- a body over `max_body` bytes (MAX_BODY, 16 MiB) gets 413 before any of it is read, and the connection is closed;
- a connection that sends nothing for `idle_timeout` seconds (IDLE_TIMEOUT, 30), idle between requests or stalled in
  the middle of one, is closed, so that it does not hold its thread;
- sampling numbers must be finite and in range (temperature 0 or from MIN_TEMPERATURE to 2, repetition_penalty from
  0.01 to 100, seed from 0 to 2**64 - 1, ...), else 400; a path component no file system takes (NUL, over 255 bytes)
  is a 404;
- a request whose client hung up stops generating at its next token (or never starts, if it was waiting in the
  queue), whether streamed or not: the worker checks the socket for EOF between tokens. A client that half-closes its
  socket after sending the request looks the same, so it is not served (HTTP clients do not do that);
- bound to a loopback address (the default 127.0.0.1), the server answers only requests whose Host header names it:
  localhost, 127.0.0.1, [::1] or the address it was given, with any port, so that a web page whose own name an
  attacker re-points at 127.0.0.1 (DNS rebinding) cannot use it from the victim's browser. Other names get 403; allow
  them with `allowed_hosts` (the CLI's --allowed-hosts NAME[,NAME...], "*" for any). Bound to another address (e.g.
  0.0.0.0) the server is reachable by any name anyway, and Host is not checked."""
from __future__ import annotations

import ipaddress
import json
import math
import pathlib
import queue
import re
import select
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterable, Iterator

from tinyhybrid.llm.runner import LLM, ContextError, Delta, Usage
from tinyhybrid.llm.routing import Routed, StreamRouter  # noqa: F401 (StreamRouter: tinygrad's import path)
from tinyhybrid.llm.sampling import SamplingParams

STATIC = pathlib.Path(__file__).parent / "static"  # the chat page and its assets (package data: they ship in the wheel)
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

MAX_BODY = 16 << 20  # bytes; chats with long histories fit many times over, and the whole body is held in memory
IDLE_TIMEOUT = 30.0  # seconds without a byte from the client before its connection is closed
LINGER = 2.0         # seconds to drop an unread body after refusing it, so that the refusal is not lost to a reset
# logits / 5e-324 (a denormal) overflows to inf, and inf - inf makes the probabilities NaN; 1e-5 is far from that, and
# already as good as greedy (a logit ahead by 1e-3 is e**100 times likelier)
MIN_TEMPERATURE = 1e-5
REPETITION_PENALTY = (0.01, 100.0)  # logits / 1e-300 overflow float32; any real use is well inside this range
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_GONE = (ConnectionError, TimeoutError)  # the client left or stalled: nobody to answer


class RequestError(Exception):
  """A request the server refuses: HTTP status and OpenAI's error fields."""
  def __init__(self, message: str, param: str | None = None, code: str | None = None, status: int = 400, type_: str = "invalid_request_error",
               close: bool = False):
    super().__init__(message)
    self.status, self.param, self.code, self.type = status, param, code, type_
    self.close = close  # answered before the body was read: the connection cannot carry another request

  def body(self) -> dict[str, Any]: return {"error": {"message": str(self), "type": self.type, "param": self.param, "code": self.code}}


class ClientGone(Exception):
  """The client hung up while its answer was made: there is no one to send it to."""


# ** reading a request **

def _field(body: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = None, check: Any = None, what: str = "") -> Any:
  v = body.get(name, default)
  if v is None: return default
  if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)): raise RequestError(f"'{name}' must be {what}", name)
  # json.loads takes NaN, Infinity and 1e999 (inf); every comparison with NaN is False, so check before the range
  if isinstance(v, float) and not math.isfinite(v): raise RequestError(f"'{name}' must be {what}, got {v}", name)
  if not isinstance(v, types) or (check is not None and not check(v)): raise RequestError(f"'{name}' must be {what}, got {json.dumps(v)[:80]}", name)
  return v


def sampling_of(body: dict[str, Any]) -> tuple[SamplingParams, int | None, list[str]]:
  temperature = float(_field(body, "temperature", (int, float), 1.0, lambda x: x == 0 or MIN_TEMPERATURE <= x <= 2,  # 1: OpenAI's default
                             f"0 (greedy) or a number from {MIN_TEMPERATURE:g} to 2"))
  top_p = float(_field(body, "top_p", (int, float), 1.0, lambda x: 0 < x <= 1, "a number in (0, 1]"))
  top_k = _field(body, "top_k", int, 0, lambda x: x >= 0, "an integer >= 0")
  lo, hi = REPETITION_PENALTY
  rep = float(_field(body, "repetition_penalty", (int, float), 1.0, lambda x: lo <= x <= hi, f"a number from {lo:g} to {hi:g}"))
  seed = _field(body, "seed", int, None, lambda x: 0 <= x < 1 << 64, "an integer from 0 to 2**64 - 1")  # numpy's generator refuses < 0
  for name in ("frequency_penalty", "presence_penalty"):
    if _field(body, name, (int, float), 0, lambda x: -2 <= x <= 2, "a number from -2 to 2") != 0:
      raise RequestError(f"'{name}' is not supported (use repetition_penalty)", name, "unsupported_parameter")
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

def _hung_up(sock: socket.socket) -> bool:
  """Whether the peer has closed the connection (EOF or a reset), found without blocking and without taking what it
  sent: readable, and a peek reads nothing. A pipelined next request is readable too, but peeks as data."""
  try:
    if hasattr(select, "poll"):  # select.select cannot take a descriptor over FD_SETSIZE (1024)
      p = select.poll()
      p.register(sock, select.POLLIN)
      readable = bool(p.poll(0))
    else: readable = bool(select.select([sock], [], [], 0)[0])
    return readable and not sock.recv(1, socket.MSG_PEEK)  # readable, so this returns at once despite the socket's timeout
  except (OSError, ValueError): return True  # reset, or closed already (fileno -1)


class Job:
  """One generation, run by the worker; its Deltas (then None, or an exception) go to the request's thread. peer: the
  client's socket, which the worker checks between tokens, to stop when nobody waits for the answer any more."""
  def __init__(self, ids: list[int], params: SamplingParams, max_tokens: int | None, stop: list[str], peer: socket.socket | None = None):
    self.ids, self.params, self.max_tokens, self.stop, self.peer = ids, params, max_tokens, stop, peer
    self.out: queue.Queue[Delta | BaseException | None] = queue.Queue()
    self.usage, self.cancelled, self.done = Usage(), False, False  # done: the worker's final None was taken

  def gone(self) -> bool:
    if not self.cancelled and self.peer is not None and _hung_up(self.peer): self.cancelled = True
    return self.cancelled

  def _next(self) -> Delta | BaseException | None:
    if self.done: return None  # taking again after the None would wait forever
    d = self.out.get()
    self.done = d is None
    return d

  def results(self) -> Iterator[Delta]:
    while (d := self._next()) is not None:
      if isinstance(d, BaseException): raise d
      yield d

  def drain(self) -> None:
    """Stops the generation (the worker sees it at its next token) and waits for the worker to let go of it."""
    self.cancelled = True
    while self._next() is not None: pass


class LLMServer(ThreadingHTTPServer):
  daemon_threads = True
  allow_reuse_address = True

  def __init__(self, address: tuple[str, int], llm: LLM, log: bool = True, max_tokens: int | None = None, max_body: int = MAX_BODY,
               idle_timeout: float | None = IDLE_TIMEOUT, allowed_hosts: Iterable[str] = ()):
    self.llm, self.log, self.max_tokens = llm, log, max_tokens  # max_tokens: the answer length when a request sets none
    # idle_timeout None: no timeout. allowed_hosts: Host names answered besides the loopback ones ("*": any)
    self.max_body, self.idle_timeout, self.allowed_hosts = max_body, idle_timeout, tuple(allowed_hosts)
    self.jobs: queue.Queue[Job | None] = queue.Queue()
    super().__init__(address, Handler)
    self.bound = address[0]
    try: self.loopback = ipaddress.ip_address(str(self.server_address[0])).is_loopback  # a name given as the host, resolved
    except ValueError: self.loopback = False
    self.worker = threading.Thread(target=self._work, name="llm-worker", daemon=True)
    self.worker.start()

  def host_ok(self, host: str) -> bool:
    return host_allowed(host, self.bound, (*self.allowed_hosts, str(self.server_address[0])), self.loopback)

  def _work(self) -> None:
    while (job := self.jobs.get()) is not None:
      try:
        if not job.gone():  # its client left while it waited in the queue: skip the prefill too
          for d in self.llm.stream(job.ids, job.params, job.max_tokens, job.stop, job.usage):
            if job.gone(): break
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

  def setup(self) -> None:
    super().setup()
    # every read and write on the socket waits at most this long: an idle keep-alive connection, a stalled request or
    # a client that stopped reading its stream ends (http.server closes on the TimeoutError), and frees its thread
    self.connection.settimeout(self.server.idle_timeout)

  def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
    if self.server.log: sys.stderr.write(f"{self.address_string()} {format % args}\n")

  def _send(self, status: int, body: bytes, content_type: str = "application/json", close: bool = False) -> None:
    self.send_response(status)
    self.send_header("Content-Type", content_type)
    self.send_header("Content-Length", str(len(body)))
    if close: self.send_header("Connection", "close")  # http.server then ends the connection after this answer
    self.end_headers()
    self.wfile.write(body)

  def _json(self, obj: Any, status: int = 200) -> None: self._send(status, json.dumps(obj).encode())

  def _error(self, e: RequestError) -> None:
    self._send(e.status, json.dumps(e.body()).encode(), close=e.close)
    if e.close and ("Content-Length" in self.headers or "Transfer-Encoding" in self.headers): self._linger()

  def _linger(self) -> None:
    """After an answer with the body unread: closing with unread bytes makes the kernel reset the connection, and a
    reset can discard the answer before the client reads it. So half-close, then drop what comes for a moment."""
    try:
      self.connection.shutdown(socket.SHUT_WR)
      self.connection.settimeout(LINGER)
      end = time.monotonic() + LINGER
      while time.monotonic() < end and self.connection.recv(1 << 16): pass
    except OSError: pass

  # ** checks before the body **

  def _check_host(self) -> None:
    hosts = self.headers.get_all("Host") or []
    if len(hosts) > 1 or (hosts and not self.server.host_ok(hosts[0])):
      raise RequestError(f"this server does not answer to the host {', '.join(hosts)[:100]!r}: it is bound to {self.server.bound}, "
                         "and answers to localhost, 127.0.0.1 and [::1] (start it with --allowed-hosts to add names)",
                         status=403, code="host_not_allowed", type_="permission_error", close=True)

  def _length(self) -> int:
    """The body's size from Content-Length, refused (unread) when too big: before reading, so a claim of 4 GB costs nothing."""
    if "Transfer-Encoding" in self.headers: raise RequestError("chunked request bodies are not supported: send Content-Length", status=411, code="length_required", close=True)
    lengths = {v.strip() for v in self.headers.get_all("Content-Length") or []}
    if len(lengths) > 1 or not all(re.fullmatch(r"[0-9]{1,20}", v) for v in lengths): raise RequestError("bad Content-Length", close=True)
    n = int(lengths.pop()) if lengths else 0
    if n > self.server.max_body:
      raise RequestError(f"the request body has {n} bytes, more than this server's limit of {self.server.max_body}", status=413, code="request_too_large", close=True)
    return n

  def handle_expect_100(self) -> bool:
    # a client that asks before sending the body is told no before it sends it
    try:
      self._check_host()
      if self.command == "POST": self._length()
    except RequestError as e:
      self._error(e)
      return False
    return super().handle_expect_100()

  def _path(self) -> str:
    """The request's path, %-decoded; one that names no file (a NUL, or a component over 255 bytes) is a 404 here, not
    an OSError from the file system."""
    path = urllib.parse.unquote(self.path.split("?", 1)[0].split("#", 1)[0], errors="replace")
    if "\x00" in path or any(len(c.encode()) > 255 for c in path.split("/")):
      raise RequestError(f"no such path {path[:100]!r}", status=404, code="not_found")
    return path

  def do_GET(self) -> None:  # noqa: N802 (http.server's name)
    try:
      self._check_host()
      path = self._path()
      created = int(time.time())
      if path == "/v1/models": return self._json({"object": "list", "data": [{"id": self.server.llm.name, "object": "model", "created": created, "owned_by": "tinyhybrid"}]})
      if path == "/health": return self._json({"status": "ok"})
      if path in ("/", "/index.html"): path = "/chat.html"
      try:
        f = (STATIC / path.lstrip("/")).resolve()
        if f.parent == STATIC.resolve() and f.is_file() and f.suffix in _TYPES: return self._send(200, f.read_bytes(), _TYPES[f.suffix])
      except (OSError, ValueError): pass  # a name the file system refuses is no file of ours
      raise RequestError(f"no such path {path}", status=404, code="not_found")
    except RequestError as e: self._error(e)
    except _GONE: self.close_connection = True

  def do_POST(self) -> None:  # noqa: N802
    try:
      self._check_host()
      n = self._length()
      raw = self.rfile.read(n) if n > 0 else b""
      if len(raw) < n: raise ClientGone()  # EOF in the middle of the body
      path = self._path()
      # ValueError: also undecodable UTF-8, and integers over 4300 digits; RecursionError: arrays nested too deep
      try: body = json.loads(raw)
      except (ValueError, RecursionError) as e: raise RequestError(f"the body is not valid JSON: {str(e)[:200]}") from None
      if not isinstance(body, dict): raise RequestError("the body must be a JSON object")
      if path == "/v1/chat/completions": return self._chat(body)
      if path == "/v1/completions": return self._completion(body)
      raise RequestError(f"no such path {path}", status=404, code="not_found")
    except RequestError as e: self._error(e)
    except ContextError as e: self._json(RequestError(str(e), "messages", "context_length_exceeded").body(), 400)
    except (*_GONE, ClientGone): self.close_connection = True
    except Exception as e:  # noqa: BLE001 (a failure answers this request only; the server goes on)
      self._json(RequestError(f"internal error: {type(e).__name__}: {e}", status=500, type_="server_error").body(), 500)

  # ** the endpoints **

  def _chat(self, body: dict[str, Any]) -> None:
    msgs = _messages(body)
    params, max_tokens, stop = sampling_of(body)
    tools = _field(body, "tools", list, None, lambda t: all(isinstance(x, dict) for x in t), "a list of tool objects")
    llm = self.server.llm
    try: prompt = llm.chat_prompt(msgs, tools=tools)
    except ValueError as e: raise RequestError(str(e), "messages") from None
    llm.check_fits(ids := llm.tok.encode(prompt))
    job, router = self.server.submit(Job(ids, params, max_tokens or self.server.max_tokens, stop, self.connection)), llm.router(prompt)
    head = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "created": int(time.time()), "model": body.get("model") or llm.name}
    if body.get("stream"):
      include_usage = isinstance(body.get("stream_options"), dict) and bool(body["stream_options"].get("include_usage"))
      def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
      def events() -> Iterator[dict[str, Any]]:
        yield chunk({"role": "assistant", "content": ""})
        calls = 0
        for d in job.results():
          for piece in router.feed(d.text) + (router.finish() if d.finish_reason else []):
            yield chunk(_delta(piece, calls))
            calls += piece.kind == "tool_call"
          if d.finish_reason: yield chunk({}, "tool_calls" if calls and d.finish_reason == "stop" else d.finish_reason)
        if include_usage: yield {**head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(job.usage)}
      return self._stream(events(), job)
    text, finish = self._collect(job)
    pieces = router.feed(text) + router.finish()
    message: dict[str, Any] = {"role": "assistant", "content": "".join(p.text for p in pieces if p.kind == "content")}
    if reasoning := "".join(p.text for p in pieces if p.kind == "reasoning"): message["reasoning_content"] = reasoning
    if calls := [_tool_call(p) for p in pieces if p.kind == "tool_call"]:
      message["tool_calls"] = calls
      message["content"] = message["content"] or None  # OpenAI's: an answer that only calls tools has no content
      if finish == "stop": finish = "tool_calls"
    self._json({**head, "object": "chat.completion", "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": _usage(job.usage)})

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
    job = self.server.submit(Job(ids, params, max_tokens, stop, self.connection))
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
    if job.cancelled: raise ClientGone()  # what was made is a cut-off answer, and nobody to take it
    return "".join(text), finish

  def _stream(self, events: Iterator[dict[str, Any]], job: Job) -> None:
    """Server-sent events, one JSON chunk each, then data: [DONE]. The response ends with the connection (no length)."""
    self.close_connection = True
    try:
      self.send_response(200)
      self.send_header("Content-Type", "text/event-stream")
      self.send_header("Cache-Control", "no-cache")
      self.send_header("Connection", "close")
      self.end_headers()
      for ev in events:
        self.wfile.write(f"data: {json.dumps(ev)}\n\n".encode())
        self.wfile.flush()
      if not job.cancelled: self.wfile.write(b"data: [DONE]\n\n")
      self.wfile.flush()
    except _GONE: job.drain()  # the client left, or stopped reading for the idle timeout: the worker stops at its next token
    except Exception as e:  # noqa: BLE001 (the headers are out: report it in the stream)
      try: self.wfile.write(f"data: {json.dumps(RequestError(str(e), status=500, type_='server_error').body())}\n\ndata: [DONE]\n\n".encode())
      except OSError: pass
      job.drain()


def _tool_call(p: Routed) -> dict[str, Any]: return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": p.call}


def _delta(p: Routed, index: int) -> dict[str, Any]:
  """A streamed chunk's delta for a piece of the answer (index: the tool call's place among the answer's calls)."""
  if p.kind == "tool_call": return {"tool_calls": [{"index": index, **_tool_call(p)}]}
  return {"reasoning_content" if p.kind == "reasoning" else "content": p.text}


def _usage(u: Usage) -> dict[str, int]:
  return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens, "total_tokens": u.prompt_tokens + u.completion_tokens}


def _host_name(host: str) -> str | None:
  """The name in a Host header or an --allowed-hosts entry: lower case, without the port or a trailing dot, an IPv6
  address in brackets ([::1]); None for one that is malformed."""
  h = host.strip().lower()
  if h.count(":") > 1 and not h.startswith("["): h = f"[{h}]"  # a bare IPv6 address (bound to ::1, or allowed)
  if h.startswith("["): end = h.find("]") + 1  # [::1]:8000
  else: end = h.find(":") if ":" in h else len(h)
  name, port = h[:end], h[end:]
  if not end or not re.fullmatch(r"(:[0-9]*)?", port): return None
  return name[:-1] if name.endswith(".") else name


def host_allowed(host: str, bound: str, allowed: Iterable[str] = (), loopback: bool | None = None) -> bool:
  """Whether a server bound to address `bound` answers a request with this Host header: any when it is not bound to a
  loopback address (loopback None: when `bound` is no loopback address nor localhost), else only the loopback names,
  `bound` itself and the names `allowed` ("*": any), with any port."""
  allowed = tuple(allowed)
  if loopback is None:
    try: loopback = ipaddress.ip_address(bound).is_loopback
    except ValueError: loopback = bound.strip().lower() == "localhost"
  if not loopback or any(a.strip() == "*" for a in allowed): return True
  return (name := _host_name(host)) is not None and name in {*LOOPBACK_NAMES, _host_name(bound), *map(_host_name, allowed)}


def serve(llm: LLM, host: str = "127.0.0.1", port: int = 8000, max_tokens: int | None = None, allowed_hosts: Iterable[str] = ()) -> None:
  server = LLMServer((host, port), llm, max_tokens=max_tokens, allowed_hosts=allowed_hosts)
  print(f"serving {llm.name} on http://{host}:{server.server_address[1]}/ (OpenAI API at /v1)", file=sys.stderr)
  try: server.serve_forever()
  except KeyboardInterrupt: pass
  finally: server.server_close()
