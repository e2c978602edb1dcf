"""The MCP servers the user added, kept in ``mcp-servers.json`` in the data folder.

A server is either **stdio** (a command Hearth starts, with its arguments, environment and
working folder) or **http** (a streamable-HTTP URL and headers). Nothing runs that is not
in this file, and only the user puts it there (``hearth mcp add`` / ``import``, Settings).

Environment and header *values* often hold tokens, so they live in the secret store
(app/secrets.py, service "Hearth MCP servers"); the file keeps only their names. The file
is written all-or-nothing (app/fileio.py).

``parse_mcp_servers`` reads the ``mcpServers`` JSON people already keep: Claude Desktop's
``claude_desktop_config.json`` and LM Studio's ``mcp.json`` share its shape::

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {...}},
                    "docs": {"url": "https://example.com/mcp", "headers": {...}}}}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from app.errors import HearthError
from app.fileio import read_json, write_json_atomic
from app.paths import data_root
from app.secrets import SecretStore

SERVERS_NAME = "mcp-servers.json"
SECRETS_SERVICE = "Hearth MCP servers"
SECRETS_FILE = "mcp-secrets-NOT-ENCRYPTED.json"
DEFAULT_CALL_TIMEOUT_S = 60.0
Transport = Literal["stdio", "http"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def server_secrets() -> SecretStore:
    return SecretStore(SECRETS_SERVICE, data_root() / SECRETS_FILE,
                       what="An MCP server's environment and header values")


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server. ``env`` and ``headers`` hold the values once read from the secret
    store (``ServerStore.get``); in the file only their names are kept."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S

    def describe(self) -> str:
        """One line: how it runs (values of env and headers left out)."""
        if self.transport == "http":
            return f"http {self.url}"
        return "stdio " + " ".join([self.command, *self.args])


def check_name(name: str) -> str:
    name = name.strip()
    if not _NAME.match(name):
        raise HearthError(f"“{name}” cannot name an MCP server.",
                          hint="Use letters, digits, '-', '_' or '.', at most 64.")
    return name


def server_from_entry(name: str, entry: Any) -> ServerConfig:
    """A server from one ``mcpServers`` entry; HearthError with a sentence when it is not one."""
    name = check_name(name)
    if not isinstance(entry, dict):
        raise HearthError(f"The MCP server “{name}” is not a JSON object.")
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    if kind == "sse":
        raise HearthError(f"The MCP server “{name}” uses the old SSE transport, which Hearth "
                          "does not speak.", hint="Use its streamable-HTTP URL instead.")
    if entry.get("url") or kind in {"http", "streamable-http", "streamable_http"}:
        url = str(entry.get("url") or "").strip()
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise HearthError(f"The MCP server “{name}” has no http(s) URL ({url!r}).")
        return ServerConfig(name, "http", url=url, headers=_strings(name, entry, "headers"),
                            call_timeout_s=_timeout(entry))
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise HearthError(f"The MCP server “{name}” has neither a command nor a URL.")
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise HearthError(f"The arguments of the MCP server “{name}” are not a list of text.")
    cwd = entry.get("cwd") or ""
    return ServerConfig(name, "stdio", command=command.strip(), args=tuple(str(a) for a in args),
                        env=_strings(name, entry, "env"), cwd=str(cwd),
                        call_timeout_s=_timeout(entry))


def _strings(name: str, entry: dict, key: str) -> dict[str, str]:
    value = entry.get(key) or {}
    if not isinstance(value, dict):
        raise HearthError(f"The {key} of the MCP server “{name}” is not a JSON object.")
    return {str(k): str(v) for k, v in value.items()}


def _timeout(entry: dict) -> float:
    value = entry.get("timeout") or entry.get("call_timeout_s")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        # Claude Desktop style configs give milliseconds when the number is large
        return float(value) / 1000 if value > 1000 else float(value)
    return DEFAULT_CALL_TIMEOUT_S


@dataclass(frozen=True)
class Imported:
    """What an import did: the servers added, and a sentence for each one it skipped."""

    added: tuple[str, ...]
    skipped: tuple[str, ...]


def parse_mcp_servers(data: Any, source: str = "the file") -> tuple[list[ServerConfig],
                                                                     list[str]]:
    """The servers of an ``mcpServers`` object (also accepted: LM Studio's top-level
    ``servers``), and a sentence for each entry that is not one."""
    if not isinstance(data, dict):
        raise HearthError(f"{source} is not a JSON object.")
    table = data.get("mcpServers", data.get("servers"))
    if not isinstance(table, dict):
        raise HearthError(f"{source} has no “mcpServers” object.",
                          hint='It must look like {"mcpServers": {"name": {"command": ...}}}.')
    servers, problems = [], []
    for name, entry in table.items():
        if isinstance(entry, dict) and entry.get("disabled") is True:
            problems.append(f"“{name}” is marked disabled in {source}; it was left out.")
            continue
        try:
            servers.append(server_from_entry(str(name), entry))
        except HearthError as exc:
            problems.append(str(exc))
    return servers, problems


class ServerStore:
    """Adds, lists and removes MCP servers; one JSON file, written atomically."""

    def __init__(self, path: Path | None = None, secrets: SecretStore | None = None) -> None:
        self.path = path or data_root() / SERVERS_NAME
        self.secrets = secrets or server_secrets()

    def list(self) -> list[ServerConfig]:
        """The servers as the file has them (env and header names, values not read)."""
        rows = read_json(self.path).get("servers")
        servers = []
        for row in rows if isinstance(rows, list) else []:
            try:
                servers.append(ServerConfig(
                    name=str(row["name"]), transport=row["transport"],
                    command=str(row.get("command") or ""),
                    args=tuple(str(a) for a in row.get("args") or ()),
                    env={str(k): "" for k in row.get("env") or ()},
                    cwd=str(row.get("cwd") or ""), url=str(row.get("url") or ""),
                    headers={str(k): "" for k in row.get("headers") or ()},
                    call_timeout_s=float(row.get("call_timeout_s") or DEFAULT_CALL_TIMEOUT_S)))
            except (KeyError, TypeError, ValueError):
                continue  # a hand-edited row that lost a field
        return [s for s in servers if s.transport in ("stdio", "http")]

    def names(self) -> list[str]:
        return [s.name for s in self.list()]

    def get(self, name: str) -> ServerConfig | None:
        """The server with its env and header values from the secret store."""
        server = next((s for s in self.list() if s.name == name), None)
        if server is None:
            return None
        env = {k: self.secrets.get(_secret(name, "env", k)) or "" for k in server.env}
        headers = {k: self.secrets.get(_secret(name, "header", k)) or ""
                   for k in server.headers}
        return replace(server, env=env, headers=headers)

    def add(self, server: ServerConfig, *, replace_existing: bool = False) -> ServerConfig:
        check_name(server.name)
        servers = self.list()
        if any(s.name == server.name for s in servers):
            if not replace_existing:
                raise HearthError(f"There is already an MCP server named “{server.name}”.",
                                  hint="Remove it first, or pick another name.")
            self.remove(server.name)
            servers = self.list()
        for key, value in server.env.items():
            self.secrets.set(_secret(server.name, "env", key), value)
        for key, value in server.headers.items():
            self.secrets.set(_secret(server.name, "header", key), value)
        self._write([*servers, server])
        return server

    def remove(self, name: str) -> bool:
        servers = self.list()
        gone = next((s for s in servers if s.name == name), None)
        if gone is None:
            return False
        self._write([s for s in servers if s.name != name])
        for key in gone.env:
            self.secrets.delete(_secret(name, "env", key))
        for key in gone.headers:
            self.secrets.delete(_secret(name, "header", key))
        return True

    def import_file(self, path: Path) -> Imported:
        """Add the servers of an ``mcpServers`` file; ones whose name is taken are skipped."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise HearthError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
        except ValueError as exc:
            raise HearthError(f"{path} is not JSON ({exc}).") from exc
        servers, skipped = parse_mcp_servers(data, str(path))
        added: list[str] = []
        taken = set(self.names())
        for server in servers:
            if server.name in taken:
                skipped.append(f"“{server.name}” is already added; it was left as it is.")
                continue
            self.add(server)
            taken.add(server.name)
            added.append(server.name)
        return Imported(tuple(added), tuple(skipped))

    def _write(self, servers: list[ServerConfig]) -> None:
        rows = []
        for s in servers:
            row: dict[str, Any] = {"name": s.name, "transport": s.transport}
            if s.transport == "stdio":
                row.update(command=s.command, args=list(s.args), env=sorted(s.env),
                           cwd=s.cwd)
            else:
                row.update(url=s.url, headers=sorted(s.headers))
            if s.call_timeout_s != DEFAULT_CALL_TIMEOUT_S:
                row["call_timeout_s"] = s.call_timeout_s
            rows.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"version": 1, "servers": rows}, ensure_ascii=False)


def _secret(server: str, kind: str, key: str) -> str:
    return f"{server}:{kind}:{key}"
