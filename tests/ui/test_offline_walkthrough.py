"""Offline mode, walked through the real window (issue #13): with the ``offline`` setting on,
start the app, chat, open the model manager, search the Hub, download a model. Zero attempts
reach the network, each is in the Network activity log as blocked under its feature's name,
and the user reads a sentence saying offline mode blocked it.

Two witnesses prove "zero attempts reach the network": a real TCP listener on this machine's
own non-loopback address, which the Hub endpoint setting points at (a connection that got
through would sit in its accept queue), and a tripwire under the socket guard that records
any non-loopback connect, send or name lookup the guard let pass.

The dialog is rendered to ``network-log-offline.png`` in $HEARTH_SCREENSHOTS when set (for
people to look at), else in the test's temp folder.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

import pytest
from huggingface_hub import constants as hub_constants
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.network import NetworkLog, install_guard, is_offline, startup, uninstall_guard
from app.network.offline import set_offline
from app.settings import Settings
from app.ui.model_manager_model import RowRole
from app.ui.network_log import NetworkLogDialog
from tests.models.hub_server import allow_hub_requests
from tests.network.tripwire import install_tripwire

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def own_address() -> str | None:
    """This machine's IPv4 address on its route outwards (a UDP connect picks the interface
    and sends nothing); None without one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only the routing table is asked
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if ipaddress.ip_address(address).is_loopback else address


@pytest.fixture
def listener():
    """A listening TCP socket on a non-loopback address of this machine."""
    uninstall_guard()  # the probe must not land in another test's log
    address = own_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to listen on")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()


def accepted(sock: socket.socket) -> int:
    """How many connections reached the listener (the kernel queues them without accept)."""
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.fixture
def tripwire(monkeypatch, listener):
    """Under the guard: records every non-loopback attempt that got past it. A connect to the
    listener goes on (so the listener sees it too); anything else is refused here."""
    uninstall_guard()
    return install_tripwire(monkeypatch, let_through=tuple(listener.getsockname()[:2]))


@pytest.fixture
def offline_start(monkeypatch, listener, tripwire):
    """The ``offline`` setting on and the Hub endpoint on the listener, then the process
    start-up the app runs (``app.network.startup``), over a fresh log. The test session's
    own HF_HUB_OFFLINE=1 (tests/conftest.py) is lifted first: only the setting switches the
    Hub libraries off here."""
    monkeypatch.delenv("HEARTH_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    allow_hub_requests(monkeypatch)
    host, port = listener.getsockname()
    settings = Settings()
    settings.set("offline", True)
    settings.set("hub_endpoint", f"http://{host}:{port}")
    settings.save()
    install_guard(NetworkLog(capacity=100))
    guard = startup([])
    yield guard
    set_offline(False)
    uninstall_guard()


def _screenshot_folder(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_offline_walkthrough_reaches_nothing_and_logs_each_refusal(
    qtbot, make_app, model_dir, listener, tripwire, offline_start, tmp_path
):
    assert is_offline()
    assert hub_constants.HF_HUB_OFFLINE is True  # switched by the setting, not by the harness
    target = "{}:{}".format(*listener.getsockname())
    app = make_app()
    messages: list[tuple[str, str]] = []
    app.bridge.message_shown.connect(lambda level, text: messages.append((level, text)))

    # the user opens the Network activity log first (Help menu) and watches it live
    app.window.network_action.trigger()
    dialog = next(w for w in QApplication.topLevelWidgets()
                  if isinstance(w, NetworkLogDialog) and w.isVisible())
    qtbot.waitExposed(dialog)
    assert dialog.model.rowCount() == 0

    # chat: the local model answers as ever
    app.load(model_dir)
    app.send("Hello there")
    [question, reply] = app.rows()
    assert question == ("user", "Hello there", "complete")
    assert reply[0] == "assistant" and reply[1] and reply[2] == "complete"

    # the model manager, from the window's own action
    app.window.models_action.trigger()
    panel = app.window.model_manager
    qtbot.waitExposed(panel)

    # search the Hub
    panel.tabs.setCurrentIndex(1)
    panel.search_edit.setText("phi")
    qtbot.mouseClick(panel.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.search_status.text() != "Searching…" or bool(tripwire),
                    timeout=5000)
    assert tripwire == []  # (online, the search would sit waiting on the listener)
    # the reason is said in the dialog itself
    assert panel.search_status.text().startswith(f"Cannot reach http://{target}/api/models?")
    assert "offline mode is on" in panel.search_status.text()

    # download the first catalog model
    panel.tabs.setCurrentIndex(0)
    assert panel.catalog_model.rowCount() > 0
    panel.catalog_view.setCurrentIndex(panel.catalog_model.index(0, 0))
    entry = panel.catalog_view.currentIndex().data(RowRole).entry
    qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)

    def answered() -> bool:
        return (len(messages) >= 1 and not app.models.jobs.pending()) or bool(tripwire)

    qtbot.waitUntil(answered, timeout=5000)

    # nothing reached the network
    assert tripwire == []
    assert accepted(listener) == 0

    # the user was told, in a sentence, for each attempt (the search in its dialog)
    errors = [text for level, text in messages if level == "error"]
    assert len(errors) == 1, messages
    for text in [*errors, panel.search_status.text()]:
        assert "offline mode is on" in text and "Traceback" not in text
    assert panel.search_status.text().startswith(
        f"Cannot reach http://{target}/api/models?search=phi")
    assert errors[0].startswith(f"Cannot reach http://{target}/api/models/{entry.repo}/")
    assert app.window.banner.text() == errors[0]  # shown where the user looks

    # the log lists each attempt as blocked, under its feature's name
    log = offline_start.log
    assert [e for e in log.entries() if e.allowed] == []
    assert [(e.feature, e.target, e.kind, e.reason) for e in log.blocked()] == [
        ("Hub search", target, "request", "offline mode is on"),
        ("model download", target, "request", "offline mode is on"),
    ]

    # and so does the open dialog, each row readable whole (not "20…", "bloc…")
    qtbot.waitUntil(lambda: dialog.model.rowCount() == 2, timeout=3000)
    for column in range(4):  # the last one stretches
        assert dialog.table.columnWidth(column) >= dialog.table.sizeHintForColumn(column)
    rows = [tuple(dialog.model.index(r, c).data() for c in range(5))
            for r in range(dialog.model.rowCount())]
    assert {(row[1], row[2], row[3]) for row in rows} == {
        ("Hub search", target, "blocked"), ("model download", target, "blocked")}
    assert dialog.summary.text().startswith("Offline mode is on")
    assert "2 attempts shown, 2 blocked" in dialog.summary.text()
    image = dialog.grab().toImage()
    assert not image.isNull() and image.width() >= 600
    assert image.save(str(_screenshot_folder(tmp_path) / "network-log-offline.png"))
    dialog.close()
