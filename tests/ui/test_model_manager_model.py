"""The model manager's table models: the Hub results' "Runs here" column on real searches."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.models.hub import HubClient
from app.ui.model_manager_model import HubResultsModel
from tests.models.hub_server import FakeHub, FakeRepo, allow_hub_requests


@pytest.fixture()
def found(monkeypatch):
    allow_hub_requests(monkeypatch)
    with FakeHub() as hub:
        files = {"config.json": b"{}", "tokenizer.json": b"{}"}
        hub.add(FakeRepo("org/ok-1B", {**files, "onnx/model_q4.onnx": b"x"}, downloads=3))
        hub.add(FakeRepo("org/huge-70B", {**files, "onnx/model_q4.onnx": b"x"}, downloads=2))
        hub.add(FakeRepo("org/gated-1B", {**files, "onnx/model_q4.onnx": b"x"}, downloads=1,
                         gated_token="hf_x"))
        yield HubClient(hub.url, retries=0).search("", ram_bytes=8_000_000_000)


def test_hub_results_say_whether_each_runs_here(qtmodeltester, found):
    model = HubResultsModel()
    model.set_rows(found)
    qtmodeltester.check(model, force_py=True)
    column = [m.title for m in model.columns].index("Runs here")
    assert model.headerData(column, Qt.Orientation.Horizontal) == "Runs here"
    runs = {model.index(r, 0).data(): model.index(r, column).data() for r in range(3)}
    assert runs["org/ok-1B"] == "Yes"
    assert runs["org/gated-1B"] == "Yes (gated: accept the licence first)"
    assert runs["org/huge-70B"].startswith("No: too big for this machine: about 70.0B")
    tooltip = model.index(1, column).data(Qt.ItemDataRole.ToolTipRole)
    assert tooltip == runs["org/huge-70B"]
