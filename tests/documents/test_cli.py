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


def test_add_with_a_hub_embedder_downloads_it_and_list_shows_each_librarys_embedder(
        installed_embedder, tmp_path, capsys, monkeypatch):
    from app.models.embedder_catalog import load_embedder_catalog
    from app.settings import Settings
    from tests.documents.embedder_replicas import load_replicas, replica_repo
    from tests.models.hub_server import FakeHub, allow_hub_requests

    allow_hub_requests(monkeypatch)
    entry = load_embedder_catalog().get("nomic-embed-text-v1.5")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "tea.md").write_text("# Tea\n\n## Green\n\nBrew green tea at 80 degrees.\n")
    with FakeHub() as hub:
        hub.add(replica_repo(load_replicas()[entry.repo], entry.dims))
        settings = Settings()
        settings.set("hub_endpoint", hub.url)
        settings.save()
        assert main(["docs", "embedders", "--json"]) == 0
        listed = {c["id"]: c for c in json.loads(capsys.readouterr().out)}
        assert listed[entry.id]["installed"] is False
        assert listed[entry.id]["query_prefix"] == "search_query: "
        assert main(["docs", "add", str(folder), "--collection", "long",
                     "--embedder", entry.id]) == 0
        err = capsys.readouterr().err
        assert f"{entry.id} [" in err and "done" in err  # the download's progress bar
    assert main(["docs", "add", str(folder), "--collection", "short"]) == 0
    assert main(["docs", "list"]) == 0
    out = capsys.readouterr().out
    assert "long: 1 files, 1 chunks (embedder nomic-embed-text-v1.5)" in out
    assert "short: 1 files, 1 chunks (embedder all-minilm-l6-v2)" in out
    assert main(["docs", "search", "green tea", "--collection", "long", "--collection",
                 "short", "--json"]) == 0
    assert {p["file"] for p in json.loads(capsys.readouterr().out)} == {
        str(folder / "tea.md")}
    assert main(["docs", "add", str(folder), "--collection", "long", "--embedder",
                 "all-minilm-l6-v2"]) != 0
    assert "uses the embedder nomic-embed-text-v1.5" in capsys.readouterr().err
    assert main(["docs", "embedder", "long", "all-minilm-l6-v2"]) == 0
    assert "now embedded by all-minilm-l6-v2; 1 files indexed again" in \
        capsys.readouterr().out


def test_search_says_once_that_a_library_is_out_of_date_and_add_updates_it(
        installed_embedder, tmp_path, capsys):
    import sqlite3

    from app import paths

    _kitchen(tmp_path, capsys)
    folder = tmp_path / "notes"
    assert main(["docs", "search", "green tea", "--collection", "kitchen"]) == 0
    assert capsys.readouterr().err == ""  # up to date: nothing said
    db = sqlite3.connect(paths.documents_db_path())  # as an older chunking left it
    db.execute("UPDATE meta SET value = '1' WHERE key = 'chunking'")
    db.commit()
    db.close()
    assert main(["docs", "search", "green tea", "--collection", "kitchen", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)[0]["file"] == str(folder / "tea.md")  # still searched
    assert err == (f"hearth: the library 'kitchen' was indexed by an older version of Hearth "
                   f"(2 files); it is still searched, and hearth docs add {folder} "
                   f"--collection kitchen indexes it again.\n")
    assert main(["docs", "add", str(folder), "--collection", "kitchen", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["indexed"]) == 2 and report["unchanged"] == []
    assert main(["docs", "search", "green tea", "--collection", "kitchen"]) == 0
    assert capsys.readouterr().err == ""


def test_add_that_finds_nothing_fails_and_an_empty_query_is_refused(installed_embedder,
                                                                    tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["docs", "add", str(missing), "--collection", "typo"]) == 1
    assert f"hearth: {missing} does not exist" in capsys.readouterr().err
    _kitchen(tmp_path, capsys)
    assert main(["docs", "search", "  ", "--collection", "kitchen", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "hearth: the query is empty; say what to search for.\n"


def test_add_prints_the_first_problems_and_counts_the_rest(installed_embedder, tmp_path,
                                                           capsys):
    from app.documents.cli import PROBLEMS_SHOWN

    folder = tmp_path / "empty"
    folder.mkdir()
    for i in range(PROBLEMS_SHOWN + 5):
        (folder / f"e{i:02}.txt").write_text("")
    (folder / "real.md").write_text("# Real\n\nOne file with text.\n")
    assert main(["docs", "add", str(folder), "--collection", "e", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["problems"]) == PROBLEMS_SHOWN + 5
    lines = err.splitlines()
    assert lines[0] == "hearth: e00.txt has no text to index." and len(lines) == PROBLEMS_SHOWN + 1
    assert lines[-1] == "hearth: … and 5 more problems like these (they are all in the JSON)."
