"""The rebind path's direct KV binding decodes exactly as ORT's public IOBinding calls do."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from app.engine import decoder as decoder_module
from app.engine.engine import Engine
from app.engine.kv_binder import kv_binder, output_reader, public_kv_binder


def _step_logits(model_dir, prompt: list[int], steps: int) -> list[np.ndarray]:
    """Greedy: prompt, then ``steps`` one-token steps, with a rewind halfway."""
    engine = Engine.load(model_dir, provider="cpu", threads=1)
    assert engine.decode_path == "rebind"
    decoder, cache = engine.decoder, engine.new_cache()
    seen = [decoder.feed(cache, prompt).copy()]
    for step in range(steps):
        if step == steps // 2:
            cache.trim_to(len(prompt) + 2)  # rewind: truncated tensors get rebound
            seen.append(decoder.feed(cache, [7]).copy())
        seen.append(decoder.step(cache, int(np.argmax(seen[-1]))).copy())
    return seen


def test_direct_and_public_kv_binding_give_identical_logits(plain_model_dir, monkeypatch):
    prompt = [5, 9, 14, 3, 22, 8]
    direct = _step_logits(plain_model_dir, prompt, 24)
    monkeypatch.setattr(decoder_module, "kv_binder", public_kv_binder)
    public = _step_logits(plain_model_dir, prompt, 24)

    assert len(direct) == len(public) == 26
    for ours, theirs in zip(direct, public, strict=True):
        assert np.array_equal(ours, theirs)


def test_the_installed_onnxruntime_takes_the_direct_calls(plain_model_dir, monkeypatch):
    # A rename of the private attributes in a new onnxruntime would fall back silently
    # (correct, slower): this says so instead. The public calls are made unusable, so only
    # the direct ones can bind.
    session = Engine.load(plain_model_dir, provider="cpu", threads=1).decoder.session
    io = session.io_binding()

    def refuse(*args, **kwargs):
        raise AssertionError("the public IOBinding call was used")

    monkeypatch.setattr(ort.IOBinding, "bind_ortvalue_input", refuse)
    monkeypatch.setattr(ort.IOBinding, "bind_output", refuse)
    bind_input, bind_output = kv_binder(io, "cpu")
    value = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, 2, 0, 16), np.float32))
    bind_input("past_key_values.0.key", value)
    bind_output("present.0.key")


def test_outputs_read_after_a_run_survive_the_runs_that_follow(plain_model_dir):
    # The rebind path keeps a step's presents as the next step's pasts, and a parked chat
    # keeps them for longer: they must not alias the binding's output slots.
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    decoder, cache = engine.decoder, engine.new_cache()
    decoder.feed(cache, [5, 9, 14, 3])
    read = output_reader(decoder._main.io)
    held = read()
    copies = [value.numpy().copy() for value in held]

    decoder.step(cache, 7)
    decoder.step(cache, 8)

    assert len(read()) == len(held)
    for value, copy in zip(held, copies, strict=True):
        assert np.array_equal(value.numpy(), copy)
