"""Choose the execution provider for a model, create its ONNX Runtime session, and say why.

Preference when the caller does not ask for one: DirectML on Windows, CUDA where the
onnxruntime wheel has it and a CUDA device answers, CoreML on macOS only when every operator of
the graph is one CoreML can run, else CPU.

An explicit request that cannot be honoured (provider not in this wheel, wrong OS, no device,
or a provider that fails while the session is created) **falls back to CPU and says so** in the
:class:`~app.engine.types.ProviderReport` rather than raising: users pick providers from a menu,
and a working CPU session with a readable reason beats an error dialog. ORT's own silent
fallbacks are caught too: the session is created with ORT's fallback disabled, and the provider
ORT really put first (``session.get_providers()[0]``) is what the report names, with per-node
placement counts where the installed ORT records them.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable
from pathlib import Path

import onnxruntime as ort

from app import machine
from app.engine.loaded_context import add_loaded_context
from app.engine.onnx_file import inspect_onnx
from app.engine.prompt_session import prompt_session_options
from app.engine.types import ModelSpec, ProviderReport
from app.errors import ModelLoadError, ProviderError
from app.machine import ORT_NAMES, PROVIDERS, SHORT_NAMES, physical_cores, unavailable_reason
from app.network.telemetry import prepare_onnxruntime

AUTO_ORDER = ("dml", "cuda", "coreml", "cpu")

# Standard ONNX operators CoreML's op builders cover (onnxruntime
# core/providers/coreml/builders/op_builder_factory.cc). Anything else, and every operator from
# another domain (com.microsoft MatMulNBits, GroupQueryAttention, RotaryEmbedding,
# SkipSimplifiedLayerNormalization …), runs on CPU with a copy at each border.
COREML_OPS = frozenset(
    {
        "Add",
        "ArgMax",
        "AveragePool",
        "BatchNormalization",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "Conv",
        "ConvTranspose",
        "DepthToSpace",
        "Div",
        "Elu",
        "Erf",
        "Exp",
        "Flatten",
        "Gather",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "GridSample",
        "GroupNormalization",
        "HardSigmoid",
        "Identity",
        "InstanceNormalization",
        "LRN",
        "LayerNormalization",
        "LeakyRelu",
        "MatMul",
        "Max",
        "MaxPool",
        "Mul",
        "Not",
        "PRelu",
        "Pad",
        "Pow",
        "Reciprocal",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "Round",
        "Shape",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Softplus",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Tanh",
        "Tile",
        "Transpose",
        "Unsqueeze",
    }
)

_RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"
_OPT_LEVELS = {
    "ORT_DISABLE_ALL": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "ORT_ENABLE_BASIC": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "ORT_ENABLE_EXTENDED": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "ORT_ENABLE_ALL": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
_ORT_ERROR_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_ORT_LOAD_PREFIX = re.compile(r"^Load model from .*? failed:\s*")
# "/onnxruntime_src/…/model.cc:256 onnxruntime::Model::Model(…) " before the actual message
_ORT_SOURCE_LOCATION = re.compile(r"\S+\.(?:cc|cpp|h):\d+\s+[\w:~<>]+\([^)]*\)(?:\s*const)?\s*")


def coreml_uncovered_ops(op_types: Iterable[tuple[str, str]]) -> list[str]:
    """The graph's operators CoreML cannot run, contrib operators first, sorted."""
    uncovered = {
        (domain not in ("", "ai.onnx"), op)
        for domain, op in op_types
        if domain not in ("", "ai.onnx") or op not in COREML_OPS
    }
    return [op for _, op in sorted(uncovered, key=lambda item: (not item[0], item[1]))]


# ---------------------------------------------------------------- choice


