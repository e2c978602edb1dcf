"""The model-manager panel in the real window: catalog, search, downloads, use, delete, import.

Downloads go over real HTTP to the loopback Hub stand-in; "real engine" tests load the
downloaded tiny model through the real generation worker.
"""

from __future__ import annotations

import json
import shutil
import socket
import threading

import pytest
from PySide6.QtCore import Qt, QThread

from app import settings as settings_module
from app.loading import default_loader
from app.models import catalog as catalog_module
from app.models.library import ModelLibrary
from app.settings import Setting
from app.ui.model_manager_model import KeyRole
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests, random_bytes
from tests.ui.conftest import on_ui_thread

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

BLOB = "onnx/model.onnx_data"
GATED_TOKEN = "hf_gated_ok"
GATED_LICENCE = "https://example.org/tiny-licence"
ROWS = (
    Setting("hub_endpoint", str, "", "Model download server (empty: Hugging Face)"),
    Setting("hub_token", str, "", "Hugging Face access token"),
    Setting("models_folder", str, "", "Models folder (empty: the default)"),
)


def catalog_entry(entry_id: str, repo: str, variants: list[dict], **extra) -> dict:
    return {
        "id": entry_id,
        "name": extra.get("name", entry_id.title()),
        "repo": repo,
        "revision": "main",
        "license": extra.get("license", "apache-2.0"),
        "context_length": 512,
        "parameters": 1000,
        "format": extra.get("format", "optimum"),
        "description": "A tiny test model.",
        "variants": variants,
    }


@pytest.fixture
def hub(monkeypatch, tmp_path, plain_model_dir, gqa_model_dir):
    """The Hub stand-in with two real tiny models and a slow 3 MB blob repo, a catalog that
    lists them, and the settings rows the panel reads (endpoint pointing at the stand-in)."""
    allow_hub_requests(monkeypatch)
    for row in ROWS:
        monkeypatch.setattr(settings_module, "SETTINGS", (*settings_module.SETTINGS, row))
        monkeypatch.setitem(settings_module.BY_KEY, row.key, row)
    with FakeHub() as server:
        server.add(FakeRepo.from_folder("test/tiny-chat", plain_model_dir, license="mit"))
        server.add(FakeRepo.from_folder("test/tiny-genai", gqa_model_dir, prefix="cpu/int4"))
        server.add(
            FakeRepo(
                "test/big",
                {"config.json": b"{}", "onnx/model.onnx": b"x" * 100, BLOB: random_bytes(3 << 20)},
            )
        )
        server.add(FakeRepo.from_folder("test/gated-chat", plain_model_dir, license="other",
                                        gated_token=GATED_TOKEN))
        optimum = {"name": "cpu-fp32", "provider": "cpu", "include": ["*.json", "onnx/model.onnx*"]}
        catalog = {
            "models": [
                catalog_entry("tiny-chat", "test/tiny-chat", [{**optimum, "size_bytes": 576111}]),
                catalog_entry(
                    "tiny-genai",
                    "test/tiny-genai",
                    [
                        {"name": "cpu-int4", "provider": "cpu", "subfolder": "cpu/int4"},
                        {"name": "cuda-int4", "provider": "cuda", "subfolder": "cuda/int4"},
                    ],
                    format="genai",
                ),
                catalog_entry("big", "test/big", [optimum]),
                {**catalog_entry("gated-chat", "test/gated-chat", [optimum],
                                 license="tiny-licence"),
                 "gated": True, "license_url": GATED_LICENCE},
                catalog_entry(
                    "huge",
                    "test/huge",
                    [{**optimum, "size_bytes": 9 * 10**14, "ram_bytes": 10**15}],
                ),
            ]
        }
        path = tmp_path / "catalog.json"
        path.write_text(json.dumps(catalog), encoding="utf-8")
        monkeypatch.setattr(catalog_module, "CATALOG_PATH", path)
        yield server


