"""One rule for lone surrogates: U+FFFD, everywhere text crosses a boundary."""

from __future__ import annotations

import json

from app.cli import main
from app.text import clean_text, clean_value


def test_lone_surrogates_become_replacement_characters():
    assert clean_text("a\ud800b") == "a\ufffdb"
    assert clean_text("\udcff") == "\ufffd"  # an undecodable terminal byte
    assert clean_text("\ude00\ud83d") == "\ufffd\ufffd"  # a pair in the wrong order
    assert clean_text("\ud83d\ude00") == "\U0001f600"  # a well-formed pair is joined
    text = "plain text, ünïcödé and 😀"
    assert clean_text(text) is text
    assert clean_text("x\ud800").encode("utf-8") == "x\ufffd".encode()


def test_clean_value_walks_json_like_values():
    value = {"k\ud800": ["v\udc00", 3, None, {"n": "\ud800"}], "ok": 1.5}
    assert clean_value(value) == {"k\ufffd": ["v\ufffd", 3, None, {"n": "\ufffd"}], "ok": 1.5}


def test_cli_prompt_with_a_lone_surrogate_generates(plain_model_dir, capsys):
    code = main(["generate", str(plain_model_dir), "--prompt", "The keeper \udcff", "--chat",
                 "--system", "Be \ud800 brief", "--json", "--temperature", "0",
                 "--max-new-tokens", "4"])
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert 0 < record["stats"]["generated_tokens"] <= 4
    clean = main(["generate", str(plain_model_dir), "--prompt", "The keeper \ufffd", "--chat",
                  "--system", "Be \ufffd brief", "--json", "--temperature", "0",
                  "--max-new-tokens", "4"])
    assert clean == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == record["tokens"]


def test_cli_chat_script_with_a_lone_surrogate_runs(plain_model_dir, tmp_path, capsys):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"system": "S \ud800", "turns": ["Hi \udfff", "More"],
                                  "max_new_tokens": 3, "temperature": 0}))
    assert "\\ud800" in script.read_text()  # the file holds the escape, as exports do
    assert main(["chat", str(plain_model_dir), "--script", str(script), "--json"]) == 0
    turns = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [t["turn"] for t in turns] == [1, 2]


def test_cli_chat_script_with_a_non_text_turn_is_a_sentence(plain_model_dir, tmp_path, capsys):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"turns": ["Hi", 5]}))
    assert main(["chat", str(plain_model_dir), "--script", str(script)]) != 0
    assert f"Cannot read the chat script {script}" in capsys.readouterr().err
