"""Tiny GGUF files convert, load in ONNX Runtime and match the numpy reference."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from app.errors import ConversionError
from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile, matrix_shape
from app.models.gguf.weights import DEFAULT_EXACT_OFFSETS, WeightSource
from tests.models.llama_reference import RefCache, RefConfig, forward
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, kv_dtype, open_session
from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS, LAYERS, write_tiny_gguf

PROMPT = [5, 80, 17, 250, 3, 99, 42]
STEPS = [[7], [120, 9, 33]]  # a cached single-token step, then a cached multi-token chunk


def ref_config(arch: str) -> RefConfig:
    return RefConfig(
        LAYERS,
        HEADS,
        KV_HEADS,
        HEAD_DIM,
        10000.0 if arch == "llama" else 1e6,
        1e-5,
        rope_interleaved=arch == "llama",
    )


def reference_logits(weights: dict, arch: str, *, kv_half: bool = False) -> list[np.ndarray]:
    """``kv_half``: K and V rounded to float16 as llama.cpp's default cache keeps them (the
    default conversion's buffers); else float32 (``kv_cache="float32"``)."""
    cache = RefCache()
    cfg = dataclasses.replace(ref_config(arch), kv_half=kv_half)
    out = [forward(weights, cfg, PROMPT, cache)[-1]]
    out += [forward(weights, cfg, step, cache)[-1] for step in STEPS]
    return out


def onnx_logits(runner) -> list[np.ndarray]:
    return [runner.step(PROMPT)] + [runner.step(step) for step in STEPS]


def nbits_weights(src, weights: dict, exact_offsets: bool = DEFAULT_EXACT_OFFSETS) -> dict:
    """The reference weights as MatMulNBits will see them (the mapping's output; by default
    the converter's default mapping)."""
    g = GGUFFile(src)
    ws = WeightSource(g, "native", exact_offsets=exact_offsets)
    out = dict(weights)
    for name, t in g.tensors.items():
        if (len(t.shape) == 2 and name != "token_embd.weight") or (
            name == "token_embd.weight" and "output.weight" not in g.tensors
        ):
            lin = ws.linear(name)
            dense = lin if isinstance(lin, np.ndarray) else lin.dequantize()
            if name == "token_embd.weight":
                out["output.weight"] = dense.astype(np.float32)
            else:
                out[name] = dense.astype(np.float32)
    return out


