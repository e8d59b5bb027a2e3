"""Reminders on Discord (real discord.py against the fake Discord, the real Agent and its
scheduler) and in the terminal (`lightgrep chat` as a process, its input a pipe kept open): each
is sent where it was asked, by the adapter's send_to, while the bot runs."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from adapters.discord import DiscordConfig, create
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig
from tests.rigs.cli import STEP_TIMEOUT, write_config
from tests.rigs.discord import ALICE, CHANNEL, DM, GUILD
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI


def discord_config(fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path) -> Config:
    settings = DiscordConfig(
        enabled=True,
        token=fake.token,
        allow_from=["42"],
        api_base=fake.api_base,
        gateway_url=fake.gateway_url,
    )
    return Config(
        llm=LLMConfig(base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0),
        memory=MemoryConfig(workspaces_dir=workspaces),
        platforms={"discord": settings},
    )


@contextlib.asynccontextmanager
async def serving(config: Config) -> AsyncIterator[None]:
    """The Discord adapter and the reminders, wired as `lightgrep run` wires them."""
    agent = Agent(config)
    adapter = create(config, agent)
    adapter.guild_ready_timeout = 0.2
    agent.send_with("discord", adapter)
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    reminders = asyncio.create_task(agent.reminders.run(stop))
    await asyncio.wait_for(adapter.ready.wait(), 10)
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, reminders), 10)
        await agent.aclose()


async def test_discord_sends_a_reminder_in_the_dm_or_channel_it_was_asked_in(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    bot = discord_fake.bot
    async with serving(discord_config(discord_fake, fake_llm, workspaces_dir)):
        dm = discord_fake.message(ALICE, "/remind in 1 second drink water", channel_id=DM)
        await discord_fake.dispatch("MESSAGE_CREATE", dm)
        mention = discord_fake.message(
            ALICE,
            f"<@{bot['id']}> /remind in 1 second book the room",
            channel_id=CHANNEL,
            guild_id=GUILD,
            mentions=[bot],
        )
        await discord_fake.dispatch("MESSAGE_CREATE", mention)
        slash = discord_fake.slash(
            ALICE, "remind", {"what": "in 1 second call Bo"}, channel_id=CHANNEL, guild_id=GUILD
        )
        await discord_fake.dispatch("INTERACTION_CREATE", slash)
        await discord_fake.wait_until(
            lambda: "⏰ Reminder: drink water" in discord_fake.seen_in(DM)
            and "⏰ Reminder for Alice: book the room" in discord_fake.seen_in(CHANNEL)
            and "⏰ Reminder for Alice: call Bo" in discord_fake.seen_in(CHANNEL),
            within=15,
        )
    reminders = [m for m in discord_fake.sent_messages() if "⏰" in m["content"]]
    assert len(reminders) == 3
    assert all(m["allowed_mentions"]["parse"] == [] for m in reminders)  # nobody pinged


async def test_the_terminal_prints_a_reminder_while_the_chat_runs(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    config = write_config(tmp_path, fake_llm)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--config", str(config), "--user", "ada",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, cwd=tmp_path, env=child_env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(b"/remind in 2 seconds stretch your legs\n")
        await proc.stdin.drain()
        seen = ""
        async with asyncio.timeout(STEP_TIMEOUT):
            while "⏰ Reminder: stretch your legs" not in seen:
                line = await proc.stdout.readline()
                assert line, f"the chat ended before the reminder; it printed {seen!r}"
                seen += line.decode()
        assert "OK, I'll remind you" in seen  # the answer came first, then the reminder
        proc.stdin.write(b"/quit\n")
        await proc.stdin.drain()
        proc.stdin.close()
        rest = (await asyncio.wait_for(proc.stdout.read(), STEP_TIMEOUT)).decode()
        assert await asyncio.wait_for(proc.wait(), STEP_TIMEOUT) == 0
        assert "Reminder" not in rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
