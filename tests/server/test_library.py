"""``hearth serve`` serves the whole library: every installed model is listed, a request
naming another one loads it (one at a time, in queue order, on the executor's thread), and
an idle model is let go after ``--idle-unload`` seconds. Two tiny real models, installed in a
temporary HEARTH_HOME models folder."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from app.cli import build_parser
from app.documents.starter_embedder import EMBEDDER_ID
from app.engine.engine import Engine
from app.engine.types import GenerationSettings, Message, SamplingSettings
from app.models.library import ModelLibrary
from app.server.app import HearthApi
from app.server.cli import run_serve
from app.server.config import ServerConfig
from app.server.executor import ThreadEngineExecutor
from app.server.library import LibraryModels
from app.server.runner import ServerRunner

HELLO = [{"role": "user", "content": "hello there"}]


@pytest.fixture
def library(gqa_model_dir, plain_model_dir):
    library = ModelLibrary()
    library.import_folder(gqa_model_dir, name="alpha")
    library.import_folder(plain_model_dir, name="beta")
    return library


def own_reply(folder) -> str:
    engine = Engine.load(folder)
    settings = GenerationSettings(SamplingSettings(temperature=0.0), max_new_tokens=10)
    text = "".join(c.text for c in engine.chat([Message("user", "hello there")], settings))
    engine.close()
    return text


@pytest.fixture
def library_server(library):
    """``start(idle_unload_s)`` → (openai client, executor, loads): ``loads`` lists the ids
    loaded, in order, and ``open`` how many engines were open at once at most."""
    started = []

    def start(idle_unload_s: float = 0.0):
        loads: list[str] = []
        open_now, most = [0], [0]

        def loader(path):
            engine = Engine.load(path)
            loads.append(library.find_path(path).id)
            open_now[0] += 1
            most[0] = max(most[0], open_now[0])
            close = engine.close

            def closing():
                open_now[0] -= 1
                close()

            engine.close = closing
            return engine

        executor = ThreadEngineExecutor(models=LibraryModels(library, loader), first="alpha",
                                        idle_unload_s=idle_unload_s)
        executor.start()
        api = HearthApi(executor, ServerConfig(port=0))
        runner = ServerRunner(api)
        address = runner.start()
        started.append((runner, executor))
        client = openai.OpenAI(base_url=address.base_url, api_key="x", max_retries=0)
        return client, executor, loads, most

    yield start
    for runner, executor in started:
        assert runner.stop()
        assert executor.close()


def ask(client, model: str) -> str:
    reply = client.chat.completions.create(model=model, messages=HELLO, temperature=0,
                                           max_tokens=10)
    return reply.choices[0].message.content


def test_every_installed_model_is_listed_and_a_request_loads_the_one_it_names(
        library_server, gqa_model_dir, plain_model_dir):
    client, executor, loads, most = library_server()
    assert [m.id for m in client.models.list().data] == ["alpha", "beta"]  # loaded first
    assert client.models.retrieve("beta").id == "beta"
    assert ask(client, "beta") == own_reply(plain_model_dir)
    assert executor.served_model().id == "beta"
    assert [m.id for m in client.models.list().data] == ["beta", "alpha"]
    assert ask(client, "alpha") == own_reply(gqa_model_dir)
    assert loads == ["alpha", "beta", "alpha"] and most == [1]  # one model in memory
    with pytest.raises(openai.NotFoundError):
        ask(client, "gamma")


def test_requests_queued_before_a_switch_run_on_the_model_they_asked_for(
        library_server, gqa_model_dir, plain_model_dir):
    client, executor, loads, most = library_server()
    gate = threading.Event()
    executor.submit(lambda engine, caches: gate.wait(30))  # the engine busy: requests queue
    order = ["beta", "alpha", "beta"]
    replies: dict[int, str] = {}
    threads = [threading.Thread(target=lambda i=i, m=m: replies.__setitem__(i, ask(client, m)))
               for i, m in enumerate(order)]
    asked: list[str] = []  # the models of the jobs queued behind the busy one, in order
    submit = executor.submit

    def recording(fn, model=None):
        if model is not None:
            asked.append(model)
        return submit(fn, model)

    executor.submit = recording
    for queued, thread in enumerate(threads, 1):  # one by one: the queue's order is theirs
        thread.start()
        deadline = time.monotonic() + 10
        while len(asked) < queued:  # this request's job is in the queue, not only some job
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert asked == order
    gate.set()
    for thread in threads:
        thread.join(30)
    want = {"alpha": own_reply(gqa_model_dir), "beta": own_reply(plain_model_dir)}
    assert [replies[i] for i in range(3)] == [want[m] for m in order]
    assert loads == ["alpha", "beta", "alpha", "beta"] and most == [1]


def test_an_idle_model_is_let_go_and_loads_again_when_asked(library_server, gqa_model_dir):
    client, executor, loads, _ = library_server(idle_unload_s=0.3)
    assert ask(client, "alpha") == own_reply(gqa_model_dir)
    deadline = time.monotonic() + 20
    while executor.served_model() is not None:
        assert time.monotonic() < deadline, "the idle model was never unloaded"
        time.sleep(0.05)
    # still offered (with none loaded, the library's order: newest install first)
    assert sorted(m.id for m in client.models.list().data) == ["alpha", "beta"]
    assert ask(client, "alpha") == own_reply(gqa_model_dir)
    # loaded again after the unload (on a loaded machine the 0.3 s may also pass before the
    # first request arrives: then it loads once more)
    assert len(loads) >= 2 and set(loads) == {"alpha"}


def test_serve_without_a_model_serves_the_library(library, capsys):
    args = build_parser().parse_args(["serve", "--port", "0", "--idle-unload", "0"])
    ready, stop, addresses = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=run_serve, args=(args,), kwargs=dict(
        on_ready=lambda a: (addresses.append(a), ready.set()), stop=stop))
    thread.start()
    try:
        assert ready.wait(30)
        client = openai.OpenAI(base_url=addresses[0].base_url, api_key="x", max_retries=0)
        listed = sorted(m.id for m in client.models.list().data)
        # the library's chat models, and the starter embedder where its wheel was fetched
        assert [i for i in listed if i != EMBEDDER_ID] == ["alpha", "beta"]
        assert ask(client, "beta")
    finally:
        stop.set()
        thread.join(15)
