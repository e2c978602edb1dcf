"""Light and dark colours that follow the system palette (Qt's own palette is the source),
and the one stylesheet per theme that the chat area is drawn with."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette


@dataclass(frozen=True)
class Colors:
    dark: bool
    text: str
    muted: str
    user_bg: str  # the user's turn: a tinted card
    assistant_bg: str  # the page the conversation is written on
    code_bg: str
    border: str
    link: str
    warning: str
    error: str
    pygments_style: str
    hover_bg: str = "#eaeef2"  # an icon button under the pointer or with focus
    accent: str = "#0969da"  # the primary button (Save & submit, Undo)
    on_accent: str = "#ffffff"  # text on the accent
    toast_bg: str = "#24292f"  # the Undo toast
    toast_text: str = "#ffffff"


LIGHT = Colors(
    dark=False,
    text="#1f2328",
    muted="#59636e",
    user_bg="#eef3fb",
    assistant_bg="#ffffff",
    code_bg="#f6f8fa",
    border="#d0d7de",
    link="#0969da",
    warning="#9a6700",
    error="#cf222e",
    pygments_style="default",
    hover_bg="#e6eaef",
    accent="#0969da",
    on_accent="#ffffff",
    toast_bg="#24292f",
    toast_text="#ffffff",
)

DARK = Colors(
    dark=True,
    text="#e6edf3",
    muted="#9198a1",
    user_bg="#1f2a3a",
    assistant_bg="#161b22",
    code_bg="#0d1117",
    border="#30363d",
    link="#4493f8",
    warning="#d29922",
    error="#f85149",
    pygments_style="monokai",
    hover_bg="#262c36",
    accent="#1f6feb",
    on_accent="#ffffff",
    toast_bg="#e6edf3",
    toast_text="#161b22",
)

# (foreground, background) pairs that carry text: each must reach WCAG AA (4.5:1).
TEXT_PAIRS = (
    ("text", "assistant_bg"), ("text", "user_bg"), ("text", "code_bg"), ("text", "hover_bg"),
    ("muted", "assistant_bg"), ("muted", "user_bg"), ("muted", "code_bg"), ("muted", "hover_bg"),
    ("link", "assistant_bg"), ("link", "code_bg"), ("link", "user_bg"),
    ("warning", "assistant_bg"), ("error", "assistant_bg"),
    ("on_accent", "accent"), ("toast_text", "toast_bg"),
)


def is_dark(palette: QPalette) -> bool:
    """True when the window background is darker than its text (a dark system theme)."""
    window = palette.color(QPalette.ColorRole.Window)
    text = palette.color(QPalette.ColorRole.WindowText)
    return _lightness(window) < _lightness(text)


def colors_for(palette: QPalette) -> Colors:
    return DARK if is_dark(palette) else LIGHT


def _lightness(color: QColor) -> float:
    return 0.2126 * color.redF() + 0.7152 * color.greenF() + 0.0722 * color.blueF()


_SYSTEM_PALETTE: QPalette | None = None


def palette_for(colors: Colors, base: QPalette) -> QPalette:
    """``base`` with the window, text and accent roles taken from ``colors``."""
    palette = QPalette(base)
    window = QColor("#0d1117" if colors.dark else "#f6f8fa")
    roles = {
        QPalette.ColorRole.Window: window,
        QPalette.ColorRole.WindowText: QColor(colors.text),
        QPalette.ColorRole.Base: QColor(colors.assistant_bg),
        QPalette.ColorRole.AlternateBase: QColor(colors.code_bg),
        QPalette.ColorRole.Text: QColor(colors.text),
        QPalette.ColorRole.Button: QColor(colors.code_bg),
        QPalette.ColorRole.ButtonText: QColor(colors.text),
        QPalette.ColorRole.ToolTipBase: QColor(colors.assistant_bg),
        QPalette.ColorRole.ToolTipText: QColor(colors.text),
        QPalette.ColorRole.PlaceholderText: QColor(colors.muted),
        QPalette.ColorRole.Link: QColor(colors.link),
        QPalette.ColorRole.Highlight: QColor(colors.link),
        QPalette.ColorRole.HighlightedText: QColor("#ffffff"),
    }
    for role, color in roles.items():
        palette.setColor(QPalette.ColorGroup.All, role, color)
    muted = QColor(colors.muted)
    for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text,
                 QPalette.ColorRole.ButtonText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, muted)
    return palette


def apply_theme(choice: str) -> None:
    """Switch the whole app live: "light", "dark", or "system" (the platform's palette)."""
    from PySide6.QtWidgets import QApplication

    global _SYSTEM_PALETTE
    app = QApplication.instance()
    if app is None:
        return
    if _SYSTEM_PALETTE is None:
        _SYSTEM_PALETTE = QPalette(app.palette())
    if choice == "system":
        app.setPalette(readable_hints(_SYSTEM_PALETTE))
    else:
        app.setPalette(readable_hints(
            palette_for(DARK if choice == "dark" else LIGHT, _SYSTEM_PALETTE)))
    _restyle(app)


#: the least contrast of hint text (placeholders, notes drawn in the disabled colour), WCAG
#: AA for body text (4.5:1), with a margin for the rounding of antialiased glyphs
HINT_CONTRAST = 4.6
#: the roles hint text is drawn in: the placeholder (each group), and the disabled text
#: roles that greyed-out notes and unavailable controls use
_HINT_ROLES = ((QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText),
               (QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text),
               (QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText),
               *((g, QPalette.ColorRole.PlaceholderText) for g in (
                   QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive,
                   QPalette.ColorGroup.Disabled)))
_BACKGROUND_ROLES = (QPalette.ColorRole.Window, QPalette.ColorRole.Base,
                     QPalette.ColorRole.Button)


def _over(color: QColor, background: QColor) -> QColor:
    """``color`` as drawn over ``background`` (its alpha composited: Qt's default
    placeholder is the text colour at half alpha)."""
    a = color.alphaF()
    return QColor.fromRgbF(*(a * getattr(color, c)() + (1 - a) * getattr(background, c)()
                             for c in ("redF", "greenF", "blueF")))


def hint_contrast(palette: QPalette, group: QPalette.ColorGroup,
                  role: QPalette.ColorRole) -> float:
    """The least contrast of ``role`` in ``group`` against the backgrounds it is drawn on
    (window, base and button, in that group)."""
    color = palette.color(group, role)
    return min(contrast_ratio(_over(color, bg).name(), bg.name())
               for bg in (palette.color(group, r) for r in _BACKGROUND_ROLES))


def readable_hints(palette: QPalette) -> QPalette:
    """``palette`` with hint text readable: each hint role (``_HINT_ROLES``) that falls
    short of ``HINT_CONTRAST`` against its backgrounds (a platform palette's disabled
    text is often 1.6:1) is replaced by the text colour blended towards the window as far
    as it stays readable, so it still looks secondary. Roles that pass are left as they
    are (the light and dark themes' muted colour already does)."""
    out = QPalette(palette)
    for group, role in _HINT_ROLES:
        if hint_contrast(out, group, role) >= HINT_CONTRAST:
            continue
        text = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Text)
        window = palette.color(QPalette.ColorGroup.Active, QPalette.ColorRole.Window)
        for step in range(12, -1, -1):  # from 60 % towards the window down to the text
            t = step / 20
            out.setColor(group, role, QColor.fromRgbF(
                *((1 - t) * getattr(text, c)() + t * getattr(window, c)()
                  for c in ("redF", "greenF", "blueF"))))
            if hint_contrast(out, group, role) >= HINT_CONTRAST:
                break
    return out


