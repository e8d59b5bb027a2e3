"""Reminders at scale: `lightgrep run` as a real process against the fake Bot API and a fake model
with a fixed latency, on a workspaces folder of 10,000 people with 10 pending reminders each
(100,000), due over the next month.

  start-up   time from the process's start to "telegram is ready", and its peak RSS, with the
             100,000 reminders and with the same 10,000 people holding none (the baseline);
             median of --starts starts each;
  delay      how late a due reminder reaches Telegram (its receipt at the fake minus its time):
             --quiet reminders due over a few seconds with nobody talking (the baseline), then
             --due reminders due while --chatters people chat (each sends a message, waits for
             the answer, thinks --think seconds, again); median and p99 of each, and the ratio;
             the bot's CPU per reminder, and the chat's own answer times beside them.

Every reminder must arrive exactly once and never before its time, else the exit code is 1.

Run: python bench/reminders_bench.py
     python bench/reminders_bench.py --people 2000 --per-person 10 --starts 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiohttp import web

from bench.harness import (
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    percentile,
    token,
    write_config,
)
from bot.keys import session_key, user_key
from bot.reminders.index import DueIndex
from memory import clock
from memory.keys import encode_key
from memory.reminders.records import ReminderFile

FIRST_PERSON = 100_000  # the people holding reminders; chatters and the timed ones apart
FIRST_CHATTER = 20_000
FIRST_TIMED = 50_000
READ_LINE = re.compile(r"reminders: next times of (\d+) people read in (\d+) ms")


class ReminderTelegram(BenchTelegram):
    """Records when each reminder arrived (wall clock), by the tag in its text."""

    def __init__(self) -> None:
        super().__init__()
        self.reminders: dict[str, list[float]] = {}
        self.waiting: dict[str, asyncio.Event] = {}  # a chatter's message → its answer came
        self.on_answer = lambda name, sent: self.waiting.pop(name, asyncio.Event()).set()

    async def _m_sendmessage(self, params: dict[str, Any]) -> web.Response:
        arrived = time.time()
        response = await super()._m_sendmessage(params)
        found = re.search(r"⏰ Reminder: (T\d+)", params.get("text", ""))
        if response.status == 200 and found:
            self.reminders.setdefault(found.group(1), []).append(arrived)
        return response


def set_record(ident: str, what: str, due: datetime, person: int) -> dict[str, Any]:
    """A `set` record as /remind writes it, in a private chat."""
    return {
        "type": "set", "id": ident, "at": clock.iso(), "due": clock.iso(due), "what": what,
        "repeat": None, "platform": "telegram", "place": {"chat": str(person), "user": str(person)},
        "session": session_key("telegram", "dm", person), "private": True, "name": None,
        "zone": "UTC",
    }  # fmt: skip


def build_folder(base: Path, people: int, per_person: int, with_reminders: bool) -> float:
    """10,000 workspaces, each with `per_person` reminders due over the next 30 days (or none);
    the index beside them as the bot keeps it. Seconds it took."""
    started = time.monotonic()
    rng = random.Random(1)
    index = DueIndex(base)
    nexts: dict[str, datetime] = {}
    now = clock.now()
    for number in range(people):
        person = FIRST_PERSON + number
        key = user_key("telegram", person)
        root = base / encode_key(key)
        os.makedirs(root / "sessions", mode=0o700, exist_ok=True)
        if not with_reminders:
            continue
        file = ReminderFile(root)
        dues = sorted(now + timedelta(hours=1 + rng.random() * 720) for _ in range(per_person))
        for n, due in enumerate(dues):
            file.append(set_record(f"p{person}n{n}", f"bulk reminder {n}", due, person))
        nexts[key] = dues[0]
    base.mkdir(parents=True, exist_ok=True)
    index.rebuild(nexts.items())
    return time.monotonic() - started


def add_timed(base: Path, first: int, count: int, start: datetime, spread_s: float) -> dict:
    """`count` reminders (each person one) due from `start` over `spread_s`, written as the bot
    writes them (index first). Tag → due (epoch seconds)."""
    index = DueIndex(base)
    index.load()
    dues = {}
    for n in range(count):
        person = first + n
        key = user_key("telegram", person)
        root = base / encode_key(key)
        os.makedirs(root / "sessions", mode=0o700, exist_ok=True)
        due = (start + timedelta(seconds=spread_s * n / max(1, count))).replace(microsecond=0)
        tag = f"T{person}"
        index.set(key, due)
        ReminderFile(root).append(set_record(f"t{person}", tag, due, person))
        dues[tag] = due.timestamp()
    return dues


@dataclass
class Start:
    seconds: float
    rss_mb: float
    read_ms: int
    people: int


@dataclass
class Delays:
    name: str
    late_s: list[float] = field(default_factory=list)
    missing: int = 0
    twice: int = 0
    early: int = 0


async def start_bot(
    folder: Path, llm: BenchLLM, telegram: ReminderTelegram
) -> tuple[BotProcess, Start]:
    config = write_config(folder, llm, telegram, window_tokens=50_000)
    bot = BotProcess(config, child_env(folder), folder / "bot.log")
    began = time.monotonic()
    await bot.start(ready_timeout_s=120)
    took = time.monotonic() - began
    await asyncio.sleep(0.5)
    rss = bot.sample_rss() / 1024
    found = READ_LINE.findall(bot.log_path.read_text(errors="replace"))
    people, read_ms = (int(found[-1][0]), int(found[-1][1])) if found else (0, -1)
    return bot, Start(took, rss, read_ms, people)


async def measure_starts(args: argparse.Namespace, root: Path) -> dict[str, list[Start]]:
    results: dict[str, list[Start]] = {"none": [], "100k": []}
    for name, with_reminders in (("none", False), ("100k", True)):
        folder = root / name
        made = build_folder(folder / "workspaces", args.people, args.per_person, with_reminders)
        print(f"  built {name}: {args.people:,} people in {made:.1f} s", flush=True)
        llm = await BenchLLM(latency_s=args.latency).start()
        telegram = await ReminderTelegram().start()
        try:
            for _ in range(args.starts):
                bot, start = await start_bot(folder, llm, telegram)
                results[name].append(start)
                await bot.terminate()
        finally:
            await telegram.stop()
            await llm.stop()
    return results


async def measure_delays(args: argparse.Namespace, root: Path) -> list[Delays]:
    folder = root / "100k"  # the folder of the 100,000
    base = folder / "workspaces"
    llm = await BenchLLM(latency_s=args.latency, reply_words=20).start()
    telegram = await ReminderTelegram().start()
    runs = []
    try:
        # Due after the start-up: quiet first, then while people chat.
        launch = clock.now()
        quiet_at = launch + timedelta(seconds=args.startup_s)
        busy_at = quiet_at + timedelta(seconds=args.spread + args.warmup)
        quiet = add_timed(base, FIRST_TIMED, args.quiet, quiet_at, args.spread)
        busy = add_timed(base, FIRST_TIMED + args.quiet, args.due, busy_at, args.spread)
        for tag in (*quiet, *busy):
            telegram.started_users.add(int(tag[1:]))
        bot, _ = await start_bot(folder, llm, telegram)
        if time.time() > quiet_at.timestamp():
            print("  (the bot was not ready before the first due: raise --startup-s)", flush=True)
        while time.time() < quiet_at.timestamp() - 0.5:  # noqa: ASYNC110 - the clock
            await asyncio.sleep(0.05)
        idle_cpu = bot.cpu_seconds()
        while time.time() < max(quiet.values()) + 1.0:  # noqa: ASYNC110 - the clock
            await asyncio.sleep(0.1)  # the quiet ones are sent with nobody talking
        spent = bot.cpu_seconds() - idle_cpu
        print(
            f"  CPU of the bot per quiet reminder sent: {spent / max(1, len(quiet)) * 1000:.1f} ms",
            flush=True,
        )
        stop = asyncio.Event()
        busy_cpu, busy_wall = bot.cpu_seconds(), time.monotonic()
        chatters = [
            asyncio.create_task(chat(telegram, FIRST_CHATTER + n, args.think, stop))
            for n in range(args.chatters)
        ]
        last = max(busy.values())
        sent = telegram.reminders
        while time.time() < last + 5 and not all(t in sent for t in busy):  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.gather(*chatters, return_exceptions=True)
        answer_s = [
            times[0] - telegram.injected_at[name]
            for name, times in telegram.answers.items()
            if times and name in telegram.injected_at
        ]
        cpu_share = (bot.cpu_seconds() - busy_cpu) / (time.monotonic() - busy_wall)
        print(
            f"  the bot had {cpu_share * 100:.0f} % of a core while they chatted "
            f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)",
            flush=True,
        )
        print(
            f"  {len(answer_s):,} chat turns answered meanwhile: median "
            f"{statistics.median(answer_s):.2f} s, p99 {percentile(answer_s, 99):.2f} s from "
            f"message to answer (the model takes {args.latency:.2f} s)",
            flush=True,
        )
        await bot.terminate()
        for name, dues in (("quiet", quiet), (f"{args.chatters} chatting", busy)):
            run = Delays(name)
            for tag, due in dues.items():
                arrived = telegram.reminders.get(tag, [])
                if not arrived:
                    run.missing += 1
                    continue
                run.twice += len(arrived) > 1
                run.early += arrived[0] < due - 0.05
                run.late_s.append(arrived[0] - due)
            runs.append(run)
    finally:
        await telegram.stop()
        await llm.stop()
    return runs


async def chat(
    telegram: ReminderTelegram, person: int, think_s: float, stop: asyncio.Event
) -> None:
    """One person: a message, its answer, a pause, again (until `stop`)."""
    rng = random.Random(person)
    seq = 0
    await asyncio.sleep(rng.random() * think_s)
    while not stop.is_set():
        answered = telegram.waiting[token(person, seq)] = asyncio.Event()
        telegram.send(person, seq, rng)
        waits = {asyncio.ensure_future(answered.wait()), asyncio.ensure_future(stop.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        seq += 1
        await asyncio.sleep(think_s)


def report(starts: dict[str, list[Start]], delays: list[Delays], args: argparse.Namespace) -> int:
    print()
    print(f"{args.people:,} people, {args.people * args.per_person:,} pending reminders")
    if args.starts:
        print("Start-up (median of each):")
        report_starts(starts, args)
    print("Delay of a due reminder (its arrival at Telegram minus its time):")
    return report_delays(delays)


def report_starts(starts: dict[str, list[Start]], args: argparse.Namespace) -> None:
    base = statistics.median(s.seconds for s in starts["none"])
    base_rss = statistics.median(s.rss_mb for s in starts["none"])
    for name, label in (
        ("none", "no reminders"),
        ("100k", f"{args.people * args.per_person:,} reminders"),
    ):
        runs = starts[name]
        seconds = statistics.median(s.seconds for s in runs)
        rss = statistics.median(s.rss_mb for s in runs)
        read = statistics.median(s.read_ms for s in runs)
        print(
            f"  {label:>20}: ready in {seconds:5.2f} s ({seconds / base:.2f}x), peak RSS "
            f"{rss:6.1f} MB ({rss - base_rss:+.1f} MB), index of {runs[-1].people:,} people "
            f"read in {read:.0f} ms"
        )


def report_delays(delays: list[Delays]) -> int:
    failed = 0
    quiet_median = statistics.median(delays[0].late_s) if delays[0].late_s else float("nan")
    for run in delays:
        median = statistics.median(run.late_s) if run.late_s else float("nan")
        p99 = percentile(run.late_s, 99)
        print(
            f"  {run.name:>20}: {len(run.late_s)} sent, median {median * 1000:6.1f} ms, p99 "
            f"{p99 * 1000:6.1f} ms, max {max(run.late_s, default=0) * 1000:6.1f} ms "
            f"({median / quiet_median:.2f}x the quiet median); missing {run.missing}, "
            f"twice {run.twice}, early {run.early}"
        )
        failed += run.missing + run.twice + run.early
    return 1 if failed else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=10_000)
    parser.add_argument("--per-person", type=int, default=10)
    parser.add_argument("--starts", type=int, default=3, help="starts per folder (0: none)")
    parser.add_argument("--quiet", type=int, default=200, help="reminders due with no chat")
    parser.add_argument("--due", type=int, default=400, help="reminders due while people chat")
    parser.add_argument("--spread", type=float, default=8.0, help="seconds the dues spread over")
    parser.add_argument("--chatters", type=int, default=200)
    parser.add_argument(
        "--think", type=float, default=5.0, help="seconds between a chatter's messages"
    )
    parser.add_argument("--latency", type=float, default=0.2, help="the fake model's, seconds")
    parser.add_argument("--startup-s", type=float, default=25.0, help="the first due after launch")
    parser.add_argument("--warmup", type=float, default=6.0, help="chat before the busy dues")
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-reminders-") as tmp:
        root = Path(tmp)
        print("Start-up:", flush=True)
        starts = await measure_starts(args, root)  # (builds both folders; --starts 0: only)
        print("Delays:", flush=True)
        delays = await measure_delays(args, root)
        return report(starts, delays, args)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
