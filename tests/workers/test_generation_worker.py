"""The generation worker on its own thread, driven by the scripted fake engine."""

from __future__ import annotations

import inspect
import threading
import time

import pytest
from PySide6.QtCore import QThread

from app.chat.backend import Backend
from app.engine.engine import Engine
from app.engine.types import BackendInfo, Capabilities, GenerationSettings, Message
from app.errors import ContextOverflowError
from app.loading import default_loader
from app.remote.engine import RemoteEngine
from app.workers.generation_worker import (
    GenerationRequest,
    GenerationResult,
    GenerationWorker,
    _model_info,
)
from bench.scripted_engine import ScriptedEngine
from tests.bounds import AT_ONCE_S
from tests.workers.conftest import EngineThread
from tests.workers.fake_engine import FakeEngine, FakeLoader

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]


def request(conv: str = "c1", text: str = "hello there", **settings) -> GenerationRequest:
    return GenerationRequest(
        conversation_id=conv,
        messages=(Message("user", text),),
        settings=GenerationSettings(**settings),
    )


def load(qtbot, host, path="models/tiny"):
    with qtbot.waitSignal(host.loaded, timeout=5000) as blocker:
        host.load(path)
    return blocker.args[0]


def test_strict_signal_order(qtbot, host, recorder, loader):
    info = load(qtbot, host)
    assert info.name == "tiny" and info.provider == "cpu"
    assert info.provider_reasons == {"dml": "not available on this machine"}
    with qtbot.waitSignal(host.finished, timeout=5000):
        host.generate(request(text="a b"))
    assert recorder.kinds() == ["loaded", "chunk", "chunk", "chunk", "chunk", "finished"]
    texts = [e[2] for e in recorder.events if e[0] == "chunk"]
    assert texts == ["You", " said:", " a", " b"]
    result: GenerationResult = recorder.events[-1][2]
    assert result.text == "You said: a b"
    assert result.finish_reason == "eos"
    assert result.stats.generated_tokens == 4
    assert result.model == "tiny"
    # the engine was only ever touched from the worker thread
    assert len(loader.threads | loader.last.threads) == 1
    assert threading.get_ident() not in loader.last.threads


def test_thinking_streams_on_its_own_signal_before_the_answer(qtbot, host, recorder, loader):
    loader.engine_kwargs = {"think": ["Let me", " think."], "thinking_control": "flags"}
    info = load(qtbot, host)
    assert info.thinking_control == "flags"
    with qtbot.waitSignal(host.finished, timeout=5000):
        host.generate(request(text="a"))
    assert recorder.kinds() == ["loaded", "reasoning", "reasoning", "chunk", "chunk", "chunk",
                                "finished"]
    assert [e[2] for e in recorder.events if e[0] == "reasoning"] == ["Let me", " think."]
    result: GenerationResult = recorder.events[-1][2]
    assert (result.text, result.reasoning) == ("You said: a", "Let me think.")
    assert result.stats.reasoning_tokens == 2 and result.stats.reasoning_ms > 0


def test_a_model_without_a_switch_says_so(qtbot, host):
    assert load(qtbot, host).thinking_control is None


def test_stop_during_long_reply_is_not_a_queued_slot(qtbot, host, recorder, loader):
    loader.engine_kwargs = {"script": [f" t{i}" for i in range(5000)], "delay": 0.002}
    load(qtbot, host)
    host.generate(request(max_new_tokens=5000))
    qtbot.waitUntil(lambda: recorder.kinds().count("chunk") >= 3, timeout=5000)
    started = time.perf_counter()
    host.stop()  # sets the Event directly; the worker thread is busy in its loop
    with qtbot.waitSignal(host.finished, timeout=5000) as blocker:
        pass
    assert time.perf_counter() - started < 1.0
    result = blocker.args[1]
    assert result.finish_reason == "cancelled"
    assert 3 <= result.stats.generated_tokens < 5000
    chunks = "".join(e[2] for e in recorder.events if e[0] == "chunk")
    assert chunks == result.text
    assert recorder.kinds()[-1] == "finished"


def test_engine_error_mid_reply_fails_after_partial_chunks(qtbot, host, recorder, loader):
    loader.engine_kwargs = {"script": ["one", " two", " three", " four"], "error_after": 2}
    load(qtbot, host)
    with qtbot.waitSignal(host.failed, timeout=5000) as blocker:
        host.generate(request())
    qtbot.waitUntil(lambda: "crashed" in recorder.kinds(), timeout=5000)
    assert recorder.kinds() == ["loaded", "chunk", "chunk", "failed", "crashed"]
    assert blocker.args[0] == "c1"
    assert "internal error" in blocker.args[1]
    assert "scripted engine failure" in recorder.events[-1][1]  # traceback for the crash dialog