def _restyle(app) -> None:
    """A widget with a style sheet of its own keeps the palette it was polished with (Qt
    sends it no palette change): apply each such sheet again so that it takes the new
    colours (the composer's Tools and Libraries buttons stayed light in a dark theme)."""
    for widget in app.allWidgets():
        sheet = widget.styleSheet()
        if sheet:
            widget.setStyleSheet("")  # the same sheet again would change nothing
            widget.setStyleSheet(sheet)


def relative_luminance(hex_color: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``."""
    channels = [int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    a, b = relative_luminance(foreground), relative_luminance(background)
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def chat_stylesheet(c: Colors) -> str:
    """The chat area's one stylesheet: the page, the user's card, the icon buttons, a
    reply's folded thinking, the welcome page, the edit banner and the Undo toast. Widgets
    carry object names and properties; no widget sets its own colours."""
    return f"""
    #chatPage, #chatColumn, #welcomePage, #welcomeContent {{ background: {c.assistant_bg}; }}
    QScrollArea#chatScroll {{ background: {c.assistant_bg}; border: none; }}
    #messageCard[role="user"] {{ background: {c.user_bg}; border-radius: 14px; }}
    #messageCard[role="assistant"] {{ background: transparent; }}
    #messageBody {{ color: {c.text}; background: transparent; }}
    #roleLabel {{ color: {c.muted}; font-weight: 600; }}
    #statusNote {{ color: {c.muted}; }}
    #statusNote[level="warning"] {{ color: {c.warning}; }}
    #statusNote[level="error"] {{ color: {c.error}; }}
    #typingIndicator {{ color: {c.muted}; }}
    QToolButton#thinkingToggle {{
        border: none; border-radius: 6px; padding: 3px 8px 3px 2px; background: transparent;
        color: {c.muted}; font-weight: 600;
    }}
    QToolButton#thinkingToggle:hover, QToolButton#thinkingToggle:focus {{
        background: {c.hover_bg}; color: {c.text};
    }}
    QToolButton#thinkingToggle:focus {{ border: 1px solid {c.link}; }}
    #thinkingFrame {{ border: none; border-left: 2px solid {c.border}; background: transparent; }}
    #thinkingBody {{ color: {c.muted}; background: transparent; }}
    #variantLabel {{ color: {c.muted}; }}
    #message:focus {{ outline: none; }}
    #messageCard[focused="true"] {{ border: 2px solid {c.link}; }}
    QToolButton#actionButton {{
        border: none; border-radius: 6px; padding: 4px; background: transparent;
        color: {c.muted};
    }}
    QToolButton#actionButton:hover, QToolButton#actionButton:focus {{
        background: {c.hover_bg}; color: {c.text};
    }}
    QToolButton#actionButton:focus {{ border: 1px solid {c.link}; }}
    QPushButton#showEarlier {{
        border: none; color: {c.link}; background: transparent; padding: 8px;
    }}
    #welcomeTitle {{ color: {c.text}; font-size: 20pt; font-weight: 600; }}
    #welcomeModel, #welcomeHints {{ color: {c.muted}; }}
    QPushButton#examplePrompt {{
        color: {c.text}; background: {c.code_bg}; border: 1px solid {c.border};
        border-radius: 10px; padding: 10px 14px; text-align: left;
    }}
    QPushButton#examplePrompt:hover, QPushButton#examplePrompt:focus {{
        background: {c.hover_bg}; border-color: {c.link};
    }}
    #undoToast {{ background: {c.toast_bg}; border-radius: 8px; }}
    #undoToast QLabel {{ color: {c.toast_text}; }}
    #undoToast QPushButton {{
        color: {c.toast_text}; background: transparent; border: 1px solid {c.toast_text};
        border-radius: 6px; padding: 3px 10px; font-weight: 600;
    }}
    """


def send_button_stylesheet(c: Colors) -> str:
    """Send: the primary button, with a focus ring that can be seen (a second colour
    around the accent, the same size focused or not)."""
    return f"""
    QPushButton#sendButton {{
        color: {c.on_accent}; background: {c.accent}; border: 2px solid {c.accent};
        border-radius: 6px; padding: 4px 14px; font-weight: 600;
    }}
    QPushButton#sendButton:focus {{ border: 2px solid {c.text}; }}
    QPushButton#sendButton:disabled {{
        color: {c.muted}; background: {c.code_bg}; border-color: {c.border};
    }}
    """


def chat_list_stylesheet(c: Colors) -> str:
    """The chat list: a 2 px accent frame while it has the keyboard focus (1 px plain
    otherwise, the padding making up the difference: nothing moves)."""
    return f"""
    QListView#conversationList {{ border: 1px solid {c.border}; padding: 1px; }}
    QListView#conversationList:focus {{ border: 2px solid {c.link}; padding: 0px; }}
    """


def toolbar_stylesheet(c: Colors) -> str:
    """The main toolbar's buttons show where the keyboard focus is."""
    return f"""
    QToolBar#mainToolbar QToolButton:focus {{
        border: 2px solid {c.link}; border-radius: 4px;
    }}
    """


def edit_banner_stylesheet(c: Colors) -> str:
    """The composer's "Editing a message" banner, and its "The model is answering in …"
    note (the same card: one sheet styles both)."""
    return f"""
    #editBanner, #busyBanner {{
        background: {c.user_bg}; border: 1px solid {c.border}; border-radius: 8px;
    }}
    #editBanner QLabel, #busyBanner QLabel {{ color: {c.text}; }}
    #editBanner QPushButton#saveEdit {{
        color: {c.on_accent}; background: {c.accent}; border: none; border-radius: 6px;
        padding: 4px 12px; font-weight: 600;
    }}
    """
