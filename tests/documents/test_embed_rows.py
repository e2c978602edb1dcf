"""A text's vector is the same, bit for bit, whether it is embedded alone or with any other
texts, in any order: the starter's int8 graph (ORT dynamic quantization, which scales each
activation tensor over the whole input), its float32 reference (whose mean pooling sums a
padded row in another order), and every Hub embedder's graph, nomic's dynamically quantized
one included."""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import logging
import random
import threading
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from app.documents.embedding import EmbeddingThread, TextEmbedder
from app.models.embedder_catalog import load_embedder_catalog
from tests.documents.embedder_replicas import load_replicas

_DOCS = [inspect.getdoc(m) for m in (json, csv, argparse, zipfile, threading)]
#: different lengths, so any batch of them pads: a few words up to past the 256-token window
TEXTS = ["hi", "The weather is lovely today.", "It's so sunny outside!",
         *(" ".join(doc.split()[:n]) for doc, n in zip(_DOCS, (9, 40, 75, 120, 400),
                                                       strict=True)),
         *(" ".join(doc.split()[-n:]) for doc, n in zip(_DOCS, (150, 60, 31, 200, 5),
                                                        strict=True))]
SIZES = (2, 3, 5, 8, len(TEXTS))


def _assert_batch_free(embed, texts: list[str], seed: int = 25) -> None:
    """``embed(list) -> [n, dims]``: each text alone, then in shuffled sets of SIZES."""
    alone = [embed([t])[0] for t in texts]
    rng = random.Random(seed)
    for size in SIZES:
        order = list(range(len(texts)))
        rng.shuffle(order)
        for start in range(0, len(order), size):
            rows = order[start:start + size]
            got = embed([texts[i] for i in rows])
            for j, i in enumerate(rows):
                assert np.array_equal(got[j], alone[i]), (size, texts[i][:40])


@pytest.mark.parametrize("graph", ["int8", "fp32"])
def test_a_starter_vector_is_the_same_bits_alone_or_in_any_batch(embedder_dir, graph):
    embedder = TextEmbedder(embedder_dir, threads=1, graph=graph)
    assert embedder.graph == graph
    assert len({len(r) for r in embedder.token_ids(TEXTS)}) >= 11  # any batch pads
    _assert_batch_free(embedder.embed, TEXTS)


def test_texts_run_side_by_side_and_each_keeps_its_own_bits(embedder_dir):
    """``threads=2``: the texts' runs go to two workers at once (a one-thread session each
    run), and every vector is the one ``threads=1`` makes, in the texts' order."""
    alone = TextEmbedder(embedder_dir, threads=1).embed(TEXTS)
    both = TextEmbedder(embedder_dir, threads=2)
    assert both.session.get_session_options().intra_op_num_threads == 1
    workers: set[str] = set()
    calls = [0]
    lock = threading.Lock()
    together = threading.Barrier(2, timeout=60)  # the first two runs wait for each other
    run = both.run_ids

    def counted(row):
        with lock:
            workers.add(threading.current_thread().name)
            calls[0] += 1
            first_two = calls[0] <= 2
        if first_two:
            together.wait()  # one worker at a time: it breaks, and embed raises
        return run(row)

    both.run_ids = counted
    got = both.embed(TEXTS)
    both.close()
    assert np.array_equal(got, alone)
    assert len(workers) == 2, workers
    _assert_batch_free(both.embed, TEXTS[:6])  # a closed pool starts again


def test_the_embedding_thread_and_its_roles_give_the_same_bits(embedder):
    """Documents (the index), queries (a turn) and texts as given (/v1/embeddings)."""
    for embed in (embedder.embed_documents, embedder.embed_queries,
                  lambda texts: embedder.embed_counted(texts)[0]):
        _assert_batch_free(embed, TEXTS[::2])


def _quantized(model: onnx.ModelProto, tmp: Path) -> onnx.ModelProto:
    """``model`` through ORT's dynamic quantization, as a Hub ``model_quantized.onnx`` is
    made (DynamicQuantizeLinear + MatMulInteger: activations scaled per tensor)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx.save_model(model, str(tmp / "float.onnx"))
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(tmp / "float.onnx"), str(tmp / "int8.onnx"),
                         weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)
    quantized = onnx.load(str(tmp / "int8.onnx"))
    assert "DynamicQuantizeLinear" in {n.op_type for n in quantized.graph.node}
    return quantized


@pytest.mark.parametrize("entry", [pytest.param(e, id=e.id) for e in load_embedder_catalog()])
def test_a_hub_embedders_vector_is_the_same_bits_alone_or_in_any_batch(tmp_path, entry):
    """Each catalog entry's folder as the store installs it (embedder.json from the entry,
    the replica's tokenizer and graph at the entry's path); a ``quantized`` graph is made as
    the Hub's are, so its activations are scaled over whatever one run holds."""
    replica = load_replicas()[entry.repo]
    folder = tmp_path / entry.id
    (folder / entry.graph).parent.mkdir(parents=True)
    model = replica.graph(entry.dims)
    if "quantized" in entry.graph:
        model = _quantized(model, tmp_path)
    onnx.save_model(model, str(folder / entry.graph))
    (folder / "tokenizer.json").write_text(replica.tokenizer_json())
    (folder / "embedder.json").write_text(json.dumps(entry.embedder_config()))
    texts = ["the kettle", "a model reads tokens and keeps a cache of keys and values",
             "good software explains what went wrong, and the cache of every layer " * 3,
             "tokens", "the model predicts the next token from the ones before it"]
    with EmbeddingThread(folder, threads=1) as thread:
        _assert_batch_free(thread.embed_documents, texts)
