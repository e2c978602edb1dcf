"""The model manager: the catalog marks what is installed (the starter too, so it is never
offered again as a draft model), the "click Use" note goes with the dialog, and the toolbar
stays put while a model loads."""

from __future__ import annotations

import json

import pytest

from app.models.starter import STARTER_ID
from app.paths import models_dir
from app.ui.model_controller import USE_HINT
from tests.ui.conftest import make_model_folder

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def install(model_id: str, name: str) -> None:
    folder = models_dir() / model_id
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "hearth-manifest.json").write_text(json.dumps({"id": model_id, "name": name}))


def catalog_texts(panel, model_id: str) -> tuple[str, str]:
    model = panel.catalog_model
    row = model.row_of(model_id)
    return model.index(row, 0).data(), model.index(row, 4).data()


def test_the_catalog_marks_installed_models_and_the_starter(make_app):
    install(STARTER_ID, "SmolLM2 135M Instruct (starter)")
    install("qwen3-0.6b", "Qwen3 0.6B")
    app = make_app()
    panel = app.window.model_manager
    panel.open_panel()
    name, fits = catalog_texts(panel, "qwen3-0.6b")
    assert name.startswith("✓ ") and name.endswith("· installed") and fits == "Installed"
    name, _ = catalog_texts(panel, "smollm2-135m-instruct")  # the starter is this entry
    assert name.startswith("✓ ")
    assert not catalog_texts(panel, "qwen3-1.7b")[0].startswith("✓")
    panel.select_catalog("qwen3-0.6b")
    assert not panel.download_button.isEnabled() and panel.download_button.text() == "Installed"
    panel.select_catalog("qwen3-1.7b")
    assert panel.download_button.isEnabled() and panel.download_button.text() == "Download"

    panel.select_catalog("smollm2-360m-instruct")  # its draft is the starter's model
    details = panel.catalog_details
    assert details.draft_label.isVisible() and "Draft installed" in details.draft_label.text()
    assert not details.draft_button.isVisible()
    assert app.models.library().draft_for(models_dir() / STARTER_ID) is None
    panel.close()


def test_the_click_use_note_goes_when_the_dialog_closes(make_app):
    app = make_app()
    panel = app.window.model_manager
    panel.open_panel()
    app.qtbot.waitExposed(panel)
    app.bridge.info(f"Qwen3 0.6B is installed. {USE_HINT}")
    assert app.window.banner.isVisible()
    panel.close()
    assert not app.window.banner.isVisible()
    app.bridge.info("Something else.")
    panel.open_panel()
    panel.close()
    assert app.window.banner.text() == "Something else."  # other notes stay


def test_the_toolbar_does_not_shift_while_a_model_loads(make_app, loader):
    folder = make_model_folder("slow", "Slow Model")
    loader.load_delay = 0.5
    app = make_app()
    window = app.window
    bar = window.findChild(type(window.addToolBar("x")), "mainToolbar")
    models = bar.widgetForAction(window.models_action)
    before = models.mapTo(window, models.rect().topLeft()).x()

    def moved() -> int:  # the first relayout may round a separator's width by 1 px
        return abs(models.mapTo(window, models.rect().topLeft()).x() - before)
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=5000):
        app.controller.load_model(folder)
        app.qtbot.waitUntil(window.load_progress.isVisible, timeout=2000)
        app.qtbot.wait(50)
        assert moved() <= 1  # the loading bar used to push the buttons ~100 px along
    assert moved() <= 1
