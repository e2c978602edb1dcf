"""What the import dialog shows about a GGUF before converting it (header only, ~50 ms).

``preview_gguf`` answers the file's size, architecture, quantization types, the name the
model will get (``naming.readable_name``) and the converted folder's size for each precision
(``convert.estimate_output_bytes``), or raises ConversionError with the converter's sentence
(not a GGUF, truncated, an architecture Hearth cannot convert…).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.models.gguf.convert import estimate_output_bytes
from app.models.gguf.naming import readable_name
from app.models.gguf.reader import GGUFHeader
from app.models.gguf.weights import PRECISIONS, WeightSource

# one sentence per precision, for the dialog (and anyone else who offers the choice)
PRECISION_HELP = {
    "native": "Keep the file's own quantized blocks: the fastest and smallest.",
    "int4": "Re-quantize every matrix to 4 bits: small, a little less accurate than the file.",
    "fp16": "Half-precision floats: much larger; for GPUs.",
    "fp32": "Full-precision floats: the largest and slowest; for checking quality.",
}


@dataclass(frozen=True)
class GGUFPreview:
    path: Path
    file_bytes: int
    architecture: str
    general_name: str  # the GGUF's own ``general.name`` ("" when it has none)
    suggested_name: str
    layers: int
    parameters: int
    context_length: int
    tensor_types: dict[str, int]  # quantization type → how many tensors use it
    output_bytes: dict[str, int]  # precision → estimated size of the converted folder

    @property
    def quantization(self) -> str:
        """"Q4_1 × 210, F32 × 61, Q8_0 × 1": the most used type first."""
        ranked = sorted(self.tensor_types.items(), key=lambda kv: (-kv[1], kv[0]))
        return ", ".join(f"{name} × {count}" for name, count in ranked)


def preview_gguf(path: Path) -> GGUFPreview:
    """Read ``path``'s header. Raises ConversionError with a sentence naming the file."""
    header = GGUFHeader(Path(path))
    general = header.get("general.name")
    general = general if isinstance(general, str) else ""
    return GGUFPreview(
        path=header.path,
        file_bytes=header.file_bytes,
        architecture=header.architecture,
        general_name=general,
        suggested_name=readable_name(general, header.path),
        layers=header.params.n_layers,
        parameters=header.parameter_count(),
        context_length=header.params.context_length,
        tensor_types=header.tensor_types(),
        output_bytes={
            p: estimate_output_bytes(header, WeightSource(header, p)) for p in PRECISIONS
        },
    )
