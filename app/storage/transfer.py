"""Export a conversation to Markdown or JSON (with provenance) and import JSON back."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from app.errors import StorageError
from app.storage.history import Conversation, History, StoredMessage

FORMAT = "hearth-conversation"
FORMAT_VERSION = 1


def to_json_dict(conv: Conversation, messages: list[StoredMessage]) -> dict:
    """A self-contained, versioned JSON document for one conversation."""
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
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "status": m.status,
                "created_at": m.created_at,
                "provenance": m.provenance,
            }
            for m in messages
        ],
    }


def to_json(conv: Conversation, messages: list[StoredMessage]) -> str:
    return json.dumps(to_json_dict(conv, messages), indent=2, ensure_ascii=False)


def to_markdown(conv: Conversation, messages: list[StoredMessage]) -> str:
    """Readable Markdown; each reply is followed by a one-line provenance note."""
    lines = [f"# {conv.title or 'Chat'}", ""]
    lines.append(f"_Exported from Hearth on {_stamp(None)}_")
    lines.append("")
    if conv.system_prompt:
        lines += ["**System prompt:**", "", f"> {conv.system_prompt}", ""]
    for m in messages:
        who = {"user": "You", "assistant": "Assistant", "system": "System"}.get(m.role, m.role)
        suffix = "" if m.status == "complete" else f" ({m.status})"
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


def import_json(history: History, text: str) -> Conversation:
    """Create a new conversation from an exported JSON document; return it."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"This file is not valid JSON ({exc}).") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StorageError("This file is not a Hearth conversation export.")
    if int(data.get("version", 0)) > FORMAT_VERSION:
        raise StorageError(
            "This conversation was exported by a newer version of Hearth.",
            hint="Update Hearth to import it.",
        )
    meta = data.get("conversation") or {}
    conv = history.create_conversation(
        str(meta.get("title") or ""),
        system_prompt=str(meta.get("system_prompt") or ""),
        settings=dict(meta.get("settings") or {}),
        model_id=meta.get("model_id"),
        created_at=meta.get("created_at"),
    )
    for m in data.get("messages") or []:
        if m.get("role") not in ("system", "user", "assistant"):
            raise StorageError(
                f"This export holds a message with an unknown role {m.get('role')!r}."
            )
        status = m.get("status", "complete")
        history.add_message(
            conv.id,
            m["role"],
            str(m.get("content", "")),
            status=status if status != "streaming" else "failed",
            provenance=dict(m.get("provenance") or {}),
            created_at=m.get("created_at"),
        )
    result = history.get_conversation(conv.id)
    assert result is not None
    return result


def _stamp(ts: float | None) -> str:
    when = datetime.now(timezone.utc) if ts is None else datetime.fromtimestamp(ts, timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M UTC")
