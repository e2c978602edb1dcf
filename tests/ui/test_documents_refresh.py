"""A library keeps itself in step with its folders: when the app starts and when a chat that
uses it sends (at most once per interval), a walk + stat finds what changed; a deleted
file's passages drop out before the answer searches, changed and new files are indexed
again by an "Updating NAME" job, and a touched-but-identical file is not embedded again.

Real SQLite index, real files in tmp_path, real widgets; the embedder is the bag-of-words
stand-in of test_documents_ui.py (counting the files it embeds, held at a gate so the job
can be watched while it runs)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from app.documents.attach import chat_collection
from app.documents.library import DocumentLibrary
from app.ui.documents_controller import INDEX_JOB
from tests.ui.test_documents_ui import Opened, WordsEmbedder, _open_documents_page, docs
from tests.ui.test_documents_update import CountingEmbedder, release_once_cancelled

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]
__all__ = ["docs"]  # the fixture, shared


def _indexed(path: Path, docs: Path) -> None:
    """Library "Home" of kettle.md, boiler.md and garden.txt, indexed earlier."""
    opened = Opened(path, WordsEmbedder())
    opened.library.add([docs], "Home")
    opened.close()


def _change(docs: Path) -> None:
    """Edit one file, delete one, add one, and touch one without changing it."""
    (docs / "kettle.md").write_text(
        "# Kettle\n\n## Descaling\n\nDescale the kettle weekly with white vinegar "
        "overnight.\n", encoding="utf-8")
    (docs / "boiler.md").unlink()
    (docs / "fridge.md").write_text(
        "# Fridge\n\n## Defrosting\n\nDefrost the freezer drawer every spring.\n",
        encoding="utf-8")
    garden = docs / "garden.txt"
    st = garden.stat()
    os.utime(garden, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def _files(library: DocumentLibrary, query: str) -> list[str]:
    return [Path(p.file).name for p in library.search(query, ["Home"], top=5)]


def _counting_walks(library: DocumentLibrary) -> list[str]:
    """The names ``library.changes`` walked, in order (the library's own method, counted)."""
    walked: list[str] = []
    real = library.changes

    def changes(name: str):
        walked.append(name)
        return real(name)

    library.changes = changes
    return walked


def _started(make_app, model_dir, path: Path, embedder=None, *, factory=None, clock=None):
    """The app over the index at ``path`` (its embedder ``embedder``, or ``factory`` opening
    the library), after what launch.py runs once the window shows: (app, documents)."""
    app = make_app()
    app.load(model_dir)
    documents = app.window.documents
    if clock is not None:
        documents.watch.clock = clock
    documents.library_factory = factory or (lambda **_: Opened(path, embedder))
    documents.index_path = path
    documents.at_start()
    return app, documents


def test_at_start_a_changed_folder_updates_itself_and_a_deleted_file_drops_out_first(
        make_app, model_dir, docs, tmp_path):
    path = tmp_path / "index.sqlite3"
    _indexed(path, docs)
    _change(docs)  # while Hearth was closed
    gate = threading.Event()
    embedder = CountingEmbedder(gate)
    app, documents = _started(make_app, model_dir, path, embedder)
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)  # nobody asked for it
    assert documents.indexing == "Home" and documents.updating
    app.qtbot.waitUntil(lambda: app.window.status.currentMessage().startswith(
        "Updating Home: "), timeout=5000)
    assert "of 3 files" in app.window.status.currentMessage()
    library = documents.library()
    assert "boiler.md" not in _files(library, "boiler pressure cold bar")  # gone already
    _prefs, page = _open_documents_page(app)
    gate.set()
    app.qtbot.waitUntil(lambda: documents.indexing is None, timeout=10000)
    assert page.job_label.text() == ("Home is up to date with its folders: 2 changed files "
                                     "indexed again, 1 unchanged.")
    assert embedder.documents == 2  # kettle.md and fridge.md; garden.txt was only touched
    assert _files(library, "white vinegar overnight")[0] == "kettle.md"
    assert "citric" not in " ".join(p.text for p in library.search("citric acid", ["Home"]))
    assert _files(library, "defrost the freezer drawer")[0] == "fridge.md"
    cid = library.index.collection_id("Home")
    assert sorted(Path(f.path).name for f in library.index.files(cid)) == [
        "fridge.md", "garden.txt", "kettle.md"]
    app.close()
    # the touched file's new stat was recorded: the next start walks and finds nothing
    again = CountingEmbedder()
    app, documents = _started(make_app, model_dir, path, again)
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=10000)
    app.qtbot.wait(100)
    assert documents.indexing is None and again.documents == 0


