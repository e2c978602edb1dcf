"""Whether a Hub repo can run here, from its file names: each reason on a real repo layout."""

from __future__ import annotations

import pytest

from app.models.runnable import (
    carries_decoder,
    parameters_from_name,
    ram_needed,
    why_not_runnable,
)

TOKENIZER = ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
LAYOUTS = {
    "onnx-community text model": (
        [*TOKENIZER, "onnx/model.onnx", "onnx/model_q4.onnx", "onnx/model_q4f16.onnx"], None),
    "optimum-cli export": ([*TOKENIZER, "model.onnx", "model.onnx_data"], None),
    "microsoft genai folders": (
        ["cpu_and_mobile/cpu-int4/genai_config.json", "cpu_and_mobile/cpu-int4/model.onnx",
         "cuda/cuda-int4/genai_config.json", "cuda/cuda-int4/model.onnx"], None),
    "safetensors only": ([*TOKENIZER, "model.safetensors"], "no ONNX files"),
    "sentence embedding": ([*TOKENIZER, "onnx/encoder_model.onnx"], "only encoder files"),
    "old optimum split": (
        [*TOKENIZER, "onnx/decoder_model.onnx", "onnx/decoder_with_past_model.onnx"],
        "separate decoder and decoder-with-past"),
    "transformers.js vision chat (text runs; encoders unused)": (
        [*TOKENIZER, "onnx/vision_encoder_q4.onnx", "onnx/embed_tokens_q4.onnx",
         "onnx/decoder_model_merged_q4.onnx"], None),
    "embedding graphs without a decoder": (
        [*TOKENIZER, "onnx/embed_tokens_q4.onnx", "onnx/vision_encoder_q4.onnx"],
        "embedding graphs without a merged text decoder"),
    "graph without config": (["onnx/model.onnx", "tokenizer.json"], "no config.json"),
    "something else": ([*TOKENIZER, "onnx/unet.onnx"], "no ONNX decoder"),
}


RUNNABLE = sorted(k for k, (_, reason) in LAYOUTS.items() if reason is None)
NOT_RUNNABLE = sorted(k for k, (_, reason) in LAYOUTS.items() if reason is not None)


@pytest.mark.parametrize("layout", RUNNABLE)
def test_layouts_hearth_plans_have_no_reason(layout):
    assert why_not_runnable(LAYOUTS[layout][0]) is None


@pytest.mark.parametrize("layout", NOT_RUNNABLE)
def test_layouts_hearth_cannot_run_say_why(layout):
    paths, expected = LAYOUTS[layout]
    assert expected in (why_not_runnable(paths) or "")


def test_too_big_for_this_machine_is_an_estimate_from_the_size():
    paths = LAYOUTS["onnx-community text model"][0]
    reason = why_not_runnable(paths, parameters=8_000_000_000, ram_bytes=4_000_000_000)
    assert reason is not None and reason.startswith("too big for this machine")
    assert "8.0B parameters" in reason and "(estimate)" in reason and "4.0 GB" in reason
    assert why_not_runnable(paths, parameters=1_000_000_000, ram_bytes=4_000_000_000) is None
    assert ram_needed(1_000_000_000) == 1_100_000_000


def test_parameters_from_the_repo_name():
    assert parameters_from_name("onnx-community/Qwen3-1.7B-ONNX") == 1_700_000_000
    assert parameters_from_name("HuggingFaceTB/SmolLM2-135M-Instruct") == 135_000_000
    assert parameters_from_name("mistralai/Mixtral-8x7B-v0.1") == 56_000_000_000
    assert parameters_from_name("onnx-community/gemma-3-1b-it-ONNX") == 1_000_000_000
    assert parameters_from_name("microsoft/Phi-4-mini-instruct-onnx") is None


def test_carries_decoder_tells_chat_repos_from_other_onnx_repos():
    assert carries_decoder(LAYOUTS["microsoft genai folders"][0])
    assert carries_decoder(LAYOUTS["old optimum split"][0])
    assert not carries_decoder(LAYOUTS["sentence embedding"][0])
    assert not carries_decoder(LAYOUTS["safetensors only"][0])
