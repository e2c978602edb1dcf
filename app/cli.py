"""Command line: ``python -m app [COMMAND]``.

With no command the desktop window opens. Each command family lives in its own module that
exposes ``register(subparsers)``; the parser sets ``func`` on the namespace it returns.
Wherever a command takes a model folder (``model_dir``, ``--draft``), an installed model's id
from ``hearth models list`` works too (app/models/resolve.py, resolved here for every command).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from app import __version__
from app.errors import HearthError
from app.models.resolve import MODEL_ARG_HELP
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
        description="Hearth: private, offline chat with local language models. With no "
                    "command, 'hearth' opens the desktop window.",
        epilog="Run 'hearth' alone to open the window; 'hearth COMMAND --help' for a "
               "command's options.",
    )
    parser.add_argument("--version", action="version", version=f"Hearth {__version__}")
    parser.add_argument(
        "--smoke-test",
        metavar="OUT.png",
        help="start the app offscreen, send one message, save a screenshot and exit",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND",
        description="(none: open the desktop window)")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    for command in subparsers.choices.values():  # one wording for every model argument
        for action in command._actions:
            if action.dest == "model_dir":
                action.help = MODEL_ARG_HELP
                action.metavar = "MODEL"
    add_offline_flag(parser)
    return parser


def resolve_models(args: argparse.Namespace) -> None:
    """Model ids (``hearth models list``) become their folders, for every command."""
    from app.models.resolve import model_folder

    for name in ("model_dir", "draft"):
        value = getattr(args, name, None)
        if value is not None:
            setattr(args, name, model_folder(value))


def main(argv: list[str]) -> int:
    startup(argv)  # telemetry opt-outs and the socket guard, before any library is imported
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command is None:
            from app.ui.launch import run_app

            return run_app(smoke_test=args.smoke_test)
        resolve_models(args)
        return int(args.func(args) or 0)
    except HearthError as exc:
        print(f"hearth: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
