"""Run a decoder graph one step at a time over a KV cache it is handed, through IOBinding.

``Decoder.feed(cache, ids)`` runs the new token ids after what ``cache`` holds (in chunks when
there are many) and returns the logits of the last one as a float32 vector. Inputs are bound
straight from numpy buffers grown on demand and the decode-step logits are written by ORT into
a buffer we own, so the per-token host work is a handful of binding calls.

The decoder keeps no cache. It keeps its own binding record: which tensor list its one
IOBinding holds (``KVCache.tensors``, replaced whenever the tensors change) and whether the
last step left the binding ready for the next one-token step (the steady step). Caches are
asked for their capabilities, never tested for their type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort

from app.engine.embedder import Embedder
from app.engine.kv_binder import kv_binder, output_reader
from app.engine.kv_cache import (
    KVCache,
    RebindCache,
    RecurrentCache,
    SharedBufferCache,
    SlidingWindowCache,
    TokenOnlyCache,
)
from app.engine.kv_ops import KVOps
from app.engine.prompt_session import MIN_ROWS as MIN_PROMPT_ROWS
from app.engine.types import GraphInfo
from app.errors import ContextOverflowError

_NP_LOGITS = {"float32": np.float32, "float16": np.float16}
# Graphs that return logits for every position make a [chunk, vocab] array per prefill chunk:
# keep it under this many bytes (1024 tokens x 152k vocab would be 622 MB).
LOGITS_CHUNK_BYTES = 64 * 1024 * 1024
MAX_PREFILL_CHUNK = 512
INITIAL_INPUT_POSITIONS = 4096  # mask / position-id buffers start here and double as needed
#: ``calibrate``'s probe: positions fed first, then rows of one verify step compared with
#: one-token steps at each of them (one row at position 2 missed differences of ~4e-6 that
#: an int4 graph's later rows showed on an AVX-512 machine)
CALIBRATION_PREFIX = 8
CALIBRATION_ROWS = 4


class PrefillStopped(Exception):
    """``Decoder.feed`` was stopped between chunks; ``done`` ids of its input were fed."""

    def __init__(self, done: int) -> None:
        super().__init__(f"prefill stopped after {done} tokens")
        self.done = done
#: The graph input that says how many last positions get logits (int64, [1] or a scalar; as
#: in Hugging Face exports). Hearth's GGUF conversion takes it so that prefill computes one
#: row and a verify step (``Decoder.verify``) one per fed token; the decoder binds 1 except
#: for verify steps.
LOGITS_TO_KEEP = "num_logits_to_keep"
#: Every name that input goes by (transformers renamed it ``logits_to_keep`` in 4.50).
LOGITS_TO_KEEP_NAMES = (LOGITS_TO_KEEP, "logits_to_keep")


class _Binding:
    """One session's IOBinding and the record of what it holds now."""

    def __init__(self, session: ort.InferenceSession, device: str,
                 keep_shape: tuple[int, ...]) -> None:
        self.session = session
        self.io = session.io_binding()
        self.read_outputs = output_reader(self.io)
        self.bind_input, self.bind_output = kv_binder(self.io, device)
        self.step_id_bound = False  # the one-id array is bound as the input ids
        self.keep_bound = 0  # the value bound for ``logits_to_keep`` (0: nothing bound yet)
        # ``logits_to_keep``'s value (the graph's input shape): ORT reads the bound array in
        # place, so each binding needs its own
        self.keep = np.ones(keep_shape, dtype=np.int64)
        self.logits_bound = False  # the reusable one-row logits buffer is bound
        self.tensors: list | None = None  # the ``KVCache.tensors`` list whose tensors it holds


