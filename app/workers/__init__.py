"""QObjects that live on worker QThreads (generation, downloads). No widgets here."""

from app.workers import qt_compat

qt_compat.install()
