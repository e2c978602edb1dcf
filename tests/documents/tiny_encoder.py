"""Tiny text encoders with a Hub embedder's signature: a WordPiece tokenizer.json with the
family's special tokens and template, and a random-weight ONNX graph built with ``onnx``.

The graph: token embeddings (plus token-type embeddings when ``token_type_ids`` is an input),
one context-mixing layer over the attention mask, ``h = tanh(x W1 + mean_mask(x) W2)`` →
``last_hidden_state`` [batch, seq, dims]; a ``sentence_embedding`` output [batch, dims] is
the masked mean of ``h`` through a dense layer, L2-normalised (EmbeddingGemma's
already-pooled output). Token 0 ([CLS]) differs from the mean, so CLS and mean pooling give
different vectors, and every token depends on the whole text.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from tests.fixtures.onnx_graph import IR_VERSION
from tests.fixtures.tiny_tokenizer import CORPUS

OPSET = 17


@lru_cache(maxsize=8)
def wordpiece_json(specials: tuple[str, ...], unk: str, template: tuple[str, ...]) -> str:
    """A WordPiece tokenizer.json trained on the tiny corpus: ``specials`` take ids 0, 1 …;
    ``template`` is the single-text post-processor ("[CLS]", "$A", "[SEP]")."""
    tokenizer = Tokenizer(models.WordPiece(unk_token=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=list(specials),
                                        show_progress=False)
    tokenizer.train_from_iterator(CORPUS.lower().splitlines() * 3, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=" ".join(f"{t}:0" if t != "$A" else "$A:0" for t in template),
        special_tokens=[(t, tokenizer.token_to_id(t)) for t in template if t != "$A"])
    return tokenizer.to_str()


def encoder_graph(vocab: int, dims: int, inputs: list[str], outputs: dict[str, int],
                  seed: int = 0) -> onnx.ModelProto:
    """The tiny encoder; ``outputs``: name -> rank (3: last_hidden_state, 2: pooled)."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def const(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(kind: str, args: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(kind, args, [out], name=out, **attrs))
        return out

    table = const("embed", rng.normal(0, 1.0, (vocab, dims)).astype(np.float32))
    x = op("Gather", [table, "input_ids"], "x_words", axis=0)
    if "token_type_ids" in inputs:
        types = const("types", rng.normal(0, 1.0, (2, dims)).astype(np.float32))
        x = op("Add", [x, op("Gather", [types, "token_type_ids"], "x_types", axis=0)], "x")
    if "attention_mask" in inputs:
        mask = op("Cast", ["attention_mask"], "maskf", to=TensorProto.FLOAT)
    else:
        mask = op("Cast", [op("Mul", ["input_ids", const("zero64", np.array(0, np.int64))],
                              "ids0")], "mask0", to=TensorProto.FLOAT)
        mask = op("Add", [mask, const("one", np.array(1.0, np.float32))], "maskf")
    m3 = op("Unsqueeze", [mask, const("axis2", np.array([2], np.int64))], "m3")
    axis1 = const("axis1", np.array([1], np.int64))

    def masked_mean(t: str, name: str) -> str:
        total = op("ReduceSum", [op("Mul", [t, m3], f"{name}_w"), axis1], f"{name}_s",
                   keepdims=1)
        count = op("ReduceSum", [m3, axis1], f"{name}_n", keepdims=1)
        return op("Div", [total, count], name)

    ctx = masked_mean(x, "ctx")
    w1 = const("w1", (rng.normal(0, 1.0, (dims, dims)) / np.sqrt(dims)).astype(np.float32))
    w2 = const("w2", (rng.normal(0, 1.0, (dims, dims)) / np.sqrt(dims)).astype(np.float32))
    h = op("Tanh", [op("Add", [op("MatMul", [x, w1], "xw1"), op("MatMul", [ctx, w2], "cw2")],
                       "pre")], "hidden")
    graph_outputs = []
    for name, rank in outputs.items():
        if rank == 3:
            op("Identity", [h], name)
            graph_outputs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, ["batch", "seq", dims]))
        else:
            pooled = op("Squeeze", [masked_mean(h, "pool"), axis1], "pooled")
            wd = const("dense", (rng.normal(0, 1.0, (dims, dims)) / np.sqrt(dims)).astype(
                np.float32))
            dense = op("MatMul", [pooled, wd], "dense_out")
            norm = op("ReduceL2", [dense], "norm", axes=[-1], keepdims=1)
            op("Div", [dense, norm], name)
            graph_outputs.append(helper.make_tensor_value_info(
                name, TensorProto.FLOAT, ["batch", dims]))
    graph = helper.make_graph(
        nodes, "tiny_encoder",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in inputs],
        graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model