def test_hearth_error_before_first_chunk_is_a_readable_failure(qtbot, host, recorder, loader):
    loader.engine_kwargs = {
        "error_before": ContextOverflowError("The conversation is too long for this model.")
    }
    load(qtbot, host)
    with qtbot.waitSignal(host.failed, timeout=5000) as blocker:
        host.generate(request())
    assert blocker.args == ["c1", "The conversation is too long for this model."]
    assert recorder.kinds() == ["loaded", "failed"]


def test_failed_load_keeps_previous_model(qtbot, host, recorder, loader):
    load(qtbot, host, "models/good")
    with qtbot.waitSignal(host.load_failed, timeout=5000) as blocker:
        host.load("models/broken")
    assert "has no model.onnx" in blocker.args[0]
    with qtbot.waitSignal(host.finished, timeout=5000) as done:
        host.generate(request())
    assert done.args[1].model == "good"
    assert not loader.engines[0].closed


def test_new_model_replaces_and_closes_old(qtbot, host, loader):
    load(qtbot, host, "models/a")
    load(qtbot, host, "models/b")
    assert loader.engines[0].closed and not loader.engines[1].closed


def test_generate_without_model_fails_readably(qtbot, host, recorder):
    with qtbot.waitSignal(host.failed, timeout=5000) as blocker:
        host.generate(request())
    assert "No model is loaded" in blocker.args[1]


def test_requests_are_served_on_the_worker_thread(qtbot, host):
    assert host.worker.thread() is host.thread
    assert host.thread is not QThread.currentThread()


def test_shutdown_while_generating_stops_quits_and_closes(qtbot):
    loader = FakeLoader(script=[" x"] * 100000, delay=0.001)
    h = EngineThread(loader)
    with qtbot.waitSignal(h.loaded, timeout=5000):
        h.load("models/tiny")
    got_chunk = threading.Event()
    h.chunk.connect(lambda *_: got_chunk.set())
    h.generate(request(max_new_tokens=100000))
    qtbot.waitUntil(got_chunk.is_set, timeout=5000)
    started = time.perf_counter()
    assert h.shutdown(5000)
    assert time.perf_counter() - started < 2.0
    assert not h.thread.isRunning()
    assert loader.last.closed


# -- the engine interface ---------------------------------------------------------------


def _protocol_methods() -> list[str]:
    return sorted(name for name, value in vars(Backend).items()
                  if callable(value) and not name.startswith("_"))


def _shape(function) -> list[tuple[str, object, bool]]:
    """Each parameter's name, kind and whether it has a default (annotations aside)."""
    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.kind, p.default is not inspect.Parameter.empty) for p in parameters]


def test_backend_members_exist_with_the_same_signatures_on_engine_and_fakes(
        plain_model_dir, tmp_path):
    """The worker reaches a backend through ``Backend`` and nothing else (no ``getattr``
    probes): every engine it may be given has each member with the protocol's signature."""
    engine = Engine.load(plain_model_dir, provider="cpu", threads=1)
    fakes = [FakeEngine(), ScriptedEngine(tmp_path, ["x"], 0.0)]
    methods = _protocol_methods()
    assert methods == ["capabilities", "chat", "close", "complete", "conversation_caches",
                       "count_tokens", "describe", "encode_chat", "encode_prompt", "prepare"]
    for name in methods:
        expected = _shape(getattr(Backend, name))
        assert _shape(getattr(Engine, name)) == expected, f"Engine.{name}"
        assert _shape(getattr(FakeEngine, name)) == expected, f"FakeEngine.{name}"
        assert _shape(getattr(ScriptedEngine, name)) == expected, f"ScriptedEngine.{name}"
        assert _shape(getattr(RemoteEngine, name)) == expected, f"RemoteEngine.{name}"
    for backend in [engine, *fakes]:
        assert isinstance(backend, Backend)
        assert isinstance(backend.describe(), BackendInfo)
        assert isinstance(backend.capabilities(), Capabilities)


