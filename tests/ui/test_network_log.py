"""The network activity dialog over a real log fed by the real socket guard."""

from __future__ import annotations

import socket

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.network import (
    NetworkLog,
    OfflineBlockedError,
    feature,
    install_guard,
    set_offline,
    uninstall_guard,
)
from app.ui.network_log import NetworkLogDialog, NetworkLogModel


@pytest.fixture
def offline_guard(monkeypatch):
    def never(sock, address):  # the guard must refuse first: reaching this fails the test
        raise AssertionError(f"a test connection reached the real connect: {address}")

    uninstall_guard()
    monkeypatch.setattr(socket.socket, "connect", never)
    guard = install_guard(NetworkLog(capacity=20))
    set_offline(True, note=False)  # as a start in offline mode sets it (no switch to show)
    yield guard
    set_offline(False)
    uninstall_guard()


def blocked_attempt(port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with feature("model download"), pytest.raises(OfflineBlockedError):
            sock.connect(("192.0.2.1", port))
    finally:
        sock.close()


def test_model_passes_the_model_tester(qtmodeltester, offline_guard):
    blocked_attempt(443)
    blocked_attempt(80)
    model = NetworkLogModel(offline_guard.log)
    qtmodeltester.check(model, force_py=True)
    assert model.rowCount() == 2
    assert model.index(0, 2).data() == "192.0.2.1:443"
    assert model.index(0, 3).data() == "blocked"
    assert model.index(0, 1).data() == "model download"
    assert model.index(0, 3).data(Qt.ItemDataRole.ForegroundRole) is not None
    assert model.headerData(2, Qt.Orientation.Horizontal) == "Host:port"


def test_dialog_refreshes_live_and_copies(qtbot, offline_guard):
    dialog = NetworkLogDialog(offline_guard.log)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.model.rowCount() == 0
    assert "Offline mode is on" in dialog.summary.text()
    blocked_attempt(8443)
    qtbot.waitUntil(lambda: dialog.model.rowCount() == 1, timeout=3000)
    assert "1 blocked" in dialog.summary.text()
    qtbot.mouseClick(dialog.copy_button, Qt.MouseButton.LeftButton)
    text = QGuiApplication.clipboard().text()
    assert text.splitlines()[0] == "time\tfeature\ttarget\tverdict\tdetail"
    assert "model download\t192.0.2.1:8443\tblocked\tconnect: offline mode is on" in text


def test_the_log_shows_offline_mode_switched_off_and_on_between_attempts(offline_guard):
    blocked_attempt(443)
    set_offline(False)
    set_offline(False)  # no change: no second row
    set_offline(True)
    blocked_attempt(80)
    model = NetworkLogModel(offline_guard.log)
    rows = [tuple(model.index(r, c).data() for c in range(5)) for r in range(model.rowCount())]
    assert [(row[1], row[2], row[3]) for row in rows] == [
        ("model download", "192.0.2.1:443", "blocked"),
        ("offline mode", "", "turned off"),
        ("offline mode", "", "turned on"),
        ("model download", "192.0.2.1:80", "blocked"),
    ]
    assert "offline mode\t\tturned off" in offline_guard.log.as_text()
    assert len(offline_guard.log.blocked()) == 2  # switches are no attempts
