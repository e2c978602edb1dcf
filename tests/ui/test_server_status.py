"""The main window shows when the Local server runs: its address and live request count in
the status bar, a click opening the Local server tab."""

from __future__ import annotations

import threading

import httpx2
import pytest
from PySide6.QtCore import Qt

from app.engine.engine import Engine
from tests.ui.test_preferences import _free_port

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


class HeldEngine(Engine):
    """The real engine; each reply waits after its first chunk until ``release`` is set."""

    release = threading.Event()

    def chat(self, *args, **kwargs):
        return self._held(super().chat(*args, **kwargs))

    def _held(self, stream):
        for index, chunk in enumerate(stream):
            if index == 1:
                HeldEngine.release.wait(30)
            yield chunk


def test_the_status_bar_shows_the_running_server_and_opens_its_tab(make_app, gqa_model_dir):
    HeldEngine.release = threading.Event()
    app = make_app(lambda path: HeldEngine.load(path))
    app.load(gqa_model_dir)
    window = app.window
    item = window.status.server_button
    assert not item.isVisible()
    port = _free_port()
    app.settings.set("server_port", port)
    with app.qtbot.waitSignal(window.server.started, timeout=10000):
        window.set_setting("server_enabled", True)
    window.resize(1200, 800)
    assert item.isVisible() and item.text() == f"Server 127.0.0.1:{port} · 0 requests"

    answers: list[int] = []

    def ask() -> None:
        reply = httpx2.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=30,
                            json={"model": window.server.model_id,
                                  "max_tokens": 4,
                                  "messages": [{"role": "user", "content": "hi"}]})
        answers.append(reply.status_code)

    client = threading.Thread(target=ask)
    client.start()
    app.qtbot.waitUntil(lambda: item.text().endswith("· 1 request"), timeout=10000)
    HeldEngine.release.set()  # the reply goes on
    client.join(30)
    assert answers == [200]
    app.qtbot.waitUntil(lambda: item.text().endswith("· 0 requests"), timeout=10000)

    window.resize(800, 600)  # a narrow window: the short form, the address in the tooltip
    app.qtbot.waitUntil(lambda: item.text() == f"Server :{port} · 0", timeout=2000)
    assert f"http://127.0.0.1:{port}/v1" in item.toolTip()
    app.qtbot.mouseClick(item, Qt.MouseButton.LeftButton)
    prefs = window.preferences
    app.qtbot.waitExposed(prefs)
    assert prefs.tabs.tabText(prefs.tabs.currentIndex()) == "Local server"
    prefs.close()

    window.set_setting("server_enabled", False)
    assert not item.isVisible()
