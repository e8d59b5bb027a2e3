"""Reminders in a group under hostile use (issue 32, finding 5), through the real
python-telegram-bot and discord.py clients against the fakes, with the real Agent and its
scheduler wired as `lightgrep run` wires them: a group takes a bounded number of reminders; its
admins see and cancel everyone's, its members cannot; many due at once arrive at the group's
pace; a reminder's text is shown as it was written, never as markup (no disguised link)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.discord import DiscordConfig
from adapters.discord import create as create_discord
from adapters.telegram import TelegramConfig
from adapters.telegram import create as create_telegram
from bot.agent.agent import Agent
from bot.config import Config, LimitsConfig, LLMConfig, MemoryConfig
from tests.rigs.discord import ALICE, CHANNEL, EPHEMERAL, GUILD, callbacks
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import FakeOpenAI
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram
from tests.rigs.reminders import records

GROUP = -1001234
ANA, BO, ADMIN = 42, 43, 44  # two members and the group's admin
DISGUISED = "[Telegram support: verify here](https://evil.example/login)"


def telegram_config(
    tg: FakeTelegram, llm: FakeOpenAI, workspaces: Path, *, per_group: int = 50, pace: float = 3.0
) -> Config:
    return Config(
        llm=LLMConfig(base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0),
        memory=MemoryConfig(workspaces_dir=workspaces),
        limits=LimitsConfig(reminders_per_group=per_group, reminder_min_repeat_s=1),
        platforms={
            "telegram": TelegramConfig(
                enabled=True,
                token=TOKEN,
                allow_from=["*"],
                api_base=tg.api_base,
                poll_timeout_s=1,
                group_send_interval_s=pace,
            )
        },
    )


@contextlib.asynccontextmanager
async def serving(config: Config, platform: str) -> AsyncIterator[None]:
    """The platform's adapter and the reminders' scheduler, as `lightgrep run` wires them."""
    agent = Agent(config)
    adapter = (create_telegram if platform == "telegram" else create_discord)(config, agent)
    if platform == "discord":
        adapter.guild_ready_timeout = 0.2
    agent.send_with(platform, adapter)
    stop = asyncio.Event()
    task = asyncio.create_task(adapter.run(stop))
    reminders = asyncio.create_task(agent.reminders.run(stop))
    await asyncio.wait_for(adapter.ready.wait(), 10)
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(task, reminders), 30)
        await agent.aclose()


def said(tg: FakeTelegram, chat: int, needle: str) -> list[str]:
    return [s.text for s in tg.sent_to(chat) if needle in s.text]


async def reply_to(tg: FakeTelegram, chat: int, needle: str) -> str:
    await tg.wait_until(lambda: bool(said(tg, chat, needle)), 15)
    return said(tg, chat, needle)[-1]


async def test_a_group_takes_no_more_reminders_than_its_cap(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    async with serving(telegram_config(tg, fake_llm, workspaces_dir, per_group=3), "telegram"):
        for number, who in enumerate((ANA, ANA, BO), 1):  # two members fill it
            tg.group(GROUP, who, f"/remind in 1 hour thing {number}")
            await reply_to(tg, GROUP, f"thing {number}")
        tg.group(GROUP, BO, "/remind in 1 hour one too many")
        refused = await reply_to(tg, GROUP, "Nothing was set")
        tg.dm(ANA, "/remind in 1 hour in my own chat")  # a private one is not the group's
        await reply_to(tg, ANA, "in my own chat")
    assert refused.startswith("This group has 3 reminders waiting, the most I keep")
    assert "/reminders group" in refused
    assert not [r for r in records(workspaces_dir, "telegram-43") if "too many" in r["what"]]


async def test_the_groups_admin_lists_and_cancels_a_members_reminders_a_member_cannot(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    tg.admins[GROUP] = {ADMIN}
    for person in (ANA, BO, ADMIN):
        tg.started_users.add(person)  # private answers (/reminders) go to their chat
    async with serving(telegram_config(tg, fake_llm, workspaces_dir), "telegram"):
        tg.group(GROUP, ANA, "/remind in 1 hour flood the chat")
        await reply_to(tg, GROUP, "flood the chat")
        tg.group(GROUP, BO, "/remind in 2 hours water the plants")
        await reply_to(tg, GROUP, "water the plants")
        # A member sees only their own (privately); everyone's are refused them.
        tg.group(GROUP, BO, "/reminders group")
        assert "Only this group's admins" in await reply_to(tg, BO, "admins")
        tg.group(GROUP, BO, "/reminders group cancel 1")
        await tg.wait_until(lambda: len(said(tg, BO, "Only this group's admins")) == 2, 15)
        assert not [r for r in records(workspaces_dir, "telegram-42") if r["type"] == "cancelled"]
        # The admin lists everyone's, each with who set it, and cancels Ana's by its number.
        tg.group(GROUP, ADMIN, "/reminders group")
        listing = await reply_to(tg, ADMIN, "Reminders waiting in this group")
        lines = listing.splitlines()
        assert lines[1].endswith("set by User42: flood the chat")
        assert lines[2].endswith("set by User43: water the plants")
        tg.group(GROUP, ADMIN, "/reminders group cancel 1")
        done = await reply_to(tg, ADMIN, "Cancelled")
        assert done == "Cancelled the reminder set by User42: flood the chat"
        tg.group(GROUP, ADMIN, "/reminders group")
        await tg.wait_until(lambda: len(said(tg, ADMIN, "Reminders waiting")) == 2, 15)
        again = said(tg, ADMIN, "Reminders waiting")[-1]
        assert "flood the chat" not in again and "water the plants" in again
        tg.group(GROUP, ANA, "/reminders")  # Ana's own list says it is gone
        assert "no reminders waiting" in await reply_to(tg, ANA, "reminders")
    cancelled = [r for r in records(workspaces_dir, "telegram-42") if r["type"] == "cancelled"]
    assert len(cancelled) == 1


async def test_on_discord_a_servers_manager_lists_and_cancels_a_members_reminders(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The same on Discord, by slash commands: Manage Server (as Discord says) is the admin."""
    fake = discord_fake
    manager = user_payload(43, "mod")
    fake.add_guild(GUILD, CHANNEL, managers={43})
    config = discord_config(fake, fake_llm, workspaces_dir)

    async def ask(user: dict[str, Any], name: str, option: dict[str, str]) -> str:
        before = len(callbacks(fake))
        slash = fake.slash(user, name, option, channel_id=CHANNEL, guild_id=GUILD)
        await fake.dispatch("INTERACTION_CREATE", slash)
        await fake.wait_until(lambda: len(callbacks(fake)) > before, within=15)
        answer = callbacks(fake)[before]
        assert answer["data"].get("flags", 0) & EPHEMERAL or name == "remind"
        return str(answer["data"]["content"])

    async with serving(config, "discord"):
        assert (await ask(ALICE, "remind", {"what": "in 1 hour flood"})).startswith("OK")
        refused = await ask(ALICE, "reminders", {"action": "group"})
        assert refused.startswith("Only this group's admins")
        listing = await ask(manager, "reminders", {"action": "group"})
        assert listing.splitlines()[1].endswith(": flood") and "set by" in listing
        done = await ask(manager, "reminders", {"action": "group cancel 1"})
        assert done.startswith("Cancelled the reminder set by") and done.endswith(": flood")
    kinds = [r["type"] for r in records(workspaces_dir, "discord-42")]
    assert kinds == ["set", "cancelled"]


