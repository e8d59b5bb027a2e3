"""Work the agent runs after an answer (consolidation, filing a conversation after /new), by the
person it belongs to: /forget waits for a person's, /wipe cancels them, a stop waits for all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)


class BackgroundWork:
    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], str] = {}
        self._held: dict[str, int] = {}  # people an exclusive() waits for: no new drain starts

    @contextlib.contextmanager
    def holding(self, user_keys: Iterable[str]) -> Iterator[None]:
        """While a block waits for these people's work to end (bot/agent/residency.py), no new
        consolidation of theirs begins (`held`): a person who keeps talking started a new one
        after each turn, and a backup waited for a moment with none, for ever."""
        keys = list(user_keys)
        for key in keys:
            self._held[key] = self._held.get(key, 0) + 1
        try:
            yield
        finally:
            for key in keys:
                self._held[key] -= 1
                if not self._held[key]:
                    del self._held[key]

    def held(self, user_key: str) -> bool:
        return user_key in self._held

    def start(self, coro: Coroutine[Any, Any, Any], user_key: str) -> None:
        """Run tracked: a failure is logged, never lost silently."""
        task = asyncio.create_task(coro)
        self._tasks[task] = user_key
        task.add_done_callback(self._done)

    def of(self, user_key: str) -> list[asyncio.Task[Any]]:
        return [task for task, key in self._tasks.items() if key == user_key]

    def has(self, user_key: str) -> bool:
        return user_key in self._tasks.values()

    async def wait_all(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            log.error("background consolidation failed", exc_info=task.exception())
