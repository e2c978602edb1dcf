"""Rope scaling read from GGUF files: Llama 3.1 frequency factors (``rope_freqs.weight``) and
linear position scaling both reach the graph's cos/sin caches and match the numpy reference
at positions beyond the original context, where scaling matters."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from gguf import GGUFWriter, RopeScalingType

from app.errors import ConversionError
from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile
from tests.models.llama_reference import RefCache, RefConfig, forward
from tests.models.ort_runner import GrowingRunner, open_session
from tests.models.tiny_gguf import HEAD_DIM, HEADS, KV_HEADS, LAYERS, write_tiny_gguf
from tests.models.tiny_spm import rewrite_gguf

BASE = 10000.0
CONTEXT = 256  # the tiny model's context_length
STEPS = [[7], [120, 9, 33]]  # a cached single token, then a cached chunk


def llama3_rope_factors(
    *,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_context: int = 32,
) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's converter computes it from a Llama 3.1
    ``rope_scaling`` (rope_type "llama3"): 1 for short wavelengths, ``factor`` for long ones,
    a smooth blend between."""
    freqs = 1.0 / BASE ** (np.arange(0, HEAD_DIM, 2, dtype=np.float32) / HEAD_DIM)
    low_wavelen = original_context / low_freq_factor
    high_wavelen = original_context / high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_context / wavelen - low_freq_factor) / (
                high_freq_factor - low_freq_factor
            )
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def prompt(length: int) -> list[int]:
    return [int(i) for i in np.random.default_rng(7).integers(3, 288, size=length)]


def compare(weights: dict, dest, cfg: RefConfig, ids: list[int]) -> None:
    """ONNX logits match the scaled reference, and clearly differ from the unscaled one."""
    runner = GrowingRunner(open_session(dest))
    got = [runner.step(ids)] + [runner.step(s) for s in STEPS]
    for scaled in (True, False):
        ref = cfg if scaled else dataclasses.replace(cfg, freq_factors=None, rope_scale_linear=1.0)
        cache = RefCache()
        want = [forward(weights, ref, ids, cache)[-1]]
        want += [forward(weights, ref, s, cache)[-1] for s in STEPS]
        for g, w in zip(got, want, strict=True):
            if scaled:
                np.testing.assert_allclose(g, w, atol=1e-4, rtol=1e-4)
            else:  # the test would catch scaling being ignored
                assert np.abs(g - w).max() > 1e-2


def ref_config(**scaling) -> RefConfig:
    return RefConfig(LAYERS, HEADS, KV_HEADS, HEAD_DIM, BASE, 1e-5, True, **scaling)


def test_llama3_frequency_factors(tmp_path):
    """Llama 3.1 GGUFs carry the scaling only as the ``rope_freqs.weight`` tensor (no
    ``rope.scaling.*`` keys); positions past the original context of 32 are checked."""
    factors = llama3_rope_factors()
    assert factors.min() == 1.0 and factors.max() == 8.0 and len(set(factors.tolist())) > 3
    plain, src = tmp_path / "plain.gguf", tmp_path / "m.gguf"
    weights = write_tiny_gguf(plain, seed=4)
    rewrite_gguf(plain, src, tensors={"rope_freqs.weight": factors})
    np.testing.assert_array_equal(GGUFFile(src).rope_freq_factors(), factors)
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32")
    compare(weights, dest, ref_config(freq_factors=factors), prompt(60))


def _linear(w: GGUFWriter) -> None:
    w.add_rope_scaling_type(RopeScalingType.LINEAR)
    w.add_rope_scaling_factor(2.0)
    w.add_rope_scaling_orig_ctx_len(CONTEXT // 2)


def _factor_only(w: GGUFWriter) -> None:  # llama.cpp reads a missing type as linear
    w.add_rope_scaling_factor(2.0)


def _old_key(w: GGUFWriter) -> None:  # early GGUFs: llama.rope.scale_linear
    w.add_float32("llama.rope.scale_linear", 2.0)


@pytest.mark.parametrize("metadata", [_linear, _factor_only, _old_key])
def test_linear_scaling(tmp_path, metadata):
    """Linear scaling (factor 2, original context 128): positions are halved; the prompt
    runs past position 128."""
    plain, src = tmp_path / "plain.gguf", tmp_path / "m.gguf"
    weights = write_tiny_gguf(plain, seed=5)
    rewrite_gguf(plain, src, add_metadata=metadata)
    assert GGUFFile(src).params.rope_scale_linear == 2.0
    dest = convert_gguf(src, tmp_path / "model", kv_cache="float32")
    compare(weights, dest, ref_config(rope_scale_linear=2.0), prompt(140))


def test_no_scaling_type_none(tmp_path):
    """``rope.scaling.type`` "none" keeps positions as they are, whatever the factor says."""
    plain, src = tmp_path / "plain.gguf", tmp_path / "m.gguf"
    write_tiny_gguf(plain, seed=6)

    def none(w: GGUFWriter) -> None:
        w.add_rope_scaling_type(RopeScalingType.NONE)
        w.add_rope_scaling_factor(4.0)

    rewrite_gguf(plain, src, add_metadata=none)
    assert GGUFFile(src).params.rope_scale_linear == 1.0


def test_unsupported_scaling_type_is_refused(tmp_path):
    """YaRN (and other kinds) would convert as if unscaled — wrong answers — so refuse."""
    plain, src = tmp_path / "plain.gguf", tmp_path / "m.gguf"
    write_tiny_gguf(plain, seed=7)

    def yarn(w: GGUFWriter) -> None:
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(4.0)

    rewrite_gguf(plain, src, add_metadata=yarn)
    with pytest.raises(ConversionError, match="'yarn' rope scaling"):
        GGUFFile(src)
