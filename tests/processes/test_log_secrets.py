"""No secret reaches the log of a real `lightgrep run --verbose` (every logger at DEBUG: PTB,
aiohttp, asyncio, ours), though every Bot API URL holds the bot token and the transport's errors
are about those URLs. In-process tests with caplog check the adapter's own lines; this one
checks what an operator's terminal gets, through the CLI's handler, across failing calls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.harness import BotProcess, child_env, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram

pytestmark = pytest.mark.timeout(60)
LLM_KEY = "bench-key"  # bench.harness.write_config's [llm] api_key


async def until(predicate: Callable[[], bool], what: str, wait_s: float = 20.0) -> None:
    deadline = time.monotonic() + wait_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_debug_log_of_a_running_bot_holds_no_token(tmp_path: Path) -> None:
    llm = await FakeOpenAI().start()
    llm.default = lambda body: completion("hello back")
    telegram = await FakeTelegram().start()
    config = write_config(tmp_path, llm, telegram, window_tokens=8000)
    log_path = tmp_path / "bot.log"
    bot = BotProcess(config, child_env(tmp_path), log_path, command=("run", "--verbose"))
    try:
        await bot.start()
        telegram.dm(42, "first")
        await until(lambda: len(telegram.sent_to(42)) == 1, "the first answer")
        telegram.fail_next("getUpdates", 502, "Bad Gateway")
        telegram.fail_next("getUpdates", 409, "Conflict: terminated by other getUpdates request")
        # Both served before the next message: a poll already under way when they were set
        # could bring it, and the bot be stopped before it ever failed.
        await until(lambda: not telegram.failures_pending("getUpdates"), "the failed polls")
        telegram.dm(42, "second")
        await until(lambda: len(telegram.sent_to(42)) == 2, "the second answer")
        assert await bot.terminate() == 0
    finally:
        if bot.proc is not None and bot.proc.returncode is None:
            await bot.kill()
        await telegram.stop()
        await llm.stop()

    log = log_path.read_text(errors="replace")
    # The log is the verbose one, and it tells of the failures: the check can fail.
    assert " DEBUG telegram" in log and " DEBUG asyncio" in log
    assert "getUpdates failed (NetworkError: Bad Gateway)" in log
    assert "Conflict: terminated by other getUpdates request" in log
    assert TOKEN not in log and TOKEN.split(":")[1] not in log
    assert LLM_KEY not in log
