"""The Optimum / transformers.js layout.

``config.json`` (+ ``generation_config.json``) with the graphs in ``onnx/model*.onnx`` (fp32,
fp16, q4, q4f16, int8, quantized, uint8, bnb4 …) as in the onnx-community repos, or
``model.onnx`` at the root as ``optimum-cli export onnx`` writes it. The variant is chosen for
the execution provider and can be overridden. The split layout (``onnx/embed_tokens*.onnx`` +
``onnx/decoder_model_merged*.onnx``, the decoder fed ``inputs_embeds``) records the embedding
graph of the matching precision in ``ModelSpec.embed_path``; vision / audio encoders beside it
are noted, not run.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.engine.package_files import (
    CONTEXT_KEYS,
    GENERATION_CONFIG,
    HF_CONFIG,
    TOKENIZER,
    attention_window,
    check_onnx_file,
    eos_from_tokenizer,
    first_id,
    first_positive,
    graph_bytes,
    load_json,
    model_name,
    optional_json,
    positive_int,
    read_tokenizer_files,
    token_ids,
)
from app.engine.policy import (
    EMBED_GRAPH_RE,
    OPTIMUM_BASES,
    OPTIMUM_GRAPH_RE,
    best_graph,
    choose_embed_graph,
    graph_precision,
)
from app.engine.types import ModelSpec
from app.errors import ModelLoadError

_HF_GENERATION_KEYS = (
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "repetition_penalty",
    "max_new_tokens",
    "max_length",
)


def optimum_candidates(root: Path) -> dict[str, Path]:
    """Graph variants by stem; ``onnx/`` wins over the root when both hold the same name."""
    found: dict[str, Path] = {}
    for folder in (root, root / "onnx"):
        if folder.is_dir():
            for file in sorted(folder.glob("*.onnx")):
                if OPTIMUM_GRAPH_RE.match(file.stem) and file.is_file():
                    found[file.stem] = file
    return found


# The split layout (Gemma 3 4B+, Gemma 4 text exports): a token embedding graph beside
# ``decoder_model_merged*``, and encoders for other modalities.
_ENCODER_GRAPHS = {"vision_encoder": "images", "audio_encoder": "audio",
                   "speech_encoder": "audio"}


def _onnx_stems(root: Path, pattern: re.Pattern[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in (root, root / "onnx"):
        if folder.is_dir():
            for file in sorted(folder.glob("*.onnx")):
                if pattern.match(file.stem) and file.is_file():
                    found[file.stem] = file
    return found


def _unused_encoders(root: Path) -> tuple[str, ...]:
    """A note naming the other modalities' encoders in the folder (Hearth runs text only)."""
    kinds = sorted({kind for base, kind in _ENCODER_GRAPHS.items()
                    if _onnx_stems(root, re.compile(rf"^{base}(?:_[A-Za-z0-9]+)?$"))})
    if not kinds:
        return ()
    return (f"the model also understands {' and '.join(kinds)}, but Hearth runs only its text "
            "decoder for now (its encoders are not loaded)",)


def choose_variant(stems: list[str], provider: str, requested: str | None = None) -> str:
    """Pick the Optimum graph stem for ``provider`` (or the one ``requested``).

    ``requested`` may be a stem (``"model_q4"``) or a precision (``"q4"``, ``"fp32"``). Raises
    KeyError naming the available stems when nothing matches.
    """
    if requested:
        wanted = requested.removesuffix(".onnx")
        if wanted in stems:
            return wanted
        precision = "fp32" if wanted in OPTIMUM_BASES else wanted.lower()
        matches = [s for s in stems if graph_precision(s) == precision]
        if matches:
            return best_graph(matches, "cpu")  # same precision: "model" first
        raise KeyError(requested)
    return best_graph(stems, provider)


def read_optimum(root: Path, variant: str | None, provider: str) -> ModelSpec:
    config_path = root / HF_CONFIG
    config = load_json(config_path)
    generation = optional_json(root / GENERATION_CONFIG)
    candidates = optimum_candidates(root)
    try:
        stem = choose_variant(sorted(candidates), provider, variant)
    except KeyError:
        raise ModelLoadError(
            f"{root} has no model variant '{variant}'.",
            hint=f"Available variants: {', '.join(sorted(candidates))}.",
        ) from None
    model_path = candidates[stem]
    graph = check_onnx_file(model_path)
    embed_path = None
    embeds = _onnx_stems(root, EMBED_GRAPH_RE)
    if embeds and stem.startswith("decoder_model_merged"):
        embed_path = embeds[choose_embed_graph(sorted(embeds), stem, provider)]
        check_onnx_file(embed_path)

    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    context = first_positive(config, CONTEXT_KEYS) or first_positive(text_config, CONTEXT_KEYS)
    if context is None:
        raise ModelLoadError(
            f"{config_path} gives no context length ({', '.join(CONTEXT_KEYS[:3])}).",
            hint="Add max_position_embeddings to config.json, or download the folder again.",
        )
    tokens = read_tokenizer_files(root)
    eos_ids = (
        token_ids(generation.get("eos_token_id"))
        or token_ids(config.get("eos_token_id"))
        or token_ids(text_config.get("eos_token_id"))
        or eos_from_tokenizer(root, tokens)
    )
    pad = generation.get("pad_token_id", config.get("pad_token_id"))
    return ModelSpec(
        matmul_nbits=graph.matmul_nbits,
        matmul_nbits_shapes=graph.matmul_nbits_shapes,
        model_bytes=graph_bytes(model_path, graph),
        root=root,
        layout="optimum",
        name=model_name(root, config.get("_name_or_path")),
        model_path=model_path,
        variant=stem,
        tokenizer_path=root / TOKENIZER,
        chat_template=tokens["chat_template"],
        bos_token=tokens["bos_token"],
        eos_token=tokens["eos_token"],
        eos_token_ids=eos_ids,
        pad_token_id=first_id(pad),
        context_length=context,
        add_bos_token=tokens["add_bos_token"],
        generation_defaults={
            k: generation[k] for k in _HF_GENERATION_KEYS if generation.get(k) is not None
        },
        sliding_window=attention_window(_decoder_config(config, text_config), context),
        extra_special_tokens=tokens["extra_special_tokens"],
        kv_geometry=_hf_kv_geometry(config) or _hf_kv_geometry(text_config),
        embed_path=embed_path,
        notes=_unused_encoders(root),
    )


def _decoder_config(config: dict, text_config: dict) -> dict:
    """The config the text decoder's attention fields come from: a multimodal config's
    ``text_config`` over the top level (Gemma 3 4B+), keeping the outer ``model_type`` when the
    inner one is missing."""
    if not text_config:
        return config
    return {"model_type": config.get("model_type"), **text_config}


def _hf_kv_geometry(config: dict) -> tuple[int, int] | None:
    heads = positive_int(config.get("num_attention_heads") or config.get("n_head"))
    hidden = positive_int(config.get("hidden_size") or config.get("n_embd"))
    kv_heads = positive_int(config.get("num_key_value_heads")) or heads
    head_dim = positive_int(config.get("head_dim")) or (
        hidden // heads if hidden and heads and hidden % heads == 0 else None
    )
    return (kv_heads, head_dim) if kv_heads and head_dim else None
