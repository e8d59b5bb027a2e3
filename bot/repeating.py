"""Repeat an action while a block of work runs: the platforms' "typing…" indicators."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def repeating(action: Callable[[], Awaitable[object]], every_s: float) -> AsyncIterator[None]:
    """Run `action` now and every `every_s` seconds until the body ends.

    An indicator is a courtesy: an action that raises stops repeating, and never fails the body."""

    async def loop() -> None:
        while True:
            await action()
            await asyncio.sleep(every_s)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            log.debug("repeated action stopped: %s", exc)
