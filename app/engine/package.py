"""Read a model folder (onnxruntime-genai or Optimum / transformers.js layout) into a ModelSpec.

Two layouts are recognised:

- **genai**: ``genai_config.json`` names the decoder graph, its I/O names, the context length,
  EOS ids, search defaults and session options (microsoft/*-onnx repos, onnxruntime-genai's
  model builder).
- **optimum**: ``config.json`` (+ ``generation_config.json``) with the graphs in
  ``onnx/model*.onnx`` (fp32, fp16, q4, q4f16, int8, quantized, uint8, bnb4 …) as in the
  onnx-community repos, or ``model.onnx`` at the root as ``optimum-cli export onnx`` writes it.
  The variant is chosen for the execution provider and can be overridden.
  The split layout (``onnx/embed_tokens*.onnx`` + ``onnx/decoder_model_merged*.onnx``, the
  decoder fed ``inputs_embeds``) records the embedding graph of the matching precision in
  ``ModelSpec.embed_path``; vision / audio encoders beside it are noted, not run.
- **model package**: ``manifest.json`` with one genai folder per hardware variant under
  ``models/<component>/`` (:mod:`app.engine.package_manifest`); the variant for the provider is
  :func:`app.engine.policy.best_package_variant`'s choice, and it is read as a genai folder
  (tokenizer files from the variant folder, else the package's ``configs/``).

Both share the tokenizer files (``tokenizer.json``, ``tokenizer_config.json``) and the chat
template (``chat_template.jinja``, else ``tokenizer_config.json``'s ``chat_template``).

The layouts live in their own modules (:mod:`app.engine.package_genai` for genai folders and
packages, :mod:`app.engine.package_optimum` for Optimum, :mod:`app.engine.package_files` for
what they share); this one recognises the layout and bounds the context.

Every problem is a :class:`~app.errors.ModelLoadError` naming the file, the problem and what to
do. The chosen ``.onnx`` file is checked without loading its weights
(:func:`inspect_onnx`): a truncated or garbage file, a Git LFS pointer or a
missing / short external data file is reported before ONNX Runtime sees it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from app.engine import package_manifest
from app.engine.package_files import (
    CHAT_TEMPLATE_FILE,
    CHAT_TEMPLATE_JSON,
    CONTEXT_KEYS,
    GENAI_CONFIG,
    GENERATION_CONFIG,
    HF_CONFIG,
    LOCAL_WINDOW_FAMILIES,
    TOKENIZER,
    TOKENIZER_CONFIG,
    attention_window,
    check_onnx_file,
    first_positive,
    graph_bytes,
    load_json,
    optional_json,
)
from app.engine.package_genai import read_genai, read_package
from app.engine.package_optimum import choose_variant, optimum_candidates, read_optimum
from app.engine.types import ModelSpec
from app.errors import ModelLoadError, ProviderError
from app.machine import PROVIDERS
from app.manifest import Manifest
from app.units import format_bytes

__all__ = [
    "CHAT_TEMPLATE_FILE", "CHAT_TEMPLATE_JSON", "GENAI_CONFIG", "GENERATION_CONFIG", "HF_CONFIG",
    "LOCAL_WINDOW_FAMILIES", "MAX_CONTEXT_TOKENS", "TOKENIZER", "TOKENIZER_CONFIG",
    "attention_window", "bounded_context", "check_onnx_file", "choose_variant", "graph_bytes",
    "load_json", "read_model_folder", "unknown_layout",
]


def read_model_folder(
    path: Path, *, variant: str | None = None, provider: str = "cpu"
) -> ModelSpec:
    """Normalise a model folder into a :class:`ModelSpec`.

    Args:
        path: the model folder.
        variant: Optimum graph to use, as a file stem (``"model_q4"``) or precision (``"q4"``,
            ``"fp32"``); ``None`` picks the best one for ``provider``. In the genai layout only
            ``"genai"`` or the decoder file's stem are accepted.
        provider: the execution provider the model will run on (``cpu``, ``dml``, ``cuda``,
            ``coreml``); it only steers the Optimum variant choice.

    Raises:
        ModelLoadError: the folder is missing, of an unknown layout, or has a missing, malformed
            or corrupt file.
        ProviderError: ``provider`` is not one Hearth knows.
    """
    if provider not in PROVIDERS:
        raise ProviderError(
            f"Unknown execution provider '{provider}'.",
            hint=f"Choose one of: {', '.join(PROVIDERS)}.",
        )
    root = Path(path).expanduser()
    if not root.exists():
        raise ModelLoadError(
            f"The model folder {root} does not exist.",
            hint="Check the path, or install the model again.",
        )
    if not root.is_dir():
        hint = (
            "Import it with: hearth import-gguf."
            if root.suffix.lower() == ".gguf"
            else "Give the folder that holds the model, not a file."
        )
        raise ModelLoadError(f"{root} is a file, not a model folder.", hint=hint)
    if (root / GENAI_CONFIG).is_file():
        return bounded_context(read_genai(root, variant))
    if (root / HF_CONFIG).is_file() and optimum_candidates(root):
        return bounded_context(read_optimum(root, variant, provider))
    manifest = root / package_manifest.PACKAGE_MANIFEST
    if manifest.is_file() and package_manifest.looks_like_package(load_json(manifest)):
        return bounded_context(read_package(root, variant, provider))
    raise unknown_layout(root)


# ---------------------------------------------------------------- metadata sanity

MAX_CONTEXT_TOKENS = 2**24  # 16.8M: beyond any model's trained context (Llama 4 claims 10M)
_KV_BYTES_PER_ELEMENT = 4  # the worst case: float32 KV, as CPU builds keep it
#: what Hearth's own GGUF conversion records of its KV buffers (hearth-manifest.json's
#: ``conversion.kv_cache``; app/models/gguf/grouped_attention.py), in bytes per element
_RECORDED_KV_BYTES = {"float16": 2, "float32": 4}
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def bounded_context(spec: ModelSpec, *, ram_bytes: int | None = None) -> ModelSpec:
    """Refuse an absurd context length and clamp one this machine cannot hold.

    Called once the context length has been chosen from the folder's metadata. Above
    :data:`MAX_CONTEXT_TOKENS` the metadata is wrong (or hostile): ``ModelLoadError`` names the
    file and field. Otherwise, when the KV cache of the full context (2 × layers × KV heads ×
    head size × 4 bytes per token; 2 where Hearth's conversion recorded float16 buffers) would
    not fit in the machine's memory (``ram_bytes``, physical RAM by default), the context is
    cut to what fits and ``ModelSpec.context_note`` says so.
    """
    config_path = spec.root / (GENAI_CONFIG if spec.layout == "genai" else HF_CONFIG)
    config = optional_json(config_path)
    if spec.layout == "genai":
        model = config.get("model") if isinstance(config.get("model"), dict) else {}
        decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
        search = config.get("search") if isinstance(config.get("search"), dict) else {}
        fields = {"model.context_length": model.get("context_length"),
                  "search.max_length": search.get("max_length")}
        layers = first_positive(decoder, _LAYER_KEYS)
    else:
        text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) \
            else {}
        fields = {**{k: config.get(k) for k in CONTEXT_KEYS},
                  **{f"text_config.{k}": text_config.get(k) for k in CONTEXT_KEYS}}
        layers = first_positive(config, _LAYER_KEYS) or first_positive(text_config, _LAYER_KEYS)
    context = spec.context_length
    field = next((k for k, v in fields.items() if v == context), "the context length")
    if context > MAX_CONTEXT_TOKENS:
        raise ModelLoadError(
            f"{config_path} claims a context of {context:,} tokens ({field}), more than any "
            f"model is trained on (at most {MAX_CONTEXT_TOKENS:,}); the file is broken.",
            hint=f"Fix {field} in {config_path.name}, or download the model again.",
        )
    if spec.kv_geometry is None or layers is None:
        return spec
    kv_heads, head_dim = spec.kv_geometry
    per_token = 2 * layers * kv_heads * head_dim * _kv_bytes_per_element(spec.root)
    if ram_bytes is None:
        from app.memory import total_ram_bytes

        ram_bytes = total_ram_bytes()
    if ram_bytes is None or per_token * context <= ram_bytes:
        return spec
    fits = max(1, ram_bytes // per_token)
    if fits < 256:
        raise ModelLoadError(
            f"{config_path} describes a KV cache of {format_bytes(per_token)} per token "
            f"({layers} layers × {kv_heads} KV heads × {head_dim}); this machine's "
            f"{format_bytes(ram_bytes)} of memory holds fewer than 256 tokens of it.",
            hint="The metadata is broken, or the model is far too big for this computer.",
        )
    note = (f"the context is limited to {fits:,} of the {context:,} tokens {field} gives: "
            f"a longer KV cache ({format_bytes(per_token)} per token) would not fit in "
            f"{format_bytes(ram_bytes)} of memory")
    return replace(spec, context_length=fits, context_note=note,
                   sliding_window=min(spec.sliding_window, fits) if spec.sliding_window else None)


def _kv_bytes_per_element(root: Path) -> int:
    """Bytes per KV element of the model in ``root``: what Hearth's conversion recorded
    (float16 buffers: 2), else the worst case, float32 (other exporters' graphs say it only
    once loaded)."""
    manifest = Manifest.read(root)
    conversion = manifest.extra.get("conversion") if manifest is not None else None
    if isinstance(conversion, dict) and isinstance(conversion.get("kv_cache"), str):
        return _RECORDED_KV_BYTES.get(conversion["kv_cache"], _KV_BYTES_PER_ELEMENT)
    return _KV_BYTES_PER_ELEMENT


def unknown_layout(root: Path) -> ModelLoadError:
    files = [p for p in root.rglob("*") if p.is_file() and len(p.relative_to(root).parts) <= 3]
    ggufs = [p for p in files if p.suffix.lower() == ".gguf"]
    if ggufs:
        return ModelLoadError(
            f"{root} holds a GGUF file ({ggufs[0].name}), which Hearth does not run directly.",
            hint=f"Import it with: hearth import-gguf {ggufs[0]}",
        )
    nested = sorted(p.parent.relative_to(root).as_posix() for p in files if p.name == GENAI_CONFIG)
    if nested:
        return ModelLoadError(
            f"{root} holds several model builds in subfolders, not one model.",
            hint=f"Open one of them: {', '.join(nested[:6])}.",
        )
    onnx_files = [p.relative_to(root).as_posix() for p in files if p.suffix == ".onnx"]
    if (root / HF_CONFIG).is_file():
        if onnx_files:
            return ModelLoadError(
                f"{root} has ONNX files ({', '.join(onnx_files[:4])}) but none is a text "
                "decoder Hearth recognises (onnx/model*.onnx, model.onnx or "
                "decoder_model_merged*.onnx).",
                hint="Use an ONNX export of a chat model.",
            )
        return ModelLoadError(
            f"{root} has {HF_CONFIG} but no ONNX graph (looked for onnx/model*.onnx and "
            "model.onnx); it looks like a PyTorch / safetensors checkout.",
            hint="Download the ONNX version of the model (for example from onnx-community).",
        )
    if onnx_files:
        return ModelLoadError(
            f"{root} has {onnx_files[0]} but neither {GENAI_CONFIG} nor {HF_CONFIG}, so Hearth "
            "cannot tell its context length, tokens or template.",
            hint="Download the whole model repository, not only the .onnx file.",
        )
    if not files:
        return ModelLoadError(f"{root} is empty.", hint="Download or install the model again.")
    return ModelLoadError(
        f"{root} is not a model folder Hearth knows: it has neither {GENAI_CONFIG} nor "
        f"{HF_CONFIG} with an ONNX graph.",
        hint="Use an onnxruntime-genai or Optimum / transformers.js ONNX model folder.",
    )
