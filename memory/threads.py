"""File work that blocks (fsync) run off the event loop, yet never left behind by a cancel.

WHY: an fsync takes milliseconds, during which no other user's turn could run. Handed to a
thread, the caller still waits for it; but a cancelled caller (a /wipe cancels consolidation)
must not let go of its locks while the thread is still writing, or the files it writes could
reappear in a workspace being wiped. So a cancel is held back until the thread is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")


async def in_thread(work: Callable[[], T], executor: Executor | None = None) -> T:
    """`work()` in a thread (of `executor`, else the default one); a cancel of the caller takes
    effect only once it has finished."""
    future: asyncio.Future[T]
    if executor is None:
        future = asyncio.ensure_future(asyncio.to_thread(work))
    else:
        future = asyncio.get_running_loop().run_in_executor(executor, work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([future])
        raise
