"""Downloads over real HTTP against the loopback Hub stand-in, with injected faults."""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from pathlib import Path

import pytest

from app.errors import DiskFullError, DownloadError
from app.manifest import MANIFEST_NAME
from app.models import downloader as dl
from app.models.catalog import Variant
from app.models.downloader import (
    DownloadCancelled,
    DownloadControl,
    Downloader,
    DownloadRequest,
)
from app.models.library import ModelLibrary
from tests.bounds import AT_ONCE_S
from tests.fixtures.tiny_models import build_gqa_model, build_plain_kv_model
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests, random_bytes

BLOB = "onnx/model_q4.onnx"
BLOB_SIZE = 2_000_000
OPTIMUM = Variant(
    "cpu-q4", "cpu", include=("*.json", "*.jinja", "onnx/model_q4.onnx", "onnx/model_q4.onnx_data*")
)


@pytest.fixture
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


def blob_repo(hub: FakeHub, repo_id: str = "test/blob", seed: int = 0) -> FakeRepo:
    """A repo with a small JSON file and a 2 MB LFS file (plus one the variant skips)."""
    return hub.add(
        FakeRepo(
            repo_id,
            {
                "config.json": b'{"model_type": "llama"}',
                BLOB: random_bytes(BLOB_SIZE, seed),
                "onnx/model_fp16.onnx": random_bytes(1000, seed + 1),
            },
        )
    )


def request(
    repo: FakeRepo, model_id: str = "blob", variant: Variant = OPTIMUM, revision: str = "main"
) -> DownloadRequest:
    return DownloadRequest(
        model_id=model_id,
        name=f"Model {model_id}",
        repo=repo.repo_id,
        revision=revision,
        variant=variant,
        format="optimum",
        context_length=512,
        parameters=1000,
    )


def make_downloader(hub: FakeHub, **kwargs) -> Downloader:
    options = {"retries": 3, "backoff_s": 0.01, "read_timeout_s": 2.0, "connect_timeout_s": 2.0}
    options.update(kwargs)
    return Downloader(ModelLibrary(), endpoint=hub.url, **options)


def settled_served(hub: FakeHub, path: str) -> int:
    """Bytes served for ``path`` once the server has stopped writing: a client that gave up
    mid-response leaves the handler thread flushing its socket buffer for a moment."""
    last = hub.served(path)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = hub.served(path)
        if now == last:
            return now
        last = now
    return last


def part_file(downloader: Downloader, model_id: str, path: str = BLOB) -> Path:
    return downloader.staging_folder(model_id) / (path + ".part")


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


# -- complete downloads --------------------------------------------------------------------


def test_full_download_installs_a_verified_model_that_loads(hub, tmp_path):
    from app.engine.package import read_model_folder

    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4")
    repo = hub.add(
        FakeRepo.from_folder("test/tiny-chat", folder, extra={"onnx/model.onnx": b"x" * 5000})
    )
    updates = []
    model = make_downloader(hub).download(request(repo, "tiny-chat"), progress=updates.append)

    manifest = model.manifest.as_dict()
    assert manifest["source"] == {
        "kind": "hub",
        "repo": "test/tiny-chat",
        "revision": repo.commit,
        "variant": "cpu-q4",
        "path": None,
        "endpoint": hub.url,
    }
    assert manifest["format"] == "optimum" and manifest["installed_at"]
    listed = {f["path"]: f for f in manifest["files"]}
    assert "onnx/model.onnx" not in listed  # not part of the variant
    for rel, data in repo.files.items():
        if rel == "onnx/model.onnx":
            continue
        assert listed[rel]["sha256"] == hashlib.sha256(data).hexdigest()
        assert (model.path / rel).read_bytes() == data
    assert (model.path / MANIFEST_NAME).is_file()
    assert not (ModelLibrary().root.parent / "staging" / "tiny-chat").exists()
    assert updates[0].state == "resolving" and updates[-1].state == "done"
    total = sum(f["size"] for f in listed.values())
    assert updates[-1].bytes_done == updates[-1].bytes_total == total

    spec = read_model_folder(model.path)
    assert spec.layout == "optimum" and spec.variant == "model_q4"


def test_downloaded_model_chats(hub, tmp_path):
    from app.engine.engine import Engine
    from app.engine.types import GenerationSettings, Message, SamplingSettings

    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4")
    repo = hub.add(FakeRepo.from_folder("test/tiny-chat", folder))
    model = make_downloader(hub).download(request(repo, "tiny-chat"))
    engine = Engine.load(model.path)
    try:
        settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=4)
        chunks = list(engine.chat([Message("user", "hello")], settings))
    finally:
        engine.close()
    assert chunks[-1].finish_reason is not None and chunks[-1].stats.generated_tokens >= 1


