"""Prefix-token cache across chat turns: cached, rewound and reused output must equal a fresh
run token for token, on every decode path."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest

from app.engine.conversation_caches import ConversationCaches
from app.engine.engine import Engine
from app.engine.kv_cache import SlidingWindowCache
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.errors import ContextOverflowError
from tests.fixtures.tiny_models import build_plain_kv_model

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=12)
SEEDED = GenerationSettings(
    sampling=SamplingSettings(temperature=0.9, top_k=40, top_p=0.95, seed=1234),
    max_new_tokens=12,
)
USER_TURNS = [
    "Hello there, who keeps the lighthouse?",
    "Tell me about the glass lens.",
    "Why do ships need the light at night?",
    "Thank you, that was very helpful!",
]


_CACHES: dict[Engine, ConversationCaches] = {}


def caches_of(engine: Engine, **kwargs) -> ConversationCaches:
    """The conversation caches the tests' chats with ``engine`` go through."""
    if engine not in _CACHES or kwargs:
        _CACHES[engine] = engine.conversation_caches(**kwargs)
    return _CACHES[engine]


def reply(engine: Engine, messages, settings, **kwargs):
    if kwargs.get("conversation_id") is not None:
        kwargs["caches"] = caches_of(engine)
    chunks = list(engine.chat(messages, settings, **kwargs))
    tokens = [c.token_id for c in chunks if c.token_id is not None]
    text = "".join(c.text for c in chunks)
    return tokens, text, chunks[-1]


@pytest.fixture(scope="module")
def engines(request):
    """(cached engine, fresh engine) per model fixture name, loaded once per module."""
    loaded = {}

    def get(fixture_name: str):
        if fixture_name not in loaded:
            folder = request.getfixturevalue(fixture_name)
            loaded[fixture_name] = (
                Engine.load(folder, provider="cpu", threads=1),
                Engine.load(folder, provider="cpu", threads=1),
            )
        return loaded[fixture_name]

    return get


def fresh(engine: Engine, messages, settings):
    """What a fresh engine answers: no reuse of anything."""
    return reply(engine, messages, settings, reuse=False, conversation_id="fresh")


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir", "nokv_model_dir"])
def test_multi_turn_chat_with_reuse_equals_fresh_engine(engines, model, settings):
    cached, reference = engines(model)
    messages = [Message("system", "You are a helpful keeper.")]
    previous_prompt = 0
    for turn, text in enumerate(USER_TURNS):
        messages.append(Message("user", text))
        tokens, answer, final = reply(cached, messages, settings, conversation_id="a")
        expected, _, _ = fresh(reference, messages, settings)
        assert tokens == expected, f"turn {turn + 1} differs"
        stats = final.stats
        assert stats.prefilled_tokens + stats.reused_tokens == stats.prompt_tokens
        if turn and model != "nokv_model_dir":
            # At least the whole previous prompt is reused; only the new turn is prefilled.
            assert stats.reused_tokens >= previous_prompt
        previous_prompt = stats.prompt_tokens
        messages.append(Message("assistant", answer))


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_regenerate_edit_and_delete_reuse_the_valid_prefix(engines, model):
    cached, reference = engines(model)
    base = [Message("system", "Be brief."), Message("user", USER_TURNS[0])]
    _, first, _ = reply(cached, base, GREEDY, conversation_id="r")
    convo = [*base, Message("assistant", first), Message("user", USER_TURNS[1])]
    tokens, _, final = reply(cached, convo, SEEDED, conversation_id="r")
    prompt_len = final.stats.prompt_tokens

    # Regenerate: same conversation, the last reply dropped.
    tokens, _, final = reply(cached, convo, SEEDED, conversation_id="r")
    assert tokens == fresh(reference, convo, SEEDED)[0]
    assert final.stats.reused_tokens == prompt_len - 1

    # Delete the last turn: the shorter conversation is a prefix of what is cached.
    tokens, _, final = reply(cached, base, GREEDY, conversation_id="r")
    assert tokens == fresh(reference, base, GREEDY)[0]
    assert final.stats.reused_tokens == final.stats.prompt_tokens - 1

    # Rewind then diverge: edit the earlier user message.
    edited = [base[0], Message("user", "A completely different question?"), *convo[2:]]
    tokens, _, final = reply(cached, edited, GREEDY, conversation_id="r")
    assert tokens == fresh(reference, edited, GREEDY)[0]
    assert 0 < final.stats.reused_tokens < prompt_len // 2


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_cancel_mid_reply_then_continue(engines, model):
    cached, reference = engines(model)
    messages = [Message("user", USER_TURNS[0])]
    cancel = threading.Event()
    parts = []
    stream = cached.chat(messages, GREEDY, cancel=cancel, caches=caches_of(cached),
                         conversation_id="c")
    for chunk in stream:
        parts.append(chunk)
        if len(parts) == 3:
            cancel.set()
    assert parts[-1].finish_reason == "cancelled"
    assert parts[-1].stats.generated_tokens == 3
    partial = "".join(c.text for c in parts)
    messages += [Message("assistant", partial), Message("user", USER_TURNS[1])]
    tokens, _, final = reply(cached, messages, GREEDY, conversation_id="c")
    assert tokens == fresh(reference, messages, GREEDY)[0]
    assert final.stats.reused_tokens > 0


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_switching_chats_keeps_each_cache(engines, model):
    cached, reference = engines(model)
    chat_a = [Message("user", USER_TURNS[0])]
    chat_b = [Message("user", "Something else entirely, please.")]
    _, answer_a, first_a = reply(cached, chat_a, GREEDY, conversation_id="A")
    _, answer_b, first_b = reply(cached, chat_b, GREEDY, conversation_id="B")
    assert "A" in caches_of(cached).parked_ids
    chat_a += [Message("assistant", answer_a), Message("user", USER_TURNS[1])]
    tokens, _, final = reply(cached, chat_a, GREEDY, conversation_id="A")
    assert tokens == fresh(reference, chat_a, GREEDY)[0]
    assert final.stats.reused_tokens >= first_a.stats.prompt_tokens
    chat_b += [Message("assistant", answer_b), Message("user", USER_TURNS[2])]
    tokens, _, final = reply(cached, chat_b, GREEDY, conversation_id="B")
    assert tokens == fresh(reference, chat_b, GREEDY)[0]
    assert final.stats.reused_tokens >= first_b.stats.prompt_tokens


