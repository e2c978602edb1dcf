#!/usr/bin/env bash
# Install Hearth into .venv (first run, or when pyproject.toml changed), set up the built-in
# starter model once, check the desktop libraries Qt needs on X11, and start the app.
# After the first run nothing here touches the network: it starts offline.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
STAMP=.venv/.hearth-installed-pyproject.toml   # the pyproject.toml of the last good install

warn() { echo "run.sh: $*" >&2; }

[ -x .venv/bin/python ] || "$PY" -m venv .venv

# -- install only when needed ---------------------------------------------------------------
if ! cmp -s pyproject.toml "$STAMP"; then
    if .venv/bin/python -m pip install -q -e .; then
        cp pyproject.toml "$STAMP"
    elif [ -f "$STAMP" ] || .venv/bin/python -c "import importlib.metadata as m; m.version('hearth')" \
        >/dev/null 2>&1; then
        warn "could not update the installation (offline?); starting the installed version."
    else
        warn "installing Hearth failed: connect to the internet for the first run and try again."
        exit 1
    fi
fi

# -- the starter model: both steps do nothing once done -------------------------------------
bash scripts/fetch-starter.sh
.venv/bin/python -m app setup-starter \
    || warn "the starter model is not set up yet (offline?); the app starts without it."

# -- desktop libraries (only when the window will open on X11) -----------------------------
gui=1
for arg in "$@"; do
    case "$arg" in
        --offline) ;;
        *) gui=0 ;;  # a subcommand, --version, --help or --smoke-test (offscreen)
    esac
done
if [ "$gui" = 1 ]; then
    cmd=$(.venv/bin/python -m app.desktop_libs --install-command || true)
    if [ -n "$cmd" ]; then
        warn "Qt needs system libraries that are missing; installing them: $cmd"
        if [ "$(id -u)" = 0 ]; then
            $cmd || warn "that failed; try: apt-get update && $cmd"
        elif command -v sudo >/dev/null 2>&1 && { [ -t 0 ] || sudo -n true 2>/dev/null; }; then
            sudo $cmd || warn "that failed; try: sudo $cmd"
        else
            warn "run this as root, then start Hearth again: $cmd"
        fi
    fi
fi

# .venv/bin/python -m app (not .venv/bin/hearth): always this checkout's code.
exec .venv/bin/python -m app "$@"
