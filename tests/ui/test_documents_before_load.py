"""A file sent while the model still loads is put in the prompt whole or searched by the
same rule as one sent with the model loaded (half the context left, the answering model's):
its files are read at once, and the rule is applied when the model is ready. Its chip says
what happened ("· searched" only on a file that was searched).

The model's load waits for the test's go-ahead (``GatedLoader``), so the files are always
read before the context is known."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.chat.parts import Attachment
from tests.ui.test_documents_threads import chip_texts
from tests.ui.test_documents_ui import Opened, WordsEmbedder
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


class GatedLoader(FakeLoader):
    """A FakeLoader whose load waits for ``gate`` (the model is "still loading")."""

    def __init__(self, **engine) -> None:
        super().__init__(**engine)
        self.gate = threading.Event()

    def __call__(self, path: Path):
        self.gate.wait(30)
        return super().__call__(path)


@pytest.fixture
def loading(make_app, model_dir, tmp_path):
    """The window with a model chosen and still loading (nothing loaded before)."""
    app = make_app(GatedLoader())
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                          WordsEmbedder())
    assert app.controller.load_model(model_dir)
    return app


def _send_before_load(app, path: Path, question: str) -> None:
    app.window.attachments.add([path])
    app.send(question, wait=False)
    app.qtbot.waitUntil(lambda: not app.window.documents.reading, timeout=10000)
    assert app.controller.model_info is None  # read while the model still loads
    assert app.controller.queued and app.controller.busy_what == "waiting"
    assert "Waiting for the model" in app.window.composer.edit.placeholderText()
    app.window.chat_view.flush()
    widget = app.window.chat_view.message_widget(0)
    assert widget.status_note.text() == "waiting for the model to load…"
    assert chip_texts(widget) == [path.name]  # read; not "· reading…", not "· searched"
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or path.parent)
    folder.mkdir(parents=True, exist_ok=True)
    app.window.resize(800, 600)
    app.qtbot.wait(50)
    assert app.window.grab().save(str(folder / f"files-wait-for-model-{path.stem}.png"))
    app.loader.gate.set()
    app.qtbot.waitUntil(lambda: app.controller.model_info is not None, timeout=10000)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=15000)


def _chips(app) -> list[str]:
    app.window.chat_view.flush()
    return chip_texts(app.window.chat_view.message_widget(0))


def test_a_small_file_sent_while_the_model_loads_goes_in_whole(loading, tmp_path):
    app = loading
    kettle = tmp_path / "kettle.md"
    kettle.write_text("# Kettle\n\nDescale the kettle monthly with citric acid.\n",
                      encoding="utf-8")
    _send_before_load(app, kettle, "How often do I descale?")
    user = app.history.active_path(app.controller.current_id)[0]
    (part,) = [p for p in user.parts if isinstance(p, Attachment)]
    assert "citric acid" in part.text  # whole, as with the model loaded
    prompt = app.loader.last.calls[-1]
    assert prompt[-1].content.startswith("[File: kettle.md]")
    assert _chips(app) == ["kettle.md"]  # no "· searched": it was not


def test_a_long_file_sent_while_the_model_loads_is_searched_and_says_so(loading, tmp_path):
    app = loading
    big = tmp_path / "manual.txt"
    big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise."
                               for i in range(600)), encoding="utf-8")  # ~27k chars > 2k ctx
    _send_before_load(app, big, "Which way does valve 7 open?")
    user = app.history.active_path(app.controller.current_id)[0]
    (part,) = [p for p in user.parts if isinstance(p, Attachment)]
    assert part.text == ""
    assert "valve" in app.loader.last.calls[-1][-1].content
    assert _chips(app) == ["manual.txt · searched"]


def test_stop_while_the_read_files_wait_for_the_model_leaves_the_message_unsent(loading,
                                                                               tmp_path):
    app = loading
    note = tmp_path / "note.txt"
    note.write_text("The kettle is silver.\n", encoding="utf-8")
    app.window.attachments.add([note])
    app.send("What colour is the kettle?", wait=False)
    app.qtbot.waitUntil(lambda: not app.window.documents.reading, timeout=10000)
    app.qtbot.keyClick(app.window.composer.edit, Qt.Key.Key_Escape)
    assert not app.controller.generating
    app.loader.gate.set()
    app.qtbot.waitUntil(lambda: app.controller.model_info is not None, timeout=10000)
    app.qtbot.wait(100)
    path = app.history.active_path(app.controller.current_id)
    assert [(m.role, m.content) for m in path] == [("user", "What colour is the kettle?")]
    assert "stopped" in path[0].provenance["unsent"]
