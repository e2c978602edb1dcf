"""The fp32 prompt session: long prompt chunks on ORT's fp32 kernels, everything else as before.
Only in the inexact mode (``exact=False``): by default replies must not depend on the cache,
and these kernels round otherwise (tests/engine/test_exact_replies.py).

Real ORT sessions over the int4 fixture (4-bit MatMulNBits, int8 activations, as the
onnxruntime-genai builder writes them): a session opened with ``mlas.qnbit.force_fp32`` is
the reference for what the prompt session must compute, and a plain session for what the
decode session must.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from app.cpu import cpu_kind
from app.engine.decoder import Decoder
from app.engine.engine import Engine
from app.engine.onnx_file import inspect_onnx
from app.engine.package import read_model_folder
from app.engine.prompt_session import (
    COST_PER_FILE_BYTE,
    MARGIN,
    MIN_ROWS,
    RESERVE_BYTES,
    plan_prompt_session,
)
from app.engine.providers import create_prompt_session
from app.engine.types import KernelTiming

LONG = [(5 + 7 * i) % 90 + 3 for i in range(MIN_ROWS + 37)]  # one chunk of >= MIN_ROWS
SHORT = LONG[: MIN_ROWS - 1]
PLENTY = 64 << 30


@pytest.fixture(scope="module")
def engines(gqa_int4_model_dir):
    """(engine with the prompt session, engine without, a decoder that runs everything on
    the fp32 kernels: the reference for the prompt session)."""
    from tests.fixtures.kernel_choice import plan_as_on_avx2

    with pytest.MonkeyPatch.context() as patch:  # as on x86 AVX2, where it pays: every CPU
        plan_as_on_avx2(patch)
        with_prompts = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    without = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, prompt_session=False,
                          exact=False)
    fp32_only = Decoder(create_prompt_session(without.spec, threads=1), without.graph,
                        context_length=without.spec.context_length)
    return with_prompts, without, fp32_only


class _Counted:
    """A session that counts its runs (everything else passes through)."""

    def __init__(self, session) -> None:
        self._session = session
        self.runs = 0

    def run_with_iobinding(self, *args, **kwargs):
        self.runs += 1
        return self._session.run_with_iobinding(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._session, name)


@pytest.fixture
def runs(engines, monkeypatch):
    """How many times each of the prompt-session engine's sessions ran since the test began:
    says which one read a chunk on any CPU, whether or not its kernels round otherwise."""
    decoder = engines[0].decoder
    counted = {"prompt": _Counted(decoder._prompt.session), "decode": _Counted(decoder.session)}
    monkeypatch.setattr(decoder._prompt, "session", counted["prompt"])
    monkeypatch.setattr(decoder._main, "session", counted["decode"])
    return lambda: {lane: session.runs for lane, session in counted.items()}


def test_the_int4_fixture_gets_a_prompt_session_and_says_so(engines):
    with_prompts, without, _ = engines
    assert with_prompts.decoder.has_prompt_session
    assert with_prompts.prompt_plan.use
    assert f"Prompts of {MIN_ROWS}+ tokens run on fp32 kernels" in with_prompts.prompt_plan.note
    assert not without.decoder.has_prompt_session


def test_a_long_chunk_runs_on_the_fp32_kernels(engines, runs):
    with_prompts, without, fp32_only = engines
    got = with_prompts.decoder.feed(with_prompts.new_cache(), LONG).copy()
    assert runs() == {"prompt": 1, "decode": 0}  # the prompt session read it, on any CPU
    reference = fp32_only.feed(without.new_cache(), LONG).copy()
    np.testing.assert_array_equal(got, reference)


def test_a_short_chunk_and_every_step_stay_on_the_decode_session(engines, runs):
    with_prompts, without, _ = engines
    np.testing.assert_array_equal(
        with_prompts.decoder.feed(with_prompts.new_cache(), SHORT),
        without.decoder.feed(without.new_cache(), SHORT),
    )
    assert runs() == {"prompt": 0, "decode": 1}


def test_steps_after_a_long_prompt_continue_over_the_kv_it_wrote(engines, runs):
    # The prompt session writes the very KV the fp32 reference writes; the decode steps that
    # follow read it as a plain decoder reads the reference's: bit for bit, token for token.
    with_prompts, without, fp32_only = engines
    cache = with_prompts.new_cache()
    ref_cache = without.new_cache()
    token = int(np.argmax(with_prompts.decoder.feed(cache, LONG)))
    assert token == int(np.argmax(fp32_only.feed(ref_cache, LONG)))
    for got, want in zip(cache.export_arrays(), ref_cache.export_arrays(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert runs() == {"prompt": 1, "decode": 0}
    for _ in range(12):
        got = with_prompts.decoder.step(cache, token).copy()
        want = without.decoder.step(ref_cache, token).copy()
        np.testing.assert_array_equal(got, want)
        token = int(np.argmax(got))
    assert cache.tokens == ref_cache.tokens
    assert runs() == {"prompt": 1, "decode": 12}


def test_a_verify_step_of_many_tokens_stays_on_the_decode_session(engines, runs):
    # verify steps must round like the reply's own steps (speculation's exactness), however
    # many tokens they carry
    with_prompts, without, _ = engines
    cache, ref_cache = with_prompts.new_cache(), without.new_cache()
    with_prompts.decoder.feed(cache, SHORT[:8])
    without.decoder.feed(ref_cache, SHORT[:8])
    np.testing.assert_array_equal(
        with_prompts.decoder.verify(cache, LONG[:MIN_ROWS + 4]),
        without.decoder.verify(ref_cache, LONG[:MIN_ROWS + 4]),
    )
    assert runs() == {"prompt": 0, "decode": 2}


def test_a_draft_model_never_gets_one(gqa_int4_model_dir, gqa_model_dir):
    engine = Engine.load(gqa_model_dir, provider="cpu", threads=1)
    engine.attach_draft(gqa_int4_model_dir, threads=1)
    assert not engine.draft.decoder.has_prompt_session


def test_the_plan_opens_it_only_where_it_pays_and_fits(gqa_int4_model_dir, gqa_model_dir):
    from tests.fixtures.kernel_choice import FP32_FASTER

    model = read_model_folder(gqa_int4_model_dir)
    assert model.model_bytes == (gqa_int4_model_dir / "model.onnx").stat().st_size  # one file
    cost = int(model.model_bytes * COST_PER_FILE_BYTE)
    asked = []

    def measured(timing):
        def ask():
            asked.append(timing)
            return timing
        return ask

    x86 = {"machine": "x86_64", "ort_version": "1.32.0", "exact": False,
           "timing": measured(FP32_FASTER)}

    opened = plan_prompt_session(model, "cpu", available_bytes=PLENTY, **x86)
    assert opened.use and opened.cost_bytes == cost
    assert opened.note.endswith("370.9 ms on fp32 kernels and 418.2 ms on int8 ones for a "
                                f"256-token chunk of this model's matmuls on this CPU "
                                f"({cpu_kind()}).")
    assert plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="AMD64",
                               ort_version="1.31.1", exact=False,
                               timing=measured(FP32_FASTER)).use  # Windows spells it so
    # where the int8 kernels measure faster (AVX-512 VNNI; a 1.5B model on AVX2), or the
    # fp32 ones not MARGIN faster, there is nothing to gain
    for int8_ms in (6.0, 6.1 / (1 - MARGIN) - 0.01):
        slower = plan_prompt_session(
            model, "cpu", available_bytes=PLENTY, machine="x86_64", ort_version="1.32.0",
            exact=False, timing=measured(KernelTiming(int8_ms, 6.1, 128)))
        assert not slower.use and slower.note.startswith("Prompts run on the int8 kernels: 6.1 ms")
        assert not slower.worth_telling
    assert plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                               ort_version="1.32.0", exact=False,
                               timing=measured(KernelTiming(6.1 / (1 - MARGIN) + 0.01, 6.1,
                                                            128))).use
    unmeasured = plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                                     ort_version="1.32.0", exact=False,
                                     timing=measured(None))
    assert not unmeasured.use and "could not be measured" in unmeasured.note
    busy = plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                               ort_version="1.32.0", exact=False,
                               timing=measured(KernelTiming(418.2, 200.0, 256, spread=0.31,
                                                            steady=False)))
    assert not busy.use  # fp32 twice as fast, but on a measurement beside a busy core
    assert busy.note.startswith("Prompts run on the int8 kernels: the CPU was too busy to "
                                "compare them with fp32 ones (timed rounds 31% apart; 200.0 ms")
    assert busy.note.endswith("; measured again at the next load.")
    assert not plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                                   ort_version="1.32.0", exact=False, timing=None).use
    measurements = len(asked)

    # everything else is decided before the measurement, which is never taken then
    exact = plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                                ort_version="1.32.0",
                                timing=measured(FP32_FASTER))  # default: exact replies
    assert not exact.use and "never depends on what the cache held" in exact.note

    short = plan_prompt_session(model, "cpu", available_bytes=cost + RESERVE_BYTES - 1, **x86)
    assert not short.use and short.cost_bytes == cost
    assert "more memory and" in short.note and "is free" in short.note

    unknown = plan_prompt_session(model, "cpu", available_bytes=None, **x86)
    assert not unknown.use and "free memory is unknown" in unknown.note

    for provider in ("cuda", "dml", "coreml"):
        assert not plan_prompt_session(model, provider, available_bytes=PLENTY, **x86).use
    old = plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="x86_64",
                              ort_version="1.30.0", exact=False, timing=measured(FP32_FASTER))
    assert not old.use and "1.31 or newer" in old.note
    arm = plan_prompt_session(model, "cpu", available_bytes=PLENTY, machine="arm64",
                              ort_version="1.32.0", exact=False, timing=measured(FP32_FASTER))
    assert not arm.use and "x86" in arm.note
    float_graph = plan_prompt_session(read_model_folder(gqa_model_dir), "cpu",
                                      available_bytes=PLENTY, **x86)
    assert not float_graph.use and float_graph.cost_bytes == 0
    assert len(asked) == measurements == 7


def test_the_file_summary_counts_matmulnbits_by_kernel_attributes(gqa_int4_model_dir, tmp_path):
    path = gqa_int4_model_dir / "model.onnx"
    nodes = [n for n in onnx.load(path).graph.node if n.op_type == "MatMulNBits"]
    assert nodes
    assert inspect_onnx(path).matmul_nbits == {(4, 32, 4): len(nodes)}

    # attributes left out take the operator's defaults (bits 4, accuracy_level 0)
    model = onnx.load(path)
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            del node.attribute[:]
            node.attribute.extend([onnx.helper.make_attribute("block_size", 16)])
    onnx.save(model, tmp_path / "defaults.onnx")
    assert inspect_onnx(tmp_path / "defaults.onnx").matmul_nbits == {(4, 16, 0): len(nodes)}


def test_short_of_memory_the_model_reads_prompts_on_its_decode_session(gqa_int4_model_dir,
                                                                       monkeypatch,
                                                                       avx2_kernel_choice):
    import app.engine.engine as engine_module

    monkeypatch.setattr(engine_module, "available_ram_bytes", lambda: 200_000_000)
    engine = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    assert not engine.decoder.has_prompt_session
    plan = engine.prompt_plan
    assert not plan.use and plan.worth_telling
    assert plan.note.startswith("Prompts run on the int8 kernels: fp32 kernels for them would "
                                "take ")
    assert plan.note.endswith(" more memory and 200.0 MB is free (Hearth keeps 1.1 GB spare).")
    assert engine.open_prompt_session() is plan and not engine.decoder.has_prompt_session


def test_the_cost_counts_the_external_weights(gqa_int4_model_dir, tmp_path):
    import shutil

    folder = tmp_path / "external"
    shutil.copytree(gqa_int4_model_dir, folder)
    model = onnx.load(folder / "model.onnx")
    onnx.save_model(model, folder / "model.onnx", save_as_external_data=True,
                    location="model.onnx.data", size_threshold=0)
    spec = read_model_folder(folder)
    data = (folder / "model.onnx.data").stat().st_size
    assert data > 0
    assert spec.model_bytes == (folder / "model.onnx").stat().st_size + data
    assert spec.matmul_nbits == inspect_onnx(gqa_int4_model_dir / "model.onnx").matmul_nbits
