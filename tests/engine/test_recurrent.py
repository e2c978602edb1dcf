"""Hybrid recurrent models (LFM2 / Qwen3.5-like: conv and gated linear-recurrence layers with
fixed states beside attention layers): the states cannot be cut back, so prefix reuse restores
a checkpoint taken at a turn boundary and prefills the rest. Reused output must equal a fresh
run token for token."""

from __future__ import annotations

import pytest

from app.engine.engine import Engine
from app.engine.graph_info import describe_session
from app.engine.kv_cache import CacheRewindError, RecurrentCache
from app.engine.sampling import make_sampler
from app.engine.speculative import DraftModel, make_speculator
from app.engine.types import GenerationSettings, Message, SamplingSettings
from tests.fixtures.tiny_models import build_hybrid_model

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=10)
SEEDED = GenerationSettings(sampling=SamplingSettings(temperature=0.9, top_k=40, seed=7),
                            max_new_tokens=10)
TURNS = ["Who keeps the lighthouse?", "And the glass lens?", "Why at night?",
         "What about storms?", "Thank you, keeper!"]


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory):
    return build_hybrid_model(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def engines(hybrid_dir):
    """(engine whose caches are reused, reference engine that never reuses)."""
    return (Engine.load(hybrid_dir, provider="cpu", threads=1, huge_pages=False),
            Engine.load(hybrid_dir, provider="cpu", threads=1, huge_pages=False))


def reply(engine, messages, settings=GREEDY, **kwargs):
    chunks = list(engine.chat(messages, settings, **kwargs))
    return ([c.token_id for c in chunks if c.token_id is not None],
            "".join(c.text for c in chunks), chunks[-1].stats)


# Every producer's state names: (conv past, conv present, recurrent past, recurrent present)
STATE_NAMINGS = {
    "transformers.js": ("past_conv.0", "present_conv.0", "past_recurrent.2",
                        "present_recurrent.2"),
    "optimum": ("past_key_values.0.conv_state", "present.0.conv_state",
                "past_key_values.2.recurrent_state", "present.2.recurrent_state"),
    "genai": ("past.0.conv", "present.0.conv", "past.2.recurrent", "present.2.recurrent"),
}


@pytest.mark.parametrize("naming", sorted(STATE_NAMINGS))
def test_state_tensors_pair_up_and_pick_the_recurrent_path(tmp_path, naming):
    folder = build_hybrid_model(tmp_path / "m", naming=naming,
                                layer_types=("conv", "attention", "recurrent"))
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    graph = describe_session(engine.decoder.session, engine.spec.model_path)
    assert graph.decode_path == "recurrent"
    assert [layer.past_key for layer in graph.kv_layers] == ["past_key_values.1.key"]
    conv_past, conv_present, rec_past, rec_present = STATE_NAMINGS[naming]
    assert [(s.past, s.present, s.shape, s.kind) for s in graph.state_tensors] == [
        (conv_past, conv_present, (1, 64, 2), "conv"),
        (rec_past, rec_present, (1, 2, 16), "recurrent")]
    assert isinstance(engine.new_cache(), RecurrentCache)


@pytest.mark.parametrize("naming", ["optimum", "genai"])
def test_every_state_naming_gives_the_same_reply(tmp_path, engines, naming):
    """The same weights under another producer's names reply as transformers.js's do."""
    folder = build_hybrid_model(tmp_path / "m", naming=naming)
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    messages = [Message("user", TURNS[0])]
    assert reply(engine, messages, reuse=False)[0] == reply(engines[1], messages,
                                                            reuse=False)[0]


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_multi_turn_chat_with_checkpoints_equals_fresh_runs(engines, settings):
    cached, reference = engines
    caches = cached.conversation_caches()
    messages = [Message("system", "Answer briefly.")]
    for turn, text in enumerate(TURNS):
        messages.append(Message("user", text))
        tokens, answer, stats = reply(cached, messages, settings, caches=caches,
                                      conversation_id="c")
        expected, _, _ = reply(reference, messages, settings, reuse=False)
        assert tokens == expected, f"turn {turn + 1}"
        assert stats.speculation == "off"
        if turn:
            assert stats.reused_tokens > 0 and stats.reuse_refused is None
        cache = caches.get("c")
        assert len(cache.checkpoints) <= cache.max_checkpoints
        messages.append(Message("assistant", answer))
    assert len(cache.checkpoints) == cache.max_checkpoints  # bounded: the oldest went


def test_regenerate_restores_the_turn_boundary_checkpoint(engines):
    cached, reference = engines
    caches = cached.conversation_caches()
    messages = [Message("user", TURNS[0])]
    _, answer, _ = reply(cached, messages, caches=caches, conversation_id="r")
    messages += [Message("assistant", answer), Message("user", TURNS[1])]
    first, _, _ = reply(cached, messages, caches=caches, conversation_id="r")
    boundary = caches.get("r").checkpoints
    again, _, stats = reply(cached, messages, caches=caches, conversation_id="r")
    expected, _, _ = reply(reference, messages, reuse=False)
    assert first == again == expected
    # One token short of the prompt has no checkpoint: the one where the first turn ended
    # comes back and the second question is prefilled again.
    assert stats.reused_tokens in boundary and stats.reused_tokens < stats.prompt_tokens - 1
    assert "checkpoint" in stats.reuse_refused


def test_an_edit_before_every_checkpoint_falls_back_to_a_fresh_prefill(engines):
    cached, reference = engines
    caches = cached.conversation_caches()
    messages = [Message("system", "Answer briefly."), Message("user", TURNS[0])]
    _, answer, _ = reply(cached, messages, caches=caches, conversation_id="e")
    messages += [Message("assistant", answer), Message("user", TURNS[1])]
    reply(cached, messages, caches=caches, conversation_id="e")
    edited = [Message("system", "Answer briefly."), Message("user", "Who paints the tower?")]
    tokens, _, stats = reply(cached, edited, caches=caches, conversation_id="e")
    expected, _, _ = reply(reference, edited, reuse=False)
    assert tokens == expected
    assert stats.reused_tokens == 0  # the shared system prompt ends before any checkpoint
    assert stats.prefilled_tokens == stats.prompt_tokens


def test_trim_to_a_length_without_a_checkpoint_raises_and_changes_nothing(engines):
    engine, _ = engines
    decoder = engine.decoder
    cache = decoder.new_cache()
    ids = engine.tokenizer.encode("The keeper climbs the stairs to light the lamp")
    decoder.feed(cache, ids[:5])
    cache.checkpoint()
    logits = decoder.feed(cache, ids[5:])
    tensors = cache.tensors
    assert cache.can_trim_to(5) and not cache.can_trim_to(7)
    assert cache.rewind_point(7) == 5 and cache.rewind_point(4) == 0
    with pytest.raises(CacheRewindError):
        cache.trim_to(7)
    assert list(cache.tokens) == ids and cache.tensors is tensors
    # Restoring the checkpoint and feeding the rest gives the same logits again.
    cache.trim_to(5)
    assert cache.checkpoints == [5] and len(cache) == 5
    again = decoder.feed(cache, ids[5:])
    assert abs(again - logits).max() < 1e-5
    cache.reset()
    assert cache.checkpoints == [] and len(cache) == 0
    assert abs(decoder.feed(cache, ids) - logits).max() < 1e-5


def test_speculation_is_off_because_the_cache_cannot_be_cut_anywhere(engines):
    cached, reference = engines
    ids = cached.tokenizer.encode("ab ab ab ab ab ab ab ab ab ab ab ab")
    lookup = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=20,
                                speculation="lookup")
    chunks = list(cached.generate(ids, lookup, reuse=False))
    assert chunks[-1].stats.speculation == "off"
    assert not cached.new_cache().rewinds_anywhere
    off = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=20,
                             speculation="off")
    expected = [c.token_id for c in reference.generate(ids, off, reuse=False)
                if c.token_id is not None]
    assert [c.token_id for c in chunks if c.token_id is not None] == expected


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_switching_between_two_chats_equals_fresh_runs(engines, settings, tmp_path):
    cached, reference = engines
    caches = cached.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=1)
    chats = {cid: [Message("system", f"You are keeper {cid}.")] for cid in "AB"}
    for turn in range(3):
        for cid in "AB":
            chats[cid].append(Message("user", TURNS[turn + (cid == "B")]))
            tokens, answer, stats = reply(cached, chats[cid], settings, caches=caches,
                                          conversation_id=cid)
            expected, _, _ = reply(reference, chats[cid], settings, reuse=False)
            assert tokens == expected, f"chat {cid}, turn {turn + 1}"
            if turn:
                assert stats.reused_tokens > 0  # parked in memory, not lost
            chats[cid].append(Message("assistant", answer))
    assert caches.parked_ids == ["A"]
    # best_prefix answers with what the cache can really rewind to.
    cid, shared = caches.best_prefix(cached.encode_chat(chats["A"][:2]))
    assert cid == "A" and shared in caches.get("A").checkpoints
    # Not exportable: nothing reaches the disk, and closing does not fail.
    assert not caches.get("A").exportable
    caches.close()
    assert list((tmp_path / "kv").rglob("*.npz")) == []


def test_a_tight_budget_drops_parked_caches_and_answers_stay_exact(engines, tmp_path):
    cached, reference = engines
    caches = cached.conversation_caches(budget_bytes=1, snapshot_folder=tmp_path / "kv",
                                        min_tokens=1)
    chats = {cid: [Message("user", TURNS[i])] for i, cid in enumerate("AB")}
    for _ in range(2):
        for cid in "AB":
            tokens, answer, _ = reply(cached, chats[cid], caches=caches, conversation_id=cid)
            expected, _, _ = reply(reference, chats[cid], reuse=False)
            assert tokens == expected
            assert caches.parked_ids == []
            chats[cid] += [Message("assistant", answer), Message("user", TURNS[2])]


def test_a_recurrent_draft_model_is_not_used_for_proposals(engines, plain_model_dir):
    hybrid, _ = engines
    target = Engine.load(plain_model_dir, provider="cpu", threads=1, huge_pages=False)
    draft = DraftModel(hybrid.decoder)
    sampler = make_sampler(SamplingSettings(temperature=0.0))
    spec = make_speculator("draft", target.decoder, target.new_cache(), sampler, draft=draft)
    assert spec is not None and spec.proposer.name == "lookup"
