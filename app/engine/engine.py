"""The engine: a loaded model you can chat with.

``Engine.load(folder)`` reads the model package, creates the ORT session on the best execution
provider (and says which one really runs it), inspects the graph's KV I/O and picks the decode
path. ``chat`` renders the conversation with the model's chat template and streams a reply,
reusing the KV cache's longest common prefix with the previous turn.

Caches are passed in, not owned: a call runs over a conversation's cache in the
``ConversationCaches`` it is given (see ``conversation_caches``), or, without one, over the
engine's own single cache (the terminal chat, ``generate``, benchmarks).

One thread owns an Engine; ``cancel`` events may be set from any thread.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from app.engine.chat_template import ChatTemplate
from app.engine.conversation_caches import ConversationCaches
from app.engine.decoder import Decoder
from app.engine.embedder import Embedder
from app.engine.generation import PrefillProgress, stream_generate
from app.engine.graph_info import describe_session
from app.engine.huge_pages import HugePageReport, back_with_huge_pages
from app.engine.kernel_timing import prompt_kernel_timing
from app.engine.kv_cache import KVCache
from app.engine.kv_snapshot import SnapshotStore, model_fingerprint
from app.engine.package import read_model_folder
from app.engine.positions import probe_position_offset
from app.engine.prompt_session import PromptSessionPlan, plan_prompt_session
from app.engine.providers import create_prompt_session, create_session
from app.engine.reasoning import (
    ReasoningSplitter,
    apply_thinking,
    grammar_after_reasoning,
    reasoning_format,
    split_reasoning,
    thinking_control,
)
from app.engine.speculative import DraftModel, likely_quoting, verify_tolerance
from app.engine.tokenizer import Tokenizer
from app.engine.tool_calls import (
    PARSERS,
    hidden_markers,
    split_tool_calls,
    tool_call_format,
    tool_call_grammar,
)
from app.engine.types import (
    BackendInfo,
    Capabilities,
    GenerationChunk,
    GenerationSettings,
    Message,
    ModelSpec,
    ProviderReport,
    ThinkingMode,
)
from app.errors import (
    ContextOverflowError,
    HearthError,
    ModelLoadError,
    PromptError,
    TemplateError,
)
from app.machine import chosen_provider
from app.memory import available_ram_bytes
from app.options import CACHE_BUDGET_BYTES

_DEVICES = {"cuda": "cuda", "dml": "dml"}
#: what the model's details say where exact replies step in pairs (``Decoder.pairs_fix_rounding``):
#: the CPU's one-row kernels round otherwise than its several-row ones (AVX2's MatMulNBits;
#: on an AVX2 EPYC 17% of the starter's decode rate, 28% of a 1.5B's: docs/ARCHITECTURE.md)
STEP_PAIRS_NOTE = ("Exact replies: on this CPU each reply token runs as two rows, because its "
                   "one-row kernels round otherwise than the prompt's; turning exact replies "
                   "off (Settings ▸ Hardware) decodes faster.")
ATTENTION_SINKS = 4


class Engine:
    """A model loaded on one execution provider."""

    def __init__(
        self, spec: ModelSpec, session, report: ProviderReport, tokenizer: Tokenizer,
        *, embed_session=None, exact: bool = True,
    ) -> None:
        """``embed_session``: the split layout's embedding graph (``spec.embed_path``) on the
        same provider; it is used when the decoder takes its outputs. ``exact``: see
        ``load``."""
        self.spec = spec
        self.provider_report = report
        self.tokenizer = tokenizer
        device = _DEVICES.get(report.chosen, "cpu")
        if embed_session is not None:
            wanted = {i.name for i in session.get_inputs()}
            if not wanted & {o.name for o in embed_session.get_outputs()}:
                embed_session = None  # a decoder fed token ids: the embedding graph is unused
        self.graph = describe_session(
            session,
            spec.model_path,
            name_overrides=spec.io_names,
            kv_geometry_hint=spec.kv_geometry,
            embed_session=embed_session,
            share_buffer=spec.share_buffer,
        )
        self.decoder = Decoder(
            session,
            self.graph,
            context_length=spec.context_length,
            device=device,
            embedder=None if embed_session is None else Embedder(embed_session, device),
            exact=exact,
        )
        # Gemma 3 exports count positions from 1: the graph decides (app/engine/positions.py)
        self.decoder.set_position_offset(probe_position_offset(self.decoder))
        #: whether long prompts get their own session (``open_prompt_session`` opens it),
        #: and the sentence the model's details show
        self.prompt_plan = PromptSessionPlan(False, "")
        self._threads: int | None = None
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
        self.reasoning = reasoning_format(tokenizer, spec.chat_template)
        """How the model marks its reasoning (None: it does not reason in its replies)."""
        self.thinking_control = thinking_control(spec.chat_template)
        """How its template switches thinking on and off (None: it cannot be switched)."""
        self.tool_format = tool_call_format(spec.chat_template) if self._template else None
        """The family parser that reads its tool calls (app/engine/tool_calls.py), or None:
        it is not offered tools."""
        eos = set(spec.eos_token_ids)
        if tokenizer.eos_token_id is not None:
            eos.add(tokenizer.eos_token_id)
        self.eos_token_ids = tuple(sorted(eos))
        self._own_cache: KVCache | None = None  # for calls given no ConversationCaches
        #: A draft model for speculative decoding (app/engine/speculative.py), or None.
        self.draft: DraftModel | None = None
        #: The draft model's name, when ``attach_draft`` attached one.
        self.draft_name: str | None = None
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
        prompt_session: bool = True,
        exact: bool = True,
        calibrate: bool = True,
    ) -> Engine:
        """Load a model folder (either layout). Raises ModelLoadError with a readable reason.

        On the CPU the weights are then moved onto huge pages where the OS allows it
        (``huge_pages``; see app/engine/huge_pages.py): decoding reads all of them per token.
        ``prompt_session``: open the fp32 prompt session now where :func:`plan_prompt_session`
        says it pays and memory allows (False: only when ``open_prompt_session`` is called;
        a draft model never calls it). ``exact``: a reply never depends on what the cache
        held (``Decoder(exact=)``; no prompt session then); False is the faster inexact mode.
        ``calibrate``: measure now how the graph's one-row steps round against several-row
        runs (``Decoder.calibrate``, ~40 ms on the starter, ~100 ms on a 0.5B model), as part
        of the load and not of the first reply (a draft model never verifies: False).
        """
        spec = read_model_folder(
            Path(model_dir), variant=variant, provider=chosen_provider(provider)
        )
        tokenizer = Tokenizer.from_files(
            spec.tokenizer_path,
            bos_token=spec.bos_token,
            eos_token=spec.eos_token,
            add_bos_token=spec.add_bos_token,
        )
        session, report = create_session(spec, provider=provider, threads=threads)
        embed_session = None
        if spec.embed_path is not None:  # the split layout: same provider as the decoder
            embed_session, _ = create_session(replace(spec, model_path=spec.embed_path),
                                              provider=report.chosen, threads=threads)
        # the decode session's weights onto huge pages before the prompt session exists: a
        # decode step reads them all, a prompt chunk is compute-bound (and collapsing its
        # copy too would double the time this takes)
        pages = HugePageReport(note="not requested")
        if huge_pages and report.chosen == "cpu":
            pages = back_with_huge_pages()
        elif huge_pages:
            pages = HugePageReport(note=f"the weights are on the {report.summary()} device")
        engine = cls(spec, session, report, tokenizer, embed_session=embed_session,
                     exact=exact)
        engine.huge_pages = pages
        engine._threads = threads
        if embed_session is None:
            engine.prompt_plan = plan_prompt_session(
                spec, report.chosen, available_bytes=available_ram_bytes(), exact=exact,
                timing=lambda: prompt_kernel_timing(spec, threads=threads))
        if prompt_session:
            engine.open_prompt_session()
        if calibrate:
            engine.decoder.calibrate(tolerance=verify_tolerance(engine.decoder))
        return engine

    def open_prompt_session(self) -> PromptSessionPlan:
        """Open the fp32 prompt session ``prompt_plan`` asks for (app/engine/prompt_session.py)
        and give it to the decoder; returns the plan, changed to say so if the session failed
        to open (then the decode session reads prompts, as without one). On the engine's
        thread, between replies; the desktop app calls it just after the model shows as
        loaded (``Engine.load(prompt_session=False)``), so that the window is ready ~0.4 s
        sooner on the starter."""
        if self.prompt_plan.use and not self.decoder.has_prompt_session:
            try:
                self.decoder.attach_prompt_session(
                    create_prompt_session(self.spec, threads=self._threads))
            except ModelLoadError as exc:
                self.prompt_plan = PromptSessionPlan(
                    False, f"Prompts run on the int8 kernels: the fp32 prompt session failed "
                           f"({exc}).")
        return self.prompt_plan

    def attach_draft(self, folder: Path | str, *, threads: int | None = None) -> None:
        """Load the model in ``folder`` on this engine's provider as its draft model
        (``self.draft``). Raises ModelLoadError, or HearthError when its vocabulary differs
        from this model's (a draft must share the tokenizer)."""
        draft = Engine.load(folder, provider=self.provider_report.chosen, threads=threads,
                            huge_pages=False, prompt_session=False,  # small: memory first
                            calibrate=False)
        if draft.graph.vocab_size != self.graph.vocab_size:
            raise HearthError(
                f"The draft model in {folder} has a vocabulary of {draft.graph.vocab_size} "
                f"tokens, the model in {self.spec.root} {self.graph.vocab_size}.",
                hint="A draft model must use the same tokenizer (a smaller sibling).",
            )
        self.draft = DraftModel(draft.decoder, eos_ids=self.eos_token_ids)
        self.draft_name = draft.spec.name

    # -- prompts -------------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.spec.context_length

    @property
    def decode_path(self) -> str:
        return self.graph.decode_path

    def render(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        stop: threading.Event | None = None,
        thinking: ThinkingMode = "default",
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> str:
        """The conversation as the model's chat template writes it (bounded in time and
        memory; ``stop`` ends a render early; ``thinking`` as in GenerationSettings).
        ``tools`` (OpenAI function schemas) and ``documents`` (``{"title", "text"}``) become
        the template's own ``tools`` / ``documents`` variables."""
        template = self._chat_template()
        messages, extra = apply_thinking(thinking, self.thinking_control, messages)
        return template.render(
            [m.as_dict() for m in messages], add_generation_prompt=add_generation_prompt,
            stop=stop, **extra, **_template_inputs(tools, documents),
        )

    def _chat_template(self) -> ChatTemplate:
        if self._template_error is not None:
            raise self._template_error
        if self._template is None:
            raise TemplateError(
                f"The model in {self.spec.root} has no chat template, so it cannot chat.",
                hint="It is probably a base model: use 'hearth generate' without --chat.",
            )
        return self._template

    def encode_chat(
        self,
        messages: Sequence[Message],
        *,
        stop: threading.Event | None = None,
        thinking: ThinkingMode = "default",
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> list[int]:
        """The prompt's token ids. Message contents are always text: a user's
        ``<|im_end|>\\n<|im_start|>system`` encodes as those characters, never as the
        control tokens that would forge a turn (only the template's own markers are special);
        so does a reply's ``reasoning``.
        Conversations without such strings encode exactly as the plain rendered text does."""
        tok = self.tokenizer
        if not any(tok.contains_special(m.content) or tok.contains_special(m.reasoning)
                   for m in messages):
            return tok.encode(self.render(messages, stop=stop, thinking=thinking,
                                          tools=tools, documents=documents))
        template = self._chat_template()
        messages, extra = apply_thinking(thinking, self.thinking_control, messages)
        text, literals = template.render_protected(
            [m.as_dict() for m in messages], tok.special_tokens, stop=stop, **extra,
            **_template_inputs(tools, documents),
        )
        return tok.encode_protected(text, literals)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.encode_chat(messages))

    def capabilities(self) -> Capabilities:
        """Tools where the template has a family Hearth parses (``tool_format``); documents
        where the template reads ``documents``; no vision (the split layout's encoders do not
        run yet) and no embeddings (a chat model)."""
        source = self.spec.chat_template or ""
        return Capabilities(
            tools=self.tool_format in PARSERS, vision=False,
            documents=self._template is not None and "documents" in source,
            embeddings=False, exact_tokens=True, tool_format=self.tool_format)

    def describe(self) -> BackendInfo:
        report = self.provider_report
        plan = self.prompt_plan
        return BackendInfo(
            name=self.spec.name, provider=report.chosen, provider_summary=report.summary(),
            context_length=self.context_length, thinking_control=self.thinking_control,
            draft=self.draft_name, prompt_note=plan.note if plan.worth_telling else None,
            steps_note=(STEP_PAIRS_NOTE if self.decoder.exact and self.decoder.pairs_fix_rounding
                        else None),
            notes=tuple(n for n in (self.spec.context_note, *self.spec.notes) if n),
            provider_reasons=dict(report.reasons),
            generation_defaults=dict(self.spec.generation_defaults))

    def prepare(self) -> None:
        """The Backend's after-load step: open the fp32 prompt session
        (``open_prompt_session``)."""
        self.open_prompt_session()

    # -- generating ----------------------------------------------------------------------

    def generate(
        self,
        prompt_ids: Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """Stream a continuation of raw token ids (over the engine's own cache). A raw prompt
        has no user message: only its own repetition makes the reply a likely quote."""
        self._check_budget(len(prompt_ids), settings)
        return self._stream(self._cache_for(None, None, window=False), prompt_ids, settings,
                            cancel, reuse, quoting=likely_quoting(prompt_ids, 0))

    def encode_prompt(self, prompt: str | Sequence[int]) -> list[int] | None:
        """A raw prompt's token ids: text encoded with the special tokens the tokenizer adds
        (a BOS); ids checked against the vocabulary. ``PromptError`` with a sentence when
        it has no token or an id the model does not know."""
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        else:
            ids = [int(i) for i in prompt]
            vocab = self.tokenizer.vocab_size
            if ids and (max(ids) >= vocab or min(ids) < 0):
                bad = max(ids) if max(ids) >= vocab else min(ids)
                raise PromptError(f"The prompt holds token id {bad}, but the model's "
                                  f"vocabulary has {vocab} tokens.")
        if not ids:
            raise PromptError("The prompt encodes to no tokens.")
        return ids

    def complete(
        self,
        prompt: str | Sequence[int],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        reuse: bool = True,
    ) -> Iterator[GenerationChunk]:
        """``generate`` over ``encode_prompt(prompt)``: the Backend's raw completion."""
        ids = self.encode_prompt(prompt)
        assert ids is not None
        return self.generate(ids, settings, cancel=cancel, reuse=reuse)

    def _stream(self, cache: KVCache, ids: Sequence[int], settings: GenerationSettings,
                cancel: threading.Event | None, reuse: bool,
                on_prefill: PrefillProgress | None = None, *,
                quoting: bool = False) -> Iterator[GenerationChunk]:
        return stream_generate(
            self.decoder, cache, ids, settings, tokenizer=self.tokenizer,
            eos_ids=self.eos_token_ids, cancel=cancel, reuse=reuse,
            provider=self.provider_report.chosen, on_prefill=on_prefill, draft=self.draft,
            quoting=quoting,
        )

    def chat(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        *,
        cancel: threading.Event | None = None,
        caches: ConversationCaches | None = None,
        conversation_id: str | None = None,
        reuse: bool = True,
        on_prefill: PrefillProgress | None = None,
        tools: Sequence[dict] | None = None,
        documents: Sequence[dict] | None = None,
    ) -> Iterator[GenerationChunk]:
        """Stream the assistant's reply to ``messages``.

        ``on_prefill(done, total)`` reports the prompt's prefill (see ``stream_generate``).
        ``tools`` / ``documents`` go to the template (``render``); with tools, the calls the
        model writes in its family's markup leave the text for ``chunk.tool_calls``
        (app/engine/tool_calls.py). Without them the reply streams exactly as before.

        The reply runs over ``conversation_id``'s cache in ``caches`` (made by this engine's
        ``conversation_caches``), or over the engine's own cache when either is None; it is
        reused from its longest common prefix with the newly rendered prompt. The context
        policy decides what happens when the conversation no longer fits: "stop" refuses
        with a clear message, "truncate_oldest" leaves out the oldest turns (keeping the
        system prompt), "sliding_window" keeps attention sinks and the most recent window
        in the KV cache.
        """
        policy = settings.context_policy
        note = None
        if policy == "sliding_window" and not self.decoder.supports_sliding_window:
            policy = "truncate_oldest"
            note = (
                "this model's graph cannot run a sliding window (it has no position ids "
                "input or uses a shared KV buffer), so the oldest turns are left out"
            )
        dropped = 0
        inputs = {"tools": tools, "documents": documents}
        if policy == "truncate_oldest":
            messages, ids, dropped = self._fit_context(messages, settings, cancel, **inputs)
        else:
            ids = self.encode_chat(messages, stop=cancel, thinking=settings.thinking, **inputs)
        # A prompt cut to fit continues the conversation's latest tip; it is not a branch.
        cache = self._cache_for(caches, conversation_id, window=policy == "sliding_window",
                                prompt_ids=None if dropped else ids)
        if policy != "sliding_window":
            self._check_budget(len(ids), settings)
        reads_calls = bool(tools) and self.tool_format in PARSERS and (
            settings.tool_choice != "none")
        if reads_calls and settings.grammar is None:
            grammar = tool_call_grammar(self.tool_format, tools, settings.tool_choice,
                                        parallel=settings.parallel_tool_calls,
                                        tokenizer=self.tokenizer)
            settings = replace(settings, grammar=grammar)
        if settings.grammar is not None and self.reasoning is not None:
            tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
            settings = replace(settings, grammar=grammar_after_reasoning(
                settings.grammar, self.reasoning, tail, settings.thinking))
        stream = self._stream(cache, ids, settings, cancel, reuse, on_prefill,
                              quoting=self._likely_quoting(messages, ids))
        # Harmony's calls live in its channel headers, which the reasoning splitter takes
        # out: its parser reads the stream before it (and leaves the text alone)
        calls_first = reads_calls and self.tool_format == "harmony"
        if calls_first:
            stream = self._split_calls(stream)
        if self.reasoning is not None:
            tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
            stream = split_reasoning(stream, ReasoningSplitter(self.reasoning.after_prompt(tail)))
        if reads_calls and not calls_first:
            stream = self._split_calls(stream)
        if dropped:
            note = f"left out the {dropped} oldest messages to fit the context"
        return _annotate(stream, dropped=dropped, note=note)

    def _split_calls(self, stream: Iterator[GenerationChunk]) -> Iterator[GenerationChunk]:
        family = self.tool_format or ""
        return split_tool_calls(stream, PARSERS[family](),
                                hidden_markers(family, self.tokenizer))

    def _likely_quoting(self, messages: Sequence[Message], ids: Sequence[int]) -> bool:
        """Whether the reply will probably repeat its prompt (``speculative.likely_quoting``:
        a long last user message, or a conversation that repeats itself)."""
        last = next((m for m in reversed(messages) if m.role == "user"), None)
        tokens = 0 if last is None else len(self.tokenizer.encode(last.content))
        return likely_quoting(ids, tokens)

    # -- caches --------------------------------------------------------------------------

    def new_cache(self, window: bool = False) -> KVCache:
        """An empty cache for this model; ``window`` asks for a sliding-window cache
        (attention sinks plus the model's window, at most its context)."""
        if not window:
            return self.decoder.new_cache()
        size = min(self.spec.sliding_window or self.context_length, self.context_length)
        return self.decoder.new_cache(sliding_window=size, sink=ATTENTION_SINKS)

    def conversation_caches(
        self,
        *,
        budget_bytes: int = CACHE_BUDGET_BYTES,
        snapshot_folder: Path | None = None,
        min_tokens: int = 256,
    ) -> ConversationCaches:
        """A ``ConversationCaches`` for this model. Parked caches may hold ``budget_bytes``
        together; with ``snapshot_folder``, caches of at least ``min_tokens`` tokens that
        leave memory (and all of them on ``close``) are kept on disk there, so long chats
        reopen without a prefill, even after a restart."""
        snapshots = None
        if snapshot_folder is not None:
            signature = [((1, layer.kv_heads, layer.head_dim), layer.dtype)
                         for layer in self.graph.kv_layers for _ in (0, 1)]
            snapshots = SnapshotStore(snapshot_folder, model_fingerprint(self.spec),
                                      signature=signature, min_tokens=min_tokens)
        return ConversationCaches(self.new_cache, budget_bytes=budget_bytes,
                                  snapshots=snapshots)

    def _cache_for(self, caches: ConversationCaches | None, conversation_id: str | None, *,
                   window: bool, prompt_ids: Sequence[int] | None = None) -> KVCache:
        if caches is not None and conversation_id is not None:
            return caches.get(conversation_id, window=window, prompt_ids=prompt_ids)
        if self._own_cache is None or (self._own_cache.window is not None) != window:
            self._own_cache = self.new_cache(window)
        return self._own_cache

    def _fit_context(
        self,
        messages: Sequence[Message],
        settings: GenerationSettings,
        stop: threading.Event | None = None,
        **inputs: Sequence[dict] | None,
    ) -> tuple[list[Message], list[int], int]:
        """Leave out the oldest non-system messages until prompt + reply fit (``inputs``:
        the template's ``tools`` / ``documents``, as in ``render``)."""
        limit = self.context_length
        reserve = min(settings.max_new_tokens, limit // 2)
        kept = list(messages)
        dropped = 0
        ids = self.encode_chat(kept, stop=stop, thinking=settings.thinking, **inputs)
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
            ids = self.encode_chat(kept, stop=stop, thinking=settings.thinking, **inputs)
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

    def close(self) -> None:
        """Release the session (caches handed out are their owners' to save or drop)."""
        self._own_cache = None
        self.decoder = None  # type: ignore[assignment]
        self.draft = self.draft_name = None


def _template_inputs(tools: Sequence[dict] | None,
                     documents: Sequence[dict] | None) -> dict[str, list[dict]]:
    """The template variables for ``tools`` / ``documents`` (left out when None, so the
    template sees its own default, None)."""
    out = {}
    if tools is not None:
        out["tools"] = list(tools)
    if documents is not None:
        out["documents"] = list(documents)
    return out


def _annotate(
    stream: Iterator[GenerationChunk], *, dropped: int, note: str | None
) -> Iterator[GenerationChunk]:
    """Pass a reply through, adding what the context policy did to its final stats."""
    for chunk in stream:
        if chunk.stats is not None:
            chunk.stats.dropped_messages = dropped
            chunk.stats.context_note = note
        yield chunk
