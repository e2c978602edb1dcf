"""``RemoteEngine``: a ``Backend`` (app/chat/backend.py) over an OpenAI-compatible server.

The worker loads one for a model path ``remote:<source-id>/<model-id>``
(``app.remote.sources.remote_target``); the user picked that source and model, and nothing
else ever sends it a chat. ``chat`` streams ``/v1/chat/completions``; each
``GenerationChunk`` carries the answer's new text in ``text`` and the model's thinking
(``reasoning_content`` / ``reasoning`` deltas) in ``reasoning``, never mixed.

Degrade paths (each says what was missing in the last chunk's ``stats.context_note``):
no usage → token counts estimated; extra sampling options refused (HTTP 400/422) → sent
again without them; no streaming (a JSON answer, or a 400/422 about streaming) → one
non-streamed request; no ``/v1/models`` → the model id typed by the user is used as is.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx2

from app.engine.reasoning import split_inline_think
from app.engine.types import (
    BackendInfo,
    Capabilities,
    GenerationChunk,
    GenerationSettings,
    Message,
    ModelSpec,
    ParsedToolCall,
    ProviderReport,
    ThinkingMode,
)
from app.options import CACHE_BUDGET_BYTES
from app.remote.caches import NoCaches
from app.remote.client import OpenAIClient, iter_sse_data, parse_event
from app.remote.errors import RemoteError, describe
from app.remote.models import context_length_of, fetch_models
from app.remote.reply import (
    ReplyClock,
    StopScanner,
    build_completion_payload,
    build_payload,
    estimate_message_tokens,
    estimate_tokens,
    finish_reason,
    has_extras,
    payload_message,
)
from app.remote.sources import RemoteSource, SourceStore, parse_target, remote_target

CHAT = "chat/completions"
COMPLETIONS = "completions"


def _remote_spec(target: str, name: str, context_length: int) -> ModelSpec:
    here = Path(target)
    return ModelSpec(
        root=here, layout="remote", name=name, model_path=here, variant="remote",
        tokenizer_path=here, chat_template=None, bos_token=None, eos_token=None,
        eos_token_ids=(), pad_token_id=None, context_length=context_length,
    )


class RemoteEngine:
    """One model on one remote server. Used from one thread (the generation worker's)."""

    def __init__(self, source: RemoteSource, model_id: str, client: OpenAIClient, *,
                 context_length: int = 0, notes: Sequence[str] = (),
                 name: str | None = None) -> None:
        """``name``: what ``describe()`` calls it (default "<model id> · <source name>")."""
        self.source = source
        self.model_id = model_id
        self.client = client
        self.notes = list(notes)  # what the server lacked when it was loaded
        self.spec = _remote_spec(remote_target(source.id, model_id),
                                 name or f"{model_id} · {source.name}", context_length)
        self.provider_report = ProviderReport(
            chosen="remote", ort_providers=(), requested=None, fell_back=False,
            reasons={"remote": f"runs on {client.base_url}"})
        self.token_count_estimated = False  # True once count_tokens had to guess
        self._can_tokenize: bool | None = None
        self._streams: bool | None = None  # learnt on the first reply
        self._extras = True

    @classmethod
    def load(cls, target: str | Path, *, store: SourceStore | None = None) -> RemoteEngine:
        """The engine for ``remote:<source-id>/<model-id>``: finds the source, checks that
        the server answers and offers the model (when it can list models)."""
        source_id, model_id = parse_target(target)
        store = store or SourceStore()
        source = store.get(source_id)
        if source is None:
            raise RemoteError(f"There is no remote engine “{source_id}” any more (it was "
                              "removed).", kind="missing", hint="Add it again or pick another "
                              "model.")
        client = OpenAIClient(source.base_url, store.api_key(source), login=store.login(source))
        try:
            listed = fetch_models(client)
        except RemoteError as exc:
            if exc.kind != "not_found":
                client.close()
                raise
            return cls(source, model_id, client, notes=[
                f"The server at {client.base_url} has no /v1/models, so the model id "
                f"“{model_id}” is used as typed."])
        entry = next((m for m in listed if m.get("id") == model_id), None)
        if entry is None:
            client.close()
            offered = ", ".join(str(m.get("id")) for m in listed[:8]) or "none"
            raise RemoteError(f"The remote engine at {client.base_url} does not offer the "
                              f"model “{model_id}” (it offers: {offered}).", kind="not_found",
                              hint="Refresh the remote models and pick one of those.")
        return cls(source, model_id, client, context_length=context_length_of(entry))

    # Backend ------------------------------------------------------------------------------

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: Any = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: Callable[[int, int], None] | None = None,
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]:
        """Stream one reply; ``<think>…</think>`` written inside the content goes to ``reasoning``
        as a local model's does. ``caches``, ``conversation_id``, ``reuse`` and ``on_prefill`` are
        accepted for the worker's sake and ignored: the server keeps (or not) its own prefix cache
        and reads the prompt on its side. ``tools`` are sent as OpenAI's ``tools``; the calls the
        server returns (streamed ``tool_calls`` deltas, put together by index) come in the last
        chunk's ``tool_calls``. ``documents`` are refused: the server's template is out of reach
        (``capabilities().documents`` is False, so the turn layer writes sources into the messages
        instead)."""
        if documents is not None:
            raise ValueError("a remote engine takes no documents=; put them in the messages")
        return split_inline_think(self._reply(lambda stream, extras: build_payload(
            self.model_id, messages, settings, stream=stream, extras=extras, tools=tools),
            CHAT, settings, cancel))

    def complete(
        self,
        prompt: str | Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """Stream ``/v1/completions`` for a raw ``prompt`` (text, or token ids as OpenAI's
        API takes them), with the same degrade paths as ``chat``; ``reuse`` is the server's
        business."""
        return self._reply(lambda stream, extras: build_completion_payload(
            self.model_id, prompt, settings, stream=stream, extras=extras),
            COMPLETIONS, settings, cancel)

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int] | None:
        """Token ids as given (the server checks them against its vocabulary); None for
        text, which the server tokenizes on its side."""
        if isinstance(prompt, str):
            return None
        return [int(i) for i in prompt]

    def _reply(self, payload: Callable[[bool, bool], dict], path: str,
               settings: GenerationSettings,
               cancel: threading.Event | None) -> Iterator[GenerationChunk]:
        """One reply from ``path``, its body made by ``payload(stream, extras)``: streamed
        where the server streams, asked again without Hearth's extra options or without
        streaming when the server refuses them (HTTP 400/422 before any text)."""
        cancel = cancel or threading.Event()
        notes = list(self.notes)
        clock = ReplyClock()
        scanner = StopScanner(settings.stop_strings)
        url = self.client.url(path)
        first_error: RemoteError | None = None
        for stream, extras in self._attempts():
            body = payload(stream, extras)
            try:
                if stream:
                    yield from self._stream(body, settings, cancel, clock, scanner, notes, url,
                                            path)
                else:
                    yield from self._whole(body, settings, clock, scanner, notes, path)
                return
            except RemoteError as exc:
                if exc.status not in (400, 422) or clock.first is not None:
                    raise
                first_error = first_error or exc
                said = exc.message.split("The server said:", 1)[-1].lower() \
                    if "The server said:" in exc.message else ""
                if stream and "stream" in said and "stream_options" not in said:
                    self._streams = False
                    notes.append("The server refused streaming, so the reply came in one "
                                 "piece.")
                elif self._extras and has_extras(body):
                    self._extras = False
                    notes.append("The server refused Hearth's extra sampling options "
                                 "(top_k, min_p, repetition_penalty, usage in the stream); "
                                 "the reply was asked for without them.")
                else:
                    raise
        assert first_error is not None
        raise first_error

    def _attempts(self) -> Iterator[tuple[bool, bool]]:
        """(stream, extras) to try in order; what failed once is not tried again."""
        tried: set[tuple[bool, bool]] = set()
        while True:
            attempt = (self._streams is not False, self._extras)
            if attempt in tried:
                return
            tried.add(attempt)
            yield attempt

    def _stream(self, body: dict, settings: GenerationSettings, cancel: threading.Event,
                clock: ReplyClock, scanner: StopScanner, notes: list[str],
                url: str, path: str = CHAT) -> Iterator[GenerationChunk]:
        if not body.get("stream_options"):
            body.pop("stream_options", None)
        server_finish: str | None = None
        stop_reason: object = None
        done = False
        calls: dict[int, dict[str, str]] = {}  # tool calls by index, as their deltas arrive
        with self.client.stream_post(path, body, cancel) as response:
            kind = response.headers.get("content-type", "")
            if "text/event-stream" not in kind:  # the server ignored "stream"
                self._streams = False
                notes.append("The server does not stream, so the reply came in one piece.")
                data = self._read_json(response, url)
                yield from self._answer(data, settings, clock, scanner, notes, body,
                                        streamed=False)
                return
            self._streams = True
            try:
                for data in iter_sse_data(response.iter_lines()):
                    if cancel.is_set():
                        break
                    event = parse_event(data, url)
                    if event is None:
                        done = True
                        break
                    if isinstance(event.get("error"), dict):  # vLLM, Hearth: an error mid-stream
                        message = str(event["error"].get("message") or "an error")
                        raise RemoteError(
                            f"The remote engine at {self.client.base_url} stopped the reply: "
                            f"{message}", kind="broken",
                            hint="The partial reply is kept; try again when the server is back.")
                    if isinstance(event.get("usage"), dict):
                        clock.usage = event["usage"]
                    for choice in event.get("choices") or ():
                        delta = choice.get("delta") or {}
                        text = delta.get("content") or choice.get("text") or ""
                        thought = delta.get("reasoning_content") or delta.get("reasoning") or ""
                        _gather_calls(calls, delta.get("tool_calls"))
                        if text or thought:
                            clock.saw(text)
                            shown = scanner.push(text) if text else ""
                            if shown or thought:
                                yield GenerationChunk(shown, reasoning=thought)
                            if scanner.hit is not None:
                                done = True
                                break
                        if choice.get("finish_reason"):
                            server_finish = choice["finish_reason"]
                            stop_reason = choice.get("stop_reason")
                    if scanner.hit is not None:
                        break
            except httpx2.HTTPError as exc:
                if not cancel.is_set():
                    raise self._broken(exc, url, clock) from exc
        if cancel.is_set() and not done:
            yield self._last(scanner, "cancelled", clock, notes, body)  # no half-made calls
            return
        if not done and server_finish is None:
            raise RemoteError(
                f"The remote engine at {self.client.base_url} closed the stream before the "
                "reply was finished.", kind="broken",
                hint="The server may have stopped or restarted.")
        reason = finish_reason(server_finish, stop_reason, settings, scanner)
        yield self._last(scanner, reason, clock, notes, body, _finished_calls(calls))

    def _broken(self, exc: Exception, url: str, clock: ReplyClock) -> RemoteError:
        error = describe(exc, url, timeout_s=self.client.read_timeout_s)
        if clock.first is not None:
            return RemoteError(
                f"The remote engine at {self.client.base_url} stopped answering mid-reply: "
                f"{error.message}", kind=error.kind, hint=error.hint)
        return error

    def _last(self, scanner: StopScanner, reason: str, clock: ReplyClock, notes: list[str],
              body: dict, tool_calls: tuple[ParsedToolCall, ...] = ()) -> GenerationChunk:
        stats = clock.stats(prompt_estimate=_prompt_estimate(body),
                            context_max=self.spec.context_length, notes=notes, streamed=True)
        return GenerationChunk(scanner.flush(), finish_reason=reason,  # type: ignore[arg-type]
                               stats=stats, tool_calls=tool_calls)

    def _whole(self, body: dict, settings: GenerationSettings, clock: ReplyClock,
               scanner: StopScanner, notes: list[str],
               path: str = CHAT) -> Iterator[GenerationChunk]:
        data = self.client.post_json(path, body)
        yield from self._answer(data, settings, clock, scanner, notes, body, streamed=False)

    def _read_json(self, response: httpx2.Response, url: str) -> Any:
        try:
            return json.loads(response.read())
        except (ValueError, httpx2.HTTPError) as exc:
            raise RemoteError(f"The remote engine at {url} answered with something that is "
                              "not a chat completion.", kind="protocol") from exc

    def _answer(self, data: Any, settings: GenerationSettings, clock: ReplyClock,
                scanner: StopScanner, notes: list[str], body: dict, *,
                streamed: bool) -> Iterator[GenerationChunk]:
        """A whole (non-streamed) completion as one chunk plus the last one."""
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (KeyError, IndexError, TypeError):
            raise RemoteError(f"The remote engine at {self.client.base_url} answered without "
                              "a choice to show.", kind="protocol") from None
        if isinstance(data.get("usage"), dict):
            clock.usage = data["usage"]
        text = message.get("content") or choice.get("text") or ""
        thought = message.get("reasoning_content") or message.get("reasoning") or ""
        clock.saw(text)
        shown = scanner.push(text)
        if shown or thought:
            yield GenerationChunk(shown, reasoning=thought)
        reason = finish_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                               settings, scanner)
        calls: dict[int, dict[str, str]] = {}
        _gather_calls(calls, message.get("tool_calls"))
        stats = clock.stats(prompt_estimate=_prompt_estimate(body),
                            context_max=self.spec.context_length, notes=notes,
                            streamed=streamed)
        yield GenerationChunk(scanner.flush(), finish_reason=reason, stats=stats,
                              tool_calls=_finished_calls(calls))

    def count_tokens(self, messages: Sequence[Message]) -> int:
        """The server's count where it can tokenize a chat (vLLM's ``POST /tokenize``);
        otherwise an estimate (about four characters a token), and
        ``token_count_estimated`` turns True."""
        data = self._tokenize(messages)
        if data is not None:
            return data["count"]
        self.token_count_estimated = True
        return estimate_message_tokens(messages)

    def encode_chat(
        self,
        messages: Sequence[Message],
        *,
        stop: threading.Event | None = None,
        thinking: ThinkingMode = "default",
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> list[int] | None:
        """The prompt's token ids as the server's own template and tokenizer make them,
        where it offers vLLM's ``POST /tokenize`` with its ``tokens``; None where it does not
        (the ids are unknown here: callers count with ``count_tokens``, which estimates).
        ``stop`` and ``thinking`` are the local engine's and have no meaning here."""
        data = self._tokenize(messages, tools)
        tokens = data.get("tokens") if data is not None else None
        if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
            return tokens
        return None

    def _tokenize(self, messages: Sequence[Message],
                  tools: Sequence[dict] | None = None) -> dict | None:
        """The server's ``/tokenize`` answer (with an int ``count``), or None where it has
        none (remembered: it is not asked again)."""
        if self._can_tokenize is False:
            return None
        body: dict[str, Any] = {"model": self.model_id,
                                "messages": [payload_message(m) for m in messages]}
        if tools:
            body["tools"] = list(tools)
        try:
            data = self.client.post_json("/tokenize", body, timeout_s=5)
            if isinstance(data, dict) and isinstance(data.get("count"), int):
                self._can_tokenize = True
                return data
        except RemoteError as exc:
            if exc.kind == "offline":
                raise
        self._can_tokenize = False
        return None

    def capabilities(self) -> Capabilities:
        """Tools through OpenAI's ``tools`` (the server parses the calls); no images,
        documents or embeddings through this engine yet; exact token counts only once the
        server has shown it tokenizes (``/tokenize``)."""
        return Capabilities(tools=True, vision=False, documents=False, embeddings=False,
                            exact_tokens=self._can_tokenize is True, tool_format="remote")

    def describe(self) -> BackendInfo:
        report = self.provider_report
        return BackendInfo(
            name=self.spec.name, provider=report.chosen, provider_summary=report.summary(),
            context_length=self.spec.context_length,
            notes=tuple(n for n in (self.spec.context_note, *self.spec.notes) if n),
            provider_reasons=dict(report.reasons),
            generation_defaults=dict(self.spec.generation_defaults))

    def prepare(self) -> None:
        """Nothing to finish after loading: the server holds the model."""

    def conversation_caches(
        self,
        *,
        budget_bytes: int = CACHE_BUDGET_BYTES,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> Any:
        """A cache set that keeps nothing: the server owns its KV cache."""
        return NoCaches()

    def close(self) -> None:
        self.client.close()


def _prompt_estimate(body: dict) -> int:
    """The prompt's size in tokens, estimated, for a server that sends no usage."""
    if "messages" in body:
        return estimate_message_tokens([Message(m["role"], m["content"] or "")
                                        for m in body["messages"]])
    prompt = body.get("prompt")
    return len(prompt) if isinstance(prompt, list) else estimate_tokens(str(prompt or ""))


def _gather_calls(calls: dict[int, dict[str, str]], deltas: object) -> None:
    """Add OpenAI ``tool_calls`` deltas (or a whole message's calls) to ``calls`` by index:
    the id and name come once, the arguments in pieces."""
    if not isinstance(deltas, list):
        return
    for position, delta in enumerate(deltas):
        if not isinstance(delta, dict):
            continue
        index = delta.get("index", position)
        slot = calls.setdefault(index if isinstance(index, int) else position,
                                {"id": "", "name": "", "arguments": ""})
        if isinstance(delta.get("id"), str) and delta["id"]:
            slot["id"] = delta["id"]
        function = delta.get("function") if isinstance(delta.get("function"), dict) else {}
        if isinstance(function.get("name"), str) and not slot["name"]:
            slot["name"] = function["name"]
        if isinstance(function.get("arguments"), str):
            slot["arguments"] += function["arguments"]


def _finished_calls(calls: dict[int, dict[str, str]]) -> tuple[ParsedToolCall, ...]:
    return tuple(ParsedToolCall(c["id"], c["name"], c["arguments"] or "{}")
                 for _, c in sorted(calls.items()) if c["name"])
