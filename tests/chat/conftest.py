"""The turn layer's tests use the remote tests' stand-in server too."""

from tests.remote.conftest import make_stub  # noqa: F401  (a fixture)
