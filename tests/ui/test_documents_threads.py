"""Nothing slow about documents runs on the UI thread: opening the document library (the
embedder's conversion and ORT session) and reading attached files happen on worker
threads, while the window keeps handling events and says what is going on; a quit in the
middle stops them by a flag and leaves no thread behind.

The slowness is a test double (a library factory or a file reader that waits for the
test's go-ahead): had the work run on the UI thread, the window could not show "reading…"
or count timer ticks before the test lets it go, and these tests would fail."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QThread, QTimer

from app.chat.parts import Attachment
from app.documents.attach import attachment
from app.ui.documents_controller import OPENING_TEXT, WAITING_TEXT
from tests.ui.test_documents_ui import (
    Opened,
    WordsEmbedder,
    _grab,
    _open_documents_page,
    _shots,
)
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

GATE_S = 5  # the double gives up waiting after this (then the test has failed anyway)


class Ticks:
    """Counts timer ticks: the UI thread's event loop keeps turning."""

    def __init__(self) -> None:
        self.count = 0
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    def tick(self) -> None:
        self.count += 1


class Slow:
    """A test double that blocks until ``gate`` is set, recording where it ran."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Event()
        self.threads: list[str] = []
        self.released: list[bool] = []
        self.calls = 0

    def wait(self) -> None:
        self.calls += 1
        self.threads.append(QThread.currentThread().objectName() or "?")
        self.started.set()
        self.released.append(self.gate.wait(GATE_S))


def _ui_name(app) -> str:
    return app.window.thread().objectName() or "?"


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kettle.md").write_text(
        "# Kettle\n\n## Descaling\n\nDescale the kettle monthly with citric acid.\n",
        encoding="utf-8")
    return folder


@pytest.fixture
def slow_app(make_app, model_dir, tmp_path):
    app = make_app(FakeLoader(script=["Monthly."]))
    app.load(model_dir)
    return app


def test_the_library_opens_off_the_ui_thread_and_says_so(slow_app, tmp_path, docs):
    app = slow_app
    slow = Slow()

    def factory(**_):
        slow.wait()
        return Opened(tmp_path / "index.sqlite3", WordsEmbedder())

    app.window.documents.library_factory = factory
    ticks = Ticks()
    prefs, page = _open_documents_page(app)  # the page asks for the libraries
    prefs.resize(800, 600)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    before = ticks.count
    app.qtbot.waitUntil(lambda: ticks.count > before + 3, timeout=5000)  # events still run
    assert page.job_label.text() == OPENING_TEXT and page.job_bar.isVisible()
    _grab(app, prefs, _shots(tmp_path) / "settings-documents-opening-800x600.png")
    assert app.window.status.activity_label.text() == OPENING_TEXT
    listing = app.window.libraries_list
    assert listing.note.text() == OPENING_TEXT
    button = app.window.libraries_button
    button.rebuild()  # the composer's menu, shown meanwhile
    assert [a.text() for a in button.menu_.actions()] == [OPENING_TEXT]
    assert not slow.gate.is_set()
    slow.gate.set()
    app.qtbot.waitUntil(lambda: app.window.documents.is_open, timeout=5000)
    assert slow.threads == ["hearth-documents"] and slow.threads != [_ui_name(app)]
    assert slow.released == [True]
    assert page.job_label.text() == "" and app.window.status.activity_label.text() == ""
    assert listing.note.text().startswith("No libraries yet")
    ticks.timer.stop()


def chip_texts(widget) -> list[str]:
    """The attachment chips on a message's card."""
    from PySide6.QtWidgets import QToolButton

    if widget.chips is None:
        return []
    return [b.text() for b in widget.chips.findChildren(QToolButton)]


def test_an_attachment_is_read_off_the_ui_thread_while_its_message_says_reading(
        slow_app, docs, tmp_path):
    app = slow_app
    slow = Slow()

    def read(path: Path, context: int, used: int) -> Attachment:
        slow.wait()
        return attachment(path, context, used)

    documents = app.window.documents
    documents.read_file = read
    tray = app.window.attachments
    tray.add([docs / "kettle.md"])
    ticks = Ticks()
    app.send("How often do I descale?", wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    before = ticks.count
    app.qtbot.waitUntil(lambda: ticks.count > before + 3, timeout=5000)
    # the message is in its chat at once, its file a "reading…" chip on it
    assert app.rows() == [("user", "How often do I descale?", "reading")]
    widget = app.window.chat_view.message_widget(0)
    assert chip_texts(widget) == ["kettle.md · reading…"]
    assert widget.status_note.text() == "reading its files…"
    assert tray.chip_names() == []  # the file went with the message
    assert app.window.status.activity_label.text() == "Reading kettle.md…"
    stored = app.history.active_path(app.controller.current_id)
    assert [(m.role, m.content, m.parts) for m in stored] == [
        ("user", "How often do I descale?", ())]  # stored now; its file once read
    app.window.resize(800, 600)
    _grab(app, app.window, _shots(tmp_path) / "documents-reading-800x600.png")
    app.send("A second message meanwhile", wait=False)  # one message in flight: it waits
    assert app.window.composer.text() == "A second message meanwhile"  # kept
    assert app.window.composer.button.text() == "Stop"
    slow.gate.set()
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)
    assert slow.threads == ["hearth-attachments"] and slow.released == [True]
    assert app.window.status.activity_label.text() == ""
    user = app.history.active_path(app.controller.current_id)[0]
    (part,) = [p for p in user.parts if isinstance(p, Attachment)]
    assert part.name == "kettle.md" and "citric acid" in part.text
    widget = app.window.chat_view.message_widget(0)
    assert chip_texts(widget) == ["kettle.md"] and widget.status_note.text() == ""
    assert app.rows()[0][2] == "complete"
    assert not documents.is_open and not documents.opening  # it went whole: no library
    assert "library" not in app.window.banner.text()
    ticks.timer.stop()


