"""A grouped-attention conversion (``convert_gguf(attention="grouped")``) through the app's
Decoder and Engine: a position's logits are the same bits whether it runs alone, in a 2-, 3-
or 64-row step; replies with reuse and rewind equal fresh runs; its shared buffers start as
zeros (the MatMuls read the whole capacity) and grow by 512 past the first doubling."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from app.engine.engine import Engine
from app.engine.generation import stream_generate
from app.engine.kv_cache import _bucket
from app.engine.speculative import DraftModel, FixedK
from app.engine.types import GenerationSettings, Message, SamplingSettings
from tests.fixtures.grouped_models import LONG, converted

IDS = [(7 + 13 * i) % 1000 + 3 for i in range(4800)]
GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=12)
SEEDED = GenerationSettings(
    sampling=SamplingSettings(temperature=0.9, top_k=40, top_p=0.95, seed=1234),
    max_new_tokens=12,
)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("grouped_engine")


@pytest.fixture(scope="module")
def native(root):
    """The 4-bit form as the app converts it (MatMulNBits, int8 activations)."""
    return converted(root, "grouped")


@pytest.fixture(scope="module")
def fp32(root):
    return converted(root, "grouped", "fp32")


def _load(folder, **kwargs) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False, **kwargs)


def _rows(decoder, before: int, count: int) -> np.ndarray:
    """The logits of ``IDS[before : before + count]`` run as one step after a fresh prefill
    of ``IDS[:before]`` (one row: a plain one-token step)."""
    cache = decoder.new_cache()
    decoder.feed(cache, IDS[:before])
    if count == 1:
        return decoder.step(cache, IDS[before])[None].copy()
    return decoder.verify(cache, IDS[before : before + count]).copy()


@pytest.mark.parametrize("prefix", [300, 509])  # 509 + 64 crosses the 512 bucket
def test_a_positions_logits_do_not_depend_on_how_many_rows_ran_with_it(fp32, native, prefix):
    for folder in (fp32, native):
        decoder = _load(folder, calibrate=False).decoder
        decoder.step_rows = 1
        chunk = _rows(decoder, prefix, 64)
        for offset in (0, 5, 63):
            assert np.array_equal(_rows(decoder, prefix + offset, 2)[0], chunk[offset])
            assert np.array_equal(_rows(decoder, prefix + offset - 1, 3)[1], chunk[offset])
        if folder == fp32:  # float matmuls: one row rounds as several do
            for offset in (0, 5, 63):
                assert np.array_equal(_rows(decoder, prefix + offset, 1)[0], chunk[offset])


@pytest.fixture(scope="module")
def long_forms(root):
    """The default conversion (grouped) of a context-8,192 model, 4-bit and fp32."""
    return {precision: converted(root, None, precision, LONG) for precision in ("native", "fp32")}


def _after(decoder, before: int, count: int, *, grown_to: int | None = None) -> np.ndarray:
    """``_rows`` on a cache that first held ``grown_to`` positions and was rewound to
    ``before`` (capacity past the step, earlier rows left in the spare positions)."""
    cache = decoder.new_cache()
    decoder.feed(cache, IDS[:grown_to or before])
    cache.trim_to(before)
    if count == 1:
        return decoder.step(cache, IDS[before])[None].copy()
    return decoder.verify(cache, IDS[before : before + count]).copy()


@pytest.mark.parametrize("past", [1000, 1024, 4099])
@pytest.mark.parametrize("precision", ["fp32", "native"])
def test_a_position_gets_the_same_bits_in_a_chunk_as_in_a_step_at_long_pasts(
        long_forms, past, precision):
    """The mask covers only the stripe from a step's first position: a chunk's row (its
    stripe many columns wide, later positions masked) and a one-row step (a stripe of the
    spare capacity) must round alike, whatever the capacity past the total."""
    decoder = _load(long_forms[precision], calibrate=False).decoder
    decoder.step_rows = 1
    assert decoder.graph.grouped_attention
    chunk = _after(decoder, past - 5, 64)[5]  # row 5 of a 64-row chunk
    assert np.array_equal(_after(decoder, past - 63, 64)[63], chunk)
    assert np.array_equal(_after(decoder, past - 400, 512)[400], chunk)
    assert np.array_equal(_after(decoder, past, 2)[0], chunk)
    assert np.array_equal(_after(decoder, past - 1, 3)[1], chunk)
    assert np.array_equal(_after(decoder, past, 2, grown_to=past + 700)[0], chunk)
    if precision == "fp32":  # float matmuls: one row rounds as several do
        assert np.array_equal(_after(decoder, past, 1)[0], chunk)
        assert np.array_equal(_after(decoder, past, 1, grown_to=past + 700)[0], chunk)


def test_calibration_finds_its_steps_exact_on_the_float_form(fp32):
    decoder = _load(fp32).decoder
    assert decoder.one_row_exact and decoder.step_rows == 1  # no two-row steps needed


def test_its_buffers_start_as_zeros_and_grow_by_128_past_the_first_doubling(fp32):
    decoder = _load(fp32, calibrate=False).decoder
    cache = decoder.new_cache()
    decoder.feed(cache, IDS[:10])
    assert cache.capacity == 256
    spare = cache.tensors[0].numpy()[:, :, 10:]
    assert spare.size and not spare.any()  # zeros, not whatever memory held
    capacities = []
    for start in range(10, 1100, 100):
        decoder.feed(cache, IDS[start : start + 100])
        capacities.append(cache.capacity)
    assert capacities == [256, 256, 384, 512, 512, 640, 768, 896, 1024, 1024, 1152]
    assert _bucket(1100, 2048, 256) == 2048  # the GQA form's doubling would read 2,048
    assert np.isfinite(cache.tensors[0].numpy()).all()


def _reply(chunks) -> list[int]:
    return [c.token_id for c in chunks if c.token_id is not None]


def _turns(count: int) -> list[str]:
    return [("the keeper lit the lamp at dawn " * (1 + 3 * (i % 2))) + str(i)
            for i in range(count)]


@pytest.mark.parametrize("settings", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_replies_with_reuse_and_rewind_equal_fresh_runs(native, settings):
    cached, fresh = _load(native), _load(native)
    caches = cached.conversation_caches()
    history: list[Message] = []
    reused = []
    for turn, text in enumerate(_turns(5)):
        history.append(Message("user", text))
        chunks = list(cached.chat(history, settings, caches=caches, conversation_id="c"))
        with_cache = _reply(chunks)
        assert with_cache == _reply(fresh.chat(history, settings, reuse=False)), f"turn {turn}"
        reused.append(chunks[-1].stats.reused_tokens)
        history.append(Message("assistant", cached.tokenizer.decode(with_cache)))
    assert reused[0] == 0 and all(r > 0 for r in reused[1:])
    question = history[:-1]  # regenerate: a rewind of the cache
    chunks = list(cached.chat(question, settings, caches=caches, conversation_id="c"))
    assert chunks[-1].stats.reused_tokens > 0
    assert _reply(chunks) == _reply(fresh.chat(question, settings, reuse=False))


def test_a_speculated_reply_equals_the_plain_one(native):
    engine = _load(native)
    quoting = [Message("user", "repeat after me: " + "the keeper lit the lamp at dawn " * 12)]
    plain = list(engine.chat(quoting, replace(GREEDY, max_new_tokens=24, speculation="off"),
                             reuse=False))
    speculated = list(engine.chat(quoting, replace(GREEDY, max_new_tokens=24,
                                                   speculation="auto"), reuse=False))
    assert speculated[-1].stats.speculation == "lookup" and speculated[-1].stats.proposed > 0
    assert _reply(speculated) == _reply(plain)


def test_a_draft_speculated_reply_equals_the_plain_one(native):
    """A draft model (the target's own conversion, its own decoder and cache: grouped on both
    sides) proposes; the target verifies in several-row steps; the reply is the plain one."""
    engine = _load(native)
    draft = DraftModel(_load(native).decoder, eos_ids=engine.eos_token_ids)
    prompt = IDS[:300]
    replies = {}
    for mode, use_draft in (("off", None), ("draft", draft)):
        chunks = list(stream_generate(
            engine.decoder, engine.new_cache(), prompt,
            replace(GREEDY, max_new_tokens=24, speculation=mode), tokenizer=engine.tokenizer,
            eos_ids=(), draft=use_draft, speculation_policy=FixedK(4) if use_draft else None,
        ))
        replies[mode] = (_reply(chunks), chunks[-1].stats)
    stats = replies["draft"][1]
    assert stats.speculation == "draft" and stats.proposed > 0
    assert stats.accepted > 0  # its own guesses (one-row rounding may miss a close call)
    assert replies["draft"][0] == replies["off"][0]


def test_a_chat_reopens_from_a_snapshot_and_equals_a_fresh_run(native, tmp_path):
    history = [Message("user", text) for text in _turns(1)]
    first = _load(native)
    caches = first.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    answer = _reply(first.chat(history, GREEDY, caches=caches, conversation_id="c"))
    caches.close()  # the app quits: the cache goes to disk
    assert list((tmp_path / "kv").rglob("*.npz"))
    history += [Message("assistant", first.tokenizer.decode(answer)),
                Message("user", "and the bell rang twice")]
    restarted = _load(native)
    caches = restarted.conversation_caches(snapshot_folder=tmp_path / "kv", min_tokens=16)
    chunks = list(restarted.chat(history, SEEDED, caches=caches, conversation_id="c"))
    assert chunks[-1].stats.reused_tokens > 0
    assert _reply(chunks) == _reply(_load(native).chat(history, SEEDED, reuse=False))
