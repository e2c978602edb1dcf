"""A Hearth-converted decoder with its GroupQueryAttention nodes rewritten to the grouped form
(bench/attention_layouts.py's ``grouped-cap``), timed step against step with the original.

    .venv/bin/python -m bench.grouped_decoder MODEL_DIR [--contexts 1024,4096,8190]
        [--threads 1] [--seconds 4] [--built GROUPED_DIR]

The app's builder now emits this form itself (``convert_gguf(..., attention="grouped")``,
app/models/gguf/grouped_attention.py); ``--built`` times such a conversion of the same GGUF
against MODEL_DIR's GroupQueryAttention graph. Without it, the prototype's rewrite of
MODEL_DIR's graph is timed (kept for folders converted before the option existed): each
GroupQueryAttention (packed QKV, do_rotary) becomes Split, com.microsoft
RotaryEmbedding on q and k, TensorScatter (opset 24) of the step's k/v rows into the
[1, kv, capacity, D] buffer bound as its input and output, FusedMatMul against K over the
capacity, an additive causal mask built once per step, Softmax and FusedMatMul against V.
Both graphs run 2-row steps at each total length T over buffers of Hearth's bucket capacity
(doubling from 256), bound as past and present, their runs interleaved (so that a shared
machine's load falls on both alike); prints ms per step and, for the same step, the
largest difference of layer 0's attention output (rounding: ~1e-7) and of the logits (the
int8 activations of 30 layers turn such differences into whole int8 steps: ~1 logit, as
between one-row and verify steps, see app/models/gguf/quant.py). First it checks each graph's
exactness at T = 1000: a position's logits as the last row of a 2-row step and the middle
row of a 3-row step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MS = "com.microsoft"


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def rewrite(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every GroupQueryAttention replaced by the grouped form (in place)."""
    g = model.graph
    first = next(n for n in g.node if n.op_type == "GroupQueryAttention")
    group = _attr(first, "num_heads") // _attr(first, "kv_num_heads")  # the same every layer
    past0 = first.input[3]
    inits = [
        onnx.numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
            ("gq.zero", 0), ("gq.one", 1), ("gq.one1", [1]), ("gq.axis0", [0]),
            ("gq.axis1", [1]), ("gq.two", [2]), ("gq.tiles", [group, 1]))]
    inits.append(onnx.numpy_helper.from_array(np.array(0.0, np.float32), "gq.f0"))
    inits.append(onnx.numpy_helper.from_array(np.array(-np.inf, np.float32), "gq.finf"))
    step = [  # once per step: positions, the write index and the causal mask [S, capacity]
        helper.make_node("Cast", ["total_seq_len"], ["gq.total"], to=TensorProto.INT64),
        helper.make_node("Shape", ["input_ids"], ["gq.ids_shape"]),
        helper.make_node("Gather", ["gq.ids_shape", "gq.one"], ["gq.rows"], axis=0),
        helper.make_node("Sub", ["gq.total", "gq.rows"], ["gq.start"]),
        helper.make_node("Range", ["gq.start", "gq.total", "gq.one"], ["gq.pos1"]),
        helper.make_node("Unsqueeze", ["gq.pos1", "gq.axis0"], ["gq.pos"]),
        helper.make_node("Unsqueeze", ["gq.start", "gq.axis0"], ["gq.write_at"]),
        helper.make_node("Shape", [past0], ["gq.past_shape"]),
        helper.make_node("Gather", ["gq.past_shape", "gq.two"], ["gq.cap1"], axis=0),
        helper.make_node("Squeeze", ["gq.cap1", "gq.axis0"], ["gq.cap"]),
        helper.make_node("Range", ["gq.zero", "gq.cap", "gq.one"], ["gq.cols"]),
        helper.make_node("Unsqueeze", ["gq.pos1", "gq.axis1"], ["gq.limits"]),
        helper.make_node("LessOrEqual", ["gq.cols", "gq.limits"], ["gq.visible"]),
        helper.make_node("Where", ["gq.visible", "gq.f0", "gq.finf"], ["gq.mask1"]),
        # rows of the grouped scores run (query head in group, row): the mask once per head
        helper.make_node("Tile", ["gq.mask1", "gq.tiles"], ["gq.mask"]),
    ]
    nodes = []
    for n in g.node:
        if n.op_type != "GroupQueryAttention":
            nodes.append(n)
            continue
        hq, hkv = _attr(n, "num_heads"), _attr(n, "kv_num_heads")
        scale, inter = _attr(n, "scale"), _attr(n, "rotary_interleaved", 0)
        qkv, pk, pv, cos, sin = n.input[0], n.input[3], n.input[4], n.input[7], n.input[8]
        out, present_k, present_v = n.output
        d = None
        for t in g.initializer:
            if t.name == cos:
                d = 2 * t.dims[1]
        group, p = hq // hkv, n.name  # rows of qg: (head in group, step row)
        inits += [
            onnx.numpy_helper.from_array(np.array(v, np.int64), f"{p}.{k}") for k, v in (
                ("split", [hq * d, hkv * d, hkv * d]), ("kv_rows", [1, -1, hkv, d]),
                ("q_rows", [-1, hkv, group, d]), ("q_grouped", [hkv, -1, d]),
                ("past3", [hkv, -1, d]), ("out4", [hkv, group, -1, d]),
                ("out3", [1, -1, hq * d]))]
        nodes += [
            helper.make_node("Split", [qkv, f"{p}.split"], [f"{p}.q", f"{p}.k", f"{p}.v"],
                             axis=2),
            helper.make_node("RotaryEmbedding", [f"{p}.q", "gq.pos", cos, sin], [f"{p}.qr"],
                             domain=MS, interleaved=inter, num_heads=hq),
            helper.make_node("RotaryEmbedding", [f"{p}.k", "gq.pos", cos, sin], [f"{p}.kr"],
                             domain=MS, interleaved=inter, num_heads=hkv),
        ]
        for src, past, present in ((f"{p}.kr", pk, present_k), (f"{p}.v", pv, present_v)):
            nodes += [
                helper.make_node("Reshape", [src, f"{p}.kv_rows"], [src + "4"]),
                helper.make_node("Transpose", [src + "4"], [src + "t"], perm=[0, 2, 1, 3]),
                helper.make_node("TensorScatter", [past, src + "t", "gq.write_at"], [present],
                                 axis=2),
                helper.make_node("Reshape", [present, f"{p}.past3"], [present + "/3"]),
            ]
        nodes += [
            helper.make_node("Reshape", [f"{p}.qr", f"{p}.q_rows"], [f"{p}.q4"]),
            helper.make_node("Transpose", [f"{p}.q4"], [f"{p}.qt"], perm=[1, 2, 0, 3]),
            helper.make_node("Reshape", [f"{p}.qt", f"{p}.q_grouped"], [f"{p}.qg"]),
            helper.make_node("FusedMatMul", [f"{p}.qg", present_k + "/3"], [f"{p}.s"],
                             domain=MS, alpha=scale, transB=1),
            helper.make_node("Add", [f"{p}.s", "gq.mask"], [f"{p}.m"]),
            helper.make_node("Softmax", [f"{p}.m"], [f"{p}.p3"], axis=-1),
            helper.make_node("FusedMatMul", [f"{p}.p3", present_v + "/3"], [f"{p}.o3"],
                             domain=MS),
            helper.make_node("Reshape", [f"{p}.o3", f"{p}.out4"], [f"{p}.o4"]),
            helper.make_node("Transpose", [f"{p}.o4"], [f"{p}.ot"], perm=[2, 0, 1, 3]),
            helper.make_node("Reshape", [f"{p}.ot", f"{p}.out3"], [out]),
        ]
    # the per-step nodes go right after total_seq_len is made
    at = next(i for i, n in enumerate(nodes) if "total_seq_len" in n.output) + 1
    nodes[at:at] = step
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = 24
    return model


