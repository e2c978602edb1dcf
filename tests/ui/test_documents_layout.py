"""Documents in a small window, as a user sees them: file chips wrap and cut long names
instead of widening the window past 800 px, a file too long for the prompt says
"searched" on its chip, a library being indexed is listed at once and its job line names
it, Tab reaches the files and sources where they are, and the welcome page scrolls rather
than squeezing its cards when the composer grows."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect, Qt

from app.chat.parts import Attachment
from app.ui.attachment_tray import SEARCHED
from app.ui.documents_controller import INDEXING_TEXT
from tests.ui.test_documents_ui import Opened, WordsEmbedder, _open_documents_page
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

LONG = "quarterly-maintenance-schedule-for-the-whole-house-and-the-garden-2026.md"


@pytest.fixture
def small_app(make_app, model_dir, tmp_path):
    app = make_app(FakeLoader(script=["Monthly."]))
    app.load(model_dir)
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                              WordsEmbedder())
    app.window.resize(800, 600)
    app.qtbot.wait(50)
    return app


@pytest.fixture
def files(tmp_path) -> list[Path]:
    folder = tmp_path / "files"
    folder.mkdir()
    paths = [folder / LONG] + [folder / f"appliance-notes-{i:02d}.txt" for i in range(6)]
    for path in paths:
        path.write_text(f"# {path.stem}\n\nDescale the kettle monthly.\n", encoding="utf-8")
    return paths


def _rect_in(widget, ancestor) -> QRect:
    return QRect(widget.mapTo(ancestor, QPoint(0, 0)), widget.size())


def _chips(widget) -> list:
    from PySide6.QtWidgets import QToolButton

    return [b for b in widget.findChildren(QToolButton)
            if b.objectName() == "fileChip" and b.isVisible()]


def test_many_files_and_a_long_name_never_widen_an_800px_window(small_app, files):
    app = small_app
    tray = app.window.attachments
    tray.add(files)
    app.qtbot.wait(50)
    assert app.window.width() == 800  # the chips wrap; the window is not pushed wider
    assert app.window.minimumSizeHint().width() <= 800
    composer = app.window.composer
    chips = _chips(tray)
    assert len(chips) == len(files)
    for chip in chips:
        assert composer.rect().contains(_rect_in(chip, composer)), chip.text()
    long_chip = chips[0]
    assert long_chip.text().endswith("2026.md  ✕") and "…" in long_chip.text()  # cut
    assert long_chip.accessibleName() == f"Attached file {LONG}: remove it"
    assert len({c.y() for c in chips}) > 1  # on more than one line
    app.send("How often should I descale?")
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)
    app.qtbot.wait(50)
    assert app.window.width() == 800
    widget = app.window.chat_view.message_widget(0)
    sent = _chips(widget)
    assert len(sent) == len(files)
    for chip in sent:
        assert widget.card.rect().contains(_rect_in(chip, widget.card)), chip.text()
    assert sent[0].accessibleName() == f"Attached file {LONG}"


def test_a_file_too_long_for_the_prompt_says_searched_on_its_chip(small_app, tmp_path):
    app = small_app
    big = tmp_path / "manual.txt"
    big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise."
                               for i in range(600)), encoding="utf-8")
    small = tmp_path / "note.txt"
    small.write_text("The valve is under the sink.\n", encoding="utf-8")
    app.window.attachments.add([big, small])
    app.send("Which way does valve 7 open?", wait=False)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=15000)
    parts = [p for p in app.history.active_path(app.controller.current_id)[0].parts
             if isinstance(p, Attachment)]
    assert [bool(p.text) for p in parts] == [False, True]
    widget = app.window.chat_view.message_widget(0)
    assert [c.text() for c in _chips(widget)] == [f"manual.txt · {SEARCHED}", "note.txt"]
    assert "searched" in _chips(widget)[0].accessibleName()


def test_a_library_being_indexed_is_listed_at_once_and_its_line_names_it(
        make_app, model_dir, files, tmp_path):
    app = make_app()
    app.load(model_dir)
    gate = threading.Event()
    embedder = WordsEmbedder(gate)
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "i.sqlite3",
                                                              embedder)
    prefs, page = _open_documents_page(app)
    page.name_edit.setText("Home")
    page.ask_files = lambda: files
    app.qtbot.mouseClick(page.add_files_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(embedder.waiting.is_set, timeout=10000)  # the first file embeds
    app.qtbot.waitUntil(lambda: "of 7 files" in page.job_label.text(), timeout=5000)
    assert page.job_label.text().startswith("Indexing Home: 0 of 7 files")
    item = page.library_item("Home")
    assert item is not None and item.text(0) == f"Home · {INDEXING_TEXT}"
    assert page.cancel_button.isVisible()
    gate.set()
    app.qtbot.waitUntil(lambda: app.window.documents.indexing is None, timeout=15000)
    item = page.library_item("Home")
    assert item.text(0) == "Home" and item.text(1) == "7"
    prefs.close()


def _answered_with_sources_and_a_new_attachment(app, files):
    """A reply with its sources and the message's chip on screen, and another file attached
    in the composer: every kind of chip and source the keyboard must reach."""
    documents = app.window.documents
    documents.index("Home", [files[1]])
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None,
                        timeout=15000)
    documents.set_library_on("Home", True)
    app.window.attachments.add([files[2]])
    app.send("How often should I descale the kettle?")
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and not app.controller.generating,
                        timeout=10000)
    app.window.attachments.add([files[3]])
    return app


def test_tab_reaches_the_attached_files_and_the_sources_where_they_are(small_app, files):
    app = _answered_with_sources_and_a_new_attachment(small_app, files)
    composer = app.window.composer
    app.qtbot.wait(20)
    (tray_chip,) = _chips(app.window.attachments)
    order = [composer.button, app.window.attachments.attach_button, tray_chip,
             app.window.tools_button, app.window.libraries_button]
    chain = [composer.edit]
    for _ in order:
        chain.append(chain[-1].nextInFocusChain())
        while not chain[-1].focusPolicy() & Qt.FocusPolicy.TabFocus:
            chain[-1] = chain[-1].nextInFocusChain()
    assert chain[1:] == order
    # in the chat, each message's own chips and sources follow it, before the next one
    user, reply = (app.window.chat_view.message_widget(i) for i in (0, 1))
    (chip,) = _chips(user)
    assert reply.sources.buttons
    reached = []
    widget = user
    while widget is not reply:
        widget = widget.nextInFocusChain()
        reached.append(widget)
    assert chip in reached
    reached = []
    widget = reply
    for _ in range(40):
        widget = widget.nextInFocusChain()
        reached.append(widget)
        if widget is reply.sources.buttons[-1]:
            break
    assert reached[-1] is reply.sources.buttons[-1]
    tabbed = [w for w in reached if w.focusPolicy() & Qt.FocusPolicy.TabFocus]
    assert all(w is reply or reply.isAncestorOf(w) for w in tabbed)


def test_the_welcome_page_scrolls_instead_of_squeezing_its_cards(small_app, files):
    app = small_app
    app.window.attachments.add(files)  # a tall composer
    app.window.panel_action.setChecked(True)
    app.window.on_toggle_panel(True)  # and a narrow chat column
    app.qtbot.wait(50)
    welcome = app.window.chat_view.welcome
    assert welcome.isVisible()
    cards = welcome.prompt_buttons
    rects = [_rect_in(c, welcome) for c in cards]
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            assert not a.intersects(b)
    for card in cards:
        (label,) = card.findChildren(type(welcome.title))
        assert label.height() >= label.heightForWidth(label.width()), label.text()
        assert card.rect().contains(_rect_in(label, card))
    title = welcome.title  # wrapped within the page, never cut at its edge
    assert welcome.rect().contains(_rect_in(title, welcome).adjusted(0, 0, 0, -title.height()
                                                                     + 1))
    assert title.width() <= welcome.width()


def test_a_passage_says_which_part_of_which_file_it_is(qtbot, tmp_path):
    from app.chat.parts import Source
    from app.ui.sources_list import PassageDialog

    path = tmp_path / "Manuals" / ("Kitchen" * 8) / ("Appliances" * 4) / "kettle.md"
    source = Source("kettle.md", "Kettle › Descaling", "Descale monthly.", str(path))
    dialog = PassageDialog(source)
    qtbot.addWidget(dialog)
    dialog.resize(420, 300)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.where_label.text() == "kettle.md — Kettle › Descaling"
    assert dialog.path_label.text() == str(path)
    for label in (dialog.where_label, dialog.path_label):  # wrapped, never cut
        assert dialog.rect().contains(_rect_in(label, dialog))
        assert label.height() >= label.heightForWidth(label.width())
    assert dialog.width() == 420 and dialog.open_button.isEnabled()


def _looks(widget):
    return widget.grab().toImage()


def test_tab_shows_where_it_is_on_chips_sources_and_the_composer_buttons(small_app, files):
    app = _answered_with_sources_and_a_new_attachment(small_app, files)
    app.qtbot.wait(20)
    user, reply = (app.window.chat_view.message_widget(i) for i in (0, 1))
    widgets = [_chips(user)[0], reply.sources.buttons[0], _chips(app.window.attachments)[0],
               app.window.attachments.attach_button, app.window.tools_button,
               app.window.libraries_button]
    for widget in widgets:
        app.window.composer.edit.setFocus()
        app.qtbot.wait(10)
        before = _looks(widget)
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        app.qtbot.waitUntil(widget.hasFocus, timeout=2000)
        assert _looks(widget) != before, widget.objectName()  # a ring shows the focus


def test_a_theme_switched_while_open_recolours_the_sources_and_menu_buttons(small_app):
    from PySide6.QtGui import QPalette
    from PySide6.QtWidgets import QApplication

    from app.chat.parts import Source
    from app.ui.theme import apply_theme

    app = small_app
    from app.ui.sources_list import SourcesList

    listing = SourcesList(app.window.composer)  # a reply's list: it has a sheet of its own
    listing.set_sources((Source("kettle.md", "Kettle", "Descale monthly."),))
    listing.show()
    try:
        for theme in ("dark", "light", "dark"):
            apply_theme(theme)
            app.qtbot.wait(10)
            for role in (QPalette.ColorRole.Button, QPalette.ColorRole.ButtonText):
                wanted = QApplication.palette().color(role)
                for button in (app.window.tools_button, app.window.libraries_button,
                               listing.buttons[0]):
                    assert button.palette().color(role) == wanted, (theme, button)
    finally:
        apply_theme("system")


def test_the_composers_menu_buttons_follow_the_text_size(small_app):
    from app.ui.zoom import system_points

    app = small_app
    points = round(1.5 * system_points())
    app.window.set_setting("font_size", points)
    app.qtbot.wait(10)
    attach = app.window.attachments.attach_button
    for button in (app.window.tools_button, app.window.libraries_button):
        assert button.font().pointSizeF() == attach.font().pointSizeF() == points
        assert button.height() >= button.fontMetrics().height()


def test_open_file_of_a_file_moved_since_says_so_and_opens_nothing(qtbot, tmp_path):
    from app.chat.parts import Source
    from app.ui.sources_list import PassageDialog

    path = tmp_path / "kettle.md"
    path.write_text("Descale monthly.")
    dialog = PassageDialog(Source("kettle.md", "", "Descale monthly.", str(path)))
    qtbot.addWidget(dialog)
    opened = []
    dialog.open_url = opened.append
    path.unlink()  # moved or deleted after the reply
    dialog.open_button.click()
    assert opened == [] and not dialog.open_button.isEnabled()
    assert dialog.path_label.text() == (f"kettle.md is no longer at {path} (moved or deleted); "
                                        "the passage below is what was indexed.")
