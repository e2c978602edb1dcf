#!/usr/bin/env bash
# Install Hearth with its test dependencies into .venv and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -e ".[test]"
bash scripts/fetch-starter.sh --for-tests  # starter-model tests skip (with a reason) when it is missing
bash scripts/fetch-embedder.sh  # embedder tests skip (with a reason) when it is missing
export QT_QPA_PLATFORM=offscreen
# Qt needs a few system libraries; bare Linux images may lack them.
if ! .venv/bin/python -c "from PySide6 import QtWidgets" 2>/dev/null \
    && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && apt-get install -y -qq libegl1 libgl1 libxkbcommon0 libfontconfig1 \
    libdbus-1-3 libglib2.0-0 >/dev/null
fi
.venv/bin/python -m ruff check app tests bench
# one worker per core (2 on CI): the suite takes ~40% less wall time than in one process
exec .venv/bin/python -m pytest -q -n auto "$@"
