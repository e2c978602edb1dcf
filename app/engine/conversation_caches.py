"""Many conversations' KV caches for one loaded model: branch tips in a memory LRU, plus
disk snapshots.

The engine decodes over whichever cache it is handed (``Engine.chat(..., caches=...,
conversation_id=...)``); this object decides which caches stay alive.

A conversation may keep a few *branch tips*: Edit and Regenerate make versions of a chat
that share a prefix and then differ, and the cache of the version left behind is kept
(up to ``tips_per_conversation`` tips, the active one included) so that switching back to it
prefills only the new turn. When a prompt arrives (``get(cid, prompt_ids=...)``), the tip
of that conversation sharing the longest prefix with it becomes the *active* cache; when the
prompt is another version of that tip (a regenerate, an edit), the shared prefix is copied
into a new active cache and the tip itself stays parked. A prompt is another version when it
leaves the tip before the tip's end, ends before it, and does not contain the tip's last
tokens; a prompt that re-renders the tip's last reply differently (text that re-tokenizes
otherwise, a thinking block the template drops) continues the tip, which is trimmed in
place. A tip is forked only when it would otherwise lose at least ``min_branch_tokens``
tokens — a smaller tail is cheaper to prefill again than to hold twice —, and a parked tip
whose tokens another tip of its conversation covers (up to ``min_branch_tokens``) is
dropped as redundant. Forking copies host arrays, so
only ``exportable`` caches fork (CPU, float32/float16, no sliding window); the others keep
one tip per conversation, trimmed in place as before.

The active cache is never counted against the budget; every other tip is *parked*, least
recent first across all conversations, and the oldest leave memory once the parked ones hold
more than ``budget_bytes``. Disk snapshots stay one per conversation: a tip leaving memory is
written to disk (when a ``SnapshotStore`` is given) only when it is its conversation's last
tip in memory, and ``save_all`` writes each conversation's most recent tip.

Its owner is whoever serves conversations (the generation worker, an HTTP server): it is
made for one engine by ``Engine.conversation_caches`` and is useless with another model.
Stateless clients resend the whole conversation each turn; ``best_prefix`` finds the cached
conversation that shares the longest token prefix with such a prompt.

Not thread-safe: the engine's owner thread uses it.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence

from app.engine.kv_cache import ImageKey, KVCache
from app.engine.kv_snapshot import SnapshotStore

#: ``new_cache(window)``: an empty cache for the engine's graph; ``window`` asks for a
#: sliding-window cache.
CacheFactory = Callable[[bool], KVCache]

#: Tips one conversation keeps in memory by default, the active one included.
TIPS_PER_CONVERSATION = 3
#: Tokens a tip must hold beyond the shared prefix to be kept as a branch of its own.
MIN_BRANCH_TOKENS = 16

_Key = tuple[str, int]  # (conversation id, tip serial)
_ENDING = 4  # the last tokens of a tip that a prompt continuing it repeats


def reusable_prefix(cache: KVCache, prompt_ids: Sequence[int],
                    images: Sequence[ImageKey] = ()) -> int:
    """The tokens of ``cache`` a run of ``prompt_ids`` (with ``images`` behind its
    placeholders) can reuse: the shared prefix, less the prompt's last token (which must run
    for its logits), at a point the cache can rewind to (what ``generation.reuse_prefix``
    will cut to)."""
    return cache.rewind_point(cache.shared_with_prompt(prompt_ids, images))


def continues(cache: KVCache, prompt_ids: Sequence[int], shared: int) -> bool:
    """Whether ``prompt_ids`` continues ``cache`` rather than being another version of it:
    it reaches past the cache's end, or holds the cache's last few tokens after ``shared``
    (the last reply, re-rendered)."""
    if len(prompt_ids) >= len(cache):
        return True
    end = list(cache.tokens[max(shared, len(cache) - _ENDING):])
    rest = prompt_ids[shared:]
    return any(list(rest[i:i + len(end)]) == end for i in range(len(rest) - len(end) + 1))


def _covers(longer: KVCache, shorter: KVCache, slack: int) -> bool:
    """Whether ``longer`` holds all but at most ``slack`` of ``shorter``'s tokens."""
    return longer.common_prefix(shorter.tokens, shorter.images) >= len(shorter) - slack


