"""Hostile use of memory control and limits (issue 22, findings 5 and 8), and what another
person waits meanwhile. Through the real Agent and openai client against the fake provider,
in one process: the event loop the bot and everyone else share.

1. /memory history and /memory undo on an 8,008-line MEMORY.md (as edit_memory wrote it: 32
   KB of "- x" lines, then two more edits): their time, the loop's longest pause, and another
   person's /help answered while they run (median and worst) beside the same /help alone.
2. A flood of 90 commands in one go (30 /export of a workspace holding --media-mb of media,
   /help, /memory) with messages_per_minute = 3 and tokens_per_day = 5,000: commands answered,
   refused, archives built and sent, the flood's wall and CPU time, another person's /help.
3. One message whose model calls a tool every round at 3,000 tokens a round, tokens_per_day =
   5,000: model calls made and tokens spent by that one message.
4. /new past the limit: consolidation calls made at once.

Run: python bench/control_bench.py [--media-mb 20]   (about a minute; a temp dir)
Runs on older code as well (what it lacks is left out), for before/after figures.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.config import LimitsConfig  # noqa: E402
from tests.rigs.agent import ask, dm, make_agent  # noqa: E402
from tests.rigs.fakes.openai_server import (  # noqa: E402
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
    tool_call,
)


def limits(**values: Any) -> LimitsConfig:
    """LimitsConfig with the keys this code knows (older code lacks some)."""
    known = {f.name for f in dataclasses.fields(LimitsConfig)}
    return LimitsConfig(**{k: v for k, v in values.items() if k in known})


class Pauses:
    """The longest the loop went without running this ticker (asked every 5 ms)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = False

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not self._stop:
            await asyncio.sleep(0.005)
            now = loop.time()
            self.longest = max(self.longest, now - last - 0.005)
            last = now

    def stop(self) -> None:
        self._stop = True


async def other_person(agent: Any, done: asyncio.Event) -> list[float]:
    """Another person's /help, one due every 50 ms until `done`: each timed from when it was
    due, as a message arriving then would be (a blocked loop delays it from that moment)."""
    times = []
    start = time.perf_counter()
    due = start
    while not done.is_set():
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await ask(agent, dm("7", "/help"))
        times.append(time.perf_counter() - due)
        due = max(due + 0.05, time.perf_counter())
    return times


async def while_running(agent: Any, work: Any) -> tuple[float, float, list[float], Any]:
    """(work's time, the loop's longest pause, the other person's /help times, its result)."""
    pauses = Pauses()
    ticker = asyncio.create_task(pauses.run())
    done = asyncio.Event()
    other = asyncio.create_task(other_person(agent, done))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    result = await work
    took = time.perf_counter() - started
    done.set()
    times = await other
    pauses.stop()
    await ticker
    return took, pauses.longest, times, result


def show_other(times: list[float], alone: float) -> str:
    if not times:
        return "another person's /help: no answer while it ran"
    return (f"another person's /help: {len(times)} answered, median "
            f"{statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms "
            f"(alone: {alone * 1000:.2f} ms)")


async def alone(agent: Any) -> float:
    times = []
    for _ in range(20):
        started = time.perf_counter()
        await ask(agent, dm("7", "/help"))
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def memory_history(fake: FakeOpenAI, folder: Path) -> None:
    agent = make_agent(fake, folder / "history", limits=limits(heavy_commands_per_hour=0))
    memory = agent.workspaces.get("telegram-42").memory
    small = "## User Information\n\n- Name: Ana\n- Lives in Oslo\n"
    big = small + "".join("- x\n" for _ in range(8004))
    lines = big.splitlines(keepends=True)
    lines[4000] = "- likes tea\n"
    for text in (small, big, big + "- likes coffee\n", "".join(lines)):
        memory.write(text)
    print(f"1. MEMORY.md of {len(lines)} lines, {len(''.join(lines).encode()):,} bytes")
    base = await alone(agent)
    for command in ("/memory history", "/memory undo"):
        took, pause, times, reply = await while_running(agent, ask(agent, dm("42", command)))
        summary = reply.text.split("\n")[0][:70]
        print(f"   {command}: {took:.2f} s, loop held up to {pause:.2f} s")
        print(f"     {show_other(times, base)}")
        print(f"     answer: {summary}…")
    await agent.aclose()


