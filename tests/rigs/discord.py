"""The Discord adapter in the test's process, with the real Agent, against the fake Discord
(fakes/discord_server.py); the fixture `discord_fake` (a guild and its channel ready)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord import DiscordConfig, create
from adapters.discord.adapter import DiscordAdapter
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import FakeOpenAI

ALICE = user_payload(42, "alice")


GUILD, CHANNEL, DM = 3000, 3001, 500


EPHEMERAL = 64


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    saved = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    fake = await FakeDiscord().start()
    fake.add_guild(GUILD, CHANNEL)
    try:
        yield fake
    finally:
        await fake.stop()
        # Whatever happened, the next test sees discord.py's own endpoints.
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved


def make_config(fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path, **discord: Any) -> Config:
    settings: dict[str, Any] = {
        "enabled": True,
        "token": fake.token,
        "allow_from": ["42"],
        "api_base": fake.api_base,
        "gateway_url": fake.gateway_url,
        **discord,
    }
    return Config(
        llm=LLMConfig(
            base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0, timeout_s=5
        ),
        memory=MemoryConfig(workspaces_dir=workspaces),
        platforms={"discord": DiscordConfig(**settings)},
    )


@asynccontextmanager
async def running(config: Config) -> AsyncIterator[DiscordAdapter]:
    """The adapter serving, with the real Agent; stopped the way `lightgrep run` stops it."""
    agent = Agent(config)
    adapter = create(config, agent)
    adapter.guild_ready_timeout = 0.2
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    ready = asyncio.create_task(adapter.ready.wait())
    await asyncio.wait({task, ready}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        ready.cancel()
        await task  # raises the start-up error
    assert adapter.ready.is_set(), "the adapter never became ready"
    try:
        yield adapter
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await agent.aclose()


def callbacks(fake: FakeDiscord) -> list[dict[str, Any]]:
    return [r.body for r in fake.calls("POST", "/interactions/")]
