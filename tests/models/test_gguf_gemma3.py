"""Tiny Gemma 3 GGUFs convert, load in ONNX Runtime and match the numpy reference, with the
prompt and the cached decode steps running past the local layers' sliding window."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.gemma3_reference import Gemma3Config, forward
from tests.models.llama_reference import RefCache
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.test_gguf_convert import nbits_weights
from tests.models.tiny_gemma3 import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    RMS_EPS,
    ROPE_BASE,
    WINDOW,
    write_tiny_gemma3,
)

PROMPT = [5, 80, 17, 250, 3, 99, 42, 7, 64, 120, 9, 33, 210]  # 13 tokens > window 8
STEPS = [[7], [120], [9, 33, 44], [12], [200], [31], [77], [5], [61]]  # cached, past the window


def config(window: int = WINDOW, softcap: float = 0.0, hidden: int = HIDDEN) -> Gemma3Config:
    return Gemma3Config(
        LAYERS, HEADS, KV_HEADS, HEAD_DIM, hidden, ROPE_BASE, RMS_EPS, window,
        final_logit_softcap=softcap,
    )  # fmt: skip


def reference_logits(weights: dict, cfg: Gemma3Config, **kw) -> list[np.ndarray]:
    cache = RefCache()
    out = [forward(weights, cfg, PROMPT, cache, **kw)[-1]]
    out += [forward(weights, cfg, step, cache, **kw)[-1] for step in STEPS]
    return out


def onnx_logits(runner) -> list[np.ndarray]:
    return [runner.step(PROMPT)] + [runner.step(step) for step in STEPS]


def assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_reads_gemma3_params(tmp_path):
    src = tmp_path / "g.gguf"
    write_tiny_gemma3(src)
    p = GGUFFile(src).params
    assert p.arch == "gemma3" and not p.rope_interleaved
    assert p.sliding_window == WINDOW
    assert p.local_layers == (0, 1, 2, 3, 4, 6)  # llama.cpp's pattern 6: layer 5 is global
    assert p.rope_base == ROPE_BASE and p.rope_base_local == 10000.0
    assert p.attn_scale == pytest.approx(1 / np.sqrt(HEAD_DIM))
    assert p.embed_scale == pytest.approx(np.sqrt(HIDDEN))
    assert p.tied_embeddings and p.final_logit_softcap == 0.0


def test_window_matters_in_this_setup(tmp_path):
    """The prompt and steps are long enough that ignoring the window changes the logits, so
    the tests below would fail on a graph that ignored it."""
    weights = write_tiny_gemma3(tmp_path / "g.gguf")
    with_window = reference_logits(weights, config())
    without = reference_logits(weights, config(), ignore_window=True)
    for a, b in zip(with_window, without, strict=True):
        assert np.abs(a - b).max() > 1e-2


@pytest.mark.parametrize("runner", ["growing", "shared"])
def test_fp32_matches_reference_past_the_window(tmp_path, runner):
    src = tmp_path / "g.gguf"
    weights = write_tiny_gemma3(src)
    dest = convert_gguf(src, tmp_path / "model", precision="fp32")
    session = open_session(dest)
    run = GrowingRunner(session) if runner == "growing" else SharedBufferRunner(session, 64)
    assert_close(onnx_logits(run), reference_logits(weights, config()))


@pytest.mark.parametrize("window", [1, 4, 16])
def test_window_sizes(tmp_path, window):
    """GroupQueryAttention's local_window_size equals Gemma's window (both count the keys a
    query sees, its own included); off by one either way fails here."""
    src = tmp_path / "g.gguf"
    weights = write_tiny_gemma3(src, window=window, seed=3)
    dest = convert_gguf(src, tmp_path / "model", precision="fp32")
    got = onnx_logits(GrowingRunner(open_session(dest)))
    assert_close(got, reference_logits(weights, config(window)))


def test_final_logit_softcap(tmp_path):
    src = tmp_path / "g.gguf"
    weights = write_tiny_gemma3(src, softcap=0.5)  # small, so the cap bends every logit
    dest = convert_gguf(src, tmp_path / "model", precision="fp32")
    got = onnx_logits(GrowingRunner(open_session(dest)))
    assert_close(got, reference_logits(weights, config(softcap=0.5)))
    assert max(np.abs(g).max() for g in got) < 0.5


Q4_K_M_LIKE = {"attn_v": Q.Q6_K, "ffn_down": Q.Q6_K, "attn_output": Q.Q8_0}


@pytest.mark.parametrize(
    ("qtype", "matrix_types", "hidden"),
    [
        (Q.Q8_0, None, HIDDEN),
        (Q.F16, None, HIDDEN),
        (Q.Q4_K, Q4_K_M_LIKE, 256),  # K-quants need rows of 256
    ],
)
def test_native_quantized_matches_reference(tmp_path, qtype, matrix_types, hidden):
    """Float activations (accuracy_level 0): the graph computes the mapped weights exactly."""
    src = tmp_path / "g.gguf"
    weights = write_tiny_gemma3(
        src, qtype=qtype, matrix_types=matrix_types, hidden=hidden, ffn=max(hidden, 128)
    )
    dest = convert_gguf(src, tmp_path / "model", accuracy_level=0)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    assert_close(got, reference_logits(nbits_weights(src, weights), config(hidden=hidden)))


def test_package_files(tmp_path):
    src = tmp_path / "g.gguf"
    write_tiny_gemma3(src)
    dest = convert_gguf(src, tmp_path / "model")
    cfg = json.loads((dest / "genai_config.json").read_text())["model"]
    tokens = GGUFFile(src).get("tokenizer.ggml.tokens")
    assert cfg["type"] == "gemma3_text"  # what onnxruntime-genai writes and reads
    assert cfg["eos_token_id"] == [2, tokens.index("<end_of_turn>")]
    assert cfg["pad_token_id"] == 2
    template = json.loads((dest / "tokenizer_config.json").read_text())["chat_template"]
    assert "<start_of_turn>" in template
    assert (dest / "chat_template.jinja").read_text(encoding="utf-8") == template
