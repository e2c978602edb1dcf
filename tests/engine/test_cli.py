"""The ``generate`` and ``chat`` commands: the contract benchmarks and checks rely on."""

from __future__ import annotations

import io
import json

from app.cli import main

STATS_KEYS = {"prompt_tokens", "generated_tokens", "ttft_ms", "decode_tok_s", "provider"}


def test_generate_json_contract(plain_model_dir, capsys):
    code = main(["generate", str(plain_model_dir), "--prompt", "The keeper", "--json",
                 "--temperature", "0", "--max-new-tokens", "7"])
    assert code == 0
    record = json.loads(capsys.readouterr().out)
    assert set(record) >= {"tokens", "text", "finish_reason", "stats"}
    assert set(record["stats"]) >= STATS_KEYS
    assert record["finish_reason"] in ("eos", "max_tokens")
    assert 0 < len(record["tokens"]) <= 7
    assert record["stats"]["generated_tokens"] == len(record["tokens"])
    assert record["stats"]["provider"] == "cpu"


def test_generate_prompt_tokens_and_chat_agree(plain_model_dir, capsys):
    args = ["generate", str(plain_model_dir), "--json", "--temperature", "0",
            "--max-new-tokens", "6"]
    main([*args, "--prompt", "Hello there", "--chat"])
    via_chat = json.loads(capsys.readouterr().out)
    from app.engine.engine import Engine
    from app.engine.types import Message

    ids = Engine.load(plain_model_dir).encode_chat([Message("user", "Hello there")])
    main([*args, "--prompt-tokens", ",".join(map(str, ids))])
    via_ids = json.loads(capsys.readouterr().out)
    assert via_ids["tokens"] == via_chat["tokens"]
    assert via_ids["stats"]["prompt_tokens"] == len(ids)


def test_generate_seeded_sampling_is_reproducible(gqa_model_dir, capsys):
    args = ["generate", str(gqa_model_dir), "--prompt", "Ships", "--json", "--seed", "5",
            "--temperature", "1.0", "--top-k", "50", "--top-p", "0.9", "--min-p", "0.01",
            "--repetition-penalty", "1.1", "--max-new-tokens", "10"]
    main(args)
    first = json.loads(capsys.readouterr().out)
    main(args)
    second = json.loads(capsys.readouterr().out)
    assert first["tokens"] == second["tokens"]


def test_chat_script_reuses_the_cache_and_no_cache_gives_the_same_tokens(
        gqa_model_dir, tmp_path, capsys):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({
        "system": "Be brief.", "turns": ["Hello!", "Tell me more.", "Thanks."],
        "max_new_tokens": 8, "temperature": 0,
    }))
    main(["chat", str(gqa_model_dir), "--script", str(script), "--json"])
    cached = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    main(["chat", str(gqa_model_dir), "--script", str(script), "--json", "--no-cache"])
    uncached = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["turn"] for r in cached] == [1, 2, 3]
    assert [r["tokens"] for r in cached] == [r["tokens"] for r in uncached]
    for record in cached[1:]:
        stats = record["stats"]
        assert stats["reused_tokens"] > 0
        assert stats["reused_tokens"] + stats["prefilled_tokens"] == stats["prompt_tokens"]
    assert all(r["stats"]["reused_tokens"] == 0 for r in uncached)


def test_interactive_chat_commands(plain_model_dir, monkeypatch, capsys):
    lines = "/system Be brief.\nHello!\n/stats\nHow are you?\n/reset\n/quit\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["chat", str(plain_model_dir), "--temperature", "0",
                 "--max-new-tokens", "5"]) == 0
    err = capsys.readouterr().err
    assert "system prompt set" in err
    assert "conversation cleared" in err
    # One summary line per reply and one for /stats.
    assert err.count("prompt tokens") == 3
    assert "reused" in err and "CPU" in err


def test_bad_model_folder_is_a_clear_error(tmp_path, capsys):
    code = main(["generate", str(tmp_path / "missing"), "--prompt", "hi"])
    assert code == 2
    err = capsys.readouterr().err
    assert "missing" in err and "Traceback" not in err


def test_a_greedy_model_config_is_greedy_unless_a_flag_says_otherwise(plain_model_dir, capsys):
    # plain_model_dir's generation_config.json says do_sample: false.
    base = ["generate", str(plain_model_dir), "--prompt", "The keeper", "--json",
            "--max-new-tokens", "12"]
    runs = {}
    for name, extra in {"seed 1": ["--seed", "1"], "seed 2": ["--seed", "2"],
                        "greedy flag": ["--temperature", "0"],
                        "hot 1": ["--temperature", "1.5", "--seed", "1"],
                        "hot 2": ["--temperature", "1.5", "--seed", "2"]}.items():
        main([*base, *extra])
        runs[name] = json.loads(capsys.readouterr().out)["tokens"]
    assert runs["seed 1"] == runs["seed 2"] == runs["greedy flag"]
    assert runs["hot 1"] != runs["hot 2"]  # a temperature flag does sample
