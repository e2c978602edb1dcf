"""Documents in the window: files attached in the composer become chips and Attachment parts
(in the prompt whole when they fit), libraries are made and indexed in Settings ▸ Documents
as a job that Cancel stops, a chat's Libraries menu wires the retriever, and the sources a
reply used are listed under it (a click shows the passage, with "Open file").

The index is the real SQLite one (BM25 + vectors); the embedder is a small bag-of-words
stand-in (the starter embedder's wheel is not on every test machine: tests/documents)."""

from __future__ import annotations

import json
import os
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.chat.parts import Attachment, Source
from app.documents.index import DocumentIndex
from app.documents.library import DocumentLibrary
from app.storage.transfer import export_json
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

DIMS = 64


class WordsEmbedder:
    id = "words-test"
    dims = DIMS

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.gate = gate  # when given, every embedding waits for it (a slow file)
        self.waiting = threading.Event()

    def embed_documents(self, texts):
        if self.gate is not None:
            self.waiting.set()
            self.gate.wait(30)
        return self._vectors(texts)

    def embed_queries(self, texts):
        return self._vectors(texts)

    def _vectors(self, texts):
        out = np.zeros((len(texts), DIMS), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % DIMS] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)


class Opened:
    def __init__(self, path: Path, embedder: WordsEmbedder) -> None:
        self.index = DocumentIndex(path, embedder_id=embedder.id, dims=DIMS)
        self.library = DocumentLibrary(self.index, embedder)

    def close(self) -> None:
        self.index.close()


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _grab(app, widget, path: Path) -> None:
    app.window.chat_view.flush()
    app.qtbot.wait(50)
    assert widget.grab().save(str(path))


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kettle.md").write_text(
        "# Kettle\n\n## Descaling\n\nDescale the kettle monthly with citric acid and "
        "rinse twice.\n", encoding="utf-8")
    (folder / "boiler.md").write_text(
        "# Boiler\n\n## Pressure\n\nThe boiler pressure should read 1.5 bar when cold.\n",
        encoding="utf-8")
    (folder / "garden.txt").write_text("Water the tomatoes every evening in July.\n",
                                       encoding="utf-8")
    return folder


@pytest.fixture
def docs_app(make_app, model_dir, tmp_path):
    app = make_app(FakeLoader(script=["Monthly", ", with citric acid."]))
    app.window.resize(900, 650)
    app.load(model_dir)
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                          WordsEmbedder())
    return app


def _open_documents_page(app):
    app.window.on_preferences()
    prefs = app.window.preferences
    titles = [prefs.tabs.tabText(i) for i in range(prefs.tabs.count())]
    prefs.tabs.setCurrentIndex(titles.index("Documents"))
    return prefs, prefs.tabs.currentWidget()


def test_an_attached_file_is_a_chip_goes_in_whole_and_comes_back(docs_app, docs, tmp_path):
    app = docs_app
    tray = app.window.attachments
    tray.ask_files = lambda: [docs / "kettle.md"]
    app.qtbot.mouseClick(tray.attach_button, Qt.MouseButton.LeftButton)
    assert tray.chip_names() == ["kettle.md  ✕"]
    app.window.composer.edit.files_added.emit([docs / "garden.txt"])  # a drop or a paste
    assert len(tray.chip_names()) == 2
    tray.remove(docs / "garden.txt")
    app.send("How often do I descale?")
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)  # read off the UI thread, then sent
    assert tray.chip_names() == []
    user = app.history.active_path(app.controller.current_id)[0]
    (part,) = [p for p in user.parts if isinstance(p, Attachment)]
    assert part.name == "kettle.md" and "citric acid" in part.text and len(part.sha256) == 64
    prompt = app.loader.last.calls[-1]
    assert prompt[-1].content.startswith("[File: kettle.md]\nKettle › Descaling\n\nDescale")
    assert prompt[-1].content.endswith("How often do I descale?")
    widget = app.window.chat_view.message_widget(0)
    assert "kettle.md" in " ".join(b.text() for b in widget.card.findChildren(
        type(tray.attach_button)) if b.objectName() == "fileChip")
    # exported with the message, and shown again when the chat is reopened
    exported = json.loads(export_json(app.history, app.controller.current_id))
    assert exported["messages"][0]["parts"][0]["type"] == "attachment"
    conv = app.controller.current_id
    app.controller.new_conversation()
    app.controller.open_conversation(conv)
    chips = [b for b in app.window.chat_view.message_widget(0).findChildren(
        type(tray.attach_button)) if b.objectName() == "fileChip"]
    assert [c.text() for c in chips] == ["kettle.md"]
    _grab(app, app.window, _shots(tmp_path) / "documents-attachment-900x650.png")


