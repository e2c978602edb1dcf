"""Plain text, source code, Markdown (by its headings), CSV and JSON → sections."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from markdown_it import MarkdownIt

from app.documents.sections import DocumentError, Section

CODE_LINES = 60  # a code section: this many lines, cut at a blank line where one is near
CSV_ROWS = 40  # rows per CSV section


def plain_sections(text: str) -> list[Section]:
    return [Section(text)] if text.strip() else []


def code_sections(text: str) -> list[Section]:
    lines = text.splitlines()
    out: list[Section] = []
    start = 0
    while start < len(lines):
        end = min(start + CODE_LINES, len(lines))
        if end < len(lines):  # end the section at the last blank line of its second half
            blank = next((i for i in range(end, start + CODE_LINES // 2, -1)
                          if not lines[i - 1].strip()), None)
            end = blank or end
        body = "\n".join(lines[start:end])
        if body.strip():
            out.append(Section(body, heading=f"lines {start + 1}-{end}"))
        start = end
    return out


def markdown_sections(text: str) -> list[Section]:
    """One section per heading's body; its heading is the path of headings above it."""
    tokens = MarkdownIt("commonmark").parse(text)
    lines = text.splitlines()
    stack: list[tuple[int, str]] = []
    out: list[Section] = []
    body_start = 0

    def close(upto: int) -> None:
        body = "\n".join(lines[body_start:upto]).strip()
        if body:
            out.append(Section(body, heading=" › ".join(h for _, h in stack)))

    for i, tok in enumerate(tokens):
        if tok.type != "heading_open" or tok.map is None:
            continue
        close(tok.map[0])
        level = int(tok.tag[1])
        title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        body_start = tok.map[1]
    close(len(lines))
    return out


def csv_sections(path: Path, text: str) -> list[Section]:
    """Rows as "column: value" lines, CSV_ROWS rows a section (the header names the columns)."""
    try:
        dialect = csv.Sniffer().sniff(text[:4096]) if text.strip() else csv.excel
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    try:
        header = next(reader, None)
        if header is None:
            return []
        out: list[Section] = []
        rows: list[str] = []
        first = 2
        for n, row in enumerate(reader, start=2):
            cells = [f"{h.strip() or f'column {j + 1}'}: {v.strip()}"
                     for j, (h, v) in enumerate(zip(header, row, strict=False)) if v.strip()]
            if cells:
                rows.append("; ".join(cells))
            if len(rows) == CSV_ROWS:
                out.append(Section("\n".join(rows), heading=f"rows {first}-{n}"))
                rows, first = [], n + 1
        if rows:
            out.append(Section("\n".join(rows), heading=f"rows {first}-{reader.line_num}"))
        return out
    except csv.Error as exc:
        raise DocumentError(f"{path.name} is not a readable CSV file ({exc}).") from exc


def json_sections(path: Path, text: str) -> list[Section]:
    """Leaves as "a.b[2]: value" lines, one section per top-level key (JSON Lines: per line)."""
    try:
        if path.suffix.lower() == ".jsonl":
            values = [json.loads(line) for line in text.splitlines() if line.strip()]
            return [Section("\n".join(_leaves(v, "")), heading=f"line {i + 1}")
                    for i, v in enumerate(values) if v is not None]
        value = json.loads(text)
    except RecursionError as exc:
        raise DocumentError(f"{path.name} is JSON nested too deeply to read.") from exc
    except ValueError as exc:
        raise DocumentError(f"{path.name} is not valid JSON ({exc}).") from exc
    try:
        if isinstance(value, dict):
            return [Section("\n".join(_leaves(v, str(k))), heading=str(k))
                    for k, v in value.items()]
        return [Section("\n".join(_leaves(value, "")))]
    except RecursionError as exc:
        raise DocumentError(f"{path.name} is JSON nested too deeply to read.") from exc


def _leaves(value: object, prefix: str) -> list[str]:
    if isinstance(value, dict):
        return [line for k, v in value.items()
                for line in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    if isinstance(value, list):
        return [line for i, v in enumerate(value) for line in _leaves(v, f"{prefix}[{i}]")]
    shown = value if isinstance(value, str) else json.dumps(value)
    return [f"{prefix}: {shown}" if prefix else str(shown)]
