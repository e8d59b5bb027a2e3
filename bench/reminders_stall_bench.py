"""One person's long reminders history against everyone else's answers (issue 32, finding 1).

Person A holds 100 hourly reminders that have been sent for `--days` days (180: 432,100 lines,
about 53 MB of `reminders.jsonl`, written directly); B chats with the bot (a message, its
answer, a short pause, again) and we time B's answers, from the message reaching the fake
Telegram to the bot's answer there. `lightgrep run` is a real process against the fake Bot
API and a fake model with a small fixed latency. Four phases, each with a fresh copy of A's
file and a fresh bot, so each meets the file at its biggest:

  alone       B only (the baseline);
  sends       A's 100 reminders fall due a few seconds after the start, while B chats;
  flood       A sends --flood `/remind` at once;
  listing     A sends --listings `/reminders` at once.

Printed: B's answers in each phase, median and worst, and A's file afterwards (lines, bytes).
`--tree DIR` runs the bot from another checkout (e.g. main's, for the figures before a change).

Run: python bench/reminders_stall_bench.py
     python bench/reminders_stall_bench.py --days 30 --tree /tmp/main-tree
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import ROOT, BenchLLM, BenchTelegram, BotProcess, child_env, token, write_config
from bot.keys import session_key, user_key
from bot.reminders.index import DueIndex
from memory import clock
from memory.keys import encode_key
from tests.rigs.fakes.telegram_server import FakeTelegram

A, B = 100_000, 200_000  # the person with the long history; the person chatting meanwhile


def write_hourly(
    workspace: Path, person: int, reminders: int, days: int, next_due: datetime
) -> tuple[int, int]:
    """`reminders` hourly reminders of a private chat, each sent every hour for `days` days, the
    next of them due at `next_due`: the file as the bot would have written it. (lines, bytes)"""
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "sessions").mkdir(exist_ok=True)
    hours = days * 24
    first = next_due - timedelta(hours=hours)
    place = {"chat": str(person), "user": str(person)}
    session = session_key("telegram", "dm", str(person))
    lines = []
    for n in range(reminders):
        record = {
            "type": "set", "id": f"r{n:03d}", "at": clock.iso(first), "due": clock.iso(first),
            "what": f"drink water, glass {n}", "repeat": {"kind": "interval", "seconds": 3600},
            "platform": "telegram", "place": place, "session": session, "private": True,
            "name": None, "zone": "UTC", "message": f"{person}:{n + 1}",
        }  # fmt: skip
        lines.append(json.dumps(record, ensure_ascii=False))
    path = workspace / "reminders.jsonl"
    with path.open("w") as file:
        file.write("\n".join(lines) + "\n")
        for hour in range(hours):
            due = clock.iso(first + timedelta(hours=hour))
            sent = clock.iso(first + timedelta(hours=hour, seconds=1))
            file.write(
                "".join(
                    f'{{"type": "delivered", "id": "r{n:03d}", "due": "{due}", '
                    f'"at": "{sent}", "late": false}}\n'
                    for n in range(reminders)
                )
            )
    os.chmod(path, 0o600)
    return reminders + hours * reminders, path.stat().st_size


class Chatter:
    """B: a message, its answer, a pause, again, until stopped; each answer's time."""

    def __init__(self, telegram: BenchTelegram, person: int, pause_s: float) -> None:
        self.telegram = telegram
        self.person = person
        self.pause_s = pause_s
        self.times: list[float] = []
        self._seq = 0
        self._waiting: dict[str, asyncio.Event] = {}
        telegram.on_answer = lambda name, sent: self._waiting.pop(name, asyncio.Event()).set()

    async def run(self, stop: asyncio.Event) -> None:
        rng = random.Random(self.person)
        while not stop.is_set():
            name = token(self.person, self._seq)
            answered = self._waiting[name] = asyncio.Event()
            self.telegram.send(self.person, self._seq, rng, words=6)
            self._seq += 1
            await answered.wait()
            self.times.append(self.telegram.answers[name][0] - self.telegram.injected_at[name])
            await asyncio.sleep(self.pause_s)


