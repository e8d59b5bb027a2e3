"""bot.tasks: a background task is stopped even when a library swallowed its cancellation."""

from __future__ import annotations

import asyncio

from bot.tasks import cancel_and_wait


async def test_a_task_that_swallowed_one_cancellation_is_stopped() -> None:
    rounds = 0

    async def loop_over_a_library_that_swallows_a_cancel() -> None:
        # As a loop over nats-py requests does when asyncio.wait_for (3.11) returns the result
        # of a request that completed as the cancellation arrived: the loop goes on.
        nonlocal rounds
        while True:
            rounds += 1
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if rounds == 1:
                    continue  # swallowed, once
                raise

    task = asyncio.create_task(loop_over_a_library_that_swallows_a_cancel())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 5)
    assert task.cancelled() and rounds == 2


async def test_a_task_that_ends_with_an_error_when_cancelled_raises_nothing_here() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.create_task(fails_on_cancel())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), RuntimeError)


async def test_a_finished_task_is_left_as_it_is() -> None:
    async def done() -> int:
        return 7

    task = asyncio.create_task(done())
    await task
    await cancel_and_wait(task)
    assert task.result() == 7
