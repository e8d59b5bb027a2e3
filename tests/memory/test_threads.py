"""memory.threads.in_thread: blocking file work off the loop, never abandoned by a cancel; and
the writes that use it (edit_memory) leave the loop free."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from memory.threads import in_thread
from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call


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


async def test_an_edit_of_memory_md_never_stalls_the_loop(
    fake_llm: FakeOpenAI, workspaces_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk (fsync 0.3 s) under edit_memory: other people's turns must go on meanwhile.

    The loop must tick while each fsync runs (one on the loop's thread would allow no tick);
    a bound on every gap between ticks also counted the stalls of a loaded machine."""
    real_fsync = os.fsync
    syncs: list[tuple[float, float]] = []  # (start, end) of each fsync

    def slow_fsync(fd: int) -> None:
        start = time.monotonic()
        time.sleep(0.3)
        real_fsync(fd)
        syncs.append((start, time.monotonic()))

    monkeypatch.setattr(os, "fsync", slow_fsync)
    note = tool_call("edit_memory", {"action": "add", "text": "Likes tea."})
    fake_llm.queue(completion(None, [note]), completion("Noted."))
    agent = make_agent(fake_llm, workspaces_dir)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks.append(time.monotonic())

    running = asyncio.create_task(ticker())
    reply = await ask(agent, dm("1", "I like tea"))
    running.cancel()
    await agent.aclose()
    assert reply.text == "Noted."
    assert "Likes tea." in (user_home(workspaces_dir, "1") / "MEMORY.md").read_text("utf-8")
    assert syncs, "nothing was written to the disk"
    for start, end in syncs:
        assert any(start < tick < end for tick in ticks), "the loop stood still during an fsync"
