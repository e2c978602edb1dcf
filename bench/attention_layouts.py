"""One decode step's attention over a long past, in three formulations, on ORT's CPU kernels.

    .venv/bin/python bench/bench_long_context.py --attention [--contexts 1024,4096,8192]
    .venv/bin/python -m bench.attention_layouts [--contexts ...] [--threads 2] [--rows 1,2]

For the starter's shape (9 query heads, 3 KV heads, dim 64) and a 7B-like one (32 / 8 / 128),
each graph holds ``LAYERS`` independent layers (their own KV, so that, as in a real step, a
layer's past is not in cache from the step before) and is timed with IOBinding at each total
length T (the past plus the step's rows); the figure is microseconds per layer per step:

* ``gqa``: com.microsoft GroupQueryAttention (no rotary) over a shared [1, kv, capacity, D]
  buffer bound as both past and present, as Hearth's graphs run it (the kernel reads the
  valid T; it runs one GEMM pair per *query* head, each over its KV head's whole past).
* ``grouped``: standard ops that read each KV head once for its whole group. The KV lives as
  [1, capacity, kv, D] (positions first), so the valid past is a contiguous prefix: the step
  binds a [1, T, kv, D] view of it as input *and* output of ``TensorScatter`` (opset 24),
  which writes the new rows in place (ORT copies nothing when both are one buffer); Q is
  regrouped to [kv, group·S, D]; ``FusedMatMul`` (transBatchB, transB: strided, no copy) gives
  [kv, group·S, T] scores, an additive causal mask [S, T] and ``Softmax``, and a second
  ``FusedMatMul`` (transBatchB) against V. One reduction over all T positions per row.
* ``grouped-cap``: the same over the GQA layout [1, kv, capacity, D] bound whole, the mask
  hiding positions from T on (reads the capacity, not T; here capacity = T, the best bucket,
  and a step just past a doubling reads 2T).
* ``grouped-f16``: ``grouped-cap`` over float16 buffers, the app's default conversion
  (app/models/gguf/grouped_attention.py): the step's rows Cast to float16 before
  TensorScatter, each layer's buffer Cast to float32 before the MatMuls. Here the 8 layers'
  float32 pasts up to 4k fit this kind of CPU's L3, which flatters the float32 forms: on the
  whole starter graph (30 layers, past any cache) this form decodes +20-27% at 4k
  (docs/ARCHITECTURE.md, "Float16 buffers").
* ``gqa-int8``: GroupQueryAttention as ``gqa`` with ORT's quantized KV cache (int8 buffers,
  ``k_quant_type`` / ``v_quant_type`` PER_TENSOR, ``kv_cache_bit_width`` 8, one static scale
  each: ``INT8_SCALE`` for this bench's unit-normal K/V): a quarter of the fp32 bytes read
  per step. Its scales are inputs fixed in advance, not measured per block as llama.cpp's
  Q8_0 cache is, so a model would need them calibrated.
* ``onnx-attn``: the ONNX opset-23 ``Attention`` op with q_num_heads / kv_num_heads, past
  and present apart (its CPU kernel copies the past into present and, as GQA, runs one GEMM
  pair per query head: onnxruntime/core/providers/cpu/llm/attention.cc).

``same rows``: whether the step's last position gets the very same bits as that position run
as the first row of a 3-row step or the sixth of a 64-row chunk (whose later rows it must not
see) and as a 1-row step; the exact mode needs the several-row results equal (one-row steps
are avoided where they round otherwise, app/engine/decoder.py ``choose_rows``).

``--prefill N``: also one layer's attention over an N-token prompt read in 512-row chunks
(ms), for the GroupQueryAttention forms: what a form costs the first token.

Prints the load average beside each figure: the machine may be shared. Never asserts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

LAYERS = 8
SAME_ROWS_AT = (1000, 1024, 4099)  # past lengths where the rows' bits are compared
MS = "com.microsoft"
F32 = TensorProto.FLOAT


@dataclass(frozen=True)
class Shape:
    name: str
    q_heads: int
    kv_heads: int
    dim: int

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads


SHAPES = (Shape("starter (9q/3kv/64)", 9, 3, 64), Shape("7B-like (32q/8kv/128)", 32, 8, 128))
FORMS = ("gqa", "gqa-int8", "grouped", "grouped-cap", "grouped-f16", "onnx-attn")
#: The forms over the GQA layout [1, kv, capacity, D] with TensorScatter (opset 24).
CAPACITY_FORMS = ("grouped-cap", "grouped-f16")
#: Each form's KV buffer type.
CACHE_TYPES = {"gqa-int8": TensorProto.INT8, "grouped-f16": TensorProto.FLOAT16}
INT8_SCALE = 4.5 / 127  # K and V are unit normal here: ±4.5 σ fill the int8 range
PREFILL_CHUNK = 512


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(values, dtype=dtype), name)


def build(form: str, shape: Shape, rows: int, layers: int) -> bytes:
    """The ``form`` graph for ``layers`` layers of ``shape`` attention, ``rows`` new rows."""
    hq, hkv, d, g, s = shape.q_heads, shape.kv_heads, shape.dim, shape.group, rows
    scale = float(1.0 / np.sqrt(d))
    nodes, inputs, outputs, inits = [], [], [], []
    inputs += [helper.make_tensor_value_info("query", F32, [1, s, hq * d]),
               helper.make_tensor_value_info("key", F32, [1, s, hkv * d]),
               helper.make_tensor_value_info("value", F32, [1, s, hkv * d])]
    cache = CACHE_TYPES.get(form, F32)
    if form in ("gqa", "gqa-int8"):
        inputs += [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, [1]),
                   helper.make_tensor_value_info("total_seq_len", TensorProto.INT32, [])]
    if form == "gqa-int8":
        inputs += [helper.make_tensor_value_info("k_scale", F32, [1]),
                   helper.make_tensor_value_info("v_scale", F32, [1])]
    elif form in ("grouped", *CAPACITY_FORMS):
        inputs += [helper.make_tensor_value_info("write_at", TensorProto.INT64, [1]),
                   helper.make_tensor_value_info("mask", F32, [1, 1, s, "T"])]
        inits += [_const("q_rows", [s, hkv, g, d]), _const("q_grouped", [hkv, g * s, d]),
                  _const("kv_rows", [1, s, hkv, d]), _const("kv_heads", [1, hkv, s, d]),
                  _const("scores4", [hkv, g, s, -1]), _const("scores3", [hkv, g * s, -1]),
                  _const("out4", [hkv, g, s, d]), _const("out3", [1, s, hq * d])]
        if form == "grouped":
            inits += [_const("past3", [-1, hkv, d])]
        else:
            inits += [_const("past3", [hkv, -1, d])]
        nodes += [helper.make_node("Reshape", ["query", "q_rows"], ["q4"]),
                  helper.make_node("Transpose", ["q4"], ["qt"], perm=[1, 2, 0, 3]),
                  helper.make_node("Reshape", ["qt", "q_grouped"], ["qg"])]
    else:
        inputs += [helper.make_tensor_value_info("mask", F32, [1, 1, s, "T"])]
    for i in range(layers):
        k, v, out = f"past_key.{i}", f"past_value.{i}", f"out.{i}"
        pk, pv = f"present_key.{i}", f"present_value.{i}"
        kv_dims = {"gqa": [1, hkv, "C", d], "gqa-int8": [1, hkv, "C", d],
                   "grouped": [1, "T", hkv, d], "grouped-cap": [1, hkv, "C", d],
                   "grouped-f16": [1, hkv, "C", d], "onnx-attn": [1, hkv, "P", d]}[form]
        inputs += [helper.make_tensor_value_info(k, cache, kv_dims),
                   helper.make_tensor_value_info(v, cache, kv_dims)]
        outputs += [helper.make_tensor_value_info(out, F32, None),
                    helper.make_tensor_value_info(pk, cache, None),
                    helper.make_tensor_value_info(pv, cache, None)]
        if form == "gqa-int8":
            nodes.append(helper.make_node(
                "GroupQueryAttention",
                ["query", "key", "value", k, v, "seqlens_k", "total_seq_len",
                 "", "", "", "", "", "k_scale", "v_scale"], [out, pk, pv],
                domain=MS, num_heads=hq, kv_num_heads=hkv, scale=scale,
                k_quant_type="PER_TENSOR", v_quant_type="PER_TENSOR", kv_cache_bit_width=8))
            continue
        if form == "gqa":
            nodes.append(helper.make_node(
                "GroupQueryAttention",
                ["query", "key", "value", k, v, "seqlens_k", "total_seq_len"], [out, pk, pv],
                domain=MS, num_heads=hq, kv_num_heads=hkv, scale=scale))
            continue
        if form == "onnx-attn":
            nodes.append(helper.make_node(
                "Attention", ["query", "key", "value", "mask", k, v], [out, pk, pv],
                q_num_heads=hq, kv_num_heads=hkv, scale=scale))
            continue
        axis = 1 if form == "grouped" else 2
        new_shape = "kv_rows" if form == "grouped" else "kv_heads"
        for src, past, present in (("key", k, pk), ("value", v, pv)):
            new = f"{src}.{i}/new"
            if form == "grouped":
                nodes.append(helper.make_node("Reshape", [src, new_shape], [new]))
            else:
                nodes += [helper.make_node("Reshape", [src, "kv_rows"], [new + "4"]),
                          helper.make_node("Transpose", [new + "4"], [new], perm=[0, 2, 1, 3])]
            if cache != F32:  # rounded once, as it is stored
                nodes.append(helper.make_node("Cast", [new], [new + "/half"], to=cache))
                new += "/half"
            nodes.append(helper.make_node("TensorScatter", [past, new, "write_at"], [present],
                                          axis=axis))
        trans_batch = 1 if form == "grouped" else 0
        read_k, read_v = pk, pv
        if cache != F32:  # each layer's buffer read back as float32
            read_k, read_v = f"{pk}/f32", f"{pv}/f32"
            nodes += [helper.make_node("Cast", [pk], [read_k], to=F32),
                      helper.make_node("Cast", [pv], [read_v], to=F32)]
        nodes += [
            helper.make_node("Reshape", [read_k, "past3"], [f"k3.{i}"]),
            helper.make_node("Reshape", [read_v, "past3"], [f"v3.{i}"]),
            helper.make_node("FusedMatMul", ["qg", f"k3.{i}"], [f"scores.{i}"], domain=MS,
                             alpha=scale, transB=1, transBatchB=trans_batch),
            helper.make_node("Reshape", [f"scores.{i}", "scores4"], [f"s4.{i}"]),
            helper.make_node("Add", [f"s4.{i}", "mask"], [f"masked.{i}"]),
            helper.make_node("Softmax", [f"masked.{i}"], [f"p4.{i}"], axis=-1),
            helper.make_node("Reshape", [f"p4.{i}", "scores3"], [f"p3.{i}"]),
            helper.make_node("FusedMatMul", [f"p3.{i}", f"v3.{i}"], [f"o3.{i}"], domain=MS,
                             transBatchB=trans_batch),
            helper.make_node("Reshape", [f"o3.{i}", "out4"], [f"o4.{i}"]),
            helper.make_node("Transpose", [f"o4.{i}"], [f"ot.{i}"], perm=[2, 0, 1, 3]),
            helper.make_node("Reshape", [f"ot.{i}", "out3"], [out]),
        ]
    opset = 24 if form in ("grouped", *CAPACITY_FORMS) else 23
    graph = helper.make_graph(nodes, form, inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model.SerializeToString()


class Step:
    """One ``form`` session for ``shape`` and ``rows`` rows, bound to KV of ``total`` valid
    positions (the sequence ``keys`` / ``values``: [total, kv, D]); ``run`` returns the last
    layer's output [rows, q_heads·D]."""

    def __init__(self, form: str, shape: Shape, rows: int, layers: int, threads: int,
                 keys: np.ndarray, values: np.ndarray, queries: np.ndarray) -> None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(build(form, shape, rows, layers), opts,
                                            providers=["CPUExecutionProvider"])
        total = keys.shape[0]
        self.form, self.rows, self.layers = form, rows, layers
        io = self.io = self.session.io_binding()
        hkv, d = shape.kv_heads, shape.dim
        self._keep = []
        new = slice(total - rows, total)
        io.bind_cpu_input("query", np.ascontiguousarray(queries[new]).reshape(1, rows, -1))
        io.bind_cpu_input("key", np.ascontiguousarray(keys[new]).reshape(1, rows, hkv * d))
        io.bind_cpu_input("value", np.ascontiguousarray(values[new]).reshape(1, rows, hkv * d))
        mask = np.zeros((1, 1, rows, total), np.float32)
        for r in range(rows):
            mask[0, 0, r, total - rows + r + 1:] = -np.inf
        if form in ("gqa", "gqa-int8"):
            io.bind_cpu_input("seqlens_k", np.array([total - 1], np.int32))
            io.bind_cpu_input("total_seq_len", np.array(total, np.int32))
        if form == "gqa-int8":
            io.bind_cpu_input("k_scale", np.array([INT8_SCALE], np.float32))
            io.bind_cpu_input("v_scale", np.array([INT8_SCALE], np.float32))
        elif form in ("grouped", *CAPACITY_FORMS):
            io.bind_cpu_input("write_at", np.array([total - rows], np.int64))
            io.bind_cpu_input("mask", mask)
        else:
            io.bind_cpu_input("mask", mask[..., :total])
        for i in range(layers):
            for name, seq in (("key", keys), ("value", values)):
                if form == "grouped":  # positions first: the valid prefix is one view
                    buf = np.array(seq[None])  # its own copy: the run writes into it
                    io.bind_cpu_input(f"past_{name}.{i}", buf)
                    io.bind_output(f"present_{name}.{i}", "cpu", 0, np.float32, buf.shape,
                                   buf.ctypes.data)
                elif form in ("gqa", "gqa-int8", *CAPACITY_FORMS):
                    buf = np.ascontiguousarray(seq.transpose(1, 0, 2)[None])
                    if form == "gqa-int8":
                        buf = np.clip(np.rint(buf / INT8_SCALE), -128, 127).astype(np.int8)
                    elif form == "grouped-f16":
                        buf = buf.astype(np.float16)
                    io.bind_cpu_input(f"past_{name}.{i}", buf)
                    io.bind_output(f"present_{name}.{i}", "cpu", 0, buf.dtype, buf.shape,
                                   buf.ctypes.data)
                else:  # past apart, present a new tensor (the op concatenates)
                    buf = np.ascontiguousarray(seq[: total - rows].transpose(1, 0, 2)[None])
                    io.bind_cpu_input(f"past_{name}.{i}", buf)
                    io.bind_output(f"present_{name}.{i}", "cpu")
                self._keep.append(buf)
            io.bind_output(f"out.{i}", "cpu")

    def run(self) -> np.ndarray:
        self.session.run_with_iobinding(self.io)
        outs = self.io.get_outputs()
        return outs[-1].numpy().reshape(self.rows, -1)  # out.{last}: bound last


