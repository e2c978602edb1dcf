"""Chat and completions through the official openai client against a real server."""

from __future__ import annotations

import httpx2 as httpx
import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message

HELLO = [{"role": "user", "content": "hello there"}]


def reference(model_dir, messages, max_tokens, **overrides):
    """A fresh engine's reply (text, generated tokens, finish) with the server's settings."""
    engine = Engine.load(model_dir)
    settings = GenerationSettings.from_model(
        engine.spec.generation_defaults, {"max_new_tokens": max_tokens, **overrides})
    text, final = [], None
    for chunk in engine.chat([Message(m["role"], m["content"]) for m in messages], settings,
                             reuse=False):
        text.append(chunk.text)
        final = chunk if chunk.finish_reason else final
    return "".join(text), final.stats.generated_tokens, final.finish_reason


def test_models_lists_the_loaded_model_under_a_stable_id(server, gqa_model_dir):
    client = server.client()
    models = client.models.list().data
    assert [m.id for m in models] == [gqa_model_dir.name]
    assert models[0].owned_by == "hearth"
    assert client.models.retrieve(gqa_model_dir.name).id == gqa_model_dir.name


def test_non_streaming_chat_equals_the_engine_and_counts_usage(server, gqa_model_dir):
    reply = server.client().chat.completions.create(
        model=server.model.id, messages=HELLO, max_tokens=20, temperature=0)
    text, tokens, _ = reference(gqa_model_dir, HELLO, 20, temperature=0)
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == text
    assert choice.finish_reason == "length"  # max_tokens reached
    assert reply.usage.completion_tokens == tokens == 20
    prompt = Engine.load(gqa_model_dir).count_tokens([Message("user", "hello there")])
    assert reply.usage.prompt_tokens == prompt
    assert reply.usage.total_tokens == prompt + 20
    assert reply.usage.prompt_tokens_details.cached_tokens == 0  # first request


def test_streaming_chat_sends_deltas_then_finish_then_usage(server, gqa_model_dir):
    stream = server.client().chat.completions.create(
        model=server.model.id, messages=HELLO, max_completion_tokens=15, temperature=0,
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 15
    assert all(c.usage is None for c in chunks[:-1])
    assert text == reference(gqa_model_dir, HELLO, 15, temperature=0)[0]
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")


def test_stop_string_ends_the_reply_before_it(server):
    client = server.client()
    full = client.chat.completions.create(model=server.model.id, messages=HELLO,
                                          max_tokens=40, temperature=0)
    text = full.choices[0].message.content
    stop = text[12:15]
    expected = text[: text.find(stop)]
    for stop_value in (stop, [stop, "never-appears"]):
        cut = client.chat.completions.create(model=server.model.id, messages=HELLO,
                                             max_tokens=40, temperature=0, stop=stop_value)
        assert cut.choices[0].message.content == expected
        assert cut.choices[0].finish_reason == "stop"
        assert cut.usage.completion_tokens < 40


def test_seed_makes_sampling_reproducible(serve, plain_model_dir):
    served = serve(plain_model_dir)
    client = served.client()

    def sample(seed):
        return client.chat.completions.create(
            model=served.model.id, messages=HELLO, max_tokens=24, temperature=1.0,
            top_p=0.95, seed=seed).choices[0].message.content

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3, 4)}) > 1


def test_completions_run_a_raw_prompt_through_generate(server, gqa_model_dir):
    client = server.client()
    reply = client.completions.create(model=server.model.id, prompt="once upon a time",
                                      max_tokens=12, temperature=0)
    engine = Engine.load(gqa_model_dir)
    ids = engine.tokenizer.encode("once upon a time", add_special_tokens=True)
    settings = GenerationSettings.from_model(engine.spec.generation_defaults,
                                             {"max_new_tokens": 12, "temperature": 0})
    expected = "".join(c.text for c in engine.generate(ids, settings))
    assert reply.choices[0].text == expected
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.prompt_tokens == len(ids) and reply.usage.completion_tokens == 12
    streamed = client.completions.create(model=server.model.id, prompt=ids, max_tokens=12,
                                         temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == expected


def test_lone_surrogates_are_replaced_like_in_the_window(server, gqa_model_dir):
    body = ('{"model": "' + server.model.id + '", "max_tokens": 4, "temperature": 0, '
            '"messages": [{"role": "user", "content": "a\\ud800b"}]}')
    response = httpx.post(f"{server.url}/chat/completions", content=body,
                          headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    engine = Engine.load(gqa_model_dir)
    assert response.json()["usage"]["prompt_tokens"] == engine.count_tokens(
        [Message("user", "a\ufffdb")])


@pytest.mark.parametrize("content", [[{"type": "text", "text": "hello "},
                                      {"type": "text", "text": "there"}]])
def test_text_parts_are_joined(server, content):
    parts = server.client().chat.completions.create(
        model=server.model.id, messages=[{"role": "user", "content": content}], max_tokens=8,
        temperature=0)
    plain = server.client().chat.completions.create(
        model=server.model.id, messages=HELLO, max_tokens=8, temperature=0)
    assert parts.choices[0].message.content == plain.choices[0].message.content