@pytest.mark.parametrize(
    ("arch", "qtype", "tied", "bias", "precision"),
    [
        ("llama", Q.F32, True, False, "native"),
        ("llama", Q.F16, False, False, "native"),
        ("llama", Q.BF16, True, False, "native"),
        ("qwen2", Q.F32, False, True, "native"),
        ("llama", Q.Q4_1, True, False, "fp32"),
        ("qwen2", Q.Q6_K, False, True, "fp32"),
        # issue 27: every type's fp32 conversion (the low-bit ones: test_gguf_lowbit)
        ("llama", Q.Q4_0, False, False, "fp32"),
        ("llama", Q.Q5_0, True, False, "fp32"),
        ("llama", Q.Q5_1, False, False, "fp32"),
        ("llama", Q.Q8_0, True, False, "fp32"),
        ("llama", Q.Q4_K, False, False, "fp32"),
        ("llama", Q.Q5_K, True, False, "fp32"),
    ],
)
def test_float_paths_match_reference(tmp_path, arch, qtype, tied, bias, precision):
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch=arch, qtype=qtype, tied=tied, bias=bias)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", precision=precision)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    want = reference_logits(weights, arch)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_the_default_float16_cache_computes_what_llama_cpps_f16_cache_does(tmp_path, arch):
    """The default conversion keeps K and V in float16: its logits are those of the
    reference that rounds them as they are stored (llama.cpp's default F16 cache), to the
    rounding of a float16 value that fp32 noise can tip either way, and further from the
    float32-cache reference than from it."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch=arch, qtype=Q.F32, bias=arch == "qwen2")
    dest = convert_gguf(src, tmp_path / "model")
    session = open_session(dest)
    assert kv_dtype(session) == np.float16
    got = np.array(onnx_logits(GrowingRunner(session)))
    half = np.array(reference_logits(weights, arch, kv_half=True))
    full = np.array(reference_logits(weights, arch))
    np.testing.assert_allclose(got, half, atol=1e-2, rtol=0)
    assert np.abs(got - half).mean() < np.abs(got - full).mean()


@pytest.mark.parametrize(
    ("arch", "qtype", "tied", "bias", "exact_offsets"),
    [
        ("llama", Q.Q8_0, True, False, False),
        ("qwen2", Q.Q8_0, False, True, False),
        ("llama", Q.Q4_0, False, False, False),
        ("llama", Q.Q4_1, True, False, False),
        ("llama", Q.Q4_1, True, False, True),
        ("qwen2", Q.Q4_1, False, True, True),
        ("qwen2", Q.Q6_K, True, True, False),
        ("llama", Q.Q4_K, False, False, False),
        ("llama", Q.Q4_K, False, False, True),
        ("llama", Q.Q5_1, True, False, True),
        ("llama", Q.Q5_K, False, False, True),
        ("llama", Q.Q5_0, False, False, False),
    ],
)
def test_native_quantized_paths_match_reference(tmp_path, arch, qtype, tied, bias, exact_offsets):
    """With float activations (accuracy_level 0) the graph computes exactly the mapped
    weights (1e-4). Exact types map to the GGUF's own values, and so do Q4_1/Q4_K with
    exact_offsets (4-bit codes plus the block-offset Gemm); without it those two differ from
    them by at most half an 8-bit step per weight (tested in test_gguf_quant)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, arch=arch, qtype=qtype, tied=tied, bias=bias)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        exact_offsets=exact_offsets)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    want = reference_logits(nbits_weights(src, weights, exact_offsets), arch)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)
    if qtype in (Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q6_K) or exact_offsets:  # the GGUF's own weights
        for g, w in zip(got, reference_logits(weights, arch), strict=True):
            np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_default_carries_q4_1_exactly(tmp_path):
    """Q4_1 converts by default as exact 4-bit codes plus block offsets (the form
    bench/bench_prefill.py chose): every block matrix is a 4-bit MatMulNBits with a zero
    point per block (its zero_points input, exact-offsets form 3) followed by its offset
    Gemm, the manifest says so, and at accuracy_level 0 the logits are the GGUF's own
    weights'."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q4_1)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0)
    conversion = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]
    assert conversion["exact_offsets"] is True and conversion["offsets_form"] == 3
    assert conversion["weights"] == {"Q4_1->nbits4": LAYERS * 7 + 1}  # q k v o gate up down; head
    graph = _graph(dest)
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    bits = {a.i for n in nbits for a in n.attribute if a.name == "bits"}
    assert bits == {4}
    zero_points = {i.name: i for i in graph.initializer if i.name.endswith(".qzeros")}
    assert len(nbits) == LAYERS * 4 + 1
    for node in nbits:  # input 3 of MatMulNBits: uint8, two 4-bit zero points per byte
        assert len(node.input) >= 4 and node.input[3] in zero_points
        k = next(a.i for a in node.attribute if a.name == "K")
        n = next(a.i for a in node.attribute if a.name == "N")
        assert zero_points[node.input[3]].dims == [n * ((k // 32 + 1) // 2)]
    for g, w in zip(onnx_logits(GrowingRunner(open_session(dest))),
                    reference_logits(weights, "llama"), strict=True):  # fmt: skip
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def _graph(dest):
    import onnx

    return onnx.load(str(dest / "model.onnx"), load_external_data=False).graph


@pytest.mark.parametrize(
    ("qtype", "exact_offsets"), [(Q.Q4_1, True), (Q.Q4_1, False), (Q.Q8_0, False), (Q.F32, False)]
)
def test_projections_are_fused(tmp_path, qtype, exact_offsets):
    """q/k/v run as one matmul feeding GroupQueryAttention packed (key/value empty), gate/up
    as one matmul then a Split; exact Q4_1 adds its block offsets with one Gemm per matmul.
    (The GQA form, asked for: the default grouped form splits the packed rows itself.)"""
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=qtype)
    dest = convert_gguf(src, tmp_path / "model", accuracy_level=0, exact_offsets=exact_offsets,
                        attention="gqa")
    graph = _graph(dest)
    by_op: dict[str, list] = {}
    for node in graph.node:
        by_op.setdefault(node.op_type, []).append(node)
    matmul = "MatMul" if qtype == Q.F32 else "MatMulNBits"
    weights = [n for n in by_op[matmul] if "block_sums" not in n.name]
    assert len(weights) == LAYERS * 4 + 1  # qkv, o, gate_up, down per layer; lm_head
    assert [a.input[1:3] for a in by_op["GroupQueryAttention"]] == [["", ""]] * LAYERS
    assert len(by_op["Split"]) == LAYERS
    # tied Q4_1 embeddings: the lm_head is Q4_1 as well
    assert len(by_op.get("Gemm", [])) == (LAYERS * 4 + 1 if exact_offsets else 0)
    if qtype == Q.Q4_1:
        fused = next(n for n in weights if n.name == "layers.0.attn.qkv_proj")
        attrs = {a.name: a.i for a in fused.attribute}
        bits = 4 if exact_offsets else 8
        assert (attrs["bits"], attrs["N"]) == (bits, (HEADS + 2 * KV_HEADS) * HEAD_DIM)


def test_mixed_types_are_not_fused_and_stay_exact(tmp_path):
    """A file mixing types inside q/k/v and gate/up (as Q4_K_M does) keeps them separate."""
    src = tmp_path / "m.gguf"
    types = {"attn_v": Q.Q8_0, "ffn_up": Q.Q4_0}
    weights = write_tiny_gguf(src, qtype=Q.Q4_1, matrix_types=types)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        exact_offsets=True)
    graph = _graph(dest)
    assert all(n.input[1] for n in graph.node if n.op_type == "GroupQueryAttention")
    assert not [n for n in graph.node if n.op_type == "Split"]
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("qtype", "exact_offsets"), [(Q.Q8_0, False), (Q.Q4_1, True)])
def test_default_accuracy_level_stays_close(tmp_path, qtype, exact_offsets):
    """accuracy_level 4 quantizes activations to int8 per 32-element block (relative error
    ≤ 1/254 per element, like llama.cpp's q8 activations): logits stay within 2% of their
    range and the greedy choice is unchanged on this model."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, seed=3)
    dest = convert_gguf(src, tmp_path / "model", exact_offsets=exact_offsets)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        span = float(w.max() - w.min())
        assert np.abs(g - w).max() <= 0.02 * span
        assert int(g.argmax()) == int(w.argmax())


@pytest.mark.parametrize("precision", ["int4", "fp16"])
def test_lossy_precisions_stay_close(tmp_path, precision):
    """fp16 weights: relative error 2**-11 per weight; int4 (fresh symmetric, block 32):
    error ≤ absmax/16 per weight. Both keep logits near the fp32 reference."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.F32, seed=1)
    dest = convert_gguf(src, tmp_path / "model", precision=precision)
    got = onnx_logits(GrowingRunner(open_session(dest)))
    tol = 1e-2 if precision == "fp16" else 0.25
    for g, w in zip(got, reference_logits(weights, "llama"), strict=True):
        span = float(w.max() - w.min())
        assert np.abs(g - w).max() <= tol * span
    manifest = json.loads((dest / "hearth-manifest.json").read_text())
    assert manifest["precision"] == precision


def test_shared_buffer_matches_growing_cache(tmp_path):
    """Past and present bound to one max-length buffer give the same logits."""
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_0)
    dest = convert_gguf(src, tmp_path / "model")
    session = open_session(dest)
    grow = onnx_logits(GrowingRunner(session))
    shared_runner = SharedBufferRunner(session, max_length=64)
    shared = onnx_logits(shared_runner)
    for g, s in zip(grow, shared, strict=True):
        np.testing.assert_allclose(s, g, atol=1e-5)
    # rewinding the cursor and re-running the last chunk gives the same answer again
    shared_runner.rewind(len(PROMPT) + 1)
    np.testing.assert_allclose(shared_runner.step(STEPS[1]), grow[-1], atol=1e-5)


def test_folder_layout_and_metadata(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0)
    dest = convert_gguf(src, tmp_path / "model", name="Tiny")
    names = sorted(p.name for p in dest.iterdir())
    assert names == [
        "chat_template.jinja",
        "genai_config.json",
        "hearth-manifest.json",
        "model.onnx",
        "model.onnx.data",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert not list(tmp_path.glob(".model.partial*"))
    cfg = json.loads((dest / "genai_config.json").read_text())
    dec = cfg["model"]["decoder"]
    assert (
        dec["num_hidden_layers"],
        dec["num_attention_heads"],
        dec["num_key_value_heads"],
        dec["head_size"],
    ) == (LAYERS, HEADS, KV_HEADS, HEAD_DIM)
    assert dec["inputs"]["past_key_names"] == "past_key_values.%d.key"
    assert cfg["model"]["eos_token_id"] == 2 and cfg["model"]["bos_token_id"] == 1
    session = open_session(dest)
    assert [o.name for o in session.get_outputs()][:3] == [
        "logits",
        "present.0.key",
        "present.0.value",
    ]
    assert session.get_outputs()[0].shape == ["batch_size", "logits_length", 288]
    assert "num_logits_to_keep" in [i.name for i in session.get_inputs()]
    ops = {
        n.op_type
        for n in __import__("onnx")
        .load(str(dest / "model.onnx"), load_external_data=False)
        .graph.node
    }
    assert {"TensorScatter", "MatMulNBits", "SkipSimplifiedLayerNormalization"} <= ops
    assert "GroupQueryAttention" not in ops  # grouped attention, the default
    manifest = json.loads((dest / "hearth-manifest.json").read_text())
    assert manifest["id"] == "model" and manifest["name"] == "Tiny"
    assert manifest["source"]["kind"] == "gguf" and len(manifest["source"]["sha256"]) == 64
    assert manifest["format"] == "genai" and manifest["context_length"] == 256
    listed = {f["path"]: f["size"] for f in manifest["files"]}
    assert listed["model.onnx.data"] == (dest / "model.onnx.data").stat().st_size
    tok_cfg = json.loads((dest / "tokenizer_config.json").read_text())
    assert tok_cfg["eos_token"] == "<|im_end|>" and tok_cfg["add_bos_token"] is False
    assert "<|im_start|>" in tok_cfg["chat_template"]


def test_estimate_is_close_to_real_size(tmp_path):
    from app.models.gguf.convert import estimate_output_bytes

    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_1)
    g = GGUFFile(src)
    est = estimate_output_bytes(g, WeightSource(g, "native"))
    dest = convert_gguf(src, tmp_path / "model")
    real = (dest / "model.onnx.data").stat().st_size
    assert 0.9 * real <= est <= 1.2 * real
    assert matrix_shape(g.tensor("blk.0.ffn_down.weight")) == (256, 512)


def test_cancel_between_layers_stops_the_conversion_and_leaves_nothing(tmp_path):
    from app.jobs import JobCancelled, JobControl

    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    control = JobControl()
    messages: list[str] = []

    def progress(fraction: float, message: str) -> None:
        messages.append(message)
        if message == f"Converting layer 1 of {LAYERS}":
            control.cancel()  # as Cancel or quitting does, while the first layer converts

    dest = tmp_path / "out" / "model"
    with pytest.raises(JobCancelled):
        convert_gguf(src, dest, progress=progress, check=control.checkpoint)
    assert messages[-1] == f"Converting layer 1 of {LAYERS}"  # no further layer was built
    assert not dest.exists()
    assert list((tmp_path / "out").iterdir()) == []  # the partial folder is gone
    # not cancelled: the same call converts fully
    assert convert_gguf(src, dest, check=JobControl().checkpoint) == dest


def test_a_cancel_stops_at_the_next_weight_matrix_not_the_next_layer(tmp_path):
    """A quit must not wait for a whole layer (a quarter of a second on the starter): the
    conversion asks before each weight matrix."""
    from app.jobs import JobCancelled

    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls == 3:  # the third matrix: inside the first layer
            raise JobCancelled()

    messages: list[str] = []
    dest = tmp_path / "out" / "model"
    with pytest.raises(JobCancelled):
        convert_gguf(src, dest, progress=lambda _f, m: messages.append(m), check=check)
    assert f"Converting layer 2 of {LAYERS}" not in messages  # stopped inside the first layer
    assert not dest.exists()


def test_progress_names_each_layer_and_phase_in_order(tmp_path):
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    reports: list[tuple[float, str]] = []
    convert_gguf(src, tmp_path / "model", progress=lambda f, m: reports.append((f, m)))
    messages = [m for _f, m in reports]
    assert messages == [
        "Reading tiny.gguf",
        *(f"Converting layer {i} of {LAYERS}" for i in range(1, LAYERS + 1)),
        "Converting the output layer",
        "Writing model.onnx",
        "Hashing tiny.gguf",
        "Hashing the converted files",
        "Converted",
    ]
    fractions = [f for f, _m in reports]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0


def test_a_known_source_hash_is_not_computed_again(tmp_path, monkeypatch):
    import app.models.gguf.convert as convert_mod
    from app.manifest import Manifest

    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)

    def no_hashing(path):
        raise AssertionError(f"{path} was hashed")

    monkeypatch.setattr(convert_mod, "sha256_file", no_hashing)
    messages: list[str] = []
    dest = convert_gguf(src, tmp_path / "model", source_sha256="ab" * 32,
                        progress=lambda f, m: messages.append(m))
    assert Manifest.read(dest).source["sha256"] == "ab" * 32
    assert "Hashing tiny.gguf" not in messages


def test_a_conversion_suggests_sampled_replies_not_greedy_ones(tmp_path):
    """A GGUF says nothing of sampling; greedy replies loop on small models, so a conversion
    suggests what llama.cpp front ends give GGUFs, and the app's settings start from it."""
    from app.engine.package import read_model_folder
    from app.engine.types import GenerationSettings, SamplingSettings

    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0)
    dest = convert_gguf(src, tmp_path / "model", name="Tiny")
    sampling = GenerationSettings.from_model(read_model_folder(dest).generation_defaults).sampling
    assert sampling == SamplingSettings(temperature=0.8, top_k=40, top_p=0.95,
                                        repetition_penalty=1.1)
    manifest = json.loads((dest / "hearth-manifest.json").read_text())
    assert manifest["conversion"]["sampling_form"] == 1


