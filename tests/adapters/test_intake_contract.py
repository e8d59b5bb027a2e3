"""The intake's contract (adapters/intake): every platform treats a message the same way, run
against the real python-telegram-bot on the fake Bot API, the real discord.py on the fake
Discord, and the terminal on a pipe, each with the real Agent and the fake model.

Not every case exists everywhere, and none is faked where it does not:
- the terminal has no strangers: its one person is whoever runs the bot (no allow list);
- the terminal has no groups: no trigger, no private answer asked in a group;
- the terminal has no message ids a person could reply to: no receipt.
So those cases run on the platforms that have them (`WITH_PEOPLE`), the core's failure on all.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest

from adapters.intake.texts import FAILED, REFUSAL, SENT_PRIVATELY
from adapters.terminal.adapter import TerminalAdapter
from bot.agent.agent import Agent
from bot.config import Config, LLMConfig, MemoryConfig
from memory.keys import encode_key
from memory.session import SENT
from memory.workspace import Workspaces
from tests.rigs import discord as discord_rig
from tests.rigs import telegram as telegram_rig
from tests.rigs.discord import CHANNEL, GUILD
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import FakeOpenAI, completion
from tests.rigs.fakes.telegram_server import FakeTelegram
from tests.rigs.telegram import GROUP

ALLOWED, STRANGER = 42, 7  # the rigs' allow list is ["42"]; GROUP: Telegram's, CHANNEL: Discord's
WITH_PEOPLE = ["telegram", "discord"]  # an allow list, groups, message ids (see the docstring)
SETTLE_S = 0.3  # after a barrier message is answered: time for a stray answer to show


class Platform(Protocol):
    """One platform served by the real adapter and Agent, as a person sees it."""

    name: str

    async def private(self, user: int, text: str) -> None:
        """`user` writes `text` in their private chat with the bot."""

    async def in_group(self, user: int, text: str, *, addressed: bool) -> None:
        """`user` writes `text` in the group, to the bot (a mention) or not."""

    def private_texts(self) -> list[str]:
        """What the bot wrote in private chats, as people read it."""

    def group_texts(self) -> list[str]:
        """What the bot wrote in the group."""

    def private_ids(self) -> list[str]:
        """The platform ids ("chat:message") of the bot's messages in private chats."""

    def typing(self) -> int:
        """How many "typing…" indicators the bot showed."""

    async def until(self, check: Callable[[], Any]) -> Any: ...


class Telegram:
    name = "telegram"

    def __init__(self, tg: FakeTelegram) -> None:
        self.tg = tg

    async def private(self, user: int, text: str) -> None:
        self.tg.dm(user, text)

    async def in_group(self, user: int, text: str, *, addressed: bool) -> None:
        self.tg.started_users.add(user)  # has a private chat with the bot too
        self.tg.group(GROUP, user, f"@lightgrep_bot {text}" if addressed else text)

    def private_texts(self) -> list[str]:
        return [s.text for s in self.tg.sent if s.chat_id > 0]

    def group_texts(self) -> list[str]:
        return [s.text for s in self.tg.sent_to(GROUP)]

    def private_ids(self) -> list[str]:
        return [f"{s.chat_id}:{s.message_id}" for s in self.tg.sent if s.chat_id > 0]

    def typing(self) -> int:
        return len(self.tg.method_calls("sendChatAction"))

    async def until(self, check: Callable[[], Any]) -> Any:
        return await eventually(check)


