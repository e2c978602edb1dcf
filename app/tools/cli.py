"""Terminal commands for tools: ``hearth mcp list|add|rm|import`` and the ``--tools SERVER…``
and ``--yes`` flags of ``chat`` and ``generate``.

The engine's CLI (app/engine/cli.py) sits below the turn layer and cannot run a tool loop, so
this module (above it) adds the two flags to its ``chat`` and ``generate`` parsers and takes
over those commands when ``--tools`` is given: the reply then runs through
``app.chat.turn.run_turn`` with an ``McpToolbox``. Each call is asked about on the terminal
(Allow once / Always allow this tool / Deny) unless ``--yes`` approved them all; without a
terminal and without ``--yes`` calls are denied. With ``--json`` the record gains
``tool_calls``: each call's id, name, arguments, result, whether it failed and its duration.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.errors import HearthError
from app.tools.config import ServerConfig, ServerStore, check_name, server_from_entry
from app.tools.consent import AlwaysAllowed, ApprovalPolicy, Decision, allow_all
from app.tools.selection import ChatToolsStore
from app.tools.spec import Tool
from app.tools.toolbox import McpToolbox

TOOL_COMMANDS = ("chat", "generate")


def register(subparsers) -> None:
    mcp = subparsers.add_parser("mcp", help="MCP servers whose tools models may call")
    commands = mcp.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)

    listing = commands.add_parser("list", help="the servers and their tools")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.add_argument("--no-connect", action="store_true",
                         help="do not start the servers (their tools are then not listed)")
    listing.set_defaults(func=run_list)

    add = commands.add_parser(
        "add", help="add a server: NAME COMMAND [ARGS...] (stdio) or NAME --url URL (HTTP)")
    add.add_argument("name")
    add.add_argument("--url", help="a streamable-HTTP server's URL")
    add.add_argument("--header", action="append", default=[], metavar="NAME=VALUE",
                     help="an HTTP header (repeatable; its value goes to the keyring)")
    add.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="an environment variable (repeatable; its value goes to the keyring)")
    add.add_argument("--cwd", help="the working folder of a stdio server")
    add.add_argument("--timeout", type=float, help="seconds a call may take (default 60)")
    add.add_argument("--replace", action="store_true", help="replace a server of that name")
    add.add_argument("command", nargs=argparse.REMAINDER,
                     help="the command that starts a stdio server, and its arguments (the "
                          "options above may also stand between NAME and the command; put "
                          "-- before a command whose own options would clash)")
    add.set_defaults(func=run_add)

    remove = commands.add_parser("rm", help="remove a server")
    remove.add_argument("name")
    remove.set_defaults(func=run_rm)

    importing = commands.add_parser(
        "import", help="add the servers of an mcpServers JSON file (Claude Desktop's "
                       "claude_desktop_config.json, LM Studio's mcp.json)")
    importing.add_argument("file", type=Path)
    importing.set_defaults(func=run_import)

    for name in TOOL_COMMANDS:
        parser = subparsers.choices.get(name)
        if parser is not None:
            _add_tool_flags(parser)


def _add_tool_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tools", nargs="+", metavar="SERVER",
                        help="offer the tools of these MCP servers (hearth mcp list)")
    parser.add_argument("--yes", action="store_true",
                        help="with --tools: run every tool call without asking")
    plain = parser.get_default("func")
    parser.set_defaults(func=lambda args: run_with_tools(args) if args.tools else plain(args))


# -- hearth mcp ---------------------------------------------------------------------------


def run_list(args: argparse.Namespace) -> int:
    store = ServerStore()
    servers = [store.get(name) for name in store.names()]
    rows: list[dict[str, Any]] = []
    toolbox = None if args.no_connect or not servers else McpToolbox(
        [s for s in servers if s is not None])
    try:
        tools: list[Tool] = toolbox.tools() if toolbox else []
        for server in servers:
            assert server is not None
            row: dict[str, Any] = {"name": server.name, "transport": server.transport,
                                   "run": server.describe(), "env": sorted(server.env),
                                   "headers": sorted(server.headers)}
            if toolbox is not None:
                row["tools"] = [{"name": t.exposed, "server_name": t.name,
                                 "description": t.description, "parameters": t.input_schema}
                                for t in tools if t.server == server.name]
                row["problem"] = toolbox.problems.get(server.name)
            rows.append(row)
    finally:
        if toolbox is not None:
            toolbox.close()
    if args.json:
        print(json.dumps({"servers": rows}, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("No MCP servers yet. Add one with `hearth mcp add NAME COMMAND…` or "
              "`hearth mcp import FILE`.")
    for row in rows:
        print(f"{row['name']}: {row['run']}")
        if row.get("problem"):
            print(f"  ! {row['problem']}")
        for tool in row.get("tools", []):
            summary = (tool["description"] or "").strip().splitlines()
            print(f"  - {tool['name']}" + (f": {summary[0][:90]}" if summary else ""))
    return 0


def _pairs(values: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise HearthError(f"--{what} takes NAME=VALUE, not “{value}”.")
        pairs[key.strip()] = text
    return pairs


_ADD_OPTIONS = {"--url": "url", "--header": "header", "--env": "env", "--cwd": "cwd",
                "--timeout": "timeout", "--replace": None}


def _split_add_options(args: argparse.Namespace) -> list[str]:
    """Options written after NAME (argparse hands everything after it to ``command``) are
    taken off the front until the command starts, or a ``--``; the rest is the command."""
    rest = list(args.command or [])
    while rest and rest[0] in _ADD_OPTIONS:
        flag = rest.pop(0)
        key = _ADD_OPTIONS[flag]
        if key is None:
            args.replace = True
            continue
        if not rest:
            raise HearthError(f"{flag} needs a value.")
        value = rest.pop(0)
        if key in ("header", "env"):
            getattr(args, key).append(value)
        elif key == "timeout":
            try:
                args.timeout = float(value)
            except ValueError as exc:
                raise HearthError(f"--timeout takes seconds, not “{value}”.") from exc
        else:
            setattr(args, key, value)
    return rest[1:] if rest[:1] == ["--"] else rest


def run_add(args: argparse.Namespace) -> int:
    command = _split_add_options(args)
    if bool(args.url) == bool(command):
        raise HearthError("Give either a command (a stdio server) or --url (an HTTP server).",
                          hint="For example: hearth mcp add time uvx mcp-server-time")
    entry: dict[str, Any] = {"url": args.url, "headers": _pairs(args.header, "header")} \
        if args.url else {"command": command[0], "args": command[1:],
                          "env": _pairs(args.env, "env"), "cwd": args.cwd or ""}
    if args.timeout:
        entry["timeout"] = args.timeout
    server = server_from_entry(check_name(args.name), entry)
    ServerStore().add(server, replace_existing=args.replace)
    print(f"Added the MCP server “{server.name}” ({server.describe()}).")
    return 0


def run_rm(args: argparse.Namespace) -> int:
    if not ServerStore().remove(args.name):
        raise HearthError(f"There is no MCP server named “{args.name}”.",
                          hint="`hearth mcp list` shows them.")
    AlwaysAllowed().forget_server(args.name)
    ChatToolsStore().forget_server(args.name)
    print(f"Removed the MCP server “{args.name}”.")
    return 0


def run_import(args: argparse.Namespace) -> int:
    done = ServerStore().import_file(args.file)
    for name in done.added:
        print(f"Added “{name}”.")
    for sentence in done.skipped:
        print(f"Skipped: {sentence}")
    if not done.added and not done.skipped:
        print(f"{args.file} lists no MCP servers.")
    return 0


# -- chat / generate --tools ---------------------------------------------------------------


def toolbox_for(names: list[str], store: ServerStore | None = None) -> McpToolbox:
    store = store or ServerStore()
    servers: list[ServerConfig] = []
    for name in dict.fromkeys(names):
        server = store.get(name)
        if server is None:
            known = ", ".join(store.names()) or "none yet"
            raise HearthError(f"There is no MCP server named “{name}” (added: {known}).",
                              hint="Add it with `hearth mcp add` or `hearth mcp import`.")
        servers.append(server)
    return McpToolbox(servers)


def terminal_ask(call, tool: Tool) -> Decision:
    """Ask on the terminal; no terminal means no consent."""
    if not sys.stdin.isatty():
        print(f"[tool] {call.name} was denied: there is no terminal to ask on (use --yes).",
              file=sys.stderr)
        return Decision.DENY
    print(f"\n[tool] The model wants to run {tool.name} of “{tool.server}” with "
          f"{call.arguments}", file=sys.stderr)
    while True:
        print("Allow once [y], always allow this tool [a], deny [n]? ", end="",
              file=sys.stderr, flush=True)
        try:
            answer = input().strip().lower()
        except EOFError:
            return Decision.DENY
        if answer in ("y", "yes"):
            return Decision.ALLOW_ONCE
        if answer in ("a", "always"):
            return Decision.ALWAYS
        if answer in ("n", "no", ""):
            return Decision.DENY


def _load_backend(args: argparse.Namespace):
    from app.engine.cli import _load

    return _load(args)


def run_with_tools(args: argparse.Namespace, *, retriever: Any = None) -> int:
    """``chat`` / ``generate`` through ``run_turn``: with the tools of ``--tools`` and/or a
    ``retriever`` (app/documents/cli.py's ``--docs``); the JSON record then has ``sources``."""
    from app.engine.cli import _clean_text_args, _interrupt_sets, sampling_from_args

    _clean_text_args(args)
    if args.command == "generate" and args.prompt is None:
        flag = "--tools" if args.tools else "--docs"
        raise HearthError(f"{flag} needs --prompt: it works through the chat template, not "
                          "on raw token ids.")
    toolbox = toolbox_for(args.tools) if args.tools else None
    try:
        if toolbox is not None:
            toolbox.tools()  # start the servers now: a broken one is named before the load
            for problem in toolbox.problems.values():
                print(f"hearth: {problem}", file=sys.stderr)
        backend = _load_backend(args)
        settings = sampling_from_args(args, backend.spec.generation_defaults)
        approve: Callable | None = None if toolbox is None else allow_all if args.yes else \
            ApprovalPolicy(terminal_ask, toolbox.resolve)
        turns = ToolChat(backend, settings, toolbox, approve, system=args.system,
                         retriever=retriever)
        if args.command == "generate":
            with _interrupt_sets(turns.cancel):
                record = turns.send(args.prompt, echo=not args.json)
            _print_record(record, args.json)
            return 0
        if getattr(args, "script", None) is not None:
            script = _read_script(args.script)
            settings = sampling_from_args(args, backend.spec.generation_defaults, script)
            turns = ToolChat(backend, settings, toolbox, approve,
                             system=script.get("system") or args.system, retriever=retriever)
            for number, text in enumerate(script["turns"], start=1):
                _print_record({"turn": number, **turns.send(text, echo=False)}, args.json)
            return 0
        using = [f"tools of {', '.join(args.tools)}"] if args.tools else []
        using += [f"documents of {', '.join(args.docs)}"] if getattr(args, "docs", None) else []
        print(f"Chatting with {' and '.join(using)}. /quit ends.", file=sys.stderr)
        while True:
            try:
                line = input("> ").strip()
            except (EOFError, KeyboardInterrupt):
                print(file=sys.stderr)
                return 0
            if line in ("/quit", "/exit"):
                return 0
            if line:
                turns.cancel = threading.Event()
                with _interrupt_sets(turns.cancel):
                    record = turns.send(line, echo=True)
                print(file=sys.stderr)
                if args.json:
                    print(json.dumps(record, ensure_ascii=False))
    finally:
        if toolbox is not None:
            toolbox.close()


def _read_script(path: Path) -> dict:
    try:
        script = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(script.get("turns"), list):
            raise ValueError("no list of turns")
    except (OSError, ValueError, AttributeError) as exc:
        raise HearthError(f"Cannot read the chat script {path}: {exc}.",
                          hint='It must be JSON like {"system": "...", "turns": ["..."]}.') \
            from exc
    return script


def _print_record(record: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(record, ensure_ascii=False), flush=True)
        return
    print()
    if record.get("note"):
        print(f"({record['note']})", file=sys.stderr)


class ToolChat:
    """A conversation whose turns run through ``run_turn`` with a toolbox, a retriever, or
    both."""

    def __init__(self, backend, settings, toolbox: McpToolbox | None,
                 approve: Callable | None, system: str | None = None,
                 retriever: Any = None) -> None:
        from app.chat.parts import ChatMessage

        self.backend, self.settings = backend, settings
        self.toolbox, self.approve = toolbox, approve
        self.retriever = retriever
        self.messages: list = [ChatMessage.of("system", system)] if system else []
        self.cancel = threading.Event()

    def send(self, text: str, *, echo: bool) -> dict:
        """One user turn; returns its JSON record (text, finish, stats, tool calls, and the
        sources retrieval put in the prompt)."""
        from app.chat.events import (
            Finished,
            SourcesEvent,
            TextDelta,
            ToolCallEvent,
            ToolResultEvent,
        )
        from app.chat.parts import ChatMessage
        from app.chat.turn import TurnRequest, run_turn
        from app.engine.cli import stats_record

        request = TurnRequest((*self.messages, ChatMessage.of("user", text)), self.settings)
        calls: dict[str, dict] = {}
        started: dict[str, float] = {}
        finished: Finished | None = None
        sources: list[dict] = []
        for event in run_turn(self.backend, request, toolbox=self.toolbox,
                              approve=self.approve, cancel=self.cancel,
                              retriever=self.retriever):
            if isinstance(event, SourcesEvent):
                sources = [{"document": s.document, "file": s.path, "location": s.location,
                            "text": s.text, "score": s.score} for s in event.sources]
                if echo:
                    for n, s in enumerate(event.sources, start=1):
                        where = f", {s.location}" if s.location else ""
                        print(f"[source {n}] {s.document}{where}", file=sys.stderr)
            elif isinstance(event, TextDelta) and echo:
                sys.stdout.write(event.text)
                sys.stdout.flush()
            elif isinstance(event, ToolCallEvent):
                call = event.call
                calls[call.id] = {"id": call.id, "name": call.name,
                                  "arguments": call.arguments}
                started[call.id] = time.perf_counter()
                if echo:
                    print(f"\n[tool] {call.name}({call.arguments})", file=sys.stderr)
            elif isinstance(event, ToolResultEvent):
                result = event.result
                row = calls.setdefault(result.call_id, {"id": result.call_id,
                                                        "name": result.name})
                row.update(result=result.content, is_error=result.is_error,
                           duration_ms=round((time.perf_counter()
                                              - started.get(result.call_id,
                                                            time.perf_counter())) * 1000, 1))
                if echo:
                    head = result.content.strip().splitlines()[:1]
                    mark = "failed" if result.is_error else "→"
                    print(f"[tool] {result.name} {mark} {head[0][:200] if head else ''}",
                          file=sys.stderr)
            elif isinstance(event, Finished):
                finished = event
        assert finished is not None
        self.messages.extend(finished.turn)
        last = next((m for m in reversed(finished.turn) if m.role == "assistant"), None)
        return {
            "text": last.text if last is not None else "",
            "finish_reason": finished.finish_reason,
            "rounds": finished.rounds,
            "stats": stats_record(finished.stats[-1]) if finished.stats else None,
            "tool_calls": list(calls.values()),
            **({"sources": sources} if self.retriever is not None else {}),
            "note": finished.note,
        }
