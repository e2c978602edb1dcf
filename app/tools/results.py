"""An MCP tool result as the text the model reads, size-bounded.

Text blocks are joined; images, audio and binary resources are named, not inlined (a model
reading base64 learns nothing and fills its context); structured content stands in when
there are no blocks. Past ``limit`` characters the text is cut and a note says so."""

from __future__ import annotations

import json
from typing import Any

DEFAULT_RESULT_LIMIT = 16_000  # characters the model reads of one result


def bounded(text: str, limit: int = DEFAULT_RESULT_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, with a note of what was left out."""
    if len(text) <= limit:
        return text
    return (text[:limit] + f"\n[Hearth cut this result: it had {len(text):,} characters; "
            f"the first {limit:,} are shown.]")


def result_text(result: Any, limit: int = DEFAULT_RESULT_LIMIT) -> str:
    """The text of a ``CallToolResult`` (mcp_types), bounded."""
    pieces: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            pieces.append(str(block.text))
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "") or "") * 3 // 4
            pieces.append(f"[{kind} ({block.mime_type}, about {size:,} bytes): not shown to "
                          "the model]")
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            pieces.append(str(text) if text is not None
                          else f"[binary resource {resource.uri}: not shown to the model]")
        elif kind == "resource_link":
            pieces.append(f"[resource {block.uri}" + (f": {block.name}]" if block.name else "]"))
        else:
            pieces.append(f"[a {kind or 'nameless'} block Hearth does not read]")
    if not pieces:
        structured = getattr(result, "structured_content", None)
        if structured is not None:
            pieces.append(json.dumps(structured, ensure_ascii=False))
    return bounded("\n".join(pieces), limit)
