"""`lightgrep backup create` beside a running bot, and alone: another person's answers, RAM, speed
(issue 37, item 1).

    python bench/backup_bench.py [--megabytes 200] [--samples 30]

`lightgrep run` as a real process, Telegram and the model faked in this process (a turn takes
50 ms). Person A holds `--megabytes` MiB of media (random bytes: gzip cannot shrink them) and a
HISTORY.md; person B talks. Backups (.tar.gz) are taken one after another by the bot while B
keeps talking. Printed: B's answer time unloaded and beside the backups (median, p90, slowest),
the backups' time and MB/s, the bot's peak RSS before and after them; then the same backup with
no bot (the command reads itself): its time and its own peak RSS beside one of a folder without
the media. Goal: B's slowest answer beside the backups within 0.5 s of B's slowest unloaded one,
and the peak RSS not growing with the folder's size (exit 1 if not).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for folder in (ROOT, ROOT / "bench"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from backlog_bench import answered_in, config, figures  # noqa: E402
from memory_bench import generate_history  # noqa: E402

from bench.harness import BotProcess, child_env  # noqa: E402
from bot.keys import user_key  # noqa: E402
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion  # noqa: E402
from tests.rigs.fakes.telegram_server import FakeTelegram  # noqa: E402

GOAL_S = 0.5


def fill(folder: Path, megabytes: int) -> None:
    home = folder / "workspaces" / user_key("telegram", "1")
    (home / "media").mkdir(parents=True)
    generate_history(home / "HISTORY.md", 5)
    with (home / "media" / "big.bin").open("wb") as out:
        for _ in range(megabytes):
            out.write(os.urandom(1 << 20))


def backup_alone(config_path: Path, env: dict[str, str], target: Path) -> tuple[float, int]:
    """(seconds, the command's peak RSS in kB) of `lightgrep backup create` with no bot."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", "backup", "create", str(target), "--config",
         str(config_path)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"backup failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return time.monotonic() - started, usage.ru_maxrss


async def run(args: argparse.Namespace) -> int:
    folder = Path(tempfile.mkdtemp(prefix="lightgrep-backup-"))
    fill(folder, args.megabytes)
    llm = await FakeOpenAI().start()
    telegram = await FakeTelegram().start()
    llm.default = lambda request: Delay(0.05, completion("Noted."))
    config_path = config(folder, llm, telegram)
    env = child_env(folder)
    bot = BotProcess(config_path, env, folder / "bot.log")
    backups: list[float] = []
    try:
        await bot.start(ready_timeout_s=120)
        await answered_in(telegram, 1, "hello")  # A's folder is known to the bot
        await answered_in(telegram, 2, "hello")
        unloaded = [await answered_in(telegram, 2, f"hello {i}") for i in range(args.samples)]
        rss_before = bot.sample_rss()
        beside: list[float] = []

        async def backing_up() -> None:
            for number in range(args.backups):
                started = time.monotonic()
                proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bot.cli", "backup", "create",
                    str(folder / f"b{number}.tar.gz"), "--config", str(config_path),
                    env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
                _, err = await proc.communicate()
                if proc.returncode != 0:
                    raise RuntimeError(f"backup failed: {err.decode()}")
                backups.append(time.monotonic() - started)
                (folder / f"b{number}.tar.gz").unlink()

        task = asyncio.create_task(backing_up())
        while not task.done() or len(beside) < args.samples:
            beside.append(await answered_in(telegram, 2, f"and now {len(beside)}"))
            bot.sample_rss()
            await asyncio.sleep(0.05)
        await task
        rss_after = bot.sample_rss()
    finally:
        await bot.terminate()
        await telegram.stop()
        await llm.stop()
    seconds_big, rss_big = backup_alone(config_path, env, folder / "alone.tar.gz")
    (folder / "alone.tar.gz").unlink()
    (folder / "workspaces" / user_key("telegram", "1") / "media" / "big.bin").unlink()
    _, rss_small = backup_alone(config_path, env, folder / "small.tar.gz")

    print(f"A's media: {args.megabytes} MiB of random bytes; log in {bot.log_path}")
    print(f"another person, unloaded:        {figures(unloaded)}")
    print(f"another person, beside backups:  {figures(beside)} ({len(beside)} answers)")
    rate = args.megabytes / statistics.median(backups)
    print(f"{len(backups)} backups by the bot: median {statistics.median(backups):.2f} s "
          f"({rate:.0f} MiB/s, .tar.gz)")  # fmt: skip
    print(f"bot's peak RSS: {rss_before / 1024:.0f} MiB before, {rss_after / 1024:.0f} MiB after")
    print(f"alone: {seconds_big:.2f} s ({args.megabytes / seconds_big:.0f} MiB/s); the "
          f"command's peak RSS {rss_big / 1024:.0f} MiB, {rss_small / 1024:.0f} MiB without "
          "the media")  # fmt: skip
    extra = max(beside) - max(unloaded)
    print(f"slowest beside minus slowest unloaded: {extra:+.3f} s (goal: under {GOAL_S} s)")
    ratio = statistics.median(beside) / statistics.median(unloaded)
    print(f"medians: beside / unloaded = {ratio:.2f}")
    bounded = rss_after - rss_before < 64 * 1024 and rss_big - rss_small < 64 * 1024
    return 0 if extra < GOAL_S and bounded else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--backups", type=int, default=3)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
