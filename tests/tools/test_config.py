"""mcp-servers.json: servers added, imported from Claude Desktop's and LM Studio's
``mcpServers`` JSON, removed; env and header values in the secret store, never in the
file; per-chat choices."""

from __future__ import annotations

import json

import pytest

from app.errors import HearthError
from app.tools.config import SERVERS_NAME, ServerConfig, ServerStore, parse_mcp_servers
from app.tools.selection import ChatTools, ChatToolsStore
from app.tools.spec import Tool

CLAUDE_DESKTOP = {
    "globalShortcut": "",
    "mcpServers": {
        "time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone", "UTC"]},
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_SECRET1"}},
        "off": {"command": "x", "disabled": True},
    },
}
LM_STUDIO = {
    "mcpServers": {
        "docs": {"url": "https://mcp.example.com/mcp",
                 "headers": {"Authorization": "Bearer SECRET2"}},
        "old": {"type": "sse", "url": "https://mcp.example.com/sse"},
        "broken": {"args": ["no command"]},
        "bad name!": {"command": "x"},
    },
}


def test_import_from_claude_desktop_keeps_env_values_out_of_the_file(hearth_home, tmp_path):
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps(CLAUDE_DESKTOP), encoding="utf-8")
    store = ServerStore()
    done = store.import_file(source)
    assert done.added == ("time", "github")
    assert any("“off” is marked disabled" in s for s in done.skipped)
    text = (hearth_home / SERVERS_NAME).read_text(encoding="utf-8")
    assert "ghp_SECRET1" not in text
    assert "GITHUB_PERSONAL_ACCESS_TOKEN" in text  # the name is kept, the value is not
    github = store.get("github")
    assert github.env == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_SECRET1"}
    assert (github.command, github.args) == ("npx", ("-y", "@modelcontextprotocol/server-github"))
    assert store.get("time").describe() == "stdio uvx mcp-server-time --local-timezone UTC"

    again = store.import_file(source)  # names taken: left as they are
    assert again.added == ()
    assert any("“time” is already added" in s for s in again.skipped)


def test_import_from_lm_studio_http_headers_go_to_the_secret_store(hearth_home, tmp_path,
                                                                    memory_keyring):
    source = tmp_path / "mcp.json"
    source.write_text(json.dumps(LM_STUDIO), encoding="utf-8")
    store = ServerStore()
    done = store.import_file(source)
    assert done.added == ("docs",)
    skipped = " ".join(done.skipped)
    assert "“old” uses the old SSE transport" in skipped
    assert "“broken” has neither a command nor a URL" in skipped
    assert "“bad name!” cannot name an MCP server" in skipped
    assert "SECRET2" not in (hearth_home / SERVERS_NAME).read_text(encoding="utf-8")
    assert "Bearer SECRET2" in memory_keyring.secrets.values()
    docs = store.get("docs")
    assert (docs.transport, docs.url) == ("http", "https://mcp.example.com/mcp")
    assert docs.headers == {"Authorization": "Bearer SECRET2"}

    assert store.remove("docs")
    assert store.get("docs") is None
    assert "Bearer SECRET2" not in memory_keyring.secrets.values()
    assert not store.remove("docs")


def test_unreadable_imports_are_sentences(tmp_path):
    store = ServerStore()
    with pytest.raises(HearthError, match="Cannot read"):
        store.import_file(tmp_path / "nowhere.json")
    (tmp_path / "bad.json").write_text("{nope", encoding="utf-8")
    with pytest.raises(HearthError, match="is not JSON"):
        store.import_file(tmp_path / "bad.json")
    with pytest.raises(HearthError, match="has no “mcpServers” object"):
        parse_mcp_servers({"servers": []})


def test_a_name_is_added_once(hearth_home):
    store = ServerStore()
    store.add(ServerConfig("t", "stdio", command="a"))
    with pytest.raises(HearthError, match="already an MCP server named “t”"):
        store.add(ServerConfig("t", "stdio", command="b"))
    store.add(ServerConfig("t", "stdio", command="b"), replace_existing=True)
    assert [s.command for s in store.list()] == ["b"]


def test_a_hand_edited_file_keeps_its_good_rows(hearth_home):
    (hearth_home / SERVERS_NAME).write_text(json.dumps({"servers": [
        {"name": "ok", "transport": "stdio", "command": "x"},
        {"transport": "stdio"}, {"name": "weird", "transport": "carrier-pigeon"}]}))
    assert ServerStore().names() == ["ok"]


def test_each_chat_keeps_its_own_tools(hearth_home):
    store = ChatToolsStore()
    assert store.get("chat-1") == ChatTools()  # a chat starts with none
    echo = Tool("flaky", "echo")
    store.set("chat-1", ChatTools().with_server("time").with_server("flaky")
              .with_tool(echo, on=False))
    store.set("chat-2", ChatTools().with_server("flaky"))
    again = ChatToolsStore()
    one = again.get("chat-1")
    assert one.servers == {"time", "flaky"} and not one.allows(echo)
    assert one.allows(Tool("time", "get_current_time"))
    assert again.get("chat-2").allows(echo)
    again.forget_server("flaky")
    assert again.get("chat-1") == ChatTools(frozenset({"time"}))
    assert again.get("chat-2") == ChatTools()
    again.forget("chat-1")
    assert again.get("chat-1") == ChatTools()
