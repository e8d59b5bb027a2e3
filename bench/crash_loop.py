"""Crash loop: SIGKILL `lightgrep run` at random (seeded) moments under traffic and during
consolidation, restart it, and check after every kill that nothing was lost or damaged.

Setup as in load_bench.py (fakes in this process, the bot as a real process, a small context
window so consolidation runs all the time). Users keep talking across the kills: each has up to
`--burst` messages waiting for an answer. Kill moments rotate between a random time under
traffic, mid consolidation (save_memory request in flight) and just after the fake answered
save_memory (while the bot writes HISTORY.md / MEMORY.md).

After every kill, with the process gone:
  - every session file loads (memory.session.SessionStore); no unreadable line but a torn last one
  - every MEMORY.md is complete: its numbered first and last lines (written by the fake) match;
    every HISTORY.md entry of the fake is whole
  - every user message the fake delivered (getUpdates returned it) is in a session file at most
    once; one that is in none must still be within the bot's reach: not acknowledged (a later
    getUpdates offset: Telegram forgets acknowledged updates), or pending in the bot's spool
    (adapters/telegram/spool.py: accepted to disk, then acknowledged; the next start handles it).
    Out of reach and not persisted = LOST; out of reach, persisted, never answered = UNANSWERED
At the end the bot runs until every message still owed is answered, stops on SIGTERM, and every
message sent must be in a session file exactly once (redelivery = "picks up where it left off")
and answered.

An answer sent twice is counted but allowed: a kill after sendMessage and before the getUpdates
that acknowledges the update makes Telegram deliver it again, and the bot resends the answer it
has on file (at-least-once delivery; the message itself is still kept once).

Run: python bench/crash_loop.py [--kills 30] [--users 20] [--seed 1]
Exit code 1 on any loss, duplicate in a session file or damage.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import (
    FIRST_USER_ID,
    TOKEN_RE,
    BenchLLM,
    BenchTelegram,
    BotProcess,
    DiskState,
    child_env,
    read_workspaces,
    write_config,
)
from tests.rigs.fakes.telegram_server import Sent

MODES = ("traffic", "consolidating", "after-save")


@dataclass
class Tally:
    kills: int = 0
    kills_by_mode: dict[str, int] = field(default_factory=dict)
    kills_mid_consolidation: int = 0
    lost: set[str] = field(default_factory=set)  # out of the bot's reach, never persisted
    duplicated: set[str] = field(default_factory=set)
    unanswered: set[str] = field(default_factory=set)  # persisted, never answered
    problems: list[str] = field(default_factory=list)
    torn_last_lines: int = 0
    stale_temp_files: int = 0
    pending_at_kill: int = 0  # delivered, unpersisted, within reach: handled after the restart
    answers_resent: int = 0  # answers sent more than once (allowed: at-least-once delivery)
    persisted_once: int = 0  # at the end: sent messages in a session file exactly once
    answered: int = 0  # at the end: sent messages with an answer sent

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unanswered or self.problems)


class Traffic:
    """Users who keep talking: each has at most `burst` messages awaiting an answer."""

    def __init__(self, telegram: BenchTelegram, users: int, burst: int, seed: int) -> None:
        self.telegram = telegram
        self.rng = random.Random(seed)
        self.burst = burst
        self.next_seq = dict.fromkeys(range(FIRST_USER_ID, FIRST_USER_ID + users), 0)
        self.waiting: dict[int, set[str]] = {user: set() for user in self.next_seq}
        self.sent: list[str] = []
        self.running = False
        telegram.on_answer = self._answered

    def start(self) -> None:
        """Start (or resume) talking: every user tops up to `burst` unanswered messages."""
        self.running = True
        for user in self.next_seq:
            self._top_up(user)

    def _top_up(self, user: int) -> None:
        while self.running and len(self.waiting[user]) < self.burst:
            name = self.telegram.send(user, self.next_seq[user], self.rng)
            self.next_seq[user] += 1
            self.waiting[user].add(name)
            self.sent.append(name)

    def _answered(self, name: str, sent: Sent) -> None:
        found = TOKEN_RE.fullmatch(name)
        assert found is not None
        user = int(found.group(1))
        self.waiting[user].discard(name)
        self._top_up(user)

    def write_off(self, name: str) -> None:
        """An answer that will never come (out of reach, and the bot that had it is dead)."""
        found = TOKEN_RE.fullmatch(name)
        assert found is not None
        user = int(found.group(1))
        self.waiting[user].discard(name)
        self._top_up(user)

    def owed(self) -> set[str]:
        return {name for names in self.waiting.values() for name in names}


async def kill_at_random_moment(
    bot: BotProcess, llm: BenchLLM, mode: str, rng: random.Random, args: argparse.Namespace
) -> bool:
    """Wait for the moment `mode` asks for, SIGKILL; True if a consolidation was in flight."""
    if mode == "traffic":
        await asyncio.sleep(rng.uniform(args.min_up, args.max_up))
    else:
        event = llm.consolidation_started if mode == "consolidating" else llm.consolidation_answered
        event.clear()
        with contextlib.suppress(TimeoutError):  # none came: a kill under traffic then
            await asyncio.wait_for(event.wait(), args.max_up * 3)
        if mode == "consolidating":
            await asyncio.sleep(rng.uniform(0, args.latency))
        else:
            await asyncio.sleep(rng.uniform(0, 0.01))
    in_consolidation = llm.consolidations_in_flight > 0
    await bot.kill()
    return in_consolidation


def out_of_reach(telegram: BenchTelegram, disk: DiskState, name: str) -> bool:
    """No later run of the bot will see this message again: Telegram has forgotten it
    (acknowledged) and the spool does not hold it."""
    return telegram.acked_token(name) and telegram.update_of[name] not in disk.spooled


def check_after_kill(
    workspaces: Path, telegram: BenchTelegram, traffic: Traffic, tally: Tally, number: int
) -> str:
    """The invariants after a kill; a one-line summary of this kill."""
    disk = read_workspaces(workspaces)
    tally.problems += [f"after kill {number}: {p}" for p in disk.problems]
    tally.torn_last_lines = max(tally.torn_last_lines, disk.torn_last_lines)
    tally.stale_temp_files = disk.stale_temp_files
    new_lost, new_dups, pending = [], [], 0
    for name in telegram.delivered_tokens():
        count = disk.user_tokens.get(name, 0)
        if count > 1:
            if name not in tally.duplicated:
                new_dups.append(name)
            tally.duplicated.add(name)
        elif count == 0 and out_of_reach(telegram, disk, name):
            if name not in tally.lost:
                new_lost.append(name)
                tally.lost.add(name)
        elif count == 0:
            pending += 1
    tally.pending_at_kill += pending
    unanswered = 0
    for name in traffic.owed():  # answers that can no longer come
        if out_of_reach(telegram, disk, name):
            traffic.write_off(name)
            if disk.user_tokens.get(name, 0):
                tally.unanswered.add(name)
                unanswered += 1
    return (
        f"persisted {disk.persisted:5d}  lost +{len(new_lost)}  duplicated +{len(new_dups)}  "
        f"awaiting redelivery {pending}  "
        f"unanswered +{unanswered}  memory files {disk.memory_files}  "
        f"torn last lines {disk.torn_last_lines}  damage {len(disk.problems)}"
    )


async def crash_loop(args: argparse.Namespace, folder: Path) -> tuple[Tally, Traffic, int]:
    rng = random.Random(args.seed)
    llm = await BenchLLM(args.latency, reply_words=args.reply_words).start()
    telegram = await BenchTelegram().start()
    config = write_config(folder, llm, telegram, args.window)
    env = child_env(folder)
    log = folder / "bot.log"
    traffic = Traffic(telegram, args.users, args.burst, args.seed)
    tally = Tally()
    code = -1
    bot = BotProcess(config, env, log)
    try:
        for number in range(1, args.kills + 1):
            await bot.start()
            if not traffic.running:
                traffic.start()
            mode = MODES[(number - 1) % len(MODES)]
            tally.kills_by_mode[mode] = tally.kills_by_mode.get(mode, 0) + 1
            if await kill_at_random_moment(bot, llm, mode, rng, args):
                tally.kills_mid_consolidation += 1
            tally.kills += 1
            await asyncio.sleep(0.05)  # let the fake finish requests of the dead connections
            summary = check_after_kill(folder / "workspaces", telegram, traffic, tally, number)
            if args.verbose:
                print(f"kill {number:3d} ({mode:13s}) {summary}", flush=True)
            await asyncio.sleep(rng.uniform(0, args.down))  # users keep sending meanwhile
        await bot.start()
        traffic.running = False  # no new messages: drain what is owed
        deadline = time.monotonic() + args.drain_timeout
        while traffic.owed() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            for name in list(traffic.owed()):
                if telegram.acked_token(name) and name in tally.lost:
                    traffic.write_off(name)
        code = await bot.terminate()
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()
    final = read_workspaces(folder / "workspaces")
    tally.problems += [f"at the end: {p}" for p in final.problems]
    for name in traffic.sent:
        count = final.user_tokens.get(name, 0)
        if count > 1:
            tally.duplicated.add(name)
        elif count == 0 and name not in tally.lost:
            tally.lost.add(name)
            tally.problems.append(f"at the end: {name} was never persisted")
        tally.persisted_once += count == 1
        tally.answered += bool(telegram.answers.get(name))
        if count and not telegram.answers.get(name):
            tally.unanswered.add(name)  # (one left owed at the end is counted here too)
    tally.stale_temp_files = final.stale_temp_files
    tally.answers_resent = sum(len(times) - 1 for times in telegram.answers.values())
    return tally, traffic, code


def report(tally: Tally, traffic: Traffic, telegram_code: int, args: argparse.Namespace) -> None:
    sent = len(traffic.sent)
    modes = ", ".join(f"{n} {m}" for m, n in tally.kills_by_mode.items())
    print(f"== crash loop: {args.users} users, up to {args.burst} unanswered each, LLM latency "
          f"{args.latency * 1000:.0f} ms, window {args.window}, seed {args.seed}")  # fmt: skip
    print(f"  kills survived   {tally.kills} ({modes}; {tally.kills_mid_consolidation} with a "
          f"consolidation request in flight)")  # fmt: skip
    print(f"  messages         sent {sent}  persisted once {tally.persisted_once}  answered "
          f"{tally.answered}  duplicated {len(tally.duplicated)}  lost {len(tally.lost)}  "
          f"unanswered {len(tally.unanswered)}")  # fmt: skip
    print(f"  after kills      {tally.pending_at_kill} delivered, unpersisted messages awaited "
          "redelivery or the spool (all persisted later unless counted lost)")  # fmt: skip
    print(f"  answers resent   {tally.answers_resent} (killed after sendMessage, before the "
          "acknowledgement: redelivered, answer sent again; allowed)")  # fmt: skip
    print(f"  files            torn last lines seen {tally.torn_last_lines}, stale temp files "
          f"{tally.stale_temp_files}, final stop exit code {telegram_code}")  # fmt: skip
    for name in sorted(tally.lost)[:10]:
        print(f"  LOST             {name} (acknowledged by getUpdates, never persisted)")
    for name in sorted(tally.unanswered)[:10]:
        print(f"  UNANSWERED       {name} (persisted, no answer ever sent)")
    for name in sorted(tally.duplicated)[:10]:
        print(f"  DUPLICATED       {name}")
    for problem in tally.problems[:10]:
        print(f"  DAMAGE           {problem}")
    print(f"  verdict          {'OK' if tally.ok else 'FAILED'}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--burst", type=int, default=2, help="unanswered messages per user")
    parser.add_argument("--latency", type=float, default=0.2, help="LLM latency, seconds")
    parser.add_argument("--window", type=int, default=1400, help="context_window_tokens")
    parser.add_argument("--reply-words", type=int, default=40)
    parser.add_argument("--min-up", type=float, default=0.3, help="seconds up before a kill")
    parser.add_argument("--max-up", type=float, default=2.0)
    parser.add_argument("--down", type=float, default=0.3, help="max seconds down after one")
    parser.add_argument("--drain-timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("-v", "--verbose", action="store_true", help="a line per kill")
    return parser.parse_args(argv)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lightgrep-crash-") as tmp:
        tally, traffic, code = await crash_loop(args, Path(tmp))
        report(tally, traffic, code, args)
    return 0 if tally.ok and code == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