@pytest.mark.parametrize(("qtype", "tied"), [(Q.Q4_1, True), (Q.Q8_0, True), (Q.Q5_0, False)])
def test_activation_block_16_keeps_the_weights(tmp_path, qtype, tied):
    """``activation_block=16``: every MatMulNBits (and the quantized token lookup) runs on
    blocks of 16, so ORT's int8 kernels round activations per 16 elements, not per 32 as
    llama.cpp's q8 activations; the weights stay the GGUF's own (float activations give
    its logits) and the manifest says so."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=qtype, tied=tied, seed=4)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        activation_block=16)
    graph = _graph(dest)
    blocks = {(n.op_type, a.i) for n in graph.node for a in n.attribute
              if n.op_type in ("MatMulNBits", "GatherBlockQuantized") and a.name == "block_size"}
    lookup = {("GatherBlockQuantized", 16)} if qtype != Q.Q4_1 else set()
    assert blocks == {("MatMulNBits", 16)} | lookup
    conversion = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]
    assert conversion["activation_block"] == 16
    for g, w in zip(onnx_logits(GrowingRunner(open_session(dest))),
                    reference_logits(weights, "llama"), strict=True):  # fmt: skip
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("groups", [("qkv",), ("gate_up", "output"), ("o", "down")])
def test_activation_groups_cut_only_their_matrices(tmp_path, groups):
    """``activation_groups``: only the named groups' MatMulNBits run on blocks of 16 (the
    token lookup goes with the tied output layer); the rest keep their 32, the logits stay
    the GGUF's own and the manifest names the groups."""
    from app.models.gguf.graph_builder import matrix_group

    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q4_0, tied=True, seed=4)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=0,
                        activation_block=16,
                        activation_groups=groups)
    graph = _graph(dest)
    blocks: dict[str, set[int]] = {}
    for n in graph.node:
        if n.op_type in ("MatMulNBits", "GatherBlockQuantized"):
            size = next(a.i for a in n.attribute if a.name == "block_size")
            name = "model.embed_tokens" if n.op_type == "GatherBlockQuantized" else n.name
            blocks.setdefault(str(matrix_group(name)), set()).add(size)
    assert set(blocks) == {"qkv", "o", "gate_up", "down", "output"}
    assert blocks == {g: {16} if g in groups else {32} for g in blocks}
    conversion = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]
    assert conversion["activation_groups"] == sorted(groups)
    for g, w in zip(onnx_logits(GrowingRunner(open_session(dest))),
                    reference_logits(weights, "llama"), strict=True):  # fmt: skip
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("groups", [("down",), ("qkv", "output")])
def test_float_groups_take_float_activations_only_there(tmp_path, groups):
    """``float_groups``: the named groups' MatMulNBits take float activations
    (``FLOAT_ACCURACY``), every other keeps the int8 ones of ``accuracy_level`` 4, and the
    manifest names the groups."""
    from app.models.gguf.graph_builder import FLOAT_ACCURACY, matrix_group

    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_1, tied=True, seed=4)
    dest = convert_gguf(src, tmp_path / "model", float_groups=groups)
    levels: dict[str, set[int]] = {}
    for n in _graph(dest).node:
        if n.op_type == "MatMulNBits":
            level = next(a.i for a in n.attribute if a.name == "accuracy_level")
            levels.setdefault(str(matrix_group(n.name)), set()).add(level)
    assert set(levels) == {"qkv", "o", "gate_up", "down", "output"}
    assert levels == {g: {FLOAT_ACCURACY} if g in groups else {4} for g in levels}
    conversion = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]
    assert conversion["float_groups"] == sorted(groups)


