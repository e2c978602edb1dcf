"""Draw Hearth's app icon (a flame on a warm hearth stone) and write the icon set.

Run ``python installer/make_icons.py`` after changing the drawing; the outputs are committed:
``resources/icons/hearth-<size>.png`` (16…1024), ``hearth.ico`` (Windows: 16–48 px as 32-bit
DIBs, 256 px as PNG) and ``hearth.icns`` (macOS: PNG entries). Only Qt (already a dependency)
is used to draw; the ICO and ICNS containers are written by hand.
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QPointF, QRectF, Qt
from PySide6.QtGui import (
    QColor,
    QGuiApplication,
    QImage,
    QLinearGradient,
    QPainter,
    QPainterPath,
    QRadialGradient,
)

ICON_DIR = Path(__file__).resolve().parents[1] / "resources" / "icons"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512, 1024)
ICO_SIZES = (16, 24, 32, 48, 256)
# ICNS entry types holding PNG data, by pixel size (retina variants reuse the larger image).
ICNS_TYPES = (
    (b"icp4", 16),
    (b"icp5", 32),
    (b"icp6", 64),
    (b"ic07", 128),
    (b"ic08", 256),
    (b"ic09", 512),
    (b"ic10", 1024),
    (b"ic11", 32),
    (b"ic12", 64),
    (b"ic13", 256),
    (b"ic14", 512),
)


def _flame(cx: float, base: float, width: float, height: float) -> QPainterPath:
    """A flame: round belly at the bottom, a tip curling slightly to the right."""
    path = QPainterPath(QPointF(cx, base))
    half = width / 2
    path.cubicTo(
        cx - half * 1.1,
        base,
        cx - half * 1.05,
        base - height * 0.45,
        cx - half * 0.45,
        base - height * 0.7,
    )
    path.cubicTo(
        cx - half * 0.1,
        base - height * 0.85,
        cx - half * 0.15,
        base - height * 0.95,
        cx + half * 0.1,
        base - height,
    )
    path.cubicTo(
        cx + half * 0.35,
        base - height * 0.8,
        cx + half * 1.1,
        base - height * 0.55,
        cx + half * 0.95,
        base - height * 0.25,
    )
    path.cubicTo(cx + half * 0.85, base - height * 0.05, cx + half * 0.5, base, cx, base)
    path.closeSubpath()
    return path


def draw_icon(size: int) -> QImage:
    """The icon at ``size`` pixels, drawn on a 256-unit canvas."""
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.scale(size / 256, size / 256)
    # Rounded tile: deep ember brown with a warm glow in the middle.
    tile = QRectF(8, 8, 240, 240)
    glow = QRadialGradient(QPointF(128, 150), 150)
    glow.setColorAt(0.0, QColor("#6b2d12"))
    glow.setColorAt(1.0, QColor("#2a1208"))
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(glow)
    p.drawRoundedRect(tile, 52, 52)
    # Hearth stones: a low arch of three rounded blocks.
    p.setBrush(QColor("#8c7b6b"))
    for x, w in ((40, 56), (100, 56), (160, 56)):
        p.drawRoundedRect(QRectF(x, 190, w, 26), 9, 9)
    # Logs.
    p.setBrush(QColor("#5a3418"))
    p.save()
    p.translate(128, 182)
    for angle in (-14, 14):
        p.save()
        p.rotate(angle)
        p.drawRoundedRect(QRectF(-62, -9, 124, 18), 9, 9)
        p.restore()
    p.restore()
    # Flames: outer orange, inner yellow.
    outer = QLinearGradient(QPointF(128, 180), QPointF(128, 40))
    outer.setColorAt(0.0, QColor("#ff5a1f"))
    outer.setColorAt(1.0, QColor("#ff9a2e"))
    p.setBrush(outer)
    p.drawPath(_flame(128, 180, 118, 140))
    inner = QLinearGradient(QPointF(128, 180), QPointF(128, 90))
    inner.setColorAt(0.0, QColor("#ffd23f"))
    inner.setColorAt(1.0, QColor("#fff3b0"))
    p.setBrush(inner)
    p.drawPath(_flame(130, 180, 60, 78))
    p.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise RuntimeError("Qt could not encode a PNG")
    buffer.close()
    return bytes(data.data())


def dib_bytes(image: QImage) -> bytes:
    """A 32-bit BGRA bottom-up DIB with its AND mask, as ICO entries below 256 px want."""
    img = image.convertToFormat(QImage.Format.Format_ARGB32)
    w, h = img.width(), img.height()
    header = struct.pack("<IiiHHIIiiII", 40, w, h * 2, 1, 32, 0, 0, 0, 0, 0, 0)
    rows = []
    for y in range(h - 1, -1, -1):
        rows.append(bytes(img.constScanLine(y))[: w * 4])  # ARGB32 is BGRA in memory (LE)
    mask_row = b"\x00" * (((w + 31) // 32) * 4)  # alpha carries transparency; mask all opaque
    return header + b"".join(rows) + mask_row * h


def ico_bytes(images: dict[int, QImage]) -> bytes:
    entries, blobs = [], []
    offset = 6 + 16 * len(images)
    for size, image in sorted(images.items()):
        blob = png_bytes(image) if size >= 256 else dib_bytes(image)
        dim = 0 if size >= 256 else size
        entries.append(struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset))
        blobs.append(blob)
        offset += len(blob)
    return struct.pack("<HHH", 0, 1, len(images)) + b"".join(entries) + b"".join(blobs)


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(
        kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES
    )
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def write_icons(out_dir: Path = ICON_DIR) -> list[Path]:
    """Draw every size and write the PNG/ICO/ICNS files; return the paths written."""
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    out_dir.mkdir(parents=True, exist_ok=True)
    images = {size: draw_icon(size) for size in PNG_SIZES}
    pngs = {size: png_bytes(image) for size, image in images.items()}
    written = []
    for size, data in pngs.items():
        path = out_dir / f"hearth-{size}.png"
        path.write_bytes(data)
        written.append(path)
    ico = out_dir / "hearth.ico"
    ico.write_bytes(ico_bytes({size: images[size] for size in ICO_SIZES}))
    icns = out_dir / "hearth.icns"
    icns.write_bytes(icns_bytes(pngs))
    return [*written, ico, icns]


if __name__ == "__main__":
    for written_path in write_icons():
        print(f"{written_path.stat().st_size:>8}  {written_path}")
