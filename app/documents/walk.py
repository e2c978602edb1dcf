"""Files and folders → the document files under them: a bounded walk that survives symlink
loops, unreadable folders and huge folders, and says what it left out."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from app.documents import limits
from app.documents.parse import kind_of


@dataclass
class Walk:
    files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # sentences
    skipped_types: int = 0  # files of types Hearth does not read
    over_limit: int = 0  # document files past the limit, counted and not indexed
    complete: bool = True  # False when a bound stopped it (then nothing may be dropped)


def walk(paths: list[Path], *, max_files: int = limits.MAX_WALK_FILES,
         max_entries: int = limits.MAX_WALK_ENTRIES) -> Walk:
    result = Walk()
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[Path] = set()
    entries = 0

    def add(file: Path) -> None:
        resolved = file.resolve()
        if resolved in seen_files:
            return
        seen_files.add(resolved)
        if len(result.files) < max_files:
            result.files.append(resolved)
        else:
            result.over_limit += 1
            result.complete = False

    for root in paths:
        if not root.exists():
            result.problems.append(f"{root} does not exist (a broken link?).")
            continue
        if root.is_file():
            if kind_of(root) is None:
                result.problems.append(f"{root.name} is not a type Hearth reads "
                                       f"({root.suffix or 'no extension'}).")
            else:
                add(root)
            continue
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                st = folder.stat()
            except OSError as exc:
                result.problems.append(f"{folder} cannot be read ({exc.strerror or exc}).")
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:  # a symlink loop, or a folder reached twice
                continue
            seen_dirs.add(key)
            try:
                with os.scandir(folder) as it:
                    children = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                result.problems.append(f"{folder} cannot be read ({exc.strerror or exc}).")
                continue
            subdirs: list[Path] = []
            for entry in children:
                entries += 1
                if entries > max_entries:
                    result.complete = False
                    result.problems.append(
                        f"{root} holds more than {max_entries:,} entries; the walk stopped "
                        f"there ({len(result.files):,} files found so far).")
                    stack.clear()
                    break
                if entry.name.startswith("."):
                    continue
                try:
                    if entry.is_dir():
                        subdirs.append(Path(entry.path))
                    elif entry.is_file():
                        if kind_of(Path(entry.name)) is None:
                            result.skipped_types += 1
                        else:
                            add(Path(entry.path))
                    else:
                        result.problems.append(f"{entry.path} is a broken link; skipped.")
                except OSError as exc:  # e.g. a link loop: ELOOP
                    result.problems.append(f"{entry.path} cannot be read "
                                           f"({exc.strerror or exc}).")
            stack.extend(reversed(subdirs))
    if result.over_limit:
        result.problems.append(f"{result.over_limit:,} more document files were found and not "
                               f"indexed (the limit is {max_files:,} per add).")
    return result