def manager(app, hub: FakeHub):
    app.settings.set("hub_endpoint", hub.url)
    panel = app.window.model_manager
    app.window.models_action.trigger()
    app.qtbot.waitExposed(panel)
    return panel


def catalog_texts(panel) -> dict[str, list[str]]:
    model = panel.catalog_model
    return {
        model.index(r, 0).data(KeyRole): [
            model.index(r, c).data() for c in range(model.columnCount())
        ]
        for r in range(model.rowCount())
    }


def download(app, panel, model_id: str, *, wait: bool = True):
    panel.tabs.setCurrentIndex(0)
    panel.select_catalog(model_id)
    if wait:
        with app.qtbot.waitSignal(app.models.models_changed, timeout=10000):
            app.qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
        app.qtbot.waitUntil(lambda: model_id not in panel.download_rows)  # its row leaves
    else:
        app.qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
        app.qtbot.waitUntil(lambda: model_id in panel.download_rows)
    return panel.download_rows.get(model_id)


def use(app, panel, model_id: str) -> None:
    panel.tabs.setCurrentIndex(2)
    panel.select_installed(model_id)
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=10000):
        app.qtbot.mouseClick(panel.use_button, Qt.MouseButton.LeftButton)


def picker_items(app) -> list[str]:
    picker = app.window.model_picker
    return [picker.itemText(i) for i in range(picker.count())]


# -- catalog and search --------------------------------------------------------------------


def test_catalog_lists_variants_size_license_and_fit_hints(make_app, hub, qtmodeltester):
    app = make_app()
    panel = manager(app, hub)
    qtmodeltester.check(panel.catalog_model, force_py=True)
    rows = catalog_texts(panel)
    assert rows["tiny-chat"] == [
        "Tiny-Chat",
        "cpu-fp32",
        "576.1 KB",
        "apache-2.0",
        rows["tiny-chat"][4],
    ]
    assert rows["tiny-chat"][4] in ("Fits this machine", "Tight fit")
    assert rows["tiny-genai"][1] == "cpu-int4"  # chosen for this machine's provider (CPU)
    assert rows["huge"][4] == "Too big"
    huge = panel.catalog_model.index(panel.catalog_model.row_of("huge"), 4)
    assert "of RAM" in huge.data(Qt.ItemDataRole.ToolTipRole)
    panel.select_catalog("tiny-genai")
    combo = panel.variant_combo
    assert [combo.itemData(i) for i in range(combo.count())] == ["cpu-int4", "cuda-int4"]
    assert combo.currentData() == "cpu-int4"
    assert "CPU" in panel.machine_label.text()


def test_real_catalog_is_listed(make_app, qtbot):
    app = make_app()
    panel = app.window.model_manager
    panel.open_panel()
    rows = catalog_texts(panel)
    assert len(rows) == len(catalog_module.load_catalog()) >= 8
    assert all(texts[1] and texts[2].endswith("B") and texts[3] for texts in rows.values())


def test_hub_search_shows_size_and_license(make_app, hub, qtmodeltester):
    app = make_app()
    panel = manager(app, hub)
    panel.tabs.setCurrentIndex(1)
    panel.search_edit.setText("tiny")
    with app.qtbot.waitSignal(app.models.search_finished, timeout=5000):
        app.qtbot.mouseClick(panel.search_button, Qt.MouseButton.LeftButton)
    model = panel.hub_model
    qtmodeltester.check(model, force_py=True)
    found = {
        model.index(r, 0).data(): (model.index(r, 1).data(), model.index(r, 2).data())
        for r in range(model.rowCount())
    }
    assert set(found) == {"test/tiny-chat", "test/tiny-genai"}
    assert found["test/tiny-chat"] == ("576.1 KB", "mit")


# -- downloads -----------------------------------------------------------------------------