def test_subfolder_variant_installs_only_that_folder_at_the_model_root(hub, tmp_path):
    from app.engine.package import read_model_folder

    sub = "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4"
    folder = build_gqa_model(tmp_path / "genai")
    files = {
        f"{sub}/{p.relative_to(folder).as_posix()}": p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file()
    }
    files["cuda/cuda-int4/model.onnx"] = b"not for this variant"
    files["README.md"] = b"# card"
    repo = hub.add(FakeRepo("test/genai", files))
    variant = Variant("cpu-int4", "cpu", subfolder=sub)

    model = make_downloader(hub).download(request(repo, "genai", variant))

    installed = sorted(f["path"] for f in model.manifest.files)
    assert installed == sorted(
        p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
    )
    assert model.source["path"] == sub
    assert read_model_folder(model.path).layout == "genai"
    assert hub.served("cuda-int4/model.onnx") == 0 and hub.served("README.md") == 0


def test_pinned_commit_is_used_without_resolving_a_branch(hub):
    repo = blob_repo(hub)
    make_downloader(hub).download(request(repo, revision=repo.commit))
    paths = [path for _, path, _ in hub.requests]
    assert not any("/revision/" in p for p in paths)
    assert any(f"/resolve/{repo.commit}/{BLOB}" in p for p in paths)


def test_already_installed_model_is_returned_without_network(hub):
    repo = blob_repo(hub)
    downloader = make_downloader(hub)
    first = downloader.download(request(repo))
    count = len(hub.requests)
    assert downloader.download(request(repo)).path == first.path
    assert len(hub.requests) == count


# -- interruptions and resume --------------------------------------------------------------


def test_network_cut_mid_file_is_resumed_with_a_range_request(hub):
    repo = blob_repo(hub)
    hub.faults.cut_at[BLOB] = 1_000_000
    model = make_downloader(hub).download(request(repo))

    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024  # resumed, not restarted
    ranges = [r for _, p, r in hub.file_requests() if p.endswith(BLOB) and r]
    assert len(ranges) == 1
    assert 1_000_000 - 64 * 1024 <= int(ranges[0][6:-1]) <= 1_000_000


def test_restart_after_a_failed_run_fetches_only_the_missing_bytes(hub):
    repo = blob_repo(hub)
    hub.faults.cut_at[BLOB] = 1_234_567
    first = make_downloader(hub, retries=0)
    with pytest.raises(DownloadError) as err:
        first.download(request(repo))
    assert f"{hub.url}/test/blob/resolve/{repo.commit}/{BLOB}" in str(err.value)
    assert "resumes" in str(err.value)
    kept = part_file(first, "blob").stat().st_size
    assert 1_234_567 - 64 * 1024 <= kept <= 1_234_567
    assert ModelLibrary().get("blob") is None

    before = settled_served(hub, BLOB)
    model = make_downloader(hub).download(request(repo))  # a fresh process would do the same
    assert hub.served(BLOB) - before == BLOB_SIZE - kept
    assert (
        hashlib.sha256((model.path / BLOB).read_bytes()).hexdigest()
        == hashlib.sha256(repo.files[BLOB]).hexdigest()
    )


def test_server_that_ignores_range_restarts_the_file_cleanly(hub):
    repo = blob_repo(hub)
    hub.faults.cut_at[BLOB] = 700_000
    with pytest.raises(DownloadError):
        make_downloader(hub, retries=0).download(request(repo))
    hub.faults.ignore_range = True
    kept = part_file(make_downloader(hub), "blob").stat().st_size
    before = settled_served(hub, BLOB)
    model = make_downloader(hub).download(request(repo))
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert kept > 0 and hub.served(BLOB) - before == BLOB_SIZE


def test_corrupt_byte_is_rejected_and_the_file_fetched_again(hub):
    repo = blob_repo(hub)
    hub.faults.corrupt_at[BLOB] = 123_456
    updates = []
    model = make_downloader(hub).download(request(repo), progress=updates.append)
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert hub.served(BLOB) == 2 * BLOB_SIZE
    assert any(u.state == "retrying" and "corrupt" in (u.message or "") for u in updates)


