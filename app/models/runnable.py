"""Whether Hearth can run a Hub repo, judged from its file names before anything is downloaded.

Used by Hub search (:meth:`app.models.hub.HubClient.search`) to say, per result, why a repo
cannot run: no ONNX decoder, only encoder files, a layout Hearth does not load, or too big for
this machine. The layouts it accepts are the ones :func:`app.models.repo_variant.variant_for_repo`
can plan: genai folders (also inside a model package) and Optimum / transformers.js graphs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from app.engine import policy
from app.units import format_bytes

# Search results list at most this many file names per repo; a repo with more is judged on
# the first ones (onnx-community repos have ~30, microsoft/*-onnx ones a few hundred).
MAX_LISTED_FILES = 2000
# q4 weights take ~0.55 bytes per parameter; the KV cache, activations and the runtime add
# a little. An estimate for the "too big" reason, not a measurement.
BYTES_PER_PARAMETER = 0.7
RUNTIME_OVERHEAD_BYTES = 400_000_000
_SIZE_IN_NAME = re.compile(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z0-9])")
_MOE_IN_NAME = re.compile(r"(\d+)x(\d+(?:\.\d+)?)[Bb]")
_ENCODER = re.compile(r"(^|/)(encoder|vision_encoder|audio_encoder|text_encoder)[^/]*\.onnx$")
_SPLIT_DECODER = re.compile(r"(^|/)decoder(_with_past)?_model[^/]*\.onnx$")
_EMBED_GRAPH = re.compile(r"(^|/)embed_tokens[^/]*\.onnx$")


def parameters_from_name(repo_id: str) -> int | None:
    """The parameter count a repo name states ("Qwen3-1.7B" → 1.7e9, "SmolLM2-135M" → 1.35e8,
    "Mixtral-8x7B" → 5.6e10), None when it states none."""
    name = repo_id.rsplit("/", 1)[-1]
    moe = _MOE_IN_NAME.search(name)
    if moe:
        return int(int(moe.group(1)) * float(moe.group(2)) * 1e9)
    found = _SIZE_IN_NAME.findall(name)
    if not found:
        return None
    number, unit = found[-1]
    return int(float(number) * (1e9 if unit in "Bb" else 1e6))


def ram_needed(parameters: int) -> int:
    """Estimated RAM to run a 4-bit build of a model with ``parameters`` parameters."""
    return int(parameters * BYTES_PER_PARAMETER) + RUNTIME_OVERHEAD_BYTES


def why_not_runnable(
    paths: Iterable[str], *, parameters: int | None = None, ram_bytes: int | None = None
) -> str | None:
    """None when Hearth can plan a download of this repo, else the reason as a short phrase.

    ``paths``: the repo's file names (at most :data:`MAX_LISTED_FILES` are looked at);
    ``parameters``: the model's size when known; ``ram_bytes``: this machine's memory.
    """
    listed = [p for _, p in zip(range(MAX_LISTED_FILES), paths, strict=False)]
    reason = _layout_reason(listed)
    if reason is not None:
        return reason
    if parameters and ram_bytes and ram_needed(parameters) > ram_bytes:
        return (
            f"too big for this machine: about {parameters / 1e9:.1f}B parameters need "
            f"~{format_bytes(ram_needed(parameters))} of RAM (estimate); this machine has "
            f"{format_bytes(ram_bytes)}"
        )
    return None


def carries_decoder(paths: Iterable[str]) -> bool:
    """Whether the file names include a text decoder of any ONNX layout (genai, Optimum,
    split decoder graphs): how an untagged repo shows it is a chat model."""
    listed = [p for _, p in zip(range(MAX_LISTED_FILES), paths, strict=False)]
    return any(
        p.rsplit("/", 1)[-1] == "genai_config.json"
        or (p.endswith(".onnx") and _decoder_name(p.rsplit("/", 1)[-1][: -len(".onnx")]))
        for p in listed
    )


def _decoder_name(stem: str) -> bool:
    return policy.is_optimum_graph(stem) or stem.startswith("decoder")


def _layout_reason(paths: list[str]) -> str | None:
    names = {p.rsplit("/", 1)[-1] for p in paths}
    if "genai_config.json" in names:
        return None
    onnx = [p for p in paths if p.endswith(".onnx")]
    if not onnx:
        return "no ONNX files (not an ONNX export)"
    if any(_EMBED_GRAPH.search(p) for p in onnx) and not any(
        "decoder_model_merged" in p for p in onnx
    ):
        return "unsupported layout: embedding graphs without a merged text decoder"
    decoders = [
        p
        for p in onnx
        if p.count("/") <= 1
        and (p.count("/") == 0 or p.startswith("onnx/"))
        and policy.is_optimum_graph(p.rsplit("/", 1)[-1][: -len(".onnx")])
    ]
    if decoders:
        return None if "config.json" in names else "unsupported layout: no config.json"
    if any(_SPLIT_DECODER.search(p) for p in onnx):
        return (
            "unsupported layout: separate decoder and decoder-with-past graphs "
            "(an old Optimum export without decoder_model_merged)"
        )
    if all(_ENCODER.search(p) for p in onnx):
        return "only encoder files (no text decoder)"
    return "no ONNX decoder Hearth recognises (onnx/model*.onnx or genai_config.json)"
