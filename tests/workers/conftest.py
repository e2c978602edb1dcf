"""Worker test fixtures: a running WorkerHost with a fake engine loader, shut down after."""

from __future__ import annotations

import pytest

from app.workers.generation_worker import WorkerHost
from tests.workers.fake_engine import FakeLoader


@pytest.fixture
def loader() -> FakeLoader:
    return FakeLoader()


@pytest.fixture
def host(qtbot, loader):
    h = WorkerHost(loader)
    yield h
    assert h.shutdown(5000)


class Recorder:
    """Records host result signals in arrival order."""

    def __init__(self, host: WorkerHost) -> None:
        self.events: list[tuple] = []
        host.loaded.connect(lambda info: self.events.append(("loaded", info.name)))
        host.load_failed.connect(lambda msg: self.events.append(("load_failed", msg)))
        host.chunk.connect(lambda conv, text: self.events.append(("chunk", conv, text)))
        host.finished.connect(lambda conv, res: self.events.append(("finished", conv, res)))
        host.failed.connect(lambda conv, msg: self.events.append(("failed", conv, msg)))
        host.crashed.connect(lambda details: self.events.append(("crashed", details)))

    def kinds(self) -> list[str]:
        return [e[0] for e in self.events]


@pytest.fixture
def recorder(host) -> Recorder:
    return Recorder(host)
