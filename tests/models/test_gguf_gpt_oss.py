"""gpt-oss GGUFs (MXFP4 experts, attention sinks, alternating window, YaRN) convert and match
the numpy reference (``gpt_oss_reference``, llama.cpp's semantics) fed by the ``gguf``
package's dequantizer."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from onnx import numpy_helper
from tokenizers import Tokenizer

from app.models.gguf import quant
from app.models.gguf.convert import convert_gguf
from app.models.gguf.experts import qmoe_form
from app.models.gguf.reader import GGUFFile
from tests.models import gpt_oss_reference as ref
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, open_session
from tests.models.ort_runner import greedy as onnx_greedy
from tests.models.tiny_gpt_oss import (
    CONFIG,
    EXPERT_FFN,
    EXPERTS,
    LAYERS,
    WINDOW,
    write_tiny_gpt_oss,
)  # fmt: skip

PROMPT = [5, 17, 60, 33, 99, 120, 7, 8, 200]  # longer than the window: its edge is crossed
STEPS = [[11], [42], [3, 4, 5], [77]]
PROMPTS = [PROMPT, [3, 9, 27, 81], list(range(100, 111)), [250]]


def steps(runner) -> list[np.ndarray]:
    return [runner.step(ids) for ids in [PROMPT, *STEPS]]


def worst(got, want) -> float:
    return max(float(np.abs(g - w).max()) for g, w in zip(got, want, strict=True))


def random_mxfp4(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Random MXFP4 blocks [n, k/32·17]: every code, exponents from 0 (a subnormal scale)
    to 250 (past that the doubled values overflow float32)."""
    blocks = rng.integers(0, 256, (n * k // 32, 17), dtype=np.uint8)
    blocks[:, 0] = rng.integers(0, 251, len(blocks))
    blocks[:4, 0] = [0, 1, 2, 250]
    return blocks.reshape(n, -1)


def test_mxfp4_blocks_carry_over_bit_for_bit():
    """MXFP4 → 8-bit codes (doubled e2m1, −12…12, plus 128) with the power-of-two scale
    2**(e−128): MatMulNBits' and QMoE's values equal the gguf package's dequantization."""
    rng = np.random.default_rng(0)
    n, k = 64, 256
    raw = random_mxfp4(rng, n, k)
    want = quants.dequantize(raw, Q.MXFP4).reshape(n, k)
    w = quant.to_nbits(raw, Q.MXFP4, n, k)
    assert (w.bits, w.block_size, w.zero_points, w.offsets) == (8, 32, None, None)
    assert w.exact and np.array_equal(w.dequantize(), want)
    assert int(w.codes().min()) >= 128 - 12 and int(w.codes().max()) <= 128 + 12
    assert quant.nbits_size(Q.MXFP4, n, k) == w.nbytes
    # as one expert tensor [E, N, K] for QMoE: the same values per expert
    experts = qmoe_form(raw, Q.MXFP4, 4, n // 4, k)
    assert experts.bits == 8
    assert np.array_equal(experts.float32(), want.reshape(4, n // 4, k))


def test_mxfp4_check_reads_both_ends_and_catches_a_wrong_code(monkeypatch):
    """The conversion's bit-for-bit check reads a slice of rows at each end of a tensor of
    experts (the whole would take the gguf dequantizer minutes per model) and still flags a
    mapping that does not give back the file's values."""
    rng = np.random.default_rng(1)
    n, k = 50, 128
    raw = random_mxfp4(rng, n, k)
    monkeypatch.setattr(quant, "CHECK_ROWS", 7)
    assert quant.to_nbits(raw, Q.MXFP4, n, k).exact
    wrong = bytearray(quant._MXFP4_HIGH)
    wrong[0x70:0x80] = bytes([128 + 13]) * 16  # a high nibble 7 (+6.0) read as 13, not 12
    monkeypatch.setattr(quant, "_MXFP4_HIGH", bytes(wrong))
    assert not quant.to_nbits(raw, Q.MXFP4, n, k).exact


def test_reads_the_params(tmp_path):
    write_tiny_gpt_oss(tmp_path / "m.gguf")
    p = GGUFFile(tmp_path / "m.gguf").params
    assert (p.n_experts, p.n_experts_used, p.expert_ffn) == (EXPERTS, 2, EXPERT_FFN)
    assert p.attn_sinks and p.qkv_bias and not p.rope_interleaved
    assert (p.sliding_window, p.local_layers) == (WINDOW, (0, 2))
    assert (p.yarn_factor, p.yarn_original_context, p.rope_scale_linear) == (4.0, 64, 1.0)
    assert not p.yarn_truncate  # gpt-oss's "truncate": false


@pytest.mark.parametrize(
    "twist",
    [{"sinks": False}, {"yarn_factor": 0.0}, {"yarn_truncate": True}, {"local_layers": ()},
     {"up_offset": 0.0}, {"swiglu_limit": 1e9}, {"n_experts_used": 1}],
)  # fmt: skip
def test_each_twist_matters(tmp_path, twist):
    """The reference without each twist answers differently (by more than ten times the
    1e-4 the exact conversion tests below allow), so they would catch a graph that left it
    out. Rounding YaRN's correction range moves the tiny model's logits the least."""
    weights = write_tiny_gpt_oss(tmp_path / "m.gguf", qtype=Q.F32)
    plain = dataclasses.replace(CONFIG, **twist)
    a, b = ref.run_steps(weights, CONFIG, PROMPT, STEPS), ref.run_steps(weights, plain, PROMPT,
                                                                        STEPS)
    assert worst(a, b) > 1e-3


def test_fp32_conversion_matches_reference(tmp_path):
    """Float weights (the experts dequantized into ORT's MoE) give the reference's logits
    over a prompt and cached steps, and its greedy tokens over the shared buffer."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gpt_oss(src, qtype=Q.F32, seed=1)
    dest = convert_gguf(src, tmp_path / "model", precision="fp32")
    graph = onnx.load(str(dest / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in graph.graph.node]
    assert ops.count("MoE") == LAYERS and "QMoE" not in ops
    assert worst(steps(GrowingRunner(open_session(dest))), ref.run_steps(
        weights, CONFIG, PROMPT, STEPS)) < 1e-4
    for prompt in PROMPTS:
        got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), prompt, 12)
        assert got == ref.greedy(weights, CONFIG, prompt, 12)


def test_native_4bit_experts_are_exact(tmp_path):
    """Q4_0 experts run in QMoE's 4-bit blocks with float activations (accuracy_level 0):
    the router, the interleaved gate/up layout and the biases match the reference exactly."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gpt_oss(src, expert_type=Q.Q4_0, seed=2)
    dest = convert_gguf(src, tmp_path / "model", accuracy_level=0)
    forms = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]["weights"]
    assert forms["Q4_0->qmoe4"] == 3 * LAYERS
    assert worst(steps(GrowingRunner(open_session(dest))), ref.run_steps(
        weights, CONFIG, PROMPT, STEPS)) < 1e-4
    for prompt in PROMPTS:
        got = onnx_greedy(SharedBufferRunner(open_session(dest), 64), prompt, 12)
        assert got == ref.greedy(weights, CONFIG, prompt, 12)


def _q8_0(x: np.ndarray) -> np.ndarray:
    """``x`` rounded as llama.cpp's CPU rounds the activations of an MXFP4 matmul (Q8_0:
    ``ggml_vec_dot_mxfp4_q8_0``)."""
    row = np.asarray(x, np.float32).reshape(1, -1)
    return quants.dequantize(quants.quantize(row, Q.Q8_0), Q.Q8_0).reshape(x.shape)


def _llama_cpp_experts(w, cfg, p, h):
    """The reference's experts with Q8_0-rounded inputs to the MXFP4 matmuls."""
    logits = h @ w[p + "ffn_gate_inp.weight"].T + w[p + "ffn_gate_inp.bias"]
    out = np.zeros_like(h)
    for t in range(len(h)):
        top = np.argsort(-logits[t], kind="stable")[: cfg.n_experts_used]
        mix = np.exp(logits[t, top] - logits[t, top].max())
        x = _q8_0(h[t])
        for e, weight in zip(top, mix / mix.sum(), strict=True):
            g = w[p + "ffn_gate_exps.weight"][e] @ x + w[p + "ffn_gate_exps.bias"][e]
            u = w[p + "ffn_up_exps.weight"][e] @ x + w[p + "ffn_up_exps.bias"][e]
            g, u = np.minimum(g, 7.0), np.clip(u, -7.0, 7.0)
            act = g / (1 + np.exp(-1.702 * g)) * (u + 1)
            down = w[p + "ffn_down_exps.weight"][e] @ _q8_0(act)
            out[t] += weight * (down + w[p + "ffn_down_exps.bias"][e])
    return out


def test_native_mxfp4_keeps_the_blocks_and_errs_like_llama_cpp(tmp_path, monkeypatch):
    """MXFP4 experts become QMoE 8-bit blocks holding the file's values bit for bit. ORT's
    CPU QMoE runs 8-bit experts with int8 activations (no float kernel), as llama.cpp's CPU
    runs MXFP4 against Q8_0 activations: the logits stay about as close to the float
    reference as llama.cpp's rounding does (measured: 0.78–1.05× its error over four seeds)."""
    src = tmp_path / "m.gguf"
    weights = write_tiny_gpt_oss(src, seed=0)
    dest = convert_gguf(src, tmp_path / "model", accuracy_level=0)
    forms = json.loads((dest / "hearth-manifest.json").read_text())["conversion"]["weights"]
    assert forms["MXFP4->qmoe8"] == 3 * LAYERS
    model = onnx.load(str(dest / "model.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    codes = inits["layers.1.moe.fc1_qweight"].astype(np.float32) - 128
    scales = inits["layers.1.moe.fc1_scales"]
    fc1 = (codes.reshape(*scales.shape, 32) * scales[..., None]).reshape(codes.shape)
    assert np.array_equal(fc1[:, 0::2], weights["blk.1.ffn_gate_exps.weight"])
    assert np.array_equal(fc1[:, 1::2], weights["blk.1.ffn_up_exps.weight"])

    want = ref.run_steps(weights, CONFIG, PROMPT, STEPS)
    hearth = worst(steps(GrowingRunner(open_session(dest))), want)
    monkeypatch.setattr(ref, "experts", _llama_cpp_experts)
    llama_cpp = worst(ref.run_steps(weights, CONFIG, PROMPT, STEPS), want)
    assert 0 < hearth < 1.25 * llama_cpp


def test_harmony_package(tmp_path):
    """The converted folder stops replies at <|return|> and <|call|> (not <|end|>, which only
    closes the analysis message), keeps the GGUF's template, and its o200k tokenizer loads."""
    src = tmp_path / "m.gguf"
    write_tiny_gpt_oss(src)
    dest = convert_gguf(src, tmp_path / "model")
    genai = json.loads((dest / "genai_config.json").read_text())
    # onnxruntime-genai's own name for it (its builder: GptOssForCausalLM → "gptoss"; the
    # GGUF says "gpt-oss", which genai's model_type.h does not list)
    assert genai["model"]["type"] == "gptoss"
    tokens = GGUFFile(src).get("tokenizer.ggml.tokens")
    assert genai["model"]["eos_token_id"] == [tokens.index("<|return|>"),
                                              tokens.index("<|call|>")]
    assert "<|start|>" in (dest / "chat_template.jinja").read_text()
    tok = Tokenizer.from_file(str(dest / "tokenizer.json"))
    ids = tok.encode("<|start|>user<|message|>the cat<|end|>").ids
    assert ids[0] == tokens.index("<|start|>") and ids[-1] == tokens.index("<|end|>")
    assert tok.decode(ids, skip_special_tokens=False).endswith("the cat<|end|>")
    # o200k's splits (llama.cpp's "gpt-4o"): digits in threes, contractions of any case
    pieces = [p for p, _ in tok.pre_tokenizer.pre_tokenize_str("12345 HELLOworld it'S")]
    assert pieces == ["123", "45", "ĠHELLOworld", "Ġit'S"]


def test_engine_chats_with_the_converted_model(tmp_path):
    """Hearth's engine loads the converted folder and its greedy reply to a chat, rendered
    through the GGUF's template in the sandbox, is the reference's greedy continuation of the
    same prompt."""
    from app.engine.engine import Engine
    from app.engine.types import GenerationSettings, Message, SamplingSettings

    src = tmp_path / "m.gguf"
    weights = write_tiny_gpt_oss(src, qtype=Q.F32, seed=4)
    dest = convert_gguf(src, tmp_path / "model", precision="fp32")
    engine = Engine.load(dest, provider="cpu", threads=1, huge_pages=False)
    tokens = GGUFFile(src).get("tokenizer.ggml.tokens")
    # Harmony's channels are reasoning markers, its special tokens kept out of the answer
    assert engine.reasoning.style == "harmony"
    assert engine.reasoning.hidden_markers[tokens.index("<|channel|>")] == "<|channel|>"
    assert set(engine.eos_token_ids) == {tokens.index("<|return|>"), tokens.index("<|call|>")}
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=10)
    history = [Message("user", "the cat sat")]
    got = [c.token_id for c in engine.chat(history, settings) if c.token_id is not None]
    prompt = engine.tokenizer.encode(
        "<|start|>user<|message|>the cat sat<|end|><|start|>assistant", add_special_tokens=False
    )
    assert prompt[0] == tokens.index("<|start|>")
    want = ref.greedy(weights, CONFIG, prompt, 10)
    assert not {tokens.index("<|return|>"), tokens.index("<|call|>")} & set(want)
    assert got == want


def test_the_engine_knows_qmoe_rounds_its_activations(tmp_path):
    """A graph whose only quantized weights are QMoE experts (int8 activations) counts as
    quantized, so greedy speculation verifies with zero tolerance, as for MatMulNBits."""
    from app.engine.engine import Engine

    src = tmp_path / "m.gguf"
    write_tiny_gpt_oss(src, qtype=Q.F32)
    dest = convert_gguf(src, tmp_path / "model")
    ops = {n.op_type for n in onnx.load(str(dest / "model.onnx"), load_external_data=False)
           .graph.node}
    assert "QMoE" in ops and "MatMulNBits" not in ops
    engine = Engine.load(dest, provider="cpu", threads=1, huge_pages=False)
    assert engine.decoder.graph.quantized_matmuls
