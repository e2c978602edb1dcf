"""GGUF file → an onnxruntime-genai model folder that Hearth can run.

``convert_gguf`` writes everything into a temporary sibling of ``dest`` and renames it into
place only when the folder is complete, so a failure (or Ctrl+C) never leaves half a model.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

import onnx

from app.errors import ConversionError, DiskFullError
from app.manifest import sha256_file
from app.models.gguf import ATTENTION_FORM, EXACT_OFFSETS_FORM, SAMPLING_FORM
from app.models.gguf.graph_builder import MATRIX_GROUPS, ExternalData, GraphBuilder
from app.models.gguf.grouped_attention import (
    ATTENTION_FORMS,
    DEFAULT_KV_CACHE,
    KV_CACHES,
    default_attention,
    kv_cache_of,
    unsupported_reason,
)
from app.models.gguf.naming import readable_name
from app.models.gguf.package_files import genai_config, manifest, write_json
from app.models.gguf.reader import GGUFFile
from app.models.gguf.tokenizer_builder import build_tokenizer_config, build_tokenizer_json
from app.models.gguf.weights import DEFAULT_EXACT_OFFSETS, PRECISIONS, WeightSource

Progress = Callable[[float, str], None]
#: ``check()`` raises to stop the conversion (``JobControl.checkpoint``: JobCancelled)
Check = Callable[[], None]
# Gemma 3 GGUFs made from the base checkpoints carry no chat template; this is the turn format
# of Google's instruction-tuned Gemma 3 (a system message is folded into the first user turn).
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set first = messages[0]['content'] + '\n\n' %}{% set rest = messages[1:] %}"
    "{% else %}{% set first = '' %}{% set rest = messages %}{% endif %}"
    "{% for m in rest %}"
    "{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
    "<start_of_turn>{{ role }}\n{{ (first if loop.first else '') + m['content'] | trim }}"
    "<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
# the token a chat turn ends with, where the GGUF's eos is another (Phi-3 GGUFs name
# <|endoftext|> as eos; llama.cpp stops at <|end|> too)
END_OF_TURN = {"gemma3": "<end_of_turn>", "phi3": "<|end|>"}
# gpt-oss (Harmony) ends a reply with <|return|> (an answer) or <|call|> (a tool call); its
# <|end|> only closes one message (the analysis before the answer), so it must not stop the
# reply: llama.cpp takes <|end|> off its end-of-generation list for o200k_harmony too
REPLY_ENDS = {"gpt-oss": ("<|return|>", "<|call|>")}
DISK_MARGIN = 32 << 20  # tokenizer files, graph proto, file system slack


def free_bytes(path: Path) -> int:
    """Free space on the file system holding ``path`` (patched in tests)."""
    return shutil.disk_usage(path).free


def estimate_output_bytes(g: GGUFFile, weights: WeightSource) -> int:
    """Size of the converted folder, from the plan for each tensor (before writing)."""
    p = g.params
    # every block matrix, whatever the architecture stores (q/k/v or Phi-3's fused attn_qkv)
    names = [n for n, t in g.tensors.items() if n.startswith("blk.") and len(t.shape) > 1]
    names.append("output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    total = sum(weights.estimated_bytes(n) for n in names)
    total += weights.estimated_embedding_bytes()  # the lookup table
    cache = p.context_length * p.rotary_dim * 4  # cos + sin caches
    total += cache * (2 if p.rope_original_context else 1)  # LongRoPE: short and long
    if p.rope_base_local:  # Gemma 3: the local layers' own caches
        total += cache
    total += sum(int(t.n_elements) * 4 for t in g.tensors.values() if len(t.shape) == 1)
    return total


def convert_gguf(
    src: Path,
    dest: Path,
    *,
    precision: str = "native",
    name: str | None = None,
    progress: Progress | None = None,
    accuracy_level: int = 4,
    exact_offsets: bool = DEFAULT_EXACT_OFFSETS,
    activation_block: int | None = None,
    activation_groups: Iterable[str] | None = None,
    float_groups: Iterable[str] = (),
    check: Check | None = None,
    source_sha256: str | None = None,
    attention: str | None = None,
    kv_cache: str = DEFAULT_KV_CACHE,
) -> Path:
    """Convert ``src`` (a .gguf file) into a complete model folder at ``dest``.

    Args:
        src: the GGUF file.
        dest: the model folder to create; it must not exist.
        precision: "native" (keep the file's quantization), "int4" (fresh lossy 4-bit),
            "fp16" or "fp32".
        name: display name for the manifest; defaults to ``naming.readable_name`` (the
            GGUF's ``general.name``, or one made from the file name).
        progress: called with (fraction 0..1, message).
        accuracy_level: MatMulNBits ``accuracy_level`` (4 = int8 activations, fastest on CPU;
            0 = float activations, used by tests to check the weights exactly).
        exact_offsets: carry Q4_1/Q4_K over exactly as 4-bit codes plus a block-offset term
            (see ``quant``; the default) instead of 8-bit codes with rounded offsets
            (error ≤ d/32). Measured on the starter by bench/bench_prefill.py: exact weights,
            a smaller file, decode as fast or faster and prompts faster than the 8-bit form
            (whose int8 kernel is slow at many rows).
        activation_block: 16 cuts every larger MatMulNBits block into 16-element runs of
            the same scale (exact, ``quant.split_blocks``), so int8 activations are rounded
            per 16 instead of per 32 as llama.cpp's are: on the starter ~20% closer to the
            fp32 logits over five texts, for ~20% more CPU time per decoded token and a 16%
            larger folder (docs/ARCHITECTURE.md); None (the default) keeps the weights'
            blocks.
        activation_groups: with ``activation_block``, cut only these matrix groups
            (``graph_builder.MATRIX_GROUPS``: qkv, o, gate_up, down, output); None (the
            default): every matrix. Recorded in the manifest's
            ``conversion.activation_groups``.
        float_groups: matrix groups (as ``activation_groups``) whose MatMulNBits nodes take
            float activations (``graph_builder.FLOAT_ACCURACY``) instead of
            ``accuracy_level``'s; recorded in the manifest's ``conversion.float_groups``.
        check: called between layers and phases; whatever it raises (JobCancelled when the
            user cancels or the app quits) stops the conversion and removes its partial
            folder.
        source_sha256: the source's sha256 when the caller has hashed it already (the
            library's duplicate check); else it is hashed here.
        attention: "grouped" (grouped attention over the shared buffer's capacity, see
            ``grouped_attention``) or "gqa" (GroupQueryAttention); None: the model's default
            (``grouped_attention.default_attention``: grouped wherever the architecture
            allows). Recorded in the manifest's ``conversion.attention`` (and, for grouped,
            ``attention_form``); what was asked for as ``attention_requested`` (None: the
            default), so an update keeps an explicit choice (``gguf.update``).
        kv_cache: the grouped form's KV buffers, "float16" (the default, as llama.cpp's F16
            cache: half the bytes a long-context decode step reads) or "float32" (tests
            that check the weights to 1e-4); the GQA form keeps float32. Recorded in the
            manifest's ``conversion.kv_cache``.

    Progress messages name the phase: "Reading <file>", "Converting layer 3 of 30",
    "Converting the output layer", "Writing model.onnx", "Hashing the converted files",
    "Hashing <file>".

    Returns ``dest``. Raises ConversionError or DiskFullError with a sentence for the user.
    """
    src, dest = Path(src), Path(dest)
    report = progress or (lambda _f, _m: None)
    checkpoint = check or (lambda: None)
    if precision not in PRECISIONS:
        raise ConversionError(
            f"Unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}."
        )
    if dest.exists():
        raise ConversionError(f"{dest} already exists; remove it or choose another name.")
    if activation_block not in (None, 16):
        raise ConversionError(
            f"Unknown activation block {activation_block!r}; choose 16 or none."
        )
    groups = None if activation_groups is None else frozenset(activation_groups)
    if groups is not None and (unknown := sorted(groups - set(MATRIX_GROUPS))):
        raise ConversionError(
            f"Unknown matrix group {', '.join(unknown)}; choose from "
            f"{', '.join(MATRIX_GROUPS)}."
        )
    floats = frozenset(float_groups)
    if unknown := sorted(floats - set(MATRIX_GROUPS)):
        raise ConversionError(
            f"Unknown matrix group {', '.join(unknown)}; choose from "
            f"{', '.join(MATRIX_GROUPS)}."
        )
    report(0.0, f"Reading {src.name}")
    g = GGUFFile(src)
    requested = attention  # None: the model's default (recorded: an update may change it)
    if attention is None:
        attention = default_attention(g.params)
    if attention not in ATTENTION_FORMS:
        raise ConversionError(
            f"Unknown attention form {attention!r}; choose one of {', '.join(ATTENTION_FORMS)}."
        )
    if kv_cache not in KV_CACHES:
        raise ConversionError(
            f"Unknown KV cache type {kv_cache!r}; choose one of {', '.join(KV_CACHES)}."
        )
    if attention == "grouped" and (reason := unsupported_reason(g.params)):
        raise ConversionError(
            f"{src.name} cannot be converted with grouped attention: it has {reason}."
        )
    kv_cache = kv_cache_of(attention, kv_cache)  # what the graph gets: GQA keeps float32
    weights = WeightSource(g, precision, exact_offsets=exact_offsets, check=checkpoint)
    tokenizer = build_tokenizer_json(g)  # fails early on missing tokenizer metadata
    tok_config = build_tokenizer_config(g, g.params.context_length)
    if g.params.arch == "gemma3" and not tok_config.get("chat_template"):
        tok_config["chat_template"] = GEMMA3_CHAT_TEMPLATE

    dest.parent.mkdir(parents=True, exist_ok=True)
    need = estimate_output_bytes(g, weights) + DISK_MARGIN
    if activation_block:  # a scale (and zero point) per 16 weights: ~a quarter more
        need += need // 4
    free = free_bytes(dest.parent)
    if free < need:
        raise DiskFullError(
            f"Converting {src.name} needs about {need / 2**20:,.0f} MiB free in {dest.parent}, "
            f"but only {free / 2**20:,.0f} MiB are free.",
            hint="Free some disk space and try again.",
        )

    tmp = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write_folder(g, weights, tmp, tokenizer, tok_config, accuracy_level, report,
                      checkpoint, attention, kv_cache=kv_cache,
                      activation_block=activation_block,
                      activation_groups=groups, float_groups=floats)
        checkpoint()
        if source_sha256 is None:
            report(0.97, f"Hashing {src.name}")
        source_sha = source_sha256 or sha256_file(src)
        report(0.98, "Hashing the converted files")
        conversion = {
            "weights": weights.stats.forms,
            "max_error_per_step": round(weights.stats.inexact_max_error_per_step, 6),
            "fallback_blocks": weights.stats.fallback_blocks,
            "gguf_tensor_types": g.tensor_types(),
            "accuracy_level": accuracy_level,
            "exact_offsets": exact_offsets,
            "offsets_form": EXACT_OFFSETS_FORM if exact_offsets else None,
            "activation_block": activation_block,
            "activation_groups": None if groups is None else sorted(groups),
            "float_groups": sorted(floats),
            "sampling_form": SAMPLING_FORM,
            "attention": attention,
            "attention_form": ATTENTION_FORM if attention == "grouped" else None,
            "attention_requested": requested,
            "kv_cache": kv_cache,
        }
        doc = manifest(
            tmp,
            model_id=dest.name,
            name=name or readable_name(g.get("general.name"), src),
            source=src.resolve(),
            source_sha256=source_sha,
            precision=precision,
            context_length=g.params.context_length,
            parameters=g.parameter_count(),
            conversion=conversion,
        )
        doc.write(tmp)
        checkpoint()
        if dest.exists():
            _refuse(dest)
        os.replace(tmp, dest)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno == 28:  # ENOSPC
            raise DiskFullError(
                f"The disk filled up while converting {src.name}.",
                hint="Free some disk space and try again.",
            ) from exc
        raise ConversionError(f"Converting {src.name} failed: {exc}") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    report(1.0, "Converted")
    return dest


def _refuse(dest: Path) -> None:
    raise ConversionError(f"{dest} appeared while converting; it was left untouched.")


def _write_folder(
    g: GGUFFile,
    weights: WeightSource,
    folder: Path,
    tokenizer: dict,
    tok_config: dict,
    accuracy_level: int,
    report: Progress,
    checkpoint: Check,
    attention: str = "gqa",
    *,
    activation_block: int | None = None,
    activation_groups: frozenset[str] | None = None,
    float_groups: frozenset[str] = frozenset(),
    kv_cache: str = DEFAULT_KV_CACHE,
) -> None:
    def layer_done(fraction: float, message: str) -> None:
        checkpoint()  # between layers: a cancel stops here
        report(0.02 + 0.9 * fraction, message)

    data = ExternalData(folder / "model.onnx.data")
    try:
        builder = GraphBuilder(
            g.params,
            weights,
            data,
            accuracy_level=accuracy_level,
            activation_block=activation_block,
            activation_groups=activation_groups,
            float_groups=float_groups,
            progress=layer_done,
            attention=attention,
            kv_cache=kv_cache,
        )
        model = builder.build()
    finally:
        data.close()
    checkpoint()
    report(0.93, "Writing model.onnx")
    onnx.save_model(model, str(folder / "model.onnx"))
    write_json(folder / "tokenizer.json", tokenizer)
    write_json(folder / "tokenizer_config.json", tok_config)
    template = tok_config.get("chat_template")
    if template:
        (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    p = g.params

    def token_id(key: str) -> int | None:
        value = g.get(key)
        return None if value is None else int(value)

    eos: int | list[int] | None = token_id("tokenizer.ggml.eos_token_id")
    if p.arch in END_OF_TURN:  # a chat reply ends with the end-of-turn token, not <eos>
        eos = _eos_ids_with_end_of_turn(g, eos, END_OF_TURN[p.arch])
    if p.arch in REPLY_ENDS:
        eos = _eos_ids_with_tokens(g, eos, REPLY_ENDS[p.arch])
    write_json(
        folder / "genai_config.json",
        genai_config(
            p,
            bos_id=token_id("tokenizer.ggml.bos_token_id"),
            eos_id=eos,
            pad_id=token_id("tokenizer.ggml.padding_token_id"),
        ),
    )


def _eos_ids_with_tokens(g: GGUFFile, eos: int | None, texts: tuple[str, ...]) -> list[int]:
    """<eos> plus the ids of the tokens ``texts`` that the vocabulary has."""
    ids = [] if eos is None else [eos]
    tokens = g.get("tokenizer.ggml.tokens") or []
    for text in texts:
        tid = next((j for j, t in enumerate(tokens) if t == text), None)
        if tid is not None and tid not in ids:
            ids.append(tid)
    return ids


def _eos_ids_with_end_of_turn(g: GGUFFile, eos: int | None, text: str) -> list[int]:
    """<eos> plus the end-of-turn token (the GGUF's eot id, else the token ``text``)."""
    ids = [] if eos is None else [eos]
    eot = g.get("tokenizer.ggml.eot_token_id")
    if eot is None:
        tokens = g.get("tokenizer.ggml.tokens") or []
        eot = next((j for j, t in enumerate(tokens) if t == text), None)
    if eot is not None and int(eot) not in ids:
        ids.append(int(eot))
    return ids
