"""Hearth: private, offline chat with local language models on ONNX Runtime."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hearth")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+source"
