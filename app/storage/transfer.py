"""Export a conversation to Markdown or JSON (with provenance); import JSON back.

JSON keeps every branch: each message has an export-local ``id``, its ``parent`` and whether
it is the ``active`` variant (format version 3, read by ``app.storage.importer`` with the
older ones); a reasoning model's thinking is its own field (``reasoning``, with
``reasoning_ms``), never part of ``content``; a message's other parts (attachments, sources,
tool calls, a ``tool`` message's result) are its ``parts``, each in its JSON form
(app/chat/parts.py), the document's ``parts_version`` saying which (``PARTS_VERSION``).
Markdown is for reading: it holds the chat as it is on screen, the active branch,
with each reply's thinking folded in a ``<details>`` block, each message's attached files
named under it ("Attached: manual.pdf"), and the passages a turn used as footnotes: the
turn's last reply ends with its references ("Sources: [^1] [^2]") and the definitions
(file · page or heading — the passage) close the document, numbered through the chat.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone

from app.chat.parts import PARTS_VERSION, Attachment, Source, ToolCall, ToolResult, part_to_dict
from app.storage.history import Conversation, History, StoredMessage
from app.storage.importer import BUNDLE_FORMAT, FORMAT, FORMAT_VERSION, import_text

__all__ = [
    "BUNDLE_FORMAT", "FORMAT", "FORMAT_VERSION", "export_all_json", "export_json",
    "export_markdown", "import_json", "provenance_line", "thought_summary", "to_json",
    "to_json_dict", "to_markdown",
]


def to_json_dict(conv: Conversation, messages: list[StoredMessage]) -> dict:
    """A self-contained, versioned JSON document for one conversation.

    ``messages`` is ``History.all_messages`` (every branch) or any part of a tree whose
    parents come before their children (``History.active_path`` gives one branch).
    """
    local: dict[int, int] = {}
    items = []
    for m in messages:
        local[m.id] = len(local) + 1
        item = {
            "id": local[m.id],
            "parent": local.get(m.parent_id) if m.parent_id is not None else None,
            "active": m.active,
            "role": m.role,
            "content": m.content,
            "status": m.status,
            "created_at": m.created_at,
            "provenance": m.provenance,
        }
        if m.reasoning:
            item["reasoning"] = m.reasoning
            item["reasoning_ms"] = m.reasoning_ms
        if m.parts:
            item["parts"] = [part_to_dict(p) for p in m.parts]
        items.append(item)
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "parts_version": PARTS_VERSION,
        "conversation": {
            "title": conv.title,
            "created_at": conv.created_at,
            "updated_at": conv.updated_at,
            "system_prompt": conv.system_prompt,
            "settings": conv.settings,
            "model_id": conv.model_id,
        },
        "messages": items,
    }


def to_json(conv: Conversation, messages: list[StoredMessage]) -> str:
    return json.dumps(to_json_dict(conv, messages), indent=2, ensure_ascii=False)


def export_json(history: History, conversation_id: str) -> str:
    """One conversation with all its branches, as JSON text."""
    conv = _conversation(history, conversation_id)
    return to_json(conv, history.all_messages(conversation_id))


def export_markdown(history: History, conversation_id: str) -> str:
    """One conversation as it is on screen (the active branch), as Markdown."""
    conv = _conversation(history, conversation_id)
    return to_markdown(conv, history.active_path(conversation_id))


def export_all_json(history: History) -> str:
    """Every conversation with all branches, as one JSON document."""
    docs = []
    for conv in history.list_conversations():
        doc = to_json_dict(conv, history.all_messages(conv.id))
        docs.append({"conversation": doc["conversation"], "messages": doc["messages"]})
    bundle = {"format": BUNDLE_FORMAT, "version": FORMAT_VERSION,
              "parts_version": PARTS_VERSION, "conversations": docs}
    return json.dumps(bundle, indent=2, ensure_ascii=False)


def to_markdown(conv: Conversation, messages: list[StoredMessage]) -> str:
    """Readable Markdown of the messages given (the path on screen); each reply is followed
    by a one-line provenance note; sources are footnotes (see the module's docstring)."""
    lines = [f"# {conv.title or 'Chat'}", ""]
    lines.append(f"_Exported from Hearth on {_stamp(None)}_")
    lines.append("")
    if conv.system_prompt:
        lines += ["**System prompt:**", "", f"> {conv.system_prompt}", ""]
    footnotes: list[str] = []
    cited = _cited_by(messages)
    for i, m in enumerate(messages):
        who = {"user": "You", "assistant": "Assistant", "system": "System",
               "tool": "Tool"}.get(m.role, m.role)
        notes = [] if m.status == "complete" else [m.status]
        if m.variant_count > 1:
            notes.append(f"version {m.variant_index + 1} of {m.variant_count}")
        suffix = f" ({', '.join(notes)})" if notes else ""
        lines += [f"## {who}{suffix}", ""]
        if m.reasoning:
            lines += [f"<details><summary>{thought_summary(m.reasoning_ms)}</summary>", "",
                      _quote_reasoning(m.reasoning), "", "</details>", ""]
        lines += [m.content, ""]
        lines += [line for p in m.parts for line in (_part_line(p), "") if line]
        files = [p.name for p in m.parts if isinstance(p, Attachment)]
        if files:
            lines += ["_Attached: " + ", ".join(_inline(f) for f in files) + "_", ""]
        sources = cited.get(i, ())
        if sources:
            first = len(footnotes) + 1
            footnotes += [_footnote(first + n, s) for n, s in enumerate(sources)]
            refs = " ".join(f"[^{first + n}]" for n in range(len(sources)))
            lines += [f"Sources: {refs}", ""]
        if m.role == "assistant" and m.provenance:
            lines += [f"<sub>{provenance_line(m.provenance)}</sub>", ""]
    if footnotes:
        lines += footnotes
    return "\n".join(lines).rstrip() + "\n"


def _cited_by(messages: list[StoredMessage]) -> dict[int, tuple[Source, ...]]:
    """Which message lists each turn's sources: the turn's last reply (as on screen), or
    the user's message itself when no reply follows it. Keys are positions in ``messages``."""
    out: dict[int, tuple[Source, ...]] = {}
    for i, m in enumerate(messages):
        if m.role != "user":
            continue
        sources = tuple(p for p in m.parts if isinstance(p, Source))
        if not sources:
            continue
        where = i
        for j in range(i + 1, len(messages)):
            if messages[j].role == "user":
                break
            if messages[j].role == "assistant":
                where = j
        out[where] = sources
    return out


def _inline(text: str) -> str:
    """One line of text that stays one line and plain in Markdown."""
    text = " ".join(text.split())
    return "".join(f"\\{ch}" if ch in "\\`*_[]<>" else ch for ch in text)


def _footnote(number: int, source: Source) -> str:
    """``[^3]: manual.pdf · page 4 — “the passage”`` (the passage whole, on one line)."""
    where = f" · {_inline(source.location)}" if source.location else ""
    return f"[^{number}]: {_inline(source.document)}{where} — “{_inline(source.text)}”"


def _part_line(part: object) -> str:
    """A call or a result as a line of the Markdown (other parts show only in the app)."""
    if isinstance(part, ToolCall):
        return f"`{part.name}({part.arguments})`"
    if isinstance(part, ToolResult):
        return f"{'Error: ' if part.is_error else ''}{part.content}"
    return ""


def thought_summary(reasoning_ms: float) -> str:
    """The folded thinking block's title: "Thought for 12 s" (the one wording the chat view
    and the Markdown export share); "Thoughts" when the time was not measured."""
    if reasoning_ms <= 0:
        return "Thoughts"
    seconds = round(reasoning_ms / 1000)
    if seconds < 1:
        return "Thought for less than a second"
    if seconds < 60:
        return f"Thought for {seconds} s"
    minutes, rest = divmod(seconds, 60)
    return f"Thought for {minutes} min {rest} s" if rest else f"Thought for {minutes} min"


def _quote_reasoning(text: str) -> str:
    """The thinking as a Markdown quote that stays inside its ``<details>`` block (a
    ``</details>`` in it would otherwise close the block early)."""
    text = text.strip().replace("</details", "&lt;/details")
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.split("\n"))


