"""A stand-in OpenAI-compatible server on 127.0.0.1 (http.server in a thread).

It streams ``/v1/chat/completions`` as server-sent events in chunked HTTP/1.1 the way vLLM
(``reasoning_content`` deltas, a role-only first delta, a usage-only last event) and
llama-server (``reasoning`` field, usage on the finishing event) do, and can be told to
die mid-stream, stall, fail every chat with an HTTP error until told otherwise
(``fail_status``), answer 401, ask for HTTP Basic auth, redirect, omit usage, lack
``/v1/models``, ignore ``stream``, or refuse non-OpenAI sampling options. Every request's
path, headers and JSON body is kept.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fixtures.http_server import QuietHTTPServer

EXTRA_OPTIONS = ("top_k", "min_p", "repetition_penalty")


@dataclass
class StubConfig:
    models: list[str] | None = field(default_factory=lambda: ["stub-model"])  # None: 404
    max_model_len: int | None = 4096
    api_key: str | None = None  # required bearer key; None: anything goes
    login: tuple[str, str] | None = None  # required HTTP Basic user and password
    # (path prefix, replacement, status): a request under the prefix is redirected there
    redirect: tuple[str, str, int] | None = None
    tokens: list[str] = field(default_factory=lambda: ["Hello", ",", " world", "!"])
    reasoning: list[str] = field(default_factory=list)
    style: str = "vllm"  # or "llamacpp"
    delay: float = 0.0  # seconds between events
    die_after: int | None = None  # close the socket after this many answer tokens
    stall_after: int | None = None  # stop sending (keep the socket open) after this many
    usage: bool = True
    streaming: bool = True  # False: answer with one JSON body whatever "stream" says
    refuse_extras: bool = False  # 400 when top_k / min_p / repetition_penalty are sent
    finish_reason: str = "stop"
    stop_reason: str | None = None
    tokenize: bool = False  # serve vLLM's POST /tokenize
    #: answer every chat completion with this HTTP error status (None: answer it)
    fail_status: int | None = None
    #: OpenAI tool calls ({"id", "name", "arguments"}) to answer with, streamed as deltas
    #: (the arguments in two pieces), unless the last message is a tool result
    tool_calls: list[dict] = field(default_factory=list)


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class OpenAIStub:
    def __init__(self, config: StubConfig | None = None) -> None:
        self.config = config or StubConfig()
        self.requests: list[Received] = []
        self.closing = threading.Event()
        stub = self

        class Handler(_Handler):
            owner = stub

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/v1"

    @property
    def chats(self) -> list[Any]:
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    def start(self) -> OpenAIStub:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: OpenAIStub

    def log_message(self, *args: object) -> None:
        pass

    # plumbing -----------------------------------------------------------------------------

    def _record(self, body: Any) -> None:
        self.owner.requests.append(
            Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                     body))

    def _json(self, status: int, data: Any) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _redirected(self) -> bool:
        rule = self.owner.config.redirect
        if rule is None or not self.path.startswith(rule[0]):
            return False
        self.send_response(rule[2])
        self.send_header("Location", rule[1] + self.path[len(rule[0]):])
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def _authorized(self) -> bool:
        key, login = self.owner.config.api_key, self.owner.config.login
        sent = self.headers.get("Authorization")
        if login is not None:
            basic = base64.b64encode(":".join(login).encode()).decode()
            if sent == f"Basic {basic}":
                return True
        elif key is None or sent == f"Bearer {key}":
            return True
        self._json(401, {"error": {"message": "Invalid API key", "type": "auth_error"}})
        return False

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, data: Any) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        self._chunk(f"data: {text}\n\n".encode())
        if self.owner.config.delay:
            time.sleep(self.owner.config.delay)

    # routes -------------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._record(None)
        if self._redirected() or not self._authorized():
            return
        config = self.owner.config
        if self.path == "/v1/models" and config.models is not None:
            data = [{"id": m, "object": "model", "owned_by": "stub",
                     **({"max_model_len": config.max_model_len} if config.max_model_len else {})}
                    for m in config.models]
            self._json(200, {"object": "list", "data": data})
            return
        self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"null")
        self._record(body)
        if self._redirected() or not self._authorized():
            return
        config = self.owner.config
        if self.path == "/tokenize" and config.tokenize:
            words = sum(len(m["content"].split()) + 3 for m in body.get("messages", []))
            self._json(200, {"count": words, "tokens": list(range(words)), "max_model_len": 4096})
            return
        if self.path != "/v1/chat/completions":
            self._json(404, {"detail": "Not Found"})
            return
        if config.models is not None and body.get("model") not in config.models:
            self._json(404, {"error": {"message": f"The model `{body.get('model')}` does "
                                                  "not exist."}})
            return
        if config.fail_status is not None:
            self._json(config.fail_status, {"error": {
                "message": "The model is overloaded, try again later.", "type": "server_error"}})
            return
        if config.refuse_extras and any(k in body for k in EXTRA_OPTIONS):
            self._json(400, {"error": {"message": "Unrecognized request argument supplied"}})
            return
        if body.get("stream") and config.streaming:
            self._stream(body)
        else:
            self._whole(body)

    def _usage(self, body: dict) -> dict:
        prompt = sum(len((m["content"] or "").split()) for m in body["messages"])
        done = len(self.owner.config.tokens) + len(self.owner.config.reasoning)
        return {"prompt_tokens": prompt, "completion_tokens": done,
                "total_tokens": prompt + done}

    def _whole(self, body: dict) -> None:
        config = self.owner.config
        message: dict[str, Any] = {"role": "assistant", "content": "".join(config.tokens)}
        if config.reasoning:
            message["reasoning_content"] = "".join(config.reasoning)
        data: dict[str, Any] = {
            "id": "cmpl-1", "object": "chat.completion", "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": config.finish_reason}],
        }
        if config.usage:
            data["usage"] = self._usage(body)
        self._json(200, data)

    def _stream(self, body: dict) -> None:
        config = self.owner.config
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        reasoning_key = "reasoning_content" if config.style == "vllm" else "reasoning"

        def event(delta: dict, finish: str | None = None, **extra: Any) -> dict:
            choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
            return {"id": "cmpl-1", "object": "chat.completion.chunk", "model": body["model"],
                    "choices": [choice]}

        if config.style == "vllm":
            self._event(event({"role": "assistant", "content": ""}))
        for piece in config.reasoning:
            self._event(event({reasoning_key: piece}))
        messages = body.get("messages") or [{}]
        if config.tool_calls and messages[-1].get("role") != "tool":
            for index, call in enumerate(config.tool_calls):
                half = len(call["arguments"]) // 2
                self._event(event({"tool_calls": [{
                    "index": index, "id": call["id"], "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"][:half]}}]}))
                self._event(event({"tool_calls": [{
                    "index": index, "function": {"arguments": call["arguments"][half:]}}]}))
            self._event(event({}, "tool_calls"))
            self._event("[DONE]")
            self._chunk(b"")
            return
        for sent, piece in enumerate(config.tokens):
            if config.die_after is not None and sent >= config.die_after:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)  # the server died: no last chunk, no [DONE]
                return
            if config.stall_after is not None and sent >= config.stall_after:
                self.owner.closing.wait(30)
                return
            self._event(event({"content": piece}))
        wants_usage = (body.get("stream_options") or {}).get("include_usage")
        last = event({}, config.finish_reason,
                     **({"stop_reason": config.stop_reason} if config.style == "vllm" else {}))
        if config.usage and config.style == "llamacpp":
            last["usage"] = self._usage(body)
        self._event(last)
        if config.usage and config.style == "vllm" and wants_usage:
            self._event({"id": "cmpl-1", "object": "chat.completion.chunk", "choices": [],
                         "usage": self._usage(body)})
        self._event("[DONE]")
        self._chunk(b"")
