"""An imported GGUF converted in an older form, in the real window: the Installed tab says
what updating brings and offers Update (a job row with progress and Cancel); a missing file
is said in a sentence, with no button; a cancel leaves the old package as it was."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.manifest import Manifest
from app.models.library import ModelLibrary
from tests.fixtures.grouped_models import tiny_gguf
from tests.ui.test_gguf_import import hold_conversion_in_layer_two, leftovers, open_panel

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def _old_import(tmp_path):
    """A GQA import whose record is an older Hearth's (no attention keys)."""
    src = tiny_gguf(tmp_path)
    model = ModelLibrary().import_gguf(src, attention="gqa", name="Tiny")
    manifest = Manifest.read(model.path)
    for key in ("attention", "attention_form", "attention_requested"):
        manifest.extra["conversion"].pop(key)
    manifest.write(model.path)
    return src, ModelLibrary().require(model.id)


def _shown(app, panel, model_id):
    panel.refresh()
    panel.select_installed(model_id)
    app.qtbot.wait(10)


def test_the_installed_tab_offers_the_update_and_it_runs_as_a_job(make_app, tmp_path):
    _src, old = _old_import(tmp_path)
    app = make_app()
    panel = open_panel(app)
    _shown(app, panel, old.id)
    assert panel.update_note.isVisible() and panel.update_button.isVisible()
    assert panel.update_note.text().startswith(
        "This model can be updated for faster replies (an older Hearth converted it): faster "
        "replies and half the memory at long context (grouped attention). Update converts "
        "tiny-2048.gguf again in the background")
    panel.resize(800, 600)
    app.qtbot.wait(50)
    panel.grab().save(str(tmp_path / "update-offered.png"))

    with app.qtbot.waitSignal(app.models.models_changed, timeout=60000):
        app.qtbot.mouseClick(panel.update_button, Qt.MouseButton.LeftButton)
        assert f"update:{old.id}" in panel.download_rows
        assert not panel.update_button.isEnabled()
    app.qtbot.waitUntil(lambda: panel.download_rows == {}, timeout=10000)
    new = ModelLibrary().require(old.id)
    assert new.path == old.path and new.manifest.extra["conversion"]["attention"] == "grouped"
    assert "is updated to the current conversion" in app.window.banner.text()
    _shown(app, panel, old.id)
    assert not panel.update_note.isVisible() and not panel.update_button.isVisible()
    assert leftovers() == []


def test_a_missing_file_is_said_without_a_button(make_app, tmp_path):
    src, old = _old_import(tmp_path)
    src.unlink()
    app = make_app()
    panel = open_panel(app)
    _shown(app, panel, old.id)
    assert panel.update_note.isVisible() and not panel.update_button.isVisible()
    assert panel.update_note.text().endswith(
        "which is no longer where it was imported from; it keeps working as it is. Re-import "
        "tiny-2048.gguf to get faster replies and half the memory at long context (grouped "
        "attention).")
    assert "Traceback" not in panel.update_note.text()
    panel.resize(800, 600)
    app.qtbot.wait(50)
    panel.grab().save(str(tmp_path / "update-missing.png"))


def test_cancel_mid_update_keeps_the_old_package(make_app, tmp_path, monkeypatch):
    _src, old = _old_import(tmp_path)
    files = {p.name: p.read_bytes() for p in old.path.iterdir()}
    reached, release = hold_conversion_in_layer_two(monkeypatch)
    app = make_app()
    panel = open_panel(app)
    _shown(app, panel, old.id)
    app.qtbot.mouseClick(panel.update_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(reached.is_set, timeout=10000)
    row = panel.download_rows[f"update:{old.id}"]
    app.qtbot.waitUntil(lambda: row.detail.text().startswith("Converting layer 2 of 2"))
    app.qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
    release.set()
    app.qtbot.waitUntil(lambda: f"update:{old.id}" not in panel.download_rows, timeout=10000)
    assert {p.name: p.read_bytes() for p in old.path.iterdir()} == files
    assert leftovers() == []
    assert panel.update_button.isVisible() and panel.update_button.isEnabled()


def test_loading_an_updatable_model_says_so_once(make_app, tmp_path):
    _src, old = _old_import(tmp_path)
    app = make_app()
    said: list[str] = []
    app.window.bridge.message_shown.connect(lambda _level, text: said.append(text))
    for _ in range(2):  # loaded twice: the note comes once
        app.controller.model_info = None
        with app.qtbot.waitSignal(app.controller.model_loaded, timeout=10000):
            assert app.models.use(old)
    assert [t for t in said if "can be updated" in t] == [
        "Tiny can be updated for faster replies: Models ▸ Installed ▸ Update."]


def test_importing_the_same_file_in_the_window_updates_it(make_app, tmp_path):
    src, old = _old_import(tmp_path)
    app = make_app()
    with app.qtbot.waitSignal(app.models.models_changed, timeout=60000):
        assert app.models.import_gguf(src)
    assert [m.id for m in ModelLibrary().list_models()] == [old.id]
    assert ModelLibrary().require(old.id).manifest.extra["conversion"]["attention"] == "grouped"
    assert app.window.banner.text().startswith(
        "Tiny is updated in place (it was imported in an older form).")


def test_a_short_disk_is_said_before_a_job_starts(make_app, tmp_path, monkeypatch):
    from app.models.gguf import update

    _src, old = _old_import(tmp_path)
    monkeypatch.setattr(update, "free_bytes", lambda _path: 1 << 20)
    app = make_app()
    panel = open_panel(app)
    _shown(app, panel, old.id)
    app.qtbot.mouseClick(panel.update_button, Qt.MouseButton.LeftButton)
    assert panel.download_rows == {} and app.models.jobs.pending() == []
    assert app.window.banner.level == "error"
    assert app.window.banner.text().startswith("Updating Tiny needs about ")
    assert "but only 1.0 MB are free" in app.window.banner.text()


def test_the_model_in_use_is_loaded_again_after_its_update(make_app, tmp_path):
    _src, old = _old_import(tmp_path)
    app = make_app()
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=10000):
        assert app.models.use(old)
    loads: list[str] = []
    app.controller.model_loading.connect(loads.append)
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=60000):
        assert app.models.update_model(old)
    assert loads == [str(old.path)]
    assert ModelLibrary().require(old.id).manifest.extra["conversion"]["attention"] == "grouped"
