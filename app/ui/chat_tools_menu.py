"""The composer's "Tools" button: which MCP servers (and which of their tools) this chat
offers the model. A chat starts with none; the menu is rebuilt each time it opens, from
``ToolController`` (the servers, and the tools of those already listed)."""

from __future__ import annotations

from PySide6.QtWidgets import QMenu, QToolButton, QWidget

from app.ui.focus_ring import RingToolButton
from app.ui.tool_controller import ToolController


class ChatToolsButton(RingToolButton):
    def __init__(self, tools: ToolController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self.setObjectName("chatToolsButton")
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.show_menu_arrow = False  # its text ends with "▾" (no sheet: it zooms, themes)
        self.setAccessibleDescription("Choose the MCP servers and tools this chat may use.")
        self.menu_ = QMenu(self)
        self.menu_.aboutToShow.connect(self.rebuild)
        self.setMenu(self.menu_)
        tools.choice_changed.connect(self.update_label)
        tools.servers_changed.connect(self.update_label)
        self.update_label()

    def update_label(self, *_: object) -> None:
        on = [s for s in self.tools.choice().servers if s in set(self.tools.servers.names())]
        self.setText((f"Tools: {len(on)}" if on else "Tools: off") + " ▾")
        self.setToolTip("Tools this chat offers: " + (", ".join(sorted(on)) or "none"))
        self.setAccessibleName(self.text())

    def rebuild(self) -> None:
        menu = self.menu_
        menu.clear()
        choice = self.tools.choice()
        servers = self.tools.server_list()
        if not servers:
            none = menu.addAction("No MCP servers yet: add them in Settings ▸ Tools")
            none.setEnabled(False)
            return
        for server in servers:
            action = menu.addAction(server.name)
            action.setCheckable(True)
            action.setChecked(server.name in choice.servers)
            action.setToolTip(server.describe())
            action.toggled.connect(
                lambda on, n=server.name: self.tools.set_server_on(n, on))
            known = self.tools.known_tools.get(server.name)
            if server.name in choice.servers and known:
                for tool in known:
                    item = menu.addAction(f"    {tool.name}")
                    item.setCheckable(True)
                    item.setChecked(tool.key not in choice.tools_off)
                    item.setToolTip(tool.description)
                    item.toggled.connect(lambda on, t=tool: self.tools.set_tool_on(t, on))
