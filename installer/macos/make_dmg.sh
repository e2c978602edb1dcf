#!/usr/bin/env bash
# Make Hearth-<version>.dmg from dist/Hearth.app: the app plus a link to /Applications, so
# users drag Hearth onto Applications. Runs on macOS only (hdiutil, codesign, xcrun).
#
#   bash installer/macos/make_dmg.sh dist/Hearth.app dist/Hearth-x.y.z.dmg
#
# Signing and notarization (optional; see installer/README.md) are driven by two variables:
#   HEARTH_CODESIGN_IDENTITY  "Developer ID Application: Name (TEAMID)"; PyInstaller already
#                             signed the .app with it (hearth.spec); this script verifies the
#                             app and signs the .dmg.
#   HEARTH_NOTARY_PROFILE     a keychain profile made once with `xcrun notarytool
#                             store-credentials`; the .dmg is notarized and stapled.
set -euo pipefail
app="${1:?usage: make_dmg.sh dist/Hearth.app OUT.dmg}"
out="${2:?usage: make_dmg.sh dist/Hearth.app OUT.dmg}"
[ -d "$app" ] || { echo "make_dmg.sh: no app bundle at $app" >&2; exit 1; }
command -v hdiutil >/dev/null || { echo "make_dmg.sh: needs macOS (hdiutil)" >&2; exit 1; }

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
ditto "$app" "$stage/Hearth.app"          # ditto keeps signatures, xattrs and symlinks
ln -s /Applications "$stage/Applications"

if [ -n "${HEARTH_CODESIGN_IDENTITY:-}" ]; then
    codesign --verify --deep --strict --verbose=2 "$stage/Hearth.app"
fi

rm -f "$out"
hdiutil create -volname "Hearth" -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$out"

if [ -n "${HEARTH_CODESIGN_IDENTITY:-}" ]; then
    codesign --sign "$HEARTH_CODESIGN_IDENTITY" --timestamp "$out"
fi
if [ -n "${HEARTH_NOTARY_PROFILE:-}" ]; then
    xcrun notarytool submit "$out" --keychain-profile "$HEARTH_NOTARY_PROFILE" --wait
    xcrun stapler staple "$out"
    spctl --assess --type open --context context:primary-signature --verbose "$out"
fi
echo "make_dmg.sh: wrote $out"
