"""Switch off the telemetry of the libraries Hearth runs on. One place, called early.

ONNX Runtime's official wheels carry telemetry: ETW on Windows (on by default) and, since
1.29, a 1DS/OneCollector client in the Linux library too (its ``libonnxruntime.so`` names
``events.data.microsoft.com`` and reads ``ORT_DISABLE_TELEMETRY``). That code talks to the
network natively, under the Python socket guard, so it must be switched off at the source:
the environment before the library starts, and ``disable_telemetry_events()`` before the
first session.
"""

from __future__ import annotations

import os
import threading

ORT_OPT_OUT_ENV = "ORT_DISABLE_TELEMETRY"
HF_OPT_OUT_ENV = "HF_HUB_DISABLE_TELEMETRY"

_lock = threading.Lock()
_ort_done = False


def opt_out_environment() -> None:
    """Set the libraries' telemetry opt-out variables (children inherit them). Cheap; does
    not import onnxruntime. Call before onnxruntime and huggingface_hub are imported."""
    os.environ[ORT_OPT_OUT_ENV] = "1"
    os.environ[HF_OPT_OUT_ENV] = "1"


def prepare_onnxruntime() -> bool:
    """Opt out of ONNX Runtime's telemetry before the first session is created.

    Safe to call before every session (the work is done once). Returns whether
    ``disable_telemetry_events`` was available and called.
    """
    global _ort_done
    with _lock:
        if _ort_done:
            return True
        opt_out_environment()
        import onnxruntime as ort

        disable = getattr(ort, "disable_telemetry_events", None)
        if disable is None:
            return False
        disable()
        _ort_done = True
        return True