def test_a_file_that_does_not_fit_is_searched_instead(docs_app, tmp_path):
    app = docs_app
    big = tmp_path / "manual.txt"
    big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise."
                               for i in range(600)), encoding="utf-8")  # ~27k chars
    app.window.attachments.add([big])
    app.send("Which way does valve 7 open?", wait=False)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=15000)
    stored = app.history.active_path(app.controller.current_id)
    (part,) = [p for p in stored[0].parts if isinstance(p, Attachment)]
    assert part.text == ""  # not in the prompt whole
    sources = [p for p in stored[0].parts if isinstance(p, Source)]
    assert sources and all(s.document == "manual.txt" for s in sources)
    assert "valve" in app.loader.last.calls[-1][-1].content
    # each source's snippet is the passage's sentence with the question's words, whole
    listing = app.window.chat_view.message_widget(1).sources
    lines = [b.line for b, s in zip(listing.buttons, listing.sources, strict=True)
             if "valve number 7 " in s.text]
    assert lines and all(line.endswith(" — Section 7: the valve number 7 opens clockwise.")
                         for line in lines)


def test_libraries_index_as_a_job_and_a_chat_lists_the_sources_it_used(docs_app, docs,
                                                                       tmp_path):
    app = docs_app
    prefs, page = _open_documents_page(app)
    prefs.resize(800, 600)
    page.name_edit.setText("Home")
    page.ask_folder = lambda: [docs]
    app.qtbot.mouseClick(page.add_folder_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(lambda: page.library_item("Home") is not None
                        and app.window.documents.indexing is None, timeout=15000)
    item = page.library_item("Home")
    assert item.text(1) == "3" and int(item.text(2)) >= 3
    assert "3 files indexed" in page.job_label.text()
    _grab(app, prefs, _shots(tmp_path) / "settings-documents-800x600.png")
    prefs.close()

    button = app.window.libraries_button
    assert button.text() == "Libraries: off ▾" and app.controller.retriever is None
    button.rebuild()
    action = next(a for a in button.menu_.actions() if a.text().startswith("Home"))
    action.setChecked(True)
    assert button.text() == "Libraries: 1 ▾" and app.controller.retriever is not None
    app.send("How often should the kettle be descaled with citric acid?")
    reply = app.window.chat_view.message_widget(1)
    assert reply.sources.isVisible()
    assert reply.sources.buttons[0].text().startswith("[1] kettle.md · Kettle › Descaling — ")
    conv = app.controller.current_id
    assert app.window.documents.choices.get(conv) == {"Home"}
    _grab(app, app.window, _shots(tmp_path) / "documents-sources-900x650.png")
    app.qtbot.mouseClick(reply.sources.buttons[0], Qt.MouseButton.LeftButton)
    dialog = app.window.chat_view.passage
    assert "citric acid" in dialog.text.toPlainText()
    opened = []
    dialog.open_url = opened.append
    app.qtbot.mouseClick(dialog.open_button, Qt.MouseButton.LeftButton)
    assert [u.toLocalFile() for u in opened] == [str(docs / "kettle.md")]
    _grab(app, dialog, _shots(tmp_path) / "documents-passage.png")
    dialog.close()
    # a new chat searches nothing until it is switched on
    app.controller.new_conversation()
    assert app.controller.retriever is None and button.text() == "Libraries: off ▾"
    app.controller.open_conversation(conv)
    assert app.controller.retriever is not None
    assert app.window.chat_view.message_widget(1).sources.buttons  # shown again


def test_cancel_stops_indexing_between_files(make_app, model_dir, docs, tmp_path):
    app = make_app()
    app.load(model_dir)
    gate = threading.Event()
    embedder = WordsEmbedder(gate)
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "i.sqlite3", embedder)
    _prefs, page = _open_documents_page(app)
    page.name_edit.setText("Slow")
    page.ask_files = lambda: sorted(docs.iterdir())
    app.qtbot.mouseClick(page.add_files_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)  # the first file embeds
    app.qtbot.waitUntil(page.cancel_button.isVisible, timeout=5000)
    app.qtbot.waitUntil(lambda: "of 3 files" in page.job_label.text(), timeout=5000)
    app.qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()
    app.qtbot.waitUntil(lambda: app.window.documents.indexing is None, timeout=10000)
    assert "cancelled" in page.job_label.text()
    assert not page.cancel_button.isVisible()
    item = page.library_item("Slow")
    assert item is not None and item.text(1) == "1"  # the file done stays, whole


