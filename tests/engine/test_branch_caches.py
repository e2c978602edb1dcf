"""Branch tips in ConversationCaches: after a regenerate, switching back to the first version
and continuing prefills only the new turn and answers exactly as a fresh run; many branches
stay within the memory budget, oldest tips leaving first; ``forget`` drops every tip."""

from __future__ import annotations

import pytest

from app.engine.conversation_caches import ConversationCaches
from app.engine.engine import Engine
from app.engine.kv_cache import common_prefix_length
from app.engine.types import GenerationSettings, Message, SamplingSettings

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=24)
BASE = [Message("system", "Answer briefly."), Message("user", "Who keeps the lighthouse?")]
FOLLOW_UP = Message("user", "And the glass lens?")


def seeded(seed: int) -> GenerationSettings:
    """Sampling that gives another reply per seed (what Regenerate does)."""
    return GenerationSettings(sampling=SamplingSettings(temperature=1.0, seed=seed),
                              max_new_tokens=24)


def reply(engine, messages, settings, **kwargs):
    chunks = list(engine.chat(messages, settings, **kwargs))
    return [c.token_id for c in chunks if c.token_id is not None], \
        "".join(c.text for c in chunks), chunks[-1].stats


def version_1(engine, caches):
    """A two-turn chat (version 1); returns its messages and the second reply's stats."""
    _, a1, _ = reply(engine, BASE, seeded(1), caches=caches, conversation_id="c")
    messages = [*BASE, Message("assistant", a1), Message("user", "Why at night?")]
    _, a2, stats = reply(engine, messages, seeded(3), caches=caches, conversation_id="c")
    return [*messages, Message("assistant", a2)], stats


def regenerate_then_switch_back(engine, caches):
    """Version 1, then the first reply regenerated (version 2), then version 1 shown again
    and continued. Returns version 1's second-turn stats, version 1's tip's tokens just
    before the switch back, the continuation's prompt ids, reply tokens and stats."""
    v1, v1_stats = version_1(engine, caches)
    _, regenerated, _ = reply(engine, BASE, seeded(2), caches=caches, conversation_id="c")
    assert regenerated != v1[2].content  # the regenerate really made another version
    continued = [*v1, FOLLOW_UP]
    ids = engine.encode_chat(continued)
    tip = max(caches.tips("c"), key=lambda cache: common_prefix_length(cache.tokens, ids))
    tip_tokens, tips = list(tip.tokens), len(caches.tips("c"))
    tokens, _, stats = reply(engine, continued, GREEDY, caches=caches, conversation_id="c")
    # Continuing a version is no new branch: its tip is trimmed and extended in place.
    assert len(caches.tips("c")) == tips and caches.tips("c")[0] is tip
    return v1_stats, tip_tokens, continued, tokens, stats


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_switching_back_after_a_regenerate_prefills_only_the_new_turn(model, request):
    folder = request.getfixturevalue(model)
    engine = Engine.load(folder, provider="cpu", threads=1)
    reference = Engine.load(folder, provider="cpu", threads=1)
    caches = engine.conversation_caches()

    v1_stats, tip_tokens, continued, tokens, stats = regenerate_then_switch_back(engine, caches)

    expected, _, _ = reply(reference, continued, GREEDY, reuse=False)
    assert tokens == expected  # token for token what a run without caches answers
    ids = engine.encode_chat(continued)
    # Version 1's whole last prompt is reused, and of its last reply as much as the text
    # re-tokenizes to the tokens sampled (the tiny model's random replies do so for only a
    # few tokens): all the version-1 cache matches, exactly what continuing it without the
    # regenerate in between reuses.
    assert stats.reused_tokens >= v1_stats.prompt_tokens
    assert stats.reused_tokens == min(common_prefix_length(tip_tokens, ids), len(ids) - 1)
    assert stats.prefilled_tokens == len(ids) - stats.reused_tokens
    unbranched = Engine.load(folder, provider="cpu", threads=1)
    straight = unbranched.conversation_caches()
    version_1(unbranched, straight)
    _, _, control = reply(unbranched, continued, GREEDY, caches=straight, conversation_id="c")
    assert stats.reused_tokens == control.reused_tokens

    # One tip per conversation (the behaviour before branch tips) keeps only the prefix
    # both versions share, the first prompt, and reads the rest of version 1 again.
    single = Engine.load(folder, provider="cpu", threads=1)
    _, _, _, _, before = regenerate_then_switch_back(
        single, ConversationCaches(single.new_cache, budget_bytes=caches.budget_bytes,
                                   tips_per_conversation=1))
    assert before.reused_tokens <= len(engine.encode_chat(BASE))
    print(f"\n{model}: switching back to version 1 prefilled {before.prefilled_tokens} of "
          f"{before.prompt_tokens} tokens with one tip per conversation, "
          f"{stats.prefilled_tokens} of {stats.prompt_tokens} with branch tips")


