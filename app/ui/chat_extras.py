"""What the window adds around a chat for tools and documents: the tool controller, the
approval bar above the composer, the composer's Tools and Libraries menus and attachment
tray, the documents controller, and the Settings tabs. One place that connects them, so the
main window only calls ``install_tools`` / ``install_documents``."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QWidget

from app.ui.approval_bar import ApprovalBar
from app.ui.attachment_tray import AttachmentTray
from app.ui.chat_libraries_menu import ChatLibrariesButton, ChatLibrariesList
from app.ui.chat_tools_menu import ChatToolsButton
from app.ui.documents_controller import DocumentsController
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
        chat = ""
        if request.conversation_id != window.controller.current_id:  # asked out of sight
            conv = window.controller.history.get_conversation(request.conversation_id)
            chat = (conv.title if conv is not None else "") or "New chat"
        bar.ask(request.call.name, request.call.arguments, tool,  # type: ignore[arg-type]
                can_run=can_run, chat=chat)

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


def install_documents(window: MainWindow) -> DocumentsController:
    """The window's documents: ``window.documents``, the composer's attachment tray
    (``window.attachments``, fed by drops and pastes too; its files go with the message),
    its Libraries menu, the chat settings' Libraries list
    (``window.libraries_list``) and the status bar's documents activity."""
    documents = DocumentsController(window.controller, parent=window)
    tray = AttachmentTray(window.composer)
    window.composer.add_accessory(tray)
    window.composer.edit.files_added.connect(tray.add)
    button = ChatLibrariesButton(documents, window.composer)
    window.composer.add_accessory(button, end=True)
    listing = ChatLibrariesList(documents, window.settings_panel)
    window.settings_panel.add_section(listing)
    window.documents, window.attachments, window.libraries_button = documents, tray, button
    window.libraries_list = listing
    documents.index_progress.connect(
        lambda p: window.status.showMessage(p.message, 4000) if p is not None else None)
    documents.activity.connect(lambda text: window.status.set_documents(text))
    documents.attachments_sent.connect(tray.discard)
    return documents


def send_with_attachments(window: MainWindow, text: str) -> bool:
    """The composer's message with the tray's files: they leave the tray with it (its row
    in the chat shows them, "reading…" while they are read), and stay when it is not sent."""
    return window.documents.send(text, list(window.attachments.files))


def documents_page(window: MainWindow, parent: QWidget) -> QWidget:
    from app.ui.documents_page import DocumentsPage

    return DocumentsPage(window.documents, parent)
