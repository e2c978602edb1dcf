"""``hearth serve [MODEL]``: the model library over an OpenAI-compatible API on this machine;
``hearth serve --remote BASE_URL``: the same server in front of a remote engine
(``gateway.py``)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.server.config import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_QUEUE, ServerConfig
from app.server.errors import ServerConfigError

if TYPE_CHECKING:
    from app.server.executor import ThreadEngineExecutor

API_KEY_ENV = "HEARTH_API_KEY"
REMOTE_KEY_ENV = "HEARTH_REMOTE_API_KEY"
DEFAULT_IDLE_UNLOAD_S = 300.0  # as Ollama's keep_alive: five minutes


def register(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve the installed models over an OpenAI-compatible API "
        "(/v1/chat/completions, /v1/completions, /v1/models): MODEL is loaded first, and a "
        "request naming another installed model loads that one instead (one at a time). "
        "With --remote, serve a remote OpenAI-compatible engine's models instead. Listens "
        "on 127.0.0.1 unless told otherwise; another address needs an API key.")
    serve.add_argument("model_dir", nargs="?", metavar="MODEL",
                       help="model folder (either ONNX layout) or installed model id "
                       "(default: the last used installed model)")
    serve.add_argument("--remote", metavar="BASE_URL",
                       help="serve the models of this OpenAI-compatible server (vLLM, "
                       "llama.cpp, Ollama, another Hearth) instead of local ones")
    serve.add_argument("--remote-model", metavar="ID",
                       help="with --remote: the model served first (default: the first "
                       "the remote lists)")
    serve.add_argument("--remote-key-file", type=Path, metavar="PATH",
                       help=f"with --remote: the remote's API key (default: "
                       f"${REMOTE_KEY_ENV})")
    serve.add_argument("--remote-allow-http", action="store_true",
                       help="with --remote: allow plain http:// to another machine (the "
                       "chats and the key cross the network unencrypted)")
    serve.add_argument("--idle-unload", type=float, default=DEFAULT_IDLE_UNLOAD_S,
                       metavar="SECONDS",
                       help=f"let a model go after this long without a request (default "
                       f"{DEFAULT_IDLE_UNLOAD_S:g}; 0: never); the next request loads it")
    serve.add_argument("--inexact", action="store_true",
                       help="the faster inexact mode: a reply may differ by what the cache "
                       "held (default: a seeded reply is the same cold or warm)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--api-key-file", type=Path, metavar="PATH",
                       help="require 'Authorization: Bearer KEY' with a key from this file "
                       "(one a line; clients of different keys share no cache). Default: "
                       f"the key in ${API_KEY_ENV}")
    serve.add_argument("--api-key", help=f"deprecated: shows the key to every user of this "
                       f"machine in the process list; use ${API_KEY_ENV} or --api-key-file")
    serve.add_argument("--embedder", metavar="ID",
                       help="the embedder POST /v1/embeddings serves, by its id (hearth docs "
                            "embedders; a Hub one must be downloaded first); default the "
                            "starter embedder when it is at hand")
    serve.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                       help=f"requests that may wait while one runs (default {DEFAULT_QUEUE})")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="URL",
                       help="allow browser pages from this origin (repeatable)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="also answer requests addressed to this host name (repeatable; "
                       "localhost, 127.0.0.1 and [::1] always are)")
    serve.add_argument("--ssl-certfile", metavar="CERT.pem",
                       help="serve over TLS (https) with this certificate; for LAN mode")
    serve.add_argument("--ssl-keyfile", metavar="KEY.pem", help="the certificate's private key")
    serve.add_argument("--provider", choices=("cpu", "dml", "cuda", "coreml"))
    serve.add_argument("--variant", help="Optimum graph variant, e.g. model_q4")
    serve.add_argument("--threads", type=int, help="CPU threads for ONNX Runtime")
    serve.set_defaults(func=run_serve)


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """The keys clients must send: from ``--api-key-file``, else the deprecated
    ``--api-key``, else ``$HEARTH_API_KEY`` (empty means none). Surrounding spaces are not part of a
    key."""
    if args.api_key_file is not None:
        try:
            text = args.api_key_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServerConfigError(f"The API key file {args.api_key_file} cannot be read: "
                                    f"{getattr(exc, 'strerror', None) or exc}.") from None
        keys = tuple(line.strip() for line in text.splitlines() if line.strip())
        if not keys:
            raise ServerConfigError(f"The API key file {args.api_key_file} holds no key.",
                                    hint="Write one key a line.")
        return keys
    if args.api_key is not None:
        print(f"Warning: --api-key shows the key in the process list; set ${API_KEY_ENV} "
              "or use --api-key-file instead.", file=sys.stderr, flush=True)
        return (args.api_key.strip(),)  # an empty one is refused with a sentence
    env = os.environ.get(API_KEY_ENV, "").strip()
    return (env,) if env else ()


def remote_key(args: argparse.Namespace) -> str | None:
    """The remote engine's key: from ``--remote-key-file`` (its first line), else
    ``$HEARTH_REMOTE_API_KEY``; None: none is sent."""
    if args.remote_key_file is not None:
        try:
            text = args.remote_key_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServerConfigError(f"The remote key file {args.remote_key_file} cannot be "
                                    f"read: {getattr(exc, 'strerror', None) or exc}.") from None
        key = next((line.strip() for line in text.splitlines() if line.strip()), "")
        if not key:
            raise ServerConfigError(f"The remote key file {args.remote_key_file} holds no "
                                    "key.")
        return key
    return os.environ.get(REMOTE_KEY_ENV, "").strip() or None


def build_executor(args: argparse.Namespace) -> tuple[ThreadEngineExecutor, Callable[[], None]]:
    """The executor ``hearth serve`` runs (not started) and what to close after it."""
    from app.server.executor import ThreadEngineExecutor

    idle = max(0.0, args.idle_unload)
    if args.remote is not None:
        from app.server.gateway import Remote, RemoteModels

        if args.model_dir is not None:
            raise ServerConfigError("Give either a model or --remote, not both.")
        remote = RemoteModels(Remote(args.remote, remote_key(args), args.remote_model,
                                     args.remote_allow_http))
        first = remote.open()
        return ThreadEngineExecutor(models=remote, first=first, idle_unload_s=idle), \
            remote.close
    from app.models.library import ModelLibrary
    from app.server.library import LibraryModels

    def load(path: Path, variant: str | None = None) -> Any:
        from app.engine.engine import Engine
        from app.loading import attach_installed_draft

        engine = Engine.load(path, provider=args.provider, variant=variant,
                             threads=args.threads, exact=not args.inexact)
        attach_installed_draft(engine, path, threads=args.threads)
        return engine

    library = LibraryModels(ModelLibrary(), load)
    wanted = args.model_dir
    if wanted is None:
        default = library.library.default_model()
        if default is None:
            raise ServerConfigError("No model is installed, so there is nothing to serve.",
                                    hint="Give a model folder: hearth serve MODEL_DIR.")
        wanted = default.id
    first = library.find(wanted) if args.variant is None else None
    if first is not None:
        return ThreadEngineExecutor(models=library, first=first, idle_unload_s=idle), \
            lambda: None
    folder = Path(wanted).expanduser()
    return ThreadEngineExecutor(lambda: load(folder, args.variant), models=library,
                                idle_unload_s=idle), lambda: None


def run_serve(args: argparse.Namespace, *, on_ready: Callable[[Any], None] | None = None,
              stop: threading.Event | None = None) -> int:
    """Serve until Ctrl-C (or until ``stop`` is set); ``on_ready(address)`` is called once
    listening."""
    from app.server.app import HearthApi
    from app.server.embeddings import EmbeddingService
    from app.server.runner import ServerRunner

    keys = api_keys(args)
    config = ServerConfig(host=args.host, port=args.port,
                          api_key=keys[0] if keys else None, more_api_keys=keys[1:],
                          queue=args.queue, cors_origins=tuple(args.cors_origin),
                          allowed_hosts=tuple(args.allowed_host),
                          ssl_certfile=args.ssl_certfile,
                          ssl_keyfile=args.ssl_keyfile).validate()
    executor, close = build_executor(args)
    # POST /v1/embeddings on the starter embedder when it is at hand (a gateway only relays)
    embedder = None if args.remote else (
        EmbeddingService.downloaded(args.embedder) if args.embedder
        else EmbeddingService.starter())
    try:
        served = executor.start()
        runner = ServerRunner(HearthApi(executor, config, embedder))
        try:
            address = runner.start()
            where = f" from {args.remote}" if args.remote else ""
            print(f"Serving {served.id}{where} at {address.base_url} (model id "
                  f"'{served.id}'; {'API key required' if config.api_key else 'no API key'})."
                  " Ctrl-C stops.", flush=True)
            if on_ready is not None:
                on_ready(address)
            waiter = stop or threading.Event()
            try:
                while not waiter.wait(0.5):
                    pass
            except KeyboardInterrupt:
                print("Stopping…", flush=True)
        finally:
            runner.stop()
    finally:
        executor.close()
        close()
        if embedder is not None:
            embedder.close()
    return 0
