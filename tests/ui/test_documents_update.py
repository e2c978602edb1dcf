"""A library indexed by an older recipe (an older chunking, or vectors of another embedder
build) brings itself up to date after the window opens it: an "Updating NAME" job with the
usual row (files done / total, Cancel), searchable meanwhile, once; a cancel or a quit leaves
it whole and the next start carries on.

Real SQLite index and real widgets; the embedder is the bag-of-words stand-in of
test_documents_ui.py, held at a gate so the job can be watched while it runs."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.ui.documents_controller import INDEX_JOB
from tests.ui.test_documents_ui import Opened, WordsEmbedder, _open_documents_page, docs

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]
__all__ = ["docs"]  # the fixture, shared


class CountingEmbedder(WordsEmbedder):
    """Counts the document texts it embeds (the files indexed again)."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__(gate)
        self.documents = 0

    def embed_documents(self, texts):
        self.documents += 1
        return super().embed_documents(texts)


def release_once_cancelled(control, gate: threading.Event) -> None:
    """Open ``gate`` (the file in hand finishes) once ``control`` is cancelled, from another
    thread: a quit then waits for that file and stops before the next."""

    def release() -> None:
        for _ in range(500):
            if control.cancelled:
                break
            time.sleep(0.01)
        gate.set()

    threading.Thread(target=release, daemon=True).start()


def _older_index(path: Path, docs: Path) -> None:
    """Library "Home" of three files, as an index of an older chunking leaves it."""
    opened = Opened(path, WordsEmbedder())
    opened.library.add([docs], "Home")
    opened.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '1' WHERE key = 'chunking'")
    db.commit()
    db.close()


def _start(make_app, model_dir, path: Path, embedder: WordsEmbedder):
    app = make_app()
    app.load(model_dir)
    app.window.documents.library_factory = lambda **_: Opened(path, embedder)
    _prefs, page = _open_documents_page(app)  # the Documents tab opens the library
    return app, page


def _start_on_an_older_index(make_app, model_dir, docs, tmp_path):
    """An index written by an older recipe, and the app opened over it with an embedder that
    waits at ``gate`` on its first call: (path, gate, embedder, app, Documents page)."""
    path = tmp_path / "index.sqlite3"
    _older_index(path, docs)
    gate = threading.Event()
    embedder = CountingEmbedder(gate)
    app, page = _start(make_app, model_dir, path, embedder)
    return path, gate, embedder, app, page


def test_an_older_index_updates_itself_after_open_searchable_meanwhile_and_once(
        make_app, model_dir, docs, tmp_path):
    path, gate, embedder, app, page = _start_on_an_older_index(make_app, model_dir, docs,
                                                               tmp_path)
    documents = app.window.documents
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)  # nobody asked for it
    assert documents.indexing == "Home" and documents.updating
    app.qtbot.waitUntil(lambda: "of 3 files" in page.job_label.text(), timeout=5000)
    assert page.job_label.text().startswith("Updating Home: ")
    assert page.cancel_button.isVisible()
    found = documents.library().search("descale the kettle", ["Home"], top=1)  # meanwhile
    assert Path(found[0].file).name == "kettle.md"
    gate.set()
    app.qtbot.waitUntil(lambda: documents.indexing is None, timeout=10000)
    assert page.job_label.text() == ("Home is up to date: 3 files indexed again by this "
                                     "version of Hearth.")
    assert embedder.documents == 3 and documents.library().out_of_date() == {}
    assert Path(documents.library().search("boiler pressure", ["Home"], top=1)[0].file
                ).name == "boiler.md"
    app.close()
    # the next start finds nothing to do
    again = CountingEmbedder()
    app, page = _start(make_app, model_dir, path, again)
    documents = app.window.documents
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=10000)
    app.qtbot.wait(100)
    assert documents.indexing is None and again.documents == 0
    assert not page.cancel_button.isVisible()


def test_cancel_leaves_it_whole_and_the_next_start_carries_on(
        make_app, model_dir, docs, tmp_path):
    path, gate, embedder, app, page = _start_on_an_older_index(make_app, model_dir, docs,
                                                               tmp_path)
    documents = app.window.documents
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)
    app.qtbot.waitUntil(page.cancel_button.isVisible, timeout=5000)
    app.qtbot.mouseClick(page.cancel_button, Qt.MouseButton.LeftButton)
    gate.set()
    app.qtbot.waitUntil(lambda: documents.indexing is None, timeout=10000)
    assert page.job_label.text().startswith("Updating Home was cancelled")
    library = documents.library()
    assert library.out_of_date() == {"Home": 2}  # the file in hand was finished, whole
    cid = library.index.collection_id("Home")
    assert [f.chunks > 0 for f in library.index.files(cid)] == [True] * 3
    for query, name in (("descale the kettle", "kettle.md"), ("boiler pressure", "boiler.md"),
                        ("water the tomatoes", "garden.txt")):
        assert Path(library.search(query, ["Home"], top=1)[0].file).name == name
    app.close()
    # the next start updates the two left, and only them
    again = CountingEmbedder()
    app, page = _start(make_app, model_dir, path, again)
    documents = app.window.documents
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None
                        and "up to date" in page.job_label.text(), timeout=10000)
    assert page.job_label.text().startswith("Home is up to date: 2 files indexed again")
    assert again.documents == 2 and documents.library().out_of_date() == {}


def test_a_quit_while_it_updates_stops_between_files_and_the_next_start_carries_on(
        make_app, model_dir, docs, tmp_path):
    path, gate, embedder, app, _page = _start_on_an_older_index(make_app, model_dir, docs,
                                                                tmp_path)
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)
    control = app.window.documents.jobs.job(INDEX_JOB).control

    release_once_cancelled(control, gate)
    app.close()
    assert control.cancelled
    assert embedder.documents == 1  # stopped at the next file
    again = CountingEmbedder()
    app, page = _start(make_app, model_dir, path, again)
    documents = app.window.documents
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None
                        and "up to date" in page.job_label.text(), timeout=10000)
    assert again.documents == 2 and documents.library().out_of_date() == {}
