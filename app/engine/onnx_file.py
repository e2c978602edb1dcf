"""Read an ``.onnx`` file's structure without loading its weights.

``inspect_onnx`` walks the protobuf wire format of the memory-mapped file and skips tensor
payloads by length, so a 2 GB model costs what its node count costs. It tells a truncated
file, garbage and a Git LFS pointer apart, and lists the op types and external-data files.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import ModelLoadError

# Control-flow ops (If, Loop, Scan) hold subgraphs; real models nest them a few levels deep
# and hold at most a few hundred. The walk recurses per level, so a hostile file nesting
# 100k levels would blow the stack: both are bounded.
MAX_SUBGRAPH_DEPTH = 64
MAX_SUBGRAPHS = 10_000


@dataclass(frozen=True)
class OnnxSummary:
    """What an ``.onnx`` file is made of, read without loading its weights."""

    ir_version: int
    opsets: dict[str, int]  # domain ("" = ai.onnx) -> version
    op_types: frozenset[tuple[str, str]]  # (domain, op_type), subgraphs and functions included
    external_data: dict[str, int]  # location -> bytes the file must hold (offset + length)
    nodes: int
    initializers: int
    #: com.microsoft MatMulNBits nodes by (bits, block_size, accuracy_level), the attributes
    #: that decide which ORT kernel runs them (app/engine/prompt_session.py)
    matmul_nbits: dict[tuple[int, int, int], int] = field(default_factory=dict)
    #: the same nodes by (bits, block_size, accuracy_level, K, N): the shapes a measurement
    #: of their kernels runs (app/engine/kernel_timing.py)
    matmul_nbits_shapes: dict[tuple[int, int, int, int, int], int] = field(default_factory=dict)


class _WireError(Exception):
    def __init__(self, reason: str, *, truncated: bool = False, hostile: bool = False) -> None:
        super().__init__(reason)
        self.truncated = truncated
        self.hostile = hostile


def _varint(buf: mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise _WireError("a number runs past the end of its field", truncated=True)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _WireError("a number is longer than ten bytes")


def _fields(buf: mmap.mmap, start: int, end: int):
    """Yield (field number, value) where value is an int (varint) or a (start, end) slice."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise _WireError("field number 0")
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield number, value
            continue
        if wire == 2:
            length, pos = _varint(buf, pos, end)
            value, pos = (pos, pos + length), pos + length
        elif wire in (1, 5):
            value, pos = None, pos + (8 if wire == 1 else 4)
        else:
            raise _WireError(f"unknown wire type {wire}")
        if pos > end:
            raise _WireError("a field runs past the end of the file", truncated=True)
        yield number, value


def _text(buf: mmap.mmap, span: tuple[int, int]) -> str:
    return bytes(buf[span[0] : span[1]]).decode("utf-8", errors="replace")


