"""Read what a decoder graph takes and returns, and pick its decode path.

The KV cache geometry comes from the graph itself, as onnxruntime-genai's reference design
does: ``present.*`` outputs are paired with ``past_key_values.*`` inputs by name, each layer's
KV heads and head size are read from the tensor shapes (head size is the last axis), and the KV
dtype from the past input. Layers may differ in geometry.

Hybrid recurrent models (LFM2, Qwen3.5 / Qwen3-Next text) also carry fixed-size states for their
convolution and linear-attention layers; transformers.js / optimum exports name them
``past_conv.N`` → ``present_conv.N`` and ``past_recurrent.N`` → ``present_recurrent.N`` (the
``past_key_values.N.conv_state`` → ``present.N.conv_state`` spelling is read too, and
onnxruntime-genai's builder writes ``past.N.conv`` / ``past.N.recurrent`` → ``present.N.*``). Their
decode path is "recurrent": the state cannot be cut back (see ``kv_cache.RecurrentCache``).

Split exports (Gemma 3 4B+, Gemma 4) feed the decoder ``inputs_embeds`` computed by a separate
``embed_tokens`` graph; ``embed_outputs`` names what that graph returns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from app.engine.types import DecodePath, GraphInfo, KVLayer, StateTensor
from app.errors import ModelLoadError

_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16",
}

# (past pattern, present template): the first group is the layer index, the second the kind.
_KV_NAME_PATTERNS = (
    (re.compile(r"^past_key_values\.(\d+)\.(key|value)$"), "present.{i}.{kind}"),
    (re.compile(r"^past_key_values_(\d+)_(key|value)$"), "present_{i}_{kind}"),
    (re.compile(r"^past_(key|value)_(\d+)$"), "present_{kind}_{i}"),
    (re.compile(r"^past\.(\d+)\.(key|value)$"), "present.{i}.{kind}"),
)

# (past pattern, present template, kind) for recurrent states: the group is the layer index.
_STATE_NAME_PATTERNS = (
    (re.compile(r"^past_conv\.(\d+)$"), "present_conv.{i}", "conv"),
    (re.compile(r"^past_recurrent\.(\d+)$"), "present_recurrent.{i}", "recurrent"),
    (re.compile(r"^past_key_values\.(\d+)\.conv_state$"), "present.{i}.conv_state", "conv"),
    (re.compile(r"^past_key_values\.(\d+)\.recurrent_state$"), "present.{i}.recurrent_state",
     "recurrent"),
    # onnxruntime-genai's model builder (LFM2, Qwen3.5)
    (re.compile(r"^past\.(\d+)\.conv$"), "present.{i}.conv", "conv"),
    (re.compile(r"^past\.(\d+)\.recurrent$"), "present.{i}.recurrent", "recurrent"),
)

_KNOWN_INPUTS = {"input_ids", "attention_mask", "position_ids"}
# Inputs some exports carry that we can feed with a constant.
_OPTIONAL_INPUTS = {"num_logits_to_keep", "logits_to_keep", "use_cache_branch"}
#: Operators that multiply by quantized weights (op types, any domain). QMoE: mixture-of-experts
#: layers (Hearth's gpt-oss conversion), int8 activations on CPU for 8-bit experts.
QUANTIZED_MATMULS = frozenset({"MatMulNBits", "MatMulInteger", "DynamicQuantizeMatMul",
                               "MatMulIntegerToFloat", "QLinearMatMul", "QMoE"})


class IOSpec:
    """The minimum we need of an ORT NodeArg: name, shape and type string."""

    def __init__(self, name: str, shape: Sequence, type_: str) -> None:
        self.name = name
        self.shape = list(shape)
        self.type = type_


def _split_kv_name(name: str) -> tuple[int, str, str] | None:
    """``past_key_values.3.key`` -> (3, "key", "present.3.key")."""
    for pattern, template in _KV_NAME_PATTERNS:
        match = pattern.match(name)
        if not match:
            continue
        first, second = match.groups()
        if first.isdigit():
            index, kind = int(first), second
        else:
            index, kind = int(second), first
        return index, kind, template.format(i=index, kind=kind)
    return None


def _split_state_name(name: str) -> tuple[int, str, str] | None:
    """``past_conv.3`` -> (3, "conv", "present_conv.3")."""
    for pattern, template, kind in _STATE_NAME_PATTERNS:
        match = pattern.match(name)
        if match:
            index = int(match.group(1))
            return index, kind, template.format(i=index)
    return None


def _dim(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def inspect_graph(
    inputs: Iterable[IOSpec],
    outputs: Iterable[IOSpec],
    *,
    op_types: set[str],
    model_path: Path,
    name_overrides: dict[str, str] | None = None,
    kv_geometry_hint: tuple[int, int] | None = None,
    embed_outputs: Sequence[str] = (),
    share_buffer: bool | None = None,
) -> GraphInfo:
    """Describe a decoder graph from its I/O and the set of op types it uses.

    ``share_buffer``: genai_config's ``past_present_share_buffer``. A GroupQueryAttention
    graph takes the shared-buffer path unless it is False: the rebind path then keeps past
    and present apart, as onnxruntime-genai does (GQA reads a past of any length).

    ``embed_outputs``: the outputs of the split layout's embedding graph (``inputs_embeds``
    …); the decoder inputs among them are fed from it instead of ``input_ids``.

    ``name_overrides`` maps our role names (``input_ids``, ``attention_mask``,
    ``position_ids``, ``logits``) to the graph's names (genai_config.json may rename them).
    ``kv_geometry_hint`` is (kv_heads, head_dim) from the config, used only when the graph
    leaves those dimensions symbolic.
    """
    names = {
        "input_ids": "input_ids",
        "attention_mask": "attention_mask",
        "position_ids": "position_ids",
        "logits": "logits",
    }
    names.update(name_overrides or {})
    by_input = {i.name: i for i in inputs}
    by_output = {o.name: o for o in outputs}
    where = f"{model_path}"

    embedded = tuple(name for name in by_input if name in set(embed_outputs))
    if embed_outputs and not embedded:
        raise ModelLoadError(
            f"{where} takes none of its embedding graph's outputs "
            f"({', '.join(embed_outputs)}), so the two graphs do not belong together."
        )
    if not embedded and "inputs_embeds" in by_input and names["input_ids"] not in by_input:
        raise ModelLoadError(
            f"{where} takes 'inputs_embeds' instead of token ids, and the folder has no "
            "embedding graph (onnx/embed_tokens*.onnx) to compute them.",
        )
    if not embedded and names["input_ids"] not in by_input:
        raise ModelLoadError(
            f"{where} has no '{names['input_ids']}' input, so it is not a text decoder Hearth "
            f"can run (its inputs are: {', '.join(sorted(by_input))})."
        )
    if names["logits"] not in by_output:
        raise ModelLoadError(
            f"{where} has no '{names['logits']}' output "
            f"(its outputs are: {', '.join(sorted(by_output))})."
        )

    layers: dict[int, dict[str, tuple[IOSpec, IOSpec]]] = {}
    states: dict[int, list[StateTensor]] = {}
    unknown: list[str] = []
    for spec in by_input.values():
        if spec.name in (names["input_ids"], names["attention_mask"], names["position_ids"]):
            continue
        if spec.name in embedded:
            continue
        state = _split_state_name(spec.name)
        if state is not None:
            index, kind, present_name = state
            states.setdefault(index, []).append(
                _state_tensor(spec, by_output.get(present_name), present_name, kind, where)
            )
            continue
        parsed = _split_kv_name(spec.name)
        if parsed is None:
            if spec.name not in _OPTIONAL_INPUTS:
                unknown.append(spec.name)
            continue
        index, kind, present_name = parsed
        present = by_output.get(present_name)
        if present is None:
            raise ModelLoadError(
                f"{where}: KV input '{spec.name}' has no matching output '{present_name}'. "
                "The graph's cache inputs and outputs do not pair up; re-export the model "
                "with its KV cache outputs (optimum: --task text-generation-with-past)."
            )
        layers.setdefault(index, {})[kind] = (spec, present)
    if unknown:
        raise ModelLoadError(
            f"{where} needs inputs Hearth does not know how to feed: {', '.join(sorted(unknown))}."
        )

    kv_layers: list[KVLayer] = []
    for index in sorted(layers):
        pair = layers[index]
        if set(pair) != {"key", "value"}:
            missing = ({"key", "value"} - set(pair)).pop()
            raise ModelLoadError(f"{where}: layer {index} has no past {missing} input.")
        (past_k, present_k), (past_v, present_v) = pair["key"], pair["value"]
        dtype = _ORT_TYPES.get(past_k.type)
        if dtype is None:
            raise ModelLoadError(f"{where}: KV cache type {past_k.type} is not supported.")
        heads = _dim(present_k.shape[1]) or _dim(past_k.shape[1])
        head_dim = _dim(present_k.shape[-1]) or _dim(past_k.shape[-1])
        if (heads is None or head_dim is None) and kv_geometry_hint:
            heads = heads or kv_geometry_hint[0]
            head_dim = head_dim or kv_geometry_hint[1]
        if heads is None or head_dim is None or len(past_k.shape) != 4:
            raise ModelLoadError(
                f"{where}: cannot read the KV geometry of layer {index} "
                f"(shape {past_k.shape}); expected [batch, kv_heads, sequence, head_dim]."
            )
        kv_layers.append(
            KVLayer(
                past_key=past_k.name,
                past_value=past_v.name,
                present_key=present_k.name,
                present_value=present_v.name,
                kv_heads=heads,
                head_dim=head_dim,
                dtype=dtype,
            )
        )
    numbered = sorted({*layers, *states})
    if numbered and numbered != list(range(len(numbered))):
        raise ModelLoadError(f"{where}: cache layers are not numbered 0..{len(numbered) - 1}.")
    state_tensors = tuple(t for index in sorted(states) for t in states[index])

    uses_gqa = "GroupQueryAttention" in op_types
    # the grouped form writes the step's rows into the bound buffer (TensorScatter, in place)
    grouped = not uses_gqa and "TensorScatter" in op_types and bool(kv_layers)
    path: DecodePath
    if grouped and state_tensors:
        raise ModelLoadError(f"{where}: grouped attention with recurrent states is not supported.")
    if grouped:
        path = "shared"  # its past and present are one buffer of the capacity, always
    elif state_tensors:
        path = "recurrent"  # KV layers grow as on the rebind path; the states cannot be cut
    elif not kv_layers:
        path = "none"
    else:
        path = "shared" if uses_gqa and share_buffer is not False else "rebind"
    logits = by_output[names["logits"]]
    logits_dtype = _ORT_TYPES.get(logits.type, "float32")
    return GraphInfo(
        input_ids=names["input_ids"],
        attention_mask=names["attention_mask"] if names["attention_mask"] in by_input else None,
        position_ids=names["position_ids"] if names["position_ids"] in by_input else None,
        logits=logits.name,
        kv_layers=tuple(kv_layers),
        uses_group_query_attention=uses_gqa,
        decode_path=path,
        logits_dtype=logits_dtype,
        vocab_size=_dim(logits.shape[-1]) if logits.shape else None,
        logits_last_only=len(logits.shape) == 3 and logits.shape[1] == 1,
        state_tensors=state_tensors,
        embedded_inputs=embedded,
        quantized_matmuls=bool(QUANTIZED_MATMULS & op_types),
        use_cache_branch="use_cache_branch" if "use_cache_branch" in by_input else None,
        grouped_attention=grouped,
    )


def _state_tensor(past: IOSpec, present: IOSpec | None, present_name: str, kind: str,
                  where: str) -> StateTensor:
    """A recurrent state from its past input and present output (fixed shape, batch 1)."""
    if present is None:
        raise ModelLoadError(
            f"{where}: state input '{past.name}' has no matching output '{present_name}', so "
            "the state cannot be carried from one step to the next; re-export the model with "
            "its cache outputs."
        )
    dtype = _ORT_TYPES.get(past.type)
    if dtype is None:
        raise ModelLoadError(f"{where}: state type {past.type} of '{past.name}' is not supported.")
    dims = [_dim(d) for d in past.shape[1:]]
    if not past.shape or any(d is None for d in dims):
        raise ModelLoadError(
            f"{where}: the state '{past.name}' has no fixed size (shape {past.shape}); Hearth "
            "needs every dimension but the batch to be a number."
        )
    return StateTensor(past=past.name, present=present.name, shape=(1, *dims), dtype=dtype,
                       kind=kind)


def graph_op_types(model_path: Path) -> set[str]:
    """The op types used in the graph, read without loading weights."""
    from app.engine.onnx_file import inspect_onnx

    return {op for _domain, op in inspect_onnx(model_path).op_types}


def describe_session(
    session,
    spec_model_path: Path,
    *,
    name_overrides: dict[str, str] | None = None,
    kv_geometry_hint: tuple[int, int] | None = None,
    embed_session=None,
    share_buffer: bool | None = None,
) -> GraphInfo:
    """GraphInfo for a live ``onnxruntime.InferenceSession`` (and the split layout's
    embedding session, whose outputs feed the decoder)."""
    inputs = [IOSpec(i.name, i.shape, i.type) for i in session.get_inputs()]
    outputs = [IOSpec(o.name, o.shape, o.type) for o in session.get_outputs()]
    return inspect_graph(
        inputs,
        outputs,
        op_types=graph_op_types(spec_model_path),
        model_path=spec_model_path,
        name_overrides=name_overrides,
        kv_geometry_hint=kv_geometry_hint,
        embed_outputs=() if embed_session is None
        else tuple(o.name for o in embed_session.get_outputs()),
        share_buffer=share_buffer,
    )