def test_corruption_that_persists_fails_clearly_and_installs_nothing(hub):
    repo = blob_repo(hub)
    hub.faults.corrupt_at[BLOB] = 5
    hub.faults.corrupt_times = -1
    downloader = make_downloader(hub)
    with pytest.raises(DownloadError) as err:
        downloader.download(request(repo))
    assert "failed verification" in str(err.value) and BLOB in str(err.value)
    assert ModelLibrary().get("blob") is None
    assert not part_file(downloader, "blob").exists()
    assert not (downloader.staging_folder("blob") / BLOB).exists()


def test_non_lfs_file_is_verified_by_its_git_hash(hub):
    repo = blob_repo(hub)
    hub.faults.corrupt_at["config.json"] = 2
    model = make_downloader(hub).download(request(repo))
    assert (model.path / "config.json").read_bytes() == repo.files["config.json"]
    assert hub.served("config.json") == 2 * len(repo.files["config.json"])


def test_server_errors_are_retried_with_backoff(hub):
    repo = blob_repo(hub)
    hub.faults.api_fail_first = 2
    hub.faults.fail_first = 3
    model = make_downloader(hub).download(request(repo))
    assert (model.path / BLOB).is_file()
    statuses = [p for _, p, _ in hub.requests]
    assert len([p for p in statuses if "/api/" in p]) == 4  # 2 failures + revision + tree


def test_stalled_response_times_out_and_is_retried(hub):
    repo = blob_repo(hub)
    hub.faults.stall_first = 1
    hub.faults.stall_s = 1.5
    started = time.monotonic()
    model = make_downloader(hub, read_timeout_s=0.3).download(request(repo))
    assert (model.path / "config.json").is_file()
    assert time.monotonic() - started < 10
    config_gets = [p for _, p, _ in hub.file_requests() if p.endswith("config.json")]
    assert len(config_gets) == 2


def test_retries_are_bounded_and_the_error_names_the_url(hub):
    repo = blob_repo(hub)
    hub.faults.fail_first = 100
    with pytest.raises(DownloadError) as err:
        make_downloader(hub, retries=2).download(request(repo))
    message = str(err.value)
    assert f"{hub.url}/test/blob/resolve/{repo.commit}/config.json" in message
    assert "3 attempts" in message and "HTTP 500" in message


def test_offline_closed_port_gives_a_clear_message_naming_the_url(monkeypatch):
    allow_hub_requests(monkeypatch)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    repo = FakeRepo("test/offline", {"config.json": b"{}"})
    downloader = Downloader(ModelLibrary(), endpoint=endpoint, retries=1, backoff_s=0.01)
    with pytest.raises(DownloadError) as err:
        downloader.download(request(repo, "offline"))
    message = str(err.value)
    assert message.startswith("You're offline (or the Hub is unreachable): ")
    assert f"{endpoint}/api/models/test/offline/revision/main" in message
    assert "internet connection" in message


def test_hf_offline_mode_is_reported_as_such(monkeypatch):
    repo = FakeRepo("test/offline", {"config.json": b"{}"})
    downloader = Downloader(ModelLibrary(), endpoint="http://127.0.0.1:9", retries=0)
    with pytest.raises(DownloadError, match="offline mode"):
        downloader.download(request(repo, "offline"))


# -- disk space ----------------------------------------------------------------------------


def test_not_enough_disk_before_starting_is_refused_with_a_clear_message(hub, monkeypatch):
    repo = blob_repo(hub)
    monkeypatch.setattr(dl, "free_space", lambda path: 500_000)
    with pytest.raises(DiskFullError) as err:
        make_downloader(hub).download(request(repo))
    assert "Not enough free disk space to download Model blob" in str(err.value)
    assert "resumes" in str(err.value)
    assert hub.served() == 0


def test_disk_filling_up_while_writing_stops_and_the_download_resumes_later(hub, monkeypatch):
    repo = blob_repo(hub)
    calls = {"n": 0}

    def shrinking_disk(path):
        calls["n"] += 1
        return 10**12 if calls["n"] <= 2 else 1_000

    monkeypatch.setattr(dl, "free_space", shrinking_disk)
    first = make_downloader(hub, disk_check_every_bytes=256 * 1024, disk_reserve_bytes=0)
    with pytest.raises(DiskFullError):
        first.download(request(repo))
    kept = part_file(first, "blob").stat().st_size
    assert 0 < kept < BLOB_SIZE

    monkeypatch.setattr(dl, "free_space", lambda path: 10**12)
    before = settled_served(hub, BLOB)
    model = make_downloader(hub).download(request(repo))
    assert hub.served(BLOB) - before == BLOB_SIZE - kept
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]


