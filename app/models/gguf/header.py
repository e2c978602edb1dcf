"""The header of a GGUF file (metadata and tensor index), read without touching tensor data.

``gguf.GGUFReader`` builds a numpy view per array item, which takes seconds for a tokenizer
of 150,000 tokens; the import dialog needs only the header, so this walks it with ``struct``
over a memory map and skips long arrays (their length is kept). The converter still reads
files with ``GGUFReader`` (``reader.GGUFFile``).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

# arrays longer than this (token lists, merges, scores) are skipped, not read
MAX_READ_ARRAY = 1024
DEFAULT_ALIGNMENT = 32
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}  # fmt: skip
_STRING, _ARRAY = 8, 9


class HeaderError(ValueError):
    """The header is truncated or malformed (``reader`` turns this into a sentence)."""


@dataclass(frozen=True)
class SkippedArray:
    """A long metadata array that was skipped: only its length is known."""

    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the index: ``shape`` lists ne0 (the contiguous axis) first, as GGUF
    does; ``data_offset`` is absolute in the file."""

    path: Path
    name: str
    shape: tuple[int, ...]
    tensor_type: GGMLQuantizationType
    n_elements: int
    data_offset: int
    n_bytes: int

    @property
    def data(self) -> np.ndarray:
        """The values of a float32 tensor (small ones: rope factors), read from the file."""
        if self.tensor_type != GGMLQuantizationType.F32:
            raise HeaderError(f"tensor {self.name} is not float32")
        data = np.fromfile(self.path, np.float32, self.n_elements, offset=self.data_offset)
        return data.reshape(tuple(reversed(self.shape)))


@dataclass(frozen=True)
class Header:
    version: int
    fields: dict[str, Any]
    tensors: list[TensorInfo]


class _Cursor:
    def __init__(self, buf: mmap.mmap, order: str) -> None:
        self.buf, self.order, self.pos = buf, order, 0

    def unpack(self, fmt: str) -> Any:
        fmt = self.order + fmt
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error as exc:
            raise HeaderError("the header ends early") from exc
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        if self.pos + n > len(self.buf):
            raise HeaderError("a string runs past the end of the file")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.unpack("Q")
        self.pos += n
        if self.pos > len(self.buf):
            raise HeaderError("a string runs past the end of the file")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item, count = self.unpack("I"), self.unpack("Q")
            if count > MAX_READ_ARRAY:
                self._skip_items(item, count)
                return SkippedArray(count)
            return [self.value(item) for _ in range(count)]
        raise HeaderError(f"unknown metadata type {kind}")

    def _skip_items(self, item: int, count: int) -> None:
        if item in _SCALARS:
            self.pos += struct.calcsize(self.order + _SCALARS[item]) * count
        elif item == _STRING:
            for _ in range(count):
                self.skip_string()
        else:
            for _ in range(count):
                self.value(item)
        if self.pos > len(self.buf):
            raise HeaderError("an array runs past the end of the file")


def read_header(path: Path) -> Header:
    """Parse ``path``'s header. Raises HeaderError when it is malformed, OSError when the file
    cannot be read."""
    path = Path(path)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise HeaderError("it does not start with 'GGUF'")
        cur = _Cursor(buf, "<")
        cur.pos = 4
        version = cur.unpack("I")
        if version & 0xFFFF == 0:  # written on a big-endian machine
            cur.order, cur.pos = ">", 4
            version = cur.unpack("I")
        if version not in (2, 3):
            raise HeaderError(f"GGUF version {version} is not supported")
        n_tensors, n_fields = cur.unpack("Q"), cur.unpack("Q")
        if n_tensors > len(buf) or n_fields > len(buf):
            raise HeaderError("its counts are larger than the file")
        fields: dict[str, Any] = {}
        for _ in range(n_fields):
            key = cur.string()
            fields[key] = cur.value(cur.unpack("I"))
        index = []
        for _ in range(n_tensors):
            name = cur.string()
            n_dims = cur.unpack("I")
            if n_dims > 8:
                raise HeaderError(f"tensor {name} has {n_dims} dimensions")
            dims = tuple(cur.unpack("Q") for _ in range(n_dims))
            raw_type, offset = cur.unpack("I"), cur.unpack("Q")
            index.append((name, dims, raw_type, offset))
        alignment = fields.get("general.alignment", DEFAULT_ALIGNMENT)
        if not isinstance(alignment, int) or alignment < 1:
            raise HeaderError(f"its alignment {alignment!r} is impossible")
        start = -(-cur.pos // alignment) * alignment
    tensors = [_tensor(path, start, *entry) for entry in index]
    return Header(version, fields, tensors)


def _tensor(path: Path, start: int, name: str, dims: tuple[int, ...], raw_type: int,
            offset: int) -> TensorInfo:
    try:
        qtype = GGMLQuantizationType(raw_type)
        block, type_size = GGML_QUANT_SIZES[qtype]
    except (ValueError, KeyError) as exc:
        raise HeaderError(f"tensor {name} has the unknown type {raw_type}") from exc
    n = 1
    for d in dims:
        n *= d
    if n >= 2**62:
        raise HeaderError(f"tensor {name} has the impossible shape {list(dims)}")
    return TensorInfo(path, name, dims, qtype, n, start + offset, n * type_size // block)
