"""The import dialog's facts about a GGUF, read from its header."""

from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as Q

from app.errors import ConversionError
from app.models.gguf.convert import convert_gguf
from app.models.gguf.preview import PRECISION_HELP, preview_gguf
from app.models.gguf.weights import PRECISIONS
from tests.models.tiny_gguf import LAYERS, write_tiny_gguf


def test_preview_names_the_model_and_its_quantization(tmp_path):
    src = tmp_path / "Tiny-Llama-1B-Q8_0.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0, name="models")  # a folder name, not a model name
    p = preview_gguf(src)
    assert (p.architecture, p.layers, p.file_bytes) == ("llama", LAYERS, src.stat().st_size)
    assert p.general_name == "models"
    assert p.suggested_name == "Tiny Llama 1B (Q8_0)"
    assert p.quantization == "Q8_0 × 15, F32 × 5"  # 7 matrices per layer + the table; norms
    assert set(p.output_bytes) == set(PRECISIONS) == set(PRECISION_HELP)
    assert p.output_bytes["native"] < p.output_bytes["fp16"] < p.output_bytes["fp32"]


def test_estimates_are_close_to_what_each_precision_writes(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_0)
    p = preview_gguf(src)
    for precision in ("native", "fp32"):
        dest = convert_gguf(src, tmp_path / precision, precision=precision)
        real = (dest / "model.onnx.data").stat().st_size
        assert 0.9 * real <= p.output_bytes[precision] <= 1.2 * real, precision


def test_a_broken_file_raises_the_sentence(tmp_path):
    src = tmp_path / "broken.gguf"
    src.write_bytes(b"not a gguf file")
    with pytest.raises(ConversionError, match=r"broken\.gguf is not a GGUF file"):
        preview_gguf(src)
