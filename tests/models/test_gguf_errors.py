"""Bad input → a clear ConversionError / DiskFullError, and nothing half-written."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from app.errors import ConversionError, DiskFullError
from app.models.gguf import convert as convert_mod
from app.models.gguf.convert import convert_gguf
from tests.models.tiny_gguf import write_tiny_gguf


def _listing(folder):
    return sorted(os.listdir(folder))


def _convert_fails(src, tmp_path, exc_type, match, **kwargs):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (out / "keep.txt").write_text("x")
    before = _listing(out)
    with pytest.raises(exc_type, match=match) as info:
        convert_gguf(src, out / "model", **kwargs)
    assert _listing(out) == before
    return info.value


def test_truncated_file(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) - 5000])
    err = _convert_fails(src, tmp_path, ConversionError, "truncated")
    assert "Download the file again" in str(err)


def test_wrong_magic(tmp_path):
    src = tmp_path / "m.gguf"
    src.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    _convert_fails(src, tmp_path, ConversionError, "not a GGUF file")


def test_unknown_architecture(tmp_path):
    src = tmp_path / "m.gguf"
    w = GGUFWriter(str(src), "mamba")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    err = _convert_fails(src, tmp_path, ConversionError, "'mamba'")
    assert "llama, qwen2" in str(err)


@pytest.mark.parametrize("arch", ["qwen3moe", "phi3small", "mistral3"])
def test_unknown_architecture_near_a_known_one(tmp_path, arch):
    """A relative of a supported architecture is refused by name, not run as its cousin."""
    src = tmp_path / "Model-Q4_K_M.gguf"
    w = GGUFWriter(str(src), arch)
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    err = _convert_fails(src, tmp_path, ConversionError, f"Model-Q4_K_M.gguf holds a '{arch}'")
    assert "qwen3, phi3, mistral" in str(err)


def test_longrope_without_original_context(tmp_path):
    """LongRoPE factors need the context they switch at; without it the file is refused."""
    src = tmp_path / "m.gguf"
    half = np.ones(32, np.float32)
    write_tiny_gguf(
        src, arch="phi3", fused=True,
        extra_tensors={"rope_factors_short.weight": half, "rope_factors_long.weight": half},
    )  # fmt: skip
    _convert_fails(src, tmp_path, ConversionError, "original_context_length")


def test_unsupported_quantization(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0)
    data = bytearray(src.read_bytes())
    # retag blk.0.attn_q.weight as Q1_0 (smaller than the Q8_0 data, so the file is not
    # truncated; the gguf package cannot dequantize it)
    name = b"blk.0.attn_q.weight"
    at = data.index(name) + len(name)
    n_dims = int.from_bytes(data[at : at + 4], "little")
    type_at = at + 4 + 8 * n_dims
    assert int.from_bytes(data[type_at : type_at + 4], "little") == Q.Q8_0
    data[type_at : type_at + 4] = int(Q.Q1_0).to_bytes(4, "little")
    src.write_bytes(bytes(data))
    err = _convert_fails(src, tmp_path, ConversionError, "quantization type Q1_0")
    assert "blk.0.attn_q.weight" in str(err)


def test_missing_tokenizer_metadata(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, tokenizer=False)
    err = _convert_fails(src, tmp_path, ConversionError, "tokenizer")
    assert "tokenizer.ggml" in str(err)


def test_not_enough_disk(tmp_path, monkeypatch):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src)
    monkeypatch.setattr(convert_mod, "free_bytes", lambda _p: 1 << 20)
    err = _convert_fails(src, tmp_path, DiskFullError, "MiB free")
    assert "Free some disk space" in str(err)


def test_interrupted_conversion_leaves_nothing(tmp_path, monkeypatch):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src)

    def boom(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(convert_mod, "sha256_file", boom)
    _convert_fails(src, tmp_path, KeyboardInterrupt, None)


def test_destination_exists(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src)
    (tmp_path / "out" / "model").mkdir(parents=True)
    with pytest.raises(ConversionError, match="already exists"):
        convert_gguf(src, tmp_path / "out" / "model")


def test_unknown_precision(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src)
    _convert_fails(src, tmp_path, ConversionError, "precision", precision="int2")


# -- absurd hyper-parameters: a clear error naming the key, in bounded memory --------------

_HOSTILE = {
    "head_count_zero": ({"metadata": lambda w: w.add_head_count(0)},
                        "'llama.attention.head_count'"),
    "kv_heads_zero": ({"metadata": lambda w: w.add_head_count_kv(0)},
                      "'llama.attention.head_count_kv'"),
    "kv_heads_not_a_divisor": ({"metadata": lambda w: w.add_head_count_kv(3)},
                               "'llama.attention.head_count_kv'"),
    "a_billion_blocks": ({"metadata": lambda w: w.add_block_count(10**9)},
                         "'llama.block_count'"),
    "a_billion_gemma3_blocks": ({"arch": "gemma3", "qk_norm": True, "metadata": lambda w: (
        w.add_block_count(10**9), w.add_sliding_window(4))}, "'gemma3.block_count'"),
    "more_blocks_than_tensors": ({"metadata": lambda w: w.add_block_count(3)},
                                 "'llama.block_count'"),
    "absurd_context": ({"metadata": lambda w: w.add_uint64("llama.context_length", 2**40)},
                       "'llama.context_length'"),
    "absurd_width": ({"metadata": lambda w: w.add_uint64("llama.embedding_length", 2**40)},
                     "'llama.embedding_length'"),
    "text_for_a_number": ({"metadata": lambda w: w.add_string("llama.feed_forward_length",
                                                              "lots")},
                          "'llama.feed_forward_length'"),
}

_READ_BOUNDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
from app.errors import HearthError
from app.models.gguf.reader import GGUFFile
try:
    GGUFFile(sys.argv[1])
except HearthError as exc:
    print("ERROR:", exc)
else:
    print("ACCEPTED")
"""


def _read_in_a_bounded_process(path) -> str:
    """Open the file in a child process limited to 2 GiB and 60 s (an attack that works
    must not take this shared machine down with it)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _READ_BOUNDED, str(path)], cwd=root,
                          capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_absurd_hyper_parameters_are_refused_naming_the_key(tmp_path, case):
    kwargs, key = _HOSTILE[case]
    src = tmp_path / f"{case}.gguf"
    write_tiny_gguf(src, **kwargs)
    output = _read_in_a_bounded_process(src)
    assert output.startswith(f"ERROR: {src.name} has an impossible value"), output
    assert key in output and "metadata is broken" in output


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**32 + 1, 2**32), (3, 2**62)])
def test_tensor_dims_that_overflow_are_refused(tmp_path, shape):
    src = tmp_path / "dims.gguf"
    w = GGUFWriter(str(src), "llama")
    w.add_tensor("token_embd.weight", np.zeros(8, np.float32), raw_shape=shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    output = _read_in_a_bounded_process(src)
    assert output.startswith(f"ERROR: {src.name} is "), output
    assert "corrupt" in output
