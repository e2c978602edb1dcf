"""What runs on the engine's thread for one request: a chat or a completion, streamed into
a ``Channel`` that the HTTP side (asyncio) reads.

The channel is bounded by credits: the engine waits (checking the cancel event) when the
reader has not taken the last ``credits`` chunks, so a slow client cannot make it buffer a
whole reply, and a client that left stops the engine within a step.

Prefix reuse across stateless requests: a chat runs over the server conversation whose KV
cache shares the longest token prefix with the new prompt (``ConversationCaches.best_prefix``),
so a client that resends the whole conversation each turn prefills only the new turn. A
cache is taken over only by a request that continues it (shares at least half of what it
holds): two clients that share just a system prompt keep a cache each. The conversations of
the desktop window (in the same bounded cache set) are never taken over.

Cached prefixes are shared only within a *partition*: the same API key and the same
``cache_salt`` (vLLM's request field). Otherwise ``cached_tokens`` would tell a client how
much of its prompt another client sent before (a system prompt's secret, a digit at a time).
Raw completions run over the engine's own single cache, reused only by the next raw
completion of the same partition.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from app.chat.backend import Backend
from app.engine.types import GenerationChunk, GenerationSettings, GenerationStats
from app.errors import PromptError
from app.remote.reply import estimate_tokens
from app.server.errors import (
    ApiError,
    EngineUnavailableError,
    context_exceeded,
)
from app.server.schema import ChatRequest, CompletionRequest, Sampling

SERVER_CONVERSATION_PREFIX = "server-"
DEFAULT_CREDITS = 32


@dataclass(frozen=True)
class Started:
    """The job began generating (sent before the first chunk)."""

    prompt_tokens: int


@dataclass(frozen=True)
class Done:
    """The job ended; ``error`` is what it raised (None: it finished)."""

    error: BaseException | None


class Channel:
    """Engine thread → event loop, with backpressure and a cancel event for the engine.

    Items wait in a buffer; the event loop is woken once per batch, not once per token (a
    wake-up is a context switch, which costs more than a tiny model's decode step)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, credits: int = DEFAULT_CREDITS):
        self.cancel = threading.Event()
        self.started_at: float | None = None  # perf_counter when the engine took the job
        self.final: GenerationChunk | None = None  # the engine's last chunk (finish + stats)
        self._loop = loop
        self._buffer: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._wake_pending = False
        self._ready = asyncio.Event()
        self._credits = threading.Semaphore(credits)

    # -- engine thread ---------------------------------------------------------------------

    def send(self, item: Any) -> bool:
        """Queue ``item`` for the reader; False (dropped) once the request is cancelled."""
        while not self._credits.acquire(timeout=0.05):
            if self.cancel.is_set():
                return False
        return self._push(item)

    def finish(self, error: BaseException | None) -> None:
        self._push(Done(error))

    def _push(self, item: Any) -> bool:
        with self._lock:
            self._buffer.append(item)
            if self._wake_pending:
                return True
            self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the event loop is gone: nobody reads any more
            self.cancel.set()
            return False
        return True

    # -- event loop ------------------------------------------------------------------------

    def _wake(self) -> None:
        with self._lock:
            self._wake_pending = False
        self._ready.set()

    async def get_all(self, limit: int | None = None) -> list[Any]:
        """Every item sent so far and not yet read (at least one; at most ``limit``)."""
        while True:
            with self._lock:
                count = len(self._buffer) if limit is None else min(limit, len(self._buffer))
                items = [self._buffer.popleft() for _ in range(count)]
            if items:
                for _ in range(sum(not isinstance(item, Done) for item in items)):
                    self._credits.release()
                return items
            self._ready.clear()
            await self._ready.wait()


class ServerConversations:
    """The server's conversations in the cache set and how many tokens each one's cache
    holds. Used on the engine thread only."""

    KEPT = 4096

    def __init__(self) -> None:
        self._held: OrderedDict[str, int] = OrderedDict()
        self._raw_partition: str | None = None

    def pick(self, caches: Any, prompt_ids: list[int], partition: str = "") -> str:
        """The conversation to run ``prompt_ids`` over: the server conversation of
        ``partition`` whose cache shares the longest prefix with it, when that is at least
        half of what the cache holds (the request continues it, or edits its end); else a
        new one. A conversation of another partition is never considered."""
        prefix = f"{SERVER_CONVERSATION_PREFIX}{partition}-"
        best, common = caches.best_prefix(prompt_ids, among=lambda cid: cid.startswith(prefix))
        held = self._held.get(best) if best is not None else None
        if held is not None and common > 0 and 2 * common >= held:
            return best
        return prefix + uuid.uuid4().hex

    def reuse_raw(self, partition: str) -> bool:
        """Whether a raw completion of ``partition`` may reuse the engine's own cache: only
        when the last raw completion was of the same partition."""
        same = self._raw_partition == partition
        self._raw_partition = partition
        return same

    def ran(self, conversation_id: str, stats: GenerationStats | None) -> None:
        """``conversation_id``'s cache now holds the prompt and reply of ``stats``."""
        self._held[conversation_id] = stats.context_used if stats is not None else 0
        self._held.move_to_end(conversation_id)
        while len(self._held) > self.KEPT:
            self._held.popitem(last=False)


def cache_partition(key_index: int, cache_salt: str) -> str:
    """Which requests may share cached prefixes: those with the same API key (its index in
    the server's list; -1 without a key) and the same ``cache_salt``."""
    digest = hashlib.sha256(f"{key_index}\0{cache_salt}".encode()).hexdigest()
    return digest[:16]


def run_chat(request: ChatRequest, conversations: ServerConversations, partition: str,
             channel: Channel, engine: Backend | None, caches: Any) -> None:
    """Job: the assistant's reply to ``request.messages`` (engine thread). ``engine`` is
    whatever ``Backend`` the executor loaded for ``request.model``: a local model, or a
    remote server (whose token ids may be out of reach: then the prompt is counted by
    ``count_tokens``, an estimate, and the usage comes from the server's own figures)."""
    channel.started_at = time.perf_counter()
    if channel.cancel.is_set():  # the client left while the request waited
        return
    backend = _backend(engine)
    messages = list(request.messages)
    tools = list(request.tools) or None  # "none": still shown to the model, never read
    if tools is not None and not backend.capabilities().tools:
        raise ApiError(400, "This model has no tool-call format Hearth reads, so it cannot be "
                       "offered 'tools'.", param="tools")
    ids = backend.encode_chat(messages, stop=channel.cancel, tools=tools)
    size = len(ids) if ids is not None else backend.count_tokens(messages)
    settings = _settings(backend, request.sampling, size, "messages", exact=ids is not None)
    settings = replace(settings, grammar=request.grammar, tool_choice=request.tool_choice,
                       parallel_tool_calls=request.parallel_tool_calls)
    # the cache whose prefix the prompt continues (a remote backend keeps none: a new id)
    conversation = conversations.pick(caches, ids or [], partition)
    stream = backend.chat(messages, settings, cancel=channel.cancel, caches=caches,
                          conversation_id=conversation, tools=tools)
    try:
        _pump(stream, channel, size)
    finally:
        conversations.ran(conversation, channel.final.stats if channel.final else None)


def run_completion(request: CompletionRequest, conversations: ServerConversations,
                   partition: str, channel: Channel, engine: Backend | None,
                   caches: Any) -> None:
    """Job: a raw continuation of ``request.prompt`` through ``Backend.complete``."""
    channel.started_at = time.perf_counter()
    if channel.cancel.is_set():
        return
    backend = _backend(engine)
    try:
        ids = backend.encode_prompt(request.prompt)
    except PromptError as exc:
        raise ApiError(400, str(exc), param="prompt") from None
    assert isinstance(request.prompt, str) or ids is not None
    size = len(ids) if ids is not None else estimate_tokens(str(request.prompt))
    settings = _settings(backend, request.sampling, size, "prompt", exact=ids is not None)
    reuse = conversations.reuse_raw(partition)
    stream = backend.complete(ids if ids is not None else request.prompt, settings,
                              cancel=channel.cancel, reuse=reuse)
    _pump(stream, channel, size)


def finish_reason(engine_reason: str | None, called: bool = False) -> str:
    """OpenAI's finish_reason for the engine's (``called``: the reply made tool calls)."""
    if engine_reason in ("length", "max_tokens"):
        return "length"
    return "tool_calls" if called else "stop"


def usage(stats: GenerationStats | None) -> dict[str, Any]:
    """OpenAI's ``usage`` object; ``cached_tokens`` counts the KV-cache prefix reused."""
    stats = stats or GenerationStats()
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": stats.reused_tokens},
    }


