"""The local server inside the app: the real GenerationWorker on its QThread shares a tiny
model between the chat and HTTP clients, one generation at a time."""

from __future__ import annotations

import threading
import time
from typing import ClassVar

import httpx2 as httpx
import openai
import pytest

from app.chat.events import Finished
from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message
from app.server.config import ServerConfig
from app.ui.server_controller import ServerController
from app.workers.generation_worker import GenerationRequest, GenerationWorker, reply_result
from app.workers.thread_host import ThreadHost
from tests.bounds import AT_ONCE_S
from tests.ui.conftest import OnUiThread

pytestmark = [pytest.mark.qt_log_level_fail("WARNING")]
HELLO = [{"role": "user", "content": "hello there"}]


class TrackingEngine(Engine):
    """The real engine, counting generations that run at the same time."""

    active = 0
    most = 0
    threads: ClassVar[set[int]] = set()

    def _track(self, stream):
        cls = TrackingEngine
        cls.active += 1
        cls.most = max(cls.most, cls.active)
        cls.threads.add(threading.get_ident())
        try:
            for chunk in stream:
                time.sleep(0.002)  # long enough for the other side's request to arrive
                yield chunk
        finally:
            cls.active -= 1

    def chat(self, *args, **kwargs):
        return self._track(super().chat(*args, **kwargs))


@pytest.fixture
def hosted(qtbot):
    TrackingEngine.active = TrackingEngine.most = 0
    TrackingEngine.threads = set()
    worker = GenerationWorker(lambda path: TrackingEngine.load(path),
                              caches=lambda engine: engine.conversation_caches())
    host = ThreadHost(worker, "hearth-generation", stop=worker.stop)
    controller = ServerController(host)
    yield host, worker, controller
    assert controller.stop()
    assert host.shutdown(5000)
    worker.close_engine()


def in_thread(fn):
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except Exception as exc:  # handed to the test
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, box


def test_serves_the_loaded_model_and_shares_the_engine_with_the_chat(
        qtbot, hosted, gqa_model_dir):
    host, worker, controller = hosted
    host.post(worker.on_load_requested, str(gqa_model_dir))
    qtbot.waitUntil(lambda: worker.info is not None, timeout=10000)
    counts = []
    controller.requests_changed.connect(lambda active, served: counts.append((active, served)))
    with qtbot.waitSignal(controller.started, timeout=5000) as started:
        assert controller.start(ServerConfig(port=0))
    url = started.args[0]
    assert url == controller.address and url.startswith("http://127.0.0.1:")
    assert controller.model_id == gqa_model_dir.name
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)

    chat_results = []
    relay = OnUiThread(lambda conv, event: chat_results.append(
        reply_result(conv, event, worker.info)) if isinstance(event, Finished) else None)
    worker.event.connect(relay.on_signal)
    host.post(worker.on_generate_requested, GenerationRequest(
        "window-chat", (Message("user", "hello there"),),
        GenerationSettings.from_model({}, {"temperature": 0, "max_new_tokens": 60})))
    thread, box = in_thread(lambda: client.chat.completions.create(
        model=controller.model_id, messages=HELLO, max_tokens=60, temperature=0))
    qtbot.waitUntil(lambda: not thread.is_alive() and bool(chat_results), timeout=20000)
    assert "error" not in box, box.get("error")
    reply = box["value"]
    assert reply.usage.completion_tokens == 60
    assert chat_results[0].stats.generated_tokens == 60
    # the same greedy reply through both doors, run one after the other on one thread
    assert reply.choices[0].message.content == chat_results[0].text
    assert TrackingEngine.most == 1
    assert len(TrackingEngine.threads) == 1
    qtbot.waitUntil(lambda: bool(counts) and counts[-1] == (0, 1), timeout=5000)
    assert (1, 0) in counts

    begun = time.perf_counter()
    with qtbot.waitSignal(controller.stopped, timeout=5000):
        assert controller.stop()
    assert time.perf_counter() - begun < AT_ONCE_S
    assert not controller.running and controller.address is None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models")


def test_without_a_model_the_server_says_so(qtbot, hosted):
    _host, _worker, controller = hosted
    assert controller.start(ServerConfig(port=0))
    assert controller.model_id is None
    assert httpx.get(f"{controller.address}/models").json() == {"object": "list", "data": []}
    client = openai.OpenAI(base_url=controller.address, api_key="x", max_retries=0)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="anything", messages=HELLO)
    assert caught.value.status_code == 503


def test_unsafe_settings_fail_with_a_sentence(qtbot, hosted):
    _host, _worker, controller = hosted
    with qtbot.waitSignal(controller.failed, timeout=2000) as failed:
        assert not controller.start(ServerConfig(host="0.0.0.0", port=0))
    assert "API key" in failed.args[0]
    assert not controller.running