def _sequence(shape: Shape, total: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((total, shape.kv_heads, shape.dim), dtype=np.float32)
    values = rng.standard_normal((total, shape.kv_heads, shape.dim), dtype=np.float32)
    queries = rng.standard_normal((total, shape.q_heads * shape.dim), dtype=np.float32)
    return keys, values, queries


def same_rows(form: str, shape: Shape, totals: tuple[int, ...], threads: int) -> str:
    """At each T in ``totals``: position T-1's output as the last row of a 2-row step, the
    first of a 3-row step and the sixth of a 64-row chunk (later positions masked from it),
    and as a 1-row step; 'yes' when the first three give the same bits at every T (and
    whether the 1-row step does too)."""
    several, one, worst = True, True, 0.0
    for total in totals:
        keys, values, queries = _sequence(shape, total + 64, seed=total)
        got = []
        for rows, at in ((2, 1), (3, 0), (64, 5), (1, 0)):
            end = total - 1 - at + rows  # position total-1 is row ``at`` of the step
            step = Step(form, shape, rows, 1, threads, keys[:end], values[:end],
                        queries[:end])
            got.append(step.run()[at])
        for other in got[1:3]:
            several &= bool(np.array_equal(got[0], other))
            worst = max(worst, float(np.max(np.abs(got[0] - other))))
        one &= bool(np.array_equal(got[0], got[3]))
    return ("yes" if several else f"NO ({worst:.1e})") + (", 1-row too" if one else "")


def time_step(form: str, shape: Shape, total: int, rows: int, threads: int,
              seconds: float = 1.5) -> float:
    """Median µs per layer of one step of ``rows`` rows at ``total`` valid positions."""
    layers = LAYERS
    keys, values, queries = _sequence(shape, total)
    step = Step(form, shape, rows, layers, threads, keys, values, queries)
    for _ in range(3):
        step.session.run_with_iobinding(step.io)
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t = time.perf_counter()
        step.session.run_with_iobinding(step.io)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6 / layers


def time_prefill(form: str, shape: Shape, tokens: int, threads: int) -> float:
    """ms for one layer's attention over a ``tokens``-token prompt in 512-row chunks, each
    chunk writing its rows into the shared buffer (``gqa`` / ``gqa-int8``); ``tokens`` is
    rounded down to whole chunks."""
    tokens = max(PREFILL_CHUNK, tokens - tokens % PREFILL_CHUNK)
    keys, values, queries = _sequence(shape, tokens)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.log_severity_level = 3
    session = ort.InferenceSession(build(form, shape, PREFILL_CHUNK, 1), opts,
                                   providers=["CPUExecutionProvider"])
    dtype = np.int8 if form == "gqa-int8" else np.float32
    buffers = [np.zeros((1, shape.kv_heads, tokens, shape.dim), dtype) for _ in range(2)]
    started = time.perf_counter()
    for at in range(0, tokens, PREFILL_CHUNK):
        rows = PREFILL_CHUNK
        io = session.io_binding()
        new = slice(at, at + rows)
        io.bind_cpu_input("query", np.ascontiguousarray(queries[new])[None])
        io.bind_cpu_input("key", np.ascontiguousarray(keys[new]).reshape(1, rows, -1))
        io.bind_cpu_input("value", np.ascontiguousarray(values[new]).reshape(1, rows, -1))
        io.bind_cpu_input("seqlens_k", np.array([at + rows - 1], np.int32))
        io.bind_cpu_input("total_seq_len", np.array(at + rows, np.int32))
        if form == "gqa-int8":
            io.bind_cpu_input("k_scale", np.array([INT8_SCALE], np.float32))
            io.bind_cpu_input("v_scale", np.array([INT8_SCALE], np.float32))
        for name, buf in zip(("key", "value"), buffers, strict=True):
            io.bind_cpu_input(f"past_{name}.0", buf)
            io.bind_output(f"present_{name}.0", "cpu", 0, buf.dtype, buf.shape,
                           buf.ctypes.data)
        io.bind_output("out.0", "cpu")
        session.run_with_iobinding(io)
    return (time.perf_counter() - started) * 1000


def main(contexts: list[int], threads: int, rows: tuple[int, ...] = (2,),
         prefill: int = 0) -> int:
    print(f"one layer's attention per decode step, µs (median; {LAYERS} layers per graph, "
          f"{threads} threads, ORT {ort.__version__}); rows = new rows per step "
          "(Hearth's exact steps run 2)")
    for shape in SHAPES:
        print(f"\n{shape.name}")
        print(f"{'form':12s} {'rows':>4s} " + " ".join(f"{f'T={n}':>10s}" for n in contexts)
              + f"   same rows (T={', '.join(map(str, SAME_ROWS_AT))})")
        for form in FORMS:
            for r in rows:
                cells = []
                for n in contexts:
                    try:
                        cells.append(f"{time_step(form, shape, n, r, threads):10.0f}")
                    except Exception as exc:  # a form ORT cannot run
                        cells.append(f"{'n/a':>10s}")
                        print(f"   {form}: {str(exc).splitlines()[0][:150]}")
                try:
                    exact = same_rows(form, shape, SAME_ROWS_AT, threads)
                except Exception:
                    exact = "n/a"
                print(f"{form:12s} {r:4d} " + " ".join(cells)
                      + f"   {exact}   (load {os.getloadavg()[0]:.1f})", flush=True)
        if prefill:
            for form in ("gqa", "gqa-int8"):
                ms = time_prefill(form, shape, prefill, threads)
                print(f"{form:12s} prefill of {prefill} tokens ({PREFILL_CHUNK}-row chunks): "
                      f"{ms:.0f} ms per layer   (load {os.getloadavg()[0]:.1f})", flush=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", default="1024,4096,8192")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", default="2")
    parser.add_argument("--prefill", type=int, default=0,
                        help="also time one layer's attention over a prompt this long")
    a = parser.parse_args()
    raise SystemExit(main([int(x) for x in a.contexts.split(",")], a.threads,
                          tuple(int(x) for x in a.rows.split(",")), a.prefill))
