"""Stopping, streaming and cancelling, on real ORT sessions over the tiny fixture models."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from app.engine.engine import Engine
from app.engine.generation import stream_generate
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.errors import ContextOverflowError, TemplateError
from tests.fixtures.tiny_models import build_plain_kv_model

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=40)


@pytest.fixture(scope="module")
def engine(request):
    return Engine.load(request.getfixturevalue("plain_model_dir"), provider="cpu", threads=1)


def run(engine, ids, settings, **kwargs):
    chunks = list(engine.generate(ids, settings, **kwargs))
    tokens = [c.token_id for c in chunks if c.token_id is not None]
    return tokens, "".join(c.text for c in chunks), chunks[-1]


@pytest.mark.parametrize("seed", range(6))
def test_streamed_text_equals_decode_of_all_tokens(engine, seed):
    settings = GenerationSettings(sampling=SamplingSettings(temperature=1.3, seed=seed),
                                  max_new_tokens=48)
    ids = engine.tokenizer.encode(f"Once upon a time {seed}, the keeper said")
    tokens, text, final = run(engine, ids, settings)
    assert text == engine.tokenizer.decode(tokens)
    assert final.stats.generated_tokens == len(tokens)


def test_stop_string_is_cut_exactly_and_never_emitted(engine):
    ids = engine.tokenizer.encode("The lighthouse keeper")
    _, full, _ = run(engine, ids, GREEDY)
    assert len(full) > 12
    stop = full[6:10]
    cut = full.index(stop)
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=40, stop_strings=(stop,))
    chunks = list(engine.generate(ids, settings))
    streamed = "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == "stop"
    assert streamed == full[:cut]
    assert all(stop not in c.text for c in chunks)


def test_every_eos_id_ends_the_reply(engine):
    ids = engine.tokenizer.encode("The lighthouse keeper")
    tokens, _, _ = run(engine, ids, GREEDY)
    saved = engine.eos_token_ids
    try:
        engine.eos_token_ids = (2, tokens[3])  # a second EOS id, as Llama 3 has several
        stopped, _, final = run(engine, ids, GREEDY)
    finally:
        engine.eos_token_ids = saved
    assert final.finish_reason == "eos"
    assert stopped == tokens[: tokens.index(tokens[3]) + 1]


def test_cancel_mid_reply_then_next_request_is_correct(engine):
    ids = engine.tokenizer.encode("Tell me about ships")
    expected, _, _ = run(engine, ids, GREEDY, reuse=False)
    cancel = threading.Event()
    seen = []
    for chunk in engine.generate(ids, GREEDY, cancel=cancel):
        seen.append(chunk)
        if len(seen) == 5:
            cancel.set()
    assert seen[-1].finish_reason == "cancelled"
    assert seen[-1].stats.generated_tokens == 5
    again, _, final = run(engine, ids, GREEDY)
    assert again == expected
    assert final.stats.reused_tokens == len(ids) - 1


@pytest.fixture
def small_context_engine(tmp_path):
    folder = build_plain_kv_model(tmp_path / "m", context_length=64)
    engine = Engine.load(folder, provider="cpu", threads=1)
    engine.eos_token_ids = ()  # no EOS: only the budget or the context can end a reply
    return engine


def test_context_full_is_refused_up_front_under_stop_and_ends_with_length_otherwise(
        small_context_engine):
    engine = small_context_engine
    ids = engine.tokenizer.encode("Once upon a time, " * 8)[:58]
    with pytest.raises(ContextOverflowError, match="context holds 64"):
        engine.generate(ids, GREEDY)  # policy "stop": refused before anything runs
    lenient = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                 max_new_tokens=40, context_policy="truncate_oldest")
    tokens, _, final = run(engine, ids, lenient)
    assert final.finish_reason == "length"
    assert final.stats.context_used == 64 and len(tokens) == 64 - 58


def test_max_tokens_ends_the_reply_after_exactly_that_many(small_context_engine):
    short = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=3)
    ids = small_context_engine.tokenizer.encode("Once upon a time")[:10]
    tokens, _, final = run(small_context_engine, ids, short)
    assert final.finish_reason == "max_tokens"
    assert len(tokens) == 3 == final.stats.generated_tokens


def _with_template(src, dst, template: str):
    shutil.copytree(src, dst)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{{ raise_exception('Conversation roles must alternate') }}", "must alternate"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "sandbox"),
        ("{% for m in messages %}{{ m.content }", "syntax"),
    ],
    ids=["raises", "escapes", "syntax"],
)
def test_bad_chat_template_is_an_error_the_user_sees(plain_model_dir, tmp_path, template,
                                                     message):
    folder = _with_template(plain_model_dir, tmp_path / "m", template)
    engine = Engine.load(folder, provider="cpu", threads=1)
    with pytest.raises(TemplateError) as info:
        engine.chat([Message("user", "hi")], GREEDY)
    assert message in str(info.value).lower() or message in str(info.value)
    assert str(folder) in str(info.value)


def test_model_without_chat_template_says_so(plain_model_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(plain_model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    engine = Engine.load(folder, provider="cpu", threads=1)
    with pytest.raises(TemplateError, match="no chat template"):
        engine.chat([Message("user", "hi")], GREEDY)
    tokens, _, _ = run(engine, engine.tokenizer.encode("plain text still works"), GREEDY)
    assert tokens


# -- a long prompt: progress and Stop between prefill chunks ------------------------------


@pytest.fixture(scope="module", params=["plain_model_dir", "gqa_model_dir"])
def chunked_engine(request):
    """An engine whose prefill runs in chunks of 16 tokens (the smallest allowed)."""
    engine = Engine.load(request.getfixturevalue(request.param), provider="cpu", threads=1)
    engine.decoder.prefill_chunk = 16
    return engine


def _long_prompt(engine, tokens: int) -> list[int]:
    ids = engine.tokenizer.encode("The keeper climbed the stairs and lit the lamp. " * 40)
    assert len(ids) >= tokens
    return ids[:tokens]


def _generate(engine, cache, ids, settings=GREEDY, **kwargs):
    chunks = list(stream_generate(engine.decoder, cache, ids, settings,
                                  tokenizer=engine.tokenizer, eos_ids=engine.eos_token_ids,
                                  **kwargs))
    return [c.token_id for c in chunks if c.token_id is not None], chunks[-1]


def test_prefill_reports_progress_after_every_chunk(chunked_engine):
    engine = chunked_engine
    ids = _long_prompt(engine, 100)
    reports: list[tuple[int, int]] = []
    _generate(engine, engine.new_cache(), ids, on_prefill=lambda d, t: reports.append((d, t)))
    assert reports == [(0, 100), (16, 100), (32, 100), (48, 100), (64, 100), (80, 100),
                       (96, 100), (100, 100)]


def test_stop_mid_prefill_keeps_the_chunks_that_ran_and_the_next_turn_equals_a_fresh_run(
        chunked_engine):
    engine = chunked_engine
    ids = _long_prompt(engine, 150)
    fresh, _ = _generate(engine, engine.new_cache(), ids)
    cache = engine.new_cache()
    cancel = threading.Event()
    reports: list[int] = []

    def stop_after_three_chunks(done: int, total: int) -> None:
        reports.append(done)
        if done >= 48:
            cancel.set()  # as the UI's Stop does, from outside the prefill loop

    tokens, final = _generate(engine, cache, ids, cancel=cancel,
                              on_prefill=stop_after_three_chunks)
    assert tokens == [] and final.finish_reason == "cancelled"
    assert reports == [0, 16, 32, 48]  # no chunk ran after the Stop
    assert cache.tokens == ids[:48]  # exactly the chunks that ran
    again, final = _generate(engine, cache, ids)
    assert final.stats.reused_tokens == 48
    assert final.stats.prefilled_tokens == 150 - 48
    assert again == fresh


def test_stop_before_the_prefill_feeds_nothing(chunked_engine):
    engine = chunked_engine
    ids = _long_prompt(engine, 40)
    cache = engine.new_cache()
    cancel = threading.Event()
    cancel.set()
    tokens, final = _generate(engine, cache, ids, cancel=cancel)
    assert tokens == [] and final.finish_reason == "cancelled"
    assert cache.tokens == []