def test_download_shows_progress_installs_and_the_model_chats(make_app, hub, qtmodeltester):
    hub.faults.delay_per_chunk_s = 0.01
    app = make_app(default_loader)
    panel = manager(app, hub)
    assert picker_items(app) == []
    texts: list[str] = []
    bars: list[int] = []

    def seen(_job_id, _progress):
        row = panel.download_rows["tiny-chat"]
        texts.append(row.detail.text())
        bars.append(row.bar.value())

    _keep = on_ui_thread(app.models.jobs.worker.progress, seen)
    download(app, panel, "tiny-chat")
    assert any(" of 576.1 KB" in t and "/s" in t for t in texts)
    assert max(bars[:-1]) > 0 and bars == sorted(bars)
    assert "tiny-chat" not in panel.download_rows  # the row leaves the queue when installed
    assert "is installed" in app.window.banner.text()
    assert catalog_texts(panel)["tiny-chat"][4] == "Installed"
    assert picker_items(app) == ["Tiny-Chat"]
    qtmodeltester.check(panel.installed_model, force_py=True)
    use(app, panel, "tiny-chat")
    assert app.window.model_picker.currentText() == "Tiny-Chat"
    assert panel.installed_model.index(0, 0).data() == "Tiny-Chat (in use)"
    app.window.settings_panel.editors["max_tokens"].setValue(4)
    app.send("hello", wait=False)
    app.wait_idle(timeout=20000)
    assert app.rows()[1][2] == "complete"


def test_cancel_leaves_nothing_installed(make_app, hub):
    hub.faults.delay_per_chunk_s = 0.01
    app = make_app()
    panel = manager(app, hub)
    row = download(app, panel, "big", wait=False)
    app.qtbot.waitUntil(lambda: hub.served(BLOB) > 200_000, timeout=5000)
    app.qtbot.mouseClick(row.cancel_button, Qt.MouseButton.LeftButton)
    assert row.detail.text() == "Cancelling…"
    app.qtbot.waitUntil(lambda: not app.models.jobs.pending(), timeout=2000)
    assert "big" not in panel.download_rows
    assert ModelLibrary().list_models() == []
    assert not list(ModelLibrary().root.parent.joinpath("staging").iterdir())
    assert picker_items(app) == [] and catalog_texts(panel)["big"][4] != "Installed"


def test_pause_then_resume_completes(make_app, hub):
    hub.faults.delay_per_chunk_s = 0.005
    app = make_app()
    panel = manager(app, hub)
    row = download(app, panel, "big", wait=False)
    app.qtbot.waitUntil(lambda: hub.served(BLOB) > 200_000, timeout=5000)
    app.qtbot.mouseClick(row.pause_button, Qt.MouseButton.LeftButton)
    assert row.detail.text() == "Paused" and row.resume_button.isEnabled()
    app.qtbot.wait(200)  # a chunk in flight may land
    during = hub.served(BLOB)
    app.qtbot.wait(300)
    assert hub.served(BLOB) == during < 3 << 20
    assert "Paused" in row.detail.text()
    hub.faults.delay_per_chunk_s = 0.0
    with app.qtbot.waitSignal(app.models.models_changed, timeout=10000):
        app.qtbot.mouseClick(row.resume_button, Qt.MouseButton.LeftButton)
    assert hub.served(BLOB) <= (3 << 20) + 64 * 1024  # resumed, not restarted
    assert ModelLibrary().get("big") is not None


def test_download_error_goes_to_the_banner_and_retry_resumes(make_app, hub):
    app = make_app()
    panel = manager(app, hub)
    app.models.downloader_options = {"retries": 0, "backoff_s": 0.01}
    hub.faults.cut_at[BLOB] = 1_000_000
    row = download(app, panel, "big", wait=False)
    app.qtbot.waitUntil(lambda: row.detail.text().startswith("Failed"), timeout=5000)
    assert f"{hub.url}/test/big/resolve/" in app.window.banner.text()
    assert app.window.banner.level == "error"
    assert row.resume_button.text() == "Retry"  # it tries again: nothing was paused
    with app.qtbot.waitSignal(app.models.models_changed, timeout=10000):
        app.qtbot.mouseClick(row.resume_button, Qt.MouseButton.LeftButton)
    assert row.resume_button.text() == "Resume"
    assert hub.served(BLOB) <= (3 << 20) + 64 * 1024


