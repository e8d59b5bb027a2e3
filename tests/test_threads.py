"""memory.threads.in_thread: blocking file work off the loop, never abandoned by a cancel."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from memory.threads import in_thread


async def test_a_cancelled_caller_lets_go_only_once_the_work_is_done() -> None:
    started, done = threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        time.sleep(0.3)
        done.set()

    lock = asyncio.Lock()

    async def caller() -> None:
        async with lock:  # what a consolidation holds while it writes
            await in_thread(work)

    task = asyncio.create_task(caller())
    await asyncio.to_thread(started.wait, 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The lock was released only after the thread finished writing.
    assert done.is_set() and not lock.locked()


async def test_the_loop_runs_while_the_work_blocks() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    running = asyncio.create_task(ticker())
    assert await in_thread(lambda: time.sleep(0.2) or 42) == 42
    running.cancel()
    assert ticks >= 5
