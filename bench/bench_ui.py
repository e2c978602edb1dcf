"""UI benchmarks (figures only, never asserts).

  python bench/bench_ui.py [--model DIR] [--history N] [--turns N]

- cold start: process launch to the first painted window, no model (target <= 1.0 s);
- stall: the longest event-loop stall while a reply streams, measured by a 5 ms QTimer's
  lateness, over a chat with N earlier messages (target <= 30 ms); fake engine by default,
  the real engine with --model (also reports launch-to-first-token);
- memory: RSS after 100 turns with the fake engine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

COLD_START = r"""
import time, sys
t0 = float(sys.argv[1])
from PySide6.QtWidgets import QApplication
from PySide6.QtCore import QTimer
from app.settings import Settings
from app.storage.history import History
from app.ui.launch import build_window
from app.ui.message_bridge import MessageBridge
app = QApplication([])
window = build_window(History(), Settings(), MessageBridge())
window.show()
def painted():
    print(f"{time.time() - t0:.3f}")
    window.models.shutdown()
    window.controller.shutdown()
    app.quit()
QTimer.singleShot(0, painted)
app.exec()
"""

REPLY = (
    "Sure! Here is a **detailed** answer with a list:\n\n- first point\n- second point\n\n"
    "```python\ndef hello(name):\n    return f'Hello {name}'\n```\n\nAnd a closing paragraph "
    "that goes on for a while to make the reply realistically long. "
)


def cold_start(runs: int = 3) -> list[float]:
    results = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, HEARTH_HOME=home, PYTHONPATH=str(ROOT))
            out = subprocess.run(
                [sys.executable, "-c", COLD_START, repr(time.time())],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            results.append(float(out.stdout.strip().splitlines()[-1]))
    return results


def make_app(loader, home: str):
    os.environ["HEARTH_HOME"] = home
    from PySide6.QtWidgets import QApplication

    from app.settings import Settings
    from app.storage.history import History
    from app.ui.launch import build_window
    from app.ui.message_bridge import MessageBridge

    app = QApplication.instance() or QApplication([])
    window = build_window(History(), Settings(), MessageBridge(), loader)
    controller = window.controller
    window.resize(1200, 800)
    window.show()
    return app, controller, window


def wait_until(app, predicate, timeout: float = 600.0) -> None:
    end = time.perf_counter() + timeout
    while not predicate():
        app.processEvents()
        time.sleep(0.001)
        if time.perf_counter() > end:
            raise TimeoutError("timed out")


def load(app, controller, path) -> float:
    started = time.perf_counter()
    controller.load_model(path)
    wait_until(app, lambda: controller.model_info is not None or controller.loading_path is None)
    wait_until(app, lambda: controller.loading_path is None)
    if controller.model_info is None:
        raise SystemExit("model failed to load")
    return time.perf_counter() - started


def seed_history(controller, n: int) -> str:
    """A chat of n messages written straight into the database; returns its id."""
    h = controller.history
    conv = h.create_conversation("bench")
    for i in range(n):
        h.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"{i}: " + REPLY)
    return conv.id


def stall(app, controller, window, prompt: str = "Tell me something long."):
    """Send one message; sample a 5 ms timer's lateness until the reply ends."""
    from PySide6.QtCore import QElapsedTimer, QTimer

    clock = QElapsedTimer()
    lateness: list[float] = []
    last = [0.0]

    phase: list[bool] = []  # True once the first token has arrived

    def tick():
        now = clock.nsecsElapsed() / 1e6
        lateness.append(max(0.0, now - last[0] - 5.0))
        phase.append(first_token[0] is not None)
        last[0] = now

    timer = QTimer()
    timer.setInterval(5)
    timer.setTimerType(__import__("PySide6.QtCore").QtCore.Qt.TimerType.PreciseTimer)
    timer.timeout.connect(tick)
    first_token = [None]
    started = time.perf_counter()

    def on_chunk(*_):
        if first_token[0] is None:
            first_token[0] = time.perf_counter() - started

    controller.chat_model.dataChanged.connect(on_chunk)  # the reply text reached the view
    clock.start()
    timer.start()
    window.composer.set_text(prompt)
    window.composer.on_send()
    wait_until(app, lambda: not controller.generating)
    timer.stop()
    controller.chat_model.dataChanged.disconnect(on_chunk)
    streaming = [x for x, p in zip(lateness[1:], phase[1:], strict=True) if p] or [0.0]
    before = [x for x, p in zip(lateness[1:], phase[1:], strict=True) if not p] or [0.0]
    p99 = statistics.quantiles(streaming, n=100)[98] if len(streaming) > 1 else streaming[0]
    return max(streaming), p99, max(before), first_token[0]


def rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a real model folder (default: the fake engine)")
    parser.add_argument("--history", type=int, default=500, help="earlier messages in the chat")
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()

    starts = cold_start()
    print(
        f"cold start to painted window (no model): median {statistics.median(starts):.3f} s "
        f"(runs {', '.join(f'{s:.3f}' for s in starts)}; target <= 1.0 s)"
    )

    from bench.scripted_engine import scripted_loader

    words = REPLY.split(" ")
    script = [w if i == 0 else " " + w for i, w in enumerate(words)] * 8
    with tempfile.TemporaryDirectory() as home:
        if args.model:
            from app.loading import default_loader

            loader, path, label = default_loader, args.model, f"real engine ({args.model})"
        else:
            loader = scripted_loader(script, delay=0.004)
            path, label = str(Path(home) / "fake"), "fake engine, 4 ms/token"
        app, controller, window = make_app(loader, home)
        if args.model:  # the earlier messages overflow a small context: keep the newest
            controller.settings.set("context_policy", "truncate_oldest")
        load_s = load(app, controller, path)
        from app.ui.chat_view import PAGE

        conversation = seed_history(controller, args.history)
        opened = time.perf_counter()
        controller.open_conversation(conversation)
        app.processEvents()
        first = time.perf_counter() - opened
        controller.new_conversation()
        app.processEvents()
        opened = time.perf_counter()
        controller.open_conversation(conversation)
        app.processEvents()
        print(
            f"open a chat of {args.history} messages (newest {PAGE} rendered): "
            f"{first * 1000:.0f} ms"
            f"; again after another chat: {(time.perf_counter() - opened) * 1000:.0f} ms"
        )
        worst, p99, worst_prefill, ttft = stall(app, controller, window)
        reply = controller.chat_model.message(controller.chat_model.rowCount() - 1)
        print(
            f"longest UI stall while streaming ({label}, {args.history} earlier messages, "
            f"{len(reply.content)} chars reply): max {worst:.1f} ms, p99 {p99:.1f} ms "
            f"(target <= 30 ms); before the first token: max {worst_prefill:.1f} ms"
        )
        if args.model:
            print(
                f"model load {load_s:.2f} s; send to first token {ttft * 1000:.0f} ms; "
                f"launch to first token ~{load_s + ttft:.2f} s (+ cold start)"
            )
        controller.shutdown()
        window.close()

    with tempfile.TemporaryDirectory() as home:
        loader = scripted_loader(script[:200], delay=0.0)
        app, controller, window = make_app(loader, home)
        load(app, controller, str(Path(home) / "fake"))
        before = rss_mb()
        started = time.perf_counter()
        for i in range(args.turns):
            window.composer.set_text(f"turn {i}: tell me more")
            window.composer.on_send()
            wait_until(app, lambda: not controller.generating)
        app.processEvents()
        after = rss_mb()
        rows = controller.chat_model.rowCount()
        print(
            f"memory after {args.turns} turns ({rows} messages, fake engine): RSS {after:.0f} MB "
            f"(+{after - before:.0f} MB over the loaded window; "
            f"{time.perf_counter() - started:.1f} s)"
        )
        controller.shutdown()
        window.close()


if __name__ == "__main__":
    from app.cpu import describe_machine

    print(describe_machine(), flush=True)  # every figure below is for this CPU kind
    main()