def test_a_gated_entry_shows_its_notice_and_a_refused_download_asks_for_a_token(make_app,
                                                                               hub):
    """Selecting a gated entry shows its licence notice; downloading it without a token is
    refused (HTTP 401): the queue explains the licence, links it, and its token button opens
    the settings at the token field."""
    app = make_app()
    panel = manager(app, hub)
    panel.select_catalog("tiny-chat")
    assert panel.gated_notice.isHidden()
    panel.select_catalog("gated-chat")
    assert panel.gated_notice.isVisible()
    assert f'href="{GATED_LICENCE}"' in panel.gated_notice.message.text()
    assert panel.refused_notice.isHidden()

    row = download(app, panel, "gated-chat", wait=False)
    app.qtbot.waitUntil(lambda: row.detail.text().startswith("Failed"), timeout=10000)
    app.qtbot.waitUntil(panel.refused_notice.isVisible, timeout=5000)
    text = panel.refused_notice.message.text()
    assert "HTTP 401" in text and f'href="{GATED_LICENCE}"' in text and "tiny-licence" in text
    assert 'href="https://huggingface.co/test/gated-chat"' in text and "access token" in text
    assert app.models.library().get("gated-chat") is None

    app.qtbot.mouseClick(panel.refused_notice.token_button, Qt.MouseButton.LeftButton)
    preferences = app.window.preferences
    app.qtbot.waitExposed(preferences)
    assert preferences.tabs.currentWidget().isAncestorOf(preferences.token_edit)
    preferences.close()


# -- installed models ----------------------------------------------------------------------


