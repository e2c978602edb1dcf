"""One asyncio loop on a thread of its own: the MCP SDK is async, the turn layer is not.

``LoopThread.run(coro, timeout)`` runs a coroutine there from any other thread and waits at
most ``timeout`` seconds (the coroutine is cancelled when the wait runs out). The thread is a
daemon, so a quit at any moment never waits on it; ``stop`` is the clean end (the toolbox
closes its servers first)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "hearth-mcp") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or not self.running:
                loop = asyncio.new_event_loop()
                started = threading.Event()
                thread = threading.Thread(target=self._main, args=(loop, started),
                                          name=self.name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @staticmethod
    def _main(loop: asyncio.AbstractEventLoop, started: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(started.set)
        try:
            loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._ensure())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        """The coroutine's result; ``TimeoutError`` (after cancelling it) past ``timeout``."""
        if self.running and threading.current_thread() is self._thread:
            raise RuntimeError("LoopThread.run called from its own loop")
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError from None
        except BaseException:  # KeyboardInterrupt while waiting: the coroutine must not live on
            future.cancel()
            raise

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop (its unfinished tasks are cancelled) and join the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # already closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout)