def test_write_error_for_a_full_disk_becomes_disk_full_error(hub, monkeypatch):
    import errno

    repo = blob_repo(hub)
    real_open = open

    class FullFile:
        def __init__(self, handle):
            self.handle = handle
            self.written = 0

        def write(self, data):
            if self.written > 300_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.written += len(data)
            return self.handle.write(data)

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def fake_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return FullFile(handle) if str(path).endswith(".onnx.part") else handle

    monkeypatch.setattr(dl, "open", fake_open, raising=False)
    downloader = make_downloader(hub)
    with pytest.raises(DiskFullError, match="Not enough free disk space"):
        downloader.download(request(repo))
    assert part_file(downloader, "blob").stat().st_size > 300_000


# -- control from another thread -----------------------------------------------------------


def run_in_thread(
    downloader: Downloader, req: DownloadRequest, control: DownloadControl, updates: list
):
    outcome: dict = {}

    def target():
        try:
            outcome["model"] = downloader.download(req, progress=updates.append, control=control)
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


def test_cancel_from_another_thread_stops_at_once_and_installs_nothing(hub):
    repo = blob_repo(hub)
    hub.faults.delay_per_chunk_s = 0.02
    downloader = make_downloader(hub)
    control, updates = DownloadControl(), []
    thread, outcome = run_in_thread(downloader, request(repo), control, updates)
    wait_for(lambda: hub.served(BLOB) > 100_000)
    cancelled_at = time.monotonic()
    control.cancel()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - cancelled_at < AT_ONCE_S
    assert isinstance(outcome.get("error"), DownloadCancelled)
    assert ModelLibrary().get("blob") is None
    assert not downloader.staging_folder("blob").exists()


def test_pause_stops_the_transfer_and_resume_finishes_it(hub):
    repo = blob_repo(hub)
    hub.faults.delay_per_chunk_s = 0.01
    downloader = make_downloader(hub)
    control, updates = DownloadControl(), []
    thread, outcome = run_in_thread(downloader, request(repo), control, updates)
    wait_for(lambda: hub.served(BLOB) > 100_000)
    control.pause()
    wait_for(lambda: any(u.state == "paused" for u in updates))
    time.sleep(0.2)  # let an in-flight chunk land
    during = hub.served(BLOB)
    time.sleep(0.4)
    assert hub.served(BLOB) == during and thread.is_alive()
    hub.faults.delay_per_chunk_s = 0.0
    control.resume()
    thread.join(10)
    assert outcome["model"].path.joinpath(BLOB).read_bytes() == repo.files[BLOB]
    assert hub.served(BLOB) <= BLOB_SIZE + 64 * 1024  # resumed, not restarted


def test_progress_reports_rate_and_eta(hub):
    repo = blob_repo(hub)
    hub.faults.delay_per_chunk_s = 0.005
    updates = []
    make_downloader(hub, progress_interval_s=0.05).download(request(repo), progress=updates.append)
    moving = [u for u in updates if u.state == "downloading"]
    assert moving and all(u.bytes_total == BLOB_SIZE + 23 for u in moving)
    assert any(u.rate_bps > 0 and u.eta_s is not None for u in moving)
    done = [u.bytes_done for u in moving]
    assert done == sorted(done)


def test_a_variant_whose_graph_the_repo_lacks_is_refused_before_any_file_is_fetched(
        hub, tmp_path):
    """The JSON patterns always match; a missing onnx/model_q4.onnx must not install a folder
    that cannot load. The refusal offers the graphs the repo does hold."""
    folder = build_plain_kv_model(tmp_path / "tiny", variant_name="model_q4f16")
    repo = hub.add(FakeRepo.from_folder("test/no-q4", folder,
                                        extra={"onnx/model_fp16.onnx": b"x" * 100}))
    downloader = make_downloader(hub)
    with pytest.raises(DownloadError) as caught:
        downloader.download(request(repo, "no-q4"))
    error = caught.value
    assert "test/no-q4" in str(error) and "onnx/model_q4.onnx" in str(error)
    assert "cpu-q4" in str(error) and "nothing was downloaded" in str(error)
    assert "q4f16 (onnx/model_q4f16.onnx)" in error.hint and "fp16 (onnx/model_fp16.onnx)" \
        in error.hint
    assert "--variant fp16" in error.hint
    assert hub.file_requests() == []
    assert not downloader.staging_folder("no-q4").exists()