def test_delete_refuses_the_loaded_model_and_removes_another_from_disk_and_picker(make_app, hub):
    app = make_app()
    panel = manager(app, hub)
    download(app, panel, "tiny-chat")
    download(app, panel, "tiny-genai")
    assert sorted(picker_items(app)) == ["Tiny-Chat", "Tiny-Genai"]
    use(app, panel, "tiny-chat")
    asked: list[str] = []
    panel.confirm = lambda title, text: asked.append(text) or True
    path = ModelLibrary().require("tiny-chat").path
    panel.select_installed("tiny-chat")
    app.qtbot.mouseClick(panel.delete_button, Qt.MouseButton.LeftButton)
    assert "is loaded and cannot be removed" in app.window.banner.text()
    assert path.is_dir() and asked == []
    genai = ModelLibrary().require("tiny-genai").path
    panel.select_installed("tiny-genai")
    app.qtbot.mouseClick(panel.delete_button, Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and "frees" in asked[0]
    assert not genai.exists() and ModelLibrary().get("tiny-genai") is None
    assert picker_items(app) == ["Tiny-Chat"]
    assert panel.installed_model.rowCount() == 1


def test_switching_the_active_model_loads_on_the_engine_thread_and_the_chat_continues(
    make_app, hub
):
    threads: list[QThread] = []

    def loader(path):
        threads.append(QThread.currentThread())
        return default_loader(path)

    app = make_app(loader)
    panel = manager(app, hub)
    download(app, panel, "tiny-chat")
    download(app, panel, "tiny-genai")
    app.window.settings_panel.editors["max_tokens"].setValue(4)
    use(app, panel, "tiny-chat")
    app.send("first", wait=False)
    app.wait_idle(timeout=20000)
    conversation = app.controller.current_id
    use(app, panel, "tiny-genai")
    assert app.window.model_picker.currentText() == "Tiny-Genai"
    app.send("second", wait=False)
    app.wait_idle(timeout=20000)
    assert app.controller.current_id == conversation
    assert [r[0] for r in app.rows()] == ["user", "assistant", "user", "assistant"]
    stored = app.history.messages(conversation)
    genai_path = str(ModelLibrary().require("tiny-genai").path)
    assert stored[1].provenance["model_path"] != genai_path
    assert stored[3].provenance["model_path"] == genai_path
    assert stored[3].status == "complete"
    assert threads and all(t is app.controller.host.thread for t in threads)
    assert threading.current_thread() is threading.main_thread()


def test_import_folder_from_the_first_run_panel(make_app, hub, plain_model_dir, tmp_path):
    app = make_app()
    panel = app.window.model_manager
    app.qtbot.mouseClick(app.window.first_run.browse_button, Qt.MouseButton.LeftButton)
    assert panel.isVisible()
    folder = tmp_path / "my-model"
    shutil.copytree(plain_model_dir, folder)
    panel.ask_folder = lambda: str(folder)
    panel.tabs.setCurrentIndex(2)
    with app.qtbot.waitSignal(app.models.models_changed, timeout=5000):
        app.qtbot.mouseClick(panel.import_folder_button, Qt.MouseButton.LeftButton)
    model = ModelLibrary().require("my-model")
    assert model.linked and model.path == folder.resolve()
    assert panel.installed_model.index(0, 0).data(KeyRole) == "my-model"
    panel.ask_folder = lambda: str(tmp_path)  # not a model folder
    app.qtbot.mouseClick(panel.import_folder_button, Qt.MouseButton.LeftButton)
    app.qtbot.waitUntil(lambda: app.window.banner.level == "error", timeout=5000)
    panel.select_installed("my-model")
    panel.confirm = lambda title, text: True
    app.qtbot.mouseClick(panel.delete_button, Qt.MouseButton.LeftButton)
    assert ModelLibrary().get("my-model") is None and folder.is_dir()  # the user's files stay


def test_closing_the_window_stops_a_running_download(make_app, hub):
    hub.faults.delay_per_chunk_s = 0.02
    app = make_app()
    panel = manager(app, hub)
    download(app, panel, "big", wait=False)
    app.qtbot.waitUntil(lambda: hub.served(BLOB) > 100_000, timeout=5000)
    app.close()
    assert not app.models.jobs.running
    assert not app.models.searches.running
    staging = ModelLibrary().root.parent / "staging" / "big"
    assert (staging / (BLOB + ".part")).stat().st_size > 0  # resumable next time


def test_import_gguf_converts_on_the_download_thread_and_installs(make_app, hub, tmp_path):
    from tests.models.tiny_gguf import write_tiny_gguf

    app = make_app()
    panel = manager(app, hub)
    gguf = tmp_path / "tiny-llama.gguf"
    write_tiny_gguf(gguf)
    panel.ask_gguf_file = lambda: str(gguf)
    panel.tabs.setCurrentIndex(2)
    app.qtbot.mouseClick(panel.import_gguf_button, Qt.MouseButton.LeftButton)
    dialog = panel.gguf_dialog  # the header facts, name and precision (tests/ui/test_gguf_import)
    with app.qtbot.waitSignal(app.models.models_changed, timeout=20000):
        app.qtbot.mouseClick(dialog.import_button, Qt.MouseButton.LeftButton)
        row = panel.download_rows["import:tiny-llama.gguf"]
        assert not row.pause_button.isVisible()
    model = ModelLibrary().require("tiny-llama")
    assert model.source_kind == "gguf" and (model.path / "genai_config.json").is_file()
    assert panel.installed_model.row_of("tiny-llama") >= 0
    assert len(picker_items(app)) == 1
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    panel.ask_gguf_file = lambda: str(bad)
    app.qtbot.mouseClick(panel.import_gguf_button, Qt.MouseButton.LeftButton)
    assert panel.gguf_dialog.error_label.text().startswith("broken.gguf is not a GGUF file")
    assert not panel.gguf_dialog.import_button.isEnabled()
    panel.gguf_dialog.reject()
    assert [m.id for m in ModelLibrary().list_models()] == ["tiny-llama"]


# -- draft models (speculative decoding) ---------------------------------------------------


def drafted_catalog(monkeypatch, tmp_path) -> None:
    """The hub fixture's catalog plus "tiny-big" (served from test/tiny-genai), whose
    catalog entry names tiny-chat as its draft (same tiny tokenizer)."""
    data = json.loads(catalog_module.CATALOG_PATH.read_text(encoding="utf-8"))
    genai = next(e for e in data["models"] if e["id"] == "tiny-genai")
    data["models"].append({**genai, "id": "tiny-big", "name": "Tiny-Big", "draft": "tiny-chat"})
    path = tmp_path / "drafted-catalog.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(catalog_module, "CATALOG_PATH", path)


def test_details_offer_the_draft_and_its_button_downloads_it(make_app, hub, monkeypatch,
                                                             tmp_path):
    drafted_catalog(monkeypatch, tmp_path)
    app = make_app(default_loader)
    panel = manager(app, hub)
    details = panel.catalog_details
    panel.select_catalog("tiny-genai")  # no draft in its entry: no draft line, no button
    assert details.title.isVisible() and "Tiny-Genai" in details.title.text()
    assert details.draft_label.isHidden() and details.draft_button.isHidden()
    download(app, panel, "tiny-big")
    use(app, panel, "tiny-big")  # loaded before its draft is installed: none attached
    assert app.controller.model_info.draft is None
    panel.tabs.setCurrentIndex(0)
    panel.select_catalog("tiny-big")
    assert details.draft_label.isVisible() and details.draft_button.isVisible()
    assert details.draft_label.text().startswith("Tiny-Chat (576.1 KB download) speeds it up")
    assert details.draft_button.text() == "Download Tiny-Chat"
    with app.qtbot.waitSignal(app.models.models_changed, timeout=10000):
        app.qtbot.mouseClick(details.draft_button, Qt.MouseButton.LeftButton)
        assert list(panel.download_rows) == ["tiny-chat"]  # the draft's catalog id
        assert app.models.jobs.job("tiny-chat").title == "Tiny-Chat"
        assert not details.draft_button.isEnabled()  # while it downloads
    app.qtbot.waitUntil(lambda: "tiny-chat" not in panel.download_rows)
    assert ModelLibrary().get("tiny-chat") is not None
    panel.tabs.setCurrentIndex(0)
    panel.select_catalog("tiny-big")
    assert details.draft_label.isVisible()
    assert details.draft_label.text() == (
        "Draft installed: replies that quote the chat come out faster (Tiny-Chat drafts for "
        "Tiny-Big). Load the model again to use it.")
    assert details.draft_button.isVisible() and details.draft_button.text() == "Load again"
    # loaded again, the target runs with its installed draft attached
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=10000):
        app.qtbot.mouseClick(details.draft_button, Qt.MouseButton.LeftButton)
    assert app.controller.model_info.draft
    assert f"draft model {app.controller.model_info.draft}" in (
        app.window.status.model_label.toolTip())
    assert details.draft_label.text().endswith("(Tiny-Chat drafts for Tiny-Big).")
    assert details.draft_button.isHidden()
    assert not app.models.draft_waiting(app.controller.model_info.path)


def test_an_unreachable_hub_is_said_in_the_search_dialog_within_two_seconds(make_app, hub):
    """Issue 28 item 3: a refused connection is not retried; the reason is in the dialog."""
    refused = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    refused.bind(("127.0.0.1", 0))  # bound, never listening: connects are refused
    try:
        app = make_app()
        panel = manager(app, hub)
        app.settings.set("hub_endpoint", f"http://127.0.0.1:{refused.getsockname()[1]}")
        panel.tabs.setCurrentIndex(1)
        panel.search_edit.setText("phi")
        app.qtbot.mouseClick(panel.search_button, Qt.MouseButton.LeftButton)
        assert panel.search_status.text() == "Searching…"
        app.qtbot.waitUntil(lambda: panel.search_status.text() != "Searching…", timeout=2000)
        text = panel.search_status.text()
        assert text.startswith("You're offline (or the Hub is unreachable): "
                               "the connection was refused"), text
        assert panel.search_status.isVisible()
    finally:
        refused.close()