async def phase(
    name: str, args: argparse.Namespace, root: Path, llm: BenchLLM, env: dict[str, str]
) -> tuple[list[float], str]:
    """One phase with a fresh folder, bot and fake Telegram: B's answer times, and A's file."""
    folder = root / name
    folder.mkdir()
    telegram = BenchTelegram()
    await telegram.start()
    telegram.started_users.update((A, B))
    base = folder / "workspaces"
    a_key = user_key("telegram", str(A))
    workspace = base / encode_key(a_key)
    soon = clock.now() + timedelta(seconds=args.startup_s)
    if name == "sends":
        lines, size = write_hourly(workspace, A, 100, args.days, soon)
        print(f"  (A's file: {lines:,} lines, {size / 1e6:.1f} MB)", flush=True)
    later = soon + timedelta(hours=1)  # (in the other phases A's next sends lie beyond them)
    due = {"alone": [], "sends": [(a_key, soon)]}.get(name, [(a_key, later)])
    if name not in ("alone", "sends"):
        write_hourly(workspace, A, 100, args.days, later)
    base.mkdir(parents=True, exist_ok=True)
    DueIndex(base).rebuild(due)
    config = write_config(folder, llm, telegram, window_tokens=50_000, stream=False)
    bot = BotProcess(config, env, folder / "bot.log")
    try:
        await bot.start(ready_timeout_s=120)
        chatter = Chatter(telegram, B, args.pause)
        stop = asyncio.Event()
        chatting = asyncio.create_task(chatter.run(stop))
        await asyncio.sleep(args.warmup)
        began = time.monotonic()
        if name == "alone":
            await asyncio.sleep(args.alone_s)
        elif name == "sends":
            await until(lambda: len(telegram.sent_to(A)) >= 100, "A's 100 reminders", 600)
        else:
            count = args.flood if name == "flood" else args.listings
            for n in range(count):
                text = f"/remind in 2 hours flood {n}" if name == "flood" else "/reminders"
                telegram.dm(A, text)
            await until(lambda: answered(telegram, name) >= count, f"A's {count} answers", 900)
        took = time.monotonic() - began
        await asyncio.sleep(args.warmup)
        stop.set()
        await chatting
    finally:
        await bot.terminate()
        await telegram.stop()
    path = workspace / "reminders.jsonl"
    after = ""
    if path.exists():
        data = path.read_bytes()
        lines = data.count(b"\n")
        after = f"A's done in {took:.1f} s; file after: {lines:,} lines, {len(data) / 1e6:.2f} MB"
    return chatter.times, after


def answered(telegram: FakeTelegram, name: str) -> int:
    """A's commands answered: one message each for /remind, the first of each /reminders."""
    texts = [s.text for s in telegram.sent_to(A)]
    if name == "flood":
        return len(texts)
    return sum(1 for t in texts if t.startswith(("Your reminders", "You're changing")))


async def until(check: Callable[[], bool], what: str, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=180, help="days of hourly sends on file")
    parser.add_argument("--flood", type=int, default=30, help="/remind sent at once")
    parser.add_argument("--listings", type=int, default=20, help="/reminders sent at once")
    parser.add_argument("--latency", type=float, default=0.02, help="the fake model's, seconds")
    parser.add_argument("--pause", type=float, default=0.1, help="B's pause between messages")
    parser.add_argument("--warmup", type=float, default=1.0, help="B chats before and after")
    parser.add_argument("--alone-s", type=float, default=5.0, help="the baseline's length")
    parser.add_argument("--startup-s", type=float, default=15.0, help="A's sends after launch")
    parser.add_argument("--tree", type=Path, default=None, help="run the bot from this checkout")
    parser.add_argument(
        "--phases", default="alone,sends,flood,listing", help="which phases, in order"
    )
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-stall-") as tmp:
        root = Path(tmp)
        env = child_env(root)
        if args.tree is not None:
            env["PYTHONPATH"] = env["PYTHONPATH"].replace(str(ROOT), str(args.tree.resolve()))
        print(f"bot from {args.tree or ROOT}; B's answers (message to answer):", flush=True)
        llm = BenchLLM(latency_s=args.latency, reply_words=10)
        await llm.start()
        try:
            for name in args.phases.split(","):
                times, after = await phase(name, args, root, llm, env)
                print(
                    f"  {name:>8}: {len(times):4d} answers, median "
                    f"{statistics.median(times):.3f} s, worst {max(times):.3f} s  {after}",
                    flush=True,
                )
        finally:
            await llm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
