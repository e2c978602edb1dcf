"""McpToolbox over real MCP servers on stdio: PyPI's mcp-server-time and mcp-server-git,
and the misbehaving servers of tests/tools/servers (crash mid-call, hang, huge output,
junk). Every failure is a sentence in an error result; no child process outlives a close."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time

import psutil
import pytest

from app.chat.parts import ToolCall
from app.tools.config import ServerConfig
from app.tools.toolbox import McpToolbox
from tests.tools.conftest import (
    PYTHON,
    SERVERS,
    flaky_server,
    git_server,
    junk_server,
    time_server,
)


@pytest.fixture(scope="module")
def shared():
    """One toolbox over the time, git and flaky servers for the tests that leave them be."""
    toolbox = McpToolbox([time_server(), git_server(), flaky_server()])
    yield toolbox
    toolbox.close()


def call(toolbox, name, **arguments) -> object:
    return toolbox.call(ToolCall("call_1", name, json.dumps(arguments)))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_real_servers_tools_are_listed_with_their_schemas(shared):
    names = {t.exposed for t in shared.tools()}
    assert {"get_current_time", "convert_time", "git_status", "git_log"} <= names
    assert shared.problems == {}
    spec = next(s for s in shared.specs() if s["function"]["name"] == "get_current_time")
    assert spec["type"] == "function"
    assert spec["function"]["parameters"]["required"] == ["timezone"]
    assert "timezone" in spec["function"]["description"].lower()
    assert {t.server for t in shared.tools_of("git")} == {"git"}


def test_get_current_time_answers_from_the_real_time_server(shared):
    result = call(shared, "get_current_time", timezone="Europe/Paris")
    assert not result.is_error
    assert result.call_id == "call_1" and result.name == "get_current_time"
    answer = json.loads(result.content)
    assert answer["timezone"] == "Europe/Paris"
    assert answer["datetime"][:4].isdigit()


def test_a_tools_own_error_is_an_error_result(shared):
    result = call(shared, "get_current_time", timezone="Nowhere/Atlantis")
    assert result.is_error
    assert "Nowhere/Atlantis" in result.content


def test_git_status_of_a_fresh_repository(shared, git_repo):
    result = call(shared, "git_status", repo_path=str(git_repo))
    assert not result.is_error, result.content
    assert "new-notes.txt" in result.content  # untracked
    assert "kept.txt" not in result.content  # committed, unchanged


def test_a_huge_result_is_cut_with_a_note(shared):
    result = call(shared, "huge", size=1_000_000)
    assert not result.is_error
    assert len(result.content) < 16_200
    assert result.content.startswith("x" * 16_000)
    assert "1,000,000 characters" in result.content
    assert "first 16,000" in result.content


def test_an_unknown_tool_and_bad_arguments_are_sentences(shared):
    unknown = shared.call(ToolCall("c", "launch_rockets", "{}"))
    assert unknown.is_error and "no tool named launch_rockets" in unknown.content
    broken = shared.call(ToolCall("c", "get_current_time", "{not json"))
    assert broken.is_error and "not JSON" in broken.content


def test_a_server_that_crashes_mid_call_is_a_sentence_and_starts_again():
    with McpToolbox([flaky_server()]) as toolbox:
        first = int(call(toolbox, "pid").content)
        result = call(toolbox, "crash")
        assert result.is_error
        assert "“flaky” stopped while running crash" in result.content
        assert "about to crash" in result.content  # its last words, from its stderr
        assert not alive(first)
        again = call(toolbox, "echo", text="still here")
        assert (again.is_error, again.content) == (False, "still here")
        assert int(call(toolbox, "pid").content) != first


def test_a_server_that_hangs_is_stopped_after_its_timeout():
    with McpToolbox([flaky_server(timeout=1.0)]) as toolbox:
        pid = int(call(toolbox, "pid").content)
        started = time.monotonic()
        result = call(toolbox, "hang")
        assert result.is_error
        assert "did not answer the call to hang within 1 s" in result.content
        assert time.monotonic() - started < 30  # the promise: bounded, not forever
        assert not alive(pid)
        assert call(toolbox, "echo", text="back").content == "back"


def test_a_server_that_answers_junk_is_a_sentence():
    with McpToolbox([junk_server()]) as toolbox:
        assert [t.exposed for t in toolbox.tools()] == ["junk"]
        result = call(toolbox, "junk")
        assert result.is_error
        assert "“junk” sent an answer Hearth cannot read" in result.content


def test_servers_that_do_not_start_are_named_and_the_others_work():
    # the working one is the hand-written server: plain Python starts well within the bound
    servers = [junk_server(), flaky_server("stuck", "--hang-at-start"),
               ServerConfig("missing", "stdio", command="/no/such/mcp-server")]
    with McpToolbox(servers, connect_timeout_s=4) as toolbox:
        assert {t.server for t in toolbox.tools()} == {"junk"}, toolbox.problems
        assert set(toolbox.problems) == {"stuck", "missing"}
        assert "“stuck” did not finish starting within 4 s" in toolbox.problems["stuck"]
        assert "“/no/such/mcp-server” was not found" in toolbox.problems["missing"]


def test_two_servers_with_one_tool_name_are_told_apart():
    with McpToolbox([flaky_server("a"), flaky_server("b")]) as toolbox:
        names = {t.exposed for t in toolbox.tools()}
        assert {"a__echo", "b__echo"} <= names and "echo" not in names
        assert call(toolbox, "b__echo", text="from b").content == "from b"


def test_close_leaves_no_child_process():
    before = {c.pid for c in psutil.Process().children(recursive=True)}  # other tests' servers
    toolbox = McpToolbox([time_server(), flaky_server()])
    pid = int(call(toolbox, "pid").content)
    children = [c for c in psutil.Process().children(recursive=True) if c.pid not in before]
    assert len(children) == 2 and pid in {c.pid for c in children}
    toolbox.close()
    assert not alive(pid)
    assert not any(alive(c.pid) for c in children)
    toolbox.close()  # twice is fine


QUITTER = textwrap.dedent("""
    import json, sys, threading
    from app.chat.parts import ToolCall
    from app.tools.config import ServerConfig
    from app.tools.toolbox import McpToolbox
    box = McpToolbox([ServerConfig("flaky", "stdio", command=sys.executable,
                                   args=(sys.argv[1],))])
    print(box.call(ToolCall("1", "pid", "{}")).content, flush=True)
    threading.Thread(target=box.call, args=(ToolCall("2", "hang", "{}"),), daemon=True).start()
    sys.exit(0)  # quit in the middle of a call, without closing the toolbox
""")


def test_quitting_in_the_middle_of_a_call_exits_and_stops_the_server(tmp_path):
    script = tmp_path / "quit.py"
    script.write_text(QUITTER, encoding="utf-8")
    done = subprocess.run([PYTHON, str(script), str(SERVERS / "flaky_server.py")],
                          capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(SERVERS.parents[2]), "PATH": ""})
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    assert not alive(pid)
    assert "Traceback" not in done.stderr