def provenance_line(p: dict) -> str:
    """One human line: model, provider, sampling, seed, token counts, timings.

    Tolerant of any JSON (a row edited by hand, an old export): a part of the wrong type is
    left out, a figure that is not a finite number shows as 0."""
    parts = []
    if p.get("model"):
        parts.append(f"model {p['model']}")
    if p.get("provider"):
        parts.append(f"provider {p['provider']}")
    sampling = _mapping(p.get("sampling"))
    if sampling:
        parts.append(
            "temperature {t}, top-p {tp}, top-k {tk}".format(
                t=sampling.get("temperature"), tp=sampling.get("top_p"), tk=sampling.get("top_k")
            )
        )
    if "seed" in p:
        parts.append(f"seed {p['seed']}")
    stats = _mapping(p.get("stats"))
    if stats:
        parts.append(
            f"{_figure(stats.get('prompt_tokens')):.0f} prompt + "
            f"{_figure(stats.get('generated_tokens')):.0f} "
            f"generated tokens, TTFT {_figure(stats.get('ttft_ms')):.0f} ms, "
            f"{_figure(stats.get('decode_tok_s')):.1f} tok/s"
        )
    if p.get("finish_reason"):
        parts.append(f"finish {p['finish_reason']}")
    return " · ".join(parts)


def _mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _figure(value: object) -> float:
    """A stored figure as a float to format: 0 for anything else (text, inf, a huge int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0
    return number if math.isfinite(number) else 0.0


def import_json(history: History, text: str, *, source: str = "This file") -> Conversation:
    """Import an export (checked whole first, written in one transaction); return the first
    new conversation. ``app.storage.importer.import_file`` also checks the file's size."""
    return import_text(history, text, source=source)[0]


def _conversation(history: History, conversation_id: str) -> Conversation:
    conv = history.get_conversation(conversation_id)
    if conv is None:
        raise ValueError(f"no conversation {conversation_id}")
    return conv


def _stamp(ts: float | None) -> str:
    when = datetime.now(timezone.utc) if ts is None else datetime.fromtimestamp(ts, timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")