class Discord:
    name = "discord"

    def __init__(self, fake: FakeDiscord) -> None:
        self.fake = fake

    async def private(self, user: int, text: str) -> None:
        author = user_payload(user, f"user{user}")
        await self.fake.dispatch("MESSAGE_CREATE", self.fake.message(author, text, channel_id=user))

    async def in_group(self, user: int, text: str, *, addressed: bool) -> None:
        author, bot = user_payload(user, f"user{user}"), self.fake.bot
        message = (
            self.fake.message(
                author, f"<@{bot['id']}> {text}", channel_id=CHANNEL, guild_id=GUILD, mentions=[bot]
            )
            if addressed
            else self.fake.message(author, text, channel_id=CHANNEL, guild_id=GUILD)
        )
        await self.fake.dispatch("MESSAGE_CREATE", message)

    def private_texts(self) -> list[str]:
        return [m["content"] for m in self.fake.posted.values() if m["channel_id"] != str(CHANNEL)]

    def group_texts(self) -> list[str]:
        return self.fake.seen_in(CHANNEL)

    def private_ids(self) -> list[str]:
        posted = self.fake.posted.values()
        return [f"{m['channel_id']}:{m['id']}" for m in posted if m["channel_id"] != str(CHANNEL)]

    def typing(self) -> int:
        return len([r for r in self.fake.calls("POST", "/channels/") if r.path.endswith("/typing")])

    async def until(self, check: Callable[[], Any]) -> Any:
        return await eventually(check)


async def eventually(check: Callable[[], Any], within: float = 10.0) -> Any:
    """What `check()` gives once it is truthy (polled)."""
    async with asyncio.timeout(within):
        while not (result := check()):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        return result


def llm_config(llm: FakeOpenAI) -> LLMConfig:
    return LLMConfig(
        base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0, timeout_s=5
    )


@asynccontextmanager
async def telegram_platform(
    tg: FakeTelegram, llm: FakeOpenAI, workspaces: Path
) -> AsyncIterator[Platform]:
    config = telegram_rig.make_config(tg, llm, workspaces, allow=[str(ALLOWED)])
    async with telegram_rig.running(config):
        yield Telegram(tg)


@asynccontextmanager
async def discord_platform(
    fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path
) -> AsyncIterator[Platform]:
    async with discord_rig.running(discord_rig.make_config(fake, llm, workspaces)):
        yield Discord(fake)


@asynccontextmanager
async def served(
    name: str, tg: FakeTelegram, fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path
) -> AsyncIterator[Platform]:
    """The platform `name` serving with the real Agent (both fakes run; one is used)."""
    if name == "telegram":
        async with telegram_platform(tg, llm, workspaces) as platform:
            yield platform
    else:
        async with discord_platform(fake, llm, workspaces) as platform:
            yield platform


@pytest.fixture(params=WITH_PEOPLE)
async def platform(
    request: pytest.FixtureRequest,
    tg: FakeTelegram,
    discord_fake: FakeDiscord,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
) -> AsyncIterator[Platform]:
    async with served(request.param, tg, discord_fake, fake_llm, workspaces_dir) as platform:
        yield platform


async def answered(platform: Platform, llm: FakeOpenAI, user: int = ALLOWED) -> None:
    """A barrier: `user` (allowed) asks something and is answered; what was sent before it has
    had its chance to show."""
    before = len(platform.private_texts())
    llm.queue(completion("The barrier's answer."))
    await platform.private(user, "are you there?")
    await platform.until(lambda: len(platform.private_texts()) > before)
    await asyncio.sleep(SETTLE_S)


