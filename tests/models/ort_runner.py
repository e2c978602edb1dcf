"""A plain ONNX Runtime loop over a converted decoder graph (test helper, not the engine)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort


def open_session(folder: Path, threads: int = 2, *,
                 fp32_kernels: bool = False) -> ort.InferenceSession:
    """``fp32_kernels``: 4-bit matmuls on ORT's fp32 kernels instead of int8 activations
    (the prompt session's option, app/engine/prompt_session.py)."""
    from app.engine.prompt_session import FORCE_FP32

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if fp32_kernels:
        opts.add_session_config_entry(FORCE_FP32, "1")
    return ort.InferenceSession(
        str(Path(folder) / "model.onnx"), opts, providers=["CPUExecutionProvider"]
    )


def kv_geometry(session: ort.InferenceSession) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) read from the past inputs."""
    pasts = [i for i in session.get_inputs() if i.name.startswith("past_key_values.")]
    shape = pasts[0].shape
    return len(pasts) // 2, int(shape[1]), int(shape[3])


def kv_dtype(session: ort.InferenceSession) -> type:
    """The numpy type of the graph's KV buffers (float16 in the grouped form)."""
    past = next(i for i in session.get_inputs() if i.name.startswith("past_key_values."))
    return np.float16 if past.type == "tensor(float16)" else np.float32


class GrowingRunner:
    """Feeds present.* back as past.* (no shared buffer): the simplest correct KV loop. The
    past goes in zero-padded to the step's total length: a grouped-attention graph (the
    default conversion) writes the step's rows into its past buffer and needs that room;
    GroupQueryAttention reads such a buffer as the shared-buffer path binds it."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.s = session
        self.layers, self.kv_heads, self.head_dim = kv_geometry(session)
        self.reset()

    def reset(self) -> None:
        empty = np.zeros((1, self.kv_heads, 0, self.head_dim), kv_dtype(self.s))
        self.past = {
            f"past_key_values.{i}.{k}": empty for i in range(self.layers) for k in ("key", "value")
        }
        self.length = 0

    def step(self, ids: list[int]) -> np.ndarray:
        """Run ``ids`` after what is cached; returns the last position's logits [vocab]."""
        total = self.length + len(ids)
        pad = ((0, 0), (0, 0), (0, len(ids)), (0, 0))
        feeds = {
            "input_ids": np.array([ids], np.int64),
            "attention_mask": np.ones((1, total), np.int64),
            **{name: np.pad(value[:, :, : self.length], pad) for name, value in self.past.items()},
        }
        if any(i.name == "num_logits_to_keep" for i in self.s.get_inputs()):
            feeds["num_logits_to_keep"] = np.ones(1, np.int64)
        names = [o.name for o in self.s.get_outputs()]
        outs = dict(zip(names, self.s.run(names, feeds), strict=True))
        for i in range(self.layers):
            for k in ("key", "value"):
                self.past[f"past_key_values.{i}.{k}"] = outs[f"present.{i}.{k}"]
        self.length = total
        return outs["logits"][0, -1]


class SharedBufferRunner:
    """Binds one max-length buffer per KV tensor as both past input and present output."""

    def __init__(self, session: ort.InferenceSession, max_length: int) -> None:
        self.s = session
        self.layers, self.kv_heads, self.head_dim = kv_geometry(session)
        self.max_length = max_length
        shape = (1, self.kv_heads, max_length, self.head_dim)
        self.buffers = {
            (i, k): ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, kv_dtype(session)))
            for i in range(self.layers)
            for k in ("key", "value")
        }
        self.length = 0
        self.io = session.io_binding()
        self.io.bind_output("logits", "cpu")  # first, so get_outputs()[0] is the logits
        self._keep = np.ones(1, np.int64)
        if any(i.name == "num_logits_to_keep" for i in session.get_inputs()):
            self.io.bind_cpu_input("num_logits_to_keep", self._keep)
        for (i, k), buf in self.buffers.items():
            self.io.bind_ortvalue_input(f"past_key_values.{i}.{k}", buf)
            self.io.bind_ortvalue_output(f"present.{i}.{k}", buf)

    def step(self, ids: list[int]) -> np.ndarray:
        total = self.length + len(ids)
        if total > self.max_length:
            raise ValueError("past the buffer")
        self.io.bind_cpu_input("input_ids", np.array([ids], np.int64))
        self.io.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        self.s.run_with_iobinding(self.io)
        self.length = total
        return self.io.get_outputs()[0].numpy()[0, -1].copy()

    def rewind(self, length: int) -> None:
        self.length = length


def greedy(runner, prompt: list[int], max_new: int, eos: int | None = None) -> list[int]:
    logits = runner.step(prompt)
    out: list[int] = []
    for _ in range(max_new):
        tok = int(np.argmax(logits))
        out.append(tok)
        if tok == eos:
            break
        logits = runner.step([tok])
    return out
