"""A seeded sampled request to a fresh ``hearth serve`` gives the same text on its first,
cold request as on warm repeats and under three concurrent clients: the server loads its
models in the exact-replies mode unless told ``--inexact`` (``Engine.load(exact=)``)."""

from __future__ import annotations

import threading

import openai
import pytest

from app.cli import build_parser
from app.server import cli
from app.server.cli import run_serve

ASKED = dict(messages=[{"role": "system", "content": "You are a poet."},
                       {"role": "user", "content": "write about the sea and the sky"}],
             temperature=1.0, top_p=0.95, seed=7, max_tokens=24)


def serving(*argv: str):
    args = build_parser().parse_args(["serve", *argv, "--port", "0"])
    ready, stop, addresses = threading.Event(), threading.Event(), []
    thread = threading.Thread(target=run_serve, args=(args,), kwargs=dict(
        on_ready=lambda a: (addresses.append(a), ready.set()), stop=stop))
    thread.start()
    assert ready.wait(30)
    return addresses[0].base_url, stop, thread


@pytest.fixture(params=["float", "one_row_differs", "one_row_alike", "grouped"])
def served_model(request, monkeypatch, tmp_path):
    """The folder to serve: the float graph, the 4-bit graph whose one-token steps round
    otherwise as the server loads it on either kind of CPU (tests/fixtures/quantized.py), or
    a GGUF's default conversion (4-bit, grouped attention)."""
    if request.param == "float":
        return request.getfixturevalue("gqa_model_dir")
    if request.param == "grouped":
        from tests.fixtures.grouped_models import converted

        return converted(tmp_path, None)
    from app.engine.engine import Engine
    from tests.fixtures.quantized import calibrate_as

    load = Engine.load

    def as_on_that_cpu(*args, **kwargs):
        engine = load(*args, **{**kwargs, "calibrate": False})
        calibrate_as(engine, request.param)
        return engine

    monkeypatch.setattr(Engine, "load", as_on_that_cpu)
    return request.getfixturevalue("gqa_int4_one_row_differs_dir")


def test_a_seeded_reply_is_the_same_cold_warm_and_under_concurrent_clients(served_model):
    base, stop, thread = serving(str(served_model))
    try:
        client = openai.OpenAI(base_url=base, api_key="x", max_retries=0)
        model = client.models.list().data[0].id

        def ask() -> str:
            return client.chat.completions.create(model=model, **ASKED).choices[0] \
                .message.content

        cold = ask()
        assert cold
        assert [ask(), ask()] == [cold, cold]
        replies: list[str] = []
        clients = [threading.Thread(target=lambda: replies.append(ask())) for _ in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join(60)
        assert replies == [cold] * 3
    finally:
        stop.set()
        thread.join(15)


@pytest.mark.parametrize("flags, exact", [((), True), (("--inexact",), False)])
def test_inexact_is_asked_for_and_exact_is_the_default(gqa_model_dir, monkeypatch, flags,
                                                        exact):
    from app.engine.engine import Engine

    asked = []
    load = Engine.load

    def spy(*args, **kwargs):
        asked.append(kwargs.get("exact"))
        return load(*args, **kwargs)

    monkeypatch.setattr(Engine, "load", spy)
    _, stop, thread = serving(str(gqa_model_dir), *flags)
    stop.set()
    thread.join(15)
    assert asked == [exact]
    assert cli.DEFAULT_IDLE_UNLOAD_S > 0
