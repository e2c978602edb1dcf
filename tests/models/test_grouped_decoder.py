"""bench/grouped_decoder.py: a converted decoder whose GroupQueryAttention nodes are rewritten
to the grouped form computes the same attention, and stays exact across step sizes."""

from __future__ import annotations

import numpy as np
import onnx

from app.models.gguf.convert import convert_gguf
from bench import bench_sizes, grouped_decoder

TINY = bench_sizes.Shape(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, vocab=1024,
                         context=512)


def test_the_rewritten_decoder_attends_as_gqa_does_and_is_exact(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    bench_sizes.write_gguf(gguf, TINY, bench_sizes.QTYPES["q4_0"])
    convert_gguf(gguf, tmp_path / "hearth", attention="gqa")  # the form it rewrites
    path = tmp_path / "hearth" / "model.onnx"
    original = grouped_decoder.with_probe(onnx.load(str(path)))
    rewritten = grouped_decoder.rewrite(onnx.load(str(path)))
    ops = {n.op_type for n in rewritten.graph.node}
    assert "GroupQueryAttention" not in ops and {"TensorScatter", "FusedMatMul"} <= ops
    grouped = grouped_decoder.with_probe(rewritten)
    layers = [(TINY.kv_heads, TINY.head_dim)] * TINY.layers

    gqa = grouped_decoder.Runner(original, 1, layers, 300, 2)
    ours = grouped_decoder.Runner(grouped, 1, layers, 300, 2)
    gqa.run()
    ours.run()
    (_, want), (_, got) = gqa.outputs(), ours.outputs()
    np.testing.assert_allclose(got, want, atol=1e-5)  # layer 0's attention output
    # the step's rows went into the bound buffer: the same K rows as GQA wrote
    np.testing.assert_allclose(ours.keep[0][:, :, 298:300], gqa.keep[0][:, :, 298:300],
                               atol=1e-5)
    assert grouped_decoder.same_logits(grouped, layers, 1, total=200)


def test_the_apps_grouped_conversion_runs_in_the_bench_as_the_rewrite_does(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    bench_sizes.write_gguf(gguf, TINY, bench_sizes.QTYPES["q4_0"])
    convert_gguf(gguf, tmp_path / "gqa", attention="gqa")
    # the app's builder, float32 buffers as the rewrite keeps (the default rounds to float16)
    convert_gguf(gguf, tmp_path / "grouped", attention="grouped", kv_cache="float32")
    layers = [(TINY.kv_heads, TINY.head_dim)] * TINY.layers
    rewritten = grouped_decoder.with_probe(
        grouped_decoder.rewrite(onnx.load(str(tmp_path / "gqa" / "model.onnx"))))
    built = grouped_decoder.with_probe(onnx.load(str(tmp_path / "grouped" / "model.onnx")))
    runs = []
    for graph in (rewritten, built):
        runner = grouped_decoder.Runner(graph, 1, layers, 300, 2)
        runner.run()
        runs.append(runner.outputs())
    np.testing.assert_array_equal(runs[1][1], runs[0][1])  # layer 0's attention, same bits
    assert grouped_decoder.same_logits(built, layers, 1, total=200)
