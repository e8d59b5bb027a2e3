"""Another person's answers while a big history's index is built (issue 28).

    python bench/index_bench.py [--megabytes 100] [--samples 30]

`lightgrep run` as a real process, Telegram and the model faked in this process (a turn takes
50 ms). Person A has a generated HISTORY.md of `--megabytes` MiB and no index; person B talks
normally. A's first message starts the index's build in a background thread of the bot
(memory.search.engine.prepare); B keeps talking while it runs. Printed: B's answer time
unloaded and beside the build (median, p90, slowest), how long the build took, and A's first
/recall after it. Goal: B's slowest answer beside the build within 0.5 s of B's slowest
unloaded one (exit 1 if not).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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
from memory.search.history_index import index_path  # noqa: E402
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion  # noqa: E402
from tests.rigs.fakes.telegram_server import FakeTelegram  # noqa: E402

GOAL_S = 0.5


async def run(args: argparse.Namespace) -> int:
    folder = Path(tempfile.mkdtemp(prefix="lightgrep-index-"))
    home = folder / "workspaces" / user_key("telegram", "1")
    home.mkdir(parents=True)
    history = home / "HISTORY.md"
    entries = generate_history(history, args.megabytes)
    llm = await FakeOpenAI().start()
    telegram = await FakeTelegram().start()
    llm.default = lambda request: Delay(0.05, completion("Noted."))
    bot = BotProcess(config(folder, llm, telegram), child_env(folder), folder / "bot.log")
    try:
        await bot.start(ready_timeout_s=120)
        await answered_in(telegram, 2, "hello")  # warm up
        unloaded = [await answered_in(telegram, 2, f"hello {i}") for i in range(args.samples)]
        started = time.monotonic()
        await answered_in(telegram, 1, "hi")  # starts the build
        beside: list[float] = []
        while not index_path(history).exists() and time.monotonic() - started < 600:
            beside.append(await answered_in(telegram, 2, f"and now {len(beside)}"))
            await asyncio.sleep(0.1)
        built = time.monotonic() - started
        recall = await answered_in(telegram, 1, "/recall paid euros late")
    finally:
        await bot.terminate()
        await telegram.stop()
        await llm.stop()
    size = history.stat().st_size / 2**20
    print(f"HISTORY.md of {size:.0f} MiB ({entries:,} entries); log in {bot.log_path}")
    print(f"another person, unloaded:      {figures(unloaded)}")
    if not beside:
        print("the index was there before another person's first answer: nothing to compare")
        return 1
    print(f"another person, beside build:  {figures(beside)} ({len(beside)} answers)")
    print(f"index built {built:.1f} s after the first message; A's /recall then {recall:.3f} s")
    extra = max(beside) - max(unloaded)
    print(f"slowest beside it minus slowest unloaded: {extra:+.3f} s (goal: under {GOAL_S} s)")
    ratio = statistics.median(beside) / statistics.median(unloaded)
    print(f"medians: beside / unloaded = {ratio:.2f}")
    return 0 if extra < GOAL_S else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--samples", type=int, default=30)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
