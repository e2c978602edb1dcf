"""The token table stays quantized (GatherBlockQuantized) when its GGUF type allows, exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as Q

from app.models.gguf import quant
from app.models.gguf.convert import convert_gguf, estimate_output_bytes
from app.models.gguf.reader import GGUFFile
from app.models.gguf.weights import WeightSource
from tests.models.ort_runner import GrowingRunner, open_session
from tests.models.test_gguf_convert import onnx_logits, reference_logits
from tests.models.tiny_gguf import HIDDEN, write_tiny_gguf


def _graph(dest) -> onnx.GraphProto:
    return onnx.load(str(dest / "model.onnx"), load_external_data=False).graph


def _node(graph: onnx.GraphProto, name: str) -> onnx.NodeProto:
    return next(n for n in graph.node if n.name == name)


@pytest.mark.parametrize(
    ("embd_type", "qtype", "tied"),
    [
        (Q.Q8_0, Q.Q8_0, True),
        (Q.Q8_0, Q.Q4_0, False),
        (Q.Q4_0, Q.Q4_0, True),
        (Q.Q4_0, Q.Q8_0, False),
        (Q.Q6_K, Q.Q6_K, True),
    ],
)
def test_quantized_lookup_matches_the_gguf_weights(tmp_path, embd_type, qtype, tied):
    """Logits equal the numpy reference on the GGUF's own (dequantized) weights, so the
    looked-up rows are exactly the file's; a tied head reads the very same blocks."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, embd_type=embd_type, tied=tied)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    graph = _graph(dest)
    embed = _node(graph, "embed")
    assert embed.op_type == "GatherBlockQuantized"
    assert "model.embed_tokens.weight" not in {i.name for i in graph.initializer}
    head = _node(graph, "lm_head")
    assert (head.input[1] == embed.input[0]) is tied  # shared blocks only when tied
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("embd_type", "precision"), [(Q.Q4_1, "native"), (Q.Q8_0, "fp32")])
def test_other_tables_fall_back_to_a_float_gather(tmp_path, embd_type, precision):
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.F32, embd_type=embd_type, tied=False)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", precision=precision)
    graph = _graph(dest)
    assert _node(graph, "embed").op_type == "Gather"
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_quantized_table_shrinks_the_folder(tmp_path, monkeypatch):
    """Tied Q8_0: the float table (vocab·hidden·4 bytes) is gone and nothing replaces it;
    the size estimate follows."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q8_0, tied=True)
    vocab = weights["token_embd.weight"].shape[0]
    g = GGUFFile(src)
    quantized_estimate = estimate_output_bytes(g, WeightSource(g, "native"))
    small = convert_gguf(src, tmp_path / "quantized")
    monkeypatch.setattr(quant, "GATHER_TYPES", ())  # the float table, as before
    float_estimate = estimate_output_bytes(g, WeightSource(g, "native"))
    large = convert_gguf(src, tmp_path / "float")
    assert _node(_graph(large), "embed").op_type == "Gather"
    saved = (large / "model.onnx.data").stat().st_size - (small / "model.onnx.data").stat().st_size
    assert saved >= vocab * HIDDEN * 4 - 1024
    assert float_estimate - quantized_estimate == vocab * HIDDEN * 4
    assert quantized_estimate >= (small / "model.onnx.data").stat().st_size
