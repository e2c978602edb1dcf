"""A scriptable stand-in for ``app.engine.engine.Engine`` (same API) for timing-sensitive tests.

Replies are scripted token lists (or computed from the last user message), with a per-token
delay, an optional error raised after N tokens, and an optional gate that holds the reply
after N tokens until released. Every call records the calling thread so tests can prove the
engine is only used from its owner thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.types import (
    GenerationChunk,
    GenerationSettings,
    GenerationStats,
    Message,
    ProviderReport,
)
from app.errors import HearthError, ModelLoadError


@dataclass
class FakeSpec:
    name: str
    root: Path
    context_length: int = 2048
    generation_defaults: dict = field(default_factory=lambda: {"temperature": 0.6, "top_p": 0.9})


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
        context_length: int = 2048,
    ) -> None:
        self.spec = FakeSpec(name=name, root=Path(root), context_length=context_length)
        self.provider_report = ProviderReport(
            chosen="cpu",
            ort_providers=("CPUExecutionProvider",),
            requested=None,
            fell_back=False,
            reasons={"dml": "not available on this machine"},
        )
        self.script = script if script is not None else echo_script
        self.delay = delay
        self.error_after = error_after
        self.error = error or RuntimeError("scripted engine failure")
        self.error_before = error_before
        self.hold_after = hold_after
        self.release = threading.Event()
        self.held = threading.Event()
        self.calls: list[list[Message]] = []
        self.settings: list[GenerationSettings] = []
        self.threads: set[int] = set()
        self.closed = False

    def _tokens(self, messages: list[Message]) -> list[str]:
        return list(self.script(messages) if callable(self.script) else self.script)

    def chat(
        self,
        messages: list[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        conversation_id: str | None = None,
    ) -> Iterator[GenerationChunk]:
        self.threads.add(threading.get_ident())
        self.calls.append(list(messages))
        self.settings.append(settings)
        if self.error_before is not None:
            raise self.error_before
        return self._run(list(messages), settings, cancel)

    def _run(self, messages, settings, cancel) -> Iterator[GenerationChunk]:
        started = time.perf_counter()
        tokens = self._tokens(messages)[: settings.max_new_tokens]
        prompt = self.count_tokens(messages)
        ttft = 0.0
        reason = "eos"
        produced = 0
        for i, tok in enumerate(tokens):
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
            yield GenerationChunk(text=tok, token_id=i)
        else:
            if len(tokens) == settings.max_new_tokens:
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
        )
        yield GenerationChunk(text="", finish_reason=reason, stats=stats)

    def count_tokens(self, messages: list[Message]) -> int:
        self.threads.add(threading.get_ident())
        return sum(len(m.content.split()) + 4 for m in messages)

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
