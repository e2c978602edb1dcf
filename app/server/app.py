"""The OpenAI-compatible HTTP API as a Starlette app over an ``EngineExecutor``.

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``, ``POST /v1/chat/completions``,
``POST /v1/completions``. Every request's Host is checked first on a loopback bind
(``guard.py``). Each generation request is checked (API key, JSON content type, body size,
JSON, fields, model id) before it is admitted to the bounded queue, then handed to the engine's
thread as a job; its chunks come back through a ``Channel``. A client that disconnects —
while waiting or mid-stream — sets the job's cancel event, so the engine stops within a step.
Errors use OpenAI's JSON shape with its status codes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.types import GenerationChunk
from app.errors import ContextOverflowError, HearthError, TemplateError
from app.server import responses
from app.server.admission import Admission, RequestRecord, Ticket
from app.server.config import ServerConfig
from app.server.cors import ALLOWED_HEADERS, ApiCors
from app.server.embeddings import EmbeddingService, embeddings
from app.server.errors import ApiError, EngineUnavailableError, bad_request
from app.server.executor import EngineExecutor
from app.server.guard import LOOPBACK_NAMES, HostGuard, bracketed, is_json
from app.server.jobs import (
    Channel,
    Done,
    ServerConversations,
    Started,
    cache_partition,
    finish_reason,
    model_not_found,
    run_chat,
    run_completion,
    usage,
)
from app.server.schema import parse_chat, parse_completion
from app.text import clean_value

log = logging.getLogger(__name__)
_TOO_DEEP = "The request body nests objects or lists too deeply."
_UNREAD_BODY = {"Connection": "close"}  # the body was not read: the connection cannot go on


class HearthApi:
    """The app (``.app``), its admission (queue, counts, records) and its live requests."""

    def __init__(self, executor: EngineExecutor, config: ServerConfig,
                 embedder: EmbeddingService | None = None) -> None:
        self.executor = executor
        self.config = config
        self.embedder = embedder  # POST /v1/embeddings (app/server/embeddings.py)
        self.admission = Admission(config.queue)
        self._channels: set[Channel] = set()
        self._conversations = ServerConversations()  # touched on the engine thread only
        self._lock = threading.Lock()
        middleware = []
        if config.checks_host:  # outermost: a rebinding page gets nothing, not even CORS
            middleware.append(Middleware(
                HostGuard, allowed=LOOPBACK_NAMES | {bracketed(config.host),
                                                     *config.allowed_hosts}))
        if config.cors_origins:
            # any origin scheme may be listed (an editor's app://…); the openai JS SDK sends
            # x-stainless-* headers on every request, so its preflight names them
            middleware.append(Middleware(
                ApiCors, allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"], allow_headers=list(ALLOWED_HEADERS)))
        api = [
            ("/models", self.list_models, "GET"),
            ("/models/{model_id:path}", self.get_model, "GET"),
            ("/chat/completions", self.chat_completions, "POST"),
            ("/completions", self.completions, "POST"),
            ("/embeddings", self.embeddings, "POST"),
        ]
        self.app = Starlette(
            routes=[Route("/health", self.health, methods=["GET"])] + [
                Route(prefix + path, endpoint, methods=[method])
                for prefix in ("/v1", "") for path, endpoint, method in api],
            middleware=middleware,
            exception_handlers={ApiError: _api_error, HTTPException: _http_error,
                                Exception: _internal_error},
        )

    def cancel_all(self) -> None:
        """Stop every generation in flight (the server is stopping)."""
        with self._lock:
            channels = list(self._channels)
        for channel in channels:
            channel.cancel.set()

    # -- routes ----------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        """Liveness, without a key (llama.cpp's server and vLLM answer it the same way)."""
        served = self.executor.served_model()
        return JSONResponse({"status": "ok" if served is not None else "no_model",
                             "model": served.id if served is not None else None})

    async def list_models(self, request: Request) -> Response:
        self._authorize(request)
        served = self.executor.served_model()
        data = [responses.model_object(served)] if served is not None else []
        if self.embedder is not None:
            data.append(self.embedder.model_object())
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> Response:
        self._authorize(request)
        served = self.executor.served_model()
        wanted = request.path_params["model_id"]
        if self.embedder is not None and self.embedder.id == wanted:
            return JSONResponse(self.embedder.model_object())
        if served is None or served.id != wanted:
            raise model_not_found(wanted)
        return JSONResponse(responses.model_object(served))

    async def chat_completions(self, request: Request) -> Response:
        key = self._authorize(request)
        req = parse_chat(await self._read_json(request), max_messages=self.config.max_messages)
        self._check_model(req.model)
        job = partial(run_chat, req, self._conversations, cache_partition(key, req.cache_salt))
        return await self._run(request, "chat", job, stream=req.stream,
                               include_usage=req.include_usage, model=req.model)

    async def completions(self, request: Request) -> Response:
        key = self._authorize(request)
        req = parse_completion(await self._read_json(request))
        self._check_model(req.model)
        job = partial(run_completion, req, self._conversations,
                      cache_partition(key, req.cache_salt))
        return await self._run(request, "completion", job,
                               stream=req.stream, include_usage=req.include_usage,
                               model=req.model)

    async def embeddings(self, request: Request) -> Response:
        self._authorize(request)
        return JSONResponse(await embeddings(self.embedder, await self._read_json(request)))

    # -- checks ----------------------------------------------------------------------------

    def _authorize(self, request: Request) -> int:
        """The index of the key the request sent in ``config.api_keys`` (-1: none is
        needed); raises 401 when it sent none of them."""
        keys = self.config.api_keys
        if not keys:
            return -1
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        sent = token.strip().encode("latin-1", "replace")  # the header's own bytes
        matches = [hmac.compare_digest(sent, key.strip().encode("utf-8")) for key in keys]
        if scheme.lower() != "bearer" or not any(matches):
            raise ApiError(401, "Incorrect API key provided. Send the key the server was "
                           "started with as 'Authorization: Bearer KEY'.",
                           code="invalid_api_key")
        return matches.index(True)

    def _check_model(self, requested: str) -> None:
        served = self.executor.served_model()
        if served is None:
            raise ApiError(503, "No model is loaded in Hearth right now.", type="server_error",
                           code="model_not_loaded", headers={"Retry-After": "10"})
        if served.id != requested:
            raise model_not_found(requested)

    async def _read_json(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "")
        if not is_json(content_type):  # a form or text/plain POST: maybe a cross-site page
            raise ApiError(415, f"The request body must be sent as 'Content-Type: "
                           f"application/json', not {content_type[:100]!r}.",
                           code="unsupported_media_type", headers=_UNREAD_BODY)
        limit = self.config.max_body_bytes
        length = request.headers.get("content-length", "")
        too_big = ApiError(413, f"The request body is larger than this server's limit of "
                           f"{limit} bytes.", code="request_too_large", headers=_UNREAD_BODY)
        if length.isdigit() and int(length) > limit:
            raise too_big
        parts, size = [], 0
        try:
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise too_big
                parts.append(part)
        except ClientDisconnect:  # it left, or sent its body too slowly (connections.py)
            raise ApiError(499, "The client closed the connection before sending its "
                           "request.", code="client_closed_request") from None
        try:
            body = json.loads(b"".join(parts))
        except json.JSONDecodeError as exc:
            raise bad_request(f"The request body is not valid JSON: {exc.msg} (line "
                              f"{exc.lineno}, column {exc.colno}).") from None
        except UnicodeDecodeError:
            raise bad_request("The request body is not UTF-8 text.") from None
        except ValueError as exc:  # an integer of thousands of digits
            raise bad_request(f"The request body holds a number this server cannot read: "
                              f"{exc}.") from None
        except RecursionError:
            raise bad_request(_TOO_DEEP) from None
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object.")
        try:
            return clean_value(body)
        except RecursionError:
            raise bad_request(_TOO_DEEP) from None

    # -- running a job ---------------------------------------------------------------------

    async def _run(self, request: Request, endpoint: str, job: Callable[..., None], *,
                   stream: bool, include_usage: bool, model: str) -> Response:
        ticket = self.admission.enter(endpoint)
        channel = Channel(asyncio.get_running_loop())
        with self._lock:
            self._channels.add(channel)
        future = self.executor.submit(partial(job, channel))
        future.add_done_callback(partial(self._job_done, ticket, channel))
        try:
            first = await _unless_disconnected(request, _first(channel), channel)
            if first is None or (isinstance(first, Done) and first.error is None):
                return Response(status_code=499)  # the client is gone
            if isinstance(first, Done):
                raise api_error_for(first.error)
            assert isinstance(first, Started)
            reply = _Reply(endpoint, model, include_usage)
            if stream:
                return _ChannelStream(channel, self._events(reply, channel),
                                      media_type="text/event-stream",
                                      headers={"Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
            result = await _unless_disconnected(request, _collect(channel), channel)
            if result is None:
                return Response(status_code=499)
            return JSONResponse(reply.whole(*result))
        except BaseException:
            channel.cancel.set()
            raise

    async def _events(self, reply: _Reply, channel: Channel) -> AsyncIterator[bytes]:
        try:
            yield responses.sse(reply.opening())
            while True:
                events = []
                done = None
                for item in await channel.get_all():
                    if isinstance(item, Done):
                        done = item
                    elif isinstance(item, GenerationChunk):
                        if item.finish_reason == "cancelled" and self.admission.draining:
                            # cut short by the server stopping: say so, never a normal end
                            item = GenerationChunk(item.text, reasoning=item.reasoning)
                            events.extend(responses.sse(e) for e in reply.chunk(item))
                            events.append(responses.sse(SHUTTING_DOWN.body()))
                            continue
                        events.extend(responses.sse(e) for e in reply.chunk(item))
                        if item.finish_reason is not None:
                            events.append(responses.sse("[DONE]"))
                if done is not None and done.error is not None:
                    events.append(responses.sse(api_error_for(done.error).body()))
                if events:
                    yield b"".join(events)
                if done is not None:
                    return
        finally:
            channel.cancel.set()  # normal end: no effect; disconnect: the engine stops

    def _job_done(self, ticket: Ticket, channel: Channel, future: Future) -> None:
        with self._lock:
            self._channels.discard(channel)
        error = future.exception()
        self.admission.leave(ticket, _record(ticket, channel, error))
        channel.finish(error)


class _ChannelStream(StreamingResponse):
    """A streamed reply whose generation is cancelled however the response ends (the
    client left, or was dropped for reading nothing: ``connections.py``)."""

    def __init__(self, channel: Channel, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channel = channel

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.channel.cancel.set()


SHUTTING_DOWN = ApiError(
    503, "The server is shutting down, so this reply was cut short.", type="server_error",
    code="server_shutting_down",
)


class _Reply:
    """Builds one reply's OpenAI objects (chat or completion, whole or streamed)."""

    def __init__(self, endpoint: str, model: str, include_usage: bool) -> None:
        self.chat = endpoint == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.calls = 0  # tool calls streamed so far

    def opening(self) -> dict[str, Any]:
        if self.chat:
            return responses.chat_chunk(self.id, self.created, self.model,
                                        {"role": "assistant", "content": ""},
                                        with_usage_field=self.include_usage)
        return responses.completion(self.id, self.created, self.model, "", None, None,
                                    with_usage_field=self.include_usage)

    def chunk(self, chunk: GenerationChunk) -> list[dict[str, Any]]:
        events = []
        final = chunk.finish_reason is not None
        if chunk.text or chunk.reasoning:
            events.append(self._piece(chunk.text, chunk.reasoning, None))
        if chunk.tool_calls and self.chat:
            calls = responses.call_ids(list(chunk.tool_calls), self.id + str(self.calls))
            delta = {"tool_calls": [responses.tool_call(c, self.calls + i)
                                    for i, c in enumerate(calls)]}
            self.calls += len(calls)
            events.append(responses.chat_chunk(self.id, self.created, self.model, delta,
                                               with_usage_field=self.include_usage))
        if final:
            events.append(self._piece("", "", finish_reason(chunk.finish_reason,
                                                            self.calls > 0)))
            if self.include_usage:
                events.append(self._usage_only(usage(chunk.stats)))
        return events

    def whole(self, text: str, reasoning: str, final: GenerationChunk | None,
              calls: list | None = None) -> dict[str, Any]:
        calls = responses.call_ids(calls or [], self.id)
        reason = finish_reason(final.finish_reason if final else None, bool(calls))
        use = usage(final.stats if final else None)
        if self.chat:
            return responses.chat_completion(self.id, self.created, self.model, text,
                                             reasoning, reason, use, calls)
        return responses.completion(self.id, self.created, self.model, text, reason, use)

    def _piece(self, text: str, reasoning: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            delta = responses.chat_delta(text, reasoning) if finish is None else {}
            return responses.chat_chunk(self.id, self.created, self.model, delta, finish,
                                        with_usage_field=self.include_usage)
        return responses.completion(self.id, self.created, self.model, text, finish, None,
                                    with_usage_field=self.include_usage)

    def _usage_only(self, use: dict[str, Any]) -> dict[str, Any]:
        if self.chat:
            return responses.chat_chunk(self.id, self.created, self.model, None, usage=use,
                                        with_usage_field=True)
        return responses.completion(self.id, self.created, self.model, None, None, use)


async def _first(channel: Channel) -> Any:
    """The first item: ``Started`` or ``Done`` (any chunks after it stay queued)."""
    return (await channel.get_all(limit=1))[0]


async def _collect(channel: Channel) -> tuple[str, str, GenerationChunk | None, list]:
    text, reasoning, final, calls = [], [], None, []
    while True:
        for item in await channel.get_all():
            if isinstance(item, Done):
                if item.error is not None:
                    raise api_error_for(item.error)
                return "".join(text), "".join(reasoning), final, calls
            if isinstance(item, GenerationChunk):
                text.append(item.text)
                reasoning.append(item.reasoning)
                calls.extend(item.tool_calls)
                if item.finish_reason is not None:
                    final = item


async def _unless_disconnected(request: Request, awaitable: Any, channel: Channel) -> Any:
    """``await awaitable``, unless the client disconnects first: then cancel the job and
    return None."""
    work = asyncio.ensure_future(awaitable)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if work.done():
        return work.result()
    work.cancel()
    channel.cancel.set()
    return None


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _record(ticket: Ticket, channel: Channel, error: BaseException | None) -> RequestRecord:
    now = time.perf_counter()
    started = channel.started_at or now
    final = channel.final
    stats = final.stats if final is not None else None
    if error is not None:
        status = "error"
    elif final is None or final.finish_reason == "cancelled":
        status = "cancelled"
    else:
        status = "ok"
    return RequestRecord(
        endpoint=ticket.endpoint, status=status,
        finish_reason=final.finish_reason if final is not None else None,
        queued_ms=(started - ticket.entered_at) * 1000, total_ms=(now - ticket.entered_at) * 1000,
        prompt_tokens=stats.prompt_tokens if stats else 0,
        completion_tokens=stats.generated_tokens if stats else 0,
        cached_tokens=stats.reused_tokens if stats else 0,
    )


def api_error_for(error: BaseException) -> ApiError:
    """The response for what a job raised."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, EngineUnavailableError):
        return ApiError(503, str(error), type="server_error", code="model_not_loaded",
                        headers={"Retry-After": "10"})
    if isinstance(error, ContextOverflowError):
        return ApiError(400, str(error), param="messages", code="context_length_exceeded")
    if isinstance(error, TemplateError):
        return ApiError(400, str(error), param="messages")
    if isinstance(error, HearthError):
        return ApiError(500, str(error), type="server_error")
    log.error("a server job failed", exc_info=error)
    return ApiError(500, f"The server failed with an internal error: {error}",
                    type="server_error")


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else None
    error = ApiError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}",
                     code=kind)
    return JSONResponse(error.body(), status_code=exc.status_code)


async def _internal_error(request: Request, exc: Exception) -> Response:
    error = api_error_for(exc)
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)
