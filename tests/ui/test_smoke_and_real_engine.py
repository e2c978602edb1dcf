"""The smoke-test entry point and one end-to-end run with the real engine on a tiny model."""

from __future__ import annotations

import pytest

from app.chat.events import TextDelta
from app.settings import Settings

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def real_engine_available() -> bool:
    try:
        from app.engine.engine import Engine  # noqa: F401
    except ImportError:
        return False
    return True


needs_engine = pytest.mark.skipif(
    not real_engine_available(), reason="app.engine.engine is not importable yet"
)


def test_smoke_test_without_any_model_fails_with_a_reason(qapp, monkeypatch, tmp_path, capsys):
    from app.errors import DownloadError
    from app.models import starter
    from app.ui.launch import run_app

    def offline(progress=None):
        raise DownloadError("Could not download the starter model: no network.")

    monkeypatch.setattr(starter, "ensure_starter", offline)
    code = run_app(smoke_test=str(tmp_path / "out.png"))
    assert code == 3
    assert "no model is installed" in capsys.readouterr().err
    assert not (tmp_path / "out.png").exists()


@needs_engine
def test_smoke_test_with_real_engine(qapp, gqa_model_dir, tmp_path, capsys):
    from app.ui.launch import run_app

    settings = Settings()
    settings.set("last_model", str(gqa_model_dir))
    settings.set("max_tokens", 24)  # the tiny model holds 512 tokens
    settings.save()
    out = tmp_path / "out.png"
    code = run_app(smoke_test=str(out))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "reply: " in captured.out and "stats: " in captured.out
    assert out.stat().st_size > 1000


@needs_engine
def test_real_engine_end_to_end(make_app, gqa_model_dir):
    from app.loading import default_loader

    first = make_app(default_loader)
    first.load(gqa_model_dir)
    panel = first.window.settings_panel
    panel.editors["temperature"].setValue(0.0)  # greedy: replies are reproducible
    panel.editors["max_tokens"].setValue(12)
    chunks: list[str] = []
    first.controller.worker.event.connect(
        lambda conv, event: chunks.append(event.text) if isinstance(event, TextDelta) else None)
    first.send("Hello there", wait=False)
    first.wait_idle(timeout=60000)
    _role, reply, status = first.rows()[1]
    assert status == "complete" and reply == "".join(chunks)
    prov = first.history.messages(first.controller.current_id)[1].provenance
    assert prov["stats"]["generated_tokens"] >= 1 and prov["provider"] == "cpu"
    # regenerate (greedy) gives the same reply
    from PySide6.QtCore import QUrl

    first.window.chat_view.anchorClicked.emit(QUrl("hearth:regenerate/1"))
    first.wait_idle(timeout=60000)
    assert first.rows()[1][1] == reply
    # a second turn, then edit the first message and re-run from there
    first.send("And again", wait=True)
    assert len(first.rows()) == 4
    first.window.chat_view.anchorClicked.emit(QUrl("hearth:edit/0"))
    first.send("Hello there")
    assert len(first.rows()) == 2 and first.rows()[1][1] == reply
    conv = first.controller.current_id
    first.close()
    # restart over the same database and find everything
    second = make_app(default_loader)
    second.controller.open_conversation(conv)
    assert second.rows() == [("user", "Hello there", "complete"), ("assistant", reply, "complete")]
