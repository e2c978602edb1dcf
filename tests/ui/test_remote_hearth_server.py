"""Hearth's remote source against Hearth's own server (``hearth serve``'s stack on a real tiny
model), through the real window and controllers: pick the remote model, chat (the reply equals
the model's own greedy reply), stop mid-stream, and the server dying mid-reply."""

from __future__ import annotations

import json

import pytest

from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.loading import default_loader
from app.remote.sources import is_remote_target
from tests.fixtures.tiny_models import build_gqa_model
from tests.server.conftest import serve  # noqa: F401 - the fixture
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


@pytest.fixture(scope="module")
def endless_model(tmp_path_factory):
    """A tiny GQA model that never samples EOS: only Stop, the token limit or a failure end a
    reply, so a stream is still running when the test acts on it."""
    folder = build_gqa_model(tmp_path_factory.mktemp("endless") / "endless", num_layers=4,
                             hidden=256, heads=4, kv_heads=2, head_dim=64, context_length=4096)
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    config["model"]["eos_token_id"] = [999_999]
    path.write_text(json.dumps(config))
    return folder


@pytest.fixture
def hearth_remote(make_app, serve, endless_model):  # noqa: F811 - serve is the fixture
    served = serve(endless_model)
    fake = FakeLoader()
    app = make_app(lambda path: default_loader(path) if is_remote_target(path) else fake(path))
    with app.qtbot.waitSignal(app.models.remotes_listed, timeout=10000) as blocker:
        source = app.models.add_remote("Hearth on this machine", served.url)
    (listing,) = [e for e in blocker.args[0] if e.source.id == source.id]
    assert [m.model_id for m in listing.models] == [served.model.id]
    with app.qtbot.waitSignal(app.controller.model_loaded, timeout=10000):
        assert app.models.use(listing.models[0].target)
    return app, served


def test_a_chat_through_hearths_own_server_equals_the_models_own_reply(
    hearth_remote, endless_model
):
    app, _served = hearth_remote
    panel = app.window.settings_panel
    panel.editors["temperature"].setValue(0.0)
    panel.editors["max_tokens"].setValue(12)
    app.send("Hello there", wait=False)
    app.wait_idle(timeout=30000)
    role, reply, status = app.rows()[-1]
    assert (role, status) == ("assistant", "complete")
    engine = Engine.load(endless_model, provider="cpu", threads=1)
    settings = GenerationSettings(sampling=SamplingSettings(temperature=0.0), max_new_tokens=12)
    expected = "".join(c.text for c in engine.chat([Message("user", "Hello there")], settings))
    assert reply == expected
    stored = app.history.messages(app.controller.current_id)[-1]
    assert stored.provenance["provider"] == "remote"


def test_stop_mid_stream_keeps_the_partial_reply_as_stopped(hearth_remote):
    app, _served = hearth_remote
    app.window.settings_panel.editors["max_tokens"].setValue(3000)
    app.send("Tell me everything", wait=False)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and len(app.rows()[1][1]) > 20,
                        timeout=30000)
    app.controller.stop()
    app.wait_idle(timeout=10000)
    role, reply, status = app.rows()[-1]
    assert (role, status) == ("assistant", "stopped") and reply
    stored = app.history.messages(app.controller.current_id)[-1]
    assert stored.status == "stopped" and stored.content == reply


def test_the_server_dying_mid_reply_saves_the_partial_reply_as_failed(hearth_remote):
    app, served = hearth_remote
    app.window.settings_panel.editors["max_tokens"].setValue(3000)
    app.send("Tell me everything", wait=False)
    app.qtbot.waitUntil(lambda: len(app.rows()) == 2 and len(app.rows()[1][1]) > 20,
                        timeout=30000)
    served.runner.stop()  # the whole server goes away mid-stream
    app.wait_idle(timeout=15000)
    role, reply, status = app.rows()[-1]
    assert (role, status) == ("assistant", "failed") and reply
    assert app.window.banner.level == "error"
    assert served.url.split("/v1")[0] in app.window.banner.text()
