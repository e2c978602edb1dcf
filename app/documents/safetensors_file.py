"""Read a ``.safetensors`` file without the safetensors package: an 8-byte little-endian
header length, a JSON header (name → dtype, shape, byte offsets), then the raw tensors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from app.errors import HearthError

DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "BF16": None}
MAX_HEADER = 100 << 20


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the file as a read-only array (memory-mapped)."""
    with path.open("rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise HearthError(f"{path.name} is not a safetensors file (it is too short).")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise HearthError(f"{path.name} is not a safetensors file (its header is too big).")
        try:
            header = json.loads(fh.read(length))
        except ValueError as exc:
            raise HearthError(f"{path.name} is not a safetensors file ({exc}).") from exc
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + length)
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = DTYPES.get(info["dtype"])
        if dtype is None:
            raise HearthError(f"{path.name}: tensor {name} has dtype {info['dtype']}, which "
                              "Hearth does not read.")
        start, end = info["data_offsets"]
        tensors[name] = data[start:end].view(dtype).reshape(info["shape"])
    return tensors
