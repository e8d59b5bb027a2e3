"""RAM benchmark: what a long consolidated past costs `lightgrep run` (a real process, fakes).

1. Retained RAM: N users whose sessions hold M consolidated messages each (written through the
   real SessionStore, the cursor at the end) each say one word; the bot's RSS (VmRSS) is read
   before and after. The same is done in the same run with users holding no messages (the
   baseline), so bytes retained per consolidated message = (Δ with M − Δ baseline) / (N × M).
2. First turn of a user whose session holds 100,000 consolidated messages, beside a user with
   none, one at a time (LLM latency 0): the load of the session is in it.

Run: python bench/ram_bench.py                      (300 users × 1,000 messages; 100,000)
     python bench/ram_bench.py --users 50 --consolidated 200 --big 20000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    FIRST_USER_ID,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    filler,
    write_config,
)
from bot.keys import session_key, user_key
from memory.workspace import Workspaces

WINDOW = 65536  # nothing is consolidated during the bench: the past is all consolidated already


def populate(base: Path, user_ids: list[int], messages: int, rng: random.Random) -> int:
    """Sessions of `messages` consolidated messages each (~300 bytes a line); bytes written."""
    written = 0
    for user in user_ids:
        # A fresh Workspaces per user: nothing of the others stays cached meanwhile.
        workspace = Workspaces(base).get(user_key("telegram", user))
        store = workspace.sessions
        session = store.get(session_key("telegram", "dm", user))
        for i in range(messages):
            role = "user" if i % 2 == 0 else "assistant"
            message = {"role": role, "content": filler(rng, 40)}
            if role == "user":
                message["message_id"] = f"past-{i}"  # never an id the fake will use
            store.append(session, message)
        if messages:
            store.set_last_consolidated(session, messages)
            written += session.path.stat().st_size
    return written


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else 0


async def run_bot(folder: Path, user_ids: list[int], *, one_at_a_time: bool) -> dict:
    """Start the bot on `folder`, have each user say one word; RSS before/after, latencies."""
    llm = await BenchLLM(0.0, reply_words=5).start()
    telegram = await BenchTelegram().start()
    bot = BotProcess(
        write_config(folder, llm, telegram, WINDOW), child_env(folder), folder / "bot.log"
    )
    rng = random.Random(3)
    answered: dict[str, asyncio.Event] = {}
    telegram.on_answer = lambda name, sent: answered.setdefault(name, asyncio.Event()).set()
    latencies: dict[int, float] = {}
    try:
        await bot.start()
        await asyncio.sleep(1.0)
        before = rss_kb(bot.pid)
        names = {}
        if one_at_a_time:
            for user in user_ids:
                name = telegram.send(user, 0, rng, words=1)
                event = answered.setdefault(name, asyncio.Event())
                await asyncio.wait_for(event.wait(), 120)
                latencies[user] = telegram.answers[name][0] - telegram.injected_at[name]
        else:
            for user in user_ids:
                names[user] = telegram.send(user, 0, rng, words=1)
            for name in names.values():
                await asyncio.wait_for(answered.setdefault(name, asyncio.Event()).wait(), 300)
        await asyncio.sleep(1.0)
        after = rss_kb(bot.pid)
        code = await bot.terminate()
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()
    return {"before": before, "after": after, "latencies": latencies, "code": code}


async def retained(args: argparse.Namespace) -> None:
    print(f"1. Retained RAM: {args.users} users, each saying one word")
    rng = random.Random(1)
    users = [FIRST_USER_ID + i for i in range(args.users)]
    deltas = {}
    runs = (("baseline (no past)", 0), (f"{args.consolidated:,} consolidated", args.consolidated))
    for label, count in runs:
        with tempfile.TemporaryDirectory(prefix="lightgrep-ram-") as tmp:
            folder = Path(tmp)
            size = populate(folder / "workspaces", users, count, rng)
            result = await run_bot(folder, users, one_at_a_time=False)
            delta = (result["after"] - result["before"]) * 1024
            deltas[count] = delta
            print(
                f"  {label:28s} RSS {result['before'] / 1024:7.1f} → {result['after'] / 1024:7.1f}"
                f" MiB (Δ {delta / 2**20:6.1f} MiB; {size / 2**20:.1f} MiB of JSONL on disk;"
                f" exit {result['code']})"
            )
    per_message = (deltas[args.consolidated] - deltas[0]) / (args.users * args.consolidated)
    print(f"  retained per consolidated message: {per_message:.1f} bytes (target ≤ 20)")


async def first_turn(args: argparse.Namespace) -> None:
    print(f"2. First turn of a user whose session holds {args.big:,} consolidated messages")
    rng = random.Random(2)
    with tempfile.TemporaryDirectory(prefix="lightgrep-ram-") as tmp:
        folder = Path(tmp)
        small = [FIRST_USER_ID + i for i in range(5)]
        big = FIRST_USER_ID + 100
        size = populate(folder / "workspaces", [big], args.big, rng)
        populate(folder / "workspaces", small, 0, rng)
        result = await run_bot(folder, [*small, big], one_at_a_time=True)
    control = statistics.median(result["latencies"][u] for u in small) * 1000
    heavy = result["latencies"][big] * 1000
    print(f"  user with no past (median of 5)   {control:7.1f} ms")
    print(
        f"  user with {args.big:,} messages     {heavy:7.1f} ms "
        f"({size / 2**20:.1f} MiB session file; target ≤ 100 ms; ratio {heavy / control:.1f}x)"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--consolidated", type=int, default=1000, help="messages per user")
    parser.add_argument("--big", type=int, default=100_000, help="messages of the long session")
    parser.add_argument("--only", choices=("retained", "first-turn"))
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only in (None, "retained"):
        await retained(args)
    if args.only in (None, "first-turn"):
        await first_turn(args)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
