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

Every problem is a :class:`~app.errors.ModelLoadError` naming the file, the problem and what to
do. The chosen ``.onnx`` file is checked without loading its weights
(:func:`inspect_onnx`): a truncated or garbage file, a Git LFS pointer or a
missing / short external data file is reported before ONNX Runtime sees it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from app.engine import package_manifest
from app.engine.onnx_file import OnnxSummary, inspect_onnx
from app.engine.policy import (
    EMBED_GRAPH_RE,
    OPTIMUM_BASES,
    OPTIMUM_GRAPH_RE,
    best_graph,
    choose_embed_graph,
    graph_precision,
)
from app.engine.types import ModelSpec
from app.errors import ModelLoadError, ProviderError
from app.machine import PROVIDERS
from app.units import format_bytes

GENAI_CONFIG = "genai_config.json"
HF_CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"

_CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "n_ctx",
    "seq_length",
    "max_seq_len",
)
_GENAI_SEARCH_KEYS = (
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "max_length",
    "min_length",
)
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
_GENAI_IO_ROLES = {
    "inputs": ("input_ids", "attention_mask", "position_ids", "past_key_names", "past_value_names"),
    "outputs": ("logits", "present_key_names", "present_value_names"),
}
_GENAI_PROVIDER_NAMES = {
    "cpu": "cpu",
    "cuda": "cuda",
    "dml": "dml",
    "coreml": "coreml",
    "qnn": "qnn",
    "webgpu": "webgpu",
    "openvino": "openvino",
}
_SPECIAL_TOKEN_KEYS = ("pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


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
        return bounded_context(_read_genai(root, variant))
    if (root / HF_CONFIG).is_file() and _optimum_candidates(root):
        return bounded_context(_read_optimum(root, variant, provider))
    if (root / package_manifest.PACKAGE_MANIFEST).is_file():
        return bounded_context(_read_package(root, variant, provider))
    raise _unknown_layout(root)


# ---------------------------------------------------------------- ONNX Runtime model package


def _read_package(root: Path, variant: str | None, provider: str) -> ModelSpec:
    """A model package (``manifest.json``, one genai folder per hardware variant): the variant
    for ``provider`` by the one policy, or the one named by ``variant``."""
    manifest_path = root / package_manifest.PACKAGE_MANIFEST
    if not package_manifest.looks_like_package(load_json(manifest_path)):
        raise _unknown_layout(root)
    files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    def read(rel: str) -> dict | None:
        path = root / rel
        return load_json(path) if path.is_file() else None

    try:
        package = package_manifest.read_package(read, files)
    except ValueError as exc:
        raise ModelLoadError(
            f"{manifest_path} describes a model package Hearth cannot use ({exc}).",
            hint="Download the model package again.",
        ) from exc
    names = ", ".join(v.label for v in package.variants)
    chosen = package.variant(variant) if variant else package.best(provider)
    if chosen is None and variant:
        raise ModelLoadError(
            f"{root} is a model package without a variant '{variant}'.",
            hint=f"Its variants: {names}.",
        )
    if chosen is None:
        raise ModelLoadError(
            f"{root} is a model package whose variants all need an execution provider Hearth "
            f"does not run ({names}).",
            hint="Download a CPU, CUDA or DirectML variant of the model.",
        )
    shared = root / package.shared_folder if package.shared_folder else root
    spec = _read_genai(root / chosen.folder, None, shared=shared)
    return replace(spec, root=root, variant=chosen.name, name=_model_name(root, package.name))


# ---------------------------------------------------------------- metadata sanity

MAX_CONTEXT_TOKENS = 2**24  # 16.8M: beyond any model's trained context (Llama 4 claims 10M)
_KV_BYTES_PER_ELEMENT = 4  # the worst case: float32 KV, as CPU builds keep it
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def bounded_context(spec: ModelSpec, *, ram_bytes: int | None = None) -> ModelSpec:
    """Refuse an absurd context length and clamp one this machine cannot hold.

    Called once the context length has been chosen from the folder's metadata. Above
    :data:`MAX_CONTEXT_TOKENS` the metadata is wrong (or hostile): ``ModelLoadError`` names the
    file and field. Otherwise, when the KV cache of the full context (2 × layers × KV heads ×
    head size × 4 bytes per token) would not fit in the machine's memory (``ram_bytes``,
    physical RAM by default), the context is cut to what fits and ``ModelSpec.context_note``
    says so.
    """
    config_path = spec.root / (GENAI_CONFIG if spec.layout == "genai" else HF_CONFIG)
    config = _optional_json(config_path)
    if spec.layout == "genai":
        model = config.get("model") if isinstance(config.get("model"), dict) else {}
        decoder = model.get("decoder") if isinstance(model.get("decoder"), dict) else {}
        search = config.get("search") if isinstance(config.get("search"), dict) else {}
        fields = {"model.context_length": model.get("context_length"),
                  "search.max_length": search.get("max_length")}
        layers = _first_positive(decoder, _LAYER_KEYS)
    else:
        text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) \
            else {}
        fields = {**{k: config.get(k) for k in _CONTEXT_KEYS},
                  **{f"text_config.{k}": text_config.get(k) for k in _CONTEXT_KEYS}}
        layers = _first_positive(config, _LAYER_KEYS) or _first_positive(text_config, _LAYER_KEYS)
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
    per_token = 2 * layers * kv_heads * head_dim * _KV_BYTES_PER_ELEMENT
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


