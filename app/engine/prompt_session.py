"""A second ORT session that reads long prompts on fp32 kernels; whether this model gets one.

ORT runs a 4-bit ``MatMulNBits`` node with ``accuracy_level`` 4 on its int8 kernels: each
row of activations is quantized to int8 per block, then integer dot products. For one row
(a decode step) nothing is faster: it reads a quarter of fp32's bytes. For hundreds of rows
(a prompt chunk) it is compute that counts, and on an x86 CPU without VNNI the int8 kernel
is 1.0–1.45× slower than fp32 SGEMM (``bench/bench_prefill.py``), so a 4-bit model read
prompts slower than its own fp32 conversion. ORT ≥ 1.31 has a session option,
``mlas.qnbit.force_fp32``, that runs such nodes as block dequantization + SGEMM instead: as
fast as fp32 MatMul at 512 rows, 2–4× slower than int8 at one row. It holds for a whole
session, so Hearth opens the same model file twice — the decode session as it is, and this
prompt session with the option — and the decoder gives the prompt session every chunk of at
least :data:`MIN_ROWS` tokens (the crossover measured on a 2-core AVX2 CPU is ~64 rows).

Both sessions run the same graph over the same KV buffers; only rounding differs (the fp32
kernels do not round activations to int8). That rounding makes a reply depend on the cache:
a fresh prompt is read here in long chunks, a cached one's short tail on the decode session
(and an earlier reply's positions were decode steps), and the 135M starter's top two logits
can lie 0.06 apart. So the session is only for the inexact mode (``exact=False``); by default
every position runs on the decode session's kernels.

The cost is memory: the prompt session packs its own copy of the weights, about 1.6× the
model's files at its peak (+183 MB peak RSS on the 112 MB starter, bench/bench_prefill.py).
It is opened only on the CPU provider, for a
graph with such nodes, on x86, when that much memory is free with :data:`RESERVE_BYTES` to
spare, and where the fp32 kernels measure faster on this machine for this model's matmuls
(app/engine/kernel_timing.py: not on AVX-512 VNNI, where integer dot products win, nor for
a 1.5B model's large matrices on AVX2). :func:`plan_prompt_session` decides;
``Engine.load`` asks it.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass

import onnxruntime as ort

from app.cpu import cpu_kind
from app.engine.types import KernelTiming, ModelSpec
from app.units import format_bytes

#: the session option that moves eligible MatMulNBits nodes onto fp32 kernels
FORCE_FP32 = "mlas.qnbit.force_fp32"
#: the first ORT release that knows the option (older ones ignore unknown config entries)
FIRST_ORT = (1, 31)
#: the nodes the option moves: (bits, block_size, accuracy_level)
ELIGIBLE_NBITS = (4, 32, 4)
#: prompt chunks of at least this many tokens go to the prompt session
MIN_ROWS = 64
#: the prompt session's peak memory against the model files' size (measured on the starter:
#: peak RSS 592 vs 409 MiB with and without it, files 112 MiB)
COST_PER_FILE_BYTE = 1.6
#: memory left free after the prompt session is opened
RESERVE_BYTES = 1 << 30
_X86 = frozenset({"x86_64", "amd64", "x64", "i386", "i686"})
#: the fp32 kernels must be this much faster to be worth their memory (and the measurement's
#: noise on a busy machine is a few per cent)
MARGIN = 0.05


@dataclass(frozen=True)
class PromptSessionPlan:
    """Whether a model gets a prompt session, and the sentence the model's details show."""

    use: bool
    note: str
    cost_bytes: int = 0

    @property
    def worth_telling(self) -> bool:
        """Whether the model's details should show ``note``: the session is open, or this
        model would get one with more memory free (not: it could never get one here)."""
        return self.use or self.cost_bytes > 0