async def test_a_wiped_member_leaves_the_groups_index(
    fake_llm: FakeOpenAI, tmp_path: Path, clean_env: None, keep_logging: None
) -> None:
    """Which groups a person set reminders in is theirs: the operator's wipe leaves no line."""
    from bot.cli.main import main
    from tests.rigs.agent import ask, group, make_agent
    from tests.rigs.cli import write_config

    config = write_config(tmp_path, fake_llm)
    agent = make_agent(fake_llm, tmp_path / "workspaces")
    for user in ("42", "7"):
        message = replace(
            group("-1001234", user, "/remind in 1 hour stretch"),
            chat_key="telegram:group:-1001234",
            place={"chat": "-1001234", "user": user},
        )
        assert (await ask(agent, message)).text.startswith("OK")
    await agent.aclose()
    index = tmp_path / "workspaces" / ".reminders-groups.jsonl"
    assert "telegram-42" in index.read_text()
    wipe = ["wipe", "--config", str(config), "telegram-42", "--yes"]
    assert await asyncio.to_thread(main, wipe) == 0
    assert "telegram-42" not in index.read_text() and "telegram-7" in index.read_text()


async def test_many_due_at_once_in_a_group_arrive_at_the_groups_pace(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    pace = 0.25
    config = telegram_config(tg, fake_llm, workspaces_dir, pace=pace)
    async with serving(config, "telegram"):
        for number in range(20):  # two members, 10 each, all due in the same second
            tg.group(GROUP, ANA if number % 2 else BO, f"/remind in 4 seconds stand up {number}")
        await tg.wait_until(lambda: len(said(tg, GROUP, "OK, I'll remind you")) == 20, 15)
        await tg.wait_until(lambda: len(said(tg, GROUP, "⏰ Reminder")) == 20, 30)
    sent = [s.at for s in tg.sent_to(GROUP) if "⏰ Reminder" in s.text]
    gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
    # Never a burst (before: all 20 within 0.03 s). The pacer spaces the sends it starts; the
    # fake sees arrivals, which a loaded machine's scheduling can bring closer by a few tens of
    # ms (0.219 s seen for a 0.25 s pace), so each gap is held to half the pace, the whole to it.
    assert min(gaps) >= pace * 0.5, gaps
    assert sent[-1] - sent[0] >= 19 * pace * 0.9


async def test_a_stop_does_not_wait_for_a_groups_queue_and_loses_none_of_it(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Six due at once at a slow pace: a stop after the first does not wait for the others'
    turns (40 s), which are not recorded as sent, and the next start sends each once."""
    tg = fake_telegram
    members = range(50, 56)
    pace = 8.0
    async with serving(telegram_config(tg, fake_llm, workspaces_dir, pace=pace), "telegram"):
        for member in members:
            tg.group(GROUP, member, f"/remind in 2 seconds standup {member}")
        await tg.wait_until(lambda: len(said(tg, GROUP, "OK, I'll remind you")) == 6, 15)
        await tg.wait_until(lambda: bool(said(tg, GROUP, "⏰ Reminder")), 15)
        stopping = time.monotonic()
    # Not a speed claim: a stop that waited for even one more turn would take the pace.
    assert time.monotonic() - stopping < pace
    assert len(said(tg, GROUP, "⏰ Reminder")) < 6
    async with serving(telegram_config(tg, fake_llm, workspaces_dir, pace=0.1), "telegram"):
        await tg.wait_until(lambda: len(said(tg, GROUP, "⏰ Reminder")) == 6, 15)
        await asyncio.sleep(0.5)  # nothing more comes
    reminders = said(tg, GROUP, "⏰ Reminder")
    assert sorted(text.rsplit(" ", 1)[1] for text in reminders) == [str(m) for m in members]


async def test_a_disguised_link_in_a_reminder_arrives_as_its_characters_on_telegram(
    fake_telegram: FakeTelegram, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    tg = fake_telegram
    async with serving(telegram_config(tg, fake_llm, workspaces_dir), "telegram"):
        tg.group(GROUP, ANA, f"/remind in 1 second {DISGUISED}")
        await reply_to(tg, GROUP, "⏰ Reminder")
    confirmation = next(s for s in tg.sent_to(GROUP) if "OK, I'll remind you" in s.text)
    reminder = next(s for s in tg.sent_to(GROUP) if "⏰ Reminder" in s.text)
    for message in (confirmation, reminder):
        assert message.text.endswith(f": {DISGUISED}")  # what people see: the characters
        assert "<a" not in message.raw and "text_link" not in str(message.params)


def discord_config(fake: FakeDiscord, llm: FakeOpenAI, workspaces: Path) -> Config:
    settings = DiscordConfig(
        enabled=True,
        token=fake.token,
        allow_from=["*"],
        api_base=fake.api_base,
        gateway_url=fake.gateway_url,
    )
    return Config(
        llm=LLMConfig(base_url=llm.base_url, api_key="sk-test", model="fake-model", max_retries=0),
        memory=MemoryConfig(workspaces_dir=workspaces),
        platforms={"discord": settings},
    )


async def test_a_disguised_link_in_a_reminder_is_escaped_on_discord(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = discord_config(discord_fake, fake_llm, workspaces_dir)
    bot = discord_fake.bot
    async with serving(config, "discord"):
        mention = discord_fake.message(
            ALICE,
            f"<@{bot['id']}> /remind in 1 second {DISGUISED}",
            channel_id=CHANNEL,
            guild_id=GUILD,
            mentions=[bot],
        )
        await discord_fake.dispatch("MESSAGE_CREATE", mention)
        await discord_fake.wait_until(
            lambda: any("⏰ Reminder" in c for c in discord_fake.seen_in(CHANNEL)), within=15
        )
    escaped = r"\[Telegram support: verify here\]\(https://evil.example/login\)"
    posted = [m["content"] for m in discord_fake.sent_messages() if "evil.example" in m["content"]]
    assert len(posted) == 2  # the confirmation and the reminder, each escaped: no masked link
    assert all(content.endswith(f": {escaped}") for content in posted), posted