def test_a_file_that_cannot_be_read_gets_a_sentence_and_the_message_stays_in_its_chat(
        slow_app, tmp_path):
    app = slow_app
    bad = tmp_path / "notes.txt"
    bad.write_bytes(b"\x00\x01\x02 binary \xff\xfe" * 200)
    app.window.attachments.add([bad])
    app.send("What do my notes say?", wait=False)
    app.qtbot.waitUntil(lambda: not app.window.documents.reading
                        and not app.controller.generating, timeout=10000)
    assert "notes.txt" in app.window.banner.text()  # a sentence naming the file
    assert "Traceback" not in app.window.banner.text()
    assert app.rows() == [("user", "What do my notes say?", "complete")]  # unanswered
    (stored,) = app.history.active_path(app.controller.current_id)
    assert stored.content == "What do my notes say?" and stored.parts == ()
    assert stored.provenance["unsent"].startswith("Not sent: ")
    assert "notes.txt" in stored.provenance["unsent"]
    widget = app.window.chat_view.message_widget(0)
    assert widget.status_note.text() == "not sent" and "notes.txt" in widget.status_note.toolTip()
    assert widget.unsent_note.isVisible() and widget.unsent_note.text() == \
        stored.provenance["unsent"]  # the reason, on the message
    assert app.window.composer.text() == ""  # nothing comes back into the composer
    app.window.resize(800, 600)
    _grab(app, app.window, _shots(tmp_path) / "documents-not-sent-800x600.png")


def test_quitting_while_files_are_read_stops_between_files_and_keeps_the_message(
        slow_app, tmp_path):
    from app.paths import history_db_path
    from app.storage.history import History

    app = slow_app
    slow = Slow()
    files = []
    for i in range(6):
        f = tmp_path / f"part{i}.txt"
        f.write_text(f"Part {i} of the manual.\n", encoding="utf-8")
        files.append(f)

    def read(path: Path, context: int, used: int) -> Attachment:
        slow.wait()
        return attachment(path, context, used)

    app.window.documents.read_file = read
    app.window.attachments.add(files)
    app.send("Summarise the parts", wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    cid = app.controller.current_id
    threading.Timer(0.2, slow.gate.set).start()  # the file being read finishes meanwhile
    app.close()  # asserts the engine's thread has ended
    assert not app.window.documents.reader.running and not app.window.documents.jobs.running
    assert slow.calls == 1  # the flag stopped it before the next file
    assert slow.released == [True]
    history = History(history_db_path())  # the next start finds the message in its chat
    try:
        (stored,) = history.active_path(cid)
    finally:
        history.close()
    assert stored.content == "Summarise the parts" and stored.parts == ()
    assert stored.provenance["unsent"] == ("Not sent: Hearth was closed while part0.txt, "
                                           "part1.txt, part2.txt, part3.txt, part4.txt, "
                                           "part5.txt were read.")


def test_a_message_sent_while_the_library_opens_is_answered_once_it_is_open(
        slow_app, tmp_path, docs):
    app = slow_app
    built = Opened(tmp_path / "index.sqlite3", WordsEmbedder())  # indexed earlier
    built.library.add([docs], "Home")
    built.close()
    slow = Slow()

    def factory(**_):
        slow.wait()
        return Opened(tmp_path / "index.sqlite3", WordsEmbedder())

    documents = app.window.documents
    documents.library_factory = factory
    app.window.libraries_list.show_button.click()  # the chat settings: show the libraries
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    documents.set_library_on("Home", True)  # (as the menu does once it lists it)
    app.send("How often should the kettle be descaled?", wait=False)
    assert app.window.status.activity_label.text() == WAITING_TEXT
    assert app.rows()[-1][:2] == ("user", "How often should the kettle be descaled?")
    assert app.controller.retriever is None and not app.controller.generating
    slow.gate.set()
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)
    assert slow.threads == ["hearth-documents"] and slow.released == [True]
    reply = app.window.chat_view.message_widget(1)
    assert reply.sources.buttons  # the turn searched the library
    assert app.window.status.activity_label.text() == ""


