"""A scripted engine for the UI benchmark: fixed reply tokens at a fixed rate, no model.

Implements ``app.chat.backend.Backend``, so the window, controller and worker run exactly
as with a real engine; only the tokens are canned.
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
    ProviderReport,
    ThinkingMode,
)


class ScriptedEngine:
    def __init__(self, root: Path, script: Sequence[str], delay: float) -> None:
        self.spec = ModelSpec(
            root=root, layout="optimum", name=root.name, model_path=root / "model.onnx",
            variant="model", tokenizer_path=root / "tokenizer.json", chat_template=None,
            bos_token=None, eos_token=None, eos_token_ids=(), pad_token_id=None,
            context_length=8192,
        )
        self.provider_report = ProviderReport(chosen="cpu", ort_providers=(),
                                              requested=None, fell_back=False, reasons={})
        self._script, self._delay = list(script), delay

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: ConversationCaches | None = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: Callable[[int, int], None] | None = None,  # nothing to prefill here
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]:
        started = time.perf_counter()
        produced, reason = 0, "eos"
        for token in self._script[: settings.max_new_tokens]:
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            time.sleep(self._delay)
            produced += 1
            yield GenerationChunk(text=token, token_id=produced)
        total = (time.perf_counter() - started) * 1000
        yield GenerationChunk(text="", finish_reason=reason, stats=GenerationStats(
            generated_tokens=produced, total_ms=total,
            decode_tok_s=produced / max(total / 1000, 1e-6)))

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
        return None  # no tokenizer: counts are estimates

    def capabilities(self) -> Capabilities:
        return Capabilities(exact_tokens=False)

    def describe(self) -> BackendInfo:
        report = self.provider_report
        return BackendInfo(name=self.spec.name, provider=report.chosen,
                           provider_summary=report.summary(),
                           context_length=self.spec.context_length)

    def prepare(self) -> None:
        pass

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m.content.split()) for m in messages)

    def conversation_caches(
        self,
        *,
        budget_bytes: int = 512 * 1024 * 1024,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> ConversationCaches:
        return ConversationCaches(lambda window: TokenOnlyCache(), budget_bytes=budget_bytes)

    def close(self) -> None:
        pass


def scripted_loader(script: Sequence[str], delay: float):
    """``loader(path)`` for the generation worker: a ScriptedEngine per path."""
    return lambda path: ScriptedEngine(Path(path), script, delay)
