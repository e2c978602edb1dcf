"""Imported models get a readable name: the GGUF's own when it is one, else the file's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf.convert import convert_gguf
from app.models.gguf.naming import is_meaningful, readable_name
from tests.models.tiny_gguf import write_tiny_gguf


@pytest.mark.parametrize(
    ("general_name", "file", "want"),
    [
        # junk general.name: the file name decides
        ("models", "Qwen3-0.6B-Q4_K_M.gguf", "Qwen3 0.6B (Q4_K_M)"),
        ("tmp", "Phi-3.5-mini-instruct-Q4_K_M.gguf", "Phi 3.5 mini instruct (Q4_K_M)"),
        ("/home/me/hf/Qwen3-0.6B", "Qwen3-0.6B-Q8_0.gguf", "Qwen3 0.6B (Q8_0)"),
        ("C:\\models\\x", "gemma-3-1b-it-q4_0.gguf", "gemma 3 1b it (Q4_0)"),
        ("9f86d081884c7d659a2feaa0c55ad015", "Llama-3.2-1B-Instruct-IQ3_XXS.gguf",
         "Llama 3.2 1B Instruct (IQ3_XXS)"),
        ("LLaMA v2", "llama-2-7b-chat.Q4_K_S.gguf", "llama 2 7b chat (Q4_K_S)"),
        ("checkpoint-1200", "my_finetune-F16.gguf", "my finetune (F16)"),
        ("", "SmolLM2-135M-Instruct.gguf", "SmolLM2 135M Instruct"),
        (None, "Mistral-7B-Instruct-v0.3-Q4_K_M-00001-of-00002.gguf",
         "Mistral 7B Instruct v0.3 (Q4_K_M)"),
        # a real general.name is kept, with the file's quantization when it lacks one
        ("Qwen3 0.6B", "Qwen3-0.6B-Q4_K_M.gguf", "Qwen3 0.6B (Q4_K_M)"),
        ("Phi 3.5 Mini Instruct", "phi-3.5.gguf", "Phi 3.5 Mini Instruct"),
        ("SmolLM2 135M Q4_K_M", "x-Q4_K_M.gguf", "SmolLM2 135M Q4_K_M"),
        # both junk: the least bad of the two
        ("models", "sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa",
         "models"),
        ("", "model.gguf", "model"),
    ],
)  # fmt: skip
def test_readable_name(general_name, file, want):
    assert readable_name(general_name, Path("/downloads") / file) == want


@pytest.mark.parametrize(
    "name", ["", "  ", "models", "MODELS", "tmp", "tmp3x9_k", "./out", "~/llm", "a/b",
             "LLaMA v2", "step-500", "deadbeefcafe1234", "qwen3"],
)  # fmt: skip
def test_junk_names(name):
    assert not is_meaningful(name)


@pytest.mark.parametrize(
    "name", ["Qwen3 0.6B", "Phi 4 Mini Instruct", "tiny-llama", "Ministral 8B"]
)
def test_real_names(name):
    assert is_meaningful(name)


def test_conversion_names_the_model_from_the_file(tmp_path):
    """A GGUF whose general.name is a folder name gets the file's name in its manifest."""
    src = tmp_path / "Qwen3-0.6B-Q8_0.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0, name="models")
    dest = convert_gguf(src, tmp_path / "model")
    manifest = json.loads((dest / "hearth-manifest.json").read_text())
    assert manifest["name"] == "Qwen3 0.6B (Q8_0)"
