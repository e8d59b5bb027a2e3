"""Stopping a background task for sure.

WHY: one `task.cancel()` is not always enough. On Python 3.11, `asyncio.wait_for` returns its
inner future's result when the cancellation arrives just as that future completes, and the
cancellation is gone; nats-py waits for every request that way. A loop that got such a result
goes on to its next round, and `await task` after the one cancel waits forever (an ingress
whose adopter loop did this never finished closing: one test run in ~25). So the cancel is sent
again until the task is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

RECANCEL_S = 0.1  # how long a cancelled task is given before it is cancelled again


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it is done, cancelling again while it runs on; whatever it
    ends with (a result, its cancellation, an error) is not raised here."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()  # retrieved: never "exception was never retrieved"
