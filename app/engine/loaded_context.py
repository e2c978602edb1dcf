"""The loaded context, handed to the graphs that decide by it.

A graph whose computation depends on how long a context it was loaded with — LongRoPE's
short or long factors (Hearth's Phi-3 / Phi-3.5 GGUF conversions,
app/models/gguf/graph_builder.py) — reads it from an int64 scalar initializer named
:data:`LOADED_CONTEXT`, which the converter writes with the file's own context length and
also lists as a graph input (an overridable initializer: ONNX Runtime's constant folding would
otherwise fold the file's value in before a session's own replaces it). Every
session Hearth opens (app/engine/providers.py) replaces that initializer with the context the
engine really loads (``ModelSpec.context_length``, after ``bounded_context`` may have cut it to
what memory holds): the value is fixed for the session's life,
so the choice it drives is made once per loaded model and never by the run at hand. A graph
without the initializer is unaffected (ONNX Runtime ignores an added initializer that no
graph names); a runner that adds nothing (onnxruntime-genai, the test runners) gets the
file's own context length.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

LOADED_CONTEXT = "hearth.loaded_context"


def add_loaded_context(options: ort.SessionOptions, context_length: int) -> ort.OrtValue:
    """Give the sessions opened with ``options`` ``context_length`` as :data:`LOADED_CONTEXT`.

    Returns the value, which must outlive the session (ONNX Runtime reads its buffer in place):
    the caller keeps it with the session."""
    value = ort.OrtValue.ortvalue_from_numpy(np.array(context_length, dtype=np.int64))
    options.add_initializer(LOADED_CONTEXT, value)
    return value