def test_a_send_in_a_chat_with_the_library_checks_its_folders_once_per_interval(
        make_app, model_dir, docs, tmp_path):
    path = tmp_path / "index.sqlite3"
    _indexed(path, docs)
    embedder = CountingEmbedder()
    now = [1000.0]
    app, documents = _started(make_app, model_dir, path, embedder, clock=lambda: now[0])
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=10000)
    library = documents.library()
    walked = _counting_walks(library)
    assert documents.indexing is None and embedder.documents == 0  # nothing changed
    _change(docs)  # while Hearth runs
    now[0] += documents.watch.interval_s  # the check at start is one interval old
    documents.set_library_on("Home", True)
    # the check queues the update of kettle.md and fridge.md, which runs on the documents
    # thread beside this turn's search (the index holds it off until the search is done)
    app.send("What does the boiler pressure read when cold?")
    assert [r[2] for r in app.rows()] == ["complete", "complete"]
    assert walked == ["Home"]
    reply = app.window.chat_view.message_widget(1)
    shown = [b.text() for b in reply.sources.buttons]
    assert shown and not any("boiler.md" in s for s in shown)  # dropped before it searched
    app.qtbot.waitUntil(lambda: documents.indexing is None and embedder.documents == 2,
                        timeout=10000)
    assert _files(library, "white vinegar overnight")[0] == "kettle.md"
    assert _files(library, "defrost the freezer drawer")[0] == "fridge.md"
    # a second send within the interval walks nothing, though a file changed again
    (docs / "fridge.md").unlink()
    now[0] += documents.watch.interval_s / 2
    app.send("How do I defrost the freezer drawer?")
    assert walked == ["Home"] and documents.indexing is None
    # once the interval has passed, the next send walks again and the file drops out
    now[0] += documents.watch.interval_s
    app.send("How do I defrost the freezer drawer, again?")
    assert walked == ["Home", "Home"]
    assert "fridge.md" not in _files(library, "defrost the freezer drawer")
    assert embedder.documents == 2


def test_a_quit_while_changed_files_update_stops_and_the_next_start_carries_on(
        make_app, model_dir, docs, tmp_path):
    path = tmp_path / "index.sqlite3"
    _indexed(path, docs)
    _change(docs)
    gate = threading.Event()
    embedder = CountingEmbedder(gate)
    app, documents = _started(make_app, model_dir, path, embedder)
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)
    control = documents.jobs.job(INDEX_JOB).control

    release_once_cancelled(control, gate)
    app.close()
    assert control.cancelled and embedder.documents == 1
    again = CountingEmbedder()
    app, documents = _started(make_app, model_dir, path, again)
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None
                        and again.documents == 1, timeout=10000)
    library = documents.library()
    assert _files(library, "white vinegar overnight")[0] == "kettle.md"
    assert _files(library, "defrost the freezer drawer")[0] == "fridge.md"


def test_quitting_while_the_check_at_start_walks_exits_cleanly(
        make_app, model_dir, docs, tmp_path):
    path = tmp_path / "index.sqlite3"
    _indexed(path, docs)
    _change(docs)
    walking, gate, closed = threading.Event(), threading.Event(), []
    embedder = CountingEmbedder()

    def factory(**_):
        opened = Opened(path, embedder)
        real_changes, real_close = opened.library.changes, opened.close

        def changes(name):  # a slow walk (a big folder on a slow disk)
            walking.set()
            gate.wait(30)
            return real_changes(name)

        def close():
            closed.append(True)
            real_close()

        opened.library.changes, opened.close = changes, close
        return opened

    app, documents = _started(make_app, model_dir, path, factory=factory)
    app.qtbot.waitUntil(walking.is_set, timeout=10000)
    control = documents.jobs.job("open-library").control

    release_once_cancelled(control, gate)
    app.close()  # the window's threads are all stopped (App.close asserts it)
    assert control.cancelled and closed == [True]  # the late library was closed
    assert embedder.documents == 0 and documents.indexing is None


def _counting_factory(path: Path, calls: list[int]):
    """Opens the library over ``path`` (each call builds its embedder), counting the calls."""

    def factory(**_):
        calls.append(1)
        return Opened(path, WordsEmbedder())

    return factory


def _attachments_only(path: Path, docs: Path) -> None:
    """A chat's own collection (a large attached file), no library the user made."""
    opened = Opened(path, WordsEmbedder())
    opened.library.add([docs / "kettle.md"], chat_collection("c0ffee"))
    opened.close()


def _no_collections(path: Path, _docs: Path) -> None:
    Opened(path, WordsEmbedder()).close()


def _not_a_database(path: Path, _docs: Path) -> None:
    path.write_bytes(b"this is not an index\n" * 200)


@pytest.mark.parametrize("made", [_attachments_only, _no_collections, _not_a_database],
                         ids=["attachments-only", "no-collections", "not-a-database"])
def test_at_start_an_index_without_a_library_with_folders_loads_no_embedder(
        make_app, model_dir, docs, tmp_path, made):
    path = tmp_path / "index.sqlite3"
    made(path, docs)
    calls: list[int] = []
    app, documents = _started(make_app, model_dir, path, factory=_counting_factory(path, calls))
    heard: list[tuple] = []  # (the check's answer comes back queued, after this connects)
    app.bridge.message_shown.connect(lambda *m: heard.append(m))
    app.bridge.crash_reported.connect(lambda d: heard.append(("crash", d)))
    app.qtbot.waitUntil(lambda: not documents.jobs.pending(), timeout=10000)
    app.qtbot.wait(100)  # what the check's answer would start has started
    assert calls == [] and not documents.opening and not documents.is_open
    assert heard == []  # nothing the user would act on at start: silent (and logged)
    app.close()


def test_at_start_a_library_with_folders_beside_chats_files_opens(
        make_app, model_dir, docs, tmp_path):
    path = tmp_path / "index.sqlite3"
    _attachments_only(path, docs)
    _indexed(path, docs)
    calls: list[int] = []
    app, documents = _started(make_app, model_dir, path, factory=_counting_factory(path, calls))
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=10000)
    assert calls == [1] and [c["name"] for c in documents.libraries()] == ["Home"]
    app.close()
