"""Entry point of the frozen app (PyInstaller runs this file as ``__main__``).

Installs the models the bundle carries (the converted starter) into the user's models folder
on first start, then hands over to the normal command line (``app.__main__.main``).
``--version`` and ``--help`` touch no user data. ``--check-desktop-libs`` (run by
``install-desktop-entry.sh``) reports the system libraries Qt's X11 plugin lacks and the
command that installs them, with exit code 1 when some are missing; a normal start runs the
same check (``app.desktop_libs``) before the window opens.
"""

import sys

from app.__main__ import main
from app.models.bundled import seed_bundled_models

INFO_FLAGS = {"-h", "--help", "--version"}
CHECK_FLAG = "--check-desktop-libs"

if __name__ == "__main__":
    if CHECK_FLAG in sys.argv[1:]:
        from app.desktop_libs import main as check_desktop_libs

        sys.exit(check_desktop_libs(["--force"]))
    if not INFO_FLAGS.intersection(sys.argv[1:]):
        seed_bundled_models()
    sys.exit(main())
