"""A message held in its chat while its attachment is read is answered there as if that
chat were open, also when the user opened another chat meanwhile: with its own MCP
servers (the real ``mcp-server-time``, asked in the approval bar, which names the chat),
its own libraries, system prompt and settings, none of the open chat's.

The reading waits for the test's go-ahead (``Slow`` in test_documents_threads.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.chat.parts import Attachment, Source, ToolResult
from app.documents.attach import attachment
from app.engine.types import ParsedToolCall
from tests.tools.conftest import time_server
from tests.ui.test_documents_threads import Slow
from tests.ui.test_documents_ui import Opened, WordsEmbedder
from tests.workers.fake_engine import FakeLoader

pytestmark = [
    pytest.mark.qt_log_level_fail("WARNING"),
    pytest.mark.qt_log_ignore("propagateSizeHints"),
]

QUESTION = "How often should the kettle be descaled with citric acid?"
PROMPT = "You answer questions about the kettle."
CALL = ParsedToolCall("call_t", "get_current_time", '{"timezone": "UTC"}')


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "kettle.md").write_text(
        "# Kettle\n\n## Descaling\n\nDescale the kettle monthly with citric acid and "
        "rinse twice.\n", encoding="utf-8")
    return folder


def _names(tools) -> list[str]:
    return [t["function"]["name"] for t in tools or ()]


def test_a_held_message_answered_in_another_chat_uses_its_own_tools_and_libraries(
        make_app, model_dir, docs, tmp_path):
    loader = FakeLoader(tool_calls=[CALL], script=["Done."])  # calls the tool when offered
    app = make_app(loader)
    app.load(model_dir)
    documents, tools = app.window.documents, app.window.tools
    documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                   WordsEmbedder())
    documents.index("Home", [docs])
    app.qtbot.waitUntil(lambda: documents.is_open and documents.indexing is None,
                        timeout=15000)
    assert tools.add_server(time_server())
    # another chat, with no tools, no library and the default settings
    app.send("Hello there")
    other = app.controller.current_id
    assert _names(loader.last.tools_offered[-1]) == []
    app.controller.new_conversation()
    # the new chat: the time server, the library, its own prompt and temperature
    tools.set_server_on("time", True)
    documents.set_library_on("Home", True)
    panel = app.window.settings_panel
    panel.editors["system_prompt"].setPlainText(PROMPT)
    panel.editors["temperature"].setValue(0.25)  # emits changed: the chat's values
    assert app.window.tools_button.text() == "Tools: 1 ▾"
    assert app.window.libraries_button.text() == "Libraries: 1 ▾"
    slow = Slow()

    def read(path: Path, context: int, used: int) -> Attachment:
        slow.wait()
        return attachment(path, context, used)

    documents.read_file = read
    note = tmp_path / "note.txt"
    note.write_text("The kettle is the silver one on the left.\n", encoding="utf-8")
    app.window.attachments.add([note])
    app.send(QUESTION, wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    first = app.controller.current_id
    assert first != other and app.controller.generating
    # the user opens the other chat while the file is read: its tools and library apply
    app.controller.open_conversation(other)
    assert app.window.tools_button.text() == "Tools: off ▾"
    assert app.controller.retriever is None
    turns = len(loader.last.calls)
    slow.gate.set()
    bar = app.window.approval_bar
    app.qtbot.waitUntil(lambda: bar.isVisible() or not app.controller.generating,
                        timeout=30000)
    assert bar.isVisible()  # the held chat's tool asks, though another chat is open
    title = app.history.get_conversation(first).title
    assert bar.question.text().startswith(
        f"In the chat “{title}”, the model wants to run the tool get_current_time "
        "(server time)")
    assert bar.allow_once.isEnabled() and bar.always.isEnabled()
    app.qtbot.mouseClick(bar.allow_once, Qt.MouseButton.LeftButton)
    app.wait_idle(timeout=30000)
    assert not bar.isVisible()
    # the turn ran as in its own chat: its tools, its prompt, its settings
    engine = loader.last
    offered = engine.tools_offered[turns:]
    assert offered and all("get_current_time" in _names(t) for t in offered)
    prompts = engine.calls[turns:]
    assert all(p[0].role == "system" and p[0].content.startswith(PROMPT) for p in prompts)
    assert all(abs(s.sampling.temperature - 0.25) < 1e-9 for s in engine.settings[turns:])
    path = app.history.active_path(first)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    (result,) = path[2].parts
    assert isinstance(result, ToolResult) and not result.is_error
    assert '"timezone": "UTC"' in result.content
    assert path[-1].content == "Done." and path[-1].status == "complete"
    # its library was searched: the sources are stored with the question
    sources = [p for p in path[0].parts if isinstance(p, Source)]
    assert sources and sources[0].document == "kettle.md"
    assert any(isinstance(p, Attachment) and p.name == "note.txt" for p in path[0].parts)
    # the open chat is untouched
    assert app.controller.current_id == other and len(app.rows()) == 2
    assert len(app.history.active_path(other)) == 2


def test_a_call_asked_after_the_user_opened_another_chat_can_still_be_allowed(
        make_app, model_dir):
    loader = FakeLoader(tool_calls=[CALL], script=["Done."])
    app = make_app(loader)
    app.load(model_dir)
    tools = app.window.tools
    assert tools.add_server(time_server())
    app.send("Hello there")
    other = app.controller.current_id
    app.controller.new_conversation()
    tools.set_server_on("time", True)
    app.send("What time is it in UTC?", wait=False)
    first = app.controller.current_id
    # the server starts on the engine's thread; the user moves on before it asks
    app.controller.open_conversation(other)
    bar = app.window.approval_bar
    app.qtbot.waitUntil(lambda: bar.isVisible() or not app.controller.generating,
                        timeout=30000)
    assert bar.isVisible()
    title = app.history.get_conversation(first).title
    assert bar.question.text().startswith(f"In the chat “{title}”, the model wants")
    assert bar.allow_once.isEnabled() and bar.always.isEnabled()  # its chat's tool
    app.qtbot.mouseClick(bar.allow_once, Qt.MouseButton.LeftButton)
    app.wait_idle(timeout=30000)
    path = app.history.active_path(first)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    (result,) = path[2].parts
    assert not result.is_error and '"timezone": "UTC"' in result.content


def test_a_system_prompt_typed_just_before_opening_another_chat_stays_with_its_chat(
        make_app, model_dir):
    app = make_app(FakeLoader(script=["Done."]))
    app.load(model_dir)
    app.send("Hello there")
    other = app.controller.current_id
    app.controller.new_conversation()
    app.send("A question about the kettle")
    first = app.controller.current_id
    panel = app.window.settings_panel
    panel.editors["system_prompt"].setPlainText(PROMPT)  # saved after a short pause…
    app.controller.open_conversation(other)  # …but the user opens another chat at once
    assert app.history.get_conversation(first).system_prompt == PROMPT
    assert app.history.get_conversation(other).system_prompt == ""
    assert panel.editors["system_prompt"].toPlainText() == ""  # the other chat's own
    app.qtbot.wait(600)  # nothing left to land in the wrong chat later
    assert app.history.get_conversation(other).system_prompt == ""
    app.controller.open_conversation(first)
    assert panel.editors["system_prompt"].toPlainText() == PROMPT


class GatedLoader(FakeLoader):
    """Loads once ``gate`` is set (a model still loading when the files are read)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        import threading

        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, path):
        self.gate.wait(30)
        return super().__call__(path)


