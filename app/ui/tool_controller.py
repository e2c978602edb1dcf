"""The tools side of the window (UI thread): which MCP servers exist, which ones the open
chat offers, the toolbox the chat controller hands each turn, and the user's consent.

- **Servers** are ``app/tools/config.py`` ``ServerStore``'s (add, remove, import from an
  ``mcpServers`` file); listing a server's tools starts it, so that runs as a job on the
  ``hearth-tools`` job thread (``list_tools``) and ends in ``tools_listed``.
- **Per chat** choices are ``ChatToolsStore``'s (a chat starts with none). The unsent new
  chat keeps its choice here until its first message creates the conversation.
- **The toolbox**: ``ChatController.toolbox`` is an ``McpToolbox`` over the chat's servers
  (``allow``: its tool switches), or None when it has none. A message held in a chat that
  is no longer open (its files were being read) gets that chat's own toolbox
  (``toolbox_for``, set as ``ChatController.toolbox_for``). A toolbox whose servers are no
  longer chosen is closed once no reply is using it, and every toolbox is closed on quit
  (``shutdown``): no server process outlives the window.
- **Consent**: ``ChatController.approval_requested`` lands here; the call is the running
  turn's (``ChatController.turn_toolbox``), whichever chat is open. A tool the user always
  allows is answered at once; any other call goes to ``approval_needed`` (the window's
  approval bar), whose answer is ``answer`` (Allow once / Always allow this tool / Deny,
  ``app/tools/consent.py`` ``Decision``; "always" is kept in ``AlwaysAllowed``).

Nothing here imports the MCP SDK before a server is used: the window paints without it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from app.errors import HearthError
from app.jobs import Job
from app.tools.config import ServerConfig, ServerStore
from app.tools.consent import AlwaysAllowed, Decision
from app.tools.selection import ChatTools, ChatToolsStore
from app.tools.spec import Tool
from app.workers.job_worker import JobRunner

if TYPE_CHECKING:
    from app.tools.toolbox import McpToolbox
    from app.ui.controller import ChatController
    from app.workers.generation_worker import ApprovalRequest

LIST_JOB = "list-tools:"
#: on quit: how long a toolbox closing in the background is waited for
CLOSE_WAIT_S = 15.0


class ToolController(QObject):
    """Signals:
    servers_changed(): a server was added or removed.
    tools_listed(str server, object tools, str problem): a listing ended (``tools``: the
        server's ``Tool``\\s; ``problem``: why there are none, or "").
    choice_changed(object ChatTools): the open chat's servers or tools changed.
    approval_needed(ApprovalRequest, object Tool | None, bool can_run): ask the user
        (``answer``); ``can_run`` False when no toolbox could run the call.
    approval_done(): the question on show was answered or the reply ended.
    """

    servers_changed = Signal()
    tools_listed = Signal(str, object, str)
    choice_changed = Signal(object)
    approval_needed = Signal(object, object, bool)
    approval_done = Signal()

    def __init__(self, chat: ChatController, *, servers: ServerStore | None = None,
                 choices: ChatToolsStore | None = None, always: AlwaysAllowed | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.chat = chat
        self.servers = servers or ServerStore()
        self.choices = choices or ChatToolsStore()
        self.always = always or AlwaysAllowed()
        self.known_tools: dict[str, list[Tool]] = {}  # server → its tools, once listed
        self.problems: dict[str, str] = {}  # server → why it listed no tools
        self._pending = ChatTools()  # the unsent new chat's choice
        self._toolbox: McpToolbox | None = None
        self._toolbox_servers: frozenset[str] = frozenset()
        self._retired: list[McpToolbox] = []  # closed once no reply uses them
        self._closing: list[threading.Thread] = []
        self._asking: ApprovalRequest | None = None
        self._asking_tool: Tool | None = None
        self.jobs = JobRunner("hearth-tools", self)
        self.jobs.worker.finished.connect(self.on_listed)
        self.jobs.worker.failed.connect(self.on_list_failed)
        self.jobs.worker.crashed.connect(chat.bridge.crash)
        chat.toolbox_for = self.toolbox_for
        chat.conversation_opened.connect(self.on_conversation_opened)
        chat.generating_changed.connect(self.on_generating_changed)
        chat.line_changed.connect(self.on_line_changed)
        chat.approval_requested.connect(self.on_approval_requested)

    # servers ------------------------------------------------------------------------------

    def server_list(self) -> list[ServerConfig]:
        return self.servers.list()

    def add_server(self, server: ServerConfig) -> bool:
        try:
            self.servers.add(server)
        except HearthError as exc:
            self.chat.bridge.report(exc)
            return False
        self.servers_changed.emit()
        return True

    def remove_server(self, name: str) -> bool:
        if not self.servers.remove(name):
            return False
        self.choices.forget_server(name)
        self.always.forget_server(name)
        self._pending = ChatTools(self._pending.servers - {name}, self._pending.tools_off)
        self.known_tools.pop(name, None)
        self.servers_changed.emit()
        self.apply_choice()
        return True

    def import_servers(self, path: str) -> tuple[str, ...]:
        """Add the servers of a Claude Desktop / LM Studio ``mcpServers`` file; the
        banner says what was added and what was skipped."""
        from pathlib import Path

        try:
            imported = self.servers.import_file(Path(path))
        except HearthError as exc:
            self.chat.bridge.report(exc)
            return ()
        name = Path(path).name
        if imported.added:
            self.servers_changed.emit()
        added = ", ".join(imported.added) or "no servers"
        sentence = f"Imported {added} from {name}."
        if imported.skipped:
            sentence += " " + " ".join(imported.skipped)
            self.chat.bridge.warning(sentence)
        else:
            self.chat.bridge.info(sentence)
        return imported.added

    def list_tools(self, name: str) -> bool:
        """Start the server and list its tools (a job; ``tools_listed`` when it ends)."""
        server = self.servers.get(name)
        if server is None:
            return False

        def work(_report, _control) -> tuple[list[Tool], str]:
            from app.tools.toolbox import McpToolbox

            with McpToolbox([server]) as toolbox:
                tools = toolbox.tools()
                return tools, toolbox.problems.get(name, "")

        return self.jobs.submit(Job(LIST_JOB + name, f"Listing the tools of {name}", work))

    def on_listed(self, job_id: str, result: Any) -> None:
        if not job_id.startswith(LIST_JOB):
            return
        name = job_id[len(LIST_JOB):]
        tools, problem = result
        self.known_tools[name] = list(tools)
        if problem:
            self.problems[name] = problem
        else:
            self.problems.pop(name, None)
        self.tools_listed.emit(name, list(tools), problem)

    def on_list_failed(self, job_id: str, sentence: str) -> None:
        if job_id.startswith(LIST_JOB):
            name = job_id[len(LIST_JOB):]
            self.problems[name] = sentence
            self.tools_listed.emit(name, [], sentence)

    # per chat -----------------------------------------------------------------------------

    def choice(self) -> ChatTools:
        """The open chat's servers and tool switches."""
        cid = self.chat.current_id
        return self.choices.get(cid) if cid is not None else self._pending

    def set_server_on(self, name: str, on: bool) -> None:
        self._store(self.choice().with_server(name, on))
        if on and name not in self.known_tools:
            self.list_tools(name)  # the menu can then switch single tools

    def set_tool_on(self, tool: Tool, on: bool) -> None:
        self._store(self.choice().with_tool(tool, on))

    def _store(self, choice: ChatTools) -> None:
        cid = self.chat.current_id
        if self.chat.generating and self.chat.busy_conversation == cid:  # its turn's tools
            self.chat.bridge.info("Stop the reply before changing the chat's tools.")
            return
        if cid is None:
            self._pending = choice
        else:
            self.choices.set(cid, choice)
        self.apply_choice()
        self.choice_changed.emit(choice)

    def on_conversation_opened(self, conversation_id: object, _values: object) -> None:
        if conversation_id is None:
            self._pending = ChatTools()
        self.apply_choice()
        self.choice_changed.emit(self.choice())

    def apply_choice(self) -> None:
        """Point ``ChatController.toolbox`` at the open chat's servers (None: none)."""
        choice = self.choice()
        names = frozenset(n for n in choice.servers if n in set(self.servers.names()))
        if names != self._toolbox_servers:
            if self._toolbox is not None:
                self._retired.append(self._toolbox)
            self._toolbox, self._toolbox_servers = None, names
            if names:
                from app.tools.toolbox import McpToolbox

                configs = [c for n in sorted(names) if (c := self.servers.get(n)) is not None]
                self._toolbox = McpToolbox(configs, allow=choice.allows)
            if not self.chat.generating:
                self._close_retired()
        if self._toolbox is not None:
            self._toolbox.allow = choice.allows
        self.chat.toolbox = self._toolbox

    @property
    def toolbox(self) -> McpToolbox | None:
        return self._toolbox

    def toolbox_for(self, conversation_id: str) -> McpToolbox | None:
        """The toolbox of chat ``conversation_id`` for a reply starting now: the open
        chat's, or for another chat a toolbox of its own servers and tool switches, closed
        once the reply has ended (None: the chat offers no tools)."""
        if conversation_id == self.chat.current_id:
            return self._toolbox
        choice = self.choices.get(conversation_id)
        configs = [c for n in sorted(choice.servers) if (c := self.servers.get(n)) is not None]
        if not configs:
            return None
        from app.tools.toolbox import McpToolbox

        toolbox = McpToolbox(configs, allow=choice.allows)
        self._retired.append(toolbox)  # closed when no reply is running any more
        return toolbox

    def on_line_changed(self, _line: object) -> None:
        """A new chat's first message may wait its turn: its choice goes with it now."""
        self._claim_pending()

    def on_generating_changed(self, generating: bool) -> None:
        if generating:
            self._claim_pending()
        else:
            self._end_asking()
            self._close_retired()

    def _claim_pending(self) -> None:
        cid = self.chat.current_id
        if cid is not None and (self._pending.servers or self._pending.tools_off):
            if self.choices.get(cid) == ChatTools():  # the new chat's first message
                self.choices.set(cid, self._pending)
            self._pending = ChatTools()

    def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        self._closing = [t for t in self._closing if t.is_alive()]
        for toolbox in retired:  # bounded (each server's close has its own limit)
            thread = threading.Thread(target=toolbox.close, name="hearth-toolbox-close",
                                      daemon=True)
            thread.start()
            self._closing.append(thread)

    # consent ------------------------------------------------------------------------------

    def on_approval_requested(self, request: ApprovalRequest) -> None:
        toolbox = self.chat.turn_toolbox  # the turn's (its chat may no longer be open)
        mine = toolbox is not None and (toolbox is self._toolbox or any(
            toolbox is t for t in self._retired))
        tool = toolbox.resolve(request.call.name) if mine else None  # type: ignore[union-attr]
        if tool is not None and tool in self.always:
            self.chat.answer_approval(True)
            return
        self._asking, self._asking_tool = request, tool
        # a toolbox not made here (a test's, an embedder's) runs what it offers
        can_run = tool is not None or (toolbox is not None and not mine)
        self.approval_needed.emit(request, tool, can_run)

    def answer(self, decision: Decision) -> None:
        """The user's answer to the call on show."""
        tool = self._asking_tool
        if self._asking is None:
            return
        if decision is Decision.ALWAYS and tool is not None:
            self.always.add(tool)
        self._end_asking()
        self.chat.answer_approval(decision is not Decision.DENY)

    @property
    def asking(self) -> ApprovalRequest | None:
        return self._asking

    def _end_asking(self) -> None:
        if self._asking is not None:
            self._asking = self._asking_tool = None
            self.approval_done.emit()

    # quit ---------------------------------------------------------------------------------

    def shutdown(self) -> bool:
        """Close every toolbox (their servers stop) and the listing thread."""
        self._end_asking()
        toolboxes = [*self._retired, *([self._toolbox] if self._toolbox else [])]
        self._retired, self._toolbox = [], None
        self._toolbox_servers = frozenset()
        self.chat.toolbox = None
        for toolbox in toolboxes:
            toolbox.close()
        for thread in self._closing:
            thread.join(CLOSE_WAIT_S)
        self._closing = []
        return self.jobs.shutdown()
