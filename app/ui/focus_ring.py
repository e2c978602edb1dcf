"""A focus ring drawn over a widget that the style leaves without one (a flat source
button, a file chip, the composer's tool buttons): 2 px in the palette's highlight colour,
which the theme sets to its link colour, so Tab shows where it is in every theme."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPainter, QPalette, QPen
from PySide6.QtWidgets import (
    QStyle,
    QStyleOptionToolButton,
    QStylePainter,
    QToolButton,
    QWidget,
)

RING_PX = 2


def draw_focus_ring(widget: QWidget) -> None:
    """Call at the end of ``widget.paintEvent``: the ring while it has the keyboard focus."""
    if not widget.hasFocus():
        return
    painter = QPainter(widget)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    pen = QPen(widget.palette().color(QPalette.ColorRole.Highlight), RING_PX)
    painter.setPen(pen)
    painter.setBrush(Qt.BrushStyle.NoBrush)
    half = RING_PX / 2
    painter.drawRoundedRect(widget.rect().toRectF().adjusted(half, half, -half, -half), 4, 4)


class RingToolButton(QToolButton):
    """A tool button that shows the focus ring (the composer's Attach, Tools, Libraries
    and the file chips). ``show_menu_arrow`` False: a button with a menu drawn without the
    style's arrow (its text has one), with no style sheet, which would keep the button
    from the window's text size and theme."""

    show_menu_arrow = True

    def paintEvent(self, event) -> None:
        if self.show_menu_arrow:
            super().paintEvent(event)
        else:
            painter = QStylePainter(self)
            option = QStyleOptionToolButton()
            self.initStyleOption(option)
            option.features &= ~QStyleOptionToolButton.ToolButtonFeature.HasMenu
            painter.drawComplexControl(QStyle.ComplexControl.CC_ToolButton, option)
            painter.end()
        draw_focus_ring(self)
