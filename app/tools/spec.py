"""A tool as Hearth offers it to a model: which server has it, its name, what it does and
the JSON schema of its arguments."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
NAME_LIMIT = 64  # OpenAI's function names: ^[a-zA-Z0-9_-]{1,64}$


@dataclass(frozen=True)
class Tool:
    """One tool of one MCP server. ``name`` is the server's own; ``exposed`` is the name the
    model sees (the same unless two servers offer one name, or it has characters function
    names may not hold)."""

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    exposed: str = ""

    @property
    def key(self) -> str:
        """``server/name``: how consent and per-chat choices name this tool."""
        return f"{self.server}/{self.name}"

    def openai_spec(self) -> dict:
        """The tool as an OpenAI function schema (what templates and ``tools=`` take)."""
        schema = self.input_schema if isinstance(self.input_schema, dict) else {}
        if schema.get("type") != "object":
            schema = {"type": "object", "properties": {}}
        return {"type": "function", "function": {
            "name": self.exposed or self.name,
            "description": self.description,
            "parameters": schema,
        }}


def exposed_names(tools: list[Tool]) -> list[Tool]:
    """The tools with ``exposed`` set: the server's name where it is a valid function name
    and no other server has it; otherwise ``server__name`` (cleaned, cut to 64)."""
    counts: dict[str, int] = {}
    for tool in tools:
        counts[tool.name] = counts.get(tool.name, 0) + 1
    named: list[Tool] = []
    taken: set[str] = set()
    for tool in tools:
        name = tool.name
        if counts[name] > 1 or _UNSAFE.search(name) or len(name) > NAME_LIMIT:
            name = _UNSAFE.sub("_", f"{tool.server}__{tool.name}")[:NAME_LIMIT]
        base, n = name, 2
        while name in taken:
            suffix = f"_{n}"
            name, n = base[: NAME_LIMIT - len(suffix)] + suffix, n + 1
        taken.add(name)
        named.append(Tool(tool.server, tool.name, tool.description, tool.input_schema, name))
    return named