def _bucket(needed: int) -> int:
    capacity = 256
    while capacity < needed:
        capacity *= 2
    return capacity


PROBE = "layers.0.attn/out"


def with_probe(model: onnx.ModelProto) -> bytes:
    """``model`` with layer 0's attention output as an extra graph output."""
    model.graph.output.append(helper.make_tensor_value_info(PROBE, TensorProto.FLOAT, None))
    return model.SerializeToString()


class Runner:
    def __init__(self, path_or_bytes, threads: int, layers, total: int, rows: int, seed=0):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(path_or_bytes, opts,
                                            providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(seed)
        cap = _bucket(total)
        io = self.io = self.session.io_binding()
        self.keep = []
        io.bind_cpu_input("input_ids", np.array([[17, 42][:rows]], np.int64))
        io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        names = {i.name for i in self.session.get_inputs()}
        half = any(i.type == "tensor(float16)" for i in self.session.get_inputs()
                   if i.name.startswith("past_key_values."))
        dtype = np.float16 if half else np.float32  # a float16-cache conversion's buffers
        if "num_logits_to_keep" in names:
            io.bind_cpu_input("num_logits_to_keep", np.array([1], np.int64))
        for i, (kv, d) in enumerate(layers):
            for part in ("key", "value"):
                buf = np.zeros((1, kv, cap, d), dtype)
                buf[:, :, : total - rows] = rng.standard_normal(
                    (1, kv, total - rows, d), dtype=np.float32)
                self.keep.append(buf)
                io.bind_cpu_input(f"past_key_values.{i}.{part}", buf)
                io.bind_output(f"present.{i}.{part}", "cpu", 0, dtype, buf.shape,
                               buf.ctypes.data)
        io.bind_output("logits", "cpu")
        io.bind_output(PROBE, "cpu")

    def run(self) -> float:
        t = time.perf_counter()
        self.session.run_with_iobinding(self.io)
        return time.perf_counter() - t

    def outputs(self) -> tuple[np.ndarray, np.ndarray]:
        """(logits, layer 0's attention output) of the last run."""
        outs = self.io.get_outputs()
        return outs[-2].numpy(), outs[-1].numpy()


def same_logits(graph: bytes, layers, threads: int, total: int = 1000) -> bool:
    """Whether position ``total - 1`` gets the same logits bits as the last row of a 2-row
    step and as the middle row of a 3-row step over the same past. Both steps keep two rows
    of logits, as the app's two-row steps do: the output layer's MatMulNBits then runs on
    two rows in both (on AVX2 its one-row int8 kernel rounds otherwise)."""
    two = Runner(graph, threads, layers, total, 2)
    two.io.bind_cpu_input("num_logits_to_keep", np.array([2], np.int64))
    two.run()
    three = Runner(graph, threads, layers, total + 1, 2)
    three.io.bind_cpu_input("input_ids", np.array([[17, 42, 99]], np.int64))
    three.io.bind_cpu_input("num_logits_to_keep", np.array([2], np.int64))
    for mine, theirs in zip(three.keep, two.keep, strict=True):  # the same past
        mine[:, :, : total - 2] = theirs[:, :, : total - 2]
    three.run()
    return bool(np.array_equal(two.outputs()[0][0, -1], three.outputs()[0][0, 0]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--contexts", default="1024,4096,8190")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--built", default=None,
                        help="a convert_gguf(attention='grouped') folder of the same GGUF")
    args = parser.parse_args()
    path = Path(args.model) / "model.onnx"
    model = onnx.load(str(path))  # with its weights: the rewritten graph is run from bytes
    layers = []
    for n in model.graph.node:
        if n.op_type == "GroupQueryAttention":
            cos = next(t for t in model.graph.initializer if t.name == n.input[7])
            layers.append((_attr(n, "kv_num_heads"), 2 * cos.dims[1]))
    original = with_probe(onnx.load(str(path)))
    if args.built:  # the app's own grouped conversion (its layer 0 output has the same name)
        grouped = with_probe(onnx.load(str(Path(args.built) / "model.onnx")))
    else:
        grouped = with_probe(rewrite(model))
    print(f"{path.parent.name}: {len(layers)} layers; 2-row steps, {args.threads} thread(s), "
          f"ORT {ort.__version__}; ms per step (median of interleaved runs)")
    print("a position's logits, 2-row step vs 3-row step (same bits?): GQA "
          f"{same_logits(original, layers, args.threads)}, grouped "
          f"{same_logits(grouped, layers, args.threads)}", flush=True)
    for total in (int(x) for x in args.contexts.split(",")):
        a = Runner(original, args.threads, layers, total, 2)
        b = Runner(grouped, args.threads, layers, total, 2)
        a.run(), b.run()
        (la, pa), (lb, pb) = a.outputs(), b.outputs()
        probe, logit = float(np.max(np.abs(pa - pb))), float(np.max(np.abs(la - lb)))
        ta, tb = [], []
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end or len(ta) < 5:
            ta.append(a.run())
            tb.append(b.run())
        ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
        print(f"T={total:5d} (capacity {_bucket(total)}): GQA {ma:7.1f} ms, grouped {mb:7.1f} "
              f"ms ({mb / ma:.2f}x); differences: layer 0 attention {probe:.1e}, logits "
              f"{logit:.1e}  "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
