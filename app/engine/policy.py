"""Which model build suits each execution provider.

The one owner of these answers, for the catalog, the Hub variant chooser
(:mod:`app.models.library`) and the package reader (:mod:`app.engine.package`) alike (which
provider this machine has is :mod:`app.machine`'s answer):

- :data:`PRECISION_ORDER`: the Optimum / transformers.js graph precisions
  (``onnx/model_q4.onnx`` → "q4", ``model.onnx`` → "fp32") best first, per provider.
- :data:`GENAI_FOLDER_HINTS`: the words that name a provider's folder in onnxruntime-genai
  repos with one build per provider (``cpu_and_mobile/…``, ``cuda/…``, ``directml/…``).
- :func:`best_package_variant`: the variant of an ONNX Runtime model package (``manifest.json``
  + per-component variant descriptors naming an execution provider and device) to run here.

Plain Python.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

# Optimum / transformers.js graph names: "<base>[_<precision>].onnx".
OPTIMUM_BASES = ("model", "decoder_model_merged")
OPTIMUM_GRAPH_RE = re.compile(r"^(model|decoder_model_merged)(?:_([A-Za-z0-9]+))?$")

# Precision preference per provider, best first ("fp32" is the bare base name). CPU avoids
# fp16 (slow on most CPUs); GPUs like fp16 activations; CoreML only runs standard ops well.
PRECISION_ORDER: dict[str, tuple[str, ...]] = {
    "cpu": ("q4", "int8", "quantized", "uint8", "bnb4", "fp32", "bf16", "fp16", "q4f16"),
    "dml": ("q4f16", "fp16", "q4", "fp32", "bf16", "int8", "quantized", "uint8", "bnb4"),
    "cuda": ("q4f16", "fp16", "bf16", "q4", "fp32", "int8", "quantized", "uint8", "bnb4"),
    "coreml": ("fp32", "fp16", "q4", "q4f16", "int8", "quantized", "uint8", "bnb4"),
}

# Folder-name words of onnxruntime-genai builds, per provider (microsoft/*-onnx repos).
GENAI_FOLDER_HINTS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu",),
    "cuda": ("cuda", "gpu"),
    "dml": ("directml", "dml"),
    "coreml": ("cpu",),  # genai builds for CoreML are rare; its graphs run best as CPU builds
}


def graph_precision(stem: str) -> str:
    """The precision an Optimum graph stem names: "model_q4" → "q4", "model" → "fp32"."""
    match = OPTIMUM_GRAPH_RE.match(stem)
    return (match.group(2) or "fp32").lower() if match else stem


def is_optimum_graph(stem: str) -> bool:
    return OPTIMUM_GRAPH_RE.match(stem) is not None


def _rank(stem: str, provider: str) -> tuple[int, int, str]:
    order = PRECISION_ORDER.get(provider, PRECISION_ORDER["cpu"])
    precision = graph_precision(stem)
    match = OPTIMUM_GRAPH_RE.match(stem)
    base = OPTIMUM_BASES.index(match.group(1)) if match else len(OPTIMUM_BASES)
    return (order.index(precision) if precision in order else len(order)), base, stem


def best_graph(stems: Iterable[str], provider: str) -> str:
    """The Optimum graph stem to run on ``provider`` (stems of other names rank last).

    Raises ValueError when ``stems`` is empty."""
    return min(stems, key=lambda stem: _rank(stem, provider))


def best_genai_folder(folders: Sequence[str], provider: str) -> str:
    """The onnxruntime-genai build folder for ``provider`` ("" = the repo root): the first
    whose name carries the provider's hint, else the first one."""
    hints = GENAI_FOLDER_HINTS.get(provider, ())
    for folder in folders:
        if any(hint in folder.lower() for hint in hints):
            return folder
    return folders[0]


# Execution-provider names as model packages write them (ORT's names, or short ones), mapped to
# Hearth's providers. Anything else (QNN, OpenVINO, TensorRT-RTX, VitisAI, WebGPU …) is an EP
# Hearth does not run.
PACKAGE_EP_NAMES: dict[str, str] = {
    "cpuexecutionprovider": "cpu",
    "cpu": "cpu",
    "cudaexecutionprovider": "cuda",
    "cuda": "cuda",
    "dmlexecutionprovider": "dml",
    "dml": "dml",
    "directml": "dml",
    "coremlexecutionprovider": "coreml",
    "coreml": "coreml",
}


def package_variant_provider(ep: str | None, device: str | None = None) -> str | None:
    """Hearth's provider for a package variant's ``ep`` / ``device`` constraint: "cpu" for a
    base variant without an EP (any machine runs it) or a CPU EP, the provider's short name
    for CUDA / DirectML / CoreML, None for an EP Hearth does not run."""
    if not ep:
        return "cpu" if (device or "cpu").lower() == "cpu" else None
    return PACKAGE_EP_NAMES.get(ep.strip().lower())


def best_package_variant(
    variants: Iterable[tuple[str, str | None, str | None]], provider: str
) -> str | None:
    """The package variant to run on ``provider``, from ``(name, ep, device)`` triples in the
    package's order: the first whose EP is this provider's, else the first CPU (or base)
    variant, which every machine runs. None when no variant runs under Hearth."""
    usable = [(name, package_variant_provider(ep, device)) for name, ep, device in variants]
    for wanted in (provider, "cpu"):
        for name, runs_on in usable:
            if runs_on == wanted:
                return name
    return None


EMBED_GRAPH_RE = re.compile(r"^embed_tokens(?:_([A-Za-z0-9]+))?$")


def choose_embed_graph(stems: Iterable[str], decoder_stem: str, provider: str) -> str:
    """The embedding graph (``embed_tokens[_<precision>]``, split transformers.js layouts) to
    run with ``decoder_stem``: the one of the same precision, else the best for ``provider``
    (``best_graph``, read as decoder stems)."""
    precision = graph_precision(decoder_stem)
    as_decoder = {}
    for stem in sorted(stems):
        suffix = EMBED_GRAPH_RE.match(stem).group(1)  # type: ignore[union-attr]
        as_decoder[stem] = "decoder_model_merged" + (f"_{suffix}" if suffix else "")
        if graph_precision(as_decoder[stem]) == precision:
            return stem
    best = best_graph(as_decoder.values(), provider)
    return next(stem for stem, name in as_decoder.items() if name == best)
