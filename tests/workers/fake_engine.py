"""A scriptable stand-in for ``app.engine.engine.Engine`` for timing-sensitive tests.

It implements ``app.chat.backend.Backend`` with the real engine's signatures
(tests/workers/test_generation_worker.py checks), a real ``ModelSpec`` and real
``ConversationCaches`` (of token-only caches: the fake runs no graph). With ``tool_calls``
it reads tools (``capabilities().tools``) and makes those calls whenever the last message is
not a tool's result; after a result it answers as scripted.

Replies are scripted token lists (or computed from the last user message), optionally preceded
by scripted thinking (``think``: tokens streamed as ``GenerationChunk.reasoning``, as the real
engine's reasoning splitter does), with a per-token
delay, an optional error raised after N tokens, and an optional gate that holds the reply
after N tokens until released. Every call records the calling thread so tests can prove the
engine is only used from its owner thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from app.engine.conversation_caches import ConversationCaches
from app.engine.kv_cache import TokenOnlyCache
from app.engine.types import (
    BackendInfo,
    Capabilities,
    GenerationChunk,
    GenerationSettings,
    GenerationStats,
    Message,
    ModelSpec,
    ParsedToolCall,
    ProviderReport,
    ThinkingMode,
)
from app.errors import HearthError, ModelLoadError

FAKE_DEFAULTS = {"temperature": 0.6, "top_p": 0.9}


def fake_spec(root: Path, name: str, *, context_length: int = 2048,
              generation_defaults: dict | None = None) -> ModelSpec:
    """A ModelSpec for a model folder that is never read."""
    return ModelSpec(
        root=root, layout="optimum", name=name, model_path=root / "model.onnx",
        variant="model", tokenizer_path=root / "tokenizer.json", chat_template=None,
        bos_token=None, eos_token=None, eos_token_ids=(), pad_token_id=None,
        context_length=context_length,
        generation_defaults=dict(FAKE_DEFAULTS if generation_defaults is None
                                 else generation_defaults),
    )


def echo_script(messages: list[Message]) -> list[str]:
    """Default script: 'You said: <last user message>' as word tokens."""
    last = next((m.content for m in reversed(messages) if m.role == "user"), "")
    words = f"You said: {last}".split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class FakeEngine:
    def __init__(
        self,
        root: Path | str = "fake-model",
        *,
        name: str = "Fake Model",
        script: Callable[[list[Message]], list[str]] | list[str] | None = None,
        delay: float = 0.0,
        error_after: int | None = None,
        error: Exception | None = None,
        error_before: Exception | None = None,
        hold_after: int | None = None,
        prefill_tokens: int = 0,
        prefill_chunk: int = 512,
        prefill_delay: float = 0.0,
        context_length: int = 2048,
        generation_defaults: dict | None = None,
        think: Callable[[list[Message]], list[str]] | list[str] | None = None,
        thinking_control: str | None = None,
        stats_extra: dict | None = None,
        tool_calls: Sequence[ParsedToolCall] = (),
    ) -> None:
        self.spec = fake_spec(Path(root), name, context_length=context_length,
                              generation_defaults=generation_defaults)
        self.provider_report = ProviderReport(
            chosen="cpu",
            ort_providers=("CPUExecutionProvider",),
            requested=None,
            fell_back=False,
            reasons={"dml": "not available on this machine"},
        )
        self.script = script if script is not None else echo_script
        self.think = think  # thinking streamed before the answer (None: no thinking)
        self.thinking_control = thinking_control  # as Engine.thinking_control
        # GenerationStats fields the final chunk carries besides the measured ones (e.g. a
        # speculating engine's speculation / proposed / accepted / target_steps)
        self.stats_extra = dict(stats_extra or {})
        self.delay = delay
        self.error_after = error_after
        self.error = error or RuntimeError("scripted engine failure")
        self.error_before = error_before
        self.hold_after = hold_after
        # a scripted prefill: ``prefill_tokens`` in chunks, ``prefill_delay`` s per chunk
        self.prefill_tokens = prefill_tokens
        self.prefill_chunk = prefill_chunk
        self.prefill_delay = prefill_delay
        self.prefill_done = 0  # tokens the last prefill fed before it ended or was stopped
        self.release = threading.Event()
        self.held = threading.Event()
        self.calls: list[list[Message]] = []
        self.settings: list[GenerationSettings] = []
        self.conversations: list[tuple[ConversationCaches | None, str | None]] = []
        self.caches_made: list[ConversationCaches] = []
        self.threads: set[int] = set()
        self.closed = False
        self.tool_calls = tuple(tool_calls)
        self.tools_offered: list[Sequence[dict] | None] = []
        self.prepared = 0

    def _tokens(self, messages: list[Message]) -> list[str]:
        return list(self.script(messages) if callable(self.script) else self.script)

    def _thoughts(self, messages: list[Message]) -> list[str]:
        if self.think is None:
            return []
        return list(self.think(messages) if callable(self.think) else self.think)

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: ConversationCaches | None = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: Callable[[int, int], None] | None = None,
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]:
        self.threads.add(threading.get_ident())
        self.calls.append(list(messages))
        self.settings.append(settings)
        self.conversations.append((caches, conversation_id))
        self.tools_offered.append(tools)
        if caches is not None and conversation_id is not None:
            caches.get(conversation_id)
        if self.error_before is not None:
            raise self.error_before
        calls = self.tool_calls if tools and (not messages or messages[-1].role != "tool") \
            else ()
        return self._run(list(messages), settings, cancel, on_prefill, calls)

    def _prefill(self, cancel, on_prefill) -> bool:
        """Feed the scripted prompt in chunks, checking ``cancel`` between them like the
        real decoder; False when stopped."""
        total = self.prefill_tokens
        self.prefill_done = 0
        if on_prefill is not None and total:
            on_prefill(0, total)
        while self.prefill_done < total:
            if cancel is not None and cancel.is_set():
                return False
            time.sleep(self.prefill_delay)
            self.prefill_done = min(total, self.prefill_done + self.prefill_chunk)
            if on_prefill is not None:
                on_prefill(self.prefill_done, total)
        return True

    def _run(self, messages, settings, cancel, on_prefill=None,
             calls=()) -> Iterator[GenerationChunk]:
        started = time.perf_counter()
        if not self._prefill(cancel, on_prefill):
            yield GenerationChunk(text="", finish_reason="cancelled", stats=GenerationStats(
                prompt_tokens=self.prefill_tokens, provider="cpu",
                context_max=self.spec.context_length))
            return
        thoughts = self._thoughts(messages)
        answer = [] if calls else self._tokens(messages)  # a calling round only calls
        steps = [(t, True) for t in thoughts] + [(t, False) for t in answer]
        steps = steps[: settings.max_new_tokens]
        prompt = self.count_tokens(messages)
        ttft = 0.0
        reason = "eos"
        produced = 0
        thinking_started = thinking_ended = None
        for i, (tok, thinking) in enumerate(steps):
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            if self.error_after is not None and i == self.error_after:
                raise self.error
            if self.hold_after is not None and i == self.hold_after:
                self.held.set()
                while not self.release.wait(0.005):
                    if cancel is not None and cancel.is_set():
                        break
                if cancel is not None and cancel.is_set():
                    reason = "cancelled"
                    break
            if self.delay:
                time.sleep(self.delay)
            if i == 0:
                ttft = (time.perf_counter() - started) * 1000
            produced += 1
            if thinking:
                thinking_started = thinking_started or time.perf_counter()
                yield GenerationChunk(text="", token_id=i, reasoning=tok)
                continue
            if thinking_started is not None and thinking_ended is None:
                thinking_ended = time.perf_counter()
            yield GenerationChunk(text=tok, token_id=i)
        else:
            if len(steps) == settings.max_new_tokens:
                reason = "max_tokens"
        total = (time.perf_counter() - started) * 1000
        stats = GenerationStats(
            prompt_tokens=prompt,
            prefilled_tokens=prompt,
            generated_tokens=produced,
            ttft_ms=ttft,
            decode_tok_s=produced / max(total / 1000, 1e-6),
            total_ms=total,
            provider="cpu",
            context_used=prompt + produced,
            context_max=self.spec.context_length,
            reasoning_tokens=min(produced, len(thoughts)),
        )
        for key, value in self.stats_extra.items():
            setattr(stats, key, value)
        if thinking_started is not None:
            stats.reasoning_ms = ((thinking_ended or time.perf_counter()) - thinking_started) * 1000
        if calls and reason == "eos":
            reason = "tool_calls"
        yield GenerationChunk(text="", finish_reason=reason, stats=stats,
                              tool_calls=tuple(calls) if reason == "tool_calls" else ())

    def complete(
        self,
        prompt: str | Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """A raw continuation: the chat reply to the prompt as one user message."""
        text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
        yield from self.chat([Message("user", text)], settings, cancel=cancel, reuse=reuse)

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int] | None:
        return list(prompt) if not isinstance(prompt, str) else None  # no tokenizer

    def encode_chat(
        self,
        messages: Sequence[Message],
        *,
        stop: threading.Event | None = None,
        thinking: ThinkingMode = "default",
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> list[int] | None:
        return None  # the fake has no tokenizer

    def capabilities(self) -> Capabilities:
        return Capabilities(tools=bool(self.tool_calls), exact_tokens=False,
                            tool_format="hermes" if self.tool_calls else None)

    def describe(self) -> BackendInfo:
        report = self.provider_report
        return BackendInfo(
            name=self.spec.name, provider=report.chosen, provider_summary=report.summary(),
            context_length=self.spec.context_length, thinking_control=self.thinking_control,
            notes=tuple(n for n in (self.spec.context_note, *self.spec.notes) if n),
            provider_reasons=dict(report.reasons),
            generation_defaults=dict(self.spec.generation_defaults))

    def prepare(self) -> None:
        self.threads.add(threading.get_ident())
        self.prepared += 1

    def count_tokens(self, messages: Sequence[Message]) -> int:
        self.threads.add(threading.get_ident())
        return sum(len(m.content.split()) + 4 for m in messages)

    def conversation_caches(
        self,
        *,
        budget_bytes: int = 512 * 1024 * 1024,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> ConversationCaches:
        self.threads.add(threading.get_ident())
        caches = ConversationCaches(lambda window: TokenOnlyCache(), budget_bytes=budget_bytes)
        self.caches_made.append(caches)
        return caches

    def close(self) -> None:
        self.closed = True


class FakeLoader:
    """``loader(path)``: a FakeEngine per path; a path with 'broken' in it fails to load."""

    def __init__(self, **engine_kwargs) -> None:
        self.engine_kwargs = engine_kwargs
        self.engines: list[FakeEngine] = []
        self.threads: set[int] = set()
        self.load_delay = 0.0

    def __call__(self, path: Path) -> FakeEngine:
        self.threads.add(threading.get_ident())
        if self.load_delay:
            time.sleep(self.load_delay)
        if "broken" in str(path):
            raise ModelLoadError(f"The model folder {path} has no model.onnx.")
        if "buggy" in str(path):
            raise ValueError("unexpected bug while loading")
        kwargs = dict(self.engine_kwargs)
        kwargs.setdefault("name", Path(path).name)
        engine = FakeEngine(path, **kwargs)
        self.engines.append(engine)
        return engine

    @property
    def last(self) -> FakeEngine:
        return self.engines[-1]


__all__ = ["FakeEngine", "FakeLoader", "HearthError", "echo_script"]
