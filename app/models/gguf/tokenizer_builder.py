"""Build Hugging Face ``tokenizer.json`` / ``tokenizer_config.json`` from GGUF metadata.

Two vocabularies are supported, as llama.cpp names them in ``tokenizer.ggml.model``:

* ``gpt2``: byte-level BPE with merges. The pre-tokenizer regexes follow llama.cpp's choice
  for ``tokenizer.ggml.pre`` (its ``llama-vocab.cpp``), applied in order as isolated splits.
* ``llama``: SentencePiece BPE with scores, ``<0x..>`` byte fallback and the ▁ metaspace.
  Merges are derived from the scores the way Hugging Face's converter does.

Control and user-defined tokens (token types 3 and 4) become added tokens, matched whole in
the text. Only control tokens are special (left out of decoded text): llama.cpp's converter
writes a tokenizer's non-special added tokens (``<think>``, say) as user-defined, and their
text belongs in the output.
"""

from __future__ import annotations

from typing import Any

from app.errors import ConversionError
from app.models.gguf.reader import GGUFFile

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = (
    1,
    2,
    3,
    4,
    5,
    6,
)

_GPT2 = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",)
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
_SMOLLM = (r"\p{N}", _GPT2[0])
# o200k (gpt-oss, GPT-4o): llama.cpp's GPT4O pre-tokenizer, the regex of its tokenizer.json
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
_O200K = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}"
    rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
)
PRE_TOKENIZER_REGEXES: dict[str, tuple[str, ...]] = {
    "default": _GPT2,
    "gpt2": _GPT2,
    "gpt-2": _GPT2,
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "smaug-bpe": _LLAMA3,  # SmolLM3's; llama.cpp splits it as llama3
    "qwen2": _QWEN2,
    "smollm": _SMOLLM,
    "starcoder": _SMOLLM,
    "refact": _SMOLLM,
    "gpt-4o": _O200K,
}


def _meta(g: GGUFFile, key: str, *, required: bool = True) -> Any:
    value = g.get(key)
    if value is None and required:
        raise ConversionError(
            f"{g.path.name} lacks the tokenizer metadata {key!r}, so its tokenizer cannot be "
            "rebuilt.",
            hint="Use a GGUF file that includes its tokenizer (most llama.cpp conversions do).",
        )
    return value


def _added_tokens(tokens: list[str], types: list[int] | None) -> list[dict]:
    out = []
    for i, (text, kind) in enumerate(zip(tokens, types or [], strict=False)):
        if kind in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            out.append(
                {
                    "id": i,
                    "content": text,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": kind == TOKEN_CONTROL,
                }
            )
    return out


def _bos_post_processor(bos: str, bos_id: int) -> dict:
    return {
        "type": "TemplateProcessing",
        "single": [
            {"SpecialToken": {"id": bos, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
        ],
        "pair": [
            {"SpecialToken": {"id": bos, "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"SpecialToken": {"id": bos, "type_id": 1}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
    }


def add_bos_default(g: GGUFFile) -> bool:
    value = g.get("tokenizer.ggml.add_bos_token")
    if value is not None:
        return bool(value)
    return g.get("tokenizer.ggml.model") == "llama"


def build_tokenizer_json(g: GGUFFile) -> dict:
    """The ``tokenizer.json`` document for the GGUF's vocabulary."""
    kind = _meta(g, "tokenizer.ggml.model")
    tokens = list(_meta(g, "tokenizer.ggml.tokens"))
    types = g.get("tokenizer.ggml.token_type")
    types = [int(t) for t in types] if types is not None else None
    bos_id = g.get("tokenizer.ggml.bos_token_id")
    post = None
    if add_bos_default(g) and bos_id is not None:
        post = _bos_post_processor(tokens[int(bos_id)], int(bos_id))
    if kind == "gpt2":
        doc = _gpt2_tokenizer(g, tokens)
    elif kind == "llama":
        doc = _spm_tokenizer(g, tokens, types)
    else:
        raise ConversionError(
            f"{g.path.name} uses a '{kind}' tokenizer; Hearth rebuilds only 'gpt2' (byte-level "
            "BPE) and 'llama' (SentencePiece) tokenizers."
        )
    doc.update(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": _added_tokens(tokens, types),
            "post_processor": post,
        }
    )
    return doc


def _gpt2_tokenizer(g: GGUFFile, tokens: list[str]) -> dict:
    merges = list(_meta(g, "tokenizer.ggml.merges"))
    pre = str(g.get("tokenizer.ggml.pre", "default"))
    regexes = PRE_TOKENIZER_REGEXES.get(pre, _GPT2)
    splits = [
        {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated", "invert": False}
        for rx in regexes
    ]
    splits.append(
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    )
    return {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": splits},
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": pre in ("llama-bpe", "llama3"),
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }


def _spm_merges(tokens: list[str], scores: list[float], types: list[int] | None) -> list[list]:
    """Merges implied by a SentencePiece BPE vocabulary, ordered by the merged piece's score."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found = []
    for piece, pid in vocab.items():
        if types is not None and types[pid] != TOKEN_NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                found.append((-scores[pid], pid, vocab[left], vocab[right], left, right))
    found.sort()
    return [[f[4], f[5]] for f in found]


def _spm_tokenizer(g: GGUFFile, tokens: list[str], types: list[int] | None) -> dict:
    scores = g.get("tokenizer.ggml.scores")
    if scores is None:
        _meta(g, "tokenizer.ggml.scores")
    scores = [float(s) for s in scores]
    unk_id = int(g.get("tokenizer.ggml.unknown_token_id", 0))
    add_space = g.get("tokenizer.ggml.add_space_prefix")
    add_space = True if add_space is None else bool(add_space)
    normalizers: list[dict] = []
    if add_space:
        normalizers.append({"type": "Prepend", "prepend": "▁"})
    normalizers.append({"type": "Replace", "pattern": {"String": " "}, "content": "▁"})
    decoders: list[dict] = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if add_space:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": tokens[unk_id],
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": _spm_merges(tokens, scores, types),
        },
    }


def build_tokenizer_config(g: GGUFFile, context_length: int) -> dict:
    """``tokenizer_config.json``: special tokens, BOS policy and the chat template."""
    tokens = list(_meta(g, "tokenizer.ggml.tokens"))
    types = g.get("tokenizer.ggml.token_type")

    def tok(key: str) -> str | None:
        idx = g.get(key)
        return tokens[int(idx)] if idx is not None and 0 <= int(idx) < len(tokens) else None

    added = {
        str(t["id"]): {k: v for k, v in t.items() if k != "id"}
        for t in _added_tokens(tokens, [int(x) for x in types] if types is not None else None)
    }
    return {
        "add_bos_token": add_bos_default(g),
        "add_eos_token": bool(g.get("tokenizer.ggml.add_eos_token", False)),
        "bos_token": tok("tokenizer.ggml.bos_token_id"),
        "eos_token": tok("tokenizer.ggml.eos_token_id"),
        "pad_token": tok("tokenizer.ggml.padding_token_id"),
        "unk_token": tok("tokenizer.ggml.unknown_token_id"),
        "chat_template": g.get("tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
    }