def test_removing_a_library_runs_on_the_documents_thread_while_its_row_says_so(
        slow_app, tmp_path, docs):
    from PySide6.QtCore import Qt

    from app.ui.documents_controller import REMOVING_TEXT

    app = slow_app
    documents = app.window.documents
    documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                   WordsEmbedder())
    prefs, page = _open_documents_page(app)
    prefs.resize(800, 600)
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=5000)
    assert documents.index("Home", [docs])
    app.qtbot.waitUntil(lambda: documents.indexing is None
                        and page.library_item("Home") is not None, timeout=10000)
    documents.set_library_on("Home", True)
    library = documents.library()
    slow = Slow()
    real_remove = library.remove

    def remove(name, paths=()):
        slow.wait()
        return real_remove(name, paths)

    library.remove = remove
    page.tree.setCurrentItem(page.library_item("Home"))
    ticks = Ticks()
    app.qtbot.mouseClick(page.remove_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    before = ticks.count
    app.qtbot.waitUntil(lambda: ticks.count > before + 3, timeout=5000)  # events still run
    item = page.library_item("Home")
    assert item.text(0) == f"Home · {REMOVING_TEXT}" and item.isDisabled()
    assert not page.remove_button.isEnabled() and not page.refresh_button.isEnabled()
    assert documents.removing == "Home" and not documents.remove("Home")  # once
    _grab(app, prefs, _shots(tmp_path) / "settings-documents-removing-800x600.png")
    slow.gate.set()
    app.qtbot.waitUntil(lambda: page.library_item("Home") is None, timeout=5000)
    assert slow.threads == ["hearth-documents"] and slow.threads != [_ui_name(app)]
    assert slow.released == [True]
    assert documents.removing is None and documents.choice() == frozenset()
    assert documents.libraries() == [] and app.controller.retriever is None
    ticks.timer.stop()


def test_the_real_library_opens_on_the_documents_thread_its_session_on_its_own(
        slow_app, docs):
    """The starter embedder for real (skipped without its wheel): converted and its ORT
    session loaded while the window runs; the session belongs to the ``hearth-embed``
    thread, which indexing and every turn's search go through."""
    from app.documents.starter_embedder import find_embedder_wheel

    if find_embedder_wheel() is None:
        pytest.skip("the starter embedder's wheel is not here (scripts/fetch-embedder.sh)")
    app = slow_app
    documents = app.window.documents
    ticks = Ticks()
    documents.open_library()
    assert documents.opening and not documents.is_open  # nothing was loaded here
    app.qtbot.waitUntil(lambda: documents.is_open, timeout=300000)
    assert ticks.count > 10  # the event loop kept turning while it converted and loaded
    ticks.timer.stop()
    default = documents.library().embedder  # known by id; opened by the open job (warm)
    embedding = documents._opened._open_threads[default.id]
    owner = embedding._pool.submit(threading.current_thread).result()
    assert owner.name.startswith("hearth-embed")
    assert embedding._embedder._owner == owner.ident != threading.main_thread().ident
    documents.index("Home", [docs])
    app.qtbot.waitUntil(lambda: documents.indexing is None and bool(documents.libraries()),
                        timeout=60000)
    documents.set_library_on("Home", True)
    app.send("How often should the kettle be descaled?")  # embeds on the engine's turn
    reply = app.window.chat_view.message_widget(1)
    assert reply.sources.buttons[0].text().startswith("[1] kettle.md")


def test_quitting_while_the_library_opens_stops_it_by_its_flag(slow_app, tmp_path):
    app = slow_app
    slow = Slow()
    stopped = []
    made = []

    def factory(*, checkpoint):
        slow.wait()
        try:
            checkpoint()  # as OpenLibrary does between the conversion's steps
        except BaseException as exc:
            stopped.append(type(exc).__name__)
            raise
        made.append(Opened(tmp_path / "index.sqlite3", WordsEmbedder()))
        return made[-1]

    documents = app.window.documents
    documents.library_factory = factory
    documents.open_library()
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    threading.Timer(0.2, slow.gate.set).start()
    app.close()
    assert not documents.jobs.running and not documents.is_open
    assert stopped == ["JobCancelled"] and made == [] and slow.released == [True]


def test_a_library_that_cannot_open_says_why_and_the_message_is_still_answered(slow_app):
    from app.errors import HearthError

    app = slow_app
    documents = app.window.documents

    def factory(**_):
        raise HearthError("The starter embedder is not installed and its wheel was not "
                          "found.", hint="Run scripts/fetch-embedder.sh.")

    documents.library_factory = factory
    documents.set_library_on("Home", True)  # chosen earlier; the library will not open
    app.send("How often should the kettle be descaled?", wait=False)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)
    assert "The starter embedder is not installed" in app.window.banner.text()
    assert app.rows()[1][0] == "assistant" and app.controller.retriever is None
    assert app.window.status.activity_label.text() == ""
