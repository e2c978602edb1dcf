"""Many conversations' KV caches for one loaded model: memory LRU plus disk snapshots.

The engine decodes over whichever cache it is handed (``Engine.chat(..., caches=...,
conversation_id=...)``); this object decides which caches stay alive. The conversation
used last is *active* and never counted against the budget; the others are *parked*,
least recent first, and the oldest leave memory once the parked ones hold more than
``budget_bytes`` — written to disk first when a ``SnapshotStore`` is given, so they come
back without a prefill.

Its owner is whoever serves conversations (the generation worker, an HTTP server): it is
made for one engine by ``Engine.conversation_caches`` and is useless with another model.
Stateless clients resend the whole conversation each turn; ``best_prefix`` finds the cached
conversation that shares the longest token prefix with such a prompt.

Not thread-safe: the engine's owner thread uses it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from app.engine.kv_cache import KVCache
from app.engine.kv_snapshot import SnapshotStore

#: ``new_cache(window)``: an empty cache for the engine's graph; ``window`` asks for a
#: sliding-window cache.
CacheFactory = Callable[[bool], KVCache]


class ConversationCaches:
    """Conversation id → KV cache, within a memory budget, optionally backed by disk."""

    def __init__(self, new_cache: CacheFactory, *, budget_bytes: int,
                 snapshots: SnapshotStore | None = None) -> None:
        """``budget_bytes``: memory the parked (not active) caches may hold together."""
        if budget_bytes < 0:
            raise ValueError("the budget cannot be negative")
        self._new_cache = new_cache
        self.budget_bytes = budget_bytes
        self.snapshots = snapshots
        self._active_id: str | None = None
        self._active: KVCache | None = None
        self._parked: OrderedDict[str, KVCache] = OrderedDict()

    def get(self, conversation_id: str, *, window: bool = False) -> KVCache:
        """The cache of ``conversation_id``, now the active one.

        From memory, else from a disk snapshot, else a new empty cache. ``window`` says
        whether a sliding-window cache is wanted; a cache of the other kind is replaced by
        an empty one (the context policy changed). The previously active conversation is
        parked, and the budget enforced."""
        if conversation_id != self._active_id:
            self._park_active()
            cache = self._parked.pop(conversation_id, None)
            if cache is None:
                cache = self._new_cache(window)
                if self.snapshots is not None and not window:
                    self.snapshots.load(conversation_id, cache)
            self._active_id, self._active = conversation_id, cache
            self._enforce_budget()
        assert self._active is not None
        if (self._active.window is not None) != window:
            self._active = self._new_cache(window)
        return self._active

    def best_prefix(self, prompt_ids: Sequence[int]) -> tuple[str | None, int]:
        """The cached conversation (active or parked in memory) sharing the longest token
        prefix with ``prompt_ids``, and that prefix's length; ``(None, 0)`` when none
        shares even the first token. Ties go to the most recently used. The prefix is what
        the cache can really be rewound to (a recurrent cache: its checkpoint at or before the
        shared tokens)."""
        best_id, best = None, 0
        for conversation_id, cache in self._by_recency():
            common = cache.rewind_point(cache.common_prefix(prompt_ids))
            if common > best:
                best_id, best = conversation_id, common
        return best_id, best

    def forget(self, conversation_id: str) -> None:
        """Drop a conversation's cache from memory and disk (the chat was deleted)."""
        self._parked.pop(conversation_id, None)
        if conversation_id == self._active_id:
            self._active_id, self._active = None, None
        if self.snapshots is not None:
            self.snapshots.delete(conversation_id)

    @property
    def parked_ids(self) -> list[str]:
        """Conversations whose cache is parked in memory, least recent first."""
        return list(self._parked)

    @property
    def active_id(self) -> str | None:
        return self._active_id

    @property
    def parked_bytes(self) -> int:
        return sum(cache.nbytes for cache in self._parked.values())

    def save_all(self) -> int:
        """Write every cache in memory to disk (where long enough); returns how many."""
        if self.snapshots is None:
            return 0
        return sum(self.snapshots.save(cid, cache) for cid, cache in self._by_recency())

    def close(self) -> None:
        """Save what can be saved, then let every cache go (the model is unloaded)."""
        self.save_all()
        self._parked.clear()
        self._active_id, self._active = None, None

    def _by_recency(self) -> list[tuple[str, KVCache]]:
        items = list(reversed(self._parked.items()))
        if self._active_id is not None and self._active is not None:
            items.insert(0, (self._active_id, self._active))
        return items

    def _park_active(self) -> None:
        if self._active_id is not None and self._active is not None and len(self._active):
            self._parked[self._active_id] = self._active
            self._parked.move_to_end(self._active_id)
        self._active_id, self._active = None, None

    def _enforce_budget(self) -> None:
        total = self.parked_bytes
        while self._parked and total > self.budget_bytes:
            conversation_id, oldest = self._parked.popitem(last=False)
            total -= oldest.nbytes
            if self.snapshots is not None:
                self.snapshots.save(conversation_id, oldest)
