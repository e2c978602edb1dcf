"""Server fixtures: a real ``hearth serve`` stack (engine thread, Starlette, uvicorn) on a tiny
model, bound to 127.0.0.1 on a free port, with the official ``openai`` client."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import openai
import pytest

from app.engine.engine import Engine
from app.server.app import HearthApi
from app.server.config import ServerConfig
from app.server.executor import ServedModel, ThreadEngineExecutor
from app.server.runner import Address, ServerRunner


@dataclass
class Served:
    api: HearthApi
    runner: ServerRunner
    executor: ThreadEngineExecutor
    model: ServedModel
    address: Address

    @property
    def url(self) -> str:
        return self.address.base_url

    def client(self, api_key: str = "unused", **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url, api_key=api_key, max_retries=0, **kwargs)

    def block_engine(self) -> threading.Event:
        """Occupy the engine thread until the returned event is set (a job ahead of every
        request), so requests pile up in the queue deterministically."""
        gate = threading.Event()
        self.executor.submit(lambda engine, caches: gate.wait(30))
        return gate

    def close(self) -> None:
        assert self.runner.stop()
        assert self.executor.close()


@pytest.fixture
def serve():
    """``serve(model_dir, **ServerConfig fields)`` → a running ``Served``; stopped after."""
    started: list[Served] = []

    def start(model_dir, **config) -> Served:
        config.setdefault("port", 0)
        executor = ThreadEngineExecutor(lambda: Engine.load(model_dir))
        model = executor.start()
        api = HearthApi(executor, ServerConfig(**config))
        runner = ServerRunner(api)
        served = Served(api, runner, executor, model, runner.start())
        started.append(served)
        return served

    yield start
    for served in started:
        served.close()


@pytest.fixture
def server(serve, gqa_model_dir) -> Served:
    return serve(gqa_model_dir)


@pytest.fixture(scope="session")
def long_model_dir(tmp_path_factory):
    """A GQA model with a 4096-token context whose greedy reply to "hello there" runs past
    4000 tokens without an end-of-sequence token (seed 1)."""
    from tests.fixtures.tiny_models import build_gqa_model

    return build_gqa_model(tmp_path_factory.mktemp("long_model"), context_length=4096, seed=1)
