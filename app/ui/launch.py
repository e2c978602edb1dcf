"""Start the desktop app (``python -m app``) or its offscreen smoke test."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from pathlib import Path

from app.errors import HearthError


def build_window(history, settings, bridge, loader=None):
    """The main window over its two controllers (chats and models), as the app runs it."""
    from app.ui.controller import ChatController
    from app.ui.main_window import MainWindow
    from app.ui.model_controller import ModelController

    controller = ChatController(history, settings, bridge, loader)
    models = ModelController(controller, settings, bridge)
    return MainWindow(controller, models)


def _check_desktop_libraries() -> None:
    """On X11, name the system libraries Qt's platform plugin lacks instead of letting Qt
    abort; switch to Wayland when the session has it. Cached: a normal start pays nothing."""
    from app.desktop_libs import check_before_qt, tell_user

    report = check_before_qt()
    if report is None:
        return
    if os.environ.get("WAYLAND_DISPLAY"):
        print(f"hearth: {report.message()} Using Wayland instead.", file=sys.stderr)
        os.environ["QT_QPA_PLATFORM"] = "wayland"
        return
    tell_user(report.message())
    raise report.error()


QUIT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                     if hasattr(signal, name))


def install_quit_signals(window):
    """SIGTERM / SIGINT / SIGHUP close the window like the Quit action (the same orderly
    shutdown), instead of killing the process mid-write.

    Python runs signal handlers only between bytecodes, and Qt's event loop may sleep in C++
    for a long time: the C-level handler writes the signal number to a socket
    (``signal.set_wakeup_fd``) whose ``QSocketNotifier`` wakes the loop on the UI thread.
    Returns a function that restores the previous handlers."""
    from PySide6.QtCore import QSocketNotifier
    from PySide6.QtWidgets import QApplication

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous_fd = signal.set_wakeup_fd(writer.fileno())
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in QUIT_SIGNALS}
    notifier = QSocketNotifier(reader.fileno(), QSocketNotifier.Type.Read, window)

    def on_signal() -> None:
        with contextlib.suppress(OSError):
            reader.recv(64)
        window.close()  # closeEvent: jobs and the reply stop, the reply is saved
        QApplication.quit()  # even when a dialog is still open

    notifier.activated.connect(on_signal)

    def restore() -> None:
        notifier.setEnabled(False)
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reader.close()
        writer.close()

    return restore


def run_app(smoke_test: str | None = None) -> int:
    """Open the window and run the event loop; return the exit code."""
    if smoke_test and not os.environ.get("QT_QPA_PLATFORM"):
        # Offscreen unless the caller names a platform: installer/check_linux_bundle.py runs
        # the frozen app's smoke test with QT_QPA_PLATFORM=xcb on a real X server (Xvfb).
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    _check_desktop_libraries()
    from PySide6.QtCore import QTimer
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.resources import app_icon_path
    from app.settings import Settings
    from app.storage.history import History
    from app.ui.message_bridge import MessageBridge

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    icon = app_icon_path()
    if icon is not None and icon.is_file():
        app.setWindowIcon(QIcon(str(icon)))
    bridge = MessageBridge()
    bridge.install()
    try:
        history = History()
    except HearthError as exc:
        if smoke_test:
            print(f"smoke-test failed: {exc}", file=sys.stderr)
        else:
            QMessageBox.critical(None, "Hearth", str(exc))
        bridge.uninstall()
        return 2
    settings = Settings()
    window = build_window(history, settings, bridge)
    controller, models = window.controller, window.models
    window.show()
    if not smoke_test:  # libraries check their folders (off the UI thread)
        QTimer.singleShot(0, window.documents.at_start)
    restore_signals = install_quit_signals(window)
    from app.ui.test_hook import from_environment

    _hook = from_environment(window)  # scripts process tests; None normally
    try:
        if smoke_test:
            from app.ui.smoke import SmokeTest

            smoke = SmokeTest(window, Path(smoke_test))
            smoke.start()
            if smoke.code is None:
                smoke.in_loop = True
                code = app.exec()
            else:
                code = smoke.code
        else:
            model = models.library().default_model()
            if model is not None:
                controller.load_model(model.path)
            code = app.exec()
    finally:
        restore_signals()
        stopped = window.shutdown()
        app.setQuitOnLastWindowClosed(False)  # we are leaving already; post no quit event
        window.close()
        app.setQuitOnLastWindowClosed(True)
        history.close()
        bridge.uninstall()
    if not stopped:
        # A worker thread did not end in time. Everything is saved; leave now rather than
        # let Python destroy a running QThread (which aborts the process).
        if controller.abandoned_load:
            print("hearth: quit while a model was still loading; not waiting for it.",
                  file=sys.stderr)
        else:
            print("hearth: a background task did not stop in time; exiting anyway.",
                  file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    return int(code)
