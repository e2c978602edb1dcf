"""onnxruntime-genai as a benchmark peer: load a model folder with a given thread count.

Its default session options can leave cores idle, so the comparison sets
``intra_op_num_threads`` in a temporary copy of genai_config.json (the other files are hard
links where the filesystem allows: ORT refuses external weight data reached through a symlink
that leads out of the model's folder).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def genai_model(model_dir: Path, threads: int) -> Iterator[object | None]:
    """Yield an ``onnxruntime_genai.Model``, or None when the package or layout is missing."""
    try:
        import onnxruntime_genai as og
    except ImportError:
        yield None
        return
    if not (model_dir / "genai_config.json").exists():
        yield None
        return
    workdir = Path(tempfile.mkdtemp(prefix="hearth-genai-"))
    try:
        for item in model_dir.iterdir():
            if item.name != "genai_config.json":
                _link(item.resolve(), workdir / item.name)
        config = json.loads((model_dir / "genai_config.json").read_text())
        options = config["model"]["decoder"].setdefault("session_options", {})
        options["intra_op_num_threads"] = threads
        (workdir / "genai_config.json").write_text(json.dumps(config))
        yield og.Model(str(workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)
