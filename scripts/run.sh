#!/usr/bin/env bash
# Install Hearth into .venv, set up the built-in starter model once, and start the app.
# After the first run everything works offline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -e .
bash scripts/fetch-starter.sh
.venv/bin/hearth setup-starter
exec .venv/bin/hearth "$@"