def plan_prompt_session(
    spec: ModelSpec,
    provider: str,
    *,
    available_bytes: int | None,
    timing: Callable[[], KernelTiming | None] | None,
    machine: str | None = None,
    ort_version: str | None = None,
    exact: bool = True,
) -> PromptSessionPlan:
    """Decide whether the model ``spec`` describes (already loaded on ``provider``) gets a
    prompt session, from what the folder check read of its graph (``spec.matmul_nbits``,
    ``spec.model_bytes``) and, last, what its kernels measure on this machine.

    ``available_bytes``: memory free now (None: unknown, then no session is opened: the
    cost cannot be checked). ``timing``: asked only when everything else allows a session,
    for how fast each kernel family reads this model's prompt chunks here
    (app/engine/kernel_timing.py ``prompt_kernel_timing``, measured once per machine and
    model, then kept); the fp32 kernels must be :data:`MARGIN` faster, on a steady
    measurement. None, a timing that returns None, or an unsteady one opens no session.
    ``machine`` / ``ort_version`` default to this machine's. ``exact``: replies must not
    depend on the cache (``Decoder(exact=True)``, the default), which rules the prompt
    session out: its kernels round otherwise than the decode session's, and a cached
    prompt's tail is read on the decode session."""
    if provider != "cpu":
        return PromptSessionPlan(False, f"Prompts run on {provider.upper()} like replies.")
    version = _version(ort_version or ort.__version__)
    if version < FIRST_ORT:
        return PromptSessionPlan(False, f"ONNX Runtime {ort_version or ort.__version__} has no "
                                        "fp32 kernels for 4-bit prompts (1.31 or newer has).")
    if (machine or platform.machine()).lower() not in _X86:
        return PromptSessionPlan(False, "Prompts run on the same kernels as replies "
                                        "(fp32 prompt kernels are for x86 CPUs).")
    if not spec.matmul_nbits.get(ELIGIBLE_NBITS):
        return PromptSessionPlan(False, "Prompts run on the same kernels as replies (the "
                                        "model has no 4-bit int8-activation matmuls).")
    if exact:
        return PromptSessionPlan(
            False,
            "Prompts run on the same kernels as replies, so a reply never depends on what "
            "the cache held (the inexact mode reads them on fp32 kernels where those measure "
            "faster here).",
        )
    cost = int(spec.model_bytes * COST_PER_FILE_BYTE)
    if available_bytes is None or available_bytes < cost + RESERVE_BYTES:
        free = ("free memory is unknown" if available_bytes is None
                else f"{format_bytes(available_bytes)} is free")
        return PromptSessionPlan(
            False,
            f"Prompts run on the int8 kernels: fp32 kernels for them would take "
            f"{format_bytes(cost)} more memory and {free} (Hearth keeps "
            f"{format_bytes(RESERVE_BYTES)} spare).",
            cost,
        )
    measured = timing() if timing is not None else None
    if measured is None:
        return PromptSessionPlan(False, "Prompts run on the int8 kernels (how fast the fp32 "
                                        "ones are here could not be measured).")
    figures = (f"{measured.fp32_ms:.1f} ms on fp32 kernels and {measured.int8_ms:.1f} ms on "
               f"int8 ones for a {measured.rows}-token chunk of this model's matmuls on this "
               f"CPU ({cpu_kind()})")
    if not measured.steady:
        return PromptSessionPlan(False, f"Prompts run on the int8 kernels: the CPU was too busy "
                                        f"to compare them with fp32 ones (timed rounds "
                                        f"{measured.spread:.0%} apart; {figures}); measured "
                                        f"again at the next load.")
    if measured.fp32_ms > measured.int8_ms * (1.0 - MARGIN):
        return PromptSessionPlan(False, f"Prompts run on the int8 kernels: {figures}.")
    return PromptSessionPlan(
        True,
        f"Prompts of {MIN_ROWS}+ tokens run on fp32 kernels (a second session, "
        f"{format_bytes(cost)}): {figures}.",
        cost,
    )


def prompt_session_options(options: ort.SessionOptions) -> ort.SessionOptions:
    """``options`` (the decode session's, freshly made) turned into the prompt session's:
    the same, on fp32 kernels. (Its worker threads keep spinning between ops: without it a
    1,024-token prompt took ~10% longer, and they stop spinning soon after a chunk.)"""
    options.add_session_config_entry(FORCE_FP32, "1")
    return options


def _version(text: str) -> tuple[int, int]:
    parts = text.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0