def choose_provider(
    requested: str | None,
    *,
    system: str,
    available: Iterable[str],
    cuda_devices: int,
    op_types: Iterable[tuple[str, str]] | None,
) -> tuple[str, dict[str, str]]:
    """The provider to try first and, for every other provider, why it is not the one.

    ``op_types`` (the graph's (domain, op) pairs) only matter for the automatic CoreML choice;
    an explicit ``requested="coreml"`` is honoured even when ORT will place some nodes on CPU.
    """
    available = set(available)
    hard = {
        p: unavailable_reason(p, system=system, available=available, cuda_devices=cuda_devices)
        for p in PROVIDERS
    }
    if requested is not None:
        if requested not in PROVIDERS:
            raise ProviderError(
                f"Unknown execution provider '{requested}'.",
                hint=f"Choose one of: {', '.join(PROVIDERS)}.",
            )
        chosen = requested if hard[requested] is None else "cpu"
    else:
        soft = dict(hard)
        if soft["coreml"] is None:
            uncovered = coreml_uncovered_ops(op_types or ())
            if uncovered:
                soft["coreml"] = (
                    f"the model uses {', '.join(uncovered[:4])}, which CoreML "
                    "cannot run (those nodes would run on the CPU)"
                )
        chosen = next(p for p in AUTO_ORDER if soft[p] is None)
        hard = soft
    reasons = {}
    for provider in PROVIDERS:
        if provider == chosen:
            continue
        if hard[provider] is not None:
            reasons[provider] = hard[provider]
        elif provider == "cpu":
            reasons[provider] = f"{chosen.upper()} is available and faster"
        elif requested is not None:
            reasons[provider] = f"{requested.upper()} was asked for"
        else:
            reasons[provider] = f"{chosen.upper()} comes first on this machine"
    return chosen, reasons


# ---------------------------------------------------------------- session


def session_options(
    spec: ModelSpec, provider: str, threads: int | None = None
) -> ort.SessionOptions:
    """ORT session options for ``spec`` on ``provider``.

    Graph optimisation ALL (unless genai_config names a level); ``intra_op_num_threads`` from
    ``threads``, else genai_config's ``intra_op_num_threads``, else :func:`physical_cores`.
    genai_config's other options and config entries are applied; ``custom_ops_library`` is
    ignored on purpose (a downloaded folder must not load native code). DirectML gets memory
    patterns off and sequential execution, as it requires.
    """
    config = spec.session_options
    options = ort.SessionOptions()
    options.graph_optimization_level = _OPT_LEVELS.get(
        str(config.get("graph_optimization_level", "")), ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    )
    options.intra_op_num_threads = (
        _positive(threads) or _positive(config.get("intra_op_num_threads")) or physical_cores()
    )
    if _positive(config.get("inter_op_num_threads")):
        options.inter_op_num_threads = int(config["inter_op_num_threads"])
    if isinstance(config.get("enable_cpu_mem_arena"), bool):
        options.enable_cpu_mem_arena = config["enable_cpu_mem_arena"]
    if isinstance(config.get("enable_mem_pattern"), bool):
        options.enable_mem_pattern = config["enable_mem_pattern"]
    options.log_severity_level = int(config.get("log_severity_level", 3))
    for key, value in (config.get("config_entries") or {}).items():
        options.add_session_config_entry(str(key), str(value))
    if provider == "dml":
        options.enable_mem_pattern = False
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    if hasattr(ort.InferenceSession, "get_provider_graph_assignment_info"):
        options.add_session_config_entry(_RECORD_ASSIGNMENT, "1")
    return options


def provider_options(spec: ModelSpec, provider: str) -> dict[str, str]:
    """Options for ``provider`` from genai_config (merged in order), plus Hearth's defaults."""
    merged: dict[str, str] = {"ModelFormat": "MLProgram"} if provider == "coreml" else {}
    for entry in spec.provider_options:
        for name, values in entry.items():
            if name == provider and isinstance(values, dict):
                merged.update({str(k): str(v) for k, v in values.items()})
    return merged


