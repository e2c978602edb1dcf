"""Export a conversation to Markdown or JSON (with provenance); import JSON back.

JSON keeps every branch: each message has an export-local ``id``, its ``parent`` and whether
it is the ``active`` variant (format version 2, read by ``app.storage.importer``). Markdown is
for reading: it holds the chat as it is on screen, the active branch.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

from app.storage.history import Conversation, History, StoredMessage
from app.storage.importer import BUNDLE_FORMAT, FORMAT, FORMAT_VERSION, import_text

__all__ = [
    "BUNDLE_FORMAT", "FORMAT", "FORMAT_VERSION", "export_all_json", "export_json",
    "export_markdown", "import_json", "provenance_line", "to_json", "to_json_dict",
    "to_markdown",
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
        items.append(
            {
                "id": local[m.id],
                "parent": local.get(m.parent_id) if m.parent_id is not None else None,
                "active": m.active,
                "role": m.role,
                "content": m.content,
                "status": m.status,
                "created_at": m.created_at,
                "provenance": m.provenance,
            }
        )
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
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
    bundle = {"format": BUNDLE_FORMAT, "version": FORMAT_VERSION, "conversations": docs}
    return json.dumps(bundle, indent=2, ensure_ascii=False)


def to_markdown(conv: Conversation, messages: list[StoredMessage]) -> str:
    """Readable Markdown of the messages given (the path on screen); each reply is followed
    by a one-line provenance note."""
    lines = [f"# {conv.title or 'Chat'}", ""]
    lines.append(f"_Exported from Hearth on {_stamp(None)}_")
    lines.append("")
    if conv.system_prompt:
        lines += ["**System prompt:**", "", f"> {conv.system_prompt}", ""]
    for m in messages:
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m.role, m.role)
        notes = [] if m.status == "complete" else [m.status]
        if m.variant_count > 1:
            notes.append(f"version {m.variant_index + 1} of {m.variant_count}")
        suffix = f" ({', '.join(notes)})" if notes else ""
        lines += [f"## {who}{suffix}", "", m.content, ""]
        if m.role == "assistant" and m.provenance:
            lines += [f"<sub>{provenance_line(m.provenance)}</sub>", ""]
    return "\n".join(lines).rstrip() + "\n"


def provenance_line(p: dict) -> str:
    """One human line: model, provider, sampling, seed, token counts, timings."""
    parts = []
    if p.get("model"):
        parts.append(f"model {p['model']}")
    if p.get("provider"):
        parts.append(f"provider {p['provider']}")
    sampling = p.get("sampling") or {}
    if sampling:
        parts.append(
            "temperature {t}, top-p {tp}, top-k {tk}".format(
                t=sampling.get("temperature"), tp=sampling.get("top_p"), tk=sampling.get("top_k")
            )
        )
    if "seed" in p:
        parts.append(f"seed {p['seed']}")
    stats = p.get("stats") or {}
    if stats:
        parts.append(
            f"{stats.get('prompt_tokens', 0)} prompt + {stats.get('generated_tokens', 0)} "
            f"generated tokens, TTFT {stats.get('ttft_ms', 0):.0f} ms, "
            f"{stats.get('decode_tok_s', 0):.1f} tok/s"
        )
    if p.get("finish_reason"):
        parts.append(f"finish {p['finish_reason']}")
    return " · ".join(parts)


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
