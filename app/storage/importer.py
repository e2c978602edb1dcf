"""Import Hearth JSON exports: the whole file is checked before anything is written.

``parse_export`` turns the text into plain ``ImportedChat`` values or raises one
``ImportFileError`` naming the file and the first wrong field ("chat 3, message 7: 'role'
must be user, assistant or system"); ``write_chats`` then adds every chat in one
transaction, so an import is either complete or has changed nothing.

Formats: a single conversation (``"format": "hearth-conversation"``) or several
(``"format": "hearth-history"``, ``"conversations": [...]``). Version 1 lists one chat's
messages in order; version 2 gives each message an ``id``, its ``parent`` (an earlier id or
null) and whether it is the ``active`` variant, so every branch survives a round trip. A
message may carry ``reasoning`` (a reasoning model's thinking) and ``reasoning_ms``. Version
3 adds the ``tool`` role and each message's ``parts`` besides its text (attachments,
sources, tool calls, results), each in its JSON form as ``app.chat.parts.part_from_dict``
reads it, under the document's ``parts_version`` (at most ``PARTS_VERSION``); an older
file has none, and its text reads as before.

Every time must be one the history can hold and a calendar can show (``TIME_MIN`` ..
``TIME_MAX`` in ``app.storage.records``: ``"updated_at": 1e18`` is refused with a sentence
naming the file and the field, never stored to stop the sidebar later); every duration and
every number inside ``settings`` and ``provenance`` must be finite and in range. A title
longer than ``TITLE_LIMIT`` is cut (harmless: the text is the file's, the list shows the
start).

``import_job`` is the same import as a ``Job`` (progress, cancel) for the app's job thread;
it opens its own connection, and writes in one transaction, so a cancel or a failure part
way leaves the history as it was. Writing is linear in messages: each insert's ``MAX(seq)``
and ``MAX(active_rank)`` are index lookups (migration ``m007_messages_rank_index``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.chat.parts import PARTS_VERSION, Part, Reasoning, Text, part_from_dict
from app.jobs import Job, JobControl, Progress, ProgressReport
from app.storage.errors import ImportFileError
from app.storage.history import ROLES, STATUSES, Conversation, History
from app.storage.records import (
    DURATION_MAX_MS,
    TIME_MAX,
    TIME_MIN,
    valid_duration,
    valid_time,
)
from app.text import clean_text, clean_value
from app.units import format_bytes

FORMAT = "hearth-conversation"
BUNDLE_FORMAT = "hearth-history"
FORMAT_VERSION = 3
#: the most parts a message may carry in an import (sources, calls, attachments)
MAX_PARTS_PER_MESSAGE = 1_000

MAX_IMPORT_BYTES = 64 * 1024 * 1024
MAX_CHATS = 10_000
MAX_MESSAGES_PER_CHAT = 50_000
MAX_MESSAGES_TOTAL = 500_000
#: the largest magnitude a number in ``settings`` or ``provenance`` may have (a seed fits)
MAX_NUMBER = 2.0**64
#: a progress report (and a chance to cancel) after this many messages written
PROGRESS_EVERY = 500

_HINT = "Nothing was imported. Export the chat again, or fix the file."


@dataclass
class ImportedMessage:
    key: int
    parent: int | None
    role: str
    content: str
    status: str = "complete"
    created_at: float | None = None
    provenance: dict = field(default_factory=dict)
    active: bool = True
    reasoning: str = ""
    reasoning_ms: float = 0.0
    parts: tuple[Part, ...] = ()


@dataclass
class ImportedChat:
    title: str = ""
    system_prompt: str = ""
    settings: dict = field(default_factory=dict)
    model_id: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    messages: list[ImportedMessage] = field(default_factory=list)


def import_file(history: History, path: Path | str) -> list[Conversation]:
    """Import the export at ``path``; return the new conversations (nothing on error)."""
    return write_chats(history, read_export(path))


def import_job(history_path: Path | str, path: Path | str, job_id: str | None = None) -> Job:
    """The import of ``path`` into the history at ``history_path`` as a ``Job``.

    Run on a worker thread: it opens its own connection (without the start-up repairs, which
    belong to the app's own), reports "Checking …" and then the messages written, and
    returns the new conversations' ids. Cancelling it, or any failure, rolls the one
    transaction back: the history is left as it was.
    """
    path = Path(path)

    def work(report: ProgressReport, control: JobControl) -> list[str]:
        report(Progress(None, f"Checking {path.name}…"))
        chats = read_export(path)
        control.checkpoint()
        history = History(history_path, housekeeping=False)
        try:
            done = write_chats(history, chats, report=report, control=control, name=path.name)
        finally:
            history.close()
        return [c.id for c in done]

    return Job(job_id or f"import-chat:{path}", f"Import {path.name}", work)


def read_export(path: Path | str) -> list[ImportedChat]:
    """Read and check the export at ``path`` (its size first); raise ImportFileError."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise ImportFileError(
                f"{path} cannot be imported: it is {format_bytes(size)}, more than the "
                f"{format_bytes(MAX_IMPORT_BYTES)} a Hearth export can be.",
                hint="Check that this is a chat exported from Hearth.",
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFileError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportFileError(
            f"{path} cannot be imported: it is not UTF-8 text (byte {exc.start}).", hint=_HINT
        ) from exc
    return parse_export(text, source=str(path))


def import_text(history: History, text: str, *, source: str = "This file") -> list[Conversation]:
    """Import an export given as text; ``source`` names it in error sentences."""
    return write_chats(history, parse_export(text, source=source))


def parse_export(text: str, *, source: str = "This file") -> list[ImportedChat]:
    """Check a whole export and return its chats; raise ImportFileError on the first fault."""
    if len(text) > MAX_IMPORT_BYTES:
        raise ImportFileError(
            f"{source} cannot be imported: it holds more than "
            f"{format_bytes(MAX_IMPORT_BYTES)} of text.",
            hint="Check that this is a chat exported from Hearth.",
        )
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ImportFileError(f"{source} is not valid JSON ({exc}).", hint=_HINT) from exc
    except RecursionError as exc:
        raise ImportFileError(f"{source} is nested too deeply to be a Hearth export.") from exc
    return _Checker(source).document(data)


def write_chats(
    history: History,
    chats: list[ImportedChat],
    *,
    report: ProgressReport | None = None,
    control: JobControl | None = None,
    name: str = "the file",
) -> list[Conversation]:
    """Add checked chats in one transaction; return them as stored.

    Every ``PROGRESS_EVERY`` messages it calls ``report`` and ``control.checkpoint()``; an
    exception from either (``JobCancelled`` included) rolls everything back.
    """
    ids: list[str] = []
    total = sum(len(chat.messages) for chat in chats)
    written = 0

    def step() -> None:
        if control is not None:
            control.checkpoint()
        if report is not None:
            report(Progress(written / total if total else None,
                            f"Importing {name}: {written:,} of {total:,} messages"))

    with history.transaction():
        step()
        for chat in chats:
            conv = history.create_conversation(
                chat.title,
                system_prompt=chat.system_prompt,
                settings=chat.settings,
                model_id=chat.model_id,
                created_at=chat.created_at,
            )
            stored: dict[int, int] = {}
            for m in chat.messages:
                stored[m.key] = history.insert_message(
                    conv.id,
                    m.role,
                    m.content,
                    None if m.parent is None else stored[m.parent],
                    status=m.status,
                    provenance=m.provenance,
                    created_at=m.created_at,
                    active=m.active,
                    reasoning=m.reasoning,
                    reasoning_ms=m.reasoning_ms,
                    parts=m.parts,
                )
                written += 1
                if written % PROGRESS_EVERY == 0:
                    step()
            if chat.updated_at is not None:
                history.touch(conv.id, chat.updated_at)
            ids.append(conv.id)
        step()
    result = [history.get_conversation(i) for i in ids]
    return [c for c in result if c is not None]


class _Checker:
    """Walks an export, keeping where it is for the error sentence."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.total = 0

    def fail(self, where: str, problem: str) -> ImportFileError:
        place = f"{where}: " if where else ""
        return ImportFileError(f"{self.source} cannot be imported: {place}{problem}.", hint=_HINT)

    def document(self, data: Any) -> list[ImportedChat]:
        if not isinstance(data, dict) or data.get("format") not in (FORMAT, BUNDLE_FORMAT):
            raise ImportFileError(f"{self.source} is not a Hearth conversation export.")
        version = data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise self.fail("", "'version' must be a whole number from 1")
        parts_version = data.get("parts_version", PARTS_VERSION if version >= 3 else None)
        if version > FORMAT_VERSION or (
                version >= 3 and isinstance(parts_version, int)
                and not isinstance(parts_version, bool) and parts_version > PARTS_VERSION):
            raise ImportFileError(
                f"{self.source} was exported by a newer version of Hearth.",
                hint="Update Hearth to import it.",
            )
        if version >= 3 and (isinstance(parts_version, bool)
                             or not isinstance(parts_version, int) or parts_version < 1):
            raise self.fail("", "'parts_version' must be a whole number from 1")
        if data["format"] == FORMAT:
            return [self.chat(data, "", version)]
        chats = data.get("conversations")
        if not isinstance(chats, list):
            raise self.fail("", "'conversations' must be a list")
        if len(chats) > MAX_CHATS:
            raise self.fail("", f"it holds {len(chats)} chats, more than the {MAX_CHATS} allowed")
        return [self.chat(c, f"chat {n}", version) for n, c in enumerate(chats, start=1)]

    def chat(self, data: Any, where: str, version: int) -> ImportedChat:
        if not isinstance(data, dict):
            raise self.fail(where, "must be a JSON object")
        meta = data.get("conversation", {})
        if not isinstance(meta, dict):
            raise self.fail(where, "'conversation' must be an object")
        chat = ImportedChat(
            title=self.text(meta, "title", where),
            system_prompt=self.text(meta, "system_prompt", where),
            settings=self.obj(meta, "settings", where),
            model_id=self.text(meta, "model_id", where, optional=True),
            created_at=self.time(meta, "created_at", where),
            updated_at=self.time(meta, "updated_at", where),
        )
        messages = data.get("messages", [])
        if not isinstance(messages, list):
            raise self.fail(where, "'messages' must be a list")
        if len(messages) > MAX_MESSAGES_PER_CHAT:
            raise self.fail(
                where,
                f"it holds {len(messages)} messages, more than the {MAX_MESSAGES_PER_CHAT} "
                "a chat may have",
            )
        self.total += len(messages)
        if self.total > MAX_MESSAGES_TOTAL:
            raise self.fail("", f"it holds more than {MAX_MESSAGES_TOTAL} messages in all")
        previous: int | None = None
        seen: set[int] = set()
        for n, m in enumerate(messages, start=1):
            here = f"{where}, message {n}" if where else f"message {n}"
            msg = self.message(m, here, version, previous, seen)
            seen.add(msg.key)
            previous = msg.key
            chat.messages.append(msg)
        return chat

    def message(
        self, data: Any, where: str, version: int, previous: int | None, seen: set[int]
    ) -> ImportedMessage:
        if not isinstance(data, dict):
            raise self.fail(where, "must be a JSON object")
        role = data.get("role")
        if role not in ROLES or (role == "tool" and version < 3):
            raise self.fail(where, "'role' must be user, assistant or system"
                            + (", or tool" if version >= 3 else ""))
        status = data.get("status", "complete")
        if status not in STATUSES:
            raise self.fail(where, "'status' must be complete, streaming, stopped or failed")
        if version == 1:
            key, parent, active = len(seen) + 1, previous, True
        else:
            key = data.get("id")
            if isinstance(key, bool) or not isinstance(key, int):
                raise self.fail(where, "'id' must be a whole number")
            if key in seen:
                raise self.fail(where, f"'id' {key} is used twice")
            parent = data.get("parent")
            if parent is not None and (
                isinstance(parent, bool) or not isinstance(parent, int) or parent not in seen
            ):
                raise self.fail(where, "'parent' must be null or the id of an earlier message")
            active = data.get("active", True)
            if not isinstance(active, bool):
                raise self.fail(where, "'active' must be true or false")
        return ImportedMessage(
            key=key,
            parent=parent,
            role=role,
            content=self.text(data, "content", where),
            status="failed" if status == "streaming" else status,
            created_at=self.time(data, "created_at", where),
            provenance=self.obj(data, "provenance", where),
            active=active,
            reasoning=self.text(data, "reasoning", where),
            reasoning_ms=self.duration(data, "reasoning_ms", where),
            parts=self.parts(data, where) if version >= 3 else (),
        )

    def parts(self, data: dict, where: str) -> tuple[Part, ...]:
        """A message's parts besides its text and thinking, each checked as a part."""
        value = data.get("parts")
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(where, "'parts' must be a list")
        if len(value) > MAX_PARTS_PER_MESSAGE:
            raise self.fail(where, f"it holds {len(value)} parts, more than the "
                                   f"{MAX_PARTS_PER_MESSAGE} a message may have")
        parts: list[Part] = []
        for n, item in enumerate(value, start=1):
            try:
                part = part_from_dict(item)
            except ValueError as exc:
                raise self.fail(f"{where}, part {n}", str(exc).rstrip(".")) from exc
            if isinstance(part, (Text, Reasoning)):
                raise self.fail(f"{where}, part {n}", "text and thinking belong in 'content' "
                                                      "and 'reasoning', not in 'parts'")
            parts.append(part)
        return tuple(parts)

    def text(self, data: dict, key: str, where: str, *, optional: bool = False) -> Any:
        value = data.get(key)
        if value is None:
            return None if optional else ""
        if not isinstance(value, str):
            raise self.fail(where, f"'{key}' must be text")
        return clean_text(value)

    def obj(self, data: dict, key: str, where: str) -> dict:
        value = data.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, f"'{key}' must be an object")
        try:
            bad = _bad_number(value)
            if bad is not None:
                raise self.fail(where, f"'{key}' holds a number that is not finite or is out "
                                       f"of range (at {bad})")
            return clean_value(value)
        except RecursionError as exc:
            raise self.fail(where, f"'{key}' is nested too deeply") from exc

    def duration(self, data: dict, key: str, where: str) -> float:
        value = data.get(key)
        if value is None:
            return 0.0
        if not valid_duration(value):
            raise self.fail(where, f"'{key}' must be a duration in milliseconds from 0 to "
                                   f"{DURATION_MAX_MS:.0f} (30 days), not {_shown(value)}")
        return float(value)

    def time(self, data: dict, key: str, where: str) -> float | None:
        value = data.get(key)
        if value is None:
            return None
        if not valid_time(value):
            raise self.fail(where, f"'{key}' must be a time in seconds from {TIME_MIN:.0f} "
                                   f"(1970) to {TIME_MAX:.0f} (the year 3000), not "
                                   f"{_shown(value)}")
        return float(value)


def _shown(value: Any) -> str:
    """A rejected value as the error sentence quotes it (short even for a huge number)."""
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**15:
        return f"{float(value):.6g}" if abs(value) < 2**1000 else "a number that large"
    text = json.dumps(value) if isinstance(value, (str, bool, type(None))) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _bad_number(value: Any, where: str = "") -> str | None:
    """The dotted path of the first number in ``value`` that is not finite or is larger
    than ``MAX_NUMBER`` (None when every number is fine)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return where if abs(value) > MAX_NUMBER else None
    if isinstance(value, float):
        return where if not (math.isfinite(value) and abs(value) <= MAX_NUMBER) else None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        found = _bad_number(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None
