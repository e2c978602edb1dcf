"""Tools for the model (plain Python, no Qt): MCP servers the user added, offered to a chat
through the turn layer's ``Toolbox`` protocol (app/chat/turn.py).

- ``spec``: a ``Tool`` (server, name, description, JSON schema) and its OpenAI form;
- ``config``: the servers the user added (``mcp-servers.json``; header and environment values
  in the secret store) and import from the ``mcpServers`` JSON of Claude Desktop / LM Studio;
- ``loop``: the one asyncio loop, on a thread of its own, that the MCP SDK runs on;
- ``connection``: one live server (stdio child process or streamable HTTP), with bounded
  timeouts; ``results``: a call's result as bounded text;
- ``toolbox``: ``McpToolbox``, the turn layer's toolbox over those servers;
- ``consent``: Allow once / Always allow this tool / Deny, "always" kept on disk;
- ``selection``: which servers and tools each chat has switched on;
- ``cli``: ``hearth mcp …`` and ``--tools`` / ``--yes`` on ``chat`` and ``generate``.
"""
