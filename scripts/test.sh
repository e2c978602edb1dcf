#!/usr/bin/env bash
# Install Hearth with its test dependencies into .venv and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
export QT_QPA_PLATFORM=offscreen
.venv/bin/python -m ruff check app tests bench
exec .venv/bin/python -m pytest -q "$@"
