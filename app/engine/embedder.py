"""The split layout's token embedding graph, run for the decoder on the same provider.

Optimum / transformers.js exports of multimodal models (Gemma 3 4B+, Gemma 4) cut the text
model in two: ``onnx/embed_tokens*.onnx`` turns ``input_ids`` into ``inputs_embeds`` (and, for
some families, more per-token inputs), and ``onnx/decoder_model_merged*.onnx`` takes those
instead of ids, so that image and audio features can be spliced in. ``Embedder.embed`` runs
the first graph through its own IOBinding with its outputs left on the model's device; the
decoder binds those OrtValues as its inputs as they are (no host copy where the provider keeps
them on a device).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort


class Embedder:
    """One embedding session and its IOBinding. Not thread-safe: the decoder's thread."""

    def __init__(self, session: ort.InferenceSession, device: str = "cpu") -> None:
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise ValueError("an embedding graph takes one input (the token ids)")
        self.session = session
        self.input_name = inputs[0].name
        #: The graph's outputs, each fed to the decoder input of the same name.
        self.output_names = tuple(o.name for o in session.get_outputs())
        self._device = device
        self._io = session.io_binding()

    def embed(self, ids: Sequence[int]) -> list[tuple[str, ort.OrtValue]]:
        """(decoder input name, value) for each output, computed for ``ids`` ([1, len])."""
        io = self._io
        io.bind_cpu_input(self.input_name, np.asarray([ids], dtype=np.int64))
        for name in self.output_names:
            io.bind_output(name, self._device)
        self.session.run_with_iobinding(io)
        return list(zip(self.output_names, io.get_outputs(), strict=True))
