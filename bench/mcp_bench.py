"""MCP servers beside a conversation (issue 34 item 3).

    python bench/mcp_bench.py [--samples 30]

The real agent (its openai client against the fake model) and the fake MCP server made with
the SDK (tests/rigs/fakes/mcp_server.py), hostile, over stdio: it lists 10,005 tools and its
`hang` tool never answers. Printed:
- the longest pause of the bot's event loop (a 1 ms ticker) from start-up until the allowed
  tools are offered, the listing read in the servers' own process; beside it the same listing read
  by an SDK client in the bot's loop, as it would be without that process;
- another person's answer time alone and while one person's turns wait on `hang` (timeout 3 s)
  one after another (median, slowest; goal: the slowest within 0.5 s of alone, exit 1 if not);
- the tokens one MCP tool (the kind server's `lookup`) adds to the fixed prompt, full and
  compact forms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bot.agent.agent import Agent  # noqa: E402
from bot.agent.prompt import ContextBuilder  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.tools.tool import Tool  # noqa: E402
from bot.tools.toolbox import enabled_tools, tools_text  # noqa: E402
from memory.store import MEMORY_TEMPLATE, memory_prompt_section  # noqa: E402
from memory.tokens import TokenEstimator  # noqa: E402
from tests.rigs.agent import ask, dm  # noqa: E402
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call  # noqa: E402
from tests.rigs.mcp import SERVER, mcp_agent, offered, stdio_entry  # noqa: E402

GOAL_S = 0.5


class Ticker:
    """The longest gap between the bot's loop's 1 ms ticks while it runs."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> Ticker:
        self._task = asyncio.ensure_future(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def model(request: dict[str, Any]) -> dict[str, Any]:
    last = request["messages"][-1]
    if last["role"] == "user" and "HANG" in str(last["content"]):
        return completion(None, [tool_call("evil_hang", {})])
    return completion("ok")


async def listing_in_the_loop() -> tuple[float, float]:
    """(the longest loop pause, seconds) of listing the hostile server with an SDK client in
    this loop: what the servers' own process spares the bot."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[str(SERVER), "stdio", "hostile"])
    errlog = open(os.devnull, "w")  # noqa: ASYNC230, SIM115 - /dev/null, closed below
    with errlog, Ticker() as ticker:
        started = time.perf_counter()
        async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
            listed = await client.list_tools()
        took = time.perf_counter() - started
    assert len(listed.tools) == 10_005
    return ticker.longest, took


async def b_times(agent: Agent, samples: int) -> list[float]:
    times = []
    for n in range(samples):
        started = time.perf_counter()
        await ask(agent, dm("2", f"hello {n}"))
        times.append(time.perf_counter() - started)
        await asyncio.sleep(0.2)
    return times


def prompt_tokens(config: Config, tools: tuple[Tool, ...], form: Any) -> int:
    estimator = TokenEstimator()
    system = ContextBuilder(config.agent.bot_name, form, tools=tools).system_prompt(
        memory_prompt_section(MEMORY_TEMPLATE), "telegram", False, ""
    )
    return estimator.count_text(system + tools_text(tools, form))


async def tool_tokens(fake: FakeOpenAI, folder: Path) -> str:
    """The fixed prompt's tokens with the kind server's `lookup` offered, and without."""
    agent = mcp_agent(folder, fake.base_url, stdio_entry("notes", ["lookup"]))
    try:
        await offered(agent, 1)
        own = enabled_tools(agent.config)
        lines = []
        for form in ("full", "compact"):
            without = prompt_tokens(agent.config, own, form)
            with_it = prompt_tokens(agent.config, own + agent.mcp.tools(), form)
            lines.append(f"{form} {without:,} → {with_it:,} (+{with_it - without})")
    finally:
        await agent.aclose()
    return "Fixed prompt, tokens, with notes_lookup: " + "; ".join(lines)


async def main(samples: int) -> int:
    fake = await FakeOpenAI().start()
    fake.default = model
    with tempfile.TemporaryDirectory() as tmp:
        entry = stdio_entry("evil", ["hang", "fine", "t42"], hostile=True, extra="timeout_s = 3\n")
        agent = mcp_agent(Path(tmp) / "bot", fake.base_url, entry)
        try:
            with Ticker() as ticker:
                started = time.perf_counter()
                await offered(agent, 3, within=60)
                listed_s = time.perf_counter() - started
            await ask(agent, dm("2", "warm up"))
            alone = await b_times(agent, samples)
            done = asyncio.Event()
            hangs = 0

            async def hanger() -> None:
                nonlocal hangs
                while not done.is_set():
                    await ask(agent, dm("1", "HANG please"))
                    hangs += 1

            hanging = asyncio.create_task(hanger())
            await asyncio.sleep(0.5)
            beside = await b_times(agent, samples)
            done.set()
            await hanging
        finally:
            await agent.aclose()
        in_loop, in_loop_s = await listing_in_the_loop()
        tokens = await tool_tokens(fake, Path(tmp) / "tokens")
    await fake.stop()
    print(
        f"Listing 10,005 tools: longest loop pause {ticker.longest * 1000:.1f} ms in the hub's "
        f"process ({listed_s:.2f} s to offered); {in_loop * 1000:.1f} ms read in the bot's loop "
        f"({in_loop_s:.2f} s); ratio {in_loop / ticker.longest:.0f}×"
    )
    for name, times in (("B alone:         ", alone), ("B beside a hang: ", beside)):
        median, slowest = statistics.median(times) * 1000, max(times) * 1000
        print(f"{name} median {median:6.1f} ms, slowest {slowest:6.1f} ms")
    worst = max(beside) - max(alone)
    print(f"A's hanging calls meanwhile: {hangs}; B's slowest added: {worst * 1000:.0f} ms")
    print(tokens)
    return 0 if worst <= GOAL_S else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    sys.exit(asyncio.run(main(parser.parse_args().samples)))