@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_a_plain_multi_turn_chat_keeps_one_tip(model, request):
    # The tiny model's replies re-tokenize differently, so each new prompt leaves the tip
    # inside its last reply: that continues the tip, it is not another version of it.
    engine = Engine.load(request.getfixturevalue(model), provider="cpu", threads=1)
    caches = engine.conversation_caches()
    messages = list(BASE)
    for turn, question in enumerate(["And the lens?", "Why at night?", "Thanks!"]):
        _, answer, _ = reply(engine, messages, seeded(turn), caches=caches,
                             conversation_id="c")
        assert len(caches.tips("c")) == 1 and caches.parked_bytes == 0
        messages += [Message("assistant", answer), Message("user", question)]


def test_the_version_left_behind_stays_parked_and_the_new_one_is_active(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches()
    v1, _, _ = reply(engine, BASE, seeded(1), caches=caches, conversation_id="c")
    v2, _, stats = reply(engine, BASE, seeded(2), caches=caches, conversation_id="c")
    active, parked = caches.tips("c")
    prompt = len(engine.encode_chat(BASE))
    assert list(parked.tokens[prompt:]) == v1[:len(parked) - prompt]
    assert list(active.tokens[prompt:]) == v2[:len(active) - prompt]
    assert stats.reused_tokens == prompt - 1  # the regenerate itself reused the prompt
    assert caches.parked_bytes == parked.nbytes
    assert caches.parked_ids == []  # no other conversation is parked


def test_a_tip_another_one_covers_is_not_kept_twice(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches()
    reply(engine, BASE, GREEDY, caches=caches, conversation_id="c")
    # A greedy regenerate writes the same reply again: the copy is the tip, once.
    reply(engine, BASE, GREEDY, caches=caches, conversation_id="c")
    assert len(caches.tips("c")) == 2  # the new branch is active, its twin still parked
    reply(engine, [Message("user", "Something else.")], GREEDY, caches=caches,
          conversation_id="other")
    assert len(caches.tips("c")) == 1


def test_many_branches_stay_within_the_budget_and_the_oldest_tips_leave(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    probe = engine.conversation_caches()
    reply(engine, BASE, GREEDY, caches=probe, conversation_id="probe")
    one_tip = probe.tips("probe")[0].nbytes
    caches = engine.conversation_caches(budget_bytes=int(2.5 * one_tip))

    made = []  # (conversation, seed) of every version, oldest first
    for cid in ("A", "B"):
        for seed in range(1, 6):
            reply(engine, BASE, seeded(seed), caches=caches, conversation_id=cid)
            made.append((cid, list(caches.tips(cid)[0].tokens)))
            assert caches.parked_bytes <= caches.budget_bytes
            assert len(caches.tips(cid)) <= caches.tips_per_conversation
            if cid == "A":  # at most three tips: the newest
                assert [list(c.tokens) for c in caches.tips("A")] == \
                    [tokens for _, tokens in reversed(made[-3:])]
        if cid == "A":
            reply(engine, [Message("user", "Something else.")], GREEDY, caches=caches,
                  conversation_id="B")
            # A's three tips are all parked now, over the budget: the oldest one left.
            assert [list(c.tokens) for c in caches.tips("A")] == \
                [tokens for _, tokens in reversed(made[-2:])]
            caches.forget("B")
    kept = [tokens for cid in ("A", "B") for tokens in
            (list(cache.tokens) for cache in caches.tips(cid))]
    # What stays is the newest: B's active tip and the parked tips the budget allows,
    # newest first (B's two other tips); all of A's have left.
    assert caches.tips("A") == []
    assert kept == [tokens for _, tokens in reversed(made[-3:])]


def test_forget_drops_every_tip_of_the_conversation(plain_model_dir, tmp_path):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=1)
    for seed in (1, 2, 3):
        reply(engine, BASE, seeded(seed), caches=caches, conversation_id="c")
    reply(engine, [Message("user", "Something else.")], GREEDY, caches=caches,
          conversation_id="other")
    assert len(caches.tips("c")) == 3
    caches.save_all()
    assert len(list((tmp_path / "kv").rglob("*.npz"))) == 2  # one snapshot per conversation
    ids = engine.encode_chat(BASE)

    caches.forget("c")
    assert caches.tips("c") == [] and caches.parked_ids == []
    assert caches.best_prefix(ids)[0] == "other"  # it shares only the system prompt
    assert len(list((tmp_path / "kv").rglob("*.npz"))) == 1
    _, _, stats = reply(engine, BASE, GREEDY, caches=caches, conversation_id="c")
    assert stats.reused_tokens == 0  # nothing of it came back from memory or disk