def test_replies_go_through_the_workers_caches_and_forget_reaches_them(qtbot, host, loader):
    load(qtbot, host)
    with qtbot.waitSignal(host.finished, timeout=5000):
        host.generate(request(conv="kept"))
    with qtbot.waitSignal(host.finished, timeout=5000):
        host.generate(request(conv="deleted"))
    engine = loader.last
    (caches,) = engine.caches_made
    assert engine.conversations == [(caches, "kept"), (caches, "deleted")]
    assert caches.active_id == "deleted"
    host.forget("deleted")
    qtbot.waitUntil(lambda: caches.active_id is None, timeout=5000)
    # Loading another model closes the first one's caches and makes new ones.
    load(qtbot, host, "models/other")
    assert engine.closed and len(loader.last.caches_made) == 1


# -- a long prompt: progress and Stop while it is read ----------------------------------


def test_long_prefill_reports_throttled_progress_before_the_first_chunk(qtbot, host, recorder):
    host_loader = FakeLoader(prefill_tokens=4096, prefill_chunk=128, prefill_delay=0.01)
    h = EngineThread(host_loader)
    rec = type(recorder)(h)
    try:
        with qtbot.waitSignal(h.loaded, timeout=5000):
            h.load("models/tiny")
        started = time.perf_counter()
        with qtbot.waitSignal(h.finished, timeout=10000):
            h.generate(request(text="a b"))
        seconds = time.perf_counter() - started
    finally:
        assert h.shutdown(5000)
    kinds = rec.kinds()
    progress = [e for e in rec.events if e[0] == "prefill"]
    # 32 chunks of 10 ms: ~0.32 s, so ~4 throttled reports, not 33
    assert 2 <= len(progress) <= 10 * seconds + 2
    assert progress[0][2:] == (0, 4096) and progress[-1][2:] == (4096, 4096)
    dones = [e[2] for e in progress]
    assert dones == sorted(dones)
    assert kinds.index("chunk") > max(i for i, k in enumerate(kinds) if k == "prefill")


def test_short_prompt_reports_no_prefill_progress(qtbot, host, recorder):
    load(qtbot, host)
    with qtbot.waitSignal(host.finished, timeout=5000):
        host.generate(request(text="a b"))
    assert "prefill" not in recorder.kinds()


def test_stop_during_a_long_prefill_ends_the_reply_as_cancelled_at_once(qtbot):
    loader = FakeLoader(prefill_tokens=100_000, prefill_chunk=512, prefill_delay=0.01)
    h = EngineThread(loader)
    seen: list[tuple[int, int]] = []
    h.prefill_progress.connect(lambda conv, done, total: seen.append((done, total)))
    try:
        with qtbot.waitSignal(h.loaded, timeout=5000):
            h.load("models/tiny")
        with qtbot.waitSignal(h.finished, timeout=5000) as blocker:
            h.generate(request())
            qtbot.waitUntil(lambda: len(seen) >= 2, timeout=5000)
            stopped_at = time.perf_counter()
            h.stop()
        assert time.perf_counter() - stopped_at < AT_ONCE_S
    finally:
        assert h.shutdown(5000)
    result = blocker.args[1]
    assert result.finish_reason == "cancelled" and result.text == ""
    assert 0 < loader.last.prefill_done < 100_000


def test_prefill_throttle_passes_the_first_at_most_one_per_interval_and_the_last():
    from app.workers.generation_worker import PrefillThrottle

    now = [0]  # milliseconds: exact arithmetic
    out: list[tuple[str, int, int]] = []
    throttle = PrefillThrottle("c", lambda *a: out.append(a), interval=100, min_tokens=512,
                               clock=lambda: now[0])
    for done in [*range(0, 2901, 100), 2950, 3000]:  # one report every 20 ms
        throttle(done, 3000)
        now[0] += 20
    # the first, then one per 100 ms, then the last even though it comes 20 ms later
    assert [o[1] for o in out] == [0, 500, 1000, 1500, 2000, 2500, 2950, 3000]
    quiet: list[tuple] = []
    short = PrefillThrottle("c", lambda *a: quiet.append(a), min_tokens=512)
    short(0, 300)
    short(300, 300)
    assert quiet == []


def _catalog_with_a_draft(monkeypatch, tmp_path) -> None:
    """A catalog where "big" names "small" as its draft (the real one's shape)."""
    import json

    from app.models import catalog as catalog_module

    variant = {"name": "cpu", "provider": "cpu", "include": ["*.json"]}
    entries = [
        {"id": key, "name": key.title(), "repo": f"test/{key}", "revision": "main",
         "license": "mit", "context_length": 512, "parameters": 1, "format": "optimum",
         "description": "A tiny test model.", "variants": [variant], **extra}
        for key, extra in (("big", {"draft": "small"}), ("small", {}))
    ]
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"models": entries}), encoding="utf-8")
    monkeypatch.setattr(catalog_module, "CATALOG_PATH", path)


