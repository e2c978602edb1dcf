#!/bin/sh
# Adds Hearth to your application launcher (per user, no root): installs hearth.desktop with
# this folder's absolute path and the icon. Run it again after moving the folder.
# Remove with: sh install-desktop-entry.sh --uninstall   (your chats and models stay).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
apps="$data/applications"
icons="$data/icons/hicolor/256x256/apps"
if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$apps/hearth.desktop" "$icons/hearth.png"
    echo "Removed Hearth from the launcher. Chats and models are kept in $data/Hearth."
    exit 0
fi
# Qt's X11 plugin needs system libraries that minimal installs lack: the app names them too,
# but say it now, with the command that installs them.
if [ "$(uname -s)" = Linux ] && [ -x "$here/Hearth" ]; then
    "$here/Hearth" --check-desktop-libs >&2 || true
fi
mkdir -p "$apps" "$icons"
cp "$here/hearth.png" "$icons/hearth.png"
sed -e "s|^Exec=.*|Exec=\"$here/Hearth\"|" -e "s|^TryExec=.*|TryExec=$here/Hearth|" \
    "$here/hearth.desktop" > "$apps/hearth.desktop"
chmod 644 "$apps/hearth.desktop"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$apps" || true
echo "Hearth is now in your application launcher ($apps/hearth.desktop)."
