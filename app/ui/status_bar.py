"""Status bar: model, execution provider (why, on hover), speed, TTFT, context used / max,
and after a reply that speculated, how many guesses were accepted and how many model steps
that saved (what it means, on hover); while a long prompt is read, how far; while the model
loads, that a message waits for it; while the document library opens or attached files are
read, that; while chats are imported, how far, with a Cancel
button; while the Local server runs, its address and how many requests it is serving (a
click opens its settings)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QLabel,
    QProgressBar,
    QPushButton,
    QStatusBar,
    QToolButton,
    QWidget,
)

from app.engine.types import GenerationStats
from app.jobs import Progress
from app.ui.elided_label import ElidedLabel
from app.ui.speculation_text import (
    SpeculationFigures,
    compact_status_text,
    explanation,
    off_reason,
    speculation_figures,
    status_text,
)
from app.workers.generation_worker import ModelInfo

CONTEXT_WARN = 0.8
#: width kept free at the left for messages ("Reading your message… 1,024 / 3,451 tokens");
#: where the long speculation text would take it, the short one is shown
MESSAGE_ROOM_PX = 300
#: a longer model name is elided ("Qwen3 30B A3B Instruct…"); the whole name is in its tooltip
MODEL_NAME_PX = 240


def reading_text(done: int, total: int) -> str:
    """"Reading your message… 1,024 / 3,451 tokens"."""
    return f"Reading your message… {done:,} / {total:,} tokens"


def server_text(address: str, active: int, *, compact: bool = False) -> str:
    """"Server 127.0.0.1:8080 · 2 requests" (``address``: the base URL clients use);
    compact, for a narrow window: "Server :8080 · 2"."""
    where = address.split("://", 1)[-1].split("/", 1)[0]
    if compact:
        return f"Server :{where.rsplit(':', 1)[-1]} · {active}"
    count = f"{active} request" + ("" if active == 1 else "s")
    return f"Server {where} · {count}"


SERVER_COMPACT_BELOW_PX = 1000  # a status bar narrower than this gets the short server text


WAITING_TEXT = "Waiting for the model to load; your message goes out when it is ready"


class ChatStatusBar(QStatusBar):
    """Signals: import_cancel_requested(): the user pressed Cancel beside the import's bar;
    server_clicked(): the user pressed the Local server item (open its settings)."""

    import_cancel_requested = Signal()
    server_clicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # reading a long prompt / files, waiting for the model: cut to its room ("…")
        self.activity_label = ElidedLabel("", self)
        self.activity_label.setAccessibleName("Activity")
        self.activity_label.hide()
        self.addWidget(self.activity_label, 1)
        self.import_label = QLabel("", self)
        self.import_label.setAccessibleName("Import")
        self.import_bar = QProgressBar(self)
        self.import_bar.setAccessibleName("Import progress")
        self.import_bar.setMaximumWidth(160)
        self.import_bar.setTextVisible(False)
        self.import_cancel = QPushButton("Cancel", self)
        self.import_cancel.setAccessibleName("Cancel import")
        self.import_cancel.setAccessibleDescription(
            "Stop importing; nothing of this file is kept.")
        self.import_cancel.clicked.connect(self.import_cancel_requested)
        for widget in (self.import_label, self.import_bar, self.import_cancel):
            self.addWidget(widget)
            widget.hide()
        self.model_label = self._label("No model loaded", "Model")
        self.provider_label = self._label("", "Execution provider")
        self.speed_label = self._label("", "Decoding speed")
        self.speculation_label = self._label("", "Speculative decoding")
        self.speculation_label.hide()  # shown only after a reply that speculated
        self._speculation: SpeculationFigures | None = None
        self._speculation_off: str | None = None  # why the last reply did not guess ahead
        self.messageChanged.connect(self.on_message_changed)
        self.ttft_label = self._label("", "Time to first token")
        self.context_label = self._label("", "Context used")
        self.context_warning = False
        self.server_button = QToolButton(self)
        self.server_button.setObjectName("serverStatus")
        self.server_button.setAutoRaise(True)
        self.server_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.server_button.setAccessibleName("Local server")
        self.server_button.clicked.connect(self.server_clicked)
        self.addPermanentWidget(self.server_button)
        self.server_button.hide()
        self._server_address: str | None = None
        self._server_active = 0

    def set_server(self, address: str | None, active: int = 0) -> None:
        """The Local server listens at ``address`` with ``active`` requests running or
        waiting; None: it is off (the item goes)."""
        self._server_address = address
        if address is None:
            self.server_button.hide()
            return
        self._server_active = active
        compact = self.width() < SERVER_COMPACT_BELOW_PX
        self.server_button.setText(server_text(address, active, compact=compact))
        tip = (f"The Local server answers at {address} ({active} running or waiting). "
               "Click for its settings.")
        self.server_button.setToolTip(tip)
        self.server_button.setAccessibleDescription(tip)
        self.server_button.show()

    def set_server_requests(self, active: int, _served: int = 0) -> None:
        if self._server_address is not None:
            self.set_server(self._server_address, active)

    def _label(self, text: str, name: str) -> QLabel:
        label = QLabel(text, self)
        label.setAccessibleName(name)
        self.addPermanentWidget(label)
        return label

    def set_prefill(self, done: int, total: int) -> None:
        """Show how much of a long prompt the model has read; (0, 0) hides it."""
        self._set_activity(reading_text(done, total) if total else "")

    def set_documents(self, text: str) -> None:
        """What runs in the background for documents ("Opening the document library…",
        "Reading manual.pdf…"; "": nothing). A passing message ("Model loaded in …") makes
        way: it would be drawn over it."""
        if text:
            self.clearMessage()
        self._set_activity(text)

    def set_waiting(self, waiting: bool) -> None:
        """A message waits for the model to finish loading."""
        self._set_activity(WAITING_TEXT if waiting else "")

    def set_import(self, progress: Progress | None) -> None:
        """Show how far an import is (a busy bar while the file is checked); None hides it."""
        visible = progress is not None
        for widget in (self.import_label, self.import_bar, self.import_cancel):
            widget.setVisible(visible)
        if progress is None:
            return
        self.import_label.setText(progress.message)
        if progress.fraction is None:
            self.import_bar.setRange(0, 0)
        else:
            self.import_bar.setRange(0, 100)
            self.import_bar.setValue(progress.percent)

    def _set_activity(self, text: str) -> None:
        self.activity_label.setText(text)
        self.activity_label.setVisible(bool(text))
        self._show_speculation()  # the last reply's figures make room while a new one starts

    def set_loading(self, name: str) -> None:
        self._set_model_name(f"Loading {name}…")

    def _set_model_name(self, text: str) -> None:
        elided = self.model_label.fontMetrics().elidedText(
            text, Qt.TextElideMode.ElideRight, MODEL_NAME_PX)
        self.model_label.setText(elided)

    def set_model(self, info: ModelInfo | None, display_name: str = "") -> None:
        self.set_speculation(None)  # the figures were the previous model's
        if info is None:
            self._set_model_name("No model loaded")
            self.model_label.setToolTip("")
            self.provider_label.setText("")
            self.provider_label.setToolTip("")
            return
        name = display_name or info.name
        self._set_model_name(name)
        tip = f"{name}\n{info.path}\nloaded in {info.load_ms:.0f} ms"
        if info.draft:
            tip += f"\ndraft model {info.draft}: speeds up replies that quote the chat"
        self.model_label.setToolTip(tip)
        self.provider_label.setText(info.provider_summary)
        reasons = "\n".join(f"{name}: {why}" for name, why in info.provider_reasons.items())
        tip = f"Running on {info.provider_summary}."
        if info.prompt_kernels:
            tip += f"\n{info.prompt_kernels}"
        if info.steps_note:
            tip += f"\n{info.steps_note}"
        if reasons:
            tip += "\nNot used:\n" + reasons
        self.provider_label.setToolTip(tip)
        self.provider_label.setAccessibleDescription(tip)
        self.set_context(0, info.context_length)

    def set_stats(self, stats: GenerationStats) -> None:
        self.speed_label.setText(f"{stats.decode_tok_s:.1f} tok/s")
        self.ttft_label.setText(f"TTFT {stats.ttft_ms:.0f} ms")
        reused = f", {stats.reused_tokens} reused" if stats.reused_tokens else ""
        self.ttft_label.setToolTip(
            f"{stats.prompt_tokens} prompt tokens ({stats.prefilled_tokens} prefilled{reused}),"
            f" {stats.generated_tokens} generated"
        )
        self.set_context(stats.context_used, stats.context_max)
        self.set_speculation(stats)

    def show_chat(self, stats: dict | None, context_max: int) -> None:
        """Another chat is open (a switch, a new chat, a restart): its own last reply's
        figures (``stats``: the dict stored with it), or none; never the previous chat's."""
        stats = stats or {}
        speed, ttft = stats.get("decode_tok_s"), stats.get("ttft_ms")
        self.speed_label.setText(f"{speed:.1f} tok/s" if isinstance(speed, int | float) else "")
        self.ttft_label.setText(f"TTFT {ttft:.0f} ms" if isinstance(ttft, int | float) else "")
        self.ttft_label.setToolTip("")
        used = stats.get("context_used")
        self.set_context(used if isinstance(used, int) else 0, context_max)
        self.set_speculation(None)

    def set_speculation(self, stats: GenerationStats | None) -> None:
        """Acceptance and steps saved of the last reply; hidden when it did not speculate."""
        self._speculation = figures = speculation_figures(stats)
        self._speculation_off = None if figures else off_reason(stats)
        tip = f"{status_text(figures)}\n{explanation(figures)}" if figures else ""
        if self._speculation_off:
            tip = (f"{self._speculation_off}.\nThis reply was written one token per model "
                   "pass, as without guessing ahead.")
        self.speculation_label.setToolTip(tip)
        self.speculation_label.setAccessibleDescription(tip)
        self._show_speculation()

    def _show_speculation(self) -> None:
        """The long text where the bar has room for it and for messages, else the short one;
        hidden without figures, while the activity label (a new reply starting) shows and
        while a message ("Copied", "Model loaded in 0.8 s") does: it needs the room."""
        figures = self._speculation
        label = self.speculation_label
        off = self._speculation_off
        if ((figures is None and off is None) or not self.activity_label.isHidden()
                or self.currentMessage()):
            label.setText("")
            label.hide()
            return
        if figures is None:
            label.setText(off)
            label.show()
            return
        text = status_text(figures)
        others = sum(w.sizeHint().width() + 12 for w in (
            self.model_label, self.provider_label, self.speed_label, self.ttft_label,
            self.context_label) if w.text())
        if self.width() - others - label.fontMetrics().horizontalAdvance(text) < MESSAGE_ROOM_PX:
            text = compact_status_text(figures)
        label.setText(text)
        label.show()

    def on_message_changed(self, _message: str) -> None:
        self._show_speculation()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._server_address is not None:
            self.set_server(self._server_address, self._server_active)
        self._show_speculation()

    def set_context(self, used: int, maximum: int) -> None:
        if maximum <= 0:
            self.context_label.setText("")
            return
        share = used / maximum
        self.context_warning = share > CONTEXT_WARN
        self.context_label.setText(f"Context {used:,} / {maximum:,}")
        if self.context_warning:
            self.context_label.setStyleSheet("color: #d29922; font-weight: bold;")
            tip = (
                f"The chat uses {share:.0%} of the model's context. Start a new chat, or pick "
                "another context policy in the side panel."
            )
        else:
            self.context_label.setStyleSheet("")
            tip = f"The chat uses {share:.0%} of the model's context."
        self.context_label.setToolTip(tip)
        self.context_label.setAccessibleDescription(tip)