def test_snapshot_budget_drops_least_recent_chat(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches_of(engine, budget_bytes=1)  # nothing can stay parked
    reply(engine, [Message("user", "first chat")], GREEDY, conversation_id="A")
    reply(engine, [Message("user", "second chat")], GREEDY, conversation_id="B")
    assert caches_of(engine).parked_ids == []
    _, _, final = reply(engine, [Message("user", "first chat")], GREEDY, conversation_id="A")
    assert final.stats.reused_tokens == 0


def test_history_that_does_not_retokenize_still_gives_correct_output(engines):
    cached, reference = engines("plain_model_dir")
    messages = [Message("user", USER_TURNS[0])]
    _, answer, _ = reply(cached, messages, GREEDY, conversation_id="t")
    # The stored reply differs from the generated ids (a template that strips, an edited
    # reply): reuse must stop at the divergence.
    messages += [Message("assistant", "  " + answer.upper() + "  "), Message("user", "ok")]
    tokens, _, final = reply(cached, messages, GREEDY, conversation_id="t")
    assert tokens == fresh(reference, messages, GREEDY)[0]
    assert final.stats.reused_tokens < final.stats.prompt_tokens


# -- context overflow -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_context_dir(tmp_path_factory):
    return build_plain_kv_model(tmp_path_factory.mktemp("ctx96") / "m", context_length=96)


def long_chat(turns: int) -> list[Message]:
    messages = [Message("system", "Keep it short.")]
    for i in range(turns):
        messages.append(Message("user", f"Question number {i}: what happens at the harbour?"))
        messages.append(Message("assistant", f"Answer {i}: the boats come home at dusk."))
    messages.append(Message("user", "And tomorrow?"))
    return messages


def test_stop_policy_refuses_with_a_clear_message_and_engine_stays_usable(small_context_dir):
    engine = Engine.load(small_context_dir, provider="cpu", threads=1)
    with pytest.raises(ContextOverflowError, match="context holds 96"):
        engine.chat(long_chat(6), GREEDY)
    tokens, _, final = reply(engine, [Message("user", "hi")], GREEDY)
    assert final.finish_reason in ("eos", "max_tokens") and tokens


def test_truncate_oldest_keeps_system_prompt_and_equals_fresh(small_context_dir):
    engine = Engine.load(small_context_dir, provider="cpu", threads=1)
    reference = Engine.load(small_context_dir, provider="cpu", threads=1)
    settings = GenerationSettings(
        sampling=SamplingSettings(temperature=0.0),
        max_new_tokens=12,
        context_policy="truncate_oldest",
    )
    messages = long_chat(6)
    tokens, _, final = reply(engine, messages, settings)
    dropped = final.stats.dropped_messages
    assert dropped >= 2 and dropped % 2 == 0
    assert "oldest" in final.stats.context_note
    kept = [messages[0], *messages[1 + dropped :]]
    assert final.stats.prompt_tokens + 12 <= 96
    assert tokens == fresh(reference, kept, settings)[0]


class SlidingReference:
    """StreamingLLM by hand with numpy: sinks + window, absolute positions, same chunking."""

    def __init__(self, model_path, graph, *, sink: int, capacity: int, chunk: int):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"]
        )
        self.graph, self.sink, self.capacity, self.chunk = graph, sink, capacity, chunk
        shape = (1, graph.kv_layers[0].kv_heads, 0, graph.kv_layers[0].head_dim)
        self.past = {
            n: np.zeros(shape, np.float32)
            for layer in graph.kv_layers
            for n in (layer.past_key, layer.past_value)
        }
        self.position = 0

    def feed(self, ids: list[int]) -> np.ndarray:
        logits = None
        for start in range(0, len(ids), self.chunk):
            logits = self._step(ids[start : start + self.chunk])
        return logits

    def _step(self, ids: list[int]) -> np.ndarray:
        held = next(iter(self.past.values())).shape[2]
        overflow = held + len(ids) - self.capacity
        if overflow > 0:
            for name, value in self.past.items():
                self.past[name] = np.concatenate(
                    [value[:, :, : self.sink], value[:, :, self.sink + overflow :]], axis=2
                )
            held -= overflow
        feeds = {
            self.graph.input_ids: np.asarray([ids], np.int64),
            self.graph.attention_mask: np.ones((1, held + len(ids)), np.int64),
            self.graph.position_ids: np.arange(self.position, self.position + len(ids))[None],
            **self.past,
        }
        names = [self.graph.logits] + [
            n for layer in self.graph.kv_layers for n in (layer.present_key, layer.present_value)
        ]
        out = self.session.run(names, feeds)
        for layer_index, layer in enumerate(self.graph.kv_layers):
            self.past[layer.past_key] = out[1 + 2 * layer_index]
            self.past[layer.past_value] = out[2 + 2 * layer_index]
        self.position += len(ids)
        return out[0][0, -1]


