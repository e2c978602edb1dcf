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
from dataclasses import replace
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.engine.types import GenerationChunk
from app.errors import ContextOverflowError, HearthError, TemplateError
from app.remote.errors import RemoteError
from app.server import responses
from app.server.admission import Admission, RequestRecord, Ticket
from app.server.choices import run_choices, unwrap
from app.server.config import ServerConfig
from app.server.cors import ALLOWED_HEADERS, ApiCors
from app.server.embeddings import EmbeddingService, embeddings
from app.server.errors import ApiError, EngineUnavailableError, bad_request, model_not_found
from app.server.executor import EngineExecutor
from app.server.guard import LOOPBACK_NAMES, HostGuard, bracketed, is_json
from app.server.jobs import (
    Channel,
    Done,
    ServerConversations,
    Started,
    cache_partition,
    finish_reason,
    run_chat,
    run_completion,
    usage,
)
from app.server.lingering import discard_rest, read_out
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
                                                     *config.allowed_hosts},
                limit=config.max_body_bytes))
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
        # a path with a stray slash is a 404, never a redirect: Starlette builds a redirect's
        # Location from the request's Host header, which a LAN bind does not check
        self.app.router.redirect_slashes = False

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
        ready = served is not None or bool(await run_in_threadpool(self.executor.models))
        return JSONResponse({"status": "ok" if ready else "no_model",
                             "model": served.id if served is not None else None})

    async def list_models(self, request: Request) -> Response:
        """Every model a request may name: the loaded one first, then the others the
        executor can load (``hearth serve``: the library, or the remote engine's)."""
        self._authorize(request)
        data = [responses.model_object(m) for m in await run_in_threadpool(
            self.executor.models)]
        if self.embedder is not None:
            data.append(self.embedder.model_object())
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> Response:
        self._authorize(request)
        wanted = request.path_params["model_id"]
        if self.embedder is not None and self.embedder.id == wanted:
            return JSONResponse(self.embedder.model_object())
        found = next((m for m in await run_in_threadpool(self.executor.models)
                      if m.id == wanted), None)
        if found is None:
            raise model_not_found(wanted)
        return JSONResponse(responses.model_object(found))

    async def chat_completions(self, request: Request) -> Response:
        key = self._authorize(request)
        req = parse_chat(await self._read_json(request), max_messages=self.config.max_messages)
        await self._check_model(req.model)
        partition = cache_partition(key, req.cache_salt)
        jobs = [partial(run_chat, replace(req, sampling=req.sampling.for_choice(i)),
                        self._conversations, partition) for i in range(req.n)]
        return await self._run(request, "chat", jobs, stream=req.stream,
                               include_usage=req.include_usage, model=req.model,
                               logprobs=req.sampling.logprobs is not None)

    async def completions(self, request: Request) -> Response:
        key = self._authorize(request)
        req = parse_completion(await self._read_json(request))
        await self._check_model(req.model)
        partition = cache_partition(key, req.cache_salt)
        jobs = [partial(run_completion, replace(req, sampling=req.sampling.for_choice(i)),
                        self._conversations, partition) for i in range(req.n)]
        return await self._run(request, "completion", jobs,
                               stream=req.stream, include_usage=req.include_usage,
                               model=req.model, logprobs=req.sampling.logprobs is not None)

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

    async def _check_model(self, requested: str) -> None:
        """404 before queueing a request for a model this server cannot serve; the loaded
        one needs no look-up. The executor checks again when the job runs."""
        served = self.executor.served_model()
        if served is not None and served.id == requested:
            return
        available = await run_in_threadpool(self.executor.models)
        if not available:
            raise ApiError(503, "No model is loaded in Hearth right now.", type="server_error",
                           code="model_not_loaded", headers={"Retry-After": "10"})
        if all(m.id != requested for m in available):
            raise model_not_found(requested)

    async def _read_json(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        content_type = request.headers.get("content-type", "")
        if not is_json(content_type):  # a form or text/plain POST: maybe a cross-site page
            await read_out(request, limit)  # so that the client reads the 415 (lingering.py)
            raise ApiError(415, f"The request body must be sent as 'Content-Type: "
                           f"application/json', not {content_type[:100]!r}.",
                           code="unsupported_media_type", headers=_UNREAD_BODY)
        length = request.headers.get("content-length", "")
        too_big = ApiError(413, f"The request body is larger than this server's limit of "
                           f"{limit} bytes.", code="request_too_large", headers=_UNREAD_BODY)
        if length.isdigit() and int(length) > limit:
            await read_out(request, limit)  # so that the client reads the 413
            raise too_big
        parts, size = [], 0
        stream = request.stream()
        try:
            async for part in stream:
                size += len(part)
                if size > limit:
                    await discard_rest(stream, size, limit)  # it is being sent: read it out
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

    async def _run(self, request: Request, endpoint: str, jobs: list[Callable[..., None]], *,
                   stream: bool, include_usage: bool, model: str,
                   logprobs: bool = False) -> Response:
        """Run ``jobs`` (one per choice, one after another) as one admitted request."""
        job = jobs[0] if len(jobs) == 1 else partial(run_choices, jobs)
        ticket = self.admission.enter(endpoint)
        channel = Channel(asyncio.get_running_loop())
        with self._lock:
            self._channels.add(channel)
        future = self.executor.submit(partial(job, channel), model)
        future.add_done_callback(partial(self._job_done, ticket, channel))
        try:
            first = await _unless_disconnected(request, _first(channel), channel)
            if first is None or (isinstance(first, Done) and first.error is None):
                return Response(status_code=499)  # the client is gone
            if isinstance(first, Done):
                raise api_error_for(first.error)
            assert isinstance(first, Started)
            reply = _Reply(endpoint, model, include_usage, n=len(jobs), logprobs=logprobs)
            if stream:
                return _ChannelStream(channel, self._events(reply, channel),
                                      media_type="text/event-stream",
                                      headers={"Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
            result = await _unless_disconnected(request, _collect(channel, reply), channel)
            if result is None:
                return Response(status_code=499)
            return JSONResponse(result)
        except BaseException:
            channel.cancel.set()
            raise

    async def _events(self, reply: _Reply, channel: Channel) -> AsyncIterator[bytes]:
        try:
            yield b"".join(responses.sse(e) for e in reply.opening())
            while True:
                events = []
                done = None
                for tagged in await channel.get_all():
                    index, item = unwrap(tagged)
                    if isinstance(item, Done):
                        done = item
                    elif isinstance(item, GenerationChunk):
                        if item.finish_reason == "cancelled" and self.admission.draining:
                            # cut short by the server stopping: say so, never a normal end
                            item = GenerationChunk(item.text, reasoning=item.reasoning)
                            events.extend(responses.sse(e) for e in reply.chunk(item, index))
                            events.append(responses.sse(SHUTTING_DOWN.body()))
                            continue
                        events.extend(responses.sse(e) for e in reply.chunk(item, index))
                        if reply.done:
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


class _Choice:
    """What one choice has sent so far."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list = []  # whole replies: the calls; streamed: counted in .streamed
        self.streamed = 0  # tool calls streamed so far
        self.logprobs: list[GenerationChunk] = []  # chunks whose log-probabilities wait
        self.offset = 0  # completions: where the next token's text starts
        self.final: GenerationChunk | None = None


class _Reply:
    """Builds one reply's OpenAI objects (chat or completion, whole or streamed, ``n``
    choices; ``logprobs``: whether the request asked for them)."""

    def __init__(self, endpoint: str, model: str, include_usage: bool, *, n: int = 1,
                 logprobs: bool = False) -> None:
        self.chat = endpoint == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.logprobs = logprobs
        self.choices = [_Choice() for _ in range(n)]

    @property
    def done(self) -> bool:
        """Whether every choice has ended."""
        return all(c.final is not None for c in self.choices)

    def opening(self) -> list[dict[str, Any]]:
        if self.chat:
            return [responses.chat_chunk(self.id, self.created, self.model,
                                         {"role": "assistant", "content": ""},
                                         with_usage_field=self.include_usage, index=i)
                    for i in range(len(self.choices))]
        return [responses.completion(self.id, self.created, self.model, "", None, None,
                                     with_usage_field=self.include_usage, index=i)
                for i in range(len(self.choices))]

    def add(self, chunk: GenerationChunk, index: int) -> None:
        """Keep ``chunk`` of choice ``index`` for the whole reply."""
        choice = self.choices[index]
        choice.text.append(chunk.text)
        choice.reasoning.append(chunk.reasoning)
        choice.calls.extend(chunk.tool_calls)
        if self.logprobs and chunk.logprob is not None:
            choice.logprobs.append(chunk)
        if chunk.finish_reason is not None:
            choice.final = chunk

    def chunk(self, chunk: GenerationChunk, index: int = 0) -> list[dict[str, Any]]:
        """The stream events of ``chunk`` of choice ``index``."""
        choice = self.choices[index]
        if self.logprobs and chunk.logprob is not None:
            choice.logprobs.append(chunk)  # sent with the next piece that goes out
        events = []
        final = chunk.finish_reason is not None
        if chunk.text or chunk.reasoning:
            events.append(self._piece(index, chunk.text, chunk.reasoning, None))
        if chunk.tool_calls and self.chat:
            calls = responses.call_ids(list(chunk.tool_calls),
                                       self.id + str(index) + str(choice.streamed))
            delta = {"tool_calls": [responses.tool_call(c, choice.streamed + i)
                                    for i, c in enumerate(calls)]}
            choice.streamed += len(calls)
            events.append(responses.chat_chunk(self.id, self.created, self.model, delta,
                                               with_usage_field=self.include_usage,
                                               index=index))
        if final:
            choice.final = chunk
            events.append(self._piece(index, "", "", finish_reason(chunk.finish_reason,
                                                                   choice.streamed > 0)))
            if self.include_usage and self.done:
                events.append(self._usage_only(self._usage()))
        return events

    def whole(self) -> dict[str, Any]:
        """The whole reply, from what ``add`` kept."""
        bodies = []
        for index, choice in enumerate(self.choices):
            final = choice.final
            suffix = "" if len(self.choices) == 1 else f"{index}_"
            calls = responses.call_ids(choice.calls, self.id + suffix) if self.chat else []
            reason = finish_reason(final.finish_reason if final else None, bool(calls))
            text = "".join(choice.text)
            if self.chat:
                bodies.append(responses.chat_choice(index, text, "".join(choice.reasoning),
                                                    reason, calls, self._chat_logprobs(choice)))
            else:
                bodies.append(responses.completion_choice(index, text, reason,
                                                          self._completion_logprobs(choice)))
        if self.chat:
            return responses.chat_completion(self.id, self.created, self.model, bodies,
                                             self._usage())
        return responses.completions(self.id, self.created, self.model, bodies, self._usage())

    def _usage(self) -> dict[str, Any]:
        """Usage over every choice: the prompt once, the completions summed."""
        uses = [usage(c.final.stats if c.final else None) for c in self.choices]
        use = uses[0]
        completion = sum(u["completion_tokens"] for u in uses)
        return {**use, "completion_tokens": completion,
                "total_tokens": use["prompt_tokens"] + completion}

    def _chat_logprobs(self, choice: _Choice) -> list[dict[str, Any]] | None:
        if not self.logprobs:
            return None
        entries = [responses.chat_logprob(c) for c in choice.logprobs]
        choice.logprobs = []
        return entries

    def _completion_logprobs(self, choice: _Choice) -> dict[str, Any] | None:
        if not self.logprobs:
            return None
        body = responses.completion_logprobs(choice.logprobs, choice.offset)
        choice.offset += sum(len(c.logprob_token) for c in choice.logprobs)
        choice.logprobs = []
        return body

    def _piece(self, index: int, text: str, reasoning: str,
               finish: str | None) -> dict[str, Any]:
        choice = self.choices[index]
        if self.chat:
            delta = responses.chat_delta(text, reasoning) if finish is None else {}
            return responses.chat_chunk(self.id, self.created, self.model, delta, finish,
                                        with_usage_field=self.include_usage, index=index,
                                        logprobs=self._chat_logprobs(choice))
        return responses.completion(self.id, self.created, self.model, text, finish, None,
                                    with_usage_field=self.include_usage, index=index,
                                    logprobs=self._completion_logprobs(choice))

    def _usage_only(self, use: dict[str, Any]) -> dict[str, Any]:
        if self.chat:
            return responses.chat_chunk(self.id, self.created, self.model, None, usage=use,
                                        with_usage_field=True)
        return responses.completion(self.id, self.created, self.model, None, None, use)


async def _first(channel: Channel) -> Any:
    """The first item: ``Started`` or ``Done`` (any chunks after it stay queued)."""
    return (await channel.get_all(limit=1))[0]


async def _collect(channel: Channel, reply: _Reply) -> dict[str, Any]:
    """The whole reply, once every choice has ended."""
    while True:
        for tagged in await channel.get_all():
            index, item = unwrap(tagged)
            if isinstance(item, Done):
                if item.error is not None:
                    raise api_error_for(item.error)
                return reply.whole()
            if isinstance(item, GenerationChunk):
                reply.add(item, index)


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
    if isinstance(error, RemoteError):  # the engine behind a gateway
        return _remote_error(error)
    if isinstance(error, HearthError):
        return ApiError(500, str(error), type="server_error")
    log.error("a server job failed", exc_info=error)
    return ApiError(500, f"The server failed with an internal error: {error}",
                    type="server_error")


def _remote_error(error: RemoteError) -> ApiError:
    """A remote engine's refusal of the request itself (400, 404, 413, 422) is passed on with
    its status; anything else (it is down, its key is wrong, it broke off) is a 502."""
    if error.status in (400, 404, 413, 422):
        return ApiError(error.status, str(error), code="remote_refused")
    if error.kind == "offline":
        return ApiError(503, str(error), type="server_error", code="offline")
    return ApiError(502, str(error), type="server_error", code="remote_engine_failed")


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
