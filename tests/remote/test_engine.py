"""RemoteEngine against the stand-in server: streaming, reasoning kept apart, stop, finish
reasons, cancel, a server dying mid-reply, the degrade paths and offline mode."""

from __future__ import annotations

import threading
import time

import pytest

from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.network import NetworkLog, install_guard, set_offline, uninstall_guard
from app.remote.engine import RemoteEngine
from app.remote.errors import RemoteError
from app.remote.sources import SourceStore
from tests.bounds import AT_ONCE_S

HELLO = [Message("system", "Be brief."), Message("user", "say hello")]


def load(stub_or_url, model: str = "stub-model", key: str | None = None) -> RemoteEngine:
    url = stub_or_url if isinstance(stub_or_url, str) else stub_or_url.url
    source = SourceStore().add("Stub", url, key)
    return RemoteEngine.load(source.target(model))


def run(engine: RemoteEngine, settings: GenerationSettings | None = None, **kwargs):
    chunks = list(engine.chat(HELLO, settings or GenerationSettings(), **kwargs))
    return chunks, "".join(c.text for c in chunks), "".join(c.reasoning for c in chunks)


def test_streams_the_answer_with_reasoning_apart_and_usage_stats(make_stub, memory_keyring):
    stub = make_stub(reasoning=["Thinking", " hard"], api_key="sk-1", delay=0.01)
    engine = load(stub, key="sk-1")
    assert engine.spec.name == "stub-model · Stub" and engine.spec.context_length == 4096
    assert engine.provider_report.summary() == "REMOTE"
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.2, top_p=0.9,
                                                            top_k=40, seed=7),
                                  max_new_tokens=64, stop_strings=("###",))
    chunks, text, reasoning = run(engine, settings)
    assert text == "Hello, world!" and reasoning == "Thinking hard"
    assert all(not (c.text and c.reasoning) for c in chunks)  # never mixed in one chunk
    last = chunks[-1]
    assert last.finish_reason == "eos" and all(c.finish_reason is None for c in chunks[:-1])
    stats = last.stats
    assert stats.provider == "remote" and stats.generated_tokens == 6  # from usage
    assert stats.prompt_tokens == 4 and stats.context_max == 4096
    assert stats.ttft_ms > 0 and stats.decode_tok_s > 0 and stats.context_note is None
    body = stub.chats[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("stub-model", 64, 0.2)
    assert (body["top_p"], body["top_k"], body["seed"], body["stop"]) == (0.9, 40, 7, ["###"])
    assert body["messages"] == [m.as_dict() for m in HELLO]
    assert stub.requests[-1].headers["authorization"] == "Bearer sk-1"
    engine.close()


def test_llama_server_reasoning_field_and_usage_on_the_last_event(make_stub):
    stub = make_stub(style="llamacpp", reasoning=["hmm"], finish_reason="length")
    _, text, reasoning = run(engine := load(stub))
    assert (text, reasoning) == ("Hello, world!", "hmm")
    chunks, _, _ = run(engine)
    assert chunks[-1].finish_reason == "max_tokens"
    assert chunks[-1].stats.generated_tokens == 5


def test_stop_strings_are_honoured_even_when_the_server_ignores_them(stub):
    engine = load(stub)
    chunks, text, _ = run(engine, GenerationSettings(stop_strings=(" wor",)))
    assert text == "Hello," and chunks[-1].finish_reason == "stop"
    assert "wor" not in "".join(c.text for c in chunks)  # the held-back prefix never showed


def test_vllm_stop_reason_maps_to_stop(make_stub):
    stub = make_stub(stop_reason="END")
    chunks, text, _ = run(load(stub), GenerationSettings(stop_strings=("END",)))
    assert text == "Hello, world!" and chunks[-1].finish_reason == "stop"


def test_cancel_closes_a_silent_stream_at_once(make_stub):
    stub = make_stub(stall_after=2)
    engine = load(stub)
    cancel = threading.Event()
    seen: list[str] = []
    started = None
    for chunk in engine.chat(HELLO, GenerationSettings(), cancel=cancel):
        seen.append(chunk.text)
        if len(seen) == 2:  # the server now holds the socket open without sending
            started = time.perf_counter()
            threading.Timer(0.2, cancel.set).start()
        if chunk.finish_reason is not None:
            break
    assert started is not None and time.perf_counter() - started < AT_ONCE_S  # stall: 30 s
    assert chunk.finish_reason == "cancelled" and "".join(seen) == "Hello,"


def test_a_server_dying_mid_reply_raises_a_sentence_naming_it(make_stub):
    stub = make_stub(die_after=2)
    engine = load(stub)
    got: list[str] = []
    with pytest.raises(RemoteError) as caught:
        for chunk in engine.chat(HELLO, GenerationSettings()):
            got.append(chunk.text)
    assert "".join(got) == "Hello,"
    assert caught.value.kind == "broken"
    assert engine.client.base_url in str(caught.value) and "mid-reply" in str(caught.value)


def test_no_usage_means_estimated_counts_and_says_so(make_stub):
    chunks, _, _ = run(load(make_stub(usage=False)))
    stats = chunks[-1].stats
    assert stats.generated_tokens == 4  # one per streamed delta
    assert "no token usage" in stats.context_note and "estimates" in stats.context_note


def test_a_server_that_does_not_stream_gets_one_piece(make_stub):
    stub = make_stub(streaming=False, reasoning=["why"])
    chunks, text, reasoning = run(load(stub))
    assert (text, reasoning) == ("Hello, world!", "why")
    assert chunks[-1].finish_reason == "eos" and chunks[-1].stats.generated_tokens == 5
    assert "does not stream" in chunks[-1].stats.context_note


def test_refused_extra_options_are_dropped_and_said(make_stub):
    stub = make_stub(refuse_extras=True)
    engine = load(stub)
    settings = GenerationSettings(sampling=SamplingSettings(top_k=20, min_p=0.1))
    chunks, text, _ = run(engine, settings)
    assert text == "Hello, world!"
    first, second = stub.chats
    assert first["top_k"] == 20 and "top_k" not in second and "min_p" not in second
    assert "extra sampling options" in chunks[-1].stats.context_note
    run(engine, settings)  # the next turn does not try them again
    assert len(stub.chats) == 3 and "top_k" not in stub.chats[-1]


def test_without_models_endpoint_the_typed_id_is_used(make_stub):
    stub = make_stub(models=None)
    engine = load(stub, model="whatever-i-typed")
    assert engine.spec.context_length == 0
    chunks, text, _ = run(engine)
    assert text == "Hello, world!" and stub.chats[-1]["model"] == "whatever-i-typed"
    assert "has no /v1/models" in chunks[-1].stats.context_note


def test_loading_a_model_the_server_does_not_offer_names_what_it_offers(stub):
    with pytest.raises(RemoteError) as caught:
        load(stub, model="typo")
    assert "does not offer the model “typo”" in str(caught.value)
    assert "stub-model" in str(caught.value)


def test_a_wrong_key_fails_the_load_with_401(make_stub):
    stub = make_stub(api_key="right")
    with pytest.raises(RemoteError) as caught:
        load(stub, key="wrong")
    assert caught.value.kind == "auth" and "HTTP 401" in str(caught.value)
    assert stub.url.removesuffix("/v1") in str(caught.value)


def test_count_tokens_asks_the_server_else_estimates(make_stub):
    engine = load(make_stub(tokenize=True))
    assert engine.count_tokens(HELLO) == 2 + 3 + 2 + 3
    assert engine.token_count_estimated is False
    plain = load(make_stub())
    assert plain.count_tokens(HELLO) == (3 + 4) + (3 + 4)  # chars / 4 + 4 per message
    assert plain.token_count_estimated is True


def test_conversation_caches_keep_nothing(stub):
    engine = load(stub)
    caches = engine.conversation_caches(budget_bytes=1)
    caches.forget("c1")
    caches.close()
    assert caches.active_id is None and caches.best_prefix([1, 2]) == (None, 0)


@pytest.fixture
def offline_guard():
    uninstall_guard()
    guard = install_guard(NetworkLog(capacity=50), offline=False)
    set_offline(True)
    yield guard
    set_offline(False)
    uninstall_guard()


def test_offline_mode_blocks_other_machines_and_logs_it(offline_guard, stub):
    source = SourceStore().add("Far", "http://192.0.2.10:8000/v1", cleartext_ok=True)
    with pytest.raises(RemoteError) as caught:
        RemoteEngine.load(source.target("m"))
    assert caught.value.kind == "offline"
    assert "offline mode is on" in str(caught.value) and "192.0.2.10" in str(caught.value)
    (attempt,) = offline_guard.log.entries()
    assert (attempt.feature, attempt.host, attempt.allowed) == ("remote engine", "192.0.2.10",
                                                                False)
    # an engine on this machine sends nothing off it: it keeps working offline
    _, text, _ = run(load(stub))
    assert text == "Hello, world!"


@pytest.mark.parametrize("style", ["vllm", "llamacpp"])
def test_think_tags_inside_the_content_become_reasoning(make_stub, style):
    """Several servers stream <think>…</think> inside ``content``: it is split like a local
    model's reply, even with the tags cut across deltas."""
    stub = make_stub(style=style, tokens=["<th", "ink>Let me", " add.</thi", "nk>\n\n",
                                          "The sum", " is 4.", " a <", " b"])
    engine = load(stub)
    chunks, text, reasoning = run(engine)
    assert text == "The sum is 4. a < b" and reasoning == "Let me add."
    assert "<think>" not in text and "</think>" not in reasoning
    assert all(not (c.text and c.reasoning) for c in chunks)
    assert chunks[-1].finish_reason == "eos" and chunks[-1].stats.reasoning_ms >= 0
    engine.close()


def test_think_tags_in_a_whole_reply_and_next_to_reasoning_content(make_stub):
    stub = make_stub(streaming=False, reasoning=["server side. "],
                     tokens=["<think>inline</think>", "answer"])
    engine = load(stub)
    _, text, reasoning = run(engine)
    assert text == "answer" and reasoning == "server side. inline"
    engine.close()