def test_sliding_window_equals_reference_with_the_same_window(small_context_dir):
    engine = Engine.load(small_context_dir, provider="cpu", threads=1)
    engine.decoder.prefill_chunk = 16
    settings = GenerationSettings(
        sampling=SamplingSettings(temperature=0.0),
        max_new_tokens=60,
        context_policy="sliding_window",
    )
    messages = long_chat(4)
    ids = engine.encode_chat(messages)
    assert len(ids) + 60 > 96  # the reply runs past the context: eviction must happen
    tokens, _, final = reply(engine, messages, settings, conversation_id="w")
    cache = caches_of(engine).get("w", window=True)
    assert isinstance(cache, SlidingWindowCache) and cache.evicted_end > cache.sink
    assert final.finish_reason in ("eos", "max_tokens")

    chunk = min(16, (96 - 4) // 2)
    reference = SlidingReference(
        engine.spec.model_path, engine.graph, sink=4, capacity=96, chunk=chunk
    )
    logits = reference.feed(ids)
    expected = []
    for _ in range(len(tokens)):
        token = int(np.argmax(logits))
        expected.append(token)
        if token in engine.eos_token_ids:
            break
        logits = reference.feed([token])
    assert tokens == expected


def test_sliding_window_rewind_into_evicted_gap_resets(small_context_dir):
    engine = Engine.load(small_context_dir, provider="cpu", threads=1)
    settings = GenerationSettings(
        sampling=SamplingSettings(temperature=0.0),
        max_new_tokens=8,
        context_policy="sliding_window",
    )
    reply(engine, long_chat(5), settings, conversation_id="s")
    assert caches_of(engine).get("s", window=True).evicted_end > 0
    short = [Message("user", "A new start.")]  # diverges inside the evicted gap
    tokens, _, final = reply(engine, short, settings, conversation_id="s")
    assert final.stats.reused_tokens == 0
    assert "rewind refused" in (final.stats.reuse_refused or "")
    reference = Engine.load(small_context_dir, provider="cpu", threads=1)
    assert tokens == fresh(reference, short, settings)[0]
