"""The small JSON files of a converted model folder: genai_config.json and the manifest."""

from __future__ import annotations

from pathlib import Path

from app.fileio import write_json_atomic
from app.manifest import Manifest, describe_files, now_iso
from app.manifest import source as source_record
from app.models.gguf import SAMPLING_DEFAULTS
from app.models.gguf.reader import ModelParams

#: GGUF architecture → the model type onnxruntime-genai's builder writes for the same model
#: (the Hugging Face architecture less "ForCausalLM", lower-cased, Gemma 3's text model named
#: apart; genai's src/models/model_type.h lists these), so genai itself takes the folder:
#: it reads ``gemma3`` as the vision-language model and knows no ``gpt-oss``
GENAI_TYPES = {"gemma3": "gemma3_text", "gpt-oss": "gptoss"}


def genai_config(
    p: ModelParams,
    *,
    bos_id: int | None,
    eos_id: int | list[int] | None,
    pad_id: int | None,
) -> dict:
    """onnxruntime-genai's genai_config.json for the decoder graph (``eos_id`` may list
    several ids, as genai allows)."""
    return {
        "model": {
            "bos_token_id": bos_id,
            "context_length": p.context_length,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": p.head_dim,
                "hidden_size": p.hidden,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": p.n_heads,
                "num_hidden_layers": p.n_layers,
                "num_key_value_heads": p.n_kv_heads,
            },
            "eos_token_id": eos_id,
            "pad_token_id": pad_id if pad_id is not None else _first(eos_id),
            "type": GENAI_TYPES.get(p.arch, p.arch),
            "vocab_size": p.vocab_size,
        },
        "search": {
            "diversity_penalty": 0.0,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": p.context_length,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": True,
            **SAMPLING_DEFAULTS,
        },
    }


def _first(ids: int | list[int] | None) -> int | None:
    return ids[0] if isinstance(ids, list) else ids


def manifest(
    folder: Path,
    *,
    model_id: str,
    name: str,
    source: Path,
    source_sha256: str,
    precision: str,
    context_length: int,
    parameters: int,
    conversion: dict,
) -> Manifest:
    """The converted folder's manifest: every file with its hash, and how it was made."""
    return Manifest(
        id=model_id,
        name=name,
        source=source_record("gguf", path=str(source), sha256=source_sha256),
        format="genai",
        files=describe_files(folder),
        installed_at=now_iso(),
        context_length=context_length,
        parameters=parameters,
        extra={"precision": precision, "conversion": conversion},
    )


def write_json(path: Path, doc: dict) -> None:
    write_json_atomic(path, doc, ensure_ascii=False)
