"""``hearth docs add|list|rm|search``: document libraries from the command line.

``docs add PATH... [--collection NAME] [--embedder ID] [--json]`` indexes files and folders
(a changed file re-indexes, a deleted one drops out; ``--embedder`` chooses a new library's
embedder, downloading a catalog one first); ``docs list`` (with each library's embedder);
``docs rm NAME [PATH...]``; ``docs search QUERY [--collection NAME] [--top K] [--json]``
prints passages ``{file, page, heading, text, score}``; ``docs embedders`` lists the
embedders a library can use; ``docs embedder NAME ID`` gives a library another embedder and
indexes its files again. Problems with single files are sentences on stderr (the first
``PROBLEMS_SHOWN``, then a count; all of them in ``--json``); the rest still indexes.

A library indexed by an older Hearth (another chunking, or vectors of another embedder
build: ``DocumentLibrary.out_of_date``) stays searchable; ``docs search`` says so once per
library on stderr (one query of the index, no file read), and ``docs add`` of any of its
folders indexes its stale files again.

``chat`` and ``generate`` gain ``--docs NAME`` (repeatable): the engine's CLI sits below the
turn layer, so this module takes those commands over when the flag is given, as
app/tools/cli.py does for ``--tools`` (both flags may be given together). Each turn's
question is searched in the collections, the passages go into the prompt with the user's
message, and the JSON record gains ``sources`` (document, file, location, text, score).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from app.documents.index import MODES

DEFAULT_COLLECTION = "default"
DOCS_COMMANDS = ("chat", "generate")
PROBLEMS_SHOWN = 20  # sentences `docs add` prints before it counts the rest


def register(subparsers: argparse._SubParsersAction) -> None:
    docs = subparsers.add_parser("docs", help="index documents and search them")
    sub = docs.add_subparsers(dest="docs_command", metavar="ACTION", required=True)

    p = sub.add_parser("add", help="index files and folders into a collection")
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument("--collection", default=DEFAULT_COLLECTION, help="collection name")
    p.add_argument("--embedder", metavar="ID",
                   help="a new collection's embedder (hearth docs embedders; default the "
                        "starter embedder)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_add)

    p = sub.add_parser("embedders", help="the embedders a collection can use")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_embedders)

    p = sub.add_parser("embedder", help="give a collection another embedder (re-indexes it)")
    p.add_argument("collection")
    p.add_argument("embedder", metavar="ID")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_embedder)

    p = sub.add_parser("list", help="collections with their files and chunks")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("rm", help="remove a collection, or some of its files and folders")
    p.add_argument("collection")
    p.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_rm)

    p = sub.add_parser("search", help="the passages that best answer a query")
    p.add_argument("query")
    p.add_argument("--collection", action="append", default=[],
                   help="collection to search (repeatable; default: all)")
    p.add_argument("--top", type=int, default=5, help="passages to print (default 5)")
    p.add_argument("--mode", choices=MODES, default="hybrid", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_search)

    for name in DOCS_COMMANDS:
        parser = subparsers.choices.get(name)
        if parser is not None:
            _add_docs_flag(parser)


def _add_docs_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--docs", action="append", metavar="NAME",
                        help="answer from this document collection (repeatable; "
                             "hearth docs list): its passages go into the prompt, and into "
                             "the JSON as sources")
    plain = parser.get_default("func")
    parser.set_defaults(func=lambda args: run_with_docs(args) if args.docs else plain(args))


def run_with_docs(args: argparse.Namespace) -> int:
    """The turn through ``run_turn`` with a ``LibraryRetriever`` over ``--docs`` (and the
    tools of ``--tools``, when given)."""
    from app.documents.retriever import LibraryRetriever
    from app.errors import HearthError
    from app.tools.cli import run_with_tools

    if not hasattr(args, "tools"):
        args.tools = None
    with _open() as library:
        known = {c["name"] for c in library.index.collections()}
        for name in dict.fromkeys(args.docs):
            if name not in known:
                listed = ", ".join(sorted(known)) or "none yet"
                raise HearthError(f"There is no document collection named “{name}” "
                                  f"(collections: {listed}).",
                                  hint="Add files with `hearth docs add PATH --collection "
                                       f"{name}`.")
        retriever = LibraryRetriever(library, list(dict.fromkeys(args.docs)))
        return run_with_tools(args, retriever=retriever)


def _open():
    from app.documents.open import OpenLibrary

    return OpenLibrary(store=_store())


def _store():
    from app.documents.embedders import EmbedderStore
    from app.models.cli import _endpoint, _token

    return EmbedderStore(endpoint=_endpoint(None), token=_token(None))


def _fetch_embedder(embedder_id: str | None) -> None:
    """Download ``embedder_id`` first when it is a catalog embedder not downloaded yet."""
    from app.models.cli import ProgressBar

    store = _store()
    if embedder_id is None or store.is_available(embedder_id):
        return
    store.ensure(embedder_id, progress=ProgressBar())


def cmd_add(args: argparse.Namespace) -> int:
    _fetch_embedder(args.embedder)
    with _open() as library:
        report = library.add(args.paths, args.collection, embedder=args.embedder)
    _say_problems(report.problems, json_too=args.json)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(f"{args.collection}: {len(report.indexed)} indexed ({report.chunks} chunks), "
              f"{len(report.unchanged)} unchanged, {len(report.removed)} removed, "
              f"{len(report.failed)} failed in {report.seconds:.1f} s")
        for note in report.notes:
            print(f"note: {note}")
    nothing = not report.indexed and not report.unchanged
    return 1 if nothing and (report.failed or report.problems) else 0


def _say_problems(problems: list[str], *, json_too: bool) -> None:
    """The first ``PROBLEMS_SHOWN`` sentences on stderr, then how many more (a folder of
    10,000 empty files is not 10,000 lines); ``--json`` holds them all."""
    for problem in problems[:PROBLEMS_SHOWN]:
        print(f"hearth: {problem}", file=sys.stderr)
    more = len(problems) - PROBLEMS_SHOWN
    if more > 0:
        where = "they are all in the JSON" if json_too else "--json lists them all"
        print(f"hearth: … and {more:,} more problems like these ({where}).", file=sys.stderr)


def cmd_list(args: argparse.Namespace) -> int:
    with _open() as library:
        rows = library.index.collections()
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("No document collections yet (hearth docs add PATH...).")
    for row in rows if not args.json else ():
        print(f"{row['name']}: {row['files']} files, {row['chunks']} chunks "
              f"(embedder {row['embedder']})")
        for root in row["roots"]:
            print(f"  {root}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with _open() as library:
        dropped = library.remove(args.collection, args.paths)
    if args.json:
        print(json.dumps({"collection": args.collection, "files_removed": dropped}))
    else:
        print(f"{args.collection}: {dropped} files removed")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    if args.top < 1:
        print("hearth: --top must be at least 1.", file=sys.stderr)
        return 2
    if not args.query.strip():
        print("hearth: the query is empty; say what to search for.", file=sys.stderr)
        return 2
    with _open() as library:
        passages = library.search(args.query, args.collection, top=args.top, mode=args.mode)
        _say_out_of_date(library, args.collection)
    if args.json:
        print(json.dumps([p.to_dict() for p in passages], indent=2))
        return 0
    if not passages:
        print("No passages found.")
    for p in passages:
        where = f" ({p.location()})" if p.location() else ""
        print(f"[{p.score:.4f}] {p.file}{where}\n{p.text}\n")
    return 0


def _say_out_of_date(library, names: list[str]) -> None:
    """One line on stderr per library of ``names`` (default all) indexed by an older recipe."""
    for name, count in library.out_of_date(names, on_disk=False).items():
        cid = library.index.collection_id(name)
        roots = library.index.roots(cid) if cid is not None else []
        where = roots[0] if len(roots) == 1 else "PATH"
        print(f"hearth: the library {name!r} was indexed by an older version of Hearth "
              f"({count:,} files); it is still searched, and hearth docs add {where} "
              f"--collection {name} indexes it again.", file=sys.stderr)


def cmd_embedders(args: argparse.Namespace) -> int:
    choices = _store().choices()
    if args.json:
        print(json.dumps([c.as_dict() for c in choices], indent=2))
        return 0
    for c in choices:
        state = "downloaded" if c.installed else "not downloaded"
        print(f"{c.id}: {c.name}, {c.dims} dimensions, {state}")
    return 0


def cmd_embedder(args: argparse.Namespace) -> int:
    _fetch_embedder(args.embedder)
    with _open() as library:
        report = library.set_embedder(args.collection, args.embedder)
    for problem in report.problems:
        print(f"hearth: {problem}", file=sys.stderr)
    if args.json:
        print(json.dumps({**report.to_dict(), "embedder": args.embedder}, indent=2))
    else:
        print(f"{args.collection}: now embedded by {args.embedder}; {len(report.indexed)} "
              f"files indexed again ({report.chunks} chunks), {len(report.failed)} failed")
    return 0
