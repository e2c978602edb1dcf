"""convert_gguf(attention="grouped"): the app's builder emits grouped attention over the shared
buffer's capacity (TensorScatter in place, grouped FusedMatMuls), records the form in the
manifest, and computes what the GroupQueryAttention form computes."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from app.engine.engine import Engine
from app.errors import ConversionError
from app.models.gguf.convert import convert_gguf
from tests.fixtures.grouped_models import converted, tiny_gguf

IDS = [(7 + 13 * i) % 1000 + 3 for i in range(300)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("grouped")
    return {form: converted(root, form, "fp32") for form in ("gqa", "grouped")}


def _load(folder) -> Engine:
    return Engine.load(folder, provider="cpu", threads=1, huge_pages=False, calibrate=False)


def test_the_grouped_form_has_no_group_query_attention_and_is_recorded(folders):
    model = onnx.load(str(folders["grouped"] / "model.onnx"), load_external_data=False)
    ops = {n.op_type for n in model.graph.node}
    assert "GroupQueryAttention" not in ops
    assert {"TensorScatter", "FusedMatMul", "RotaryEmbedding"} <= ops
    assert {o.version for o in model.opset_import if o.domain in ("", "ai.onnx")} == {24}
    manifest = json.loads((folders["grouped"] / "hearth-manifest.json").read_text())
    assert manifest["conversion"]["attention"] == "grouped"
    gqa = json.loads((folders["gqa"] / "hearth-manifest.json").read_text())
    assert gqa["conversion"]["attention"] == "gqa"

    engine = _load(folders["grouped"])
    assert engine.graph.grouped_attention and engine.graph.decode_path == "shared"
    assert not _load(folders["gqa"]).graph.grouped_attention


def test_its_fp32_logits_match_the_group_query_attention_form(folders):
    logits = {}
    for form, folder in folders.items():
        decoder = _load(folder).decoder
        cache = decoder.new_cache()
        decoder.feed(cache, IDS[:280])
        logits[form] = decoder.verify(cache, IDS[280:]).copy()  # 20 positions
    np.testing.assert_allclose(logits["grouped"], logits["gqa"], rtol=0, atol=1e-4)


def test_an_unknown_form_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(ConversionError, match="Unknown attention form 'flash'"):
        convert_gguf(tiny_gguf(tmp_path), tmp_path / "out", attention="flash")
    assert not (tmp_path / "out").exists()
