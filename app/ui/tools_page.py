"""Settings ▸ Tools: the MCP servers the user added, each with its tools and their schemas.

Add a stdio server (a command line) or an HTTP one (a URL), remove one, or import the
``mcpServers`` of a Claude Desktop / LM Studio JSON file. Selecting a server lists its
tools (it starts, as a job); selecting a tool shows its description and argument schema.
"""

from __future__ import annotations

import json
import shlex

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.tools.config import ServerConfig, check_name
from app.tools.spec import Tool
from app.ui.tool_controller import ToolController

ROLE_SERVER = Qt.ItemDataRole.UserRole + 1
ROLE_TOOL = Qt.ItemDataRole.UserRole + 2


class ToolsPage(QWidget):
    def __init__(self, tools: ToolController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self.tree = QTreeWidget(self)
        self.tree.setObjectName("mcpServers")
        self.tree.setHeaderLabels(["Server / tool", "Runs as"])
        self.tree.setAccessibleName("MCP servers and their tools")
        self.tree.setColumnWidth(0, 200)
        self.schema = QPlainTextEdit(self)
        self.schema.setObjectName("toolSchema")
        self.schema.setReadOnly(True)
        self.schema.setPlaceholderText("Select a server to list its tools, and a tool to see "
                                       "its arguments.")
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(self.tree)
        splitter.addWidget(self.schema)
        splitter.setSizes([240, 140])

        self.name_edit = QLineEdit(self)
        self.name_edit.setPlaceholderText("name")
        self.name_edit.setAccessibleName("Server name")
        self.kind = QComboBox(self)
        self.kind.addItem("stdio command", "stdio")
        self.kind.addItem("HTTP URL", "http")
        self.kind.setAccessibleName("How the server runs")
        self.target = QLineEdit(self)
        self.target.setPlaceholderText("uvx mcp-server-time   or   http://127.0.0.1:8000/mcp")
        self.target.setAccessibleName("Command line or URL")
        self.add_button = QPushButton("Add", self)
        self.remove_button = QPushButton("Remove", self)
        self.import_button = QPushButton("Import mcpServers JSON…", self)
        self.import_button.setToolTip("Claude Desktop's claude_desktop_config.json or "
                                      "LM Studio's mcp.json")
        self.note = QLabel("Nothing runs that you did not add here. A chat offers a server's "
                           "tools only when you switch it on in the composer's Tools menu, "
                           "and each call asks first.", self)
        self.note.setWordWrap(True)
        self.note.setEnabled(False)

        add_row = QHBoxLayout()
        add_row.addWidget(self.name_edit, 1)
        add_row.addWidget(self.kind)
        add_row.addWidget(self.target, 3)
        add_row.addWidget(self.add_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        buttons.addWidget(self.import_button)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter, 1)
        layout.addLayout(add_row)
        layout.addLayout(buttons)
        layout.addWidget(self.note)

        self.add_button.clicked.connect(self.on_add)
        self.remove_button.clicked.connect(self.on_remove)
        self.import_button.clicked.connect(self.on_import)
        self.tree.currentItemChanged.connect(self.on_current_changed)
        tools.servers_changed.connect(self.refresh)
        tools.tools_listed.connect(self.on_tools_listed)
        self.refresh()

    # the list ------------------------------------------------------------------------------

    def refresh(self) -> None:
        self.tree.clear()
        for server in self.tools.server_list():
            item = QTreeWidgetItem([server.name, server.describe()])
            item.setData(0, ROLE_SERVER, server.name)
            self.tree.addTopLevelItem(item)
            known = self.tools.known_tools.get(server.name)
            if known is not None:
                self._fill(item, known, self.tools.problems.get(server.name, ""))
        self.remove_button.setEnabled(self.tree.topLevelItemCount() > 0)

    def server_item(self, name: str) -> QTreeWidgetItem | None:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.data(0, ROLE_SERVER) == name:
                return item
        return None

    def _fill(self, item: QTreeWidgetItem, tools: list[Tool], problem: str) -> None:
        item.takeChildren()
        for tool in tools:
            child = QTreeWidgetItem([tool.name, tool.description.splitlines()[0]
                                     if tool.description else ""])
            child.setData(0, ROLE_TOOL, tool)
            item.addChild(child)
        if problem:
            child = QTreeWidgetItem(["(no tools)", problem])
            child.setToolTip(1, problem)
            item.addChild(child)
        item.setExpanded(True)

    def on_tools_listed(self, name: str, tools: object, problem: str) -> None:
        item = self.server_item(name)
        if item is not None:
            self._fill(item, list(tools), problem)  # type: ignore[call-overload]
            if self.tree.currentItem() is item:
                self.schema.setPlainText(problem or f"{len(list(tools))} tools.")  # type: ignore[call-overload]

    def on_current_changed(self, current: QTreeWidgetItem | None, _previous: object) -> None:
        if current is None:
            self.schema.clear()
            return
        tool = current.data(0, ROLE_TOOL)
        if isinstance(tool, Tool):
            self.schema.setPlainText(f"{tool.name}\n{tool.description}\n\n" + json.dumps(
                tool.input_schema, indent=2, ensure_ascii=False))
            return
        name = current.data(0, ROLE_SERVER)
        if name and name not in self.tools.known_tools:
            self.schema.setPlainText(f"Starting {name} to list its tools…")
            self.tools.list_tools(name)

    # changes -------------------------------------------------------------------------------

    def on_add(self) -> None:
        try:
            server = self.server_from_fields()
        except HearthError as exc:
            self.tools.chat.bridge.report(exc)
            return
        if self.tools.add_server(server):
            self.name_edit.clear()
            self.target.clear()

    def server_from_fields(self) -> ServerConfig:
        name = check_name(self.name_edit.text())
        target = self.target.text().strip()
        if self.kind.currentData() == "http":
            if not target.startswith(("http://", "https://")):
                raise HearthError(f"“{target}” is not an http:// or https:// address.")
            return ServerConfig(name, "http", url=target)
        try:
            words = shlex.split(target)
        except ValueError as exc:
            raise HearthError(f"The command line “{target}” cannot be read ({exc}).") from exc
        if not words:
            raise HearthError("Write the command that starts the server, e.g. "
                              "“uvx mcp-server-time”.")
        return ServerConfig(name, "stdio", command=words[0], args=tuple(words[1:]))

    def on_remove(self) -> None:
        item = self.tree.currentItem()
        while item is not None and item.parent() is not None:
            item = item.parent()
        if item is not None:
            self.tools.remove_server(str(item.data(0, ROLE_SERVER)))

    def on_import(self) -> None:
        path = self.ask_import_path()
        if path:
            self.tools.import_servers(path)

    def ask_import_path(self) -> str:  # tests replace this
        path, _ = QFileDialog.getOpenFileName(self, "Import MCP servers", "",
                                              "JSON files (*.json);;All files (*)")
        return path
