"""The cheap header reader agrees with the full reader and refuses the same bad files."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter

from app.errors import ConversionError
from app.models.gguf.header import SkippedArray
from app.models.gguf.reader import GGUFFile, GGUFHeader
from tests.models.test_gguf_errors import _HOSTILE
from tests.models.test_gguf_phi3 import write_longrope
from tests.models.tiny_gemma3 import write_tiny_gemma3
from tests.models.tiny_gguf import write_tiny_gguf

WRITERS = {
    "llama-q8": lambda p: write_tiny_gguf(p, qtype=Q.Q8_0, tied=False),
    "qwen3-mixed": lambda p: write_tiny_gguf(
        p, arch="qwen3", qk_norm=True, qtype=Q.Q4_0, matrix_types={"attn_v": Q.Q8_0}),
    "phi3-longrope": write_longrope,
    "gemma3": write_tiny_gemma3,
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_header_reads_what_the_full_reader_reads(tmp_path, kind):
    src = tmp_path / f"{kind}.gguf"
    WRITERS[kind](src)
    full, header = GGUFFile(src), GGUFHeader(src)
    assert header.params == full.params
    assert header.tensor_types() == full.tensor_types()
    assert header.parameter_count() == full.parameter_count()
    assert header.architecture == full.architecture
    assert header.get("general.name") == full.get("general.name")
    assert header.get("tokenizer.ggml.tokens") == full.get("tokenizer.ggml.tokens")
    for name, t in full.tensors.items():
        h = header.tensors[name]
        assert (h.data_offset, h.n_bytes, h.tensor_type) == (t.data_offset, t.n_bytes,
                                                            t.tensor_type)
        assert list(h.shape) == [int(d) for d in t.shape]


def test_long_arrays_are_skipped_but_keep_their_length(tmp_path):
    src = tmp_path / "long.gguf"
    words = [f"w{i}" for i in range(50_000)]
    write_tiny_gguf(src, metadata=lambda w: (w.add_array("test.words", words),
                                             w.add_array("test.numbers", list(range(5000)))))
    header = GGUFHeader(src)  # GGUFReader takes seconds to decode such arrays; we skip them
    assert header.get("test.words") == SkippedArray(50_000)
    assert len(header.get("test.words")) == 50_000
    assert len(header.get("test.numbers")) == 5000
    assert header.get("llama.block_count") == 2
    assert header.params == GGUFFile(src).params


def test_truncated_and_foreign_files_are_refused_with_a_sentence(tmp_path):
    src = tmp_path / "m.gguf"
    write_tiny_gguf(src)
    data = src.read_bytes()
    for cut in (6, 40, 2000):  # inside the counts, the metadata, the tensor index
        src.write_bytes(data[:cut])
        with pytest.raises(ConversionError, match=r"m\.gguf is truncated or corrupt"):
            GGUFHeader(src)
    src.write_bytes(data[: len(data) - 5000])  # the index is whole, the tensors are not
    with pytest.raises(ConversionError, match=r"m\.gguf is truncated: tensor"):
        GGUFHeader(src)
    src.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ConversionError, match=r"m\.gguf is not a GGUF file"):
        GGUFHeader(src)


def test_unknown_architecture_is_named(tmp_path):
    src = tmp_path / "Falcon-7B-Q4_0.gguf"
    w = GGUFWriter(str(src), "falcon")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConversionError, match=r"Falcon-7B-Q4_0\.gguf holds a 'falcon' model"):
        GGUFHeader(src)


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_absurd_hyper_parameters_are_refused_like_the_full_reader(tmp_path, case):
    kwargs, key = _HOSTILE[case]
    src = tmp_path / f"{case}.gguf"
    write_tiny_gguf(src, **kwargs)
    with pytest.raises(ConversionError, match="impossible value") as info:
        GGUFHeader(src)
    assert key in str(info.value)


def test_overflowing_tensor_dims_are_corrupt(tmp_path):
    src = tmp_path / "dims.gguf"
    w = GGUFWriter(str(src), "llama")
    w.add_tensor("token_embd.weight", np.zeros(8, np.float32), raw_shape=(2**32, 2**32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConversionError, match="corrupt"):
        GGUFHeader(src)
