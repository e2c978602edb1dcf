"""The display name of an imported GGUF model, decided in one place (``readable_name``).

A GGUF's ``general.name`` is often what the converter happened to see rather than a name:
the folder it ran in ("models", "tmp", a path), a hash, a training tag ("checkpoint-1200"),
or a template such as old llama.cpp's "LLaMA v2". Then the file name, which downloaders keep
readable (``Qwen3-0.6B-Q4_K_M.gguf``), makes the name: "Qwen3 0.6B (Q4_K_M)".
"""

from __future__ import annotations

import re
from pathlib import Path

# llama.cpp's quantization labels (Q4_K_M, IQ3_XXS, Q8_0, …) and float types, at the end of
# the file name after a separator
_QUANT = re.compile(
    r"[-_. ]((?:I?Q\d(?:_[A-Z0-9]+)*)|F16|F32|BF16|FP16|FP32|TQ\d_\d)$", re.IGNORECASE
)
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
_HASH = re.compile(r"(?:sha256[-:])?[0-9a-f]{12,}")
_TRAINING_TAG = re.compile(r"(?:checkpoint|ckpt|step|epoch|run|global_step)[-_ ]?\d+|tmp[\w-]*")
# names converters write when they know nothing better (folders, templates, bare arch names)
_GENERIC = {
    "", "model", "models", "tmp", "temp", "output", "outputs", "out", "hf", "hf_model",
    "base", "merged", "final", "checkpoint", "export", "converted", "dist", "gguf",
    "pytorch_model", "unknown", "untitled", "none", "default", "llama", "llama v1",
    "llama v2", "llama v3", "mistral", "qwen", "qwen2", "qwen3", "phi3", "gemma", "gemma3",
}  # fmt: skip


def readable_name(general_name: object, path: Path) -> str:
    """The name to show for the model in ``path`` whose metadata says ``general_name``.

    ``general_name`` when it is a real name (with the file's quantization label added when
    the name lacks it), else one made from the file name, else whatever is least bad."""
    stem = _SHARD.sub("", Path(path).stem.strip())
    match = _QUANT.search(stem)
    quant = match.group(1).upper() if match else ""
    base = stem[: match.start()] if match else stem
    label = f" ({quant})" if quant else ""
    name = " ".join(str(general_name or "").split())
    if is_meaningful(name):
        return name if not quant or quant.lower() in name.lower() else name + label
    from_file = " ".join(base.replace("_", " ").replace("-", " ").split())
    if is_meaningful(base) and is_meaningful(from_file):
        return from_file + label
    return name or stem


def is_meaningful(name: str) -> bool:
    """Whether ``name`` reads as a model's name (not empty, a path, a hash or a tag)."""
    text = name.strip()
    lower = text.lower()
    if lower in _GENERIC or "/" in text or "\\" in text or text.startswith((".", "~")):
        return False
    return not (_HASH.fullmatch(lower) or _TRAINING_TAG.fullmatch(lower))
