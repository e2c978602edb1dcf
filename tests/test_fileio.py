import json

import pytest

from app import fileio


def test_write_then_read_round_trips(tmp_path):
    target = tmp_path / "a.json"
    fileio.write_json_atomic(target, {"name": "é"}, ensure_ascii=False)
    assert fileio.read_json(target) == {"name": "é"}
    assert "é" in target.read_text(encoding="utf-8")


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "a.json"
    fileio.write_json_atomic(target, {"old": 1})
    with pytest.raises(TypeError):
        fileio.write_json_atomic(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"old": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_unreadable_or_non_object_json_reads_as_empty(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    assert fileio.read_json(tmp_path / "broken.json") == {}
    assert fileio.read_json(tmp_path / "list.json") == {}
    assert fileio.read_json(tmp_path / "missing.json") == {}
    (tmp_path / "deep.json").write_text("[" * 100_000)  # RecursionError in json, not ValueError
    assert fileio.read_json(tmp_path / "deep.json") == {}
