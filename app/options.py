"""Engine options the settings table offers, owned here so that neither points up.

The settings table (:mod:`app.settings`, plumbing) lists the choices and defaults of options
the engine implements; both import them from this leaf:

- :data:`SPECULATION_MODES`: the values of ``GenerationSettings.speculation``
  (:mod:`app.engine.types`), ``hearth chat --speculation`` and the "Speed up replies" setting;
- :data:`CACHE_BUDGET_MB`: the memory parked KV caches may hold together by default: the
  ``kv_snapshot_budget_mb`` setting's default, ``Engine.conversation_caches``'s and the
  server's (``app/server/executor.py``).
"""

from __future__ import annotations

SPECULATION_MODES: tuple[str, ...] = ("auto", "off", "lookup", "draft")
CACHE_BUDGET_MB = 512
CACHE_BUDGET_BYTES = CACHE_BUDGET_MB * 1024 * 1024
