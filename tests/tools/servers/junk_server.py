"""An MCP server written by hand over stdio that answers the handshake and the listing
properly, then junk: ``tools/call`` gets a result of the wrong shape, after a line that is
not JSON at all."""

from __future__ import annotations

import json
import sys

TOOLS = [{"name": "junk", "description": "Answers junk.",
          "inputSchema": {"type": "object", "properties": {}}}]


def reply(message_id, result=None, error=None) -> None:
    body = {"jsonrpc": "2.0", "id": message_id}
    body.update({"error": error} if error else {"result": result})
    sys.stdout.write(json.dumps(body) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        message = json.loads(line)
    except ValueError:
        continue
    method, message_id = message.get("method"), message.get("id")
    if message_id is None:
        continue  # a notification
    if method == "initialize":
        reply(message_id, {"protocolVersion": message["params"]["protocolVersion"],
                           "capabilities": {"tools": {}},
                           "serverInfo": {"name": "junk", "version": "1"}})
    elif method == "tools/list":
        reply(message_id, {"tools": TOOLS})
    elif method == "tools/call":
        sys.stdout.write("this is not JSON\n")
        reply(message_id, {"content": "not a list of blocks", "isError": "perhaps"})
    else:
        reply(message_id, error={"code": -32601, "message": f"Method not found: {method}"})