def test_float_activations_on_every_group_give_the_gguf_logits(tmp_path):
    """Float activations on every group, though ``accuracy_level`` says int8: the logits are
    the GGUF's own within float rounding (int8 activations miss them by far more)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gguf(src, qtype=Q.Q4_1, tied=True, seed=4)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32", accuracy_level=4,
                        float_groups=("qkv", "o", "gate_up", "down", "output"))
    for g, w in zip(onnx_logits(GrowingRunner(open_session(dest))),
                    reference_logits(weights, "llama"), strict=True):  # fmt: skip
        np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)


def test_an_unknown_float_group_is_refused_in_a_sentence(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_0)
    with pytest.raises(ConversionError, match="Unknown matrix group ffn; choose from qkv"):
        convert_gguf(src, tmp_path / "model", float_groups=["ffn"])
    assert not (tmp_path / "model").exists()


def test_an_unknown_matrix_group_is_refused_in_a_sentence(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_0)
    with pytest.raises(ConversionError, match="Unknown matrix group mlp; choose from qkv"):
        convert_gguf(src, tmp_path / "model", activation_block=16, activation_groups=["mlp"])
    assert not (tmp_path / "model").exists()


def test_an_unknown_activation_block_is_refused_in_a_sentence(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_0)
    with pytest.raises(ConversionError, match="activation block 8"):
        convert_gguf(src, tmp_path / "model", activation_block=8)
    assert not (tmp_path / "model").exists()
