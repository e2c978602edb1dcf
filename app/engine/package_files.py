"""What both model folder layouts share: the file names, reading JSON, the ONNX file check,
the tokenizer files and chat template, the attention window, and small field readers.

Every problem is a :class:`~app.errors.ModelLoadError` naming the file, the problem and what to
do. The chosen ``.onnx`` file is checked without loading its weights
(:func:`inspect_onnx`): a truncated or garbage file, a Git LFS pointer or a
missing / short external data file is reported before ONNX Runtime sees it.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from app.engine.onnx_file import OnnxSummary, inspect_onnx
from app.errors import ModelLoadError
from app.units import format_bytes

GENAI_CONFIG = "genai_config.json"
HF_CONFIG = "config.json"
GENERATION_CONFIG = "generation_config.json"
TOKENIZER = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_JSON = "chat_template.json"

CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_sequence_length",
    "n_ctx",
    "seq_length",
    "max_seq_len",
)
SPECIAL_TOKEN_KEYS = ("pad_token", "unk_token", "sep_token", "cls_token", "mask_token")


# ---------------------------------------------------------------- the attention window

# Families whose config.json ``sliding_window`` is a per-layer local window inside attention,
# not a span the whole model is bounded by: Gemma 2 / 3 and Cohere 2 interleave global layers
# (their ``layer_types`` or ``sliding_window_pattern`` say which), gpt-oss alternates, and
# Phi-3's 2047 is the flash-attention window of its training (its exports attend over the
# whole 4k context). Mistral 7B v0.1 is the model designed for a rolling KV buffer of its
# window, so a window there (and in unknown families) is the policy window. Names are compared
# by ``family_key``: config.json says ``gpt_oss``, onnxruntime-genai's builder writes the
# architecture's name less "ForCausalLM", lower-cased (``gptoss``; its model_type.h lists
# it so), and GGUF files and Hearth's conversions before this said ``gpt-oss``.
LOCAL_WINDOW_FAMILIES = frozenset(
    {"gemma2", "gemma3", "gemma3_text", "gemma3n", "gemma3n_text", "cohere2", "gpt_oss", "phi3"}
)


def family_key(name: object) -> str:
    """A model family's name as every producer spells it alike: lower case, without "_"
    or "-" (``gpt_oss`` / ``gptoss`` / ``gpt-oss`` → ``gptoss``)."""
    return str(name or "").lower().replace("_", "").replace("-", "")


_LOCAL_WINDOW_KEYS = frozenset(family_key(f) for f in LOCAL_WINDOW_FAMILIES)


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
    local_layers = None
    if isinstance(window, dict):  # genai: {"window_size": …, "slide_key_value_cache": …}
        # genai's builder lists the layers that use it: those its model class marks local
        # (gpt-oss's even layers, Gemma's), none ([]) for a model without local layers
        local_layers = window.get("layers")
        window = window.get("window_size")
    window = positive_int(window)
    if window is None or config.get("use_sliding_window") is False:
        return None
    family = family_key(config.get("model_type") or config.get("type"))
    if family in _LOCAL_WINDOW_KEYS or config.get("sliding_window_pattern"):
        return None
    layers = positive_int((config.get("decoder") or {}).get("num_hidden_layers")
                          or config.get("num_hidden_layers"))
    if local_layers and isinstance(local_layers, list) and (
        layers is None or len(local_layers) < layers
    ):
        return None  # some layers attend globally: a per-layer local window
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list) and any(
        isinstance(t, str) and not t.startswith("sliding") for t in layer_types
    ):
        return None
    if context is not None and window >= context:
        return None
    return window


# ---------------------------------------------------------------- tokenizer and template

def read_tokenizer_files(root: Path) -> dict[str, Any]:
    if not (root / TOKENIZER).is_file():
        hint = (
            "It only has a SentencePiece tokenizer.model; Hearth needs the Hugging Face "
            "tokenizer.json, which the model's repository usually also provides."
            if (root / "tokenizer.model").is_file()
            else "Download tokenizer.json from the model's repository into this folder."
        )
        raise ModelLoadError(f"{root} has no {TOKENIZER}.", hint=hint)
    config = optional_json(root / TOKENIZER_CONFIG)
    specials = {key: token_text(config.get(key), config) for key in SPECIAL_TOKEN_KEYS}
    extra: dict[str, Any] = {k: v for k, v in specials.items() if v is not None}
    additional = config.get("additional_special_tokens")
    if isinstance(additional, list):
        texts = [t for t in (token_text(a, config) for a in additional) if t]
        if texts:
            extra["additional_special_tokens"] = texts
    named = config.get("extra_special_tokens")
    if isinstance(named, dict):
        extra.update({k: t for k, v in named.items() if (t := token_text(v, config))})
    return {
        "bos_token": token_text(config.get("bos_token"), config),
        "eos_token": token_text(config.get("eos_token"), config),
        "add_bos_token": bool(config.get("add_bos_token", False)),
        "chat_template": chat_template_text(root, config),
        "extra_special_tokens": extra,
    }


def token_text(value: Any, tokenizer_config: dict) -> str | None:
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


def chat_template_text(root: Path, tokenizer_config: dict) -> str | None:
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
        template = optional_json(root / CHAT_TEMPLATE_JSON).get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": "…"}, {"name": …}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    return template if isinstance(template, str) and template.strip() else None


def eos_from_tokenizer(root: Path, tokens: dict) -> tuple[int, ...]:
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


# ---------------------------------------------------------------- field readers

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


def optional_json(path: Path) -> dict:
    return load_json(path) if path.is_file() else {}


def json_section(data: dict, key: str, path: Path, where: str = "") -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        raise ModelLoadError(
            f"{path} has no '{where}{key}' section.",
            hint="Fix the file, or download the model folder again.",
        )
    return value


def positive_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if value > 0 and int(value) == value else None


def first_positive(config: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        if (value := positive_int(config.get(key))) is not None:
            return value
    return None


def token_ids(value: Any) -> tuple[int, ...]:
    """An id or list of ids → a tuple without duplicates, order kept."""
    values = value if isinstance(value, list) else [value]
    ids = [int(v) for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    return tuple(dict.fromkeys(ids))


def first_id(value: Any) -> int | None:
    ids = token_ids(value)
    return ids[0] if ids else None


def model_name(root: Path, name_or_path: Any) -> str:
    if isinstance(name_or_path, str) and name_or_path.strip():
        base = PurePosixPath(name_or_path.strip().replace("\\", "/").rstrip("/")).name
        if base and base not in (".", ".."):
            return base
    return root.resolve().name
