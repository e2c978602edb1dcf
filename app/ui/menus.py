"""The window's menu bar: File / Edit / View / Model / Help, with the platform's standard
shortcuts. Every entry is one ``QAction`` per intent, kept on the window (``window.undo_action``
and so on) and shared with the toolbar and the shortcuts; the slots stay the window's."""

from __future__ import annotations

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow

from app.settings import BY_KEY


def make_action(window: QMainWindow, text: str, shortcut, slot) -> QAction:
    """One action of the window: its shortcut (shown in its tooltip) works even while the
    menu bar is hidden."""
    action = QAction(text, window)
    if shortcut is not None:
        action.setShortcut(QKeySequence(shortcut))
        key = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        action.setToolTip(f"{text} ({key})" if key else text)
    action.triggered.connect(slot)
    window.addAction(action)
    return action


def build_menus(window: QMainWindow) -> None:
    """File / Edit / View / Model / Help on ``window``'s menu bar (app/ui/main_window.py's
    ``MainWindow``, not imported: it imports this), over the actions its toolbar made already
    (``new_action``, ``models_action``, ``panel_action``), with the window's slots."""

    def make(text: str, shortcut, slot) -> QAction:
        return make_action(window, text, shortcut, slot)

    menus = window.menuBar()
    file_menu = menus.addMenu("&File")
    file_menu.addAction(window.new_action)
    window.import_action = make("Import chat…", None, window.on_import)
    file_menu.addAction(window.import_action)
    export = file_menu.addMenu("&Export chat")
    window.export_md_action = make("Markdown…", None, window.on_export_md)
    window.export_json_action = make("JSON…", None, window.on_export_json)
    export.addAction(window.export_md_action)
    export.addAction(window.export_json_action)
    file_menu.addSeparator()
    window.quit_action = make("Quit", QKeySequence.StandardKey.Quit, window.close)
    window.quit_action.setMenuRole(QAction.MenuRole.QuitRole)
    file_menu.addAction(window.quit_action)

    edit = menus.addMenu("&Edit")
    window.undo_action = make("Undo delete", QKeySequence.StandardKey.Undo,
                                window.on_undo_delete)
    window.undo_action.setEnabled(False)
    edit.addAction(window.undo_action)
    edit.addSeparator()
    window.copy_reply_action = make(
        "Copy last reply", "Ctrl+Shift+C", window.on_copy_last_reply
    )
    window.find_action = make("Find chats", QKeySequence.StandardKey.Find,
                                window.on_focus_search)
    edit.addAction(window.copy_reply_action)
    window.regenerate_action = make("Regenerate last reply", "Ctrl+R",
                                      window.on_regenerate_last)
    window.edit_last_action = make("Edit last message", None, window.on_edit_last)
    window.edit_last_action.setToolTip("Edit last message (Up in an empty message box)")
    edit.addAction(window.regenerate_action)
    edit.addAction(window.edit_last_action)
    edit.addAction(window.find_action)
    edit.addSeparator()
    preferences = QKeySequence(QKeySequence.StandardKey.Preferences)
    window.preferences_action = make(
        "Settings…", preferences if not preferences.isEmpty() else "Ctrl+,",
        window.on_preferences,
    )
    window.preferences_action.setMenuRole(QAction.MenuRole.PreferencesRole)
    edit.addAction(window.preferences_action)

    view = menus.addMenu("&View")
    window.sidebar_action = make("Sidebar", "Ctrl+Shift+L", window.on_toggle_sidebar)
    window.sidebar_action.setCheckable(True)
    window.sidebar_action.setChecked(True)
    view.addAction(window.sidebar_action)
    view.addAction(window.panel_action)
    view.addSeparator()
    window.zoom_in_action = make("Zoom in", QKeySequence.StandardKey.ZoomIn,
                                   lambda: window.on_zoom(+1))
    # Ctrl+= too: the same key without Shift on most layouts (as in browsers)
    window.zoom_in_action.setShortcuts(
        [*window.zoom_in_action.shortcuts(), QKeySequence("Ctrl+=")])
    window.zoom_out_action = make("Zoom out", QKeySequence.StandardKey.ZoomOut,
                                    lambda: window.on_zoom(-1))
    window.zoom_reset_action = make("Actual size", "Ctrl+0", lambda: window.on_zoom(0))
    for action in (window.zoom_in_action, window.zoom_out_action, window.zoom_reset_action):
        view.addAction(action)
    theme_menu = view.addMenu("&Theme")
    window.theme_actions: dict[str, QAction] = {}
    group = QActionGroup(window)
    for choice, label in (("system", "Follow the system"), ("light", "Light"),
                          ("dark", "Dark")):
        action = make(label, None, lambda _c=False, t=choice: window.set_setting(
            "theme", t))
        action.setCheckable(True)
        group.addAction(action)
        theme_menu.addAction(action)
        window.theme_actions[choice] = action

    model = menus.addMenu("&Model")
    model.addAction(window.models_action)
    window.load_folder_action = make("Load a model folder…", "Ctrl+O",
                                       window.on_load_folder)
    window.unload_action = make("Unload", None, window.controller.unload_model)
    window.unload_action.setToolTip("Close the model to free its memory")
    model.addAction(window.load_folder_action)
    model.addAction(window.unload_action)
    provider_menu = model.addMenu("Run on")
    window.provider_actions: dict[str, QAction] = {}
    provider_group = QActionGroup(window)
    provider_setting = BY_KEY["provider"]
    for choice, label in zip(provider_setting.choices, provider_setting.choice_labels,
                             strict=True):
        action = make(label, None,
                        lambda _c=False, p=choice: window.on_provider_chosen(p))
        action.setCheckable(True)
        provider_group.addAction(action)
        provider_menu.addAction(action)
        window.provider_actions[choice] = action
    provider_menu.aboutToShow.connect(window.on_provider_menu)
    model.addSeparator()
    window.add_remote_action = make("Add a remote engine…", None, window.on_add_remote)
    model.addAction(window.add_remote_action)

    help_menu = menus.addMenu("&Help")
    window.shortcuts_action = make("Keyboard shortcuts", "F1", window.on_shortcuts)
    help_menu.addAction(window.shortcuts_action)
    window.open_data_action = make("Open data folder", None, window.on_open_data_folder)
    window.about_action = make("About Hearth", None, window.on_about)
    window.about_action.setMenuRole(QAction.MenuRole.AboutRole)
    window.network_action = make("Network activity", None, window.on_network_log)
    help_menu.addAction(window.network_action)
    help_menu.addAction(window.open_data_action)
    help_menu.addAction(window.about_action)
