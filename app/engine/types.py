"""Plain data types shared by the engine and its callers (CLI, Qt workers, benchmarks)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

from app.options import SPECULATION_MODES

FinishReason = Literal["eos", "stop", "length", "max_tokens", "cancelled"]
ContextPolicy = Literal["stop", "truncate_oldest", "sliding_window"]
Speculation = Literal["auto", "off", "lookup", "draft"]
Layout = Literal["genai", "optimum", "remote"]  # "remote": app.remote.engine
DecodePath = Literal["rebind", "shared", "recurrent", "none"]
ThinkingMode = Literal["default", "on", "off"]


@dataclass(frozen=True)
class ParsedToolCall:
    """A tool call as the model (or a remote server) wrote it: ``arguments`` is the JSON text
    itself, unchecked; ``id`` is the server's, or "" where the model's format has none (the
    turn layer, app/chat/turn.py, names those)."""

    id: str
    name: str
    arguments: str

    def template_dict(self) -> dict[str, Any]:
        """The call as chat templates read it (transformers' shape): ``arguments`` as an
        object where it parses as one, else the text."""
        try:
            arguments: Any = json.loads(self.arguments)
        except ValueError:
            arguments = self.arguments
        if not isinstance(arguments, dict):
            arguments = self.arguments
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": arguments}}


@dataclass(frozen=True)
class Message:
    """One chat message as the engine renders it: role is "system", "user", "assistant" or
    "tool". ``reasoning`` is an assistant reply's thinking, kept apart from its answer;
    templates that use it read it as ``reasoning_content`` (Qwen3 drops earlier turns'
    reasoning itself). ``tool_calls``: the calls an assistant message made; ``tool_call_id``:
    the call a "tool" message answers. Typed parts (images, sources, …) live one layer up
    (app/chat/parts.py), which renders them down to this."""

    role: str
    content: str
    reasoning: str = ""
    tool_calls: tuple[ParsedToolCall, ...] = ()
    tool_call_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The message as chat templates read it: ``reasoning_content``, ``tool_calls`` and
        ``tool_call_id`` only when set."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning:
            out["reasoning_content"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [c.template_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True)
class Grammar:
    """What a constrained reply must match (app/engine/grammar.py): ``kind`` is
    "json_schema" (``source``: the schema as JSON text), "json_object" (any object),
    "regex", "choice" (``source``: a JSON list of strings) or "lark". ``trigger``: free text
    until the reply contains it, then the grammar for what follows (tool_choice "auto").
    ``leading_newlines``: up to this many newlines may come first (a thinking model writes
    ``</think>`` and a blank line before its answer)."""

    kind: Literal["json_schema", "json_object", "regex", "choice", "lark"]
    source: str = ""
    trigger: str | None = None
    leading_newlines: int = 0


@dataclass(frozen=True)
class SamplingSettings:
    """How the next token is picked. ``temperature == 0`` means greedy."""

    temperature: float = 0.7
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    min_p: float = 0.0  # 0.0 = off
    repetition_penalty: float = 1.0  # 1.0 = off
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class GenerationSettings:
    """Everything that shapes one reply."""

    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    max_new_tokens: int = 512
    stop_strings: tuple[str, ...] = ()
    context_policy: ContextPolicy = "stop"
    # the per-chat "Think" switch: "default" leaves it to the template; "on" / "off" set
    # enable_thinking or a /think / /no_think flag where the template has one (reasoning.py)
    thinking: ThinkingMode = "default"
    #: Speculative decoding (app/engine/speculative.py): "auto" uses the draft model when one
    #: is attached, else prompt lookup, and only while it pays; "off", "lookup" or "draft"
    #: force a choice.
    speculation: Speculation = "auto"
    #: Constrained decoding: the reply matches this grammar (None: free text, unchanged)
    grammar: Grammar | None = None
    #: Log-probabilities per token: None = none; 0 = the chosen token's; N = also the N best
    logprobs: int | None = None
    #: With tools: "auto" (free text, and a call once the model starts one, constrained),
    #: "required" (a call, constrained from the first token), "none" (no call is read) or
    #: "function:NAME" (a call of that tool)
    tool_choice: str = "auto"
    parallel_tool_calls: bool = True

    @classmethod
    def from_model(
        cls, defaults: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
    ) -> GenerationSettings:
        """The one way a model's defaults become settings: Hearth's defaults, then the
        model's, then ``overrides``.

        ``defaults`` is ``ModelSpec.generation_defaults`` (generation_config.json or
        genai_config.json's ``search``): ``temperature``, ``top_k``, ``top_p``, ``min_p``,
        ``repetition_penalty`` and ``max_new_tokens`` are taken where valid (anything else,
        and any invalid value, is ignored); ``do_sample: false`` means greedy (temperature
        0). ``overrides`` (the user's choices) use ``SamplingSettings``' field names plus
        ``max_new_tokens``, ``stop_strings``, ``context_policy``, ``thinking``,
        ``speculation``, ``grammar``, ``logprobs``, ``tool_choice`` and
        ``parallel_tool_calls``; None values are skipped.
        """
        sampling: dict[str, Any] = {}
        top: dict[str, Any] = {}
        for key, check in _MODEL_KEYS.items():
            value = defaults.get(key)
            if _is_number(value) and check(value):
                (top if key == "max_new_tokens" else sampling)[key] = _COERCE[key](value)
        if defaults.get("do_sample") is False:
            sampling["temperature"] = 0.0
        for key, value in (overrides or {}).items():
            if value is None:
                continue
            if key in _SAMPLING_FIELDS:
                sampling[key] = _COERCE.get(key, float)(value) if key != "seed" else int(value)
            elif key == "max_new_tokens":
                top[key] = int(value)
            elif key == "stop_strings":
                top[key] = tuple(value)
            elif key == "context_policy":
                top[key] = value
            elif key == "thinking":
                if value not in ("default", "on", "off"):
                    raise ValueError(f"thinking must be 'default', 'on' or 'off', not {value!r}")
                top[key] = value
            elif key == "grammar":
                if not isinstance(value, Grammar):
                    raise ValueError("grammar must be a Grammar")
                top[key] = value
            elif key == "logprobs":
                top[key] = int(value)
            elif key == "tool_choice":
                top[key] = str(value)
            elif key == "parallel_tool_calls":
                top[key] = bool(value)
            elif key == "speculation":
                if value not in SPECULATION_MODES:
                    raise ValueError(f"unknown speculation mode {value!r}")
                top[key] = value
            else:
                raise ValueError(f"unknown generation setting {key!r}")
        return replace(cls(), sampling=replace(SamplingSettings(), **sampling), **top)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_MODEL_KEYS = {
    "temperature": lambda v: v >= 0,
    "top_k": lambda v: v >= 0 and float(v).is_integer(),
    "top_p": lambda v: 0 < v <= 1,
    "min_p": lambda v: 0 <= v <= 1,
    "repetition_penalty": lambda v: v > 0,
    "max_new_tokens": lambda v: v >= 1 and float(v).is_integer(),
}
_COERCE = {"top_k": int, "max_new_tokens": int, "temperature": float, "top_p": float,
           "min_p": float, "repetition_penalty": float, "presence_penalty": float,
           "frequency_penalty": float}
_SAMPLING_FIELDS = frozenset(f.name for f in fields(SamplingSettings))


@dataclass
class GenerationStats:
    """Measured figures of one reply. Times in milliseconds, rates in tokens per second."""

    prompt_tokens: int = 0
    reused_tokens: int = 0
    prefilled_tokens: int = 0
    generated_tokens: int = 0
    ttft_ms: float = 0.0
    decode_tok_s: float = 0.0
    total_ms: float = 0.0
    provider: str = "cpu"
    context_used: int = 0
    context_max: int = 0
    reuse_refused: str | None = None  # why the prefix cache could not be reused, if it could not
    dropped_messages: int = 0  # oldest messages left out to fit the context
    context_note: str | None = None  # what the context policy did, in words
    reasoning_tokens: int = 0  # generated while the model was thinking (markers included)
    reasoning_ms: float = 0.0  # from the first thinking token to the end of the thinking
    speculation: str = "off"  # the proposer that ran: "off", "lookup" or "draft"
    proposed: int = 0  # tokens proposed by the speculative proposer
    accepted: int = 0  # of those, tokens the target model accepted
    target_steps: int = 0  # target model runs after the prefill (decode steps + verify steps)
    speculation_note: str | None = None  # why speculation was off for this reply, if it was

    def as_dict(self) -> dict:
        return asdict(self)


class TokenLogprob(NamedTuple):
    """One candidate token of a step: its id, its text alone (special tokens as written; an
    incomplete UTF-8 character as U+FFFD) and its log-probability."""

    token_id: int
    logprob: float
    text: str


@dataclass(slots=True)
class GenerationChunk:
    """One streamed step. ``text`` is the new text (may be empty while a UTF-8 character or
    a possible stop string is held back). ``reasoning`` is new text of the model's thinking
    (``<think>…</think>``, Harmony's analysis channel, a remote server's
    ``reasoning_content``), never part of ``text``. The last chunk of a reply has
    ``finish_reason`` and ``stats`` set. Read-only by convention: one is made per token, and a
    frozen dataclass costs three times as much to build."""

    text: str
    token_id: int | None = None
    finish_reason: FinishReason | None = None
    stats: GenerationStats | None = None
    reasoning: str = ""
    #: tool calls completed by this chunk (app/engine/tool_calls.py takes their markup out of
    #: ``text``; a remote server sends them parsed); only when the reply was offered tools
    tool_calls: tuple[ParsedToolCall, ...] = ()
    #: the token's log-probability, its text, and the best alternatives (best first), when
    #: ``GenerationSettings.logprobs`` asked for them
    logprob: float | None = None
    logprob_token: str = ""
    top_logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class Capabilities:
    """What a backend can take besides plain text (app/chat/backend.py's ``Backend``).

    ``tools``: it accepts ``tools=`` and returns calls in ``GenerationChunk.tool_calls``;
    ``vision``: images; ``documents``: its template takes ``documents=`` itself (otherwise the
    turn layer writes sources into the message); ``embeddings``: it can embed text;
    ``exact_tokens``: ``encode_chat`` / ``count_tokens`` are the model's own count, not an
    estimate; ``tool_format``: the family parser that reads its calls ("hermes"; "remote":
    the server parses them)."""

    tools: bool = False
    vision: bool = False
    documents: bool = False
    embeddings: bool = False
    exact_tokens: bool = True
    tool_format: str | None = None


@dataclass(frozen=True)
class BackendInfo:
    """What a backend says about itself (``describe()``): the model details' facts, so
    nobody has to probe an engine with ``getattr``."""

    name: str
    provider: str
    provider_summary: str
    context_length: int
    thinking_control: str | None = None  # "enable_thinking" / "flags"; None: no switch
    draft: str | None = None  # the draft model's name, None without one
    prompt_note: str | None = None  # how it reads long prompts, when worth telling
    steps_note: str | None = None  # what exact replies cost its decode steps, where they do
    notes: tuple[str, ...] = ()
    #: why each other provider was not used (``ProviderReport.reasons``)
    provider_reasons: dict[str, str] = field(default_factory=dict)
    #: the model's own sampling defaults (``ModelSpec.generation_defaults``; a remote
    #: server applies its own: empty)
    generation_defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KVLayer:
    """One layer's KV tensors as named in the graph, with geometry read from the graph."""

    past_key: str
    past_value: str
    present_key: str
    present_value: str
    kv_heads: int
    head_dim: int
    dtype: str  # "float32" | "float16" | "bfloat16"


@dataclass(frozen=True)
class StateTensor:
    """A fixed-size recurrent state the graph carries from step to step (a hybrid model's
    ``past_conv.N`` / ``past_recurrent.N`` and its ``present_*`` twin): it summarises every
    position fed so far, so unlike KV it cannot be cut back to an earlier length."""

    past: str
    present: str
    shape: tuple[int, ...]  # batch included (1)
    dtype: str  # "float32" | "float16" | "bfloat16"
    kind: str = "recurrent"  # "conv" | "recurrent"


@dataclass(frozen=True)
class GraphInfo:
    """What the decoder graph takes and returns, read from the ONNX session."""

    input_ids: str
    attention_mask: str | None
    position_ids: str | None
    logits: str
    kv_layers: tuple[KVLayer, ...]
    uses_group_query_attention: bool
    decode_path: DecodePath
    logits_dtype: str = "float32"
    vocab_size: int | None = None
    logits_last_only: bool = False  # the graph returns logits for the last position only
    #: Recurrent states beside the KV layers (hybrid models; decode path "recurrent").
    state_tensors: tuple[StateTensor, ...] = ()
    #: Split layout: the decoder inputs an embedding graph computes from ``input_ids``
    #: (``inputs_embeds``, …); ``input_ids`` then names the embedding graph's input.
    embedded_inputs: tuple[str, ...] = ()
    #: Weight matmuls on quantized kernels (MatMulNBits, MatMulInteger, …): their
    #: rounding depends on how many rows a step runs and grows over the layers.
    quantized_matmuls: bool = False
    #: Optimum's merged decoders (``decoder_model_merged*.onnx``): the bool input that says
    #: whether the past is used (False on the first pass, with no past; True afterwards).
    use_cache_branch: str | None = None
    #: Grouped attention over the shared buffer's capacity (a Hearth conversion with
    #: ``attention="grouped"``: TensorScatter writes the step's rows in place, FusedMatMuls
    #: read every position of the capacity). Decode path "shared"; its spare positions must
    #: hold finite values (zero-filled) and its buffers grow in finer buckets.
    grouped_attention: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """A model folder normalised from either layout (onnxruntime-genai or Optimum)."""

    root: Path
    layout: Layout
    name: str
    model_path: Path  # the .onnx file chosen
    variant: str  # e.g. "model", "model_q4", "genai"
    tokenizer_path: Path  # tokenizer.json
    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    context_length: int
    add_bos_token: bool = False
    generation_defaults: dict = field(default_factory=dict)
    session_options: dict = field(default_factory=dict)  # from genai_config (threads etc.)
    provider_options: tuple[dict, ...] = ()  # from genai_config, in order
    sliding_window: int | None = None
    extra_special_tokens: dict = field(default_factory=dict)
    io_names: dict = field(default_factory=dict)  # role -> graph name (genai_config renames)
    kv_geometry: tuple[int, int] | None = None  # (kv_heads, head_dim) from the config
    context_note: str | None = None  # why context_length is less than the metadata says
    #: Split layout (Optimum / transformers.js multimodal exports): the token embedding graph
    #: whose output the decoder takes as ``inputs_embeds`` (None: one graph).
    embed_path: Path | None = None
    #: What the model's details should say about it (e.g. encoders Hearth does not run yet).
    notes: tuple[str, ...] = ()
    #: ``model_path``'s MatMulNBits nodes by (bits, block_size, accuracy_level) and the bytes
    #: of it and its external data, as the folder check read them (``OnnxSummary``): what
    #: app/engine/prompt_session.py decides from, without reading the file again
    matmul_nbits: dict = field(default_factory=dict)
    #: the same by (bits, block_size, accuracy_level, K, N) (app/engine/kernel_timing.py)
    matmul_nbits_shapes: dict = field(default_factory=dict)
    model_bytes: int = 0
    #: genai_config's ``search.past_present_share_buffer`` (None: not said). False keeps a
    #: GroupQueryAttention graph's past and present apart (the rebind path).
    share_buffer: bool | None = None


@dataclass(frozen=True)
class KernelTiming:
    """How long a model's 4-bit matmuls take to read one prompt chunk of ``rows`` tokens on
    each of ORT's CPU kernel families on this machine (app/engine/kernel_timing.py)."""

    int8_ms: float  # the decode session's kernels (int8 activations)
    fp32_ms: float  # the prompt session's (``mlas.qnbit.force_fp32``)
    rows: int
    measured_now: bool = False  # False: read from the per-machine record
    #: the widest gap between one family's timed rounds, as a share of its quickest: a
    #: neighbour's load shows here (kernel_timing.MAX_SPREAD decides what is steady)
    spread: float = 0.0
    steady: bool = True  # False: too noisy to choose by, and not kept


@dataclass(frozen=True)
class ProviderReport:
    """Which execution provider runs the model and why the others do not."""

    chosen: str  # "cpu" | "dml" | "cuda" | "coreml"
    ort_providers: tuple[str, ...]  # session.get_providers()
    requested: str | None
    fell_back: bool
    reasons: dict[str, str]  # provider -> why it was not chosen
    nodes_on_chosen: int | None = None
    nodes_total: int | None = None

    def summary(self) -> str:
        text = self.chosen.upper()
        if self.fell_back:
            text += f" (fell back from {self.requested})"
        return text
