"""``hearth docs``: add, list, search --json, rm, through the real command line parser."""

from __future__ import annotations

import json

from app.cli import main


def test_add_search_list_and_rm(installed_embedder, tmp_path, capsys):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text("# Tea\n\n## Green\n\nBrew green tea at 80 degrees.\n")
    (folder / "bad.txt").write_bytes(b"\0\1\2" * 100)
    assert main(["docs", "add", str(folder), "--collection", "kitchen", "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["indexed"] == [str(folder / "tea.md")] and report["chunks"] == 1
    assert "hearth: bad.txt looks like a binary file" in err

    assert main(["docs", "search", "green tea temperature", "--collection", "kitchen",
                 "--top", "1", "--json"]) == 0
    passages = json.loads(capsys.readouterr().out)
    assert passages == [{"file": str(folder / "tea.md"), "page": None,
                         "heading": "Tea › Green", "text": "Brew green tea at 80 degrees.",
                         "score": passages[0]["score"]}]
    assert passages[0]["score"] > 0

    assert main(["docs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"name": "kitchen", "files": 1, "chunks": 1, "roots": [str(folder)]}]
    assert main(["docs", "rm", "kitchen"]) == 0
    assert capsys.readouterr().out == "kitchen: 1 files removed\n"
    assert main(["docs", "search", "tea", "--collection", "kitchen"]) == 2
    assert "no document collection named 'kitchen'" in capsys.readouterr().err
