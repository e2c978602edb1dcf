"""onnxruntime-genai as a benchmark peer: load a model folder with a given thread count.

Its default session options can leave cores idle, so the comparison sets
``intra_op_num_threads`` in a temporary copy of genai_config.json (the other files are hard
links where the filesystem allows: ORT refuses external weight data reached through a symlink
that leads out of the model's folder). Hearth's GGUF conversions take ``num_logits_to_keep``
(how many last positions get logits, for verify steps), which onnxruntime-genai feeds with a
wrong value: the copy's graph fixes it to 1 (the same weights).
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
            if item.name == "genai_config.json":
                continue
            if item.suffix == ".onnx" and _write_one_logit_graph(item, workdir / item.name):
                continue
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


def _write_one_logit_graph(source: Path, target: Path) -> bool:
    """Write ``source`` with its ``num_logits_to_keep`` input made a constant 1 (its external
    data stays where it is, beside the copy); False when it has no such input."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(source), load_external_data=False)
    keep = [i for i in model.graph.input if i.name == "num_logits_to_keep"]
    if not keep:
        return False
    model.graph.input.remove(keep[0])
    model.graph.initializer.append(
        numpy_helper.from_array(np.ones(1, dtype=np.int64), "num_logits_to_keep"))
    onnx.save_model(model, str(target))
    return True