class Decoder:
    """One ORT session and its IOBinding; runs steps over the caches it is handed. A second
    session over the same graph (``attach_prompt_session``, see app/engine/prompt_session.py)
    may read long prompt chunks, over the same caches.

    Not thread-safe: one owner thread (of both sessions)."""

    def __init__(
        self,
        session: ort.InferenceSession,
        graph: GraphInfo,
        *,
        context_length: int,
        device: str = "cpu",
        prefill_chunk: int | None = None,
        embedder: Embedder | None = None,
        max_checkpoints: int = 4,
        exact: bool = True,
    ) -> None:
        """``embedder``: the split layout's embedding graph, whose outputs the decoder takes
        instead of ``input_ids``. ``max_checkpoints``: turn-boundary checkpoints a recurrent
        cache keeps. ``exact``: every reply's one-token steps run on the kernels its prompt
        chunks run on (two rows where one-row steps round otherwise, ``choose_rows``), so a
        position's logits and KV never depend on whether a cache held it: a reply is the same
        with or without the prompt cache. False is the faster inexact mode."""
        # A graph with ``logits_to_keep`` returns the last position only unless told more.
        keep = next((i for i in session.get_inputs() if i.name in LOGITS_TO_KEEP_NAMES), None)
        self._keep_input = None if keep is None else keep.name
        self._keep_shape = (1,) if keep is not None and keep.shape else ()
        self._main = _Binding(session, device, self._keep_shape)
        self._prompt: _Binding | None = None
        self.embedder = embedder
        self.max_checkpoints = max_checkpoints
        self.graph = graph
        self.context_length = context_length
        self.device = device
        self._ops = KVOps(session.get_providers(), device)
        self._last_only = graph.logits_last_only or self._keep_input is not None
        vocab = graph.vocab_size or 1
        if prefill_chunk is None:
            if self._last_only or graph.decode_path == "none":
                prefill_chunk = MAX_PREFILL_CHUNK
            else:
                prefill_chunk = LOGITS_CHUNK_BYTES // (vocab * 4)
        self.prefill_chunk = max(16, min(MAX_PREFILL_CHUNK, prefill_chunk))
        # The attention mask's ones and the position ids are slices of two arrays that grow
        # (doubling) with the longest sequence run so far, never sized by the context alone:
        # a model that claims a context of 2^31 tokens must not cost 32 GB here.
        self._input_limit = context_length + MAX_PREFILL_CHUNK
        self._mask = np.ones((1, 0), dtype=np.int64)
        self._positions = np.zeros((1, 0), dtype=np.int64)
        #: What the first position's id is: 0, or 1 for graphs that count from one (Gemma 3
        #: exports that build their causal mask from ``position_ids``; app/engine/positions.py
        #: decides it from the graph). ``set_position_offset`` changes it.
        self.position_offset = 0
        self._reserve(min(INITIAL_INPUT_POSITIONS, self._input_limit))
        # A decode step's one input id lives in this array; ORT reads it in place, so a step
        # writes the id and binds nothing new.
        self._step_id = np.zeros((1, 1), dtype=np.int64)
        self._step_id_value = ort.OrtValue.ortvalue_from_numpy(self._step_id)
        self._logits_dtype = _NP_LOGITS.get(graph.logits_dtype, np.float32)
        self._step_logits: np.ndarray | None = None
        self._step_logits_value: ort.OrtValue | None = None
        # The main binding's steady record. ``_steady_tensors``: the ``KVCache.tensors`` list
        # while the last step left the binding ready for another one-token step as it is,
        # None when ``_run``'s full path is needed; ``_steady_limit``: the positions those
        # bound buffers hold.
        self._steady_tensors: list | None = None
        self._steady_limit = 0
        #: Whether a verify step's logits equal one-row steps' within rounding, and bit for
        #: bit; whether two-row steps fix what one-row steps miss (``calibrate`` measures
        #: them once; ``one_row_agrees`` is None until then).
        self.one_row_agrees: bool | None = None
        self.one_row_exact = False
        self.pairs_agree = False
        self._pairs_exact = False
        #: Rows a one-token step runs this reply (``choose_rows``): 2 runs the token and a
        #: scratch copy of it whose KV position is cut off again, so that every step takes
        #: the several-row kernels and a verify step decides exactly what plain steps do.
        self.step_rows = 1
        self.exact = exact
        # The two-row step's own buffers and binding record (as the one-row steady step's):
        # its ids [token, token], its logits [1, 2, vocab], the tensors bound for it.
        self._pair_ids = np.zeros((1, 2), dtype=np.int64)
        self._pair_ids_value = ort.OrtValue.ortvalue_from_numpy(self._pair_ids)
        self._pair_logits: np.ndarray | None = None
        self._pair_logits_value: ort.OrtValue | None = None
        self._pair_tensors: list | None = None
        self._pair_limit = 0
        # ``use_cache_branch``'s two values ([False], [True]; ORT reads them in place)
        branch = next((i for i in session.get_inputs() if i.name == graph.use_cache_branch),
                      None)
        shape = (1,) if branch is not None and branch.shape else ()
        self._cache_branch = (np.zeros(shape, dtype=bool), np.ones(shape, dtype=bool))

    @property
    def session(self) -> ort.InferenceSession:
        """The decode session (steps, verify steps, short chunks)."""
        return self._main.session

    @session.setter
    def session(self, session: ort.InferenceSession) -> None:  # benches wrap it to time it
        self._main.session = session

    def attach_prompt_session(self, session: ort.InferenceSession) -> None:
        """From now on run prompt chunks of ``MIN_PROMPT_ROWS`` tokens or more on ``session``
        (the same graph; app/engine/prompt_session.py). Not for the split layout, whose
        embeddings live on the decode session's device, nor for an ``exact`` decoder (its
        kernels round otherwise, so a cached prompt's tail would read differently)."""
        if self.embedder is not None or self.exact:
            return
        self._prompt = _Binding(session, self.device, self._keep_shape)

    @property
    def has_prompt_session(self) -> bool:
        """Whether long prompt chunks run on their own session (app/engine/prompt_session.py)."""
        return self._prompt is not None

    def _reserve(self, needed: int) -> None:
        """Make ``_mask`` and ``_positions`` cover at least ``needed`` positions (at most the
        context plus one prefill chunk)."""
        size = self._mask.shape[1]
        if needed <= size:
            return
        size = min(max(needed, 2 * size), self._input_limit)
        self._mask = np.ones((1, size), dtype=np.int64)
        self._positions = np.arange(self.position_offset, self.position_offset + size,
                                    dtype=np.int64)[None, :]

    def set_position_offset(self, offset: int) -> None:
        """Feed position ``offset + i`` for the cache's position ``i`` from now on."""
        self.position_offset = offset
        size = self._positions.shape[1]
        self._positions = np.arange(offset, offset + size, dtype=np.int64)[None, :]
        self._steady_tensors = None
        self._pair_tensors = None

    @property
    def supports_sliding_window(self) -> bool:
        """Sliding windows need absolute position ids fed from outside and a growing cache."""
        return self.graph.decode_path == "rebind" and self.graph.position_ids is not None

    def new_cache(self, *, sliding_window: int | None = None, sink: int = 4) -> KVCache:
        """An empty cache of the kind this graph's decode path needs.

        ``sliding_window`` (positions kept, sinks included) asks for a StreamingLLM cache."""
        path = self.graph.decode_path
        if sliding_window is not None:
            if not self.supports_sliding_window:
                raise ValueError("this graph cannot run a sliding window")
            return SlidingWindowCache(
                self.graph.kv_layers,
                self._ops,
                self.device,
                sink=sink,
                capacity=min(sliding_window, self.context_length),
            )
        if path == "shared":
            return SharedBufferCache(
                self.graph.kv_layers, self._ops, self.device, max_length=self.context_length,
                grouped=self.graph.grouped_attention,
            )
        if path == "rebind":
            return RebindCache(self.graph.kv_layers, self._ops, self.device)
        if path == "recurrent":
            return RecurrentCache(self.graph.kv_layers, self.graph.state_tensors, self._ops,
                                  self.device, max_checkpoints=self.max_checkpoints)
        return TokenOnlyCache()

    @property
    def can_verify(self) -> bool:
        """Whether ``verify`` can return logits for every fed token in one step (graphs that
        return every position, or that take ``logits_to_keep``)."""
        return not self.graph.logits_last_only or self._keep_input is not None

    # -- numerics ------------------------------------------------------------------------

    def calibrate(self, *, tolerance: float) -> None:
        """Once per decoder: do several-row steps (prefill chunks, verify steps) give the
        logits a one-token step gives? Quantized matmuls (MatMulNBits) take a one-row kernel
        that rounds differently, and with int8 activations 30 layers turn that into logit
        differences near 1 (FACTS.md), so speculation would change the text. Where one-row
        steps miss ``tolerance`` and two-row steps meet it (bit for bit on the starter),
        ``choose_rows`` can run one-token steps as two rows (~19% more per step on the
        starter; a guess rides in the second row for free) and speculation is exact. Where
        one-row steps meet the tolerance but not bit for bit (float GroupQueryAttention
        graphs, ~1e-6) and two-row steps are bit for bit, they run as two rows too (~7% more
        per step on the starter converted at fp32), so that a position's logits never depend
        on how it was reached there either. Measured on a scratch cache with fixed probe
        tokens (``CALIBRATION_PREFIX`` positions, then ``CALIBRATION_ROWS`` verify rows, each
        compared with a one-token step and, where those differ at all, with a two-row
        step): no conversation is touched and the
        result does not depend on one. Each CPU kind rounds in its own way (app/cpu.py); the
        measurement, not the kind, decides."""
        if self.one_row_agrees is not None:
            return
        scratch = self.new_cache()
        vocab = self.graph.vocab_size or 8
        probe = [(17 + 31 * i) % vocab for i in range(CALIBRATION_PREFIX + CALIBRATION_ROWS)]
        prefix, tail = probe[:CALIBRATION_PREFIX], probe[CALIBRATION_PREFIX:]
        if (not self.can_verify or not scratch.rewinds_anywhere
                or (scratch.max_step is not None and scratch.max_step < len(tail))
                or self.context_length < len(probe) + 1):
            self.one_row_agrees = False
            return
        rows_before = self.step_rows
        try:
            self.step_rows = 1
            self.feed(scratch, prefix)
            rows = self.verify(scratch, tail).copy()
            single = self._step_difference(scratch, len(prefix), tail, rows)
            paired = None
            if single > 0.0 and self._pairs_fit(scratch):
                self.step_rows = 2
                paired = self._step_difference(scratch, len(prefix), tail, rows)
        finally:
            self.step_rows = rows_before
        self.one_row_agrees = single <= tolerance
        self.one_row_exact = single == 0.0
        if paired is not None:
            self.pairs_agree = paired <= tolerance
            self._pairs_exact = paired == 0.0

    def _step_difference(self, cache: KVCache, start: int, tokens: list[int],
                         rows: np.ndarray) -> float:
        """The largest difference between ``rows`` (a verify step's logits for ``tokens``
        after ``start`` positions) and what this reply's one-token steps give there."""
        cache.trim_to(start)
        worst = 0.0
        for token, row in zip(tokens, rows, strict=True):
            worst = max(worst, float(np.abs(row - self.step(cache, token)).max()))
        return worst

    def adopt_calibration(self, other: Decoder) -> None:
        """Take ``other``'s ``calibrate`` results (a second session over the same graph on the
        same CPU, such as a profiling one, rounds as ``other``'s does)."""
        self.one_row_agrees = other.one_row_agrees
        self.one_row_exact = other.one_row_exact
        self.pairs_agree = other.pairs_agree
        self._pairs_exact = other._pairs_exact

    def choose_rows(self, *, pairs: bool) -> None:
        """How this reply's one-token steps run: two rows when two-row steps make several-row
        runs (prompt chunks, verify steps) agree where one-row steps do not, or equal them bit
        for bit where one-row steps agree only within the tolerance (``calibrate``), and
        either the decoder is ``exact`` (every reply: the cache then never changes one) or
        ``pairs`` is asked for (a reply that speculates or will likely quote); else one."""
        self.step_rows = 2 if (pairs or self.exact) and self.pairs_fix_rounding else 1

    @property
    def pairs_fix_rounding(self) -> bool:
        """Whether two-row steps make several-row runs agree where one-row steps do not, or
        equal them bit for bit where one-row steps agree only within the tolerance
        (``calibrate``; False until calibrated). An ``exact`` decoder's every reply then
        steps in pairs, which costs each step a second row (app/engine/engine.py
        ``STEP_PAIRS_NOTE``)."""
        return bool(self.pairs_agree and (not self.one_row_agrees or self._pairs_exact))

    @property
    def verify_agrees(self) -> bool:
        """Whether a verify step's logits equal this reply's one-token steps' within the
        calibrated tolerance (False until calibrated)."""
        return self.pairs_agree if self.step_rows == 2 else bool(self.one_row_agrees)

    @property
    def verify_exact(self) -> bool:
        """Whether they are equal bit for bit."""
        return self._pairs_exact if self.step_rows == 2 else self.one_row_exact

    def _pairs_fit(self, cache: KVCache) -> bool:
        """Whether a one-token step on ``cache`` can run as two rows: the graph writes the KV
        in place (cutting the scratch row off is free) and one more position fits."""
        return (cache.steady_step and cache.window is None and not cache.feeds_whole_sequence
                and cache.kv_length + 2 <= self.context_length
                and (self.graph.use_cache_branch is None or cache.kv_length > 0))

    def _pair_step(self, cache: KVCache, token: int, guess: int | None = None) -> np.ndarray:
        """``step`` as two rows, kept bound between steps like the one-row steady step: per
        step it writes the ids, rebinds the mask (and position ids) and runs. With ``guess``
        it is a two-token verify step over the same binding (``[token, guess]``, both rows'
        logits, a copy); without, the second row is a scratch copy of ``token``."""
        io, graph = self._main.io, self.graph
        if cache.tensors is not self._pair_tensors or len(cache.tokens) + 2 > self._pair_limit:
            if (self.embedder is not None or graph.vocab_size is None or self.device != "cpu"
                    or graph.attention_mask is None):
                if guess is not None:
                    return self._run(cache, [token, guess], all_rows=True)
                return self._run_pair(cache, token, False)
            self._bind_pair(cache)
        total = len(cache.tokens) + 2
        self._pair_ids[0, 0] = token
        self._pair_ids[0, 1] = token if guess is None else guess
        io.bind_cpu_input(graph.attention_mask, self._mask[:, :total])
        if graph.position_ids:
            io.bind_cpu_input(graph.position_ids, self._positions[:, total - 2 : total])
        self.session.run_with_iobinding(io)
        cache.append_step(token)  # the scratch row's KV lies past the cursor, never shown
        if guess is None:
            return self._pair_logits[0, 0].astype(np.float32, copy=False)
        cache.append_step(guess)
        return self._pair_logits[0].astype(np.float32, copy=True)

    def _bind_pair(self, cache: KVCache) -> None:
        """Bind everything a two-row step on ``cache`` keeps (its buffers may grow first)."""
        main, graph = self._main, self.graph
        io = main.io
        self._steady_tensors = None
        cache.make_room(2)
        self._reserve(max(cache.kv_length + 2, min(cache.capacity, self.context_length)))
        if self._pair_logits_value is None:
            self._pair_logits = np.empty((1, 2, graph.vocab_size), dtype=self._logits_dtype)
            self._pair_logits_value = ort.OrtValue.ortvalue_from_numpy(self._pair_logits)
        io.bind_ortvalue_input(graph.input_ids, self._pair_ids_value)
        main.step_id_bound = False
        if self._keep_input is not None and main.keep_bound != 2:
            main.keep[...] = 2
            io.bind_cpu_input(self._keep_input, main.keep)
            main.keep_bound = 2
        io.bind_ortvalue_output(graph.logits, self._pair_logits_value)
        main.logits_bound = False
        if graph.use_cache_branch:  # a pair step always follows a past (``_pairs_fit``)
            io.bind_cpu_input(graph.use_cache_branch, self._cache_branch[1])
        if cache.tensors is not main.tensors:
            cache.bind(io, main.bind_input, main.bind_output)
            main.tensors = cache.tensors
        self._pair_tensors = cache.tensors
        self._pair_limit = min(cache.capacity, self._mask.shape[1])

    def _run_pair(self, cache: KVCache, token: int, all_rows: bool) -> np.ndarray:
        """A one-token step as two rows (``step_rows``): ``token`` and a scratch copy whose
        position is cut off again (the next step overwrites it; the mask never shows it)."""
        rows = self._run(cache, [token, token], all_rows=True)
        cache.trim_to(len(cache) - 1)
        return rows[:1] if all_rows else rows[0]

    # -- running -------------------------------------------------------------------------

    def feed(
        self,
        cache: KVCache,
        ids: Sequence[int],
        *,
        stop: Callable[[], bool] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Run ``ids`` after what ``cache`` holds; return the last position's logits.

        Long inputs run in chunks. ``stop`` is asked before each chunk: when it says True,
        ``PrefillStopped`` is raised and ``cache`` covers exactly the chunks that ran (each
        chunk commits its tokens), so a later turn reuses them. ``progress(done)`` is called
        after each chunk with the number of ``ids`` fed so far.
        """
        if not ids:
            raise ValueError("feed() needs at least one token")
        if stop is not None and stop():
            raise PrefillStopped(0)
        if cache.feeds_whole_sequence:
            logits = self._run(cache, list(ids))
            if progress is not None:
                progress(len(ids))
            return logits
        chunk = self.prefill_chunk
        max_step = cache.max_step
        if max_step is not None:
            chunk = min(chunk, max_step)
        logits = None
        for start in range(0, len(ids), chunk):
            if start and stop is not None and stop():
                raise PrefillStopped(start)
            logits = self._run(cache, list(ids[start : start + chunk]))
            if progress is not None:
                progress(min(start + chunk, len(ids)))
        return logits

    def step(self, cache: KVCache, token: int) -> np.ndarray:
        """Feed one generated token to ``cache``; return the next position's logits.

        The decode loop's hot path. Right after a one-token step on a cache whose graph
        writes the KV in place (``steady_step``), everything stays bound (KV buffers, the
        step's id array, the logits buffer): the step writes the id, rebinds the attention
        mask (and position ids) and runs. Anything else goes through ``feed``. Per step the
        interpreter runs with caches the model's weights have just flushed, so every line
        here costs.
        """
        if self.step_rows == 2 and self._pairs_fit(cache):
            return self._pair_step(cache, token)
        if cache.tensors is self._steady_tensors and len(cache.tokens) < self._steady_limit:
            total = len(cache.tokens) + 1  # <= capacity <= context length
            self._step_id[0, 0] = token
            io, graph = self._main.io, self.graph
            io.bind_cpu_input(graph.attention_mask, self._mask[:, :total])
            if graph.position_ids:
                io.bind_cpu_input(graph.position_ids, self._positions[:, total - 1 : total])
            self.session.run_with_iobinding(io)
            cache.append_step(token)
            return self._step_logits[0, -1].astype(np.float32, copy=False)
        return self.feed(cache, [token])

    def verify(self, cache: KVCache, tokens: Sequence[int]) -> np.ndarray:
        """Run ``tokens`` after what ``cache`` holds in one step; return their logits as a
        float32 array ``[len(tokens), vocab]`` (row i: the distribution after ``tokens[i]``).

        The speculative decoder's verify step. It is never chunked, so the tokens must fit one
        step (``cache.max_step``); the cache then covers them all and the caller rewinds it
        with ``trim_to`` to drop what was rejected."""
        if not self.can_verify:
            raise ValueError("this graph returns logits for the last position only")
        if not tokens:
            raise ValueError("verify() needs at least one token")
        if len(tokens) == 2 and self.step_rows == 2 and self._pairs_fit(cache):
            # one guess riding in the plain step's second row: keep the steps' binding
            return self._pair_step(cache, tokens[0], tokens[1])
        return self._run(cache, list(tokens), all_rows=True)

    def _logits_target(self, rows: int) -> ort.OrtValue | None:
        """A reusable buffer for single-row logits, so decode steps allocate nothing."""
        vocab = self.graph.vocab_size
        if rows != 1 or vocab is None or self.device != "cpu":
            return None
        if self._step_logits_value is None:
            self._step_logits = np.empty((1, 1, vocab), dtype=self._logits_dtype)
            self._step_logits_value = ort.OrtValue.ortvalue_from_numpy(self._step_logits)
        return self._step_logits_value

    def _run(self, cache: KVCache, new: list[int], *, all_rows: bool = False) -> np.ndarray:
        if len(new) == 1 and self.step_rows == 2 and self._pairs_fit(cache):
            return self._run_pair(cache, new[0], all_rows)
        graph = self.graph
        self._steady_tensors = None  # whatever follows rebinds: no steady step until it ends
        self._pair_tensors = None
        if cache.feeds_whole_sequence:
            feed_ids = [*cache.tokens, *new]
            past = 0
        else:
            feed_ids = new
            cache.make_room(len(new))  # a sliding window evicts, a shared buffer grows
            past = cache.kv_length
        count = len(feed_ids)
        total = past + count
        if total > self.context_length:
            raise ContextOverflowError(
                f"The model's context holds {self.context_length} tokens; this step needs {total}.",
                hint="Start a new chat or shorten the conversation.",
            )
        # One IOBinding per session lives as long as the decoder: per step only the small
        # inputs are rebound; the KV bindings change only when the cache's tensors do.
        lane = self._main
        if (self._prompt is not None and count >= MIN_PROMPT_ROWS and not all_rows
                and not cache.feeds_whole_sequence):
            lane = self._prompt
        io = lane.io
        if self.embedder is not None:  # split layout: the embedding graph's outputs, on device
            for name, value in self.embedder.embed(feed_ids):
                io.bind_ortvalue_input(name, value)
        elif count == 1:
            self._step_id[0, 0] = feed_ids[0]
            if not lane.step_id_bound:
                io.bind_ortvalue_input(graph.input_ids, self._step_id_value)
                lane.step_id_bound = True
        else:
            io.bind_cpu_input(graph.input_ids, np.asarray([feed_ids], dtype=np.int64))
            lane.step_id_bound = False
        self._reserve(max(total, min(cache.capacity, self.context_length)))
        if graph.attention_mask:
            io.bind_cpu_input(graph.attention_mask, self._mask[:, :total])
        if graph.use_cache_branch:  # Optimum's merged decoder: the past branch once there is one
            io.bind_cpu_input(graph.use_cache_branch, self._cache_branch[past > 0])
        if graph.position_ids:
            start = cache.next_position
            self._reserve(min(start + count, self._input_limit))
            if start + count <= self._positions.shape[1]:
                positions = self._positions[:, start : start + count]
            else:  # sliding windows keep absolute positions past the context length
                first = start + self.position_offset
                positions = np.arange(first, first + count, dtype=np.int64)[None, :]
            io.bind_cpu_input(graph.position_ids, positions)
        rows = count if not self._last_only or all_rows else 1
        if self._keep_input is not None and lane.keep_bound != rows:
            lane.keep[...] = rows
            io.bind_cpu_input(self._keep_input, lane.keep)
            lane.keep_bound = rows
        target = self._logits_target(rows)
        if target is None:
            io.bind_output(graph.logits, "cpu")
            lane.logits_bound = False
        elif not lane.logits_bound:
            io.bind_ortvalue_output(graph.logits, target)
            lane.logits_bound = True
        rebinds = cache.rebinds_each_step
        tensors = cache.tensors
        if rebinds or tensors is not lane.tensors:
            cache.bind(io, lane.bind_input, lane.bind_output)
            lane.tensors = tensors
        lane.session.run_with_iobinding(io)
        outputs = lane.read_outputs() if (rebinds or target is None) else ()
        cache.commit(outputs[1:] if rebinds else (), new)
        if (count == 1 and target is not None and graph.attention_mask is not None
                and cache.steady_step and self.embedder is None
                and (graph.use_cache_branch is None or past > 0)):
            self._steady_tensors = tensors
            self._steady_limit = min(cache.capacity, self._mask.shape[1])
        if all_rows:
            if target is not None:
                return self._step_logits[0].astype(np.float32)
            return np.array(outputs[0].numpy()[0, -len(new):], dtype=np.float32)
        if target is not None:
            return self._step_logits[0, -1].astype(np.float32, copy=False)
        return np.asarray(outputs[0].numpy()[0, -1], dtype=np.float32)
