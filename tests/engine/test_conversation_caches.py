"""ConversationCaches: conversations interleaved through a memory budget (and disk) answer
exactly as a fresh engine does, and ``best_prefix`` finds the cached conversation a resent
prompt continues."""

from __future__ import annotations

import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=10)
SEEDED = GenerationSettings(sampling=SamplingSettings(temperature=0.9, top_k=40, seed=99),
                            max_new_tokens=10)
QUESTIONS = {
    "A": ["Who keeps the lighthouse?", "And the glass lens?", "Why at night?"],
    "B": ["Tell me about the harbour.", "Which boats came in?", "What about the ferry?"],
}


def reply(engine, messages, settings, **kwargs):
    chunks = list(engine.chat(messages, settings, **kwargs))
    return [c.token_id for c in chunks if c.token_id is not None], \
        "".join(c.text for c in chunks), chunks[-1].stats


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("model", ["plain_model_dir", "gqa_model_dir"])
def test_interleaved_conversations_through_disk_equal_fresh_runs(model, settings, request,
                                                                  tmp_path):
    folder = request.getfixturevalue(model)
    engine = Engine.load(folder, provider="cpu", threads=1)
    reference = Engine.load(folder, provider="cpu", threads=1)
    # A budget of one byte parks nothing in memory: every switch sends the other chat to
    # disk and brings this one back from there.
    caches = engine.conversation_caches(budget_bytes=1, snapshot_folder=tmp_path / "kv",
                                        min_tokens=1)
    chats = {cid: [Message("system", "Answer briefly.")] for cid in QUESTIONS}
    previous_prompt = {}
    for turn in range(3):
        for cid in ("A", "B"):
            messages = chats[cid]
            messages.append(Message("user", QUESTIONS[cid][turn]))
            tokens, text, stats = reply(engine, messages, settings, caches=caches,
                                        conversation_id=cid)
            expected, _, _ = reply(reference, messages, settings, reuse=False)
            assert tokens == expected, f"chat {cid}, turn {turn + 1}"
            assert caches.parked_ids == []  # the other chat is on disk, not in memory
            if turn:  # back from disk: the whole previous prompt is reused
                assert stats.reused_tokens >= previous_prompt[cid]
            previous_prompt[cid] = stats.prompt_tokens
            messages.append(Message("assistant", text))
    assert len(list((tmp_path / "kv").rglob("*.npz"))) == 2


def test_switching_the_context_policy_starts_a_clean_cache(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches()
    messages = [Message("user", "Hello there, keeper.")]
    reply(engine, messages, GREEDY, caches=caches, conversation_id="p")
    sliding = GenerationSettings(sampling=GREEDY.sampling, max_new_tokens=10,
                                 context_policy="sliding_window")
    _, _, stats = reply(engine, messages, sliding, caches=caches, conversation_id="p")
    assert stats.reused_tokens == 0
    assert caches.get("p", window=True).window is not None


def test_best_prefix_finds_the_conversation_a_resent_prompt_continues(plain_model_dir):
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches()
    first = [Message("system", "Answer briefly."), Message("user", "Who keeps the light?")]
    second = [Message("system", "Answer briefly."), Message("user", "Tell me of the sea.")]
    _, answer, _ = reply(engine, first, GREEDY, caches=caches, conversation_id="one")
    reply(engine, second, GREEDY, caches=caches, conversation_id="two")
    assert caches.parked_ids == ["one"] and caches.active_id == "two"

    # A stateless client resends the first conversation plus a new turn.
    resent = [*first, Message("assistant", answer), Message("user", "And the lens?")]
    ids = engine.encode_chat(resent)
    found, length = caches.best_prefix(ids)
    assert found == "one"
    assert length == caches.get("one").common_prefix(ids)
    assert length >= len(engine.encode_chat(first))  # at least the whole earlier prompt
    assert length > caches.get("two").common_prefix(ids)  # the other shares only the system

    # Continuing through the found conversation reuses that prefix.
    _, _, stats = reply(engine, resent, GREEDY, caches=caches, conversation_id=found)
    assert stats.reused_tokens == min(length, len(ids) - 1)
    assert caches.best_prefix([10_000]) == (None, 0)  # nothing shares even a first token
    caches.forget("one")
    assert caches.best_prefix(ids)[0] == "two"


def test_equal_token_ids_behind_different_images_never_share_a_cached_prefix(plain_model_dir):
    """The cache key covers image hashes as well as token ids: a prompt whose placeholder
    tokens (at 4..7) stand for another image reuses only the tokens before them, while the
    same image behind them reuses the whole prompt; best_prefix and the branch tips agree."""
    from app.engine.generation import stream_generate

    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    caches = engine.conversation_caches()
    prompt = list(range(3, 19))  # 16 tokens; 4..7 are an image's placeholders
    cat, dog = [(4, "sha256:cat")], [(4, "sha256:dog")]

    def run(images):
        cache = caches.get("c", prompt_ids=prompt, images=images)
        chunks = list(stream_generate(engine.decoder, cache, prompt, GREEDY,
                                      tokenizer=engine.tokenizer, eos_ids=engine.eos_token_ids,
                                      images=images))
        return chunks[-1].stats

    first = run(cat)
    assert first.reused_tokens == 0 and caches.tips("c")[0].images == cat
    assert run(cat).reused_tokens == len(prompt) - 1  # same image: all but the last token
    assert caches.best_prefix(prompt, images=cat) == ("c", len(prompt))
    assert caches.best_prefix(prompt, images=dog) == ("c", 4)
    assert caches.best_prefix(prompt) == ("c", 4)  # no image there: not the cat's KV either
    other = run(dog)
    assert other.reused_tokens == 4 and other.prefilled_tokens == len(prompt) - 4
    assert all(tip.common_prefix(prompt, dog) <= 4 or tip.images == dog
               for tip in caches.tips("c"))
