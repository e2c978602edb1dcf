"""Where other local-LLM apps keep their GGUF files, and the ones found there.

LM Studio (``~/.lmstudio/models``, older ``~/.cache/lm-studio/models``), Ollama
(``~/.ollama/models``: content-addressed blobs named by its manifests), GPT4All (its data
folder ``nomic.ai/GPT4All``) and Jan (``~/jan/models``, or ``data/models`` in its data or
config folder). The scan is bounded in depth, in files and in time, and never follows a
folder link, so a huge or looping tree cannot run for ever. ``scan_iter`` yields each file
as it is found and checks ``stop`` between entries (the import dialog runs it off the UI
thread: app/workers/gguf_scan.py); ``scan`` is the sorted list.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import platformdirs

GGUF_MAGIC = b"GGUF"
MAX_DEPTH = 5
MAX_FILES = 200
TIME_BUDGET_S = 1.0
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"


@dataclass(frozen=True)
class FoundGGUF:
    app: str  # "LM Studio", "Ollama", "GPT4All", "Jan"
    name: str  # file name, or Ollama's model:tag
    path: Path
    size: int


def app_folders(home: Path | None = None) -> list[tuple[str, Path]]:
    """(app, folder) for every place an app may keep GGUFs, whether it exists or not."""
    home = home or Path.home()
    # Qt's app data folder, as GPT4All and Jan use it: <data dir>/<organisation>/<app>
    # (~/.local/share, ~/Library/Application Support, %LOCALAPPDATA%)
    data = Path(platformdirs.user_data_dir())
    config = Path(platformdirs.user_config_dir())
    return [
        ("LM Studio", home / ".lmstudio" / "models"),
        ("LM Studio", home / ".cache" / "lm-studio" / "models"),
        ("Ollama", home / ".ollama" / "models"),
        ("GPT4All", data / "nomic.ai" / "GPT4All"),
        ("Jan", home / "jan" / "models"),
        ("Jan", data / "Jan" / "data" / "models"),
        ("Jan", config / "Jan" / "data" / "models"),
    ]


def existing_folders(home: Path | None = None) -> list[tuple[str, Path]]:
    return [(a, f) for a, f in app_folders(home) if f.is_dir()]


def scan(
    home: Path | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_files: int = MAX_FILES,
    time_budget_s: float = TIME_BUDGET_S,
) -> list[FoundGGUF]:
    """The GGUF files in the apps' folders, sorted by app and name (bounded: see module)."""
    found = scan_iter(home, max_depth=max_depth, max_files=max_files,
                      time_budget_s=time_budget_s)
    return sorted(found, key=sort_key)


def sort_key(found: FoundGGUF) -> tuple[str, str]:
    return (found.app, found.name.lower())


def scan_iter(
    home: Path | None = None,
    *,
    max_depth: int = MAX_DEPTH,
    max_files: int = MAX_FILES,
    time_budget_s: float = TIME_BUDGET_S,
    stop: Callable[[], bool] | None = None,
) -> Iterator[FoundGGUF]:
    """Each GGUF file in the apps' folders as it is found (once, by its real path)."""
    deadline = time.monotonic() + time_budget_s
    stopped = stop or (lambda: False)

    def over() -> bool:
        return time.monotonic() > deadline or stopped()

    count = 0
    seen: set[Path] = set()
    for app, folder in existing_folders(home):
        walk = app != "Ollama"
        items = _walk(app, folder, max_depth, over) if walk else _ollama(folder, over)
        for item in items:
            key = item.path.resolve()
            if key not in seen:
                seen.add(key)
                count += 1
                yield item
            if count >= max_files or over():
                return
        if over():
            return


def _walk(app: str, root: Path, max_depth: int, over: Callable[[], bool],
          ) -> Iterator[FoundGGUF]:
    stack = [(root, 0)]
    while stack and not over():
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < max_depth and not entry.name.startswith("."):
                        stack.append((Path(entry.path), depth + 1))
                elif _is_chat_gguf(entry.name) and entry.is_file():
                    size = entry.stat().st_size
                    yield FoundGGUF(app, entry.name, Path(entry.path), size)
            except OSError:
                continue


def _is_chat_gguf(name: str) -> bool:
    """A ``.gguf`` file other than a vision projector (``mmproj-…``: a GGUF, not a model)."""
    lower = name.lower()
    return lower.endswith(".gguf") and not lower.startswith("mmproj")


def _ollama(root: Path, over: Callable[[], bool]) -> Iterator[FoundGGUF]:
    """Ollama's models: each manifest (``manifests/<registry>/<ns>/<model>/<tag>``) names
    its weights layer by digest; the blob ``blobs/sha256-<hex>`` is the GGUF itself."""
    manifests = root / "manifests"
    if not manifests.is_dir():
        return
    for manifest in manifests.glob("*/*/*/*"):
        if over():
            return
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
            layers = doc.get("layers", []) if isinstance(doc, dict) else []
            digest = next(
                (x.get("digest") for x in layers
                 if isinstance(x, dict) and x.get("mediaType") == OLLAMA_MODEL_LAYER),
                None,
            )
            if not isinstance(digest, str):
                continue
            blob = root / "blobs" / digest.replace(":", "-")
            with blob.open("rb") as fh:
                if fh.read(4) != GGUF_MAGIC:
                    continue
            model, tag = manifest.parent.name, manifest.name
            found = FoundGGUF("Ollama", f"{model}:{tag}", blob, blob.stat().st_size)
        except (OSError, ValueError):
            continue
        yield found
