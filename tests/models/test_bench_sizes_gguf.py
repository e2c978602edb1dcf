"""bench/bench_sizes.py's random GGUF files: well-formed, counted right, and run by Hearth."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, quants

from app.engine.engine import Engine
from app.models.gguf.convert import convert_gguf
from bench import bench_sizes

TINY = bench_sizes.Shape(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, vocab=1024,
                         context=256)


@pytest.mark.parametrize("qtype", sorted(bench_sizes.QTYPES))
def test_the_random_model_is_read_as_written_and_decodes(tmp_path, qtype):
    path = tmp_path / f"tiny-{qtype}.gguf"
    read = bench_sizes.write_gguf(path, TINY, bench_sizes.QTYPES[qtype])

    reader = GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    # the bytes a decode step reads: every tensor (the tied token table is the output layer)
    assert read == sum(int(t.n_bytes) for t in reader.tensors)
    assert "output.weight" not in tensors
    down = tensors["blk.1.ffn_down.weight"]
    weights = quants.dequantize(down.data, down.tensor_type)
    assert weights.shape == (TINY.hidden, TINY.ffn)
    assert abs(float(weights.std()) - bench_sizes.WEIGHT_STD) < 0.2 * bench_sizes.WEIGHT_STD
    assert abs(float(weights.mean())) < 0.15 * bench_sizes.WEIGHT_STD  # Q4_0: -d/2

    folder = tmp_path / "hearth"
    convert_gguf(path, folder)
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)
    assert engine.graph.vocab_size == TINY.vocab
    cache = engine.decoder.new_cache()
    logits = engine.decoder.feed(cache, [3, 4, 5, 6])
    assert logits.shape == (TINY.vocab,)
    assert np.isfinite(logits).all()
    assert float(logits.std()) > 0


def test_the_profile_counts_each_matmul_group_and_the_tied_head(tmp_path):
    path = tmp_path / "tiny-q4_0.gguf"
    bench_sizes.write_gguf(path, TINY, bench_sizes.QTYPES["q4_0"])
    folder = tmp_path / "hearth"
    convert_gguf(path, folder, attention="gqa")  # the GQA row below
    engine = Engine.load(folder, provider="cpu", threads=1, huge_pages=False)

    groups = bench_sizes.matmul_groups(engine.spec.model_path)
    head = [nbytes for group, nbytes in groups.values() if group == "lm_head"]
    # the tied head reads the token table's 4-bit codes and one scale per 32 weights
    assert head == [TINY.vocab * TINY.hidden // 2 + TINY.vocab * TINY.hidden // 32 * 4]
    assert {group for group, _ in groups.values()} == {
        "lm_head", f"K={TINY.hidden}", f"K={TINY.ffn}"}

    wall, rows = bench_sizes.profile_decode(engine, [3, 4, 5, 6], 3, 1)
    assert wall > 0
    by_group = {group: (ms, mb) for group, ms, mb in rows}
    assert by_group["lm_head"][1] == pytest.approx(head[0] / 1e6)
    assert by_group["GroupQueryAttention"][1] == 0
