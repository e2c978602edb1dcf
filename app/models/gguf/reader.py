"""Open a GGUF file and read what the converter needs, with user-facing errors."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, ReaderTensor
from gguf import quants as gguf_quants

from app.errors import ConversionError
from app.models.gguf.header import HeaderError, read_header

GGUF_MAGIC = b"GGUF"
SUPPORTED_ARCHITECTURES = (
    "llama", "qwen2", "gemma3", "qwen3", "phi3", "mistral", "smollm3", "granite", "gpt-oss",
)
# architectures refused with a sentence that names what the converter would need
MISSING_FOR: dict[str, str] = {}
# llama.cpp rotates adjacent pairs for llama-layout files (its converter permutes their Q/K
# rows: llama, mistral, smollm3, granite; ``llama_model_rope_type``'s NORM group) and halves
# (NeoX style) for the others.
INTERLEAVED_ROPE = {
    "llama": True,
    "mistral": True,
    "smollm3": True,
    "granite": True,
    "qwen2": False,
    "qwen3": False,
    "phi3": False,
    "gemma3": False,
    "gpt-oss": False,
}
# per-head RMSNorm of q and k before rotary (``attn_q_norm`` / ``attn_k_norm``)
QK_NORM_ARCHITECTURES = ("qwen3", "gemma3")
# architectures whose ``attention.sliding_window`` applies to every layer (Gemma 3 reads its
# own pattern; llama.cpp ignores Phi-3's window, Hugging Face and onnxruntime-genai apply it)
WINDOWED_ARCHITECTURES = ("mistral", "phi3")
# Gemma 3, as llama.cpp runs it: every 6th layer (5, 11, …) is global, the others attend to a
# sliding window with their own rope base; the GGUF's rope base and scaling are the global ones.
GEMMA3_SWA_PATTERN = 6
GEMMA3_LOCAL_ROPE_BASE = 10000.0
# SmolLM3, as llama.cpp runs it: every 4th layer (3, 7, …) skips rotary ("NoPE"); the step is
# a literal in llama.cpp (``n_no_rope_layer_step = 4``), no GGUF key carries it
SMOLLM3_NOPE_STEP = 4
# gpt-oss, as llama.cpp runs it (``set_swa_pattern(2)``): even layers (0, 2, …) attend within
# ``attention.sliding_window``, odd ones to everything; YaRN's betas default to llama.cpp's
GPT_OSS_SWA_PATTERN = 2
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
MAX_EXPERTS = 2**12
# Bounds on hyper-parameters, far above any real model's (Llama 3.1 405B: 126 layers, 16384
# wide, 128 heads; contexts reach 10M); anything beyond is broken or hostile metadata.
MAX_LAYERS = 4096
MAX_HIDDEN = 2**17
MAX_HEADS = 2**12
MAX_HEAD_DIM = 2**12
MAX_FFN = 2**20
MAX_CONTEXT_TOKENS = 2**24


@dataclass(frozen=True)
class ModelParams:
    """Hyper-parameters of a Llama-family decoder, read from GGUF metadata."""

    arch: str
    n_layers: int
    hidden: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    context_length: int
    rope_base: float
    rms_eps: float
    rope_interleaved: bool
    rope_scale_linear: float = 1.0  # positions are divided by this
    rope_dim: int = 0  # dimensions rotated per head (the first ones); 0: all of head_dim
    # LongRoPE (Phi-3 "su"): the original context; a model loaded with more rotates with the
    # long factors, one loaded with at most this many tokens with the short ones; 0: none
    rope_original_context: int = 0
    rope_attn_factor: float = 1.0  # cos and sin are multiplied by this (LongRoPE's mscale)
    qk_norm: bool = False  # per-head RMSNorm of q and k before rotary (qwen3, gemma3)
    tied_embeddings: bool = False
    qkv_bias: bool = False
    # Gemma 3 (defaults leave llama/qwen2 untouched)
    sliding_window: int = 0  # keys a local layer sees, its own position included
    local_layers: tuple[int, ...] = ()  # layers that attend within the sliding window
    rope_base_local: float = 0.0  # > 0: local layers rotate with this base, never scaled
    attn_scale: float = 0.0  # 0: 1/sqrt(head_dim)
    embed_scale: float = 1.0  # token embeddings are multiplied by this
    final_logit_softcap: float = 0.0  # 0: none; else logits = c·tanh(logits / c)
    nope_layers: tuple[int, ...] = ()  # layers that skip rotary (SmolLM3)
    # Granite: each block's attention and MLP outputs are multiplied by residual_scale
    # before they join the residual stream; the logits are divided by logit_scale
    residual_scale: float = 1.0
    logit_scale: float = 1.0
    # mixture of experts (gpt-oss): a router picks ``n_experts_used`` of ``n_experts`` SwiGLU
    # experts of width ``expert_ffn`` per token; 0: a dense MLP
    n_experts: int = 0
    n_experts_used: int = 0
    expert_ffn: int = 0
    attn_sinks: bool = False  # a learned logit per head joins each softmax's denominator
    # YaRN (rope.scaling.type "yarn"): frequencies blend between extrapolated and divided by
    # ``yarn_factor`` across the dimensions the betas bound; 0: none
    yarn_factor: float = 0.0
    yarn_original_context: int = 0
    yarn_beta_fast: float = YARN_BETA_FAST
    yarn_beta_slow: float = YARN_BETA_SLOW
    # whether the correction range's ends are rounded outward (ggml's corr_dims); gpt-oss's
    # own config says not ("truncate": false, as OpenAI's reference and transformers compute)
    yarn_truncate: bool = True

    @property
    def rotary_dim(self) -> int:
        return self.rope_dim or self.head_dim


class _GGUFModel:
    """What a GGUF's metadata and tensor index say about its model (shared by ``GGUFFile``,
    which the converter reads tensors from, and ``GGUFHeader``, the cheap look at the header).

    Subclasses set ``path`` and ``tensors`` and implement ``get``; ``_index`` checks each
    tensor against the file's size and fills ``tensors``."""

    path: Path
    tensors: dict[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        raise NotImplementedError

    def _index(self, tensors: Any, size: int) -> None:
        self.tensors = {}
        for t in tensors:
            if t.data_offset + t.n_bytes > size:
                raise ConversionError(
                    f"{self.path.name} is truncated: tensor {t.name} ends past the end of "
                    "the file.",
                    hint="Download the file again.",
                )
            dims = [int(d) for d in t.shape]
            if math.prod(dims) != int(t.n_elements) or any(d < 1 for d in dims):
                raise ConversionError(
                    f"{self.path.name} is corrupt: tensor {t.name} has the impossible shape "
                    f"{dims}.",
                    hint="Download the file again.",
                )
            self.tensors[t.name] = t

    # -- metadata --------------------------------------------------------------------------
    @property
    def architecture(self) -> str:
        return str(self.get("general.architecture", ""))

    def _require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise ConversionError(f"{self.path.name} lacks the metadata key {key!r}.")
        return value

    def _bounded(self, key: str, high: int, *, default: int | None = None) -> int:
        """An integer hyper-parameter in 1…``high``, or a ``ConversionError`` naming the key.
        Checked before anything is sized by it (a layer count of 10^9 must not build a
        tuple of 10^9 entries, a head count of 0 must not divide)."""
        value = self.get(key) if default is None else self.get(key, default)
        if value is None:
            raise ConversionError(f"{self.path.name} lacks the metadata key {key!r}.")
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise self._broken(key, value, f"a whole number from 1 to {high:,}")
        if not 1 <= int(value) <= high:
            raise self._broken(key, value, f"from 1 to {high:,}")
        return int(value)

    def _broken(self, key: str, value: Any, expected: str) -> ConversionError:
        shown = f"{value:,}" if isinstance(value, int | np.integer) else repr(value)
        return ConversionError(
            f"{self.path.name} has an impossible value {shown} for '{key}' (expected "
            f"{expected}); its metadata is broken.",
            hint="Download the file again, or choose another GGUF of this model.",
        )

    def _read_params(self) -> ModelParams:
        arch = self.architecture
        if arch in MISSING_FOR:
            raise ConversionError(
                f"{self.path.name} holds a '{arch}' model, which Hearth cannot convert: it "
                f"needs {MISSING_FOR[arch]}, and Hearth's converter builds none of these.",
                hint="Use an ONNX build of this model, or a dense model of similar size.",
            )
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ConversionError(
                f"{self.path.name} holds a '{arch or 'unknown'}' model; Hearth converts only "
                f"these architectures: {', '.join(SUPPORTED_ARCHITECTURES)}.",
            )
        a = arch + "."
        hidden = self._bounded(a + "embedding_length", MAX_HIDDEN)
        n_heads = self._bounded(a + "attention.head_count", MAX_HEADS)
        n_kv = self._bounded(a + "attention.head_count_kv", n_heads, default=n_heads)
        if n_heads % n_kv:
            raise self._broken(a + "attention.head_count_kv", n_kv,
                               f"a divisor of the {n_heads} attention heads")
        head_dim = self._bounded(a + "attention.key_length", MAX_HEAD_DIM,
                                 default=max(1, hidden // n_heads))
        tokens = self.get("tokenizer.ggml.tokens")
        emb = self.tensors.get("token_embd.weight")
        if emb is None:
            raise ConversionError(f"{self.path.name} has no token_embd.weight tensor.")
        vocab = int(emb.shape[1])
        if tokens is not None and len(tokens) != vocab:
            vocab = max(vocab, len(tokens))
        linear = self._linear_rope_scale(a)
        rope_dim = int(self.get(a + "rope.dimension_count", head_dim) or head_dim)
        if head_dim % 8:
            raise ConversionError(
                f"{self.path.name}: head size {head_dim} is not a multiple of 8, which ONNX "
                "Runtime's attention kernel needs."
            )
        if rope_dim > head_dim or rope_dim % 16:
            raise ConversionError(
                f"{self.path.name}: {rope_dim} rotary dimensions per head of {head_dim}; "
                "ONNX Runtime's attention kernel needs at most the head size, in a multiple "
                "of 16."
            )
        n_layers = self._bounded(a + "block_count", MAX_LAYERS)
        if not any(name.startswith(f"blk.{n_layers - 1}.") for name in self.tensors):
            raise self._broken(a + "block_count", n_layers,
                               "the number of layers whose tensors the file holds")
        context = self._bounded(a + "context_length", MAX_CONTEXT_TOKENS, default=4096)
        if arch == "gemma3":
            extra = self._gemma3_params(a, hidden, n_heads, head_dim)
        else:
            extra = self._window_params(a, arch, n_layers)
        if arch == "smollm3":
            extra["nope_layers"] = tuple(
                i for i in range(n_layers) if (i + 1) % SMOLLM3_NOPE_STEP == 0
            )
        if arch == "granite":
            extra.update(self._granite_params(a))
        if arch == "gpt-oss":
            extra.update(self._gpt_oss_params(a, n_layers))
        extra.update(self._longrope_params(a, rope_dim // 2))
        return ModelParams(
            arch=arch,
            n_layers=n_layers,
            hidden=hidden,
            ffn=self._bounded(a + "feed_forward_length", MAX_FFN,
                              default=extra.get("expert_ffn") or None),
            n_heads=n_heads,
            n_kv_heads=n_kv,
            head_dim=head_dim,
            vocab_size=vocab,
            context_length=context,
            rope_base=float(self.get(a + "rope.freq_base", 10000.0)),
            rms_eps=float(self.get(a + "attention.layer_norm_rms_epsilon", 1e-6)),
            rope_interleaved=INTERLEAVED_ROPE[arch],
            rope_scale_linear=linear,
            tied_embeddings="output.weight" not in self.tensors,
            qkv_bias="blk.0.attn_q.bias" in self.tensors,
            rope_dim=rope_dim if rope_dim != head_dim else 0,
            qk_norm=arch in QK_NORM_ARCHITECTURES,
            **extra,
        )

    def _gemma3_params(self, a: str, hidden: int, n_heads: int, head_dim: int) -> dict:
        """Gemma 3's extra hyper-parameters, read as llama.cpp reads them: the window from
        ``attention.sliding_window`` (required), the layer pattern and local rope base fixed,
        the attention scale 1/sqrt(head_dim) (1/sqrt(hidden/heads) for the 62-layer 27B),
        the norms' weights stored with Gemma's +1 already added by llama.cpp's converter."""
        n_layers = self._bounded(a + "block_count", MAX_LAYERS)
        window = self._bounded(a + "attention.sliding_window", MAX_CONTEXT_TOKENS)
        local = tuple(i for i in range(n_layers) if i % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1)
        scale_dim = hidden // n_heads if n_layers == 62 else head_dim
        return {
            "sliding_window": window,
            "local_layers": local,
            "rope_base_local": GEMMA3_LOCAL_ROPE_BASE,
            "attn_scale": float(1.0 / np.sqrt(scale_dim)),
            "embed_scale": float(np.sqrt(np.float32(hidden))),
            "final_logit_softcap": float(self.get(a + "final_logit_softcapping", 0.0) or 0.0),
        }

    def _gpt_oss_params(self, a: str, n_layers: int) -> dict:
        """gpt-oss's mixture of experts, attention sinks, alternating window and YaRN, read as
        llama.cpp reads them (``expert_count``, ``expert_used_count``,
        ``expert_feed_forward_length``, ``attention.sliding_window``, ``rope.scaling.*``).

        One departure from llama.cpp: its YaRN rounds the correction range outward (ggml's
        ``ggml_rope_yarn_corr_dims``: 8 and 18 for gpt-oss), but gpt-oss's config.json sets
        ``"truncate": false`` and its trainers' code (OpenAI's reference, transformers; vLLM
        #28244 and SGLang #14270 fixed the same) keeps 8.09 and 17.40. No GGUF key carries
        it, so it is the model's definition that Hearth follows."""
        n_experts = self._bounded(a + "expert_count", MAX_EXPERTS)
        used = self._bounded(a + "expert_used_count", n_experts)
        window = self._bounded(a + "attention.sliding_window", MAX_CONTEXT_TOKENS)
        out = {
            "n_experts": n_experts,
            "n_experts_used": used,
            "expert_ffn": self._bounded(a + "expert_feed_forward_length", MAX_FFN),
            "attn_sinks": "blk.0.attn_sinks.weight" in self.tensors,
            "sliding_window": window,
            "local_layers": tuple(
                i for i in range(n_layers)
                if i % GPT_OSS_SWA_PATTERN < GPT_OSS_SWA_PATTERN - 1
            ),
        }
        if str(self.get(a + "rope.scaling.type", "none")) == "yarn":
            factor = float(self.get(a + "rope.scaling.factor", 0.0) or 0.0)
            original = int(self.get(a + "rope.scaling.original_context_length", 0) or 0)
            if factor > 1.0 and original > 0:
                out.update(
                    yarn_factor=factor,
                    yarn_original_context=original,
                    yarn_truncate=False,
                    yarn_beta_fast=float(
                        self.get(a + "rope.scaling.yarn_beta_fast", YARN_BETA_FAST)
                        or YARN_BETA_FAST
                    ),
                    yarn_beta_slow=float(
                        self.get(a + "rope.scaling.yarn_beta_slow", YARN_BETA_SLOW)
                        or YARN_BETA_SLOW
                    ),
                )
        return out

    def _granite_params(self, a: str) -> dict:
        """Granite's multipliers, read as llama.cpp reads them: ``embedding_scale`` (token
        embeddings), ``residual_scale`` (each block output), ``attention.scale`` (instead of
        1/sqrt(head_dim)) and ``logit_scale`` (logits are divided by it); a missing or zero
        key means no multiplier."""
        out = {}
        for key, field, default in (
            ("embedding_scale", "embed_scale", 1.0),
            ("residual_scale", "residual_scale", 1.0),
            ("attention.scale", "attn_scale", 0.0),
            ("logit_scale", "logit_scale", 1.0),
        ):
            value = self.get(a + key)
            if value is None or float(value) == 0.0:
                out[field] = default
            elif not math.isfinite(float(value)) or float(value) < 0:
                raise self._broken(a + key, float(value), "a positive number")
            else:
                out[field] = float(value)
        return out

    def _window_params(self, a: str, arch: str, n_layers: int) -> dict:
        """A sliding window on every layer, where the architecture has one and the file sets
        it below the context length (a window as long as the context changes nothing)."""
        if arch not in WINDOWED_ARCHITECTURES:
            return {}
        window = int(self.get(a + "attention.sliding_window", 0) or 0)
        if window <= 0 or window >= int(self.get(a + "context_length", 4096)):
            return {}
        return {"sliding_window": window, "local_layers": tuple(range(n_layers))}

    def _longrope_params(self, a: str, half: int) -> dict:
        """LongRoPE as llama.cpp's converter writes it for Phi-3: ``rope_factors_short`` /
        ``rope_factors_long`` tensors, ``rope.scaling.original_context_length`` and the
        attention factor ``rope.scaling.attn_factor`` (cos and sin are scaled by it)."""
        factors = self.longrope_factors()
        if factors is None:
            return {}
        if any(len(f) != half for f in factors):
            raise ConversionError(
                f"{self.path.name}: its LongRoPE factors have {len(factors[0])} and "
                f"{len(factors[1])} entries, but its heads rotate {half} frequencies."
            )
        original = int(self.get(a + "rope.scaling.original_context_length", 0) or 0)
        if original <= 0:
            raise ConversionError(
                f"{self.path.name} has LongRoPE factors but no "
                f"'{a}rope.scaling.original_context_length'."
            )
        factor = float(self.get(a + "rope.scaling.attn_factor", 1.0) or 1.0)
        return {"rope_original_context": original, "rope_attn_factor": factor}

    def _linear_rope_scale(self, a: str) -> float:
        """The linear rope factor (positions are divided by it), read as llama.cpp does: a
        missing ``rope.scaling.type`` means linear, the factor may sit under the old key
        ``rope.scale_linear``, and a missing or zero factor means no scaling."""
        kind = str(self.get(a + "rope.scaling.type", "linear"))
        if kind == "yarn" and a == "gpt-oss.":  # read by ``_gpt_oss_params``
            return 1.0
        if kind == "none" or (kind in ("su", "longrope") and self.longrope_factors()):
            return 1.0
        if kind != "linear":  # YaRN, LongRoPE…: converting as if unscaled would be wrong
            raise ConversionError(
                f"{self.path.name} uses '{kind}' rope scaling, which Hearth cannot convert "
                "yet (supported: none, linear, Llama 3 frequency factors).",
                hint="Use an ONNX build of this model from the catalog instead.",
            )
        factor = self.get(a + "rope.scaling.factor")
        if factor is None:
            factor = self.get(a + "rope.scale_linear")
        return float(factor) if factor else 1.0

    # -- tensors ---------------------------------------------------------------------------
    def tensor(self, name: str) -> ReaderTensor:
        t = self.tensors.get(name)
        if t is None:
            raise ConversionError(f"{self.path.name} lacks the tensor {name}.")
        return t

    def rope_freq_factors(self) -> np.ndarray | None:
        """Llama 3.x rope scaling: per-frequency divisors stored as ``rope_freqs.weight``."""
        t = self.tensors.get("rope_freqs.weight")
        return None if t is None else np.asarray(t.data, dtype=np.float32).reshape(-1)

    def longrope_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """LongRoPE's per-frequency divisors (short, long), or None when the file has none."""
        short = self.tensors.get("rope_factors_short.weight")
        long = self.tensors.get("rope_factors_long.weight")
        if short is None or long is None:
            return None
        return tuple(np.asarray(t.data, dtype=np.float32).reshape(-1) for t in (short, long))

    def parameter_count(self) -> int:
        return int(sum(t.n_elements for t in self.tensors.values()))

    def tensor_types(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for t in self.tensors.values():
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return counts


class GGUFFile(_GGUFModel):
    """A parsed GGUF file: metadata, tensors by name, and the model's hyper-parameters."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        _check_header(self.path)
        try:
            self._reader = GGUFReader(self.path)
        except (ValueError, IndexError, OSError, KeyError, TypeError) as exc:
            raise ConversionError(
                f"{self.path.name} is truncated or corrupt and cannot be read ({exc}).",
                hint="Download the file again.",
            ) from exc
        self._index(self._reader.tensors, self.path.stat().st_size)
        self.params = self._read_params()

    def get(self, key: str, default: Any = None) -> Any:
        field = self._reader.fields.get(key)
        if field is None or not field.types:
            return default
        return field.contents()


class GGUFHeader(_GGUFModel):
    """The cheap look at a GGUF (``header.read_header``): metadata, tensor index and the
    model's hyper-parameters, checked as the converter checks them, without reading the
    tensors or the tokenizer's long arrays (``get`` answers those with a ``SkippedArray``
    that knows only its length). Raises ConversionError with a sentence naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        _check_header(self.path)
        try:
            header = read_header(self.path)
        except HeaderError as exc:
            raise ConversionError(
                f"{self.path.name} is truncated or corrupt and cannot be read ({exc}).",
                hint="Download the file again.",
            ) from exc
        except OSError as exc:
            raise ConversionError(f"{self.path} cannot be read: {exc.strerror}.") from exc
        self.fields = header.fields
        self.file_bytes = self.path.stat().st_size
        self._index(header.tensors, self.file_bytes)
        self.params = self._read_params()

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


def matrix_shape(t: ReaderTensor) -> tuple[int, int]:
    """(N, K) of a GGUF 2-D weight: GGUF lists ne0 (= K, the contiguous axis) first."""
    k, n = (int(x) for x in t.shape[:2]) if len(t.shape) > 1 else (int(t.shape[0]), 1)
    return n, k


def is_known_type(qtype: GGMLQuantizationType) -> bool:
    return qtype in gguf_quants.GGML_QUANT_SIZES


def _check_header(path: Path) -> None:
    try:
        with path.open("rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError as exc:
        raise ConversionError(f"{path} does not exist.") from exc
    except OSError as exc:
        raise ConversionError(f"{path} cannot be read: {exc.strerror}.") from exc
    if magic != GGUF_MAGIC:
        raise ConversionError(
            f"{path.name} is not a GGUF file (it does not start with 'GGUF').",
            hint="Choose a .gguf model file.",
        )