def test_the_chat_settings_and_the_composer_toggle_one_choice(docs_app, docs, tmp_path):
    app = docs_app
    documents = app.window.documents
    listing, button = app.window.libraries_list, app.window.libraries_button
    assert not documents.is_open
    app.window.settings_panel.show()
    assert listing.show_button.isVisibleTo(app.window.settings_panel)  # not opened yet
    documents.index("Home", [docs])
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None,
                        timeout=15000)
    documents.index("Garden", [docs / "garden.txt"])
    app.qtbot.waitUntil(lambda: documents.indexing is None and set(listing.boxes) == {
        "Home", "Garden"}, timeout=15000)
    assert not listing.show_button.isVisibleTo(app.window.settings_panel)
    # the chat settings' box → the composer's menu
    listing.boxes["Home"].click()
    assert button.text() == "Libraries: 1 ▾" and app.controller.retriever is not None
    button.rebuild()
    checked = {a.text().split(" (")[0] for a in button.menu_.actions() if a.isChecked()}
    assert checked == {"Home"}
    # the composer's menu → the chat settings' box
    garden = next(a for a in button.menu_.actions() if a.text().startswith("Garden"))
    garden.setChecked(True)
    assert listing.checked() == {"Home", "Garden"} and button.text() == "Libraries: 2 ▾"
    app.send("How often should the kettle be descaled?")
    conv = app.controller.current_id
    assert documents.choices.get(conv) == {"Home", "Garden"}  # one stored fact
    listing.boxes["Garden"].click()
    assert documents.choices.get(conv) == {"Home"} and button.text() == "Libraries: 1 ▾"
    app.window.resize(1200, 800)
    app.window.panel_action.setChecked(True)
    app.window.on_toggle_panel(True)
    _grab(app, app.window, _shots(tmp_path) / "chat-settings-libraries-1200x800.png")
    app.window.resize(800, 600)
    app.window.panel_action.setChecked(True)
    app.window.on_toggle_panel(True)  # View ▸ Chat settings at a narrow width
    app.window.settings_panel.scroll.ensureWidgetVisible(listing)
    reply = app.window.chat_view.message_widget(1)
    app.qtbot.waitUntil(lambda: reply.sources.buttons[0].text().endswith("…"), timeout=3000)
    assert reply.sources.buttons[0].line.startswith("[1] kettle.md")  # cut, not clipped
    _grab(app, app.window, _shots(tmp_path) / "chat-settings-libraries-800x600.png")
    app.controller.new_conversation()
    assert listing.checked() == set() and button.text() == "Libraries: off ▾"
    app.controller.open_conversation(conv)
    assert listing.checked() == {"Home"}


