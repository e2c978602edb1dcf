"""Command line: ``python -m app [COMMAND]``.

With no command the desktop window opens. Each command family lives in its own module that
exposes ``register(subparsers)``; the parser sets ``func`` on the namespace it returns.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from app import __version__
from app.errors import HearthError
from app.network import add_offline_flag, startup

# Modules that add subcommands. Each has register(subparsers) -> None.
COMMAND_MODULES = (
    "app.engine.cli",  # chat, generate
    "app.models.cli",  # models list|catalog|download|rm|import, import-gguf, setup-starter
    "app.server.cli",  # serve
    "app.tools.cli",  # mcp list|add|rm|import; --tools / --yes on chat and generate
    "app.documents.cli",  # docs add|list|rm|search
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hearth",
        description="Hearth: private, offline chat with local language models.",
    )
    parser.add_argument("--version", action="version", version=f"Hearth {__version__}")
    parser.add_argument(
        "--smoke-test",
        metavar="OUT.png",
        help="start the app offscreen, send one message, save a screenshot and exit",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    add_offline_flag(parser)
    return parser


def main(argv: list[str]) -> int:
    startup(argv)  # telemetry opt-outs and the socket guard, before any library is imported
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from app.ui.launch import run_app

            return run_app(smoke_test=args.smoke_test)
        return int(args.func(args) or 0)
    except HearthError as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