class ConversationCaches:
    """Conversation id → branch-tip KV caches, within a memory budget, optionally on disk."""

    def __init__(self, new_cache: CacheFactory, *, budget_bytes: int,
                 snapshots: SnapshotStore | None = None,
                 tips_per_conversation: int = TIPS_PER_CONVERSATION,
                 min_branch_tokens: int = MIN_BRANCH_TOKENS) -> None:
        """``budget_bytes``: memory the parked (not active) tips may hold together;
        ``tips_per_conversation``: tips kept per conversation, the active one included
        (1: one cache per conversation, trimmed in place on every branch)."""
        if budget_bytes < 0:
            raise ValueError("the budget cannot be negative")
        if tips_per_conversation < 1:
            raise ValueError("a conversation keeps at least one tip")
        self._new_cache = new_cache
        self.budget_bytes = budget_bytes
        self.snapshots = snapshots
        self.tips_per_conversation = tips_per_conversation
        self.min_branch_tokens = min_branch_tokens
        self._serial = itertools.count()
        self._active_key: _Key | None = None
        self._active: KVCache | None = None
        self._parked: OrderedDict[_Key, KVCache] = OrderedDict()

    def get(self, conversation_id: str, *, window: bool = False,
            prompt_ids: Sequence[int] | None = None,
            images: Sequence[ImageKey] = ()) -> KVCache:
        """The cache to run ``conversation_id``'s next turn over, now the active one.

        With ``prompt_ids`` (the rendered prompt), the conversation's tip sharing the
        longest reusable prefix with it; forked when the prompt leaves it early (see the
        module docstring). Without, its most recent tip. From memory, else from a disk
        snapshot, else a new empty cache. ``window`` says whether a sliding-window cache is
        wanted; a cache of the other kind is replaced by an empty one (the context policy
        changed). ``images``: the images behind the prompt's placeholder tokens (a prefix
        is shared only up to the first image whose hash differs). The previously active tip
        is parked, and the budget enforced."""
        self._park_active()
        tips = self._parked_tips(conversation_id)
        if not tips:
            key, cache = self._new_key(conversation_id), self._new_cache(window)
            if self.snapshots is not None and not window:
                self.snapshots.load(conversation_id, cache)
        elif prompt_ids is None:
            key, cache = tips[0]
        else:  # ties go to the most recent tip (max keeps the first)
            key, cache = max(tips, key=lambda tip: reusable_prefix(tip[1], prompt_ids, images))
        self._parked.pop(key, None)
        if (cache.window is not None) != window:
            cache = self._new_cache(window)
        elif prompt_ids is not None:
            shared = reusable_prefix(cache, prompt_ids, images)
            branch = None if continues(cache, prompt_ids, shared) else \
                self._branch(cache, shared)
            if branch is not None:  # the tip stays parked, as recent as the new branch
                self._parked[key] = cache
                key, cache = self._new_key(conversation_id), branch
        self._active_key, self._active = key, cache
        self._limit_tips(conversation_id)
        self._enforce_budget()
        return cache

    def best_prefix(self, prompt_ids: Sequence[int],
                    among: Callable[[str], bool] | None = None,
                    images: Sequence[ImageKey] = ()) -> tuple[str | None, int]:
        """The cached conversation (any tip, active or parked in memory) sharing the longest
        token prefix with ``prompt_ids``, and that prefix's length; ``(None, 0)`` when none
        shares even the first token. Ties go to the most recently used. The prefix is what
        the cache can really be rewound to (a recurrent cache: its checkpoint at or before the
        shared tokens). ``among(conversation_id)``: only the conversations it accepts are
        considered (a server's clients that must not share a cache). ``images``: the images
        behind the prompt's placeholders; a cache holding other images there shares only the
        tokens before them."""
        best_id, best = None, 0
        for (conversation_id, _), cache in self._by_recency():
            if among is not None and not among(conversation_id):
                continue
            common = cache.rewind_point(cache.common_prefix(prompt_ids, images))
            if common > best:
                best_id, best = conversation_id, common
        return best_id, best

    def forget(self, conversation_id: str) -> None:
        """Drop every tip of a conversation from memory, and its snapshot from disk (the chat
        was deleted)."""
        for key, _ in self._parked_tips(conversation_id):
            del self._parked[key]
        if conversation_id == self.active_id:
            self._active_key, self._active = None, None
        if self.snapshots is not None:
            self.snapshots.delete(conversation_id)

    def tips(self, conversation_id: str) -> list[KVCache]:
        """The conversation's caches in memory, most recent first (the active one first when
        it is this conversation's). For reading: hand them to no decoder."""
        return [cache for (cid, _), cache in self._by_recency() if cid == conversation_id]

    @property
    def parked_ids(self) -> list[str]:
        """Conversations other than the active one with a tip parked in memory, least recent
        first (by each one's most recent tip)."""
        order = [cid for cid, _ in reversed(self._parked)]
        seen = list(dict.fromkeys(cid for cid in order if cid != self.active_id))
        return list(reversed(seen))

    @property
    def active_id(self) -> str | None:
        return None if self._active_key is None else self._active_key[0]

    @property
    def parked_bytes(self) -> int:
        return sum(cache.nbytes for cache in self._parked.values())

    def save_all(self) -> int:
        """Write each conversation's most recent tip in memory to disk (where long enough);
        returns how many."""
        if self.snapshots is None:
            return 0
        latest: dict[str, KVCache] = {}
        for (cid, _), cache in self._by_recency():
            latest.setdefault(cid, cache)
        return sum(self.snapshots.save(cid, cache) for cid, cache in latest.items())

    def close(self) -> None:
        """Save what can be saved, then let every cache go (the model is unloaded)."""
        self.save_all()
        self._parked.clear()
        self._active_key, self._active = None, None

    # -- internals -----------------------------------------------------------------------

    def _new_key(self, conversation_id: str) -> _Key:
        return conversation_id, next(self._serial)

    def _by_recency(self) -> list[tuple[_Key, KVCache]]:
        items = list(reversed(self._parked.items()))
        if self._active_key is not None and self._active is not None:
            items.insert(0, (self._active_key, self._active))
        return items

    def _parked_tips(self, conversation_id: str) -> list[tuple[_Key, KVCache]]:
        """The conversation's parked tips, most recent first."""
        return [(key, cache) for key, cache in reversed(self._parked.items())
                if key[0] == conversation_id]

    def _park_active(self) -> None:
        key, cache = self._active_key, self._active
        self._active_key, self._active = None, None
        if key is None or cache is None or not len(cache):
            return
        slack = self.min_branch_tokens
        for other_key, other in self._parked_tips(key[0]):
            if _covers(cache, other, slack):
                del self._parked[other_key]  # the tip just used holds it all
            elif _covers(other, cache, slack):
                self._parked.move_to_end(other_key)  # it holds all of this one: it is the tip
                return
        self._parked[key] = cache

    def _branch(self, tip: KVCache, shared: int) -> KVCache | None:
        """A new cache holding ``tip``'s first ``shared`` tokens, or None when ``tip`` should
        simply be trimmed (too little would be lost, no room for another tip, or it cannot
        be copied)."""
        if (self.tips_per_conversation < 2 or len(tip) - shared < self.min_branch_tokens
                or tip.window is not None or tip.feeds_whole_sequence or not tip.exportable):
            return None
        branch = self._new_cache(False)
        if shared:
            try:
                arrays = tip.export_arrays()
            except NotImplementedError:
                return None
            branch.import_arrays(list(tip.tokens[:shared]), [a[:, :, :shared] for a in arrays])
            branch.note_images(tip.images)
        return branch

    def _limit_tips(self, conversation_id: str) -> None:
        """Drop the conversation's oldest parked tips beyond its share (never to disk: a newer
        tip of it stays in memory)."""
        tips = self._parked_tips(conversation_id)
        for key, _ in tips[self.tips_per_conversation - 1:]:
            del self._parked[key]

    def _enforce_budget(self) -> None:
        total = self.parked_bytes
        while self._parked and total > self.budget_bytes:
            (conversation_id, _), oldest = self._parked.popitem(last=False)
            total -= oldest.nbytes
            if self.snapshots is not None and not self.tips(conversation_id):
                self.snapshots.save(conversation_id, oldest)
