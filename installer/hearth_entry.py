"""Entry point of the frozen app (PyInstaller runs this file as ``__main__``).

Installs the models the bundle carries (the converted starter) into the user's models folder
on first start, then hands over to the normal command line (``app.__main__.main``).
``--version`` and ``--help`` touch no user data.
"""

import sys

from app.__main__ import main
from app.resources import seed_bundled_models

INFO_FLAGS = {"-h", "--help", "--version"}

if __name__ == "__main__":
    if not INFO_FLAGS.intersection(sys.argv[1:]):
        seed_bundled_models()
    sys.exit(main())
