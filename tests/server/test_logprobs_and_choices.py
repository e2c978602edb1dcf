"""``logprobs`` / ``top_logprobs`` and ``n > 1`` in OpenAI's shapes, streamed and whole,
through the official openai client against a real server on loopback."""

from __future__ import annotations

import math

import pytest

ASK = [{"role": "user", "content": "tell me something"}]


def check_entry(entry, top: int) -> None:
    assert isinstance(entry.token, str) and entry.logprob <= 0.0
    assert entry.bytes == list(entry.token.encode())
    assert len(entry.top_logprobs) == top
    values = [t.logprob for t in entry.top_logprobs]
    assert values == sorted(values, reverse=True)
    # the chosen token is one of the alternatives or less likely than all of them
    assert entry.logprob <= values[0] + 1e-6


def test_chat_logprobs_whole(server):
    reply = server.client().chat.completions.create(
        model=server.model.id, messages=ASK, temperature=0, max_tokens=12, logprobs=True,
        top_logprobs=3)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    for entry in content:
        check_entry(entry, 3)
        # greedy: the chosen token is the most likely one
        assert math.isclose(entry.logprob, entry.top_logprobs[0].logprob, abs_tol=1e-6)
        assert entry.token == entry.top_logprobs[0].token
    text = reply.choices[0].message.content
    assert "".join(e.token for e in content).startswith(text)


def test_chat_logprobs_streamed_match_the_whole_reply(server):
    client = server.client()
    whole = client.chat.completions.create(
        model=server.model.id, messages=ASK, temperature=0, max_tokens=12, logprobs=True,
        top_logprobs=2)
    stream = client.chat.completions.create(
        model=server.model.id, messages=ASK, temperature=0, max_tokens=12, logprobs=True,
        top_logprobs=2, stream=True)
    entries = [e for c in stream if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content]
    assert [(e.token, round(e.logprob, 4)) for e in entries] == [
        (e.token, round(e.logprob, 4)) for e in whole.choices[0].logprobs.content]


def test_without_logprobs_there_are_none(server):
    reply = server.client().chat.completions.create(
        model=server.model.id, messages=ASK, temperature=0, max_tokens=4)
    assert reply.choices[0].logprobs is None


def test_completion_logprobs_legacy_shape(server):
    reply = server.client().completions.create(
        model=server.model.id, prompt="once upon a time", temperature=0, max_tokens=8,
        logprobs=2)
    lp = reply.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert all(len(top) <= 2 for top in lp.top_logprobs)
    assert lp.text_offset[0] == 0
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(8)]
    for token, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert value <= 0.0 and math.isclose(top[token], value, abs_tol=1e-6)  # greedy


def test_n_seeded_choices_are_the_seeds_replies(serve, plain_model_dir):
    server = serve(plain_model_dir)  # its sampled replies differ from seed to seed
    client = server.client()
    reply = client.chat.completions.create(
        model=server.model.id, messages=ASK, temperature=1, top_p=0.95, seed=11,
        max_tokens=16, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    for i, text in enumerate(texts):  # choice i is the reply seeded with seed + i
        alone = client.chat.completions.create(
            model=server.model.id, messages=ASK, temperature=1, top_p=0.95, seed=11 + i,
            max_tokens=16)
        assert alone.choices[0].message.content == text
    assert len(set(texts)) > 1
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.usage.completion_tokens > 16  # every choice's tokens


def test_greedy_n_gives_identical_choices_streamed(server):
    stream = server.client().chat.completions.create(
        model=server.model.id, messages=ASK, temperature=0, max_tokens=10, n=2, stream=True,
        stream_options={"include_usage": True})
    texts, finishes, usage = {0: "", 1: ""}, {}, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts[0] and texts[0] == texts[1]
    assert set(finishes) == {0, 1}
    assert usage is not None and usage.completion_tokens == 20


@pytest.mark.parametrize("stream", [False, True])
def test_completions_take_n(server, stream):
    reply = server.client().completions.create(
        model=server.model.id, prompt="once upon a time", temperature=0, max_tokens=5, n=2,
        stream=stream)
    if stream:
        texts = {0: "", 1: ""}
        for chunk in reply:
            for choice in chunk.choices:
                texts[choice.index] += choice.text
        assert texts[0] and texts[0] == texts[1]
    else:
        assert [c.index for c in reply.choices] == [0, 1]
        assert reply.choices[0].text == reply.choices[1].text
        assert reply.usage.completion_tokens == 10
