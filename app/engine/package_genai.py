"""The onnxruntime-genai layout and model packages.

- **genai**: ``genai_config.json`` names the decoder graph, its I/O names, the context length,
  EOS ids, search defaults and session options (microsoft/*-onnx repos, onnxruntime-genai's
  model builder).
- **model package**: ``manifest.json`` with one genai folder per hardware variant under
  ``models/<component>/`` (:mod:`app.engine.package_manifest`); the variant for the provider is
  :func:`app.engine.policy.best_package_variant`'s choice, and it is read as a genai folder
  (tokenizer files from the variant folder, else the package's ``configs/``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from app.engine import package_manifest
from app.engine.package_files import (
    GENAI_CONFIG,
    HF_CONFIG,
    TOKENIZER,
    attention_window,
    check_onnx_file,
    eos_from_tokenizer,
    first_id,
    graph_bytes,
    json_section,
    load_json,
    model_name,
    optional_json,
    positive_int,
    read_tokenizer_files,
    token_ids,
)
from app.engine.types import ModelSpec
from app.errors import ModelLoadError

_GENAI_SEARCH_KEYS = (
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
    "repetition_penalty",
    "max_length",
    "min_length",
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


def read_genai(root: Path, variant: str | None, *, shared: Path | None = None) -> ModelSpec:
    """``shared``: where tokenizer files are when ``root`` has none (a package's configs)."""
    config_path = root / GENAI_CONFIG
    config = load_json(config_path)
    model = json_section(config, "model", config_path)
    decoder = json_section(model, "decoder", config_path, where="model.")
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
    context = positive_int(model.get("context_length")) or positive_int(search.get("max_length"))
    if context is None:
        raise ModelLoadError(
            f"{config_path} gives no context length (model.context_length).",
            hint="Add model.context_length, or download the folder again.",
        )
    token_root = shared if shared is not None and not (root / TOKENIZER).is_file() else root
    tokens = read_tokenizer_files(token_root)
    eos_ids = token_ids(model.get("eos_token_id")) or eos_from_tokenizer(token_root, tokens)
    session_options, provider_options = _genai_session_options(decoder, config_path)
    hf_config = optional_json(root / HF_CONFIG)
    heads, head_size = decoder.get("num_key_value_heads"), decoder.get("head_size")
    return ModelSpec(
        matmul_nbits=graph.matmul_nbits,
        matmul_nbits_shapes=graph.matmul_nbits_shapes,
        model_bytes=graph_bytes(model_path, graph),
        root=root,
        layout="genai",
        name=model_name(root, config.get("_name_or_path") or hf_config.get("_name_or_path")),
        model_path=model_path,
        variant="genai",
        tokenizer_path=token_root / TOKENIZER,
        chat_template=tokens["chat_template"],
        bos_token=tokens["bos_token"],
        eos_token=tokens["eos_token"],
        eos_token_ids=eos_ids,
        pad_token_id=first_id(model.get("pad_token_id")),
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
        if positive_int(heads) and positive_int(head_size)
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


# ---------------------------------------------------------------- ONNX Runtime model package

def read_package(root: Path, variant: str | None, provider: str) -> ModelSpec:
    """A model package (``manifest.json``, one genai folder per hardware variant): the variant
    for ``provider`` by the one policy, or the one named by ``variant``. The caller has
    checked that ``manifest.json`` describes a package (``looks_like_package``)."""
    manifest_path = root / package_manifest.PACKAGE_MANIFEST
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
    spec = read_genai(root / chosen.folder, None, shared=shared)
    return replace(spec, root=root, variant=chosen.name, name=model_name(root, package.name))
