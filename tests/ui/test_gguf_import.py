"""GGUF import in the real window: the dialog's header facts, each precision, the job row's
progress per layer, Cancel mid-conversion, a file already installed, a broken file."""

from __future__ import annotations

import threading

import pytest
from gguf import GGMLQuantizationType as Q
from PySide6.QtCore import Qt

from app import paths
from app.models.gguf.graph_builder import GraphBuilder
from app.models.gguf.preview import PRECISION_HELP
from app.models.gguf.weights import PRECISIONS
from app.models.library import ModelLibrary
from app.units import format_bytes
from tests.models.tiny_gguf import LAYERS, write_tiny_gguf
from tests.ui.conftest import on_ui_thread

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def open_panel(app):
    panel = app.window.model_manager
    app.window.models_action.trigger()
    app.qtbot.waitExposed(panel)
    panel.tabs.setCurrentIndex(2)
    return panel


def pick(app, panel, path):
    """Click Import GGUF… and choose ``path``: the dialog that opens."""
    panel.ask_gguf_file = lambda: str(path)
    app.qtbot.mouseClick(panel.import_gguf_button, Qt.MouseButton.LeftButton)
    dialog = panel.gguf_dialog
    assert dialog is not None and str(dialog.path) == str(path)
    app.qtbot.waitExposed(dialog)
    return dialog


def click_import(app, dialog):
    app.qtbot.mouseClick(dialog.import_button, Qt.MouseButton.LeftButton)


def leftovers() -> list[str]:
    """Anything an import left in the staging folder or half-made in the models folder."""
    found = [p.name for p in paths.staging_dir().glob("*")] if paths.staging_dir().exists() else []
    root = ModelLibrary().root
    found += [p.name for p in root.glob(".*")] if root.exists() else []
    return [name for name in found if name != ".staging"]


def test_dialog_shows_the_header_facts_and_the_readable_name(make_app, tmp_path):
    app = make_app()
    panel = open_panel(app)
    src = tmp_path / "Tiny-Llama-1B-Q8_0.gguf"
    write_tiny_gguf(src, qtype=Q.Q8_0, name="models")  # general.name is a folder's name
    dialog = pick(app, panel, src)
    facts = {label: widget.text() for label, widget in dialog.fact_labels.items()}
    assert facts["File"] == "Tiny-Llama-1B-Q8_0.gguf"
    assert facts["Size"] == format_bytes(src.stat().st_size)
    assert facts["Architecture"].startswith(f"llama · {LAYERS} layers · ")
    assert facts["Quantization"] == "Q8_0 × 15, F32 × 5"
    assert dialog.name_edit.text() == "Tiny Llama 1B (Q8_0)"
    assert dialog.precision() == "native" and dialog.precision_buttons["native"].isChecked()
    for precision in PRECISIONS:
        assert dialog.precision_notes[precision].text() == PRECISION_HELP[precision]
        button = dialog.precision_buttons[precision]
        assert button.isVisible() and " · about " in button.text() and "B" in button.text()
    assert dialog.import_button.isEnabled() and not dialog.error_label.isVisible()
    app.qtbot.mouseClick(dialog.buttons.button(dialog.buttons.StandardButton.Cancel),
                         Qt.MouseButton.LeftButton)
    assert not dialog.isVisible() and panel.download_rows == {}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_import_with_each_precision_installs_that_precision(make_app, tmp_path, precision):
    app = make_app()
    panel = open_panel(app)
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    dialog = pick(app, panel, src)
    dialog.set_precision(precision)
    dialog.name_edit.setText(f"Tiny {precision}")
    seen: list[tuple[str, int]] = []  # what the row showed after each report

    def row_state(job_id, _progress):
        row = panel.download_rows.get(job_id)
        if row is not None:
            seen.append((row.detail.text(), row.bar.value()))

    keep = on_ui_thread(app.models.jobs.worker.progress, row_state)
    with app.qtbot.waitSignal(app.models.models_changed, timeout=30000):
        click_import(app, dialog)
        assert "import:tiny.gguf" in panel.download_rows
    del keep
    (model,) = ModelLibrary().list_models()
    assert model.name == f"Tiny {precision}"
    assert model.manifest.extra["precision"] == precision
    assert model.source["variant"] == precision and model.source_kind == "gguf"
    texts = [text for text, _value in seen]
    for i in range(1, LAYERS + 1):
        assert any(t.startswith(f"Converting layer {i} of {LAYERS} · ") and t.endswith(" %")
                   for t in texts), texts
    layer_two = next(v for t, v in seen if t.startswith(f"Converting layer 2 of {LAYERS}"))
    assert 0 < layer_two < 1000  # the bar follows the fraction
    app.qtbot.waitUntil(lambda: panel.download_rows == {})
    assert leftovers() == []
    assert panel.installed_model.row_of(model.id) >= 0


