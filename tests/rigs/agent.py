"""Building a real Agent against a fake provider, the Inbound messages tests send it, and asking
it through the whole-answer port (what a user would receive), or one that keeps the pieces."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bot.agent.agent import Agent
from bot.commands.confirm import Confirmations
from bot.config import Config, Endpoint, LimitsConfig, LLMConfig, MediaConfig, MemoryConfig, Price
from bot.inbound import Inbound
from bot.keys import session_key, user_key
from bot.llm.client import LLMClient
from bot.outbound import BufferedOutbound, Reply
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
)

if TYPE_CHECKING:
    from bot.cluster.people import SharedPeople


def make_agent(
    llm: FakeOpenAI | str,
    workspaces: Path,
    *,
    window: int | None = 50_000,
    limits: LimitsConfig | None = None,
    memory: dict[str, Any] | None = None,
    media: dict[str, Any] | None = None,
    people: SharedPeople | None = None,
    confirmations: Confirmations | None = None,
    prices: dict[str, Price] | None = None,
    fallbacks: list[Endpoint] | None = None,
    consolidation: list[Endpoint] | None = None,
    **settings: Any,
) -> Agent:
    """An Agent whose real openai client talks to `llm` (a fake server or its base URL).
    Retries are off unless asked for, so failures show at once; `settings` are [llm] keys. The
    answer's budget is an eighth of the window unless given: it shares the window (window=None
    and max_output_tokens=None: both automatic, bot/agent/sizing.py). `memory`: [memory] keys
    besides the folder; `media`: [media] keys. `people`: a worker's link table, codes and
    moves (the cluster's), as bot/cli/core.py gives them; `confirmations`: the questions of
    /forget and /wipe (a short time to answer); `prices`: [prices]; `fallbacks`:
    [[llm.fallback]]; `consolidation`: [[consolidation.endpoints]]."""
    base_url = llm if isinstance(llm, str) else llm.base_url
    options: dict[str, Any] = {
        "max_retries": 0,
        "timeout_s": 5,
        "max_output_tokens": min(2048, window // 8) if window else None,
        **settings,
    }
    config = Config(
        llm=LLMConfig(
            base_url=base_url,
            api_key="sk-test-secret",
            model="fake-model",
            context_window_tokens=window,
            **options,
        ),
        memory=MemoryConfig(workspaces_dir=workspaces, **(memory or {})),
        limits=limits or LimitsConfig(),
        media=MediaConfig(**(media or {})),
        prices=prices or {},
        fallbacks=fallbacks or [],
        consolidation=consolidation or [],
    )
    if people is None:
        return Agent(config, confirmations=confirmations)
    return Agent(
        config, links=people, codes=people.codes, moves=people, confirmations=confirmations
    )


async def ask(agent: Agent, inbound: Inbound) -> Reply:
    """The agent's whole answer to `inbound`, as an adapter that sends in one go receives it."""
    out = BufferedOutbound()
    await agent.handle(inbound, out)
    return out.reply


class Pieces(BufferedOutbound):
    """The whole-answer port that also keeps each piece as it came (what a platform that
    shows an answer while it is written would show, piece by piece)."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[str] = []

    async def add_text(self, text: str) -> None:
        self.pieces.append(text)
        await super().add_text(text)


async def answer(agent: Agent, inbound: Inbound) -> Pieces:
    """The agent's answer to `inbound`, with the pieces it came in."""
    out = Pieces()
    await agent.handle(inbound, out)
    return out


def dm(user: str, text: str) -> Inbound:
    """A Telegram private message from user id `user`."""
    return Inbound(
        platform="telegram",
        session_key=session_key("telegram", "dm", user),
        user_key=user_key("telegram", user),
        text=text,
    )


def group(chat: str, user: str, text: str) -> Inbound:
    """A Telegram group message from user `user` in group `chat`."""
    return Inbound(
        platform="telegram",
        session_key=session_key("telegram", "group", chat, user),
        user_key=user_key("telegram", user),
        text=text,
        is_private=False,
    )


def user_home(workspaces: Path, user: str) -> Path:
    """The workspace folder of Telegram user `user`."""
    return workspaces / user_key("telegram", user)


def session_records(workspaces: Path, user: str) -> list[dict[str, Any]]:
    """Every record of the user's only session file, metadata included."""
    files = list((user_home(workspaces, user) / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text("utf-8").splitlines()]


@pytest.fixture
async def llm(fake_llm: FakeOpenAI) -> AsyncIterator[LLMClient]:
    """The real LLMClient (openai SDK) on the fake provider: no retries, failures show at once."""
    client = LLMClient(
        model="fake-model", base_url=fake_llm.base_url, api_key="test", max_retries=0, timeout_s=5
    )
    try:
        yield client
    finally:
        await client.aclose()