class _OnnxWalker:
    def __init__(self, buf: mmap.mmap) -> None:
        self.buf = buf
        self.ops: set[tuple[str, str]] = set()
        self.external: dict[str, int] = {}
        self.nodes = 0
        self.initializers = 0
        self.depth = 0  # subgraph nesting level of the graph being walked
        self.subgraphs = 0
        self.matmul_nbits: dict[tuple[int, int, int], int] = {}
        self.matmul_nbits_shapes: dict[tuple[int, int, int, int, int], int] = {}

    def model(self) -> OnnxSummary:
        ir_version, opsets, graphs = None, {}, 0
        for number, value in _fields(self.buf, 0, len(self.buf)):
            if number == 1 and isinstance(value, int):
                ir_version = value
            elif number == 7 and isinstance(value, tuple):
                graphs += 1
                self.graph(value)
            elif number == 8 and isinstance(value, tuple):
                domain, version = "", 0
                for n, v in _fields(self.buf, *value):
                    if n == 1 and isinstance(v, tuple):
                        domain = _text(self.buf, v)
                    elif n == 2 and isinstance(v, int):
                        version = v
                opsets["" if domain == "ai.onnx" else domain] = version
            elif number == 25 and isinstance(value, tuple):
                for n, v in _fields(self.buf, *value):
                    if n == 7 and isinstance(v, tuple):
                        self.node(v)
        if ir_version is None or graphs != 1 or not opsets:
            raise _WireError("it has no ONNX model header (IR version, graph, opset)")
        return OnnxSummary(
            ir_version, opsets, frozenset(self.ops), self.external, self.nodes, self.initializers,
            self.matmul_nbits, self.matmul_nbits_shapes,
        )

    def graph(self, span: tuple[int, int]) -> None:
        for number, value in _fields(self.buf, *span):
            if not isinstance(value, tuple):
                continue
            if number == 1:
                self.node(value)
            elif number == 5:
                self.initializers += 1
                self.tensor(value)
            elif number == 15:
                self.initializers += 1
                for n, v in _fields(self.buf, *value):
                    if n in (1, 2) and isinstance(v, tuple):
                        self.tensor(v)

    def node(self, span: tuple[int, int]) -> None:
        op_type, domain = "", ""
        ints: dict[str, int] = {}
        for number, value in _fields(self.buf, *span):
            if number == 4 and isinstance(value, tuple):
                op_type = _text(self.buf, value)
            elif number == 7 and isinstance(value, tuple):
                domain = _text(self.buf, value)
            elif number == 5 and isinstance(value, tuple):
                name, integer = self.attribute(value)
                if integer is not None:
                    ints[name] = integer
        if not op_type:
            raise _WireError("a node has no operator type")
        self.nodes += 1
        domain = "" if domain == "ai.onnx" else domain
        self.ops.add((domain, op_type))
        if (domain, op_type) == ("com.microsoft", "MatMulNBits"):
            key = (ints.get("bits", 4), ints.get("block_size", 0), ints.get("accuracy_level", 0))
            self.matmul_nbits[key] = self.matmul_nbits.get(key, 0) + 1
            shape = (*key, ints.get("K", 0), ints.get("N", 0))
            self.matmul_nbits_shapes[shape] = self.matmul_nbits_shapes.get(shape, 0) + 1

    def attribute(self, span: tuple[int, int]) -> tuple[str, int | None]:
        """Walk an attribute's tensors and graphs; return its name and integer value (i)."""
        name, integer = "", None
        for number, value in _fields(self.buf, *span):
            if number == 1 and isinstance(value, tuple):
                name = _text(self.buf, value)
            elif number == 3 and isinstance(value, int):
                integer = value - (1 << 64) if value >= 1 << 63 else value  # int64
            elif not isinstance(value, tuple):
                continue
            elif number in (5, 10):  # t, tensors
                self.tensor(value)
            elif number in (6, 11):  # g, graphs
                self.subgraph(value)
        return name, integer

    def subgraph(self, span: tuple[int, int]) -> None:
        self.subgraphs += 1
        if self.subgraphs > MAX_SUBGRAPHS:
            raise _WireError(f"it holds more than {MAX_SUBGRAPHS:,} subgraphs", hostile=True)
        if self.depth >= MAX_SUBGRAPH_DEPTH:
            raise _WireError(f"its subgraphs nest more than {MAX_SUBGRAPH_DEPTH} levels deep",
                             hostile=True)
        self.depth += 1
        try:
            self.graph(span)
        finally:
            self.depth -= 1

    def tensor(self, span: tuple[int, int]) -> None:
        entries: dict[str, str] = {}
        for number, value in _fields(self.buf, *span):
            if number == 13 and isinstance(value, tuple):
                key = val = ""
                for n, v in _fields(self.buf, *value):
                    if n == 1 and isinstance(v, tuple):
                        key = _text(self.buf, v)
                    elif n == 2 and isinstance(v, tuple):
                        val = _text(self.buf, v)
                entries[key] = val
        location = entries.get("location")
        if location:
            try:
                needed = int(entries.get("offset") or 0) + int(entries.get("length") or 0)
            except ValueError:
                raise _WireError(f"external data for '{location}' has a bad offset") from None
            self.external[location] = max(self.external.get(location, 0), needed)


def inspect_onnx(path: Path) -> OnnxSummary:
    """Summarise an ``.onnx`` file without loading its weights (see :class:`OnnxSummary`).

    Raises ModelLoadError when the file cannot be read, is empty, is a Git LFS pointer, or is
    not a well-formed ONNX protobuf (truncated or garbage).
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
            if not head:
                raise ModelLoadError(
                    f"{path} is empty.", hint="The download failed; download the model again."
                )
            if head.startswith(b"version https://git-lfs"):
                raise ModelLoadError(
                    f"{path} is a Git LFS pointer, not the model itself.",
                    hint="Fetch the real file (git lfs pull), or download the model again.",
                )
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                try:
                    return _OnnxWalker(buf).model()
                except _WireError as exc:
                    if exc.hostile:
                        raise ModelLoadError(
                            f"{path} is not a model Hearth will load: {exc}, far beyond "
                            "any real language model.",
                            hint="Use a model from a trusted source.",
                        ) from None
                    state = (
                        "is truncated (it ends in the middle of the model)"
                        if exc.truncated
                        else f"is not a valid ONNX model ({exc})"
                    )
                    raise ModelLoadError(
                        f"{path} {state}.", hint="Download or convert the model again."
                    ) from None
    except OSError as exc:
        raise ModelLoadError(
            f"{path} cannot be read ({exc.strerror or exc}).",
            hint="Check the file's permissions, or download it again.",
        ) from exc