def test_a_held_message_that_waited_for_the_model_is_answered_in_its_chat_out_of_sight(
        make_app, model_dir, tmp_path):
    loader = GatedLoader(tool_calls=[CALL], script=["Done."])
    app = make_app(loader)
    app.load(model_dir)
    tools = app.window.tools
    assert tools.add_server(time_server())
    app.send("Hello there")
    other = app.controller.current_id
    assert app.controller.unload_model()
    app.qtbot.waitUntil(lambda: app.controller.model_info is None, timeout=15000)
    loader.gate.clear()
    app.controller.load_model(model_dir)  # loading, until the gate opens
    app.controller.new_conversation()
    tools.set_server_on("time", True)
    slow = Slow()

    def read(path: Path, context: int, used: int) -> Attachment:
        slow.wait()
        return attachment(path, context, used)

    app.window.documents.read_file = read
    # (its budget waits for the model's context; a file searched would need the library)
    app.window.documents.library_factory = lambda **_: Opened(tmp_path / "index.sqlite3",
                                                              WordsEmbedder())
    note = tmp_path / "note.txt"
    note.write_text("The kettle is the silver one.\n", encoding="utf-8")
    app.window.attachments.add([note])
    app.send("What time is it in UTC?", wait=False)
    app.qtbot.waitUntil(slow.started.is_set, timeout=5000)
    first = app.controller.current_id
    app.controller.open_conversation(other)
    slow.gate.set()
    app.qtbot.waitUntil(lambda: app.controller.queued, timeout=15000)  # read; waits
    loader.gate.set()
    bar = app.window.approval_bar
    app.qtbot.waitUntil(lambda: bar.isVisible() or not app.controller.generating,
                        timeout=30000)
    assert app.controller.current_id == other  # the user's chat stays on screen
    assert bar.isVisible() and bar.question.text().startswith("In the chat “")
    app.qtbot.mouseClick(bar.allow_once, Qt.MouseButton.LeftButton)
    app.wait_idle(timeout=30000)
    assert app.controller.current_id == other and len(app.rows()) == 2
    path = app.history.active_path(first)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    assert '"timezone": "UTC"' in path[2].parts[0].content
