"""``hearth models …``, ``hearth import-gguf`` and ``hearth setup-starter``.

``models list|catalog|download|rm|import|search``; ``--json`` prints machine-readable output on
stdout; the download progress bar goes to stderr. A download that was interrupted resumes
when the same command is run again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from app.errors import HearthError
from app.models.downloader import DownloadCancelled, DownloadProgress
from app.models.library import ModelLibrary
from app.units import format_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    models = subparsers.add_parser("models", help="list, download, remove and import models")
    sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p = sub.add_parser("list", help="installed models with their size on disk")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("catalog", help="models you can download, and whether they fit")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument(
        "--provider",
        choices=("cpu", "dml", "cuda"),
        help="choose variants for this execution provider",
    )
    p.set_defaults(func=cmd_catalog)

    p = sub.add_parser(
        "download", help="download a catalog model or any ONNX Hub repo (resumes if interrupted)"
    )
    p.add_argument("id", help="catalog id, or a Hub repo id (ORG/REPO)")
    p.add_argument(
        "--variant",
        help="provider (cpu, dml, cuda) or variant: a catalog variant name, a genai folder, "
        "an Optimum graph (model_q4) or precision (q4)",
    )
    _hub_options(p)
    p.set_defaults(func=cmd_download)

    p = sub.add_parser("rm", help="remove an installed model")
    p.add_argument("id")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("update", help="convert an imported GGUF model again in the current "
                       "forms, from its file (keeps its id, settings and chats)")
    p.add_argument("id")
    p.set_defaults(func=cmd_update)

    p = sub.add_parser("import", help="register a local model folder in place (not copied)")
    p.add_argument("path", type=Path)
    p.add_argument("--name", help="display name")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("search", help="search the Hub for ONNX text-generation models")
    p.add_argument("query")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print JSON")
    _hub_options(p)
    p.set_defaults(func=cmd_search)

    p = subparsers.add_parser("import-gguf", help="convert a GGUF file into an installed model")
    p.add_argument("file", type=Path)
    p.add_argument("--precision", choices=("native", "int4", "fp16", "fp32"), default="native")
    p.add_argument("--name", help="display name (and model id)")
    p.add_argument("--attention", choices=("grouped", "classic"), default=None,
                   help="attention form of the converted graph (default: grouped where the "
                        "model's architecture allows it, else classic GroupQueryAttention)")
    p.add_argument("--json", action="store_true", help='print {"id", "path"}')
    p.set_defaults(func=cmd_import_gguf)

    p = subparsers.add_parser("setup-starter", help="install the bundled starter model")
    p.set_defaults(func=cmd_setup_starter)


def _hub_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--endpoint",
        help="Hub or mirror URL (default: the hub_endpoint setting, else HF_ENDPOINT or the Hub)",
    )
    parser.add_argument("--token", help="Hugging Face access token (default: HF_TOKEN)")


def _print_json(data) -> None:
    print(json.dumps(data, indent=2))


# -- commands ------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    library = ModelLibrary()
    models = library.list_models()
    if args.json:
        _print_json([m.as_dict() for m in models])
        return 0
    if not models:
        print("No models installed. Try: hearth models catalog")
        return 0
    default = library.default_model()
    for model in models:
        mark = "*" if default is not None and model.id == default.id else " "
        kind = "linked" if model.linked else model.source_kind
        size = format_bytes(model.size_on_disk)
        print(f"{mark} {model.id:32} {size:>10}  {kind:6}  {model.path}")
        if (note := _update_note(model)):
            print(f"    {note}")
    return 0


def _update_note(model) -> str:
    """What ``models list`` says under an import converted in an older form."""
    from app.models.gguf import update  # no onnx

    state = update.check_model(model)
    if state.can_update:
        return f"an older conversion: 'hearth models update {model.id}' brings it up to date"
    return state.sentence


def cmd_update(args: argparse.Namespace) -> int:
    from app.models.gguf import update

    library = ModelLibrary()
    model = library.require(args.id)
    state = update.check_model(model)
    if state.status == update.CURRENT:
        print(f"{model.name} is up to date.")
        return 0
    updated = update.update_model(library, model, progress=_report)
    sys.stderr.write("\n")
    print(f"Updated {updated.name} ('{updated.id}') to the current conversion.")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    library = ModelLibrary()
    machine = library.machine(args.provider)
    rows = [
        {
            **choice.entry.as_dict(),
            "installed": choice.installed,
            "chosen_variant": choice.variant.name,
            "fit": {"level": choice.fit.level, "reasons": list(choice.fit.reasons)},
        }
        for choice in library.catalog_entries(machine)
    ]
    if args.json:
        _print_json({"provider": machine.provider, "models": rows})
        return 0
    for row in rows:
        state = "installed" if row["installed"] else row["fit"]["level"]
        variant = next(v for v in row["variants"] if v["name"] == row["chosen_variant"])
        print(
            f"{row['id']:28} {row['chosen_variant']:11} {format_bytes(variant['size_bytes']):>9}  "
            f"{row['license']:11} {state}"
        )
        for reason in row["fit"]["reasons"]:
            print(f"{'':30}- {reason}")
    return 0


class ProgressBar:
    """A one-line text progress bar on stderr."""

    def __init__(self, stream=None, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.width = width
        self._last_len = 0

    def __call__(self, p: DownloadProgress) -> None:
        if p.state in ("retrying", "waiting") and p.message:
            self._line(f"{p.model_id}: {p.message}", newline=True)
            return
        filled = int(self.width * p.fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        rate = f"{format_bytes(p.rate_bps)}/s" if p.rate_bps else ""
        eta = f"ETA {int(p.eta_s // 60)}:{int(p.eta_s % 60):02d}" if p.eta_s else ""
        text = (
            f"{p.model_id} [{bar}] {p.fraction * 100:5.1f}% "
            f"{format_bytes(p.bytes_done)}/{format_bytes(p.bytes_total)} {rate} {eta} {p.state}"
        )
        self._line(text, newline=p.state == "done")

    def _line(self, text: str, *, newline: bool = False) -> None:
        pad = " " * max(self._last_len - len(text), 0)
        self.stream.write("\r" + text + pad + ("\n" if newline else ""))
        self.stream.flush()
        self._last_len = 0 if newline else len(text)


def _endpoint(explicit: str | None) -> str | None:
    """``--endpoint``, else the saved ``hub_endpoint`` setting, else None (HF_ENDPOINT or the
    Hub); a malformed address is refused here, before any connection."""
    from app.models.hub import validate_endpoint
    from app.paths import settings_path
    from app.settings import Settings

    if explicit is not None:
        return validate_endpoint(explicit, "--endpoint")
    saved = Settings().get("hub_endpoint")
    if isinstance(saved, str) and saved.strip():
        return validate_endpoint(saved, f"The hub_endpoint setting in {settings_path()}")
    return None


def cmd_download(args: argparse.Namespace) -> int:
    library = ModelLibrary(endpoint=_endpoint(args.endpoint), token=_token(args.token))
    entry = library.catalog().find(args.id)
    if entry is not None and (existing := library.get(entry.id)) is not None:
        print(f"{entry.name} is already installed at {existing.path}")
        return 0
    plan = library.plan_download(args.id, variant=args.variant)
    if entry is None and (existing := library.get(plan.model_id)) is not None:
        print(f"{plan.name} is already installed at {existing.path}")
        return 0
    bar = ProgressBar()
    started = time.monotonic()
    try:
        model = library.download(plan, progress=bar)
    except KeyboardInterrupt:
        sys.stderr.write("\nInterrupted: run the same command again to resume.\n")
        return 130
    except DownloadCancelled:
        return 130
    except HearthError:
        sys.stderr.write("\n")
        raise
    elapsed = time.monotonic() - started
    print(f"Installed {model.name} ({plan.variant.name}) in {elapsed:.0f} s at {model.path}")
    return 0


def _token(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    try:
        from huggingface_hub import get_token

        return get_token()
    except Exception:  # no saved token is not an error
        return None


def cmd_rm(args: argparse.Namespace) -> int:
    library = ModelLibrary()
    model = library.require(args.id)
    library.remove(args.id)
    if model.linked:
        print(f"Removed {model.id} from the list (its folder {model.path} was left in place).")
    else:
        print(f"Removed {model.id} and freed {format_bytes(model.size_on_disk)}.")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    model = ModelLibrary().import_folder(args.path, name=args.name)
    if args.json:
        _print_json(model.as_dict())
    else:
        print(f"Imported {model.name} as '{model.id}' (files stay in {model.path}).")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from app.models.hub import HubClient

    hub = HubClient(_endpoint(args.endpoint), _token(args.token))
    results = hub.search(args.query, limit=args.limit)
    if args.json:
        _print_json([r.as_dict() for r in results])
        return 0
    if not results:
        print("No ONNX text-generation models found.")
    for r in results:
        print(
            f"{r.id:50} {format_bytes(r.size_bytes):>9}  {r.license or '?':12} "
            f"{r.downloads or 0:>9} downloads"
        )
        if r.reason:
            print(f"    cannot run here: {r.reason}")
    return 0


def _report(*values) -> None:
    """Progress from the GGUF converter / starter setup: (fraction, message) or anything."""
    if len(values) == 2 and isinstance(values[0], float):
        text = f"{values[0] * 100:5.1f}% {values[1]}"
    else:
        text = " ".join(str(v) for v in values)
    sys.stderr.write("\r" + text[:100].ljust(100))
    sys.stderr.flush()


def cmd_import_gguf(args: argparse.Namespace) -> int:
    from app.models.gguf.grouped_attention import ATTENTION_NAMES  # numpy only, no onnx

    library = ModelLibrary()
    before = {m.id: m.manifest.extra.get("updated_at") for m in library.list_models()}
    model = library.import_gguf(
        args.file, precision=args.precision, name=args.name,
        progress=None if args.json else _report,
        attention=ATTENTION_NAMES[args.attention] if args.attention else None,
    )
    updated = model.id in before and before[model.id] != model.manifest.extra.get("updated_at")
    if args.json:
        _print_json({"id": model.id, "path": str(model.path), "updated": updated})
    else:
        sys.stderr.write("\n")
        if updated:  # installed in an older form: converted again in place
            sys.stderr.write(f"{model.name} was installed in an older conversion; it is "
                             "updated in place (same id, settings and chats).\n")
        print(model.path)
    return 0


def cmd_setup_starter(args: argparse.Namespace) -> int:
    from app.models.starter import ensure_starter  # the starter model module, loaded lazily

    result = ensure_starter(_report)
    sys.stderr.write("\n")
    path = getattr(result, "path", result)
    print(path)
    return 0
