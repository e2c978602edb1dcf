"""The desktop app: Qt widgets, views, dialogs and the controller (UI thread only)."""

from app.workers import qt_compat

qt_compat.install()
