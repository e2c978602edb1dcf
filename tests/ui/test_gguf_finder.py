"""The GGUF import starts from what other apps keep: the finder lists their files and its
Browse… opens the picker in their folder (HOME redirected to a fake tree). The scan runs
off the UI thread: a slow scanner (a test double that waits for the test) leaves the
window responsive, its files fill the list as they come, and closing the dialog stops it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt, QThread, QTimer

from app.models.gguf.locations import FoundGGUF
from app.ui.gguf_import_dialog import SCANNING_TEXT, GGUFFinderDialog
from tests.models.test_gguf_locations import gguf, ollama_model


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_lists_what_it_found_and_picks_one(qtbot, home):
    lm = gguf(home / ".lmstudio/models/pub/Qwen3-4B-GGUF/Qwen3-4B-Q3_K_M.gguf")
    blob = ollama_model(home, "llama3.2", "3b", "ab" * 32)
    dialog = GGUFFinderDialog()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.scanned, timeout=5000)
    texts = [dialog.list.item(i).text() for i in range(dialog.list.count())]
    assert texts[0].startswith("Qwen3-4B-Q3_K_M.gguf · LM Studio")
    assert texts[1].startswith("llama3.2:3b · Ollama")
    assert "LM Studio, Ollama" in dialog.summary.text()
    assert dialog.start_folder == str(home / ".lmstudio/models")
    dialog.list.setCurrentRow(1)
    qtbot.mouseClick(dialog.next_button, Qt.MouseButton.LeftButton)
    assert dialog.chosen == str(blob) and dialog.result() == dialog.DialogCode.Accepted
    assert lm.exists()


def test_browse_starts_in_the_apps_folder(qtbot, home):
    (home / "jan/models").mkdir(parents=True)
    dialog = GGUFFinderDialog()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.scanned, timeout=5000)
    assert dialog.list.count() == 0 and not dialog.next_button.isEnabled()
    assert dialog.summary.text() == "No GGUF files found in the folders of Jan."
    asked = []
    dialog.ask_file = lambda: asked.append(dialog.start_folder) or "/some/other.gguf"
    qtbot.mouseClick(dialog.browse_button, Qt.MouseButton.LeftButton)
    assert asked == [str(home / "jan/models")] and dialog.chosen == "/some/other.gguf"


def test_no_app_folders(qtbot, home):
    dialog = GGUFFinderDialog()
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.scanned, timeout=5000)
    assert dialog.start_folder == "" and "No LM Studio, Ollama" in dialog.summary.text()


class SlowScanner:
    """Finds one file, then waits for the test before the next (a slow disk)."""

    def __init__(self, first: FoundGGUF, second: FoundGGUF) -> None:
        self.items = (first, second)
        self.gate = threading.Event()
        self.threads: list[bool] = []  # whether it ran on the UI thread
        self.released: list[bool] = []
        self.stopped_early = threading.Event()

    def __call__(self, home, *, time_budget_s, stop):
        from PySide6.QtCore import QCoreApplication

        self.threads.append(QThread.currentThread() is QCoreApplication.instance().thread())
        yield self.items[0]
        self.released.append(self.gate.wait(5))
        if stop():
            self.stopped_early.set()
            return
        yield self.items[1]


def _found(home: Path, name: str, app: str) -> FoundGGUF:
    return FoundGGUF(app, name, home / name, 1 << 30)


def test_the_scan_runs_off_the_ui_thread_and_the_list_fills_as_files_come(qtbot, home):
    scanner = SlowScanner(_found(home, "b.gguf", "Jan"), _found(home, "a.gguf", "Jan"))
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(1))
    timer.start(10)
    dialog = GGUFFinderDialog(scanner=scanner)
    qtbot.addWidget(dialog)
    qtbot.waitUntil(lambda: dialog.list.count() == 1, timeout=5000)  # the first, at once
    before = len(ticks)
    qtbot.waitUntil(lambda: len(ticks) > before + 3, timeout=5000)  # the window runs
    assert dialog.summary.text() == "GGUF files found in Jan…" and not dialog.scanned
    shots = os.environ.get("HEARTH_SCREENSHOTS")
    if shots:  # to look at: the list while the scan goes on
        Path(shots).mkdir(parents=True, exist_ok=True)
        dialog.show()
        qtbot.waitExposed(dialog)
        dialog.grab().save(str(Path(shots) / "gguf-finder-scanning.png"))
    assert dialog.next_button.isEnabled() and dialog.list.currentRow() == 0
    assert not scanner.gate.is_set()
    scanner.gate.set()
    qtbot.waitUntil(lambda: dialog.scanned, timeout=5000)
    assert [dialog.list.item(i).text().split(" · ")[0] for i in range(2)] == [
        "a.gguf", "b.gguf"]  # in order as they come
    assert dialog.summary.text() == "GGUF files found in Jan:"
    assert scanner.threads == [False] and scanner.released == [True]
    timer.stop()


def test_closing_the_dialog_stops_the_scan(qtbot, home):
    scanner = SlowScanner(_found(home, "a.gguf", "LM Studio"), _found(home, "b.gguf", "Jan"))
    dialog = GGUFFinderDialog(scanner=scanner)
    qtbot.addWidget(dialog)
    assert dialog.summary.text() == SCANNING_TEXT
    qtbot.waitUntil(lambda: dialog.list.count() == 1, timeout=5000)
    dialog.reject()
    scanner.gate.set()
    assert dialog.scan.join(5)
    assert scanner.stopped_early.is_set() and scanner.released == [True]
