"""``hearth serve MODEL_DIR``: the model over an OpenAI-compatible API on this machine."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.server.config import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_QUEUE, ServerConfig
from app.server.errors import ServerConfigError

API_KEY_ENV = "HEARTH_API_KEY"


def register(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API",
        description="Serve a model folder over an OpenAI-compatible API "
        "(/v1/chat/completions, /v1/completions, /v1/models). Listens on 127.0.0.1 unless "
        "told otherwise; another address needs an API key.")
    serve.add_argument("model_dir", type=Path, help="model folder (either ONNX layout)")
    serve.add_argument("--host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--api-key-file", type=Path, metavar="PATH",
                       help="require 'Authorization: Bearer KEY' with a key from this file "
                       "(one a line; clients of different keys share no cache). Default: "
                       f"the key in ${API_KEY_ENV}")
    serve.add_argument("--api-key", help=f"deprecated: shows the key to every user of this "
                       f"machine in the process list; use ${API_KEY_ENV} or --api-key-file")
    serve.add_argument("--queue", type=int, default=DEFAULT_QUEUE,
                       help=f"requests that may wait while one runs (default {DEFAULT_QUEUE})")
    serve.add_argument("--cors-origin", action="append", default=[], metavar="URL",
                       help="allow browser pages from this origin (repeatable)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="also answer requests addressed to this host name (repeatable; "
                       "localhost, 127.0.0.1 and [::1] always are)")
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


def run_serve(args: argparse.Namespace, *, on_ready: Callable[[Any], None] | None = None,
              stop: threading.Event | None = None) -> int:
    """Serve until Ctrl-C (or until ``stop`` is set); ``on_ready(address)`` is called once
    listening."""
    from app.engine.engine import Engine
    from app.server.app import HearthApi
    from app.server.embeddings import EmbeddingService
    from app.server.executor import ThreadEngineExecutor
    from app.server.runner import ServerRunner

    keys = api_keys(args)
    config = ServerConfig(host=args.host, port=args.port,
                          api_key=keys[0] if keys else None, more_api_keys=keys[1:],
                          queue=args.queue, cors_origins=tuple(args.cors_origin),
                          allowed_hosts=tuple(args.allowed_host)).validate()
    executor = ThreadEngineExecutor(lambda: Engine.load(
        args.model_dir, provider=args.provider, variant=args.variant, threads=args.threads))
    served = executor.start()
    embedder = EmbeddingService.starter()  # POST /v1/embeddings when it is at hand
    runner = ServerRunner(HearthApi(executor, config, embedder))
    try:
        address = runner.start()
        print(f"Serving {served.id} at {address.base_url} (model id '{served.id}'; "
              f"{'API key required' if config.api_key else 'no API key'}). Ctrl-C stops.",
              flush=True)
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
        executor.close()
        if embedder is not None:
            embedder.close()
    return 0
