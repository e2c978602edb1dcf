"""ModelController without the dialog: downloads, queue, cancel, pause, failure and shutdown,
over real HTTP to the loopback Hub stand-in, on the real job thread."""

from __future__ import annotations

import time

import pytest

from app.jobs import Progress
from app.models.library import ModelLibrary
from app.settings import Settings
from app.storage.history import History
from app.ui.controller import ChatController
from app.ui.message_bridge import MessageBridge
from app.ui.model_controller import ModelController
from tests.bounds import AT_ONCE_S
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests, random_bytes
from tests.workers.fake_engine import FakeLoader

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]

BLOB = "onnx/model_q4.onnx"
BLOB_SIZE = 1_500_000


@pytest.fixture
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


class Events:
    """Job signals in arrival order (appended on the job thread; lists are thread-safe)."""

    def __init__(self, models: ModelController) -> None:
        self.items: list[tuple] = []
        w = models.jobs.worker
        models.jobs.queued.connect(lambda j: self.items.append(("queued", j)))
        w.started.connect(lambda j: self.items.append(("started", j)))
        w.progress.connect(lambda j, p: self.items.append(("progress", j, p)))
        w.finished.connect(lambda j, r: self.items.append(("finished", j, r)))
        w.failed.connect(lambda j, m: self.items.append(("failed", j, m)))
        w.cancelled.connect(lambda j: self.items.append(("cancelled", j)))
        w.crashed.connect(lambda d: self.items.append(("crashed", d)))

    def kinds(self, job_id: str | None = None) -> list[str]:
        kinds = [e[0] for e in self.items if job_id is None or e[1] == job_id]
        return [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]  # squash runs

    def progress(self, job_id: str) -> list[Progress]:
        return [e[2] for e in self.items if e[0] == "progress" and e[1] == job_id]

    def last(self, kind: str) -> tuple:
        return next(e for e in reversed(self.items) if e[0] == kind)


@pytest.fixture
def models(qtbot, hub):
    history = History()
    settings = Settings()
    settings.set("hub_endpoint", hub.url)
    bridge = MessageBridge()
    chat = ChatController(history, settings, bridge, FakeLoader())
    controller = ModelController(
        chat, settings, bridge,
        downloader_options={"retries": 2, "backoff_s": 0.01, "progress_interval_s": 0.02},
    )
    yield controller
    assert controller.shutdown(5000)
    assert chat.shutdown()
    history.close()


def add_repo(hub: FakeHub, repo_id: str = "test/blob", seed: int = 0) -> FakeRepo:
    return hub.add(
        FakeRepo(
            repo_id,
            {"config.json": b'{"model_type": "llama"}', BLOB: random_bytes(BLOB_SIZE, seed)},
        )
    )


def test_a_download_reports_progress_in_order_then_installs(qtbot, hub, models):
    repo = add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.002
    events = Events(models)
    with qtbot.waitSignal(models.models_changed, timeout=10000):
        assert models.download_repo("test/blob")
    # the test's own record of the worker's signals may arrive after the controller's slot
    qtbot.waitUntil(lambda: "finished" in events.kinds(), timeout=5000)
    assert events.kinds() == ["queued", "started", "progress", "finished"]
    states = [p.state for p in events.progress("test--blob")]
    assert states[0] == "resolving" and states[-1] == "done" and "downloading" in states
    texts = [p.message for p in events.progress("test--blob") if p.state == "downloading"]
    assert any(" of 1.5 MB" in t for t in texts)
    model = events.last("finished")[2]
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert ModelLibrary().get("test--blob") is not None
    assert models.jobs.pending() == []


def test_cancel_stops_at_once_and_leaves_nothing(qtbot, hub, models):
    add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.02
    events = Events(models)
    models.download_repo("test/blob")
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    cancelled_at = time.monotonic()
    models.discard("test--blob")
    qtbot.waitUntil(lambda: "cancelled" in events.kinds(), timeout=3000)
    assert time.monotonic() - cancelled_at < AT_ONCE_S
    assert "finished" not in events.kinds()
    assert ModelLibrary().get("test--blob") is None
    assert not models.library().downloader().staging_folder("test--blob").exists()


