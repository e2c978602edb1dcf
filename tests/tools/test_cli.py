"""``hearth mcp list|add|rm|import`` and ``generate`` / ``chat`` with ``--tools`` and
``--yes``, through app.cli.main; the model is a scripted backend (a random-weight model
does not ask for tools), the server the real mcp-server-time."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from app import cli
from app.engine.types import ParsedToolCall
from app.tools import cli as tools_cli
from tests.chat.test_turn import Scripted
from tests.tools.conftest import PYTHON, SERVERS

TIME_ARGS = ["--", PYTHON, "-m", "mcp_server_time", "--local-timezone", "UTC"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_and_remove_servers(capsys, hearth_home):
    assert run(capsys, "mcp", "add", "time", *TIME_ARGS)[0] == 0
    code, out, _ = run(capsys, "mcp", "add", "web", "--url", "https://mcp.example.com/mcp",
                       "--header", "Authorization=Bearer X")
    assert (code, out.strip()) == (0, "Added the MCP server “web” (http "
                                      "https://mcp.example.com/mcp).")
    code, out, _ = run(capsys, "--offline", "mcp", "list", "--json")
    servers = {s["name"]: s for s in json.loads(out)["servers"]}
    assert code == 0
    assert {t["name"] for t in servers["time"]["tools"]} == {"get_current_time", "convert_time"}
    assert servers["time"]["problem"] is None
    assert servers["web"]["headers"] == ["Authorization"]
    assert servers["web"]["problem"].startswith("Offline mode is on")

    code, out, _ = run(capsys, "mcp", "list", "--no-connect")
    assert "time: stdio" in out and "web: http https://mcp.example.com/mcp" in out
    assert run(capsys, "mcp", "rm", "web")[0] == 0
    code, _, err = run(capsys, "mcp", "rm", "web")
    assert code == 2 and "There is no MCP server named “web”" in err


def test_add_refuses_both_a_command_and_a_url(capsys):
    code, _, err = run(capsys, "mcp", "add", "x", "--url", "https://e.example/mcp", "--", "cmd")
    assert code == 2 and "either a command" in err
    code, _, err = run(capsys, "mcp", "add", "x", "--env", "A=1")
    assert code == 2 and "either a command" in err


def test_options_may_stand_between_the_name_and_the_command(capsys, hearth_home):
    code, _, err = run(capsys, "mcp", "add", "t", "--env", "TZ_TOKEN=abc", "--timeout", "5",
                       "--", PYTHON, "-m", "mcp_server_time", "--local-timezone", "UTC")
    assert code == 0, err
    from app.tools.config import ServerStore

    server = ServerStore().get("t")
    assert server.args == ("-m", "mcp_server_time", "--local-timezone", "UTC")
    assert (server.env, server.call_timeout_s) == ({"TZ_TOKEN": "abc"}, 5.0)


def test_import_a_claude_desktop_file(capsys, tmp_path):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {
        "time": {"command": PYTHON, "args": ["-m", "mcp_server_time"]},
        "old": {"type": "sse", "url": "https://e.example/sse"}}}), encoding="utf-8")
    code, out, _ = run(capsys, "mcp", "import", str(source))
    assert code == 0
    assert "Added “time”." in out and "Skipped: The MCP server “old” uses the old SSE" in out


class ScriptedModel(Scripted):
    spec = SimpleNamespace(generation_defaults={})


@pytest.fixture
def model(monkeypatch):
    backend = ScriptedModel([
        ("", [ParsedToolCall("", "get_current_time", '{"timezone": "Asia/Tokyo"}')]),
        ("It is evening in Tokyo.", [])])
    monkeypatch.setattr(tools_cli, "_load_backend", lambda args: backend)
    return backend


def test_generate_with_tools_and_yes_puts_the_calls_and_results_in_its_json(
        capsys, tmp_path, model):
    run(capsys, "mcp", "add", "time", *TIME_ARGS)
    code, out, err = run(capsys, "generate", str(tmp_path), "--prompt", "Time in Tokyo?",
                         "--tools", "time", "--yes", "--json")
    assert code == 0, err
    record = json.loads(out)
    assert record["text"] == "It is evening in Tokyo."
    assert (record["finish_reason"], record["rounds"]) == ("eos", 2)
    [call] = record["tool_calls"]
    assert (call["name"], call["arguments"], call["is_error"]) == (
        "get_current_time", '{"timezone": "Asia/Tokyo"}', False)
    assert json.loads(call["result"])["timezone"] == "Asia/Tokyo"
    assert call["duration_ms"] >= 0
    assert "prompt_tokens" in record["stats"]
    assert model.seen[1][-1].role == "tool"


def test_without_yes_and_without_a_terminal_calls_are_denied(capsys, tmp_path, model,
                                                             monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    run(capsys, "mcp", "add", "time", *TIME_ARGS)
    code, out, err = run(capsys, "generate", str(tmp_path), "--prompt", "Time in Tokyo?",
                         "--tools", "time", "--json")
    assert code == 0
    [call] = json.loads(out)["tool_calls"]
    assert call["is_error"] and call["result"] == "The user did not allow this call."
    assert "no terminal to ask on (use --yes)" in err


def test_chat_script_with_tools_gives_one_record_per_turn(capsys, tmp_path, model):
    run(capsys, "mcp", "add", "flaky", "--", PYTHON, str(SERVERS / "flaky_server.py"))
    model.rounds = [("", [ParsedToolCall("", "echo", '{"text": "one"}')]), ("Done.", [])]
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": ["first", "second"]}), encoding="utf-8")
    code, out, err = run(capsys, "chat", str(tmp_path), "--script", str(script),
                         "--tools", "flaky", "--yes", "--json")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["turn"] for r in records] == [1, 2]
    assert records[0]["tool_calls"][0]["result"] == "one"


def test_an_unknown_server_is_a_sentence(capsys, tmp_path, model):
    code, _, err = run(capsys, "generate", str(tmp_path), "--prompt", "hi", "--tools", "nope",
                       "--yes")
    assert code == 2 and "There is no MCP server named “nope” (added: none yet)" in err
