"""A hostile or broken mirror, played by the loopback Hub stand-in: what Hearth refuses."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest

from app.errors import DiskFullError, DownloadError
from app.models import downloader as dl
from app.models import hub as hub_module
from app.models.catalog import Variant
from app.models.downloader import DownloadControl, Downloader
from app.models.library import ModelLibrary
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests
from tests.models.test_downloader import (
    BLOB,
    BLOB_SIZE,
    blob_repo,
    make_downloader,
    request,
)

PAYLOAD = b'{"owned": true}'
SUB = Variant("cpu-int4", "cpu", subfolder="sub")


@pytest.fixture
def hub(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as server:
        yield server


# -- paths stay inside the model's folder --------------------------------------------------


WHOLE_REPO = Variant("cpu-q4", "cpu", include=("*.json", "onnx/*.onnx"))


@pytest.mark.parametrize(
    ("variant", "hostile"),
    [
        (SUB, "sub/../../../escaped.json"),  # climbs out of the staging folder at HEAD
        (SUB, "sub//escaped.json"),
        (SUB, "sub/./escaped.json"),
        (SUB, "sub/escaped\x00.json"),
        (SUB, "sub/C:escaped.json"),
        (SUB, "sub/con.json"),
        (WHOLE_REPO, "../escaped.json"),
        (WHOLE_REPO, "/tmp/escaped.json"),
        (WHOLE_REPO, "C:/escaped.json"),
        (WHOLE_REPO, "..\\..\\escaped.json"),
        (WHOLE_REPO, "onnx/../../escaped.onnx"),
    ],
)
def test_a_listed_path_that_could_leave_the_model_folder_refuses_the_download(
    hub, tmp_path, variant, hostile
):
    files = {"sub/genai_config.json": b"{}", "config.json": b"{}", hostile: PAYLOAD}
    repo = hub.add(FakeRepo("test/evil", files))
    hub.faults.serve_unknown = PAYLOAD  # the mirror answers whatever URL that path becomes
    staging = tmp_path / "data" / "staging"
    downloader = Downloader(
        ModelLibrary(), endpoint=hub.url, staging_root=staging, retries=0, backoff_s=0.01
    )
    with pytest.raises(DownloadError) as err:
        downloader.download(request(repo, "evil", variant))
    assert repr(hostile) in str(err.value) and "does not download" in str(err.value)
    assert ModelLibrary().get("evil") is None
    assert [p for p in tmp_path.rglob("*escaped*")] == []
    assert hub.served() == 0


def test_include_patterns_never_match_across_a_slash(hub):
    repo = blob_repo(hub)
    repo.files["onnx/model_q4.onnx_data/extra/planted.bin"] = b"not part of the model"
    repo.files["nested/config.json"] = b"{}"
    model = make_downloader(hub).download(request(repo))
    installed = sorted(f["path"] for f in model.manifest.files)
    assert installed == ["config.json", BLOB]
    assert hub.served("planted.bin") == 0 and hub.served("nested/config.json") == 0


def test_a_listing_with_too_many_files_is_refused(hub, monkeypatch):
    monkeypatch.setattr(hub_module, "MAX_LISTED_FILES", 50, raising=False)
    repo = blob_repo(hub)
    hub.faults.extra_tree_entries = 60
    with pytest.raises(DownloadError, match="lists more than 50 files"):
        make_downloader(hub).download(request(repo))
    assert hub.served() == 0


def test_an_oversized_metadata_answer_is_refused_without_retrying(hub, monkeypatch):
    monkeypatch.setattr(hub_module, "MAX_METADATA_BYTES", 1 << 20, raising=False)
    repo = blob_repo(hub)
    hub.faults.api_padding = 3 << 20  # a 3 MiB model info
    with pytest.raises(DownloadError) as err:
        make_downloader(hub).download(request(repo))
    assert "more than 1 MiB of metadata" in str(err.value)
    assert len([r for r in hub.requests if "/api/" in r[1]]) == 1
    assert hub.served() == 0


# -- a body longer than listed --------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_a_body_longer_than_the_listed_size_is_an_error_not_a_retry_loop(hub, declared):
    repo = blob_repo(hub)
    hub.faults.oversize[BLOB] = 1_000_000
    hub.faults.oversize_declared = declared
    downloader = make_downloader(hub)
    control = DownloadControl()
    outcome: dict = {}

    def target():
        try:
            downloader.download(request(repo), control=control)
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(15)
    stuck = thread.is_alive()
    control.cancel()  # at HEAD the loop never ends: stop it before failing
    thread.join(10)
    blob_gets = [r for r in hub.file_requests() if r[1].endswith(BLOB)]
    assert not stuck, f"still downloading after {len(blob_gets)} requests"
    error = outcome.get("error")
    assert isinstance(error, DownloadError), error
    assert f"the listing says {BLOB} has {BLOB_SIZE} bytes" in str(error)
    assert len(blob_gets) == 1
    assert hub.served(BLOB) <= BLOB_SIZE + 1_000_000
    assert ModelLibrary().get("blob") is None
    assert not (downloader.staging_folder("blob") / (BLOB + ".part")).exists()


# -- redirects and headers are bounded ------------------------------------------------------


def test_a_redirect_loop_stops_after_a_few_hops_with_a_sentence(hub):
    repo = blob_repo(hub)
    hub.faults.redirect_loop = True
    with pytest.raises(DownloadError) as err:
        make_downloader(hub).download(request(repo))
    assert "redirected more than 5 times" in str(err.value)
    assert len(hub.file_requests()) == 6  # the request and 5 redirects, no retries


def test_an_enormous_header_is_refused_after_bounded_attempts(hub):
    repo = blob_repo(hub)
    hub.faults.header_padding = 200_000
    with pytest.raises(DownloadError) as err:
        make_downloader(hub, retries=2).download(request(repo))
    assert "failed after 3 attempts" in str(err.value)
    assert len(hub.file_requests()) == 3


# -- Retry-After ----------------------------------------------------------------------------


def test_retry_after_is_honoured_and_shown(hub):
    repo = blob_repo(hub)
    hub.faults.retry_after_first = 1
    hub.faults.retry_after = "1"
    updates = []
    started = time.monotonic()
    model = make_downloader(hub, backoff_s=0.01).download(request(repo), progress=updates.append)
    elapsed = time.monotonic() - started
    assert (model.path / BLOB).read_bytes() == repo.files[BLOB]
    assert elapsed >= 1.0  # the 0.01 s backoff alone would not wait
    messages = [u.message for u in updates if u.state == "retrying"]
    assert messages == ["HTTP 429; the server asked to wait 1 s; retrying in 1.0 s"]


def test_retry_after_is_capped(hub):
    repo = blob_repo(hub)
    hub.faults.retry_after_first = 1
    hub.faults.retry_after = "3600"
    updates = []
    started = time.monotonic()
    make_downloader(hub, max_retry_after_s=0.5).download(request(repo), progress=updates.append)
    assert time.monotonic() - started < 10
    messages = [u.message for u in updates if u.state == "retrying"]
    assert messages == ["HTTP 429; the server asked to wait 3600 s; retrying in 0.5 s"]


def test_the_default_cap_is_a_minute():
    assert Downloader(ModelLibrary(), endpoint="http://127.0.0.1:9").max_retry_after_s == 60.0
    assert hub_module.parse_retry_after("120") == 120.0
    assert hub_module.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10
    assert hub_module.parse_retry_after("soon") is None


# -- re-verified right before the install ---------------------------------------------------


def _tamper(downloader: Downloader, times: int):
    """A progress callback that flips a byte of the staged blob when installing starts."""
    left = {"n": times}
    updates: list = []

    def callback(update):
        updates.append(update)
        staged = downloader.staging_folder("blob") / BLOB
        if update.state == "installing" and left["n"] and staged.is_file():
            left["n"] -= 1
            data = bytearray(staged.read_bytes())
            data[1000] ^= 0xFF
            staged.write_bytes(bytes(data))

    return callback, updates


def test_a_file_changed_on_disk_after_verification_is_fetched_again(hub):
    repo = blob_repo(hub)
    downloader = make_downloader(hub)
    callback, updates = _tamper(downloader, 1)
    model = downloader.download(request(repo), progress=callback)
    data = (model.path / BLOB).read_bytes()
    assert data == repo.files[BLOB]
    listed = {f["path"]: f["sha256"] for f in model.manifest.files}
    assert listed[BLOB] == hashlib.sha256(data).hexdigest()
    assert hub.served(BLOB) == 2 * BLOB_SIZE
    assert any("changed on disk" in (u.message or "") for u in updates)


def test_a_file_that_keeps_changing_is_never_installed(hub):
    repo = blob_repo(hub)
    downloader = make_downloader(hub)
    callback, _ = _tamper(downloader, 2)
    with pytest.raises(DownloadError, match="changed on disk after it was verified"):
        downloader.download(request(repo), progress=callback)
    assert ModelLibrary().get("blob") is None


# -- a models folder on another disk --------------------------------------------------------


def test_a_models_folder_on_another_disk_needs_room_for_the_copy(hub, monkeypatch):
    repo = blob_repo(hub)
    library = ModelLibrary()
    monkeypatch.setattr(dl, "same_filesystem", lambda a, b: False, raising=False)

    def free_space(path):
        return 1_000_000 if library.root in (path, *path.parents) else 10**12

    monkeypatch.setattr(dl, "free_space", free_space)
    downloader = Downloader(library, endpoint=hub.url, retries=0)
    with pytest.raises(DiskFullError) as err:
        downloader.download(request(repo))
    message = str(err.value)
    assert f"the models folder {library.root} is on another disk" in message
    assert "1.0 MB free" in message
    assert hub.served() == 0


def test_a_second_download_after_a_failed_run_keeps_lock_free(hub):
    """The lock is released when a download fails, so the next attempt starts at once."""
    repo = blob_repo(hub)
    hub.faults.fail_first = 100
    downloader = make_downloader(hub, retries=0)
    with pytest.raises(DownloadError):
        downloader.download(request(repo))
    hub.faults.fail_first = 0
    updates = []
    downloader.download(request(repo), progress=updates.append)
    assert not any(u.state == "waiting" for u in updates)


def test_a_second_download_in_the_same_process_waits_for_the_first(hub):
    repo = blob_repo(hub)
    hub.faults.delay_per_chunk_s = 0.01
    first, second = make_downloader(hub), make_downloader(hub)
    results: dict = {}
    waiting = []

    def run(name, downloader, progress=None):
        results[name] = downloader.download(request(repo), progress=progress)

    one = threading.Thread(target=run, args=("one", first))
    one.start()
    deadline = time.monotonic() + 10
    while hub.served(BLOB) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    two = threading.Thread(target=run, args=("two", second, waiting.append))
    two.start()
    one.join(30)
    two.join(30)
    assert results["one"].path == results["two"].path
    assert hub.served(BLOB) == BLOB_SIZE
    assert [u.state for u in waiting][:1] == ["waiting"] and waiting[-1].state == "done"
    assert "another Hearth window or command" in waiting[0].message
    assert not (first.staging_root / "blob.lock").exists()  # the staging folder is left clean
