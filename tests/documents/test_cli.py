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
        {"name": "kitchen", "files": 1, "chunks": 1, "embedder": "all-minilm-l6-v2",
         "roots": [str(folder)]}]
    assert main(["docs", "rm", "kitchen"]) == 0
    assert capsys.readouterr().out == "kitchen: 1 files removed\n"
    assert main(["docs", "search", "tea", "--collection", "kitchen"]) == 2
    assert "no document collection named 'kitchen'" in capsys.readouterr().err


def _kitchen(tmp_path, capsys) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text("# Tea\n\n## Green\n\nBrew green tea at 80 degrees.\n")
    (folder / "bread.txt").write_text("Bake the bread for forty minutes at 220 degrees.")
    assert main(["docs", "add", str(folder), "--collection", "kitchen"]) == 0
    capsys.readouterr()


def test_generate_with_docs_puts_the_sources_in_its_json(installed_embedder, gqa_model_dir,
                                                         tmp_path, capsys):
    _kitchen(tmp_path, capsys)
    assert main(["generate", str(gqa_model_dir), "--prompt", "How hot for green tea?",
                 "--max-new-tokens", "3", "--temperature", "0", "--docs", "kitchen",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    first = record["sources"][0]
    assert (first["document"], first["location"]) == ("tea.md", "Tea › Green")
    assert first["text"] == "Brew green tea at 80 degrees." and first["file"].endswith("tea.md")
    assert {s["document"] for s in record["sources"]} == {"tea.md", "bread.txt"}
    assert record["finish_reason"] == "max_tokens" and record["stats"] is not None


def test_chat_script_with_docs_gives_each_turn_its_sources(installed_embedder, gqa_model_dir,
                                                           tmp_path, capsys):
    _kitchen(tmp_path, capsys)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": ["How long does the loaf bake?",
                                            "And the tea?"]}))
    assert main(["chat", str(gqa_model_dir), "--script", str(script), "--max-new-tokens",
                 "2", "--temperature", "0", "--docs", "kitchen", "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [r["turn"] for r in records] == [1, 2]
    assert records[0]["sources"][0]["document"] == "bread.txt"
    assert records[1]["sources"][0]["document"] == "tea.md"


def test_an_unknown_collection_is_named_before_the_model_loads(installed_embedder, tmp_path,
                                                                capsys, gqa_model_dir,
                                                                monkeypatch):
    import app.engine.engine as engine_module

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the collection was checked")

    monkeypatch.setattr(engine_module.Engine, "load", classmethod(never))
    assert main(["generate", str(gqa_model_dir), "--prompt", "hi", "--docs",
                 "attic"]) != 0
    assert "no document collection named “attic” (collections: none yet)" in \
        capsys.readouterr().err
