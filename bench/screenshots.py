"""Render Hearth's main states offscreen and save them as PNGs, to look at after a change.

  python bench/screenshots.py OUT_DIR

A fresh HEARTH_HOME, a scripted engine (canned Markdown + code reply, no model needed) and
the real window, controllers and workers. Writes:

  01-first-run.png         no model installed: the welcome page
  02-empty-chat.png        a model loaded, an empty chat
  03-reply.png             a streamed Markdown + code reply
  04-dark.png              the same chat in the dark theme
  05-settings.png          the settings window (General tab; 05b Models, 05c Hardware)
  06-model-manager.png     the model manager
  07-800x600.png           the chat at 800x600
  09-chat-settings.png     the reply with the chat settings panel open
  08-model-details-800x600.png   a catalog model's details offering its draft model
  10-800x600-zoom-100.png  the reply at 800x600, the system's text size (Ctrl+0)
  11-800x600-zoom-150.png  the same zoomed to 150% (Ctrl +): messages, list, composer
  12-undo-800x600.png      a deleted reply's Undo note (Ctrl+Z works while the chat is open)
  13-server-800x600.png    the Local server running: its address and requests in the status bar
  05d-settings-server.png  the Local server tab (help texts wrap, never clipped)
  14-catalog-installed-800x600.png  the catalog marking an installed model
  15-focus-send-800x600.png         the keyboard focus on Send (a ring round the button)
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPLY = (
    "Here is a small function that reverses the words of a sentence:\n\n"
    "```python\ndef reverse_words(text: str) -> str:\n"
    "    \"\"\"Return the words of *text* in reverse order.\"\"\"\n"
    "    return \" \".join(reversed(text.split()))\n```\n\n"
    "How it works:\n\n1. `split()` cuts the text at whitespace.\n"
    "2. `reversed()` walks the list backwards.\n3. `join()` glues the words back together.\n\n"
    "For example, `reverse_words(\"hello brave new world\")` returns **\"world new brave "
    "hello\"**.\n\n| call | returns |\n|---|---|\n| `reverse_words(\"a b\")` | `\"b a\"` |\n"
)


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    home = tempfile.mkdtemp(prefix="hearth-shots-")
    os.environ["HEARTH_HOME"] = home
    from PySide6.QtWidgets import QApplication

    from app.paths import models_dir
    from app.settings import Settings
    from app.storage.history import History
    from app.ui.launch import build_window
    from app.ui.message_bridge import MessageBridge
    from app.ui.theme import apply_theme
    from bench.scripted_engine import scripted_loader

    app = QApplication.instance() or QApplication([])
    words = [w + " " for w in REPLY.split(" ")]
    window = build_window(History(), Settings(), MessageBridge(), scripted_loader(words, 0.0))
    window.resize(1200, 800)
    window.show()

    def settle(seconds: float = 0.3) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            app.processEvents()

    def shot(name: str, widget=None) -> None:
        settle()
        (widget or window).grab().save(str(out / name))
        print(out / name)

    shot("01-first-run.png")
    folder = models_dir() / "smollm2-demo"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "hearth-manifest.json").write_text('{"name": "SmolLM2 135M Instruct"}')
    window.refresh_models()
    window.controller.load_model(folder)
    wait(app, lambda: window.controller.model_info is not None)
    shot("02-empty-chat.png")
    window.composer.set_text("Write a Python function that reverses the words of a sentence.")
    window.composer.on_send()
    wait(app, lambda: not window.controller.generating)
    shot("03-reply.png")
    window.panel_action.trigger()  # the chat settings panel beside the reply
    shot("09-chat-settings.png")
    window.panel_action.trigger()
    apply_theme("dark")
    shot("04-dark.png")
    apply_theme("system")
    window.on_preferences()
    shot("05-settings.png", window.preferences)
    window.preferences.tabs.setCurrentIndex(1)
    shot("05b-settings-models.png", window.preferences)
    window.preferences.tabs.setCurrentIndex(2)
    shot("05c-settings-hardware.png", window.preferences)
    window.preferences.close()
    window.model_manager.open_panel()
    shot("06-model-manager.png", window.model_manager)
    window.model_manager.resize(800, 600)
    window.model_manager.select_catalog("smollm2-360m-instruct")  # the catalog names a draft
    shot("08-model-details-800x600.png", window.model_manager)
    window.model_manager.close()
    window.resize(800, 600)
    shot("07-800x600.png")
    from app.ui.zoom import system_points

    window.on_zoom(0)
    shot("10-800x600-zoom-100.png")
    window.set_setting("font_size", round(1.5 * system_points()))
    shot("11-800x600-zoom-150.png")
    window.on_zoom(0)
    window.chat_view.message_widget(1).action_buttons["delete"].click()
    shot("12-undo-800x600.png")
    window.on_undo_delete()
    import socket

    with socket.socket() as probe:  # a free loopback port
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    window.controller.settings.set("server_port", port)
    window.set_setting("server_enabled", True)
    wait(app, lambda: window.server.running)
    window.status.clearMessage()
    shot("13-server-800x600.png")
    window.on_server_settings()
    shot("05d-settings-server.png", window.preferences)
    window.preferences.close()
    window.set_setting("server_enabled", False)
    installed = models_dir() / "qwen3-0.6b"
    installed.mkdir()
    (installed / "config.json").write_text("{}", encoding="utf-8")
    (installed / "hearth-manifest.json").write_text('{"name": "Qwen3 0.6B"}')
    window.model_manager.open_panel()
    window.model_manager.resize(800, 600)
    window.model_manager.select_catalog("qwen3-0.6b")
    shot("14-catalog-installed-800x600.png", window.model_manager)
    window.model_manager.close()
    window.composer.button.setFocus()
    shot("15-focus-send-800x600.png")
    window.close()
    return 0


def wait(app, predicate, timeout: float = 30.0) -> None:
    end = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > end:
            raise TimeoutError("the window did not reach the expected state")
        app.processEvents()
        time.sleep(0.005)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "screenshots")))
