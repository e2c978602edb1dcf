"""``HEARTH_TEST_HOOK``: a JSON script that drives the real app for process tests.

tests/test_quit_process.py starts ``python -m app`` with it to put the app in a phase (a
long prompt, a reply being written, a GGUF import, the starter setup, a download) and then
quits it. The app prints ``hearth-test: <phase>`` lines on stdout as it reaches each phase:
``ready``, ``loaded``, ``sent``, ``prefill``, ``decode``, ``job`` (a conversion reported a
layer, or a download its first bytes), ``installed`` (a job finished), ``quitting`` (the
scripted quit action fired); at ``ready`` also ``models <JSON list>``, the ids of the models
the window lists; ``message <level>: <text>`` for each message the user would see.

Keys: ``send`` (text to send once a model is loaded, or at once with ``send_now``),
``import_gguf`` (a file), ``starter`` (true: set up the starter), ``download`` (a Hub repo id,
fetched from the ``hub_endpoint`` setting), ``quit_on`` (a phase: trigger the window's Quit
action the first time it is reached), ``template_time_limit_s`` (a longer chat-template
deadline, so a slow template is still rendering when the test quits).
"""

from __future__ import annotations

import json
import os
import sys

from PySide6.QtCore import QObject, QTimer

from app.chat.events import TextDelta

ENV = "HEARTH_TEST_HOOK"


def from_environment(window) -> TestHook | None:
    """The hook the environment asks for, started; None without ``HEARTH_TEST_HOOK``."""
    text = os.environ.get(ENV)
    if not text:
        return None
    hook = TestHook(window, json.loads(text))
    QTimer.singleShot(0, hook.start)
    return hook


class TestHook(QObject):
    """Runs one script on the UI thread; its slots receive the worker signals queued."""

    def __init__(self, window, script: dict) -> None:
        super().__init__(window)
        self.window = window
        self.script = script
        self.seen: set[str] = set()
        if "template_time_limit_s" in script:  # keep a slow template rendering long enough
            from app.engine import chat_template

            chat_template.DEFAULT_TIME_LIMIT_S = float(script["template_time_limit_s"])
        c = window.controller
        c.model_loaded.connect(self.on_loaded)
        c.prefill_progress.connect(self.on_prefill)
        c.worker.event.connect(self.on_event)
        window.models.jobs.worker.progress.connect(self.on_job_progress)
        window.models.jobs.worker.finished.connect(self.on_job_finished)
        window.bridge.message_shown.connect(self.on_message)

    def phase(self, name: str) -> None:
        first = name not in self.seen
        self.seen.add(name)
        if first:
            sys.stdout.write(f"hearth-test: {name}\n")
            sys.stdout.flush()
            if self.script.get("quit_on") == name:
                self.phase("quitting")
                self.window.quit_action.trigger()

    def start(self) -> None:
        self.phase("ready")
        listed = [m.id for m in self.window.models.installed()]
        sys.stdout.write(f"hearth-test: models {json.dumps(listed)}\n")
        sys.stdout.flush()
        if self.script.get("send_now"):
            self._send()
        if path := self.script.get("import_gguf"):
            self.window.models.import_gguf(path)
        if self.script.get("starter"):
            self.window.models.setup_starter()
        if repo := self.script.get("download"):
            self.window.models.download_repo(repo)

    def _send(self) -> None:
        if self.window.controller.send(self.script["send"]):
            self.phase("sent")

    def on_message(self, level: str, text: str) -> None:
        sys.stdout.write(f"hearth-test: message {level}: {text}\n")
        sys.stdout.flush()

    def on_loaded(self, _info: object) -> None:
        self.phase("loaded")
        if self.script.get("send") and not self.script.get("send_now"):
            self._send()

    def on_prefill(self, done: int, total: int) -> None:
        if total:
            self.phase("prefill")

    def on_event(self, _conversation_id: str, event: object) -> None:
        if isinstance(event, TextDelta):
            self.phase("decode")

    def on_job_progress(self, _job_id: str, progress: object) -> None:
        converting = "layer" in str(getattr(progress, "message", ""))
        downloading = getattr(progress, "state", "") == "downloading"
        if converting or downloading:
            self.phase("job")

    def on_job_finished(self, _job_id: str, _result: object) -> None:
        self.phase("installed")
