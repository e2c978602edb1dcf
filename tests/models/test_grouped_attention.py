"""convert_gguf(attention="grouped"): the app's builder emits grouped attention over the shared
buffer's capacity (TensorScatter in place, grouped FusedMatMuls), records the form in the
manifest, and computes what the GroupQueryAttention form computes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import onnx
import pytest

from app.engine.engine import Engine
from app.errors import ConversionError
from app.models.gguf import ATTENTION_FORM
from app.models.gguf.convert import convert_gguf
from app.models.gguf.grouped_attention import default_attention
from app.models.gguf.reader import GGUFFile
from tests.fixtures.grouped_models import converted, tiny_gguf

IDS = [(7 + 13 * i) % 1000 + 3 for i in range(300)]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("grouped")
    return {form: converted(root, form, "fp32") for form in ("gqa", "grouped", None)}


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
    assert manifest["conversion"]["attention_form"] == ATTENTION_FORM
    gqa = json.loads((folders["gqa"] / "hearth-manifest.json").read_text())
    assert gqa["conversion"]["attention"] == "gqa" and gqa["conversion"]["attention_form"] is None
    assert manifest["conversion"]["kv_cache"] == "float16"  # the default's buffers
    assert gqa["conversion"]["kv_cache"] == "float32"  # GroupQueryAttention keeps float32

    engine = _load(folders["grouped"])
    assert engine.graph.grouped_attention and engine.graph.decode_path == "shared"
    assert not _load(folders["gqa"]).graph.grouped_attention


def test_a_conversion_is_grouped_unless_told_otherwise(folders):
    manifest = json.loads((folders[None] / "hearth-manifest.json").read_text())
    assert manifest["conversion"]["attention"] == "grouped"
    assert manifest["conversion"]["attention_form"] == ATTENTION_FORM
    assert _load(folders[None]).graph.grouped_attention


def test_architectures_the_form_does_not_build_keep_group_query_attention(folders, tmp_path):
    params = GGUFFile(tiny_gguf(tmp_path)).params
    assert default_attention(params) == "grouped"
    assert default_attention(replace(params, rope_dim=params.head_dim)) == "grouped"
    for kept in (dict(local_layers=(1,), sliding_window=16), dict(attn_sinks=True),
                 dict(rope_dim=params.head_dim // 2)):
        assert default_attention(replace(params, **kept)) == "gqa", kept


def test_the_causal_mask_is_added_to_the_stripe_of_scores_only(folders):
    """Prefill: the mask covers the columns from the step's first position on (a Slice of
    the scores, the Add, TensorScatter back in place), not a pass over every score."""
    graph = onnx.load(str(folders["grouped"] / "model.onnx"), load_external_data=False).graph
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.op_type)
    scores = [n.output[0] for n in graph.node if n.output[0].endswith(".attn/scores")]
    assert scores
    for name in scores:
        assert sorted(readers[name]) == ["Slice", "TensorScatter"], name
    masked = [n for n in graph.node if "grouped/mask" in n.input]
    assert masked and all(producer[n.input[0]].op_type == "Slice" for n in masked)
    shapes = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in graph.value_info}
    for name in scores:  # one symbolic shape on both sides: ORT's planner works in place
        masked_name = name.replace("/scores", "/masked")
        assert shapes[name] == shapes[masked_name] and "kv_capacity" in shapes[name]


def test_its_fp32_logits_match_the_group_query_attention_form(folders):
    logits = {}
    for form, folder in folders.items():
        decoder = _load(folder).decoder
        cache = decoder.new_cache()
        decoder.feed(cache, IDS[:280])
        logits[form] = decoder.verify(cache, IDS[280:]).copy()  # 20 positions
    np.testing.assert_allclose(logits["grouped"], logits["gqa"], rtol=0, atol=1e-4)


def test_its_kv_buffers_hold_float16_the_group_query_attention_forms_kv_rounded_once(folders):
    """Half the bytes a decode step reads and half the memory: the grouped graph keeps what
    the GQA form keeps in float32, rounded to float16 as it is written."""
    kv = {}
    for form in ("gqa", "grouped"):
        decoder = _load(folders[form]).decoder
        cache = decoder.new_cache()
        decoder.feed(cache, IDS[:280])
        assert {layer.dtype for layer in decoder.graph.kv_layers} == (
            {"float16"} if form == "grouped" else {"float32"})
        kv[form] = [t.numpy()[:, :, :280] for t in cache.tensors]
    assert all(t.dtype == np.float16 for t in kv["grouped"])
    layer0 = zip(kv["grouped"][:2], kv["gqa"][:2], strict=True)  # key.0, value.0: from ids
    for half, full in layer0:  # alone, so the same values, rounded once
        np.testing.assert_allclose(half.astype(np.float32), full, rtol=2**-11, atol=1e-7)
    for half, full in zip(kv["grouped"][2:], kv["gqa"][2:], strict=True):  # the rounding
        np.testing.assert_allclose(half.astype(np.float32), full, atol=1e-3)  # carried on


def test_k_and_v_past_float16s_range_saturate_instead_of_turning_logits_to_nan(folders,
                                                                               tmp_path):
    """A broken or hostile file whose k and v exceed 65,504 (here layer 0's qkv weights ×
    1e6): the float16 buffers hold the largest finite value, so the logits stay finite
    (inf there would make every score of the layer NaN)."""
    folder = tmp_path / "loud"
    shutil.copytree(folders["grouped"], folder)
    model = onnx.load(str(folder / "model.onnx"))  # its external data too
    qkv = next(t for t in model.graph.initializer if t.name == "layers.0.attn.qkv_proj.weight")
    qkv.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(qkv) * 1e6, qkv.name))
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True,
              location="model.onnx.data")
    decoder = _load(folder).decoder
    cache = decoder.new_cache()
    decoder.feed(cache, IDS[:40])
    k0 = cache.tensors[0].numpy()[:, :, :40]
    assert np.abs(k0).max() == np.finfo(np.float16).max  # saturated, not inf
    assert np.isfinite(decoder.verify(cache, IDS[40:44])).all()


def test_an_unknown_form_is_refused_with_a_sentence(tmp_path):
    with pytest.raises(ConversionError, match="Unknown attention form 'flash'"):
        convert_gguf(tiny_gguf(tmp_path), tmp_path / "out", attention="flash")
    assert not (tmp_path / "out").exists()