def create_session(
    spec: ModelSpec, *, provider: str | None = None, threads: int | None = None
) -> tuple[ort.InferenceSession, ProviderReport]:
    """Create the ORT session for ``spec`` and report which provider really runs it.

    Args:
        spec: the model (see :func:`app.engine.package.read_model_folder`).
        provider: ``cpu``, ``dml``, ``cuda`` or ``coreml``; None chooses per machine.
        threads: intra-op threads; None uses genai_config's value or the physical cores.

    Returns:
        The session and a :class:`ProviderReport`. ``report.requested`` is the explicit request,
        or, when an automatic choice failed and fell back, the provider that was tried.

    Raises:
        ModelLoadError: ONNX Runtime cannot load the model (corrupt file, unsupported operator,
            too new for this ORT), with ORT's reason in one sentence.
        ProviderError: ``provider`` is not a name Hearth knows.
    """
    prepare_onnxruntime()  # telemetry off before the first session
    available = ort.get_available_providers()
    system = platform.system()
    op_types = None
    if provider is None and system == "Darwin" and ORT_NAMES["coreml"] in available:
        op_types = inspect_onnx(spec.model_path).op_types
    cuda = machine.cuda_device_count() if ORT_NAMES["cuda"] in available else 0
    attempt, reasons = choose_provider(
        provider, system=system, available=available, cuda_devices=cuda, op_types=op_types
    )
    options = session_options(spec, attempt, threads)
    session = None
    if attempt != "cpu":
        try:
            session = _new_session(
                spec,
                options,
                [(ORT_NAMES[attempt], provider_options(spec, attempt)), ORT_NAMES["cpu"]],
            )
        except Exception as exc:  # ORT raises its own Exception subclasses, not RuntimeError
            reasons[attempt] = f"failed to start ({_ort_reason(exc)})"
            options = session_options(spec, "cpu", threads)
    if session is None:
        try:
            session = _new_session(spec, options, [ORT_NAMES["cpu"]])
        except Exception as exc:
            raise _load_error(spec.model_path, exc) from exc

    ort_providers = tuple(session.get_providers())
    chosen = SHORT_NAMES.get(ort_providers[0], ort_providers[0])
    if chosen != attempt and attempt not in reasons:
        reasons[attempt] = f"ONNX Runtime did not enable it and used {chosen.upper()}"
    reasons.pop(chosen, None)
    wanted = provider or attempt
    nodes_on, nodes_total = _node_counts(session, ORT_NAMES.get(chosen, chosen))
    report = ProviderReport(
        chosen=chosen,
        ort_providers=ort_providers,
        requested=provider if provider is not None or chosen == attempt else attempt,
        fell_back=chosen != wanted,
        reasons=reasons,
        nodes_on_chosen=nodes_on,
        nodes_total=nodes_total,
    )
    return session, report


def create_prompt_session(spec: ModelSpec, *, threads: int | None = None) -> ort.InferenceSession:
    """The CPU session that reads long prompts on fp32 kernels (app/engine/prompt_session.py).

    Raises ModelLoadError as :func:`create_session` does."""
    options = prompt_session_options(session_options(spec, "cpu", threads))
    try:
        return _new_session(spec, options, [ORT_NAMES["cpu"]])
    except Exception as exc:
        raise _load_error(spec.model_path, exc) from exc


def _new_session(
    spec: ModelSpec, options: ort.SessionOptions, providers: list
) -> ort.InferenceSession:
    """A session over ``spec``'s graph that reads the loaded context
    (app/engine/loaded_context.py: LongRoPE graphs choose their factors by it)."""
    context = add_loaded_context(options, spec.context_length)
    session = ort.InferenceSession(
        str(spec.model_path), sess_options=options, providers=providers, enable_fallback=0
    )
    session.hearth_loaded_context = context  # ORT reads it in place: it lives as long
    return session


def _node_counts(session: ort.InferenceSession, ort_name: str) -> tuple[int | None, int | None]:
    """(nodes on ``ort_name``, all nodes) from ORT's graph assignment record, if it keeps one."""
    try:
        subgraphs = session.get_provider_graph_assignment_info()
    except Exception:  # not in this ORT, or nothing recorded
        return None, None
    if not subgraphs:
        return None, None
    on = total = 0
    for subgraph in subgraphs:
        count = len(subgraph.get_nodes())
        total += count
        if subgraph.ep_name == ort_name:
            on += count
    return on, total


def _ort_reason(exc: BaseException) -> str:
    text = _ORT_ERROR_PREFIX.sub("", " ".join(str(exc).split()))
    text = _ORT_SOURCE_LOCATION.sub("", _ORT_LOAD_PREFIX.sub("", text))
    return (text[:400] + "…") if len(text) > 400 else text.rstrip(".")


def _load_error(path: Path, exc: BaseException) -> ModelLoadError:
    reason = _ort_reason(exc)
    kind = type(exc).__name__
    if (
        kind == "NotImplemented"
        or "Could not find an implementation" in reason
        or "is not a registered function/op" in reason
    ):
        hint = (
            "The model needs an operator this onnxruntime version does not have; "
            "update Hearth, or use a different export of the model."
        )
    elif "Unsupported model IR version" in reason or "opset" in reason.lower():
        hint = "The model was made for a newer ONNX Runtime; update Hearth."
    else:
        hint = "The file may be corrupt: download or convert the model again."
    return ModelLoadError(f"ONNX Runtime cannot load {path}: {reason}.", hint=hint)


def _positive(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if value > 0 else None
