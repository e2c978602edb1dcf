"""File dialogs open in Documents / Downloads, not the working folder, and remember the last
folder of each kind; a Markdown file offered to Import is refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QFileDialog

from app.settings import Settings
from app.ui.file_folders import standard_folder
from app.ui.gguf_import_dialog import GGUFFinderDialog

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


class Asked:
    """Stands in for QFileDialog's static functions: records the folder offered."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.folders: list[str] = []

    def open(self, _parent, _title, folder="", _filters="", *_a, **_k):
        self.folders.append(folder)
        return self.answer, ""

    def save(self, _parent, _title, folder="", _filters="", *_a, **_k):
        self.folders.append(folder)
        return self.answer, ""

    def directory(self, _parent, _title, folder="", *_a, **_k):
        self.folders.append(folder)
        return self.answer


def test_export_starts_in_documents_named_after_the_chat_then_remembers(
        app, monkeypatch, tmp_path):
    app.send("Plan a trip")
    asked = Asked(str(tmp_path / "out" / "mine"))
    (tmp_path / "out").mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", asked.save)
    app.window.export_md_action.trigger()
    documents = standard_folder("export")
    assert Path(asked.folders[0]).parent == documents and documents != Path.cwd()
    assert Path(asked.folders[0]).name == "Plan a trip.md"
    assert (tmp_path / "out" / "mine.md").is_file()
    app.window.export_json_action.trigger()
    assert Path(asked.folders[1]).parent == tmp_path / "out"  # the last export's folder
    assert Settings().get("folder_export") == str(tmp_path / "out")  # kept for next time
    assert Settings().get("folder_import") == ""  # each kind its own


def test_import_refuses_markdown_with_the_reason(app, monkeypatch, tmp_path):
    md = tmp_path / "notes.md"
    md.write_text("# Chat\n\n## You\n\nhello\n", encoding="utf-8")
    asked = Asked(str(md))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", asked.open)
    chats = app.controller.conversations.rowCount()
    app.window.import_action.trigger()
    assert asked.folders == [str(standard_folder("import"))]
    text = app.window.banner.label.text()
    assert app.window.banner.isVisible() and "“notes.md” is a Markdown export" in text
    assert "JSON" in text and app.controller.conversations.rowCount() == chats
    app.window.import_action.trigger()
    assert asked.folders[-1] == str(tmp_path)


def test_the_model_folder_and_gguf_pickers_start_in_downloads_then_remember(
        app, monkeypatch, tmp_path, qtbot):
    settings = app.settings
    asked = Asked(str(tmp_path))
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", asked.directory)
    assert app.window.model_manager.ask_folder() == str(tmp_path)
    assert asked.folders == [str(standard_folder("model"))]
    assert app.window.model_manager.ask_folder() == str(tmp_path)
    assert asked.folders[-1] == str(tmp_path)

    empty_home = tmp_path / "home"  # no LM Studio, Ollama, GPT4All or Jan folders
    empty_home.mkdir()
    finder = GGUFFinderDialog(settings=settings, home=empty_home)
    qtbot.addWidget(finder)
    assert finder.start_folder == str(standard_folder("gguf"))  # no app folders here
    finder.ask_file = lambda: str(tmp_path / "sub" / "model.gguf")
    (tmp_path / "sub").mkdir()
    finder.on_browse()
    again = GGUFFinderDialog(settings=settings, home=empty_home)
    qtbot.addWidget(again)
    assert again.start_folder == str(tmp_path / "sub")