def test_the_default_loader_attaches_the_installed_catalog_draft(
        monkeypatch, tmp_path, plain_model_dir, gqa_model_dir):
    import shutil
    from dataclasses import replace

    from app.paths import models_dir

    _catalog_with_a_draft(monkeypatch, tmp_path)
    big = models_dir() / "big"
    shutil.copytree(plain_model_dir, big)
    alone = default_loader(big)
    assert alone.draft is None and _model_info(alone, str(big), 0.1).draft is None
    shutil.copytree(gqa_model_dir, models_dir() / "small")  # now the draft is installed
    engine = default_loader(big)
    assert engine.draft is not None
    assert _model_info(engine, str(big), 0.1).draft == engine.draft_name == "small"
    greedy = GenerationSettings(max_new_tokens=24, speculation="draft")
    greedy = replace(greedy, sampling=replace(greedy.sampling, temperature=0.0))
    prompt = [5, 6, 7, 8, 9, 10] * 3
    stats = list(engine.generate(prompt, greedy, reuse=False))[-1].stats
    assert stats.speculation == "draft" and stats.proposed > 0
    assert 0 <= stats.accepted <= stats.proposed


def test_a_draft_that_cannot_load_leaves_the_model_without_one_and_says_why(
        monkeypatch, tmp_path, plain_model_dir):
    import shutil

    from app.paths import models_dir

    _catalog_with_a_draft(monkeypatch, tmp_path)
    big = models_dir() / "big"
    shutil.copytree(plain_model_dir, big)
    small = models_dir() / "small"
    small.mkdir()
    (small / "config.json").write_text("{}", encoding="utf-8")  # a model folder, no graph
    engine = default_loader(big)
    assert engine.draft is None
    notes = _model_info(engine, str(big), 0.1).notes
    assert any(n.startswith("The draft model small was not used: ") for n in notes)


def test_the_model_details_say_when_prompts_run_on_their_own_session(
        gqa_int4_model_dir, gqa_model_dir, avx2_kernel_choice):
    from app.engine.engine import Engine

    exact = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1)  # the default
    assert _model_info(exact, str(gqa_int4_model_dir), 0.1).prompt_kernels is None
    quantized = Engine.load(gqa_int4_model_dir, provider="cpu", threads=1, exact=False)
    info = _model_info(quantized, str(gqa_int4_model_dir), 0.1)
    assert info.prompt_kernels.startswith("Prompts of 64+ tokens run on fp32 kernels")
    assert not [n for n in info.notes if "kernels" in n]  # no message box at every load
    # a float graph could never get one: nothing to say
    plain = Engine.load(gqa_model_dir, provider="cpu", threads=1)
    assert _model_info(plain, str(gqa_model_dir), 0.1).prompt_kernels is None


def test_the_prompt_session_opens_after_the_model_shows_as_loaded(gqa_int4_model_dir,
                                                                   avx2_kernel_choice):
    """``loaded`` goes out first (the window is ready); then the worker opens the fp32 prompt
    session, flagged as loading meanwhile so that a quit need not wait for it."""
    seen: list = []
    worker = None

    def loader(path):
        engine = Engine.load(path, provider="cpu", threads=1, prompt_session=False, exact=False)
        open_now = engine.open_prompt_session

        def opening():
            seen.append(("opening", worker.loading.is_set()))
            return open_now()

        engine.open_prompt_session = opening  # type: ignore[method-assign]
        return engine

    worker = GenerationWorker(loader, caches=lambda engine: engine.conversation_caches())
    worker.loaded.connect(  # same thread: a direct call at the moment of the emit
        lambda info: seen.append(("loaded", worker._engine.decoder.has_prompt_session,
                                  info.prompt_kernels is not None)))
    worker.on_load_requested(str(gqa_int4_model_dir))
    assert seen == [("loaded", False, True), ("opening", True)]
    assert worker._engine.decoder.has_prompt_session and not worker.loading.is_set()


def test_the_exact_replies_setting_reaches_the_loaded_engine(gqa_int4_model_dir):
    from app.settings import Settings

    assert default_loader(gqa_int4_model_dir).decoder.exact  # the default
    settings = Settings()
    settings.set("exact_replies", False)
    settings.save()
    engine = default_loader(gqa_int4_model_dir)
    assert not engine.decoder.exact
    assert "never depends" not in engine.prompt_plan.note