# ---------------------------------------------------------------- onnxruntime-genai layout


def _read_genai(root: Path, variant: str | None, *, shared: Path | None = None) -> ModelSpec:
    """``shared``: where tokenizer files are when ``root`` has none (a package's configs)."""
    config_path = root / GENAI_CONFIG
    config = load_json(config_path)
    model = _section(config, "model", config_path)
    decoder = _section(model, "decoder", config_path, where="model.")
    filename = decoder.get("filename")
    if not isinstance(filename, str) or not filename:
        raise ModelLoadError(
            f"{config_path} has no model.decoder.filename, so Hearth cannot "
            "tell which graph to run.",
            hint="Download the model folder again.",
        )
    model_path = root / filename
    if not model_path.resolve().is_relative_to(root.resolve()):
        raise ModelLoadError(
            f"{config_path} names a model file outside its folder "
            f"('{filename}'); Hearth refuses to load it.",
            hint="Use a model from a trusted source.",
        )
    if variant not in (None, "genai", Path(filename).stem):
        raise ModelLoadError(
            f"{root} is an onnxruntime-genai model with one graph ({filename}); it has no "
            f"variant '{variant}'.",
            hint="Leave the variant unset, or use 'genai'.",
        )
    if not model_path.is_file():
        raise ModelLoadError(
            f"{config_path} names the model file '{filename}' (model.decoder.filename), but it "
            f"is not in {root}.",
            hint="Download the model folder again.",
        )
    graph = check_onnx_file(model_path)

    search = config.get("search") if isinstance(config.get("search"), dict) else {}
    context = _positive_int(model.get("context_length")) or _positive_int(search.get("max_length"))
    if context is None:
        raise ModelLoadError(
            f"{config_path} gives no context length (model.context_length).",
            hint="Add model.context_length, or download the folder again.",
        )
    token_root = shared if shared is not None and not (root / TOKENIZER).is_file() else root
    tokens = _read_tokenizer_files(token_root)
    eos_ids = _token_ids(model.get("eos_token_id")) or _eos_from_tokenizer(token_root, tokens)
    session_options, provider_options = _genai_session_options(decoder, config_path)
    hf_config = _optional_json(root / HF_CONFIG)
    heads, head_size = decoder.get("num_key_value_heads"), decoder.get("head_size")
    return ModelSpec(
        matmul_nbits=graph.matmul_nbits,
        model_bytes=graph_bytes(model_path, graph),
        root=root,
        layout="genai",
        name=_model_name(root, config.get("_name_or_path") or hf_config.get("_name_or_path")),
        model_path=model_path,
        variant="genai",
        tokenizer_path=token_root / TOKENIZER,
        chat_template=tokens["chat_template"],
        bos_token=tokens["bos_token"],
        eos_token=tokens["eos_token"],
        eos_token_ids=eos_ids,
        pad_token_id=_first_id(model.get("pad_token_id")),
        context_length=context,
        add_bos_token=tokens["add_bos_token"],
        generation_defaults={k: search[k] for k in _GENAI_SEARCH_KEYS if k in search},
        session_options=session_options,
        provider_options=provider_options,
        sliding_window=attention_window(
            {**model, "sliding_window": decoder.get("sliding_window")}, context
        ),
        extra_special_tokens=tokens["extra_special_tokens"],
        io_names=_genai_io_names(decoder),
        share_buffer=share if isinstance(share := search.get("past_present_share_buffer"),
                                         bool) else None,
        kv_geometry=(heads, head_size)
        if _positive_int(heads) and _positive_int(head_size)
        else None,
    )


