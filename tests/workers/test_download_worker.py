"""The download worker on its own QThread, against the loopback Hub stand-in."""

from __future__ import annotations

import time

import pytest

from app.models.catalog import Variant
from app.models.downloader import Downloader, DownloadRequest
from app.models.library import ModelLibrary
from app.workers.download_worker import DownloadHost, DownloadJob
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests, random_bytes

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]

BLOB = "onnx/model_q4.onnx"
BLOB_SIZE = 1_500_000
VARIANT = Variant("cpu-q4", "cpu", include=("*.json", BLOB))


@pytest.fixture
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


@pytest.fixture
def host(qtbot):
    h = DownloadHost()
    yield h
    assert h.shutdown(5000)


class Events:
    def __init__(self, host: DownloadHost) -> None:
        self.items: list[tuple] = []
        host.queued.connect(lambda mid: self.items.append(("queued", mid)))
        host.started.connect(lambda mid: self.items.append(("started", mid)))
        host.progress.connect(lambda p: self.items.append(("progress", p.model_id, p)))
        host.finished.connect(lambda mid, m: self.items.append(("finished", mid, m)))
        host.failed.connect(lambda mid, msg: self.items.append(("failed", mid, msg)))
        host.cancelled.connect(lambda mid: self.items.append(("cancelled", mid)))
        host.crashed.connect(lambda details: self.items.append(("crashed", details)))

    def kinds(self, model_id: str | None = None) -> list[str]:
        kinds = [e[0] for e in self.items if model_id is None or e[1] == model_id]
        return [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]  # squash runs

    def progress(self, model_id: str) -> list:
        return [e[2] for e in self.items if e[0] == "progress" and e[1] == model_id]


def add_repo(hub: FakeHub, repo_id: str = "test/blob", seed: int = 0) -> FakeRepo:
    return hub.add(
        FakeRepo(
            repo_id,
            {"config.json": b'{"model_type": "llama"}', BLOB: random_bytes(BLOB_SIZE, seed)},
        )
    )


def job(hub: FakeHub, repo: FakeRepo, model_id: str = "blob") -> DownloadJob:
    downloader = Downloader(
        ModelLibrary(), endpoint=hub.url, retries=2, backoff_s=0.01, progress_interval_s=0.02
    )
    request = DownloadRequest(model_id, f"Model {model_id}", repo.repo_id, "main", VARIANT)
    return DownloadJob(model_id, downloader, request=request)


def test_download_reports_progress_in_order_then_installs(qtbot, hub, host):
    repo = add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.002
    events = Events(host)
    with qtbot.waitSignal(host.finished, timeout=10000):
        assert host.enqueue(job(hub, repo))
    assert events.kinds() == ["queued", "started", "progress", "finished"]
    states = [p.state for p in events.progress("blob")]
    assert states[0] == "resolving" and states[-1] == "done" and "downloading" in states
    model = events.items[-1][2]
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert ModelLibrary().get("blob") is not None
    assert host.pending() == []


def test_cancel_stops_at_once_and_leaves_nothing(qtbot, hub, host):
    repo = add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.02
    events = Events(host)
    the_job = job(hub, repo)
    host.enqueue(the_job)
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    cancelled_at = time.monotonic()
    with qtbot.waitSignal(host.cancelled, timeout=3000):
        host.cancel("blob")
    assert time.monotonic() - cancelled_at < 1.0
    assert "finished" not in events.kinds()
    assert ModelLibrary().get("blob") is None
    assert not the_job.downloader.staging_folder("blob").exists()


def test_pause_stops_the_transfer_and_resume_completes(qtbot, hub, host):
    repo = add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.01
    events = Events(host)
    host.enqueue(job(hub, repo))
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    host.pause("blob")
    qtbot.waitUntil(lambda: any(p.state == "paused" for p in events.progress("blob")))
    qtbot.wait(150)  # an in-flight chunk may still land
    during = hub.served(BLOB)
    qtbot.wait(300)
    assert hub.served(BLOB) == during < BLOB_SIZE
    hub.faults.delay_per_chunk_s = 0.0
    with qtbot.waitSignal(host.finished, timeout=10000):
        host.resume("blob")
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024  # resumed, not restarted


def test_queue_runs_one_at_a_time_and_a_queued_job_can_be_cancelled(qtbot, hub, host):
    first, second, third = (add_repo(hub, f"test/m{i}", i) for i in range(3))
    hub.faults.delay_per_chunk_s = 0.001
    events = Events(host)
    host.enqueue(job(hub, first, "one"))
    host.enqueue(job(hub, second, "two"))
    host.enqueue(job(hub, third, "three"))
    assert not host.enqueue(job(hub, first, "one"))  # already queued
    assert host.pending() == ["one", "two", "three"]
    host.cancel("three")
    qtbot.waitUntil(lambda: host.pending() == [], timeout=15000)
    order = [(e[0], e[1]) for e in events.items if e[0] in ("started", "finished", "cancelled")]
    assert order == [
        ("started", "one"),
        ("finished", "one"),
        ("started", "two"),
        ("finished", "two"),
        ("cancelled", "three"),
    ]
    assert {m.id for m in ModelLibrary().list_models()} == {"one", "two"}


def test_failure_names_the_url_and_keeps_partial_data(qtbot, hub, host):
    repo = add_repo(hub)
    hub.faults.cut_at[BLOB] = 700_000
    the_job = job(hub, repo)
    the_job.downloader.retries = 0
    with qtbot.waitSignal(host.failed, timeout=5000) as blocker:
        host.enqueue(the_job)
    model_id, message = blocker.args
    assert model_id == "blob" and f"{hub.url}/test/blob/resolve/" in message
    assert (the_job.downloader.staging_folder("blob") / (BLOB + ".part")).stat().st_size > 0
    with qtbot.waitSignal(host.finished, timeout=5000):  # resumes from the partial file
        host.enqueue(job(hub, repo))
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024


def test_shutdown_mid_download_is_quick_and_keeps_the_partial_file(qtbot, hub):
    repo = add_repo(hub)
    hub.faults.delay_per_chunk_s = 0.02
    h = DownloadHost()
    the_job = job(hub, repo)
    h.enqueue(the_job)
    qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    started = time.monotonic()
    assert h.shutdown(5000)
    assert time.monotonic() - started < 2.0
    part = the_job.downloader.staging_folder("blob") / (BLOB + ".part")
    assert part.stat().st_size > 0 and ModelLibrary().get("blob") is None


def test_hub_repo_outside_the_catalog_gets_a_variant_and_installs(qtbot, hub, host, tmp_path):
    from app.engine.package import read_model_folder
    from tests.fixtures.tiny_models import build_plain_kv_model

    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4")
    hub.add(FakeRepo.from_folder("someone/tiny", folder, extra={"onnx/model_fp16.onnx": b"x"}))
    downloader = Downloader(ModelLibrary(), endpoint=hub.url, retries=1, backoff_s=0.01)
    with qtbot.waitSignal(host.finished, timeout=10000) as blocker:
        host.enqueue(DownloadJob("someone--tiny", downloader, repo="someone/tiny"))
    model = blocker.args[1]
    assert model.source["variant"] == "model_q4"
    assert not (model.path / "onnx" / "model_fp16.onnx").exists()
    assert read_model_folder(model.path).variant == "model_q4"
