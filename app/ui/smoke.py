"""``python -m app --smoke-test OUT.png``: one real chat turn, offscreen, then a screenshot.

Exit codes: 0 success; 3 no model; 4 load failed; 5 reply failed; 6 timeout; 7 screenshot.
"""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QApplication

from app.engine.types import GenerationStats
from app.models.library import ModelLibrary
from app.ui.main_window import MainWindow

PROMPT = "Hello! Who are you?"
TIMEOUT_S = 120


def smoke_model(library: ModelLibrary) -> Path | None:
    """The library's default model; with none installed, the starter, set up now."""
    model = library.default_model()
    if model is not None:
        return model.path
    from app.models.starter import ensure_starter

    try:
        path = ensure_starter(progress=None)
    except Exception as exc:  # say why, then report "no model"
        print(f"smoke-test: starter model unavailable: {exc}", file=sys.stderr)
        return None
    return Path(path)


class SmokeTest(QObject):
    """Drives the real window: load → send → wait for the reply → grab → exit."""

    def __init__(self, window: MainWindow, out: Path, timeout_s: float = TIMEOUT_S) -> None:
        super().__init__(window)
        self.window = window
        self.controller = window.controller
        self.out = out
        self.code: int | None = None
        self.in_loop = False  # set by the caller just before app.exec()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(int(timeout_s * 1000))
        self._timer.timeout.connect(self.on_timeout)
        self.controller.model_loaded.connect(self.on_loaded)
        self.controller.model_load_failed.connect(self.on_load_failed)
        self.controller.generating_changed.connect(self.on_generating_changed)
        self.controller.bridge.crash_reported.connect(self.on_crash)

    def start(self) -> None:
        self._timer.start()
        path = smoke_model(self.window.models.library())
        if path is None:
            self.fail(3, "no model is installed and the starter model could not be set up")
            return
        print(f"smoke-test: loading {path}", flush=True)
        self.controller.load_model(path)

    def on_loaded(self, info) -> None:
        print(
            f"smoke-test: loaded {info.name} on {info.provider_summary} in {info.load_ms:.0f} ms",
            flush=True,
        )
        self.window.composer.set_text(PROMPT)
        self.window.composer.on_send()
        if not self.controller.generating:
            self.fail(5, "the message could not be sent")

    def on_load_failed(self, message: str) -> None:
        self.fail(4, f"the model could not be loaded: {message}")

    def on_generating_changed(self, generating: bool) -> None:
        if generating or self.code is not None:
            return
        model = self.controller.chat_model
        last = model.message(model.rowCount() - 1) if model.rowCount() else None
        if last is None or last.role != "assistant" or last.status != "complete":
            reason = self.window.banner.text() or f"no complete reply ({last})"
            self.fail(5, f"the reply did not complete: {reason}")
            return
        self.window.chat_view.flush()
        QApplication.processEvents()
        if not self.window.grab().save(str(self.out)):
            self.fail(7, f"the screenshot could not be saved to {self.out}")
            return
        stats = self.controller.last_stats or GenerationStats()
        print(f"reply: {last.content}")
        print(
            f"stats: prompt {stats.prompt_tokens} tokens ({stats.reused_tokens} reused), "
            f"generated {stats.generated_tokens}, TTFT {stats.ttft_ms:.0f} ms, "
            f"{stats.decode_tok_s:.1f} tok/s, provider {stats.provider}, "
            f"context {stats.context_used}/{stats.context_max}, "
            f"finish {last.provenance.get('finish_reason')}"
        )
        print(f"screenshot: {self.out}", flush=True)
        self.finish(0)

    def on_crash(self, details: str) -> None:
        print(details, file=sys.stderr)
        self.fail(5, "an unexpected error occurred (details above)")

    def on_timeout(self) -> None:
        self.controller.stop(self.controller.busy_conversation)
        self.fail(6, f"no complete reply within {self._timer.interval() // 1000} s")

    def fail(self, code: int, reason: str) -> None:
        print(f"smoke-test failed: {reason}", file=sys.stderr, flush=True)
        self.finish(code)

    def finish(self, code: int) -> None:
        if self.code is None:
            self.code = code
            self._timer.stop()
            if self.in_loop:  # exit() outside a running loop would end the next loop instead
                QApplication.instance().exit(code)