def _genai_session_options(decoder: dict, config_path: Path) -> tuple[dict, tuple[dict, ...]]:
    """``model.decoder.session_options`` → (plain options, provider options in order).

    Provider options keep genai's shape, one ``{name: {option: value}}`` dict per provider, with
    the name lower-cased to Hearth's short names (``"DML"`` → ``"dml"``). Keys genai passes to
    ``AddConfigEntry`` are kept under ``"config_entries"``.
    """
    raw = decoder.get("session_options") or {}
    if not isinstance(raw, dict):
        raise ModelLoadError(
            f"{config_path}: model.decoder.session_options is not an object.",
            hint="Fix the file, or download the model folder again.",
        )
    known = {
        "intra_op_num_threads",
        "inter_op_num_threads",
        "enable_cpu_mem_arena",
        "enable_mem_pattern",
        "graph_optimization_level",
        "log_severity_level",
        "log_id",
        "enable_profiling",
        "log_verbosity_level",
        "custom_ops_library",
    }
    options: dict[str, Any] = {k: v for k, v in raw.items() if k in known}
    entries = {
        k: str(v)
        for k, v in raw.items()
        if k not in known and k != "provider_options" and isinstance(v, (str, int, float))
    }
    if entries:
        options["config_entries"] = entries
    providers: list[dict] = []
    for item in raw.get("provider_options") or []:
        if not isinstance(item, dict):
            continue
        for name, values in item.items():
            short = name.lower().removesuffix("executionprovider")
            short = _GENAI_PROVIDER_NAMES.get(short, short)
            opts = values if isinstance(values, dict) else {}
            providers.append({short: {k: v for k, v in opts.items() if not isinstance(v, dict)}})
    return options, tuple(providers)


def _genai_io_names(decoder: dict) -> dict[str, str]:
    names: dict[str, str] = {}
    for section, roles in _GENAI_IO_ROLES.items():
        block = decoder.get(section)
        if isinstance(block, dict):
            names.update({r: block[r] for r in roles if isinstance(block.get(r), str)})
    return names


# ---------------------------------------------------------------- Optimum / transformers.js


def _optimum_candidates(root: Path) -> dict[str, Path]:
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