def fill_media(agent: Any, megabytes: int) -> None:
    workspace = agent.workspaces.get("telegram-42")
    for _ in range(max(1, megabytes)):
        workspace.media.put(os.urandom(1_000_000), "bin")


async def command_flood(fake: FakeOpenAI, folder: Path, megabytes: int) -> None:
    agent = make_agent(fake, folder / "flood",
                       limits=limits(messages_per_minute=3, tokens_per_day=5_000))
    await ask(agent, dm("42", "hello"))
    fill_media(agent, megabytes)
    base = await alone(agent)
    flood = ["/export", "/help", "/memory"] * 30
    cpu = time.process_time()

    async def everything() -> list[Any]:
        return await asyncio.gather(*(ask(agent, dm("42", text)) for text in flood))

    took, pause, times, replies = await while_running(agent, everything())
    cpu = time.process_time() - cpu
    refused = [r for r in replies if "faster than I take them" in r.text or "an hour" in r.text]
    sent = sum(len(r.files) for r in replies)
    print(f"2. {len(flood)} commands at once (30 /export of a {megabytes} MB workspace), "
          "messages_per_minute 3")
    print(f"   answered {len(replies) - len(refused)}, refused {len(refused)}; archives sent "
          f"{sent}; {took:.2f} s, {cpu:.2f} s CPU; loop held up to {pause:.2f} s")
    print(f"   {show_other(times, base)}")
    await agent.aclose()


async def tool_rounds(fake: FakeOpenAI, folder: Path) -> None:
    fake.default = lambda request: completion(
        None, [tool_call("search_history", {"query": "everything"})],
        prompt_tokens=2_800, completion_tokens=210,
    )
    agent = make_agent(fake, folder / "rounds", limits=limits(tokens_per_day=5_000))
    before = len(fake.requests)
    reply = await ask(agent, dm("42", "look everything up"))
    calls = len(fake.requests) - before
    usage = await ask(agent, dm("42", "/usage"))
    spent = usage.text.split("\n")[0]
    print(f"3. one message, a tool call every round at 3,010 tokens, tokens_per_day 5,000: "
          f"{calls} model calls; {spent}")
    print(f"   answer: {reply.text[:80]}…")
    await agent.aclose()


async def new_past_the_limit(fake: FakeOpenAI, folder: Path) -> None:
    def answer(request: dict[str, Any]) -> Any:
        if is_consolidation(request):
            return save_memory_call("[2026-01-05 10:00] Talked.", "## User Information\n- Ana\n")
        return completion("ok", prompt_tokens=5_000, completion_tokens=100)

    fake.default = answer
    agent = make_agent(fake, folder / "new", limits=limits(tokens_per_day=5_000))
    await ask(agent, dm("42", "spend the day's tokens"))
    before = len(fake.consolidation_requests)
    reply = await ask(agent, dm("42", "/new"))
    await agent.aclose()  # waits for the filing, if one started
    made = len(fake.consolidation_requests) - before
    print(f"4. /new past tokens_per_day: {made} consolidation calls at once; answer: "
          f"{reply.text[:90]}…")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--media-mb", type=int, default=20)
    args = parser.parse_args()
    fake = await FakeOpenAI().start()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        await memory_history(fake, folder)
        await command_flood(fake, folder, args.media_mb)
        await tool_rounds(fake, folder)
        await new_past_the_limit(fake, folder)
    await fake.stop()


if __name__ == "__main__":
    asyncio.run(main())
