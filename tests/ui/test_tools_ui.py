"""Tools in the window: each call is a card in the reply, the approval bar asks (Allow once
/ Always / Deny), Settings ▸ Tools adds, lists, imports and removes MCP servers, and the
composer's Tools menu switches a server on for a chat, with the real ``mcp-server-time``
over stdio. Screenshots go to $HEARTH_SCREENSHOTS when set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.chat.parts import ToolCall, ToolResult
from app.chat.turn import DENIED
from app.engine.types import ParsedToolCall
from app.tools.consent import AlwaysAllowed
from tests.tools.conftest import time_server
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("HEARTH_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _grab(app, widget, path: Path) -> None:
    app.window.chat_view.flush()
    app.qtbot.wait(50)
    assert widget.grab().save(str(path))


class Clock:
    def specs(self) -> list[dict]:
        return [{"type": "function", "function": {"name": "get_time", "parameters": {}}}]

    def call(self, call: ToolCall) -> ToolResult:
        return ToolResult(call.id, "09:15", name=call.name)


@pytest.fixture
def clock_app(make_app, model_dir):
    app = make_app(FakeLoader(tool_calls=[ParsedToolCall("call_1", "get_time", "{}")],
                              script=["It", " is", " 09:15."]))
    app.window.resize(800, 600)
    app.load(model_dir)
    app.controller.toolbox = Clock()
    return app


def _reply_cards(app):
    return [c for w in app.window.chat_view.message_widgets() for c in w.tool_cards.values()]


def test_a_call_is_a_card_that_asks_in_the_bar_and_shows_its_result(clock_app, tmp_path):
    app = clock_app
    bar = app.window.approval_bar
    app.send("What time is it?", wait=False)
    app.qtbot.waitUntil(bar.isVisible, timeout=5000)
    card = app.window.chat_view.tool_card("call_1")
    assert card is not None and card.state == "asking"
    assert card.header_text() == "Tool: get_time · waiting for your answer"
    assert "get_time" in bar.question.text()
    _grab(app, app.window, _shots(tmp_path) / "tools-approval-800x600.png")
    app.qtbot.mouseClick(bar.allow_once, Qt.MouseButton.LeftButton)
    app.wait_idle()
    assert not bar.isVisible()
    card = app.window.chat_view.tool_card("call_1")
    assert card.state == "done" and card.result.content == "09:15"
    assert card.result.duration_ms is not None and card.result.duration_ms >= 0
    assert card.header_text().startswith("Tool: get_time · ") and "ms" in card.header_text()
    assert not card.details.isVisible()
    app.qtbot.mouseClick(card.toggle, Qt.MouseButton.LeftButton)
    assert card.expanded and card.details.isVisible()
    assert card.result_label.text() == "09:15" and card.arguments_label.text() == "{}"
    _grab(app, app.window, _shots(tmp_path) / "tools-card-open-800x600.png")
    # the tool row itself is not a message on screen: its result is in the card
    rows = app.window.chat_view.message_widgets()
    assert [w.message.role for w in rows] == ["user", "assistant", "tool", "assistant"]
    assert [w.isVisible() for w in rows] == [True, True, False, True]
    assert "Tool: get_time" in app.window.chat_view.toPlainText()
    # reopened, the card shows the stored result again (duration too)
    conv = app.controller.current_id
    app.controller.new_conversation()
    app.controller.open_conversation(conv)
    card = app.window.chat_view.tool_card("call_1")
    assert card.state == "done" and card.result.content == "09:15"
    assert card.result.duration_ms is not None


def test_a_denied_call_shows_as_refused(clock_app, tmp_path):
    app = clock_app
    bar = app.window.approval_bar
    app.send("What time is it?", wait=False)
    app.qtbot.waitUntil(bar.isVisible, timeout=5000)
    assert not bar.always.isEnabled()  # not an MCP tool: nothing to remember
    app.qtbot.mouseClick(bar.deny, Qt.MouseButton.LeftButton)
    app.wait_idle()
    card = app.window.chat_view.tool_card("call_1")
    assert card.state == "refused" and card.header_text() == "Tool: get_time · refused"
    stored = app.history.active_path(app.controller.current_id)
    assert stored[2].parts == (ToolResult("call_1", DENIED, is_error=True, name="get_time"),)
    app.qtbot.mouseClick(card.toggle, Qt.MouseButton.LeftButton)
    _grab(app, app.window, _shots(tmp_path) / "tools-refused-800x600.png")


def test_stop_while_asking_ends_the_question(clock_app):
    app = clock_app
    bar = app.window.approval_bar
    app.send("What time is it?", wait=False)
    app.qtbot.waitUntil(bar.isVisible, timeout=5000)
    app.controller.stop()
    app.wait_idle()
    assert not bar.isVisible()
    assert app.window.chat_view.tool_card("call_1").state == "refused"


def _open_tools_page(app):
    app.window.on_preferences()
    prefs = app.window.preferences
    titles = [prefs.tabs.tabText(i) for i in range(prefs.tabs.count())]
    prefs.tabs.setCurrentIndex(titles.index("Tools"))
    return prefs, prefs.tabs.currentWidget()


def _children_running(module: str) -> list[int]:
    """Processes whose parent is this one and whose command line names ``module``."""
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and module in cmdline:
            found.append(int(entry.name))
    return found


def test_the_real_time_server_added_in_settings_runs_in_a_chat(make_app, model_dir, tmp_path):
    call = ParsedToolCall("call_t", "get_current_time", '{"timezone": "UTC"}')
    app = make_app(FakeLoader(tool_calls=[call], script=["Done."]))
    app.load(model_dir)
    prefs, page = _open_tools_page(app)
    prefs.resize(800, 600)
    # add it as a user would: a name and a command line
    server = time_server()
    page.name_edit.setText("time")
    page.target.setText(" ".join([server.command, *server.args]))
    app.qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    assert [s.name for s in app.window.tools.server_list()] == ["time"]
    item = page.server_item("time")
    assert item is not None and "mcp_server_time" in item.text(1)
    page.tree.setCurrentItem(item)  # lists its tools (the server starts, as a job)
    app.qtbot.waitUntil(lambda: item.childCount() > 0, timeout=30000)
    names = [item.child(i).text(0) for i in range(item.childCount())]
    assert "get_current_time" in names
    page.tree.setCurrentItem(item.child(names.index("get_current_time")))
    schema = page.schema.toPlainText()
    assert '"timezone"' in schema and '"properties"' in schema
    _grab(app, prefs, _shots(tmp_path) / "settings-tools-800x600.png")
    prefs.close()

    # the composer's Tools menu switches it on for this chat
    button = app.window.tools_button
    assert button.text() == "Tools: off ▾" and app.controller.toolbox is None
    button.rebuild()
    action = next(a for a in button.menu_.actions() if a.text() == "time")
    action.setChecked(True)
    assert button.text() == "Tools: 1 ▾"
    assert app.controller.toolbox is app.window.tools.toolbox is not None
    bar = app.window.approval_bar
    app.send("What time is it in UTC?", wait=False)
    app.qtbot.waitUntil(bar.isVisible, timeout=30000)
    assert bar.always.isEnabled()
    app.qtbot.mouseClick(bar.always, Qt.MouseButton.LeftButton)
    app.wait_idle(timeout=30000)
    card = app.window.chat_view.tool_card("call_t")
    assert card.state == "done", card.result
    assert '"timezone": "UTC"' in card.result.content
    always = sorted(AlwaysAllowed().keys())
    assert always == ["time/get_current_time"]
    # the choice is the chat's own, stored: a new chat starts without tools
    conv = app.controller.current_id
    assert app.window.tools.choices.get(conv).servers == {"time"}
    app.send("And now?", wait=False)  # always allowed: no question this time
    app.wait_idle(timeout=30000)
    assert not bar.isVisible()
    cards = _reply_cards(app)
    assert [c.state for c in cards] == ["done", "done"]
    app.window.resize(1000, 700)
    _grab(app, app.window, _shots(tmp_path) / "tools-real-server-1000x700.png")
    app.controller.new_conversation()
    assert app.controller.toolbox is None and button.text() == "Tools: off ▾"
    app.controller.open_conversation(conv)
    assert app.controller.toolbox is not None and button.text() == "Tools: 1 ▾"
    # the reopened chat's toolbox starts its server when its tools are first needed (the
    # closed one's process may or may not have ended by now: wait for it to go first)
    app.qtbot.waitUntil(lambda: len(_children_running("mcp_server_time")) == 0, timeout=30000)
    assert "get_current_time" in [t.name for t in app.controller.toolbox.tools()]
    assert _children_running("mcp_server_time")
    # quitting stops the server: no process outlives the window
    app.close()
    assert _children_running("mcp_server_time") == []


def test_import_and_remove_servers_in_settings(app, tmp_path):
    config = tmp_path / "claude_desktop_config.json"
    config.write_text(json.dumps({"mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time"]},
        "docs": {"url": "http://127.0.0.1:9/mcp"},
        "bad name!": {"command": "x"},
    }}), encoding="utf-8")
    _prefs, page = _open_tools_page(app)
    page.ask_import_path = lambda: str(config)
    app.qtbot.mouseClick(page.import_button, Qt.MouseButton.LeftButton)
    assert [s.name for s in app.window.tools.server_list()] == ["time", "docs"]
    assert page.tree.topLevelItemCount() == 2
    assert page.server_item("docs").text(1) == "http http://127.0.0.1:9/mcp"
    assert "bad name!" in app.window.banner.text()
    page.tree.setCurrentItem(page.server_item("time"))
    app.window.tools.jobs.cancel("list-tools:time")
    app.qtbot.mouseClick(page.remove_button, Qt.MouseButton.LeftButton)
    assert [s.name for s in app.window.tools.server_list()] == ["docs"]
    # a bad command line is a sentence, nothing is added
    page.name_edit.setText("x")
    page.target.setText("'unclosed")
    app.qtbot.mouseClick(page.add_button, Qt.MouseButton.LeftButton)
    assert "cannot be read" in app.window.banner.text()
    assert [s.name for s in app.window.tools.server_list()] == ["docs"]
