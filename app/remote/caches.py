"""The conversation caches of a remote engine: none. The server keeps its own prefix cache
(vLLM's automatic prefix caching, llama-server's slots); the worker's calls are no-ops."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class NoCaches:
    """Matches what the generation worker calls on ``ConversationCaches``."""

    active_id: str | None = None
    parked_ids: list[str] = []  # noqa: RUF012 - always empty, never changed
    parked_bytes = 0

    def best_prefix(self, prompt_ids: Sequence[int],
                    among: Callable[[str], bool] | None = None) -> tuple[str | None, int]:
        return None, 0

    def forget(self, conversation_id: str) -> None:
        pass

    def save_all(self) -> int:
        return 0

    def close(self) -> None:
        pass
