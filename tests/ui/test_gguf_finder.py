"""The GGUF import starts from what other apps keep: the finder lists their files and its
Browse… opens the picker in their folder (HOME redirected to a fake tree)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.ui.gguf_import_dialog import GGUFFinderDialog
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
    assert dialog.list.count() == 0 and not dialog.next_button.isEnabled()
    assert dialog.summary.text() == "No GGUF files found in the folders of Jan."
    asked = []
    dialog.ask_file = lambda: asked.append(dialog.start_folder) or "/some/other.gguf"
    qtbot.mouseClick(dialog.browse_button, Qt.MouseButton.LeftButton)
    assert asked == [str(home / "jan/models")] and dialog.chosen == "/some/other.gguf"


def test_no_app_folders(qtbot, home):
    dialog = GGUFFinderDialog()
    qtbot.addWidget(dialog)
    assert dialog.start_folder == "" and "No LM Studio, Ollama" in dialog.summary.text()