def hold_conversion_in_layer_two(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """A conversion's job thread waits inside layer 2 (``reached`` is set) until ``release``."""
    reached, release = threading.Event(), threading.Event()
    build_layer = GraphBuilder._layer

    def held_layer(self, i, *args):
        if i == 1:
            reached.set()
            release.wait(10)
        return build_layer(self, i, *args)

    monkeypatch.setattr(GraphBuilder, "_layer", held_layer)
    return reached, release


def test_cancel_mid_conversion_leaves_no_model_and_no_partial_folder(make_app, tmp_path,
                                                                      monkeypatch):
    reached, release = hold_conversion_in_layer_two(monkeypatch)
    app = make_app()
    panel = open_panel(app)
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    click_import(app, pick(app, panel, src))
    app.qtbot.waitUntil(reached.is_set, timeout=10000)
    row = panel.download_rows["import:tiny.gguf"]
    app.qtbot.waitUntil(lambda: row.detail.text().startswith(f"Converting layer 2 of {LAYERS}"))
    assert row.cancel_button.isVisible() and row.cancel_button.isEnabled()
    assert not row.pause_button.isVisible()  # conversions are not pausable
    app.qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
    assert row.detail.text() == "Cancelling…"
    release.set()
    app.qtbot.waitUntil(lambda: "import:tiny.gguf" not in panel.download_rows, timeout=10000)
    assert app.models.jobs.pending() == []
    assert ModelLibrary().list_models() == []
    assert leftovers() == []
    assert app.window.banner.level != "error"


def test_a_file_already_installed_is_refused_and_offered(make_app, tmp_path):
    app = make_app()
    panel = open_panel(app)
    src = tmp_path / "tiny.gguf"
    write_tiny_gguf(src)
    with app.qtbot.waitSignal(app.models.models_changed, timeout=30000):
        click_import(app, pick(app, panel, src))
    (first,) = ModelLibrary().list_models()
    copy = tmp_path / "Copy of tiny.gguf"
    copy.write_bytes(src.read_bytes())
    asked: list[str] = []
    panel.ask_open_installed = lambda sentence: asked.append(sentence) or True
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=30000):
        click_import(app, pick(app, panel, copy))
    assert asked == [f"Copy of tiny.gguf is already installed as “{first.name}” (native "
                     "precision). Open it instead, or delete it first to import the file again."]
    assert [m.id for m in ModelLibrary().list_models()] == [first.id]
    assert app.controller.model_info.path == str(first.path)
    assert panel.selected_installed().id == first.id
    app.qtbot.waitUntil(lambda: panel.download_rows == {})
    assert leftovers() == []


@pytest.mark.parametrize("kind", ["not-gguf", "unknown-architecture"])
def test_a_broken_file_shows_the_sentence_in_the_dialog(make_app, tmp_path, kind):
    from gguf import GGUFWriter

    app = make_app()
    panel = open_panel(app)
    if kind == "not-gguf":
        src = tmp_path / "broken.gguf"
        src.write_bytes(b"not a gguf file")
        expected = "broken.gguf is not a GGUF file (it does not start with 'GGUF')."
    else:
        src = tmp_path / "Mamba-130M-Q8_0.gguf"
        w = GGUFWriter(str(src), "mamba")
        w.add_block_count(1)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        expected = "Mamba-130M-Q8_0.gguf holds a 'mamba' model; Hearth converts only"
    dialog = pick(app, panel, src)
    assert dialog.error_label.isVisible() and dialog.error_label.text().startswith(expected)
    assert "Traceback" not in dialog.error_label.text()
    assert dialog.fact_labels["File"].text() == src.name
    assert not dialog.import_button.isEnabled() and dialog.precision_buttons == {}
    dialog.reject()
    assert panel.download_rows == {} and ModelLibrary().list_models() == []
