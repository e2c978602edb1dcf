"""Walk the documents flows offscreen with the real window and save screenshots to look at.

  python bench/screenshots_documents.py OUT_DIR

A fresh HEARTH_HOME, the scripted test engine (tests/workers/fake_engine.py) and a
bag-of-words embedder (tests/ui/test_documents_ui.py), at 800x600 and 1280x800: files
attached in the composer (and many of them), the chips on the message and after reopening,
a file too long for the prompt (searched), a binary .txt and an encrypted PDF (a sentence
naming the file), a library being indexed (files done / total, Cancel), the chat settings'
and the composer's library switches, the sources under a reply and a passage; the Markdown
export is printed."""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots-documents")
OUT.mkdir(parents=True, exist_ok=True)
home = tempfile.mkdtemp(prefix="hearth-walk-")
os.environ["HEARTH_HOME"] = home
SIZES = [(800, 600), (1280, 800)]

from PySide6.QtCore import QCoreApplication, QEvent  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.paths import models_dir  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.storage.history import History  # noqa: E402
from app.ui.launch import build_window  # noqa: E402
from app.ui.message_bridge import MessageBridge  # noqa: E402
from tests.ui.test_documents_ui import Opened, WordsEmbedder  # noqa: E402
from tests.workers.fake_engine import FakeLoader  # noqa: E402

app = QApplication.instance() or QApplication([])
loader = FakeLoader(script=["Descale", " the", " kettle", " monthly", " with", " citric",
                            " acid", " and", " rinse", " it", " twice", " [1]."])
settings = Settings()
settings.set("chat_titles", "off")
window = build_window(History(), settings, MessageBridge(), loader)
window.resize(1280, 800)
window.show()
c = window.controller
docs = window.documents


def settle(seconds: float = 0.3) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        app.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        time.sleep(0.005)


def wait(predicate, timeout: float = 30.0) -> None:
    end = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > end:
            raise TimeoutError("the window did not reach the expected state")
        app.processEvents()
        time.sleep(0.005)


def shot(name: str, widget=None, sizes=SIZES) -> None:
    target = widget or window
    for w, h in sizes:
        target.resize(w, h)
        settle()
        path = OUT / f"{name}-{w}x{h}.png"
        target.grab().save(str(path))
        print(path)


data = Path(home) / "files"
folder = data / "manuals"
folder.mkdir(parents=True)
(folder / "kettle.md").write_text(
    "# Kettle\n\n## Descaling\n\nDescale the kettle monthly with citric acid and rinse "
    "twice. Hard water areas may need it every two weeks.\n\n## Cleaning\n\nWipe the "
    "outside with a damp cloth.\n", encoding="utf-8")
(folder / "boiler.md").write_text(
    "# Boiler\n\n## Pressure\n\nThe boiler pressure should read 1.5 bar when cold.\n",
    encoding="utf-8")
for i in range(12):
    (folder / f"appliance-notes-{i:02d}.txt").write_text(
        f"Note {i}: the appliance number {i} needs a filter change every {i + 2} months.\n",
        encoding="utf-8")
notes = data / "quarterly-maintenance-schedule-for-the-whole-house-2026.md"
notes.write_text("# Schedule\n\nKettle: descale monthly.\n", encoding="utf-8")
big = data / "service-manual.txt"
big.write_text("\n\n".join(f"Section {i}: the valve number {i} opens clockwise and closes "
                           "anticlockwise." for i in range(800)), encoding="utf-8")
binary = data / "readme.txt"
binary.write_bytes(bytes(range(256)) * 40)

gate = threading.Event()
embedder = WordsEmbedder(gate)
gate.set()
docs.library_factory = lambda **_: Opened(Path(home) / "index.sqlite3", embedder)

model = models_dir() / "demo"
model.mkdir(parents=True)
(model / "config.json").write_text("{}", encoding="utf-8")
(model / "hearth-manifest.json").write_text('{"name": "Demo Model"}')
window.refresh_models()
c.load_model(model)
wait(lambda: c.model_info is not None)

# 1. attach via the composer -----------------------------------------------------------
tray = window.attachments
tray.ask_files = lambda: [folder / "kettle.md", notes]
tray.attach_button.click()
window.composer.edit.setPlainText("How often should I descale the kettle?")
shot("01-composer-chips")
extra = [p for p in sorted(folder.iterdir()) if p.suffix == ".txt"][:6]
tray.add(extra)
shot("01b-composer-many-chips")
for p in extra:
    tray.remove(p)
window.composer.on_send()
wait(lambda: not c.generating)
shot("02-message-chip")
first = c.current_id
c.new_conversation()
c.open_conversation(first)
shot("03-reopened-chip")

# 2. a too-large file ------------------------------------------------------------------
c.new_conversation()
tray.add([big])
window.composer.edit.setPlainText("Which way does valve 7 open?")
window.composer.on_send()
wait(lambda: not c.generating, 60)
shot("04-large-file-retrieved")

