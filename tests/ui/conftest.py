"""UI fixtures: the real window and controller over a temp history, with a fake engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QObject

from app.loading import default_loader
from app.paths import history_db_path, models_dir
from app.remote.sources import is_remote_target
from app.settings import Settings
from app.storage.history import History
from app.ui.controller import ChatController
from app.ui.main_window import MainWindow
from app.ui.message_bridge import MessageBridge
from app.ui.model_controller import ModelController
from tests.workers.fake_engine import FakeLoader


def make_model_folder(name: str, display: str | None = None) -> Path:
    folder = models_dir() / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    if display:
        (folder / "hearth-manifest.json").write_text(json.dumps({"name": display}))
    return folder


class OnUiThread(QObject):
    """Calls ``fn`` with a signal's arguments on the UI thread. A plain lambda connected to a
    worker's signal would run on the worker's thread; a QObject's slot is queued to its own."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def on_signal(self, *args) -> None:
        self.fn(*args)


def on_ui_thread(signal, fn) -> OnUiThread:
    """Connect ``fn`` to ``signal`` so that it runs on the UI thread; keep the result alive."""
    receiver = OnUiThread(fn)
    signal.connect(receiver.on_signal)
    return receiver


class App:
    """One app instance: history, settings, bridge, controller and window."""

    def __init__(self, qtbot, loader: FakeLoader) -> None:
        self.qtbot = qtbot
        self.loader = loader
        self.history = History(history_db_path())
        self.settings = Settings()
        # the model names chats in tests/ui/test_chat_titles.py; elsewhere the scripted
        # engine's calls (and its scripts) are the chat's alone
        self.settings.set("chat_titles", "off")
        self.bridge = MessageBridge()
        self.controller = ChatController(self.history, self.settings, self.bridge, loader)
        self.models = ModelController(self.controller, self.settings, self.bridge)
        self.window = MainWindow(self.controller, self.models)
        qtbot.addWidget(self.window)
        self.window.show()
        qtbot.waitExposed(self.window)
        self.closed = False

    def load(self, path: Path) -> None:
        with self.qtbot.waitSignal(self.controller.model_loaded, timeout=5000):
            self.controller.load_model(path)

    def send(self, text: str, wait: bool = True) -> None:
        """Type into the composer and press Enter, like a user."""
        from PySide6.QtCore import Qt

        edit = self.window.composer.edit
        edit.setFocus()
        edit.setPlainText(text)
        self.qtbot.keyClick(edit, Qt.Key.Key_Return)
        if wait:
            self.wait_idle()

    def wait_idle(self, timeout: int = 5000) -> None:
        self.qtbot.waitUntil(lambda: not self.controller.generating, timeout=timeout)

    def rows(self) -> list[tuple[str, str, str]]:
        return [(m.role, m.content, m.status) for m in self.controller.chat_model.messages()]

    def close(self) -> None:
        if not self.closed:
            self.window.close()
            assert not self.controller.host.thread.isRunning()
            assert not self.models.jobs.running
            self.history.close()
            self.closed = True


def remote_loader():
    """A loader that loads remote targets for real and local model folders fake."""
    fake = FakeLoader()

    def loader(path):
        return default_loader(path) if is_remote_target(path) else fake(path)

    return loader


def app_on_remote(make_app, url: str) -> App:
    """The window over :func:`remote_loader` with the first model of the OpenAI-style
    server at ``url`` added as a remote source and picked."""
    app = make_app(remote_loader())
    with app.qtbot.waitSignal(app.models.remotes_listed, timeout=5000) as listed:
        source = app.models.add_remote("Stub", url, "sk-test")
    (listing,) = [e for e in listed.args[0] if e.source.id == source.id]
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        assert app.models.use(listing.models[0].target)
    return app


@pytest.fixture
def loader() -> FakeLoader:
    return FakeLoader()


@pytest.fixture
def model_dir() -> Path:
    return make_model_folder("tiny-model", "Tiny Model")


@pytest.fixture
def make_app(qtbot, loader):
    apps: list[App] = []

    def factory(custom_loader: FakeLoader | None = None) -> App:
        app = App(qtbot, custom_loader or loader)
        apps.append(app)
        return app

    yield factory
    for app in apps:
        app.close()


@pytest.fixture
def app(make_app, model_dir) -> App:
    instance = make_app()
    instance.load(model_dir)
    return instance
