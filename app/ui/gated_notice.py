"""The notice the model manager shows for a gated catalog entry (Gemma, Llama).

Gated models download only after the user accepts the licence on the Hugging Face Hub while
signed in, and with an access token in Hearth's settings. The notice says so, links the
licence page, and offers "Add a Hugging Face token…", which the dialog's owner connects to the
settings window. For an entry that is not gated the notice is hidden.

The same notice explains a download the Hub refused with 401 / 403 (:meth:`show_refused`):
the repo is gated (or private), its licence is accepted on its page, and a token is needed.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.models.catalog import CatalogEntry
from app.models.hub_site import HUB_SITE

TOKEN_BUTTON_TEXT = "Add a Hugging Face token…"


class GatedNotice(QFrame):
    """A one-line licence notice with a link and a token button; hidden until shown for a
    gated entry with :meth:`show_for`.

    Signals: token_requested() (the user wants to add a Hugging Face token).
    """

    token_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gatedNotice")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.message = QLabel(self)
        self.message.setWordWrap(True)
        self.message.setTextFormat(Qt.TextFormat.RichText)
        self.message.setOpenExternalLinks(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.token_button = QPushButton(TOKEN_BUTTON_TEXT, self)
        self.token_button.setAccessibleName("Add a Hugging Face token")
        self.token_button.clicked.connect(self.on_token_clicked)
        layout = QHBoxLayout(self)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.token_button)
        self.entry: CatalogEntry | None = None
        self.hide()

    def show_for(self, entry: CatalogEntry | None) -> None:
        """Show the notice for a gated ``entry``; hide it for any other (or None)."""
        self.entry = entry if entry is not None and entry.gated else None
        if self.entry is None:
            self.message.clear()
            self.hide()
            return
        self.message.setText(notice_html(self.entry))
        self.setToolTip(self.entry.license_url or "")
        self.show()

    def show_refused(self, refusal: GatedRefusal) -> None:
        """Explain a download the Hub refused (HTTP 401 / 403) and ask for a token."""
        self.entry = None
        self.message.setText(refused_html(refusal))
        self.setToolTip(refusal.license_url or refusal.page)
        self.show()

    def on_token_clicked(self) -> None:
        self.token_requested.emit()


@dataclass(frozen=True)
class GatedRefusal:
    """A download the Hub refused with 401 / 403: which model, and its licence when the
    catalog names one."""

    name: str
    repo: str
    status: int
    license: str | None = None
    license_url: str | None = None

    @property
    def page(self) -> str:
        return f"{HUB_SITE}/{self.repo}"


def refused_html(refusal: GatedRefusal) -> str:
    """Why the download stopped, the licence (linked) and what to do: accept, add a token."""
    page = escape(refusal.page, quote=True)
    licence = escape(refusal.license_url or refusal.page, quote=True)
    named = escape(refusal.license or "its licence")
    return (
        f"<b>{escape(refusal.name)}</b> was not downloaded: the Hugging Face Hub answered "
        f"HTTP {refusal.status}, because the model is gated (or private). Its authors ask "
        f'you to accept <a href="{licence}">{named}</a> on <a href="{page}">its Hugging Face '
        "page</a> while signed in; then add your access token (read access) in Settings ▸ "
        "Models and download it again."
    )


def notice_html(entry: CatalogEntry) -> str:
    """The notice's text: the licence, the Hub page where it is accepted, and the token."""
    licence = escape(entry.license_url or f"{HUB_SITE}/{entry.repo}", quote=True)
    page = escape(f"{HUB_SITE}/{entry.repo}", quote=True)
    return (
        f"<b>{escape(entry.name)}</b> is gated: accept its licence "
        f'(<a href="{licence}">{escape(entry.license)}</a>) on '
        f'<a href="{page}">its Hugging Face page</a> while signed in, then add your access '
        "token in Settings ▸ Models to download it."
    )
