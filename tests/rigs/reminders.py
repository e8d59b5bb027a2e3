"""What the reminder tests share: `lightgrep run` on the fake Telegram as a real process, and
reading what a person was sent and what their reminders file holds."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness import BotProcess
from memory import clock
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent

WAIT_S = 30.0  # a hang guard: a child's cold start on a loaded machine (tests/rigs/cli.py)
ALLOWED = ("42", "43", "44")

# The scheduler sleeps until a reminder's time (bot/reminders/scheduler.py), so any lateness is the
# machine's: a loaded one (CI beside other jobs) was seen at 1.02 s. A scheduler that woke on a
# tick, or on the person's next message, would be several seconds late.
LATE_S = 2.0


def run_config(folder: Path, llm: FakeOpenAI, telegram: FakeTelegram, extra: str = "") -> Path:
    """Telegram at the fake, three people allowed, repeats as short as a second."""
    path = folder / "config.toml"
    path.write_text(
        "[llm]\n"
        f'base_url = "{llm.base_url}"\napi_key = "test-key"\nmodel = "fake-model"\n'
        "timeout_s = 10\nmax_retries = 0\n"
        f"[memory]\nworkspaces_dir = {json.dumps(str(folder / 'workspaces'))}\n"
        "[agent]\nstream = false\n"
        "[limits]\nreminder_min_repeat_s = 1\n"
        "[telegram]\n"
        f'enabled = true\ntoken = "{TOKEN}"\nallow_from = {json.dumps(list(ALLOWED))}\n'
        f'api_base = "{telegram.api_base}"\npoll_timeout_s = 1\n' + extra
    )
    return path


def bot_process(folder: Path, config: Path, env: dict[str, str]) -> BotProcess:
    return BotProcess(config, env, folder / "bot.log")


def wall_time(sent: Sent) -> float:
    """When the fake received the message, on the wall clock (Sent.at is monotonic)."""
    return time.time() - (time.monotonic() - sent.at)


def texts(telegram: FakeTelegram, chat: int, needle: str) -> list[Sent]:
    return [s for s in telegram.sent_to(chat) if needle in s.text]


async def until(
    check: Callable[[], object], what: str, bot: BotProcess | None = None, wait_s: float = WAIT_S
) -> None:
    """Wait for something the bot does (polled: it looks at the fakes and the files)."""
    deadline = time.monotonic() + wait_s
    while not check():  # polled: the fakes, the files
        if time.monotonic() > deadline:
            tail = f"\n{bot.log_tail(40)}" if bot is not None else ""
            raise AssertionError(f"timed out waiting for {what}{tail}")
        await asyncio.sleep(0.01)


async def answer(
    telegram: FakeTelegram, chat: int, needle: str, bot: BotProcess | None = None
) -> Sent:
    """The first message sent to `chat` holding `needle`, once there is one."""
    await until(lambda: texts(telegram, chat, needle), f"{needle!r} in chat {chat}", bot)
    return texts(telegram, chat, needle)[0]


def records(workspaces: Path, user: str) -> list[dict[str, Any]]:
    path = workspaces / user / "reminders.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def due_of(workspaces: Path, user: str, what: str) -> datetime:
    """When the bot said the reminder holding `what` is due (its `set` record)."""
    for record in records(workspaces, user):
        if record["type"] == "set" and what in record["what"]:
            due = clock.parse(record["due"])
            assert due is not None
            return due
    raise AssertionError(f"no reminder of {what!r} for {user}: {records(workspaces, user)}")
