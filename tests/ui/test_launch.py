"""The window paints before the heavy libraries it does not need yet are imported: the
engine's (onnxruntime, numpy), the remote client's (httpx2), qtawesome's Qt shim (qtpy), the MCP
SDK (mcp) and the document parsers (pypdf, python-docx).
Each was measured at 60-250 ms of a ~1.2 s start on a 2-core machine."""

from __future__ import annotations

import os
import subprocess
import sys

LATER = ("onnxruntime", "numpy", "httpx2", "qtawesome", "qtpy", "huggingface_hub", "jinja2",
         "mcp", "mcp_types", "pypdf", "docx", "tokenizers")


def test_the_window_opens_without_the_libraries_it_needs_later(tmp_path):
    code = (
        "import sys\n"
        "from PySide6.QtWidgets import QApplication\n"
        "app = QApplication([])\n"
        "from app.settings import Settings\n"
        "from app.storage.history import History\n"
        "from app.ui.launch import build_window\n"
        "from app.ui.message_bridge import MessageBridge\n"
        "window = build_window(History(), Settings(), MessageBridge())\n"
        "window.show()\n"
        "app.processEvents()\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(LATER)!r}))\n"
        "window.models.shutdown()\n"
        "window.tools.shutdown()\n"
        "window.documents.shutdown()\n"
        "window.controller.shutdown()\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "HEARTH_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
