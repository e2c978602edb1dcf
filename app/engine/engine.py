"""The engine: a loaded model you can chat with.

``Engine.load(folder)`` reads the model package, creates the ORT session on the best execution
provider (and says which one really runs it), inspects the graph's KV I/O and picks the decode
path. ``chat`` renders the conversation with the model's chat template and streams a reply,
reusing the KV cache's longest common prefix with the previous turn.

One thread owns an Engine; ``cancel`` events may be set from any thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

from app.engine.chat_template import ChatTemplate
from app.engine.decoder import Decoder
from app.engine.generation import stream_generate
from app.engine.graph_info import describe_session
from app.engine.huge_pages import HugePageReport, back_with_huge_pages
from app.engine.kv_cache import KVCache, SlidingWindowCache
from app.engine.kv_snapshot import SnapshotStore, model_fingerprint
from app.engine.package import read_model_folder
from app.engine.providers import create_session
from app.engine.tokenizer import Tokenizer
from app.engine.types import (
    GenerationChunk,
    GenerationSettings,
    Message,
    ModelSpec,
    ProviderReport,
)
from app.errors import ContextOverflowError, TemplateError
from app.models.policy import machine_provider

_DEVICES = {"cuda": "cuda", "dml": "dml"}
DEFAULT_SNAPSHOT_BUDGET_MB = 512
ATTENTION_SINKS = 4


class Engine:
    """A model loaded on one execution provider, with its KV cache."""

    def __init__(
        self, spec: ModelSpec, session, report: ProviderReport, tokenizer: Tokenizer
    ) -> None:
        self.spec = spec
        self.provider_report = report
        self.tokenizer = tokenizer
        self.graph = describe_session(
            session,
            spec.model_path,
            name_overrides=spec.io_names,
            kv_geometry_hint=spec.kv_geometry,
        )
        self.decoder = Decoder(
            session,
            self.graph,
            context_length=spec.context_length,
            device=_DEVICES.get(report.chosen, "cpu"),
        )
        self._template: ChatTemplate | None = None
        self._template_error: TemplateError | None = None
        if spec.chat_template:
            try:
                self._template = ChatTemplate(
                    spec.chat_template, bos_token=spec.bos_token, eos_token=spec.eos_token,
                    special_tokens=spec.extra_special_tokens, origin=str(spec.root),
                )
            except TemplateError as exc:  # raw generation still works; chat says why not
                self._template_error = exc
        eos = set(spec.eos_token_ids)
        if tokenizer.eos_token_id is not None:
            eos.add(tokenizer.eos_token_id)
        self.eos_token_ids = tuple(sorted(eos))
        self.snapshot_budget_bytes = DEFAULT_SNAPSHOT_BUDGET_MB * 1024 * 1024
        self._conversation: str | None = None
        self._snapshots: OrderedDict[str, KVCache] = OrderedDict()
        self.disk_snapshots: SnapshotStore | None = None
        self.huge_pages = HugePageReport(note="not requested")

    @classmethod
    def load(
        cls,
        model_dir: Path | str,
        *,
        provider: str | None = None,
        variant: str | None = None,
        threads: int | None = None,
        huge_pages: bool = True,
    ) -> Engine:
        """Load a model folder (either layout). Raises ModelLoadError with a readable reason.

        On the CPU the weights are then moved onto huge pages where the OS allows it
        (``huge_pages``; see app/engine/huge_pages.py): decoding reads all of them per token.
        """
        spec = read_model_folder(
            Path(model_dir), variant=variant, provider=provider or machine_provider()
        )
        tokenizer = Tokenizer.from_files(
            spec.tokenizer_path,
            bos_token=spec.bos_token,
            eos_token=spec.eos_token,
            add_bos_token=spec.add_bos_token,
        )
        session, report = create_session(spec, provider=provider, threads=threads)
        engine = cls(spec, session, report, tokenizer)
        if huge_pages and report.chosen == "cpu":
            engine.huge_pages = back_with_huge_pages()
        elif huge_pages:
            engine.huge_pages = HugePageReport(note=f"the weights are on the {report.summary()} "
                                                    "device")
        return engine

    # -- prompts -------------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.spec.context_length

    @property
    def decode_path(self) -> str:
        return self.graph.decode_path

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> str:
        """The conversation as the model's chat template writes it."""
        if self._template_error is not None:
            raise self._template_error
        if self._template is None:
            raise TemplateError(
                f"The model in {self.spec.root} has no chat template, so it cannot chat.",
                hint="It is probably a base model: use 'hearth generate' without --chat.",
            )
        return self._template.render(
            [m.as_dict() for m in messages], add_generation_prompt=add_generation_prompt
        )

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        return self.tokenizer.encode(self.render(messages))

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.encode_chat(messages))

    # -- generating ----------------------------------------------------------------------

    def generate(
        self,
        prompt_ids: Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """Stream a continuation of raw token ids."""
        self._check_budget(len(prompt_ids), settings)
        return self._stream(prompt_ids, settings, cancel, reuse)

    def _stream(self, ids: Sequence[int], settings: GenerationSettings,
                cancel: threading.Event | None, reuse: bool) -> Iterator[GenerationChunk]:
        return stream_generate(
            self.decoder, self.tokenizer, ids, settings, eos_ids=self.eos_token_ids,
            cancel=cancel, reuse=reuse, provider=self.provider_report.chosen,
        )

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        conversation_id: str | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """Stream the assistant's reply to ``messages``.

        The conversation's KV cache is reused from its longest common prefix with the newly
        rendered prompt; switching ``conversation_id`` parks the current cache in a bounded
        LRU of snapshots. The context policy decides what happens when the conversation no
        longer fits: "stop" refuses with a clear message, "truncate_oldest" leaves out the
        oldest turns (keeping the system prompt), "sliding_window" keeps attention sinks and
        the most recent window in the KV cache.
        """
        policy = settings.context_policy
        note = None
        if policy == "sliding_window" and not self.decoder.supports_sliding_window:
            policy = "truncate_oldest"
            note = (
                "this model's graph cannot run a sliding window (it has no position ids "
                "input or uses a shared KV buffer), so the oldest turns are left out"
            )
        self._activate(conversation_id, sliding=policy == "sliding_window")
        dropped = 0
        if policy == "truncate_oldest":
            messages, ids, dropped = self._fit_context(messages, settings)
        else:
            ids = self.encode_chat(messages)
        if policy != "sliding_window":
            self._check_budget(len(ids), settings)
        stream = self._stream(ids, settings, cancel, reuse)
        if dropped:
            note = f"left out the {dropped} oldest messages to fit the context"
        return _annotate(stream, dropped=dropped, note=note)

    def _activate(self, conversation_id: str | None, *, sliding: bool) -> None:
        """Make ``conversation_id``'s cache the decoder's, parking the current one."""
        decoder = self.decoder
        if conversation_id != self._conversation:
            if self._conversation is not None and len(decoder.cache):
                self._snapshots[self._conversation] = decoder.cache
                self._snapshots.move_to_end(self._conversation)
            cache = self._snapshots.pop(conversation_id, None) if conversation_id else None
            if cache is None:
                cache = self._new_cache(sliding)
                if conversation_id and self.disk_snapshots is not None and not sliding:
                    self.disk_snapshots.load(conversation_id, cache, self._kv_signature())
            decoder.cache = cache
            self._conversation = conversation_id
            self._trim_snapshots()
        if sliding != isinstance(decoder.cache, SlidingWindowCache):
            decoder.cache = self._new_cache(sliding)  # the policy changed: start clean

    def _new_cache(self, sliding: bool) -> KVCache:
        if not sliding:
            return self.decoder.new_cache()
        window = min(self.spec.sliding_window or self.context_length, self.context_length)
        return self.decoder.new_cache(sliding_window=window, sink=ATTENTION_SINKS)

    def _trim_snapshots(self) -> None:
        total = sum(cache.nbytes for cache in self._snapshots.values())
        while self._snapshots and total > self.snapshot_budget_bytes:
            conversation_id, oldest = self._snapshots.popitem(last=False)
            total -= oldest.nbytes
            if self.disk_snapshots is not None:
                self.disk_snapshots.save(conversation_id, oldest)

    def _kv_signature(self) -> list[tuple[tuple[int, ...], str]]:
        return [((1, layer.kv_heads, layer.head_dim), layer.dtype)
                for layer in self.graph.kv_layers for _ in (0, 1)]

    def enable_disk_snapshots(self, folder: Path | None = None, *,
                              min_tokens: int = 256) -> None:
        """Keep long chats' KV caches on disk (under ``folder``, by default the cache dir),
        so they reopen without a prefill after a restart."""
        from app.paths import cache_dir

        root = folder or cache_dir() / "kv"
        self.disk_snapshots = SnapshotStore(root, model_fingerprint(self.spec),
                                            min_tokens=min_tokens)

    def save_snapshots(self) -> int:
        """Write the current and parked conversation caches to disk; returns how many."""
        if self.disk_snapshots is None or self.decoder is None:
            return 0
        caches = dict(self._snapshots)
        if self._conversation is not None:
            caches[self._conversation] = self.decoder.cache
        return sum(self.disk_snapshots.save(cid, cache) for cid, cache in caches.items())

    @property
    def snapshot_ids(self) -> list[str]:
        """Conversations whose KV cache is parked in memory, least recent first."""
        return list(self._snapshots)

    def _fit_context(
        self, messages: Sequence[Message], settings: GenerationSettings
    ) -> tuple[list[Message], list[int], int]:
        """Leave out the oldest non-system messages until prompt + reply fit."""
        limit = self.context_length
        reserve = min(settings.max_new_tokens, limit // 2)
        kept = list(messages)
        dropped = 0
        ids = self.encode_chat(kept)
        while len(ids) + reserve > limit:
            first = next((i for i, m in enumerate(kept) if m.role != "system"), None)
            last_user = max((i for i, m in enumerate(kept) if m.role == "user"), default=None)
            if first is None or first == last_user:
                raise ContextOverflowError(
                    f"The last message alone needs {len(ids)} tokens plus up to {reserve} "
                    f"for the reply, but the model's context holds {limit}.",
                    hint="Shorten the message or the system prompt.",
                )
            count = (
                2
                if (
                    first + 1 < len(kept)
                    and kept[first].role == "user"
                    and kept[first + 1].role == "assistant"
                )
                else 1
            )
            del kept[first : first + count]
            dropped += count
            ids = self.encode_chat(kept)
        return kept, ids, dropped

    def _check_budget(self, prompt_len: int, settings: GenerationSettings) -> None:
        limit = self.context_length
        if prompt_len == 0:
            raise ValueError("the prompt is empty")
        if prompt_len >= limit or (
            settings.context_policy == "stop" and prompt_len + settings.max_new_tokens > limit
        ):
            raise ContextOverflowError(
                f"This conversation needs {prompt_len} tokens plus up to "
                f"{settings.max_new_tokens} for the reply, but the model's context holds "
                f"{limit}.",
                hint="Start a new chat, lower the maximum reply length, or choose the "
                "'drop oldest turns' context policy.",
            )

    def forget_conversation(self, conversation_id: str) -> None:
        """Drop a conversation's parked KV cache (it was deleted)."""
        self._snapshots.pop(conversation_id, None)
        if self.disk_snapshots is not None:
            self.disk_snapshots.delete(conversation_id)

    def close(self) -> None:
        """Release the session; long chats' caches go to disk first when enabled."""
        if self.decoder is None:
            return
        self.save_snapshots()
        self._snapshots.clear()
        self.decoder = None  # type: ignore[assignment]


def _annotate(
    stream: Iterator[GenerationChunk], *, dropped: int, note: str | None
) -> Iterator[GenerationChunk]:
    """Pass a reply through, adding what the context policy did to its final stats."""
    for chunk in stream:
        if chunk.stats is not None:
            chunk.stats.dropped_messages = dropped
            chunk.stats.context_note = note
        yield chunk
