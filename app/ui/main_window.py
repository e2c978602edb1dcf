"""The main window: conversation list | chat view + composer | chat settings."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QGuiApplication,
    QKeySequence,
    QShortcut,
)
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QSplitter,
    QStackedWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.jobs import Progress
from app.settings import BY_KEY
from app.ui.chat_extras import (
    documents_page,
    install_documents,
    install_tools,
    send_with_attachments,
    tools_page,
)
from app.ui.chat_view import ChatView
from app.ui.composer import DONT_SEND, Composer
from app.ui.controller import ChatController
from app.ui.conversation_list import ConversationList
from app.ui.file_folders import remember, start_folder
from app.ui.first_run import FirstRunPanel
from app.ui.menus import build_menus, make_action
from app.ui.message_bridge import Banner, CrashDialog
from app.ui.model_controller import STARTER_JOB, USE_HINT, ModelController
from app.ui.model_manager import ModelManagerPanel
from app.ui.server_controller import ServerController
from app.ui.settings_panel import SettingsPanel
from app.ui.status_bar import ChatStatusBar
from app.ui.zoom import set_font_points, text_points, zoomed_setting
from app.workers.generation_worker import ModelInfo

CHAT_PAGE, WELCOME_PAGE = 0, 1


def markdown_import_refusal(name: str) -> str:
    """Why a Markdown file cannot be imported (it would not come back as it was)."""
    return (f"“{name}” is a Markdown export, which Hearth cannot import without losing part "
            "of the chat: it keeps only the versions on screen (not the other versions of "
            "edited or regenerated messages), none of the chat's settings, and a reply that "
            "itself contains a “## You” heading would be split in two. "
            "Export the chat as JSON (File ▸ Export chat ▸ JSON…) to move it losslessly.")


def settings_default(key: str) -> object:
    return BY_KEY[key].default

NARROW_WIDTH = 1000
LOAD_BAR_PX = 90  # the toolbar's model-loading bar  # below this the chat settings panel folds away


class MainWindow(QMainWindow):
    """The window. It builds its own actions; ``controller`` (chats) and ``models`` (models
    on disk) own the state, the window only shows it and forwards the user's intents."""

    def __init__(self, controller: ChatController, models: ModelController) -> None:
        super().__init__()
        self.controller = controller
        self.models = models
        self.bridge = controller.bridge
        self.crash_dialogs: list[CrashDialog] = []
        self._drafts: dict[str, str] = {}  # what was being written, by chat (not the open one)
        self._draft_chat: str | None = None  # the chat the message box's text belongs to
        self.model_manager = ModelManagerPanel(models, self)
        self.model_manager.token_requested.connect(self.on_hub_token)
        self.model_manager.closed.connect(self.on_model_manager_closed)
        self.model_manager.setWindowFlag(Qt.WindowType.Window, True)
        self.server = ServerController(controller.host, self)
        self._remote_listings: list = []
        self.setWindowTitle("Hearth")
        self.setAccessibleName("Hearth")
        self.resize(1200, 800)

        self.conversation_list = ConversationList(controller.conversations, self)
        self.chat_view = ChatView(controller.chat_model, self)
        self.composer = Composer(self)
        self.settings_panel = SettingsPanel(self)
        self.first_run = FirstRunPanel(self)
        self.banner = Banner(self)

        chat_page = QWidget(self)
        chat_layout = QVBoxLayout(chat_page)
        chat_layout.setContentsMargins(0, 0, 0, 0)
        chat_layout.addWidget(self.chat_view, 1)
        chat_layout.addWidget(self.composer)
        install_tools(self, chat_layout)
        install_documents(self)
        self.stack = QStackedWidget(self)
        self.stack.addWidget(chat_page)
        self.stack.addWidget(self.first_run)
        centre = QWidget(self)
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.addWidget(self.banner)
        centre_layout.addWidget(self.stack, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal, self)
        self.splitter.addWidget(self.conversation_list)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(self.settings_panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 700, 260])
        self.setCentralWidget(self.splitter)

        self.status = ChatStatusBar(self)
        self.setStatusBar(self.status)
        self._build_toolbar()
        self._build_menus()
        self._build_shortcuts()
        self._connect()
        self._tab_order()
        self.apply_focus_styles()
        app = QGuiApplication.instance()
        if app is not None:
            app.paletteChanged.connect(self.apply_focus_styles)
        self.refresh_models()
        self.controller.new_conversation()
        self._restore_state()
        self._update_page()
        self.composer.edit.setFocus()

    # construction -------------------------------------------------------------------------

    def _build_toolbar(self) -> None:
        """The model bar: which model answers, its load state, and the model manager."""
        bar = QToolBar("Model", self)
        bar.setObjectName("mainToolbar")
        bar.setMovable(False)
        self.addToolBar(bar)
        bar.addWidget(QLabel(" Model: ", self))
        self.model_picker = QComboBox(self)
        self.model_picker.setObjectName("modelPicker")
        self.model_picker.setMinimumWidth(200)
        self.model_picker.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model_picker.setMinimumContentsLength(30)  # "SmolLM2 135M Instruct (starter)"
        self.model_picker.setAccessibleName("Model")
        self.model_picker.setAccessibleDescription("Pick the model that answers in this window.")
        bar.addWidget(self.model_picker)
        # the loading bar has a slot of its own, there loaded or not: the buttons after it
        # stay where they are while a model loads
        slot = QWidget(self)
        slot.setObjectName("loadProgressSlot")
        slot_layout = QHBoxLayout(slot)
        slot_layout.setContentsMargins(6, 0, 6, 0)
        self.load_progress = QProgressBar(slot)
        self.load_progress.setRange(0, 0)
        self.load_progress.setFixedWidth(LOAD_BAR_PX)
        self.load_progress.setAccessibleName("Model loading")
        slot_layout.addWidget(self.load_progress)
        slot.setFixedWidth(LOAD_BAR_PX + 12)
        retain = self.load_progress.sizePolicy()
        retain.setRetainSizeWhenHidden(True)
        self.load_progress.setSizePolicy(retain)
        self.load_progress.hide()
        self.load_progress_action = bar.addWidget(slot)
        self.new_action = self._action("New chat", "Ctrl+N", self.on_new_chat)
        self.models_action = self._action("Models…", "Ctrl+M", self.model_manager.open_panel)
        self.models_action.setToolTip("Download, switch, delete and import models (Ctrl+M)")
        self.panel_action = self._action("Chat settings", "Ctrl+Shift+S", self.on_toggle_panel)
        self.panel_action.setCheckable(True)
        self.panel_action.setChecked(bool(self.controller.settings.get("show_side_panel")))
        self.settings_panel.setVisible(self.panel_action.isChecked())
        bar.addSeparator()
        bar.addAction(self.models_action)
        bar.addAction(self.panel_action)
        self.toolbar = bar
        for action in (self.models_action, self.panel_action):  # Tab reaches them
            bar.widgetForAction(action).setFocusPolicy(Qt.FocusPolicy.TabFocus)

    def _build_menus(self) -> None:
        build_menus(self)  # app/ui/menus.py

    def _action(self, text: str, shortcut, slot) -> QAction:
        return make_action(self, text, shortcut, slot)

    def _tab_order(self) -> None:
        """Tab goes the way the eye reads: model picker, Models, Chat settings, the chat
        list, the note's "Stop that reply" when the model is busy in another chat, the
        message box, Send, then the row below it: Attach (and the files attached), the
        chat's Tools and Libraries."""
        bar = self.toolbar
        chain = [self.model_picker, bar.widgetForAction(self.models_action),
                 bar.widgetForAction(self.panel_action), self.conversation_list.new_button,
                 self.conversation_list.search, self.conversation_list.view,
                 self.composer.busy_banner.stop_button, self.composer.edit,
                 self.composer.button, self.attachments.attach_button,
                 self.tools_button, self.libraries_button]
        for first, second in itertools.pairwise(chain):
            QWidget.setTabOrder(first, second)

    def apply_focus_styles(self, *_: object) -> None:
        """Focus that can be seen on Send, the chat list and the toolbar (theme colours)."""
        from app.ui.theme import (
            chat_list_stylesheet,
            colors_for,
            send_button_stylesheet,
            toolbar_stylesheet,
        )

        colors = colors_for(QGuiApplication.palette())
        self.composer.set_button_stylesheet(send_button_stylesheet(colors))
        self._chat_list_sheet = chat_list_stylesheet(colors)
        self._style_chat_list()
        self.toolbar.setStyleSheet(toolbar_stylesheet(colors))

    def _style_chat_list(self) -> None:
        """The list's focus frame and its text size (a stylesheet owns a widget's font)."""
        sheet = getattr(self, "_chat_list_sheet", "")
        points = text_points(int(self.controller.settings.get("font_size")))
        self.conversation_list.view.setStyleSheet(
            sheet + f"\nQListView#conversationList {{ font-size: {points:g}pt; }}")

    def _build_shortcuts(self) -> None:
        QShortcut(QKeySequence("Ctrl+Return"), self.composer.edit, self.composer.on_send)
        QShortcut(QKeySequence("Ctrl+Enter"), self.composer.edit, self.composer.on_send)

    def _connect(self) -> None:
        c = self.controller
        self.composer.submitted.connect(self.on_submitted)
        self.composer.edit.up_in_empty.connect(self.on_edit_last)
        self.composer.stop_requested.connect(c.stop)  # the open chat's reply only
        self.composer.stop_elsewhere_requested.connect(self.on_stop_elsewhere)
        self.conversation_list.stop_requested.connect(c.stop)
        c.busy_changed.connect(self._update_busy)
        c.line_changed.connect(self._update_busy)
        c.conversations.modelReset.connect(self._update_busy)  # a title changed
        self.conversation_list.selected.connect(c.open_conversation)
        self.conversation_list.new_requested.connect(c.new_conversation)
        self.conversation_list.rename_requested.connect(c.rename_conversation)
        self.conversation_list.delete_requested.connect(c.delete_conversation)
        self.chat_view.action_requested.connect(self.on_chat_action)
        self.chat_view.copied.connect(lambda what: self.status.showMessage(f"Copied {what}", 2000))
        self.settings_panel.changed.connect(c.update_chat_values)
        self.model_picker.activated.connect(self.on_model_picked)
        c.conversation_opened.connect(self.on_conversation_opened)
        c.generating_changed.connect(self.on_generating_changed)
        c.model_loading.connect(self.on_model_loading)
        c.model_loaded.connect(self.on_model_loaded)
        c.model_load_failed.connect(self.on_model_load_failed)
        c.model_unloaded.connect(self.on_model_unloaded)
        c.stats_changed.connect(self.status.set_stats)
        c.edit_started.connect(self.composer.begin_edit)
        c.edit_ended.connect(self.composer.end_edit)
        self.composer.edit_cancelled.connect(c.cancel_edit)
        c.deleted.connect(self.chat_view.toast.show_undo)
        self.chat_view.toast.undo_clicked.connect(self.on_undo_delete)
        for signal in (c.deleted, c.conversation_opened, c.generating_changed):
            signal.connect(self._update_undo)
        self.chat_view.welcome.prompt_chosen.connect(self.on_prompt_chosen)
        self.conversation_list.pin_requested.connect(c.set_pinned)
        c.prefill_progress.connect(self.status.set_prefill)
        c.import_progress.connect(self.status.set_import)
        self.status.import_cancel_requested.connect(c.cancel_import)
        c.waiting_for_model.connect(self.on_waiting_for_model)
        self.server.started.connect(self.status.set_server)
        self.server.stopped.connect(lambda: self.status.set_server(None))
        self.server.requests_changed.connect(self.status.set_server_requests)
        self.status.server_clicked.connect(self.on_server_settings)
        c.notice.connect(lambda text: self.status.showMessage(text, 4000))
        self.bridge.message_shown.connect(self.banner.show_message)
        self.bridge.message_withdrawn.connect(self.banner.withdraw)
        self.bridge.crash_reported.connect(self.on_crash)
        self.first_run.setup_requested.connect(self.models.setup_starter)
        self.first_run.browse_requested.connect(self.model_manager.open_panel)
        self.models.models_changed.connect(self.refresh_models)
        self.models.remotes_listed.connect(self.on_remotes_listed)
        self.models.starter_ready.connect(self.on_starter_ready)
        jobs = self.models.jobs.worker
        jobs.progress.connect(self.on_job_progress)
        jobs.failed.connect(self.on_job_failed)
        self.controller.conversation_opened.connect(self._update_page)
        for sig in (c.conversations.rowsMoved, c.conversations.rowsInserted):
            sig.connect(self._reselect)
        c.conversations.modelReset.connect(self._reselect)

    # models -------------------------------------------------------------------------------

    def refresh_models(self) -> None:
        """Fill the picker with the installed models, then the remote engines' models (marked
        remote); keep the loaded one selected."""
        picker = self.model_picker
        picker.clear()
        for model in sorted(self.models.installed(), key=lambda m: m.name.lower()):
            picker.addItem(model.name, str(model.path))
            picker.setItemData(picker.count() - 1, str(model.path), Qt.ItemDataRole.ToolTipRole)
        remote = [m for listing in self._remote_listings for m in listing.models]
        if remote and picker.count():
            picker.insertSeparator(picker.count())
        for model in remote:
            picker.addItem(model.label, model.target)
            picker.setItemData(picker.count() - 1, f"Runs on {model.source_name}, not here",
                               Qt.ItemDataRole.ToolTipRole)
        self._select_picker(self.controller.model_info.path if self.controller.model_info else "")
        self._update_page()

    def on_model_manager_closed(self) -> None:
        """"… click Use" names the dialog's button: it goes with the dialog."""
        if self.banner.text().endswith(USE_HINT):
            self.banner.hide()

    def on_remotes_listed(self, listings: object) -> None:
        self._remote_listings = list(listings)  # type: ignore[call-overload]
        self.refresh_models()

    def on_load_folder(self) -> None:
        settings = self.controller.settings
        folder = QFileDialog.getExistingDirectory(self, "Load a model folder",
                                                  start_folder(settings, "model"))
        if folder:
            remember(settings, "model", folder)
            self.controller.load_model(folder)

    def on_provider_menu(self) -> None:
        """Check the chosen provider; disable what this machine cannot run, saying why."""
        from app.machine import provider_choices

        reasons = provider_choices()
        chosen = str(self.controller.settings.get("provider"))
        for choice, action in self.provider_actions.items():
            reason = reasons.get(choice) if choice != "auto" else None
            action.setEnabled(reason is None)
            action.setToolTip(reason or action.text())
            action.setChecked(choice == chosen)

    def on_provider_chosen(self, provider: str) -> None:
        """Remember the provider and load the current model again on it."""
        self.set_setting("provider", provider)
        info = self.controller.model_info
        if info is not None and not info.path.startswith("remote:"):
            self.controller.load_model(info.path)

    def on_add_remote(self) -> None:
        from app.ui.remote_dialog import RemoteEngineDialog

        RemoteEngineDialog(self.models, self).open()

    def _select_picker(self, path: str) -> None:
        index = self.model_picker.findData(path) if path else -1
        self.model_picker.setCurrentIndex(index)

    def on_model_picked(self, index: int) -> None:
        path = self.model_picker.itemData(index)
        current = self.controller.model_info.path if self.controller.model_info else None
        if path and path != current and not self.controller.load_model(path):
            self._select_picker(current or "")

    def on_model_loading(self, path: str) -> None:
        self.model_picker.setEnabled(False)
        self.load_progress.show()
        index = self.model_picker.findData(path)
        name = self.model_picker.itemText(index) if index >= 0 else Path(path).name
        self.status.set_loading(name)

    def on_model_loaded(self, info: ModelInfo) -> None:
        self._loading_done()
        if self.model_picker.findData(info.path) < 0:
            self.refresh_models()
        self._select_picker(info.path)
        name = self.model_picker.currentText() or info.name  # the name the picker shows
        self.status.set_model(info, name)
        self.status.show_chat(self._last_reply_stats(), info.context_length)  # not "Context 0"
        self.chat_view.set_model_name(name)
        self.settings_panel.set_model_defaults(info.generation_defaults)
        self.settings_panel.set_thinking_control(info.thinking_control)
        self.settings_panel.set_draft(info.draft)
        if getattr(self, "preferences", None) is not None:
            self.preferences.refresh_values()  # the server line names the served model
        # the model's name is beside it in the bar already
        self.status.showMessage(f"Model loaded in {info.load_ms / 1000:.1f} s", 4000)
        if info.notes:  # e.g. a context clamped to this machine's memory, unused encoders
            self.bridge.info(f"{name}: " + " ".join(info.notes))
        self._update_page()

    def on_model_unloaded(self) -> None:
        self._select_picker("")
        self.status.set_model(None, "")
        self.status.showMessage("The model was unloaded; pick one to chat again.", 4000)

    def on_model_load_failed(self, message: str) -> None:
        self._loading_done()
        info = self.controller.model_info
        self._select_picker(info.path if info else "")
        self.status.set_model(info, self.model_picker.currentText())

    def _loading_done(self) -> None:
        self.model_picker.setEnabled(True)
        self.load_progress.hide()

    def on_job_progress(self, job_id: str, progress: Progress) -> None:
        if job_id == STARTER_JOB:
            self.first_run.on_progress(progress)

    def on_job_failed(self, job_id: str, message: str) -> None:
        if job_id == STARTER_JOB:
            self.first_run.on_failed(message)

    def on_starter_ready(self, _path: str) -> None:
        self.first_run.on_done()

    def _update_page(self, *_args: object) -> None:
        """The welcome page only while there is no model and nothing to read: a chat with
        messages stays readable even when no model is installed."""
        has_model = self.controller.model_info is not None or self.model_picker.count() > 0
        has_messages = self.controller.chat_model.rowCount() > 0
        self.stack.setCurrentIndex(CHAT_PAGE if has_model or has_messages else WELCOME_PAGE)

    # chat ---------------------------------------------------------------------------------

    def on_submitted(self, text: str) -> None:
        self.settings_panel.flush()
        c = self.controller
        if not send_with_attachments(self, text) and (
                not c.generating or c.busy_conversation != c.current_id):
            self.composer.set_text(text)  # keep what the user wrote
        self._draft_chat = self.controller.current_id  # a new chat has its id now

    def on_prompt_chosen(self, text: str) -> None:
        """An example prompt on the welcome page: sent; the focus goes to the message box
        (the card that had it is gone), ready for the follow-up."""
        self.on_submitted(text)
        self.composer.edit.setFocus()

    def on_chat_action(self, action: str, row: int) -> None:
        self.controller.perform(action, row)

    def on_generating_changed(self, generating: bool) -> None:
        self._update_busy()
        if not generating:
            self.chat_view.flush()

    def _update_busy(self, *_: object) -> None:
        """Stop in the composer only for the open chat's own reply; a reply in another chat
        is named above the text box instead, with a Stop of its own, and a message sent
        here waits its turn: then the box says what it waits for, and its button is
        "Don't send"."""
        c = self.controller
        busy = c.busy_conversation
        here = busy is not None and busy == c.current_id
        waiting = not here and c.in_line(c.current_id)
        self.composer.set_generating(here or waiting,
                                     label=DONT_SEND if waiting else "Stop")
        title = c.busy_title() if busy is not None and not here else None
        self.composer.set_busy_elsewhere(title, c.busy_what, waiting_here=waiting)
        self.chat_view.set_busy(here)
        if here and c.busy_what == "waiting":
            self._show_waiting("Waiting for the model to load…")
        elif waiting:
            self._show_waiting(f"Waiting for the reply in “{title or 'another chat'}”…")
        else:
            self._show_waiting(None)

    def on_stop_elsewhere(self) -> None:
        """ "Stop that reply": the reply the note names, in the chat it is written in."""
        busy = self.controller.busy_conversation
        if busy is not None:
            self.controller.stop(busy)

    def on_waiting_for_model(self, waiting: bool) -> None:
        """A message sent while the model loads waits: say so where the user looks."""
        self.status.set_waiting(waiting)
        self._update_busy()

    def _show_waiting(self, waiting: str | None) -> None:
        """The message box of the chat whose message waits (for the model, or for the reply
        in another chat) says so: ``waiting`` (None: nothing waits here)."""
        edit = self.composer.edit
        held = getattr(self, "_placeholder", None)
        if waiting is not None:
            if held is None:
                self._placeholder = edit.placeholderText()
            edit.setPlaceholderText(waiting)
        elif held is not None:
            edit.setPlaceholderText(held)
            self._placeholder = None

    def on_conversation_opened(self, conversation_id: str | None, values: dict) -> None:
        previous = self._draft_chat
        pending = self.settings_panel.take_pending()  # typed just before the switch
        if pending is not None and previous is not None and previous != conversation_id:
            self.controller.update_chat_values(pending, conversation_id=previous)
        self._swap_draft(conversation_id)
        self.settings_panel.set_values(values)
        info = self.controller.model_info
        self.status.show_chat(self._last_reply_stats(), info.context_length if info else 0)
        self.conversation_list.select(conversation_id)
        self.chat_view.scroll_to_end()
        self._update_busy()

    def _swap_draft(self, conversation_id: str | None) -> None:
        """What was being written stays with its chat: kept when another chat opens, back
        when it opens again; a new chat starts with an empty box."""
        previous = self._draft_chat
        if conversation_id is not None and conversation_id == previous:
            return
        text = self.composer.text()
        if previous is not None:
            if text.strip():
                self._drafts[previous] = text
            else:
                self._drafts.pop(previous, None)
        restored = self._drafts.pop(conversation_id, "") if conversation_id else ""
        if restored != text:
            self.composer.edit.setPlainText(restored)
            self.composer.edit.moveCursor(self.composer.edit.textCursor().MoveOperation.End)
        self._draft_chat = conversation_id

    def _last_reply_stats(self) -> dict | None:
        """The figures stored with the open chat's last measured reply (None: no reply)."""
        for message in reversed(self.controller.chat_model.messages()):
            stats = (message.provenance or {}).get("stats")
            if message.role == "assistant" and isinstance(stats, dict):
                return stats
        return None

    def _reselect(self, *_: object) -> None:
        self.conversation_list.select(self.controller.current_id)

    # settings ---------------------------------------------------------------------------------

    def on_preferences(self) -> None:
        from app.ui.preferences import PreferencesDialog

        if getattr(self, "preferences", None) is None:
            self.preferences = PreferencesDialog(
                self.controller.settings, self.models, server=self.server, parent=self,
                pages=[("Tools", lambda parent: tools_page(self, parent)),
                       ("Documents", lambda parent: documents_page(self, parent))],
            )
            self.preferences.changed.connect(self.apply_setting)
        if self.preferences.isVisible():  # already open behind the window: bring it forward
            self.preferences.raise_()
            self.preferences.activateWindow()
        else:
            self.preferences.show()

    def on_server_settings(self) -> None:
        """The status bar's server item: the settings, at the Local server tab."""
        self.on_preferences()
        self.preferences.show_server()

    def on_hub_token(self) -> None:
        """A gated notice asked for a Hugging Face token: the settings, at the token field."""
        self.on_preferences()
        self.preferences.show_token()

    def set_setting(self, key: str, value: object) -> None:
        """Change one setting from a menu or shortcut, apply it and save."""
        settings = self.controller.settings
        settings.set(key, value)
        settings.save()
        self.apply_setting(key, settings.get(key))

    def apply_setting(self, key: str, value: object) -> None:
        """Make a changed setting visible at once (the settings window calls this too)."""
        from app.ui.theme import apply_theme

        if key == "theme":
            apply_theme(str(value))
            if str(value) in self.theme_actions:
                self.theme_actions[str(value)].setChecked(True)
        elif key == "font_size":
            self.apply_text_size(int(value))  # type: ignore[call-overload]
        elif key == "send_key":
            self.composer.set_send_key(str(value))
            self.chat_view.welcome.set_send_key(str(value))
        elif key == "offline":
            from app.network import set_offline

            set_offline(bool(value))
        elif key in ("models_folder", "hub_endpoint"):
            self.refresh_models()
        elif key in ("server_enabled", "server_port", "server_lan", "server_allowed_hosts"):
            self.apply_server()

    def apply_server(self) -> None:
        """Start, restart or stop the local server as the settings say."""
        from app.secrets import SERVER_API_KEY, SecretStore
        from app.server.config import ServerConfig, split_hosts

        settings = self.controller.settings
        if not settings.get("server_enabled"):
            self.server.stop()
            return
        lan = bool(settings.get("server_lan"))
        config = ServerConfig(
            host="0.0.0.0" if lan else "127.0.0.1",
            port=int(settings.get("server_port")),
            api_key=SecretStore().get(SERVER_API_KEY) if lan else None,
            allowed_hosts=split_hosts(str(settings.get("server_allowed_hosts"))),
        )
        self.server.start(config)

    def on_zoom(self, step: int) -> None:
        current = int(self.controller.settings.get("font_size"))
        self.set_setting("font_size", zoomed_setting(current, step))

    def apply_text_size(self, setting: int) -> None:
        """The chat text size reaches every message, the chat list and the composer
        (``setting`` 0: the system's size, followed when the OS text scale changes)."""
        points = float(setting) if setting > 0 else None
        self.chat_view.set_text_points(points)
        self.composer.set_text_points(points)
        set_font_points(self.conversation_list, text_points(setting))
        self._style_chat_list()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ApplicationFontChange:  # the OS text scale changed
            self.apply_text_size(int(self.controller.settings.get("font_size")))
        return super().event(event)

    def on_shortcuts(self) -> None:
        from PySide6.QtWidgets import QMessageBox

        rows = "".join(
            f"<tr><td>{text}</td><td><b>{keys}</b></td></tr>"
            for text, keys in self.shortcut_list()
        )
        box = QMessageBox(self)
        box.setWindowTitle("Keyboard shortcuts")
        box.setText(f"<table cellspacing='6'>{rows}</table>")
        box.setAccessibleName("Keyboard shortcuts")
        box.show()
        self.shortcuts_box = box

    def shortcut_list(self) -> list[tuple[str, str]]:
        """Every action's shortcut (from the actions themselves), then the composer's keys."""
        native = QKeySequence.SequenceFormat.NativeText
        rows = [
            (action.text().replace("&", "").rstrip("…"), action.shortcut().toString(native))
            for action in self.actions()
            if not action.shortcut().isEmpty()
        ]
        send = "Ctrl+Enter" if self.composer.edit.send_key == "ctrl+enter" else "Enter"
        rows += [("Send the message", send), ("Stop the reply", "Esc"),
                 ("New line in the message",
                  "Enter" if send == "Ctrl+Enter" else "Shift+Enter")]
        return rows

    def _restore_state(self) -> None:
        """Window geometry, splitter sizes, the last open chat and the look, from settings."""
        from PySide6.QtCore import QByteArray

        settings = self.controller.settings
        geometry = settings.get("window_geometry")
        if geometry:
            self.restoreGeometry(QByteArray.fromBase64(geometry.encode("ascii")))
        sizes = settings.get("splitter_sizes")
        if sizes:
            self.splitter.restoreState(QByteArray.fromBase64(sizes.encode("ascii")))
            self.settings_panel.setVisible(self.panel_action.isChecked())
        for key in ("theme", "font_size", "send_key"):
            if settings.get(key) != settings_default(key):
                self.apply_setting(key, settings.get(key))
        if settings.get("server_enabled"):
            self.apply_server()
        if self.models.remote_sources():
            self.models.refresh_remotes()  # lists them off the UI thread
        self.theme_actions[str(settings.get("theme"))].setChecked(True)
        last = settings.get("last_chat")
        history = self.controller.history
        if last and settings.get("restore_last_chat") and history.get_conversation(last):
            self.controller.open_conversation(last)

    def _save_state(self) -> None:
        settings = self.controller.settings
        settings.set("window_geometry", bytes(self.saveGeometry().toBase64()).decode("ascii"))
        settings.set("splitter_sizes", bytes(self.splitter.saveState().toBase64()).decode("ascii"))
        settings.set("last_chat", self.controller.current_id or "")
        with contextlib.suppress(OSError):  # a read-only or full disk: not worth an error
            settings.save()

    def on_regenerate_last(self) -> None:
        row = self.controller.last_row("assistant")
        if row is not None:
            self.controller.perform("regenerate", row)

    def on_edit_last(self) -> None:
        row = self.controller.last_row("user")
        if row is not None:
            self.controller.perform("edit", row)

    def on_undo_delete(self) -> None:
        """Edit ▸ Undo, Ctrl+Z or the note's Undo: the last delete in the open chat."""
        self.chat_view.toast.dismiss()
        self.controller.undo_delete()
        self._update_undo()

    def _update_undo(self, *_: object) -> None:
        if not self.controller.can_undo_delete:  # e.g. another chat was opened
            self.chat_view.toast.dismiss()
        can = self.controller.can_undo_delete and not self.controller.generating
        self.undo_action.setEnabled(can)

    def on_new_chat(self) -> None:
        self.controller.new_conversation()
        self.composer.edit.setFocus()

    def on_toggle_sidebar(self, checked: bool) -> None:
        self.conversation_list.setVisible(checked)

    def on_network_log(self) -> None:
        from app.ui.network_log import NetworkLogDialog

        NetworkLogDialog.show_for(self)

    def on_open_data_folder(self) -> None:
        from PySide6.QtCore import QUrl
        from PySide6.QtGui import QDesktopServices

        from app.paths import data_root

        QDesktopServices.openUrl(QUrl.fromLocalFile(str(data_root())))

    def on_about(self) -> None:
        from app import __version__
        from app.paths import data_root
        from app.ui.about import AboutDialog

        self.about_box = AboutDialog(__version__, data_root(), self)
        self.about_box.show()

    def on_focus_search(self) -> None:
        self.conversation_list.search.setFocus()
        self.conversation_list.search.selectAll()

    def on_copy_last_reply(self) -> None:
        text = self.controller.last_reply()
        if text:
            QGuiApplication.clipboard().setText(text)
            self.status.showMessage("Copied the last reply", 2000)

    def on_toggle_panel(self, checked: bool) -> None:
        self.settings_panel.setVisible(checked)
        self.controller.settings.set("show_side_panel", checked)
        self.controller.save_settings()

    def resizeEvent(self, event) -> None:
        """Narrow windows give the chat the room: the chat settings panel folds away (the
        saved preference stays; View ▸ Chat settings opens it again)."""
        super().resizeEvent(event)
        old = event.oldSize().width()
        narrow = event.size().width() < NARROW_WIDTH and (old < 0 or old >= NARROW_WIDTH)
        if narrow and self.settings_panel.isVisible():
            self.panel_action.setChecked(False)
            self.settings_panel.setVisible(False)

    # export / import ----------------------------------------------------------------------

    def on_export_md(self) -> None:
        path = self.ask_save_path("Export chat as Markdown", "Markdown (*.md)", ".md")
        if path:
            self.controller.export_conversation(path, "markdown")

    def on_export_json(self) -> None:
        path = self.ask_save_path("Export chat as JSON", "JSON (*.json)", ".json")
        if path:
            self.controller.export_conversation(path, "json")

    def on_import(self) -> None:
        path = self.ask_open_path()
        if not path:
            return
        remember(self.controller.settings, "import", path)
        if Path(path).suffix.lower() in (".md", ".markdown"):
            self.bridge.warning(markdown_import_refusal(Path(path).name))
            return
        self.controller.import_conversation(path)

    def ask_open_path(self) -> str:
        """The import file picker (tests replace it), in the last import's folder."""
        path, _ = QFileDialog.getOpenFileName(
            self, "Import chat", start_folder(self.controller.settings, "import"),
            "Chats (*.json *.md);;JSON (*.json);;Markdown (*.md)")
        return path

    def ask_save_path(self, title: str, filters: str, suffix: str) -> str:
        """The export file picker, in the last export's folder, named after the chat."""
        settings = self.controller.settings
        name = self._export_name() + suffix
        path, _ = QFileDialog.getSaveFileName(
            self, title, str(Path(start_folder(settings, "export")) / name), filters)
        if path and not Path(path).suffix:
            path += suffix
        if path:
            remember(settings, "export", path)
        return path

    def _export_name(self) -> str:
        conv_id = self.controller.current_id
        conv = self.controller.history.get_conversation(conv_id) if conv_id else None
        title = (conv.title if conv is not None else "") or "Chat"
        safe = "".join(ch if ch.isalnum() or ch in " -_" else " " for ch in title)
        return " ".join(safe.split())[:60] or "Chat"

    # errors and shutdown ------------------------------------------------------------------

    def on_crash(self, details: str) -> None:
        dialog = CrashDialog(details, self)
        self.crash_dialogs.append(dialog)
        dialog.show()

    def shutdown(self) -> bool:
        """Everything stops in order: the reply being written first (a flag: the engine's
        thread stops at its next token, prefill chunk or template line, and no longer
        competes with this thread for the interpreter), then model jobs, the server (its
        generations run on the engine's thread), then the engine's worker. Safe to call
        twice."""
        self.controller.worker.stop()
        models = self.models.shutdown()
        server = self.server.stop()
        chat = self.controller.shutdown()
        tools = self.tools.shutdown()  # after the turn: no call is running now
        documents = self.documents.shutdown()
        return models and server and chat and tools and documents

    def closeEvent(self, event: QCloseEvent) -> None:
        self.controller.worker.stop()  # first: a busy engine thread slows everything else
        self._save_state()
        self.shutdown()
        super().closeEvent(event)
