"""Work that blocks (fsync, a backlog's parsing) run off the event loop, never left behind by a
cancel, and polite to the loop while it runs.

WHY: an fsync takes milliseconds, during which no other user's turn could run. Handed to a
thread, the caller still waits for it; but a cancelled caller (a /wipe cancels consolidation)
must not let go of its locks while the thread is still writing, or the files it writes could
reappear in a workspace being wiped. So a cancel is held back until the thread is done.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor
from typing import TypeVar

T = TypeVar("T")
PAUSE_EVERY = 64  # items of Python work between two offers of the GIL (see polite)


def polite(items: Iterable[T], every: int = PAUSE_EVERY) -> Iterator[T]:
    """`items`, the GIL offered to other threads every `every` of them.

    WHY: a thread doing Python work (parsing a 20,000-message session, counting its tokens)
    keeps the GIL for up to the switch interval (5 ms) each time the event loop wants it back,
    and the loop wants it for every socket event: another person's answer then waited 0.4 s
    for a backlog loaded in a thread. time.sleep(0) lets a waiting thread take it at once."""
    for number, item in enumerate(items, 1):
        if number % every == 0:
            time.sleep(0)
        yield item


async def in_thread(work: Callable[[], T], executor: Executor | None = None) -> T:
    """`work()` in a thread (of `executor`, else the default one); a cancel of the caller takes
    effect only once it has finished."""
    import asyncio  # (not at the top: polite() serves the commands that run without a loop)

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