class OtherWords(WordsEmbedder):
    id = "words-b"
    dims = 32

    def _vectors(self, texts):
        return super()._vectors(texts)[:, :32] + 1e-3


class FakeStore:
    """The embedders folder as the page sees it: "words-b" must be downloaded first."""

    def __init__(self) -> None:
        from app.documents.embedders import EmbedderChoice

        self.here = {"words-test"}
        self.downloads: list[str] = []
        self.choice = EmbedderChoice

    def choices(self):
        return [self.choice("words-test", "Words", DIMS, True),
                self.choice("words-b", "Other words", 32, "words-b" in self.here)]

    def is_available(self, embedder_id: str) -> bool:
        return embedder_id in self.here

    def ensure(self, embedder_id, *, progress=None, control=None):
        from app.models.downloader import DownloadProgress

        progress(DownloadProgress(embedder_id, "downloading", 5, 10))
        self.downloads.append(embedder_id)
        self.here.add(embedder_id)


def test_a_librarys_embedder_is_shown_and_changing_it_asks_then_indexes_again(
        make_app, model_dir, docs, tmp_path):
    app = make_app()
    app.load(model_dir)
    other = OtherWords()
    opened = Opened(tmp_path / "i.sqlite3", WordsEmbedder())
    opened.library.embedders = lambda embedder_id: other
    store = FakeStore()
    app.window.documents.library_factory = lambda **_: opened
    app.window.documents.embedder_store = store
    prefs, page = _open_documents_page(app)
    assert [page.embedder_box.itemText(i) for i in range(page.embedder_box.count())] == [
        "Words", "Other words"]
    page.name_edit.setText("Home")
    page.ask_folder = lambda: [docs]
    app.qtbot.mouseClick(page.add_folder_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(lambda: page.library_item("Home") is not None
                        and app.window.documents.indexing is None, timeout=15000)
    assert page.library_item("Home").text(3) == "Words"
    page.tree.setCurrentItem(page.library_item("Home"))
    assert page.chosen_embedder() == "words-test"

    asked = []
    page.confirm_reindex = lambda name, embedder: asked.append((name, embedder)) or False
    page.embedder_box.setCurrentIndex(1)
    page.embedder_box.activated.emit(1)
    assert asked == [("Home", "Other words")] and page.chosen_embedder() == "words-test"
    assert app.window.documents.indexing is None and store.downloads == []

    page.confirm_reindex = lambda name, embedder: True
    page.embedder_box.setCurrentIndex(1)
    page.embedder_box.activated.emit(1)
    app.qtbot.waitUntil(lambda: app.window.documents.indexing is None
                        and page.library_item("Home").text(3) == "Other words", timeout=15000)
    assert store.downloads == ["words-b"]
    assert opened.library.embedder_of("Home") == "words-b"
    assert page.library_item("Home").text(1) == "3"  # indexed again with the new one
    assert "3 files indexed" in page.job_label.text()
    prefs.close()


def test_the_embedder_box_offers_the_catalogs_embedders_with_size_and_licence(docs_app):
    prefs, page = _open_documents_page(docs_app)
    box = page.embedder_box
    labels = [box.itemText(i) for i in range(box.count())]
    assert [box.itemData(i) for i in range(box.count())][1:] == [
        "bge-small-en-v1.5", "multilingual-e5-small", "embeddinggemma-300m",
        "nomic-embed-text-v1.5"]
    assert labels[3] == "EmbeddingGemma 300M (downloads 1,240 MB)"
    tip = box.itemData(3, Qt.ItemDataRole.ToolTipRole)
    assert "onnx-community/embeddinggemma-300m-ONNX" in tip
    assert "https://ai.google.dev/gemma/terms" in tip
    prefs.close()