def test_pause_stops_the_transfer_and_resume_completes(qtbot, hub, models):
    add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.01
    events = Events(models)
    models.download_repo("test/blob")
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    models.pause("test--blob")
    qtbot.waitUntil(lambda: any(p.state == "paused" for p in events.progress("test--blob")))
    qtbot.wait(150)  # an in-flight chunk may still land
    during = hub.served(BLOB)
    qtbot.wait(300)
    assert hub.served(BLOB) == during < BLOB_SIZE
    hub.faults.delay_per_chunk_s = 0.0
    models.resume("test--blob")
    qtbot.waitUntil(lambda: "finished" in events.kinds(), timeout=10000)
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024  # resumed, not restarted


def test_the_queue_runs_one_at_a_time_and_a_queued_job_can_be_cancelled(qtbot, hub, models):
    for i in range(3):
        add_repo(hub, f"test/m{i}", i)
    hub.faults.delay_per_chunk_s = 0.001
    events = Events(models)
    for i in range(3):
        assert models.download_repo(f"test/m{i}")
    assert not models.download_repo("test/m0")  # already queued
    assert models.jobs.pending() == ["test--m0", "test--m1", "test--m2"]
    models.discard("test--m2")
    qtbot.waitUntil(lambda: models.jobs.pending() == [], timeout=15000)
    order = [(e[0], e[1]) for e in events.items if e[0] in ("started", "finished", "cancelled")]
    assert order == [
        ("started", "test--m0"),
        ("finished", "test--m0"),
        ("started", "test--m1"),
        ("finished", "test--m1"),
        ("cancelled", "test--m2"),
    ]
    assert {m.id for m in ModelLibrary().list_models()} == {"test--m0", "test--m1"}


def test_a_failure_names_the_url_keeps_partial_data_and_retry_resumes(qtbot, hub, models):
    add_repo(hub)
    hub.faults.cut_at[BLOB] = 700_000
    models.downloader_options["retries"] = 0
    events = Events(models)
    models.download_repo("test/blob")
    qtbot.waitUntil(lambda: "failed" in events.kinds() and not models.jobs.pending(), timeout=5000)
    _, job_id, message = events.last("failed")
    assert job_id == "test--blob" and f"{hub.url}/test/blob/resolve/" in message
    staging = models.library().downloader().staging_folder("test--blob")
    assert (staging / (BLOB + ".part")).stat().st_size > 0
    hub.faults.cut_at.clear()
    assert models.retry("test--blob")
    qtbot.waitUntil(lambda: "finished" in events.kinds(), timeout=5000)
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024


def test_discarding_a_failed_download_deletes_its_partial_data(qtbot, hub, models):
    add_repo(hub)
    hub.faults.cut_at[BLOB] = 700_000
    models.downloader_options["retries"] = 0
    events = Events(models)
    models.download_repo("test/blob")
    qtbot.waitUntil(lambda: "failed" in events.kinds() and not models.jobs.pending(), timeout=5000)
    staging = models.library().downloader().staging_folder("test--blob")
    assert staging.exists()
    models.discard("test--blob")
    assert not staging.exists()
    assert not models.retry("test--blob")


def test_shutdown_mid_download_is_quick_and_keeps_the_partial_file(qtbot, hub, models):
    add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.02
    models.download_repo("test/blob")
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    started = time.monotonic()
    assert models.shutdown(5000)
    assert time.monotonic() - started < AT_ONCE_S
    part = models.library().downloader().staging_folder("test--blob") / (BLOB + ".part")
    assert part.stat().st_size > 0 and ModelLibrary().get("test--blob") is None


def test_a_hub_repo_outside_the_catalog_gets_the_variant_for_this_machine(
    qtbot, hub, models, tmp_path
):
    from app.engine.package import read_model_folder
    from tests.fixtures.tiny_models import build_plain_kv_model

    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4")
    hub.add(FakeRepo.from_folder("someone/tiny", folder, extra={"onnx/model_fp16.onnx": b"x"}))
    events = Events(models)
    models.download_repo("someone/tiny")
    qtbot.waitUntil(lambda: "finished" in events.kinds(), timeout=10000)
    model = events.last("finished")[2]
    assert model.source["variant"] == "model_q4"
    assert not (model.path / "onnx" / "model_fp16.onnx").exists()
    assert read_model_folder(model.path).variant == "model_q4"


def test_conversion_progress_adds_the_percent():
    from app.ui.model_controller import conversion_progress

    p = conversion_progress(0.4, "Converting layer 12 of 30")
    assert (p.fraction, p.message, p.state) == (0.4, "Converting layer 12 of 30 · 40 %", "running")
    assert conversion_progress(1.2, "Converted").message == "Converted · 100 %"
    assert conversion_progress(None, "Reading m.gguf") == Progress(None, "Reading m.gguf")
