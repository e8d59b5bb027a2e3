"""Load benchmark: `lightgrep run` as a real process serving N simulated Telegram users.

The fake Bot API and a fake OpenAI-compatible server with a fixed latency run in this process on
127.0.0.1. Each user sends M private messages, the next one as soon as the previous one is
answered (a person waiting for the answer; `--burst` sends all M at once instead). The context
window is small, so consolidation (save_memory) runs along the way.

Prints, per user count: throughput beside the ideal for the LLM latency and the adapter's
concurrency limit, p50/p99 of the time the bot adds on top of the LLM, the bot's peak RSS, and
messages sent / answered / persisted (must be equal; the exit code is 1 if not).

Run: python bench/load_bench.py                    (100 and 500 users × 5 messages, 200 ms)
     python bench/load_bench.py --users 50 --messages 3 --latency 0.1
     python bench/load_bench.py --users 500 --no-stream      (answers asked whole)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from adapters.telegram.adapter import MAX_CONCURRENT_UPDATES
from adapters.telegram.polling import POLL_LIMIT
from bench.harness import (
    FIRST_USER_ID,
    TOKEN_RE,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    child_env,
    percentile,
    read_workspaces,
    write_config,
)
from tests.rigs.fakes.telegram_server import Sent


@dataclass
class Result:
    users: int
    messages: int
    elapsed_s: float
    answered: int
    persisted: int
    duplicated_answers: int
    duplicated_persisted: int
    overheads_ms: list[float]
    peak_rss_kb: int
    consolidations: int
    memory_files: int
    problems: list[str]
    bot_cpu_s: float
    bench_cpu_s: float
    abandoned: dict[str, int]
    exit_code: int
    timed_out: bool

    @property
    def sent(self) -> int:
        return self.users * self.messages

    @property
    def ok(self) -> bool:
        return (
            self.sent == self.answered == self.persisted
            and not self.duplicated_answers
            and not self.duplicated_persisted
            and not self.problems
            and self.exit_code == 0
            and not self.timed_out
        )


async def run_once(args: argparse.Namespace, users: int, folder: Path) -> Result:
    rng = random.Random(args.seed)
    llm = await BenchLLM(args.latency, reply_words=args.reply_words).start()
    telegram = await BenchTelegram().start()
    bot = BotProcess(
        write_config(folder, llm, telegram, args.window, stream=not args.no_stream),
        child_env(folder),
        folder / "bot.log",
        profile=Path(f"{args.profile}.{users}.prof") if args.profile else None,
    )
    all_answered = asyncio.Event()
    total = users * args.messages
    answered: set[str] = set()

    def on_answer(name: str, sent: Sent) -> None:
        if name in answered:
            return
        answered.add(name)
        found = TOKEN_RE.fullmatch(name)
        assert found is not None
        user, seq = int(found.group(1)), int(found.group(2))
        if not args.burst and seq + 1 < args.messages:
            telegram.send(user, seq + 1, rng)
        if len(answered) == total:
            all_answered.set()

    telegram.on_answer = on_answer
    timed_out = False
    try:
        await bot.start()
        started = time.monotonic()
        bench_cpu_start = time.process_time()
        bot_cpu_start = bot.cpu_seconds()
        for index in range(users):
            for seq in range(args.messages if args.burst else 1):
                telegram.send(FIRST_USER_ID + index, seq, rng)
        sampler = asyncio.create_task(_sample_rss(bot))
        try:
            await asyncio.wait_for(all_answered.wait(), args.timeout)
        except TimeoutError:
            timed_out = True
        sampler.cancel()
        last = max((times[0] for times in telegram.answers.values()), default=time.monotonic())
        elapsed = last - started
        bot_cpu = bot.cpu_seconds() - bot_cpu_start
        bench_cpu = time.process_time() - bench_cpu_start
        code = await bot.terminate()
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()
    disk = read_workspaces(folder / "workspaces")
    return Result(
        users=users,
        messages=args.messages,
        elapsed_s=elapsed,
        answered=len(answered),
        persisted=disk.persisted,
        duplicated_answers=sum(len(t) - 1 for t in telegram.answers.values()),
        duplicated_persisted=len(disk.duplicated),
        overheads_ms=_overheads(telegram, llm),
        peak_rss_kb=bot.peak_rss_kb,
        consolidations=llm.consolidations,
        memory_files=disk.memory_files,
        problems=disk.problems,
        bot_cpu_s=bot_cpu,
        bench_cpu_s=bench_cpu,
        abandoned=dict(telegram.abandoned),
        exit_code=code,
        timed_out=timed_out,
    )


async def _sample_rss(bot: BotProcess) -> None:
    while True:
        bot.sample_rss()
        await asyncio.sleep(0.2)


def _overheads(telegram: BenchTelegram, llm: BenchLLM) -> list[float]:
    """Per turn: injected → first answer, minus the time an LLM request of that user was in
    flight meanwhile (its chat call, and a consolidation the turn had to wait for)."""
    result = []
    for name, times in telegram.answers.items():
        found = TOKEN_RE.fullmatch(name)
        assert found is not None
        start, end = telegram.injected_at[name], times[0]
        llm_time = llm.busy_within(int(found.group(1)), start, end)
        result.append((end - start - llm_time) * 1000)
    return result


def report(result: Result, args: argparse.Namespace) -> None:
    # Updates are acknowledged only once handled, and getUpdates returns at most POLL_LIMIT of
    # them from the lowest unacknowledged one on: no more than that can be in flight.
    limit = min(MAX_CONCURRENT_UPDATES, POLL_LIMIT)
    in_flight = min(result.users, limit)
    ideal = in_flight / args.latency
    throughput = result.sent / result.elapsed_s if result.elapsed_s > 0 else 0.0
    p50, p99 = percentile(result.overheads_ms, 50), percentile(result.overheads_ms, 99)
    print(f"== {result.users} users × {result.messages} messages "
          f"({'burst' if args.burst else 'each waits for the answer'}), "
          f"LLM latency {args.latency * 1000:.0f} ms, window {args.window} tokens, "
          f"stream {'off' if args.no_stream else 'on'}")  # fmt: skip
    print(f"  throughput      {throughput:8.1f} turns/s   (ideal {ideal:.0f} turns/s = "
          f"min({result.users} users, concurrency limit {limit}) / {args.latency:.3f} s; "
          f"{result.sent} turns in {result.elapsed_s:.1f} s)")  # fmt: skip
    print(f"  bot overhead    p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   "
          f"(injected → sendMessage, minus that user's LLM time)")  # fmt: skip
    print(f"  peak RSS        {result.peak_rss_kb / 1024:8.1f} MiB (VmHWM of the bot process)")
    per_turn = result.bot_cpu_s * 1000 / result.sent
    print(f"  CPU             bot {result.bot_cpu_s:.1f} s ({per_turn:.1f} ms/turn), "
          f"fakes+driver {result.bench_cpu_s:.1f} s, {os.cpu_count()} CPUs, "
          f"wall {result.elapsed_s:.1f} s")  # fmt: skip
    if result.abandoned:
        print(f"  dropped calls   {result.abandoned} (Bot API calls the bot cancelled mid-send)")
    print(f"  consolidations  {result.consolidations:8d}        "
          f"({result.memory_files} MEMORY.md files written)")  # fmt: skip
    print(f"  messages        sent {result.sent}  answered {result.answered}  "
          f"persisted {result.persisted}  duplicated answers {result.duplicated_answers}  "
          f"duplicated in sessions {result.duplicated_persisted}")  # fmt: skip
    print(
        f"  clean stop      exit code {result.exit_code} after SIGTERM"
        + ("   TIMED OUT waiting for answers" if result.timed_out else "")
    )
    for problem in result.problems[:10]:
        print(f"  DAMAGE          {problem}")
    print(f"  verdict         {'OK' if result.ok else 'FAILED'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--messages", type=int, default=5, help="messages per user")
    parser.add_argument("--latency", type=float, default=0.2, help="LLM latency, seconds")
    parser.add_argument("--window", type=int, default=1600, help="context_window_tokens")
    parser.add_argument("--reply-words", type=int, default=40, help="words per LLM answer")
    parser.add_argument("--burst", action="store_true", help="each user sends all at once")
    parser.add_argument("--no-stream", action="store_true", help="[agent] stream = false")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        type=lambda prefix: Path(prefix).resolve(),  # the bot runs in another folder
        help="run the bot under cProfile, writing PREFIX.<users>.prof (slows the bot down)",
    )
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ok = True
    for users in args.users:
        with tempfile.TemporaryDirectory(prefix="lightgrep-load-") as tmp:
            result = await run_once(args, users, Path(tmp))
            report(result, args)
            if not result.ok:
                print((Path(tmp) / "bot.log").read_text(errors="replace")[-3000:])
            ok = ok and result.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