# 3. a bad file -------------------------------------------------------------------------
c.new_conversation()
tray.add([binary])
window.composer.edit.setPlainText("What does the readme say?")
window.composer.on_send()
wait(lambda: not c.generating and not docs.reading, 30)
settle(0.5)
shot("05-bad-file")
print("BANNER:", window.banner.text())

# 3b. an encrypted PDF ------------------------------------------------------------------
try:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(200, 200)
    writer.encrypt("secret")
    pdf = data / "locked.pdf"
    with open(pdf, "wb") as fh:
        writer.write(fh)
    c.new_conversation()
    tray.add([pdf])
    window.composer.edit.setPlainText("Summarise the locked file.")
    window.composer.on_send()
    wait(lambda: not c.generating and not docs.reading, 30)
    settle(0.5)
    shot("05b-encrypted-pdf")
    print("BANNER:", window.banner.text())
except ImportError as exc:
    print("no pypdf", exc)

# 4. a library being indexed -------------------------------------------------------------
embedder.gate = None
slow_gate = threading.Event()
embedded = []
orig = embedder.embed_documents


def slow_embed(texts):
    embedded.append(1)
    if len(embedded) > 3:
        embedder.waiting.set()
        slow_gate.wait(30)
    return orig(texts)


embedder.embed_documents = slow_embed
embedder.waiting.clear()
window.on_preferences()
prefs = window.preferences
titles = [prefs.tabs.tabText(i) for i in range(prefs.tabs.count())]
prefs.tabs.setCurrentIndex(titles.index("Documents"))
page = prefs.tabs.currentWidget()
page.name_edit.setText("Home manuals")
page.ask_folder = lambda: [folder]
page.add_folder_button.click()
wait(embedder.waiting.is_set, 20)
settle(0.5)
shot("06-indexing-job", prefs)
print("JOB:", page.job_label.text(), "cancel visible:", page.cancel_button.isVisible())
page.cancel_button.click()
slow_gate.set()
wait(lambda: docs.indexing is None, 30)
settle(0.3)
shot("07-indexing-cancelled", prefs)
print("JOB:", page.job_label.text())
embedder.embed_documents = orig
page.tree.setCurrentItem(page.library_item("Home manuals"))
page.ask_folder = lambda: [folder]
page.add_folder_button.click()
wait(lambda: docs.indexing is None and page.library_item("Home manuals") is not None
     and page.library_item("Home manuals").text(1) == "14", 60)
settle(0.3)
shot("08-indexed", prefs)
print("JOB:", page.job_label.text())
prefs.close()

# 5. per-chat library toggle ------------------------------------------------------------
c.new_conversation()
for w, h in SIZES:
    window.resize(w, h)
    settle()
    window.panel_action.setChecked(True)
    window.on_toggle_panel(True)
    settle()
    window.settings_panel.scroll.ensureWidgetVisible(window.libraries_list)
    shot("09-chat-settings-libraries", sizes=[(w, h)])
window.libraries_list.boxes["Home manuals"].click()
window.resize(800, 600)
settle()
window.panel_action.setChecked(True)
window.on_toggle_panel(True)
window.settings_panel.scroll.ensureWidgetVisible(window.libraries_list)
shot("09b-chat-settings-library-on", sizes=[(800, 600)])
button = window.libraries_button
button.rebuild()
print("LIBRARIES BUTTON:", button.text())
window.resize(800, 600)
settle()
menu = button.menu_
menu.popup(button.mapToGlobal(button.rect().bottomLeft()))
settle()
menu.grab().save(str(OUT / "10-libraries-menu.png"))
print(OUT / "10-libraries-menu.png")
menu.close()
window.panel_action.setChecked(False)
window.on_toggle_panel(False)

# 6. sources under a reply, a click -------------------------------------------------------
window.composer.edit.setPlainText("How often should the kettle be descaled with citric acid?")
window.composer.on_send()
wait(lambda: not c.generating, 30)
shot("11-sources-under-reply")
reply = window.chat_view.message_widget(1)
print("SOURCES:", [b.text() for b in reply.sources.buttons])
reply.sources.buttons[0].click()
settle()
dialog = window.chat_view.passage
shot("12-passage", dialog, [(dialog.width(), dialog.height())])
dialog.resize(420, 300)
settle()
dialog.grab().save(str(OUT / "12b-passage-small.png"))
dialog.close()

# 7. export Markdown ---------------------------------------------------------------------
md = Path(home) / "export.md"
c.export_conversation(md, "markdown")
print("EXPORT:\n" + md.read_text(encoding="utf-8"))
c.open_conversation(first)
c.export_conversation(md, "markdown")
print("EXPORT FIRST:\n" + md.read_text(encoding="utf-8"))
window.resize(1280, 800)
window.composer.button.setFocus()
settle()
window.close()
