"""What the window adds around a chat for tools: the tool controller, the approval bar
above the composer, the composer's Tools menu, and the Settings tab. One place that
connects them, so the main window only calls ``install_tools``."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QWidget

from app.ui.approval_bar import ApprovalBar
from app.ui.chat_tools_menu import ChatToolsButton
from app.ui.tool_controller import ToolController

if TYPE_CHECKING:
    from app.workers.generation_worker import ApprovalRequest

#: the main window (not imported: it imports this module)
MainWindow = Any


def install_tools(window: MainWindow, chat_layout) -> ToolController:
    """The window's tools: ``window.tools``, ``window.approval_bar`` (above the composer in
    ``chat_layout``), ``window.tools_button`` in the composer."""
    tools = ToolController(window.controller, parent=window)
    bar = ApprovalBar(window)
    chat_layout.insertWidget(chat_layout.indexOf(window.composer), bar)
    button = ChatToolsButton(tools, window.composer)
    window.composer.add_accessory(button, end=True)
    window.tools, window.approval_bar, window.tools_button = tools, bar, button

    asked: list = []  # the card of the call on show

    def on_needed(request: ApprovalRequest, tool: object, can_run: bool) -> None:
        card = window.chat_view.tool_card(request.call.id)
        if card is not None:
            card.set_asking(True)
            asked[:] = [card]
        bar.ask(request.call.name, request.call.arguments, tool,  # type: ignore[arg-type]
                can_run=can_run)

    def on_done() -> None:
        bar.hide()
        for card in asked:
            with contextlib.suppress(RuntimeError):  # its reply was re-rendered meanwhile
                card.set_asking(False)
        asked.clear()
        window.composer.edit.setFocus()

    tools.approval_needed.connect(on_needed)
    tools.approval_done.connect(on_done)
    bar.decided.connect(tools.answer)
    return tools


def tools_page(window: MainWindow, parent: QWidget) -> QWidget:
    from app.ui.tools_page import ToolsPage

    return ToolsPage(window.tools, parent)
