"""Which engine a model path loads, with the user's settings: the worker's default loader.

Plain Python (no Qt): the generation worker (``app/workers``) calls these on its own thread,
and anything else that turns a model path into a running engine can too.

- :func:`default_loader`: an ``Engine`` on the provider and thread count the settings ask
  for, with its installed draft model attached, or a ``RemoteEngine`` for a
  ``remote:<source-id>/<model-id>`` path;
- :func:`attach_installed_draft`: the draft ``ModelLibrary.draft_for`` names;
- :func:`default_caches`: the conversation caches within the ``kv_snapshot_budget_mb``
  setting, long chats parked on disk under the cache folder.

The engine, the remote client and the library are imported when a model loads, not with
this module (the engine pulls in onnxruntime).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import HearthError
from app.paths import cache_dir
from app.settings import Settings

if TYPE_CHECKING:
    from app.engine.conversation_caches import ConversationCaches
    from app.engine.engine import Engine
    from app.remote.engine import RemoteEngine


def default_loader(path: Path) -> Engine | RemoteEngine:
    """Load a real engine on the provider and thread count the settings ask for (imported
    lazily: the engine module pulls in onnxruntime), or a ``RemoteEngine`` for
    ``remote:<source-id>/<model-id>`` (app/remote)."""
    from app.remote.sources import is_remote_target

    if is_remote_target(path):
        from app.remote.engine import RemoteEngine

        return RemoteEngine.load(str(path))
    from app.engine.engine import Engine

    settings = Settings()
    provider = settings.get("provider")
    threads = settings.get("cpu_threads") or None
    # the prompt session opens after the model shows as loaded (on_load_requested)
    engine = Engine.load(path, provider=None if provider == "auto" else provider, threads=threads,
                         prompt_session=False, exact=settings.get("exact_replies"))
    attach_installed_draft(engine, path, threads=threads)
    return engine


def attach_installed_draft(engine: Engine, path: Path, *, threads: int | None = None) -> None:
    """Give ``engine`` (an ``app.engine.engine.Engine``) the draft model its catalog entry
    names, when that model is installed (``ModelLibrary.draft_for``). A draft that fails to
    load leaves the model without one, and the model's notes say why."""
    from app.models.library import ModelLibrary  # the catalog's draft field

    draft = ModelLibrary().draft_for(path)
    if draft is None:
        return
    try:
        engine.attach_draft(draft.path, threads=threads)
    except HearthError as exc:
        note = f"The draft model {draft.name} was not used: {exc}"
        engine.spec = replace(engine.spec, notes=(*engine.spec.notes, note))


def default_caches(engine: Engine | RemoteEngine) -> ConversationCaches:
    """The engine's conversation caches within the user's memory budget, long chats kept
    on disk under the cache folder."""
    budget = Settings().get("kv_snapshot_budget_mb") * 1024 * 1024
    return engine.conversation_caches(budget_bytes=budget, snapshot_folder=cache_dir() / "kv")
