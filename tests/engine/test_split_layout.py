"""The split Optimum / transformers.js layout (``embed_tokens`` + ``decoder_model_merged`` fed
``inputs_embeds``): the reader picks both graphs by the one precision policy, and the engine
answers exactly as the same weights in one graph do, with prefix reuse, rewind and
speculation's verify steps."""

from __future__ import annotations

import onnx
import pytest

from app.engine.engine import Engine
from app.engine.graph_info import IOSpec, inspect_graph
from app.engine.package import read_model_folder
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.errors import ModelLoadError
from tests.fixtures.tiny_models import build_plain_kv_model, build_split_model

GREEDY = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=12,
                            speculation="off")
TURNS = ["Who keeps the lighthouse?", "And the glass lens?", "Why at night?"]


@pytest.fixture(scope="module")
def split_dir(tmp_path_factory):
    return build_split_model(tmp_path_factory.mktemp("split"))


@pytest.fixture(scope="module")
def engines(split_dir, tmp_path_factory):
    """(split engine, the same weights as one graph)."""
    single = build_plain_kv_model(tmp_path_factory.mktemp("single"))
    return (Engine.load(split_dir, provider="cpu", threads=1, huge_pages=False),
            Engine.load(single, provider="cpu", threads=1, huge_pages=False))


def reply(engine, messages, settings=GREEDY, **kwargs):
    chunks = list(engine.chat(messages, settings, **kwargs))
    return ([c.token_id for c in chunks if c.token_id is not None],
            "".join(c.text for c in chunks), chunks[-1].stats)


def ids_of(stream) -> list[int]:
    return [c.token_id for c in stream if c.token_id is not None]


def test_reader_picks_the_embedding_graph_of_the_decoders_precision(tmp_path):
    folder = build_split_model(tmp_path / "m", suffixes=("", "_q4", "_fp16"))
    cpu = read_model_folder(folder, provider="cpu")
    assert cpu.model_path.name == "decoder_model_merged_q4.onnx"
    assert cpu.embed_path is not None and cpu.embed_path.name == "embed_tokens_q4.onnx"
    cuda = read_model_folder(folder, provider="cuda")
    assert (cuda.model_path.name, cuda.embed_path.name) == (
        "decoder_model_merged_fp16.onnx", "embed_tokens_fp16.onnx")
    asked = read_model_folder(folder, provider="cpu", variant="fp32")
    assert asked.embed_path.name == "embed_tokens.onnx"


def test_reader_falls_back_to_the_policys_best_embedding_graph(tmp_path):
    folder = build_split_model(tmp_path / "m", suffixes=("_q4",))
    (folder / "onnx" / "embed_tokens_q4.onnx").rename(folder / "onnx" / "embed_tokens_int8.onnx")
    onnx.save_model(onnx.load(folder / "onnx" / "embed_tokens_int8.onnx"),
                    folder / "onnx" / "embed_tokens_fp16.onnx")
    spec = read_model_folder(folder, provider="cpu")
    assert spec.embed_path.name == "embed_tokens_int8.onnx"  # CPU order: int8 before fp16


def test_unused_encoders_are_noted_in_the_spec(split_dir, tmp_path):
    spec = read_model_folder(split_dir)
    assert len(spec.notes) == 1
    assert "images" in spec.notes[0] and "audio" in spec.notes[0]
    assert "not loaded" in spec.notes[0]
    bare = read_model_folder(build_split_model(tmp_path / "bare", encoders=()))
    assert bare.notes == ()


def test_greedy_output_equals_the_single_graph_token_for_token(engines):
    split, single = engines
    assert split.graph.embedded_inputs == ("inputs_embeds",)
    assert split.decoder.embedder is not None and single.decoder.embedder is None
    ids = split.tokenizer.encode("The keeper climbs the stairs to light the lamp")
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0),
                                  max_new_tokens=40, speculation="off")
    got = ids_of(split.generate(ids, settings, reuse=False))
    expected = ids_of(single.generate(ids, settings, reuse=False))
    assert len(got) >= 10
    assert got == expected


def test_logits_equal_the_single_graph(engines):
    split, single = engines
    ids = split.tokenizer.encode("A long night on the rocks")
    a = split.decoder.feed(split.decoder.new_cache(), ids)
    b = single.decoder.feed(single.decoder.new_cache(), ids)
    assert abs(a - b).max() < 1e-5


def test_multi_turn_reuse_and_rewind_equal_fresh_runs(engines):
    split, single = engines
    caches = split.conversation_caches()
    messages = [Message("system", "Answer briefly.")]
    for turn, text in enumerate(TURNS):
        messages.append(Message("user", text))
        tokens, answer, stats = reply(split, messages, caches=caches, conversation_id="c")
        expected, _, _ = reply(single, messages, reuse=False)
        fresh, _, _ = reply(split, messages, reuse=False)
        assert tokens == expected == fresh, f"turn {turn + 1}"
        if turn:
            assert stats.reused_tokens > 0
        messages.append(Message("assistant", answer))
    # Edit the first question: the cache is cut back into the first turn (a rewind).
    edited = [messages[0], Message("user", "Who paints the lighthouse?")]
    tokens, _, stats = reply(split, edited, caches=caches, conversation_id="c")
    expected, _, _ = reply(single, edited, reuse=False)
    assert tokens == expected
    assert 0 < stats.reused_tokens < stats.prompt_tokens - 1


def test_speculative_verify_runs_through_the_embedding_graph(engines):
    split, single = engines
    ids = split.tokenizer.encode("ab ab ab ab ab ab ab ab ab ab ab ab")
    lookup = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=30,
                                speculation="lookup")
    chunks = list(split.generate(ids, lookup, reuse=False))
    got = [c.token_id for c in chunks if c.token_id is not None]
    plain = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=30,
                               speculation="off")
    expected = ids_of(single.generate(ids, plain, reuse=False))
    assert chunks[-1].stats.speculation == "lookup" and chunks[-1].stats.proposed > 0
    assert got == expected


def test_a_decoder_fed_embeddings_without_an_embedding_graph_is_refused(tmp_path):
    inputs = [IOSpec("inputs_embeds", [1, "s", 64], "tensor(float)"),
              IOSpec("attention_mask", [1, "t"], "tensor(int64)")]
    outputs = [IOSpec("logits", [1, "s", 100], "tensor(float)")]
    with pytest.raises(ModelLoadError, match="embed_tokens"):
        inspect_graph(inputs, outputs, op_types=set(), model_path=tmp_path / "d.onnx")
