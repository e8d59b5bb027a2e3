"""One platform's trouble never stops another: `lightgrep run` as a real process serving the fake
Telegram and the fake Discord, while the Discord side misbehaves."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from tests.rigs.cli import STEP_TIMEOUT, read_until, start_run, telegram_config
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram


def both_platforms(folder: Path, llm: FakeOpenAI, telegram: FakeTelegram, discord: FakeDiscord):
    config = telegram_config(folder, llm, telegram, TOKEN)
    with config.open("a") as extra:
        extra.write(
            f'[discord]\nenabled = true\ntoken = "{discord.token}"\nallow_from = ["*"]\n'
            f'api_base = "{discord.api_base}"\ngateway_url = "{discord.gateway_url}"\n'
        )
    return config


async def both_ready(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    seen = ""
    while not ("telegram is ready" in seen and "discord is ready" in seen):
        seen += await read_until(proc.stderr, "is ready")
    return seen


async def answered_on_both(
    telegram: FakeTelegram, discord: FakeDiscord, telegram_answers: int, discord_answers: int
) -> None:
    """A Telegram DM and a Discord DM are both answered (the n-th answer of each)."""
    telegram.dm(42, "hi from telegram")
    await telegram.wait_sent(42, telegram_answers, wait_s=STEP_TIMEOUT)
    dm = discord.message(user_payload(77, "bea"), "hi from discord", channel_id=555)
    await discord.dispatch("MESSAGE_CREATE", dm)
    await discord.wait_until(
        lambda: len(discord.sent_messages(555)) >= discord_answers, within=STEP_TIMEOUT
    )


async def stop(proc: asyncio.subprocess.Process) -> str:
    assert proc.stderr is not None
    proc.terminate()
    await asyncio.wait_for(proc.wait(), STEP_TIMEOUT)
    return (await proc.stderr.read()).decode()


async def test_a_malformed_discord_event_stops_neither_platform(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    """A MESSAGE_CREATE whose channel_id is no snowflake once ended the whole process."""
    discord = await FakeDiscord().start()
    fake_llm.default = lambda request: completion("Still serving.")
    proc = await start_run(both_platforms(tmp_path, fake_llm, fake_telegram, discord), child_env)
    try:
        await both_ready(proc)
        bad = discord.message(user_payload(77, "bea"), "boom", channel_id=555)
        bad["channel_id"] = "not-a-snowflake"
        await discord.dispatch("MESSAGE_CREATE", bad)
        await answered_on_both(fake_telegram, discord, 1, 1)
        assert proc.returncode is None
        log = await stop(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await discord.stop()
    assert proc.returncode == 0, log
    assert "MESSAGE_CREATE" in log and "dropped" in log


async def test_a_platform_that_fails_while_running_is_restarted_and_the_others_keep_serving(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    """The gateway closes for good (4004) after the bot has been serving: Discord is logged,
    restarted with a back-off and serves again; Telegram answers meanwhile."""
    discord = await FakeDiscord().start()
    fake_llm.default = lambda request: completion("Still serving.")
    proc = await start_run(both_platforms(tmp_path, fake_llm, fake_telegram, discord), child_env)
    try:
        await both_ready(proc)
        await discord.close_gateway(4004)
        assert proc.stderr is not None
        failed = await read_until(proc.stderr, "restarting discord")
        fake_telegram.dm(42, "are you there?")
        await fake_telegram.wait_sent(42, 1, wait_s=STEP_TIMEOUT)
        await read_until(proc.stderr, "discord is ready")
        assert discord.identifies == 2
        await answered_on_both(fake_telegram, discord, 2, 1)
        log = await stop(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await discord.stop()
    assert proc.returncode == 0, log
    assert "discord failed while running" in failed


async def test_a_webhook_update_acknowledged_then_killed_is_answered_after_the_restart(
    fake_llm: FakeOpenAI,
    fake_telegram: FakeTelegram,
    tmp_path: Path,
    child_env: dict[str, str],
) -> None:
    """Webhook mode, SIGKILL while the model is thinking about a message Telegram was told we
    have: the next start answers it (Telegram never sends it again), and it is kept once."""
    port = free_port()
    config = telegram_config(tmp_path, fake_llm, fake_telegram, TOKEN)
    with config.open("a") as extra:
        extra.write(
            f'mode = "webhook"\nwebhook_url = "http://127.0.0.1:{port}/hook"\n'
            f"webhook_port = {port}\n"
        )
    fake_llm.queue(Delay(30, completion("too late")))
    fake_llm.default = lambda request: completion("answered after the restart")
    first = await start_run(config, child_env)
    try:
        assert first.stderr is not None
        await read_until(first.stderr, "telegram is ready")
        fake_telegram.dm(42, "remember the green door")
        assert await fake_telegram.deliver(fake_telegram.last_update_id) == [200]
        await fake_telegram.wait_until(lambda: bool(fake_llm.requests), STEP_TIMEOUT)
    finally:
        first.kill()
        await first.wait()
    second = await start_run(config, child_env)
    try:
        [sent] = await fake_telegram.wait_sent(42, wait_s=STEP_TIMEOUT)
        log = await stop(second)
    finally:
        if second.returncode is None:
            second.kill()
            await second.wait()
    assert sent.text == "answered after the restart", log
    assert fake_telegram.webhook_answers == [200]
    lines = (tmp_path / "workspaces").rglob("*.jsonl")
    users = [line for path in lines for line in path.read_text().splitlines() if '"user"' in line]
    assert len(users) == 1 and "green door" in users[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
