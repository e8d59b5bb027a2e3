"""Repeat an action while a block of work runs: the platforms' "typing…" indicators."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

log = logging.getLogger(__name__)

# How long the end of the block waits for an action already under way.
FINISH_TIMEOUT_S = 5.0


@contextlib.asynccontextmanager
async def repeating(
    action: Callable[[], Awaitable[object]], every_s: float, until: asyncio.Event | None = None
) -> AsyncIterator[None]:
    """Run `action` now and every `every_s` seconds until the body ends (or `until` is set:
    "typing…" stops once the answer itself shows).

    An indicator is a courtesy: an action that raises stops repeating, and never fails the body.
    At the end, a pause between actions is cut short, but an action under way is let finish:
    cancelling an HTTP request mid-flight can strand its pooled connection (httpcore 1.x)."""
    done = asyncio.Event()

    async def loop() -> None:
        while not done.is_set() and not (until is not None and until.is_set()):
            await action()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), every_s)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        done.set()
        try:
            await asyncio.wait_for(task, FINISH_TIMEOUT_S)
        except TimeoutError:
            log.debug("repeated action still running after %.0f s; cancelled", FINISH_TIMEOUT_S)
        except Exception as exc:
            log.debug("repeated action stopped: %s", exc)
