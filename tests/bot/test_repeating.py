"""The typing-indicator loop: repeats, never fails the work, never cuts a request mid-flight."""

from __future__ import annotations

import asyncio
import itertools

from bot.repeating import repeating


async def test_repeats_while_the_work_runs_and_stops_after() -> None:
    calls: list[float] = []

    async def action() -> None:
        calls.append(asyncio.get_running_loop().time())

    async with repeating(action, every_s=0.05), asyncio.timeout(5):
        while len(calls) < 4:  # noqa: ASYNC110 - the action notifies nothing
            await asyncio.sleep(0.01)
    count = len(calls)
    await asyncio.sleep(0.15)  # three intervals: a loop left running would have acted again
    assert len(calls) == count
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    assert min(gaps) >= 0.045, gaps  # every_s apart: a pause is only cut short at the end


async def test_an_action_under_way_is_let_finish() -> None:
    finished: list[bool] = []

    async def slow_request() -> None:
        await asyncio.sleep(0.2)  # a request the server has not answered yet
        finished.append(True)

    async with repeating(slow_request, every_s=10):
        await asyncio.sleep(0.05)
    assert finished == [True]


async def test_a_failing_action_never_fails_the_work() -> None:
    async def refused() -> None:
        raise ConnectionError("the platform said no")

    async with repeating(refused, every_s=0.01):
        await asyncio.sleep(0.05)
        result = "work done"
    assert result == "work done"
