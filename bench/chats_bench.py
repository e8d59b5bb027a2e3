"""Chats' settings at scale (issue 32, 12): what a /persona change costs the others when the bot
keeps --chats chats with long personas (20,000 of ~2,400 characters: a 48 MB book).

The real Agent (its real openai client on the fake model, 127.0.0.1, --latency per answer) on a
folder whose `.chats.json` holds the book, as a bot that has run long would have it. Person A
(an admin) changes a group's persona --changes times, --gap seconds apart; person B meanwhile
sends DMs, each as soon as the previous one is answered. Printed:
  loop hold   the longest the event loop stood still during each change (a ticker's gap),
              median and worst; beside it the longest pause while B talks alone;
  change      A's answer time per change, median;
  B           B's answer time alone (the baseline), then during the changes: median, worst
              and the worst's ratio to the baseline.
The first change of an older folder turns `.chats.json` into the log (a rewrite, in a thread);
it is made before the timing, shown apart as "first change".

Run: python bench/chats_bench.py
     python bench/chats_bench.py --chats 5000 --changes 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.agent.agent import Agent
from tests.rigs.agent import ask, dm, group, make_agent
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion

PERSONA = "Answer as a patient librarian who loves old maps and long words. " * 37  # ~2,400


def build_book(folder: Path, chats: int) -> int:
    """The older one-object file of `chats` groups; its size in bytes."""
    body = {f"tg:-{n}": {"trigger": "always", "persona": PERSONA} for n in range(chats)}
    data = json.dumps(body, indent=1, ensure_ascii=False) + "\n"
    (folder / ".chats.json").write_text(data)
    return len(data.encode())


class Ticker:
    """The longest gap between two ticks of the loop since `reset` (10 ms asked)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._last = time.monotonic()

    def reset(self) -> None:
        self.worst, self._last = 0.0, time.monotonic()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.worst = max(self.worst, now - self._last - 0.01)
            self._last = now


async def change(agent: Agent, n: int) -> float:
    inbound = replace(
        group("-42", "1", f"/persona Be brief, version {n}."), chat_key="tg:-42", chat_admin=True
    )
    started = time.monotonic()
    reply = await ask(agent, inbound)
    assert "From the next message on" in reply.text, reply.text
    return time.monotonic() - started


async def b_asks(agent: Agent, times: list[float], stop: asyncio.Event) -> None:
    seq = 0
    while not stop.is_set():
        started = time.monotonic()
        await ask(agent, dm("2", f"hello {seq}"))
        times.append(time.monotonic() - started)
        seq += 1


async def measure(args: argparse.Namespace, folder: Path) -> int:
    llm = await FakeOpenAI().start()

    llm.default = lambda request: Delay(args.latency, completion("Hi."))
    size = build_book(folder, args.chats)
    started = time.monotonic()
    agent = make_agent(llm, folder, window=65536)
    opened = time.monotonic() - started
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    alone: list[float] = []
    await ask(agent, dm("2", "first"))  # (what a first turn loads, not counted)
    ticker.reset()
    for seq in range(args.probes):
        started = time.monotonic()
        await ask(agent, dm("2", f"warm {seq}"))
        alone.append(time.monotonic() - started)

    quiet_hold = ticker.worst  # the loop's own longest pause, B alone
    during: list[float] = []
    stop = asyncio.Event()
    probing = asyncio.create_task(b_asks(agent, during, stop))
    ticker.reset()
    first = await change(agent, 0)
    await asyncio.sleep(0.03)  # the ticker's next tick sees the gap
    first_hold = ticker.worst
    await asyncio.sleep(5 * args.latency)  # B's answers held up by it come now
    during.clear()
    holds, changes = [], []
    for n in range(1, args.changes + 1):
        ticker.reset()
        changes.append(await change(agent, n))
        await asyncio.sleep(0.03)
        holds.append(ticker.worst)
        await asyncio.sleep(args.gap)
    stop.set()
    await probing
    ticking.cancel()
    await agent.aclose()
    await llm.stop()

    base = statistics.median(alone)
    print(f"== chats' settings: {args.chats:,} chats, book {size / 1e6:.0f} MB, "
          f"model latency {args.latency * 1000:.0f} ms; opened in {opened:.2f} s")  # fmt: skip
    print(f"  first change  A {first:.2f} s, loop hold {first_hold * 1000:.0f} ms")
    print(f"  loop hold     median {statistics.median(holds) * 1000:6.0f} ms  "
          f"worst {max(holds) * 1000:6.0f} ms  ({args.changes} changes)")  # fmt: skip
    print(f"  change        A's answer median {statistics.median(changes) * 1000:6.0f} ms")
    print(f"  B alone       median {base * 1000:6.0f} ms, loop's longest pause meanwhile "
          f"{quiet_hold * 1000:.0f} ms")  # fmt: skip
    worst = max(during, default=float("nan"))
    print(f"  B during      median {statistics.median(during) * 1000:6.0f} ms  "
          f"worst {worst * 1000:6.0f} ms  = {worst / base:5.1f}x alone "
          f"({len(during)} answers)")  # fmt: skip
    ok = max(holds) < 0.5 and worst < 0.5 + base
    print(f"  verdict       {'OK' if ok else 'FAILED'} (goal: no change holds the loop 0.5 s)")
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chats", type=int, default=20_000, help="chats with a persona")
    parser.add_argument("--changes", type=int, default=20, help="persona changes of A")
    parser.add_argument("--probes", type=int, default=10, help="B's messages alone")
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between A's changes")
    parser.add_argument("--latency", type=float, default=0.03, help="model latency, seconds")
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-chats-") as tmp:
        return await measure(args, Path(tmp))


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