def _read_optimum(root: Path, variant: str | None, provider: str) -> ModelSpec:
    config_path = root / HF_CONFIG
    config = load_json(config_path)
    generation = _optional_json(root / GENERATION_CONFIG)
    candidates = _optimum_candidates(root)
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
    context = _first_positive(config, _CONTEXT_KEYS) or _first_positive(text_config, _CONTEXT_KEYS)
    if context is None:
        raise ModelLoadError(
            f"{config_path} gives no context length ({', '.join(_CONTEXT_KEYS[:3])}).",
            hint="Add max_position_embeddings to config.json, or download the folder again.",
        )
    tokens = _read_tokenizer_files(root)
    eos_ids = (
        _token_ids(generation.get("eos_token_id"))
        or _token_ids(config.get("eos_token_id"))
        or _token_ids(text_config.get("eos_token_id"))
        or _eos_from_tokenizer(root, tokens)
    )
    pad = generation.get("pad_token_id", config.get("pad_token_id"))
    return ModelSpec(
        matmul_nbits=graph.matmul_nbits,
        model_bytes=graph_bytes(model_path, graph),
        root=root,
        layout="optimum",
        name=_model_name(root, config.get("_name_or_path")),
        model_path=model_path,
        variant=stem,
        tokenizer_path=root / TOKENIZER,
        chat_template=tokens["chat_template"],
        bos_token=tokens["bos_token"],
        eos_token=tokens["eos_token"],
        eos_token_ids=eos_ids,
        pad_token_id=_first_id(pad),
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


# Families whose config.json ``sliding_window`` is a per-layer local window inside attention,
# not a span the whole model is bounded by: Gemma 2 / 3 and Cohere 2 interleave global layers
# (their ``layer_types`` or ``sliding_window_pattern`` say which), gpt-oss alternates, and
# Phi-3's 2047 is the flash-attention window of its training (its exports attend over the
# whole 4k context). Mistral 7B v0.1 is the model designed for a rolling KV buffer of its
# window, so a window there (and in unknown families) is the policy window.
LOCAL_WINDOW_FAMILIES = frozenset(
    {"gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "cohere2", "gpt_oss", "phi3"}
)


def attention_window(config: dict, context: int | None) -> int | None:
    """The span every layer of the model attends to, when it is shorter than ``context``.

    This is the window the engine's "sliding window" context policy keeps (sinks included);
    ``None`` means the model attends over its whole context. ``config`` is a config.json
    (or its ``text_config``) or a genai ``model`` section. A window is not the model's span when
    the config turns it off (``use_sliding_window: false``, Qwen2 / Qwen3 / SmolLM3), when some
    layers are global (``layer_types`` with a full-attention entry, ``sliding_window_pattern``),
    when the family uses it as a per-layer local window (:data:`LOCAL_WINDOW_FAMILIES`), or when
    it is as long as the context (Phi-3.5 / Phi-4-mini: 262144).
    """
    window = config.get("sliding_window")
    if isinstance(window, dict):  # genai: {"window_size": …, "slide_key_value_cache": …}
        window = window.get("window_size")
    window = _positive_int(window)
    if window is None or config.get("use_sliding_window") is False:
        return None
    family = str(config.get("model_type") or config.get("type") or "").lower()
    if family in LOCAL_WINDOW_FAMILIES or config.get("sliding_window_pattern"):
        return None
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and any(
        isinstance(t, str) and not t.startswith("sliding") for t in layer_types
    ):
        return None
    if context is not None and window >= context:
        return None
    return window


def _decoder_config(config: dict, text_config: dict) -> dict:
    """The config the text decoder's attention fields come from: a multimodal config's
    ``text_config`` over the top level (Gemma 3 4B+), keeping the outer ``model_type`` when the
    inner one is missing."""
    if not text_config:
        return config
    return {"model_type": config.get("model_type"), **text_config}


def _hf_kv_geometry(config: dict) -> tuple[int, int] | None:
    heads = _positive_int(config.get("num_attention_heads") or config.get("n_head"))
    hidden = _positive_int(config.get("hidden_size") or config.get("n_embd"))
    kv_heads = _positive_int(config.get("num_key_value_heads")) or heads
    head_dim = _positive_int(config.get("head_dim")) or (
        hidden // heads if hidden and heads and hidden % heads == 0 else None
    )
    return (kv_heads, head_dim) if kv_heads and head_dim else None


# ---------------------------------------------------------------- tokenizer and template


def _read_tokenizer_files(root: Path) -> dict[str, Any]:
    if not (root / TOKENIZER).is_file():
        hint = (
            "It only has a SentencePiece tokenizer.model; Hearth needs the Hugging Face "
            "tokenizer.json, which the model's repository usually also provides."
            if (root / "tokenizer.model").is_file()
            else "Download tokenizer.json from the model's repository into this folder."
        )
        raise ModelLoadError(f"{root} has no {TOKENIZER}.", hint=hint)
    config = _optional_json(root / TOKENIZER_CONFIG)
    specials = {key: _token_text(config.get(key), config) for key in _SPECIAL_TOKEN_KEYS}
    extra: dict[str, Any] = {k: v for k, v in specials.items() if v is not None}
    additional = config.get("additional_special_tokens")
    if isinstance(additional, list):
        texts = [t for t in (_token_text(a, config) for a in additional) if t]
        if texts:
            extra["additional_special_tokens"] = texts
    named = config.get("extra_special_tokens")
    if isinstance(named, dict):
        extra.update({k: t for k, v in named.items() if (t := _token_text(v, config))})
    return {
        "bos_token": _token_text(config.get("bos_token"), config),
        "eos_token": _token_text(config.get("eos_token"), config),
        "add_bos_token": bool(config.get("add_bos_token", False)),
        "chat_template": _chat_template(root, config),
        "extra_special_tokens": extra,
    }


def _token_text(value: Any, tokenizer_config: dict) -> str | None:
    """A special token as text: a string, an AddedToken dict, or an id in added_tokens_decoder."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, int) and not isinstance(value, bool):
        entry = (tokenizer_config.get("added_tokens_decoder") or {}).get(str(value))
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            return entry["content"]
    return None


def _chat_template(root: Path, tokenizer_config: dict) -> str | None:
    jinja = root / CHAT_TEMPLATE_FILE
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelLoadError(
                f"{jinja} cannot be read ({exc}).", hint="Download the model folder again."
            ) from exc
    template = tokenizer_config.get("chat_template")
    if template is None:
        template = _optional_json(root / CHAT_TEMPLATE_JSON).get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": "…"}, {"name": …}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) and template.strip() else None


def _eos_from_tokenizer(root: Path, tokens: dict) -> tuple[int, ...]:
    """Last resort when no config gives EOS ids: look the eos_token text up in tokenizer.json."""
    text = tokens["eos_token"]
    if text:
        tokenizer = load_json(root / TOKENIZER)
        for added in tokenizer.get("added_tokens") or []:
            if isinstance(added, dict) and added.get("content") == text:
                return (int(added["id"]),)
        vocab = (tokenizer.get("model") or {}).get("vocab")
        if isinstance(vocab, dict) and isinstance(vocab.get(text), int):
            return (vocab[text],)
    raise ModelLoadError(
        f"{root} does not say which token ends a reply (no eos_token_id in its config files).",
        hint="Add eos_token_id to generation_config.json or genai_config.json.",
    )


# ---------------------------------------------------------------- shared helpers


def check_onnx_file(path: Path) -> OnnxSummary:
    """Check an ``.onnx`` file and its external data without loading weights.

    Returns the file's :class:`OnnxSummary`; raises :class:`ModelLoadError` for a file that is
    unreadable, not ONNX, truncated, or whose external data is missing, short or outside the
    model folder.
    """
    summary = inspect_onnx(path)
    folder = path.parent.resolve()
    for location, needed in sorted(summary.external_data.items()):
        pure = PurePosixPath(location.replace("\\", "/"))
        data = (path.parent / pure).resolve()
        if pure.is_absolute() or PureWindowsPath(location).drive or not data.is_relative_to(folder):
            raise ModelLoadError(
                f"{path} points its weights at '{location}', outside its own folder; Hearth "
                "refuses to read it.",
                hint="Use a model from a trusted source.",
            )
        if not data.is_file():
            raise ModelLoadError(
                f"{path} keeps its weights in '{location}', which is missing from {path.parent}.",
                hint="Download the model folder again.",
            )
        size = data.stat().st_size
        if size < needed:
            raise ModelLoadError(
                f"{data} is truncated: {format_bytes(size)} on disk, but {path.name} needs at "
                f"least {format_bytes(needed)}.",
                hint="The download was cut short; download it again.",
            )
    return summary


def graph_bytes(path: Path, summary: OnnxSummary) -> int:
    """The bytes of an ``.onnx`` file and the external data it reads (as checked)."""
    return path.stat().st_size + sum(summary.external_data.values())


def load_json(path: Path) -> dict:
    """Read a JSON object; a malformed file is a ModelLoadError with line and column."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ModelLoadError(
            f"{path} is missing.", hint="Download the model folder again."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(
            f"{path} cannot be read ({exc}).", hint="Download the model folder again."
        ) from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelLoadError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.",
            hint="Fix the file, or download the model folder again.",
        ) from exc
    if not isinstance(data, dict):
        raise ModelLoadError(
            f"{path} should hold a JSON object, not {type(data).__name__}.",
            hint="Fix the file, or download the model folder again.",
        )
    return data


def _optional_json(path: Path) -> dict:
    return load_json(path) if path.is_file() else {}


def _section(data: dict, key: str, path: Path, where: str = "") -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ModelLoadError(
            f"{path} has no '{where}{key}' section.",
            hint="Fix the file, or download the model folder again.",
        )
    return value


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value > 0 and int(value) == value else None


def _first_positive(config: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if (value := _positive_int(config.get(key))) is not None:
            return value
    return None


def _token_ids(value: Any) -> tuple[int, ...]:
    """An id or list of ids → a tuple without duplicates, order kept."""
    values = value if isinstance(value, list) else [value]
    ids = [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return tuple(dict.fromkeys(ids))


def _first_id(value: Any) -> int | None:
    ids = _token_ids(value)
    return ids[0] if ids else None


def _model_name(root: Path, name_or_path: Any) -> str:
    if isinstance(name_or_path, str) and name_or_path.strip():
        base = PurePosixPath(name_or_path.strip().replace("\\", "/").rstrip("/")).name
        if base and base not in (".", ".."):
            return base
    return root.resolve().name


def _unknown_layout(root: Path) -> ModelLoadError:
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


# ---------------------------------------------------------------- ONNX file check (no weights)
#
# A protobuf wire-format walk over the memory-mapped file: it visits the model, its graph(s),
# nodes and initializers and skips every payload (raw_data, float_data …) by its length, so a
# 2 GB file costs what its structure costs, not its weights. Field numbers are onnx.proto's.