def _backend(engine: Backend | None) -> Backend:
    if engine is None:
        raise EngineUnavailableError("No model is loaded in Hearth right now.")
    return engine


def _settings(backend: Backend, sampling: Sampling, prompt_len: int, prompt_param: str, *,
              exact: bool = True) -> GenerationSettings:
    """The reply's settings: Hearth's defaults, then the request's. ``prompt_len`` is the
    prompt's size in tokens; where it is an estimate (``exact`` False: a remote server that
    does not tokenize for us) the context is the server's to check, and a request without
    ``max_tokens`` gets Hearth's default reply length within what the estimate leaves."""
    info = backend.describe()
    context = info.context_length
    wanted = sampling.max_tokens
    overrides = sampling.overrides()
    if not exact or context <= 0:  # an estimate, or a context nobody told us
        if wanted is None:
            default = GenerationSettings.from_model(info.generation_defaults).max_new_tokens
            room = context - prompt_len if context > 0 else default
            wanted = max(1, min(default, room))
        overrides["max_new_tokens"] = wanted
        return GenerationSettings.from_model(info.generation_defaults, overrides)
    if prompt_len >= context:
        raise context_exceeded(prompt_len, wanted or 0, context, prompt_param)
    max_new = wanted if wanted is not None else context - prompt_len
    if prompt_len + max_new > context:
        raise context_exceeded(prompt_len, max_new, context, "max_tokens")
    overrides["max_new_tokens"] = max_new
    return GenerationSettings.from_model(info.generation_defaults, overrides)


def _pump(stream: Iterator[GenerationChunk], channel: Channel, prompt_tokens: int) -> None:
    channel.send(Started(prompt_tokens))
    for chunk in stream:  # after a cancel the engine ends within one step
        if chunk.finish_reason is not None:
            channel.final = chunk
        channel.send(chunk)
