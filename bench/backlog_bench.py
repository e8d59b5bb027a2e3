"""A 20,000-message backlog beside another person's conversation (issue 23).

    python bench/backlog_bench.py [--messages 20000] [--samples 30]

`lightgrep run` as a real process, Telegram and the model faked in this process (the model
answers a turn in 50 ms and a consolidation in 300 ms). Person A's session is in the seed's
format with `--messages` unconsolidated messages (a migrated transcript, a long outage); person B
talks normally. Printed: B's answer time unloaded, A's first answer, and B's answer time while
A's backlog is worked through (median, p90, slowest), with how many consolidation rounds ran
meanwhile. Goal: B's slowest answer beside the backlog within 0.5 s of B's slowest unloaded one
(exit 1 if not).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import BotProcess, child_env, percentile  # noqa: E402
from bot.keys import session_key, user_key  # noqa: E402
from memory.keys import encode_key  # noqa: E402
from tests.rigs.fakes.openai_server import (  # noqa: E402
    Delay,
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram  # noqa: E402

GOAL_S = 0.5
MEMORY = "## User Information\n- Grows tomatoes\n\n## Preferences\n\n## Project Context\n\n"


def seed_backlog(workspaces: Path, user: str, count: int) -> None:
    """The seed's session format: one metadata line (no cursor_byte), every message after it."""
    key = session_key("telegram", "dm", user)
    folder = workspaces / user_key("telegram", user) / "sessions"
    folder.mkdir(parents=True)
    stamp = "2026-06-01T10:00:00+00:00"
    header = {"_type": "metadata", "key": key, "created_at": stamp, "updated_at": stamp}
    lines = [json.dumps({**header, "last_consolidated": 0, "metadata": {}})]
    for i in range(count):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Note {i}: the tomatoes in bed {i % 40} need water " + "and so on " * 6
        lines.append(json.dumps({"role": role, "content": text, "timestamp": stamp}))
    (folder / f"{encode_key(key)}.jsonl").write_text("\n".join(lines) + "\n")


def config(folder: Path, llm: FakeOpenAI, telegram: FakeTelegram) -> Path:
    path = folder / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "{llm.base_url}"\napi_key = "k"\nmodel = "fake-model"\n'
        "context_window_tokens = 4096\nmax_output_tokens = 512\ntimeout_s = 60\n"
        f"[memory]\nworkspaces_dir = {json.dumps(str(folder / 'workspaces'))}\n"
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{telegram.api_base}"\npoll_timeout_s = 1\n'
    )
    return path


async def answered_in(telegram: FakeTelegram, user: int, text: str) -> float:
    before = len(telegram.sent_to(user))
    started = time.monotonic()
    telegram.dm(user, text)
    sent = await telegram.wait_sent(user, before + 1, wait_s=300)
    return sent[before].at - started


def figures(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.3f} s, p90 {percentile(values, 90):.3f} s, "
        f"slowest {max(values):.3f} s"
    )


async def run(args: argparse.Namespace) -> int:
    folder = Path(tempfile.mkdtemp(prefix="lightgrep-backlog-"))
    llm = await FakeOpenAI().start()
    telegram = await FakeTelegram().start()

    def answer(request: dict[str, Any]) -> Any:
        if is_consolidation(request):
            saved = save_memory_call("[2026-06-01 10:00] Notes about the tomato beds.", MEMORY)
            return Delay(0.3, saved)
        return Delay(0.05, completion("Noted."))

    llm.default = answer
    seed_backlog(folder / "workspaces", "1", args.messages)
    bot = BotProcess(config(folder, llm, telegram), child_env(folder), folder / "bot.log")
    try:
        await bot.start(ready_timeout_s=120)
        await answered_in(telegram, 2, "hello")  # warm up
        unloaded = [await answered_in(telegram, 2, f"hello {i}") for i in range(args.samples)]
        first = asyncio.create_task(answered_in(telegram, 1, "How are my tomatoes?"))
        loaded: list[float] = []
        rounds_before = len(llm.consolidation_requests)
        while len(loaded) < args.samples or not first.done():
            loaded.append(await answered_in(telegram, 2, f"and now {len(loaded)}"))
            await asyncio.sleep(0.1)
        first_answer = await first
        rounds = len(llm.consolidation_requests) - rounds_before
    finally:
        await bot.terminate()
        await telegram.stop()
        await llm.stop()
    extra = max(loaded) - max(unloaded)
    print(f"backlog of {args.messages:,} messages in the seed's format; log in {bot.log_path}")
    print(f"another person, unloaded:        {figures(unloaded)}")
    print(f"the backlog's first turn:        answered after {first_answer:.2f} s")
    print(f"another person, beside it:       {figures(loaded)} ({rounds} consolidation rounds)")
    print(f"slowest beside it minus slowest unloaded: {extra:+.3f} s (goal: under {GOAL_S} s)")
    return 0 if extra < GOAL_S else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--samples", type=int, default=30)
    sys.exit(asyncio.run(run(parser.parse_args())))


if __name__ == "__main__":
    main()
