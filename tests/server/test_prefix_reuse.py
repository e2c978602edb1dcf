"""Stateless clients resend the whole conversation; the server reuses the KV cache of the
earlier request sharing the longest token prefix, and answers exactly like a fresh engine."""

from __future__ import annotations

import itertools

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message

TURNS = 8
MAX_TOKENS = 12


def test_eight_turn_conversation_reuses_the_cache_and_matches_a_fresh_engine(
        server, gqa_model_dir):
    client = server.client()
    fresh = Engine.load(gqa_model_dir)
    settings = GenerationSettings.from_model(fresh.spec.generation_defaults,
                                             {"max_new_tokens": MAX_TOKENS, "temperature": 0})
    messages = [{"role": "system", "content": "You are terse."}]
    figures = []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"question number {turn}, please"})
        reply = client.chat.completions.create(model=server.model.id, messages=messages,
                                               max_tokens=MAX_TOKENS, temperature=0)
        text = reply.choices[0].message.content
        expected, generated = [], 0
        for chunk in fresh.chat([Message(m["role"], m["content"]) for m in messages],
                                settings, reuse=False):
            expected.append(chunk.text)
            generated += chunk.token_id is not None
        assert text == "".join(expected), f"turn {turn}"
        assert reply.usage.completion_tokens == generated, f"turn {turn}"
        figures.append((reply.usage.prompt_tokens,
                        reply.usage.prompt_tokens_details.cached_tokens))
        messages.append({"role": "assistant", "content": text})
    print("prompt_tokens / cached_tokens per turn:", figures)
    assert figures[0][1] == 0
    for (previous_prompt, _), (prompt, cached) in itertools.pairwise(figures):
        # the whole previous prompt (at least) came from the cache; only the new turn ran
        assert cached >= previous_prompt - 1
        assert cached < prompt


def test_two_clients_each_keep_their_own_cache(server):
    client = server.client()

    def ask(messages):
        return client.chat.completions.create(model=server.model.id, messages=messages,
                                              max_tokens=6, temperature=0)

    a = [{"role": "user", "content": "alpha alpha alpha alpha"}]
    b = [{"role": "user", "content": "beta beta beta beta beta"}]
    a_reply, b_reply = ask(a), ask(b)
    a += [{"role": "assistant", "content": a_reply.choices[0].message.content},
          {"role": "user", "content": "and then?"}]
    again = ask(a)
    # a's cache was not lost to b's request: a's whole first prompt is reused
    assert again.usage.prompt_tokens_details.cached_tokens >= a_reply.usage.prompt_tokens - 1
    assert b_reply.usage.prompt_tokens_details.cached_tokens <= 3  # shares only the header