async def test_a_stranger_is_refused_once_without_a_turn(
    platform: Platform, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    await platform.private(STRANGER, "hello?")
    refusal = await platform.until(platform.private_texts)
    assert refusal == [REFUSAL]
    assert fake_llm.requests == [] and platform.typing() == 0
    assert not (workspaces_dir / encode_key(f"{platform.name}-{STRANGER}")).exists()


async def test_a_stranger_writing_again_is_not_refused_again(
    platform: Platform, fake_llm: FakeOpenAI
) -> None:
    """A stranger's flood costs the bot one message per chat per interval, on every platform
    (Discord used to answer every one)."""
    await platform.private(STRANGER, "hello?")
    await platform.until(platform.private_texts)
    await platform.private(STRANGER, "hello??")
    await platform.private(STRANGER, "HELLO???")
    await answered(platform, fake_llm)
    assert platform.private_texts().count(REFUSAL) == 1
    assert len(fake_llm.chat_requests) == 1  # the barrier's


async def test_a_group_message_not_for_the_bot_is_left_alone(
    platform: Platform, fake_llm: FakeOpenAI
) -> None:
    await platform.in_group(ALLOWED, "just chatting among humans", addressed=False)
    await platform.in_group(STRANGER, "me too", addressed=False)
    await platform.in_group(STRANGER, "let me in", addressed=True)  # a stranger: silence here
    fake_llm.queue(completion("Four."))
    await platform.in_group(ALLOWED, "what is two plus two?", addressed=True)
    await platform.until(platform.group_texts)
    await asyncio.sleep(SETTLE_S)
    assert platform.group_texts() == ["Four."]
    [request] = fake_llm.chat_requests
    said = json.dumps(request["messages"])
    assert "two plus two" in said and "among humans" not in said and "let me in" not in said
    assert platform.private_texts() == []  # nobody was refused in private for a group message


async def test_a_private_answer_asked_in_a_group_goes_to_the_private_chat(
    platform: Platform, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    key = f"{platform.name}-{ALLOWED}"
    Workspaces(workspaces_dir).get(key).memory.write("## Important Notes\n- allergic to nuts\n")
    await platform.in_group(ALLOWED, "/memory", addressed=True)
    await platform.until(lambda: platform.group_texts() and platform.private_texts())
    await asyncio.sleep(SETTLE_S)
    assert platform.group_texts() == [SENT_PRIVATELY]
    [private] = platform.private_texts()
    assert "allergic to nuts" in private
    assert fake_llm.requests == []


async def test_an_answer_is_receipted_under_the_ids_the_person_sees(
    platform: Platform, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The core learns under which ids the answer was sent, so that a reply to any of its
    messages finds what it replied to (tests/test_conversation*.py show what that is for)."""
    fake_llm.queue(completion("A " + "long answer. " * 400))  # two messages on both platforms
    await platform.private(ALLOWED, "tell me at length")
    await platform.until(lambda: len(platform.private_texts()) >= 2)
    sessions = workspaces_dir / encode_key(f"{platform.name}-{ALLOWED}") / "sessions"

    def receipts() -> list[dict[str, Any]]:
        lines = [json.loads(line) for p in sessions.glob("*.jsonl") for line in p.open()]
        return [line for line in lines if line.get("_type") == SENT]

    [receipt] = await platform.until(receipts)
    assert receipt["ids"] == platform.private_ids()


# ---- every platform, the terminal too ---------------------------------------------------------


@asynccontextmanager
async def terminal_platform(
    llm: FakeOpenAI, workspaces: Path, lines: list[str], screen: io.StringIO
) -> AsyncIterator[None]:
    """The terminal reading `lines` from a pipe (then its end), printing to `screen`."""
    config = Config(llm=llm_config(llm), memory=MemoryConfig(workspaces_dir=workspaces))
    read_fd, write_fd = os.pipe()
    os.write(write_fd, "".join(f"{line}\n" for line in lines).encode())
    os.close(write_fd)
    agent = Agent(config)
    adapter = TerminalAdapter(config, agent, user="ada", stdin_fd=read_fd, stdout=screen)
    try:
        await asyncio.wait_for(adapter.run(asyncio.Event()), 10)
        yield
    finally:
        await agent.aclose()
        os.close(read_fd)


@pytest.mark.parametrize("name", [*WITH_PEOPLE, "terminal"])
async def test_a_failure_in_the_core_is_said_and_the_next_message_answered(
    name: str,
    tg: FakeTelegram,
    discord_fake: FakeDiscord,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
) -> None:
    """The person's folder cannot be written (a file stands where it should be): the core
    raises, and the person is told so, in the same words everywhere; once the folder is back,
    the next message is answered as usual."""
    user_key = "cli-ada" if name == "terminal" else f"{name}-{ALLOWED}"
    blocked = workspaces_dir / encode_key(user_key)
    blocked.write_text("not a folder")
    if name == "terminal":
        screen = io.StringIO()
        async with terminal_platform(fake_llm, workspaces_dir, ["hello"], screen):
            pass
        assert FAILED in screen.getvalue()
        assert fake_llm.requests == []
        return
    async with served(name, tg, discord_fake, fake_llm, workspaces_dir) as platform:
        await platform.private(ALLOWED, "hello")
        assert await platform.until(platform.private_texts) == [FAILED]
        assert fake_llm.requests == []
        blocked.unlink()
        await answered(platform, fake_llm)
        assert platform.private_texts() == [FAILED, "The barrier's answer."]
