"""Discord end to end: real discord.py → fake Discord (REST + gateway) on 127.0.0.1, real Agent →
fake OpenAI-compatible provider, real files under the workspaces folder."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from discord.gateway import DiscordWebSocket
from discord.http import Route

from adapters.discord import create
from adapters.discord.adapter import DiscordAdapter
from adapters.intake.texts import SENT_PRIVATELY
from bot.agent.agent import Agent
from bot.commands.context import CommandContext
from bot.commands.registry import COMMANDS, Argument, Command
from bot.config import Config
from bot.platform import PlatformStartError
from memory.keys import encode_key
from memory.workspace import Workspaces
from tests.rigs.discord import ALICE, CHANNEL, DM, EPHEMERAL, GUILD, callbacks, make_config, running
from tests.rigs.fakes.discord_server import MESSAGE_CONTENT_INTENT, FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion

STRANGER = user_payload(7, "mallory")


async def run_to_failure(config: Config) -> PlatformStartError:
    agent = Agent(config)
    try:
        with pytest.raises(PlatformStartError) as info:
            await asyncio.wait_for(create(config, agent).run(asyncio.Event()), 10)
    finally:
        await agent.aclose()
    return info.value


def session_lines(workspaces: Path, user_key: str) -> dict[str, list[dict[str, Any]]]:
    """Every session file of one user: session key → its JSON lines."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in (workspaces / encode_key(user_key) / "sessions").glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        found[lines[0]["key"]] = lines
    return found


async def test_login_syncs_every_command_for_dms_guilds_and_user_installs(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    original = Route.BASE
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        [sync] = discord_fake.calls("PUT", f"/applications/{discord_fake.app_id}/commands")
        commands = {c["name"]: c for c in sync.body}
        assert set(commands) == {c.name for c in COMMANDS}  # the registry, nothing dropped
        for command in commands.values():
            assert sorted(command["contexts"]) == [0, 1, 2]  # guild, bot DM, private channels
            assert sorted(command["integration_types"]) == [0, 1]  # guild and user installs
            assert 0 < len(command["description"]) <= 100
        [keyword] = commands["recall"]["options"]
        assert (keyword["name"], keyword["type"], keyword["required"]) == ("keyword", 3, True)
        # DMs and mentions work without the privileged intent, so it is not asked for.
        assert discord_fake.identify is not None
        assert not discord_fake.identify["intents"] & MESSAGE_CONTENT_INTENT
    assert original == Route.BASE


async def test_sync_to_one_guild_when_configured(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = make_config(
        discord_fake, fake_llm, workspaces_dir, sync_guild_id=GUILD, message_content_intent=True
    )
    async with running(config):
        path = f"/applications/{discord_fake.app_id}/guilds/{GUILD}/commands"
        [sync] = discord_fake.calls("PUT", path)
        assert {c["name"] for c in sync.body} == {c.name for c in COMMANDS}
        assert not discord_fake.calls("PUT", f"/applications/{discord_fake.app_id}/commands")
        assert discord_fake.identify is not None
        assert discord_fake.identify["intents"] & MESSAGE_CONTENT_INTENT


async def test_dm_turn_answered_and_persisted_in_the_users_workspace(
    discord_fake: FakeDiscord,
    fake_llm: FakeOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    fake_llm.queue(completion("Nice to meet you, Alice."))
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "hi, I'm Alice", channel_id=DM)
        )
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))
    assert sent["content"] == "Nice to meet you, Alice."
    assert sent["allowed_mentions"]["parse"] == []
    assert discord_fake.calls("POST", f"/channels/{DM}/typing"), "no typing indicator"
    sessions = session_lines(workspaces_dir, "discord-42")
    assert list(sessions) == ["discord:dm:42"]
    # (The transcript's other records, metadata and where the answer was sent, are no message.)
    messages = [m for m in sessions["discord:dm:42"] if "_type" not in m]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert "hi, I'm Alice" in messages[0]["content"]
    assert messages[1]["content"] == "Nice to meet you, Alice."
    assert discord_fake.token not in caplog.text


async def test_recall_slash_command_answered_ephemerally_without_the_llm(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    history = Workspaces(workspaces_dir).get("discord-42").memory
    history.append_history("[2026-11-02 10:00] Alice adopted two parrots named Kiwi and Mango.")
    history.append_history("[2026-11-03 09:00] Alice asked about sourdough starters.")
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "INTERACTION_CREATE",
            discord_fake.slash(
                ALICE, "recall", {"keyword": "parrots"}, channel_id=CHANNEL, guild_id=GUILD
            ),
        )
        [answer] = await discord_fake.wait_until(lambda: callbacks(discord_fake))
    assert answer["type"] == 4
    assert answer["data"]["flags"] & EPHEMERAL
    assert "Kiwi" in answer["data"]["content"]
    assert "sourdough" not in answer["data"]["content"]
    assert answer["data"]["allowed_mentions"]["parse"] == []
    assert fake_llm.requests == []


async def test_slow_command_is_deferred_then_followed_up(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(Delay(0.6, completion("a slow answer")))
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)) as adapter:
        adapter.defer_after_s = 0.1  # stands for Discord's 3 s, to keep the test fast
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "think hard", channel_id=DM)
        )
        await discord_fake.wait_until(lambda: fake_llm.requests)
        # /new waits for the running turn of this session: longer than the window.
        interaction = discord_fake.slash(ALICE, "new", channel_id=DM)
        await discord_fake.dispatch("INTERACTION_CREATE", interaction)
        path = f"/webhooks/{discord_fake.app_id}/{interaction['token']}"
        [followup] = await discord_fake.wait_until(lambda: discord_fake.calls("POST", path))
    [deferral] = callbacks(discord_fake)
    assert deferral["type"] == 5  # "LightGrep is thinking…"
    assert not (deferral.get("data") or {}).get("flags", 0) & EPHEMERAL  # /new is public
    assert followup.body["content"]
    assert followup.body["allowed_mentions"]["parse"] == []
    assert [m["content"] for m in discord_fake.sent_messages(DM)] == ["a slow answer"]


async def test_slow_private_command_is_deferred_ephemerally(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The core marks /recall private before its search runs, so even the "thinking…"
    placeholder is shown only to the person who asked."""
    Workspaces(workspaces_dir).get("discord-42").memory.append_history(
        "[2026-11-02 10:00] Alice adopted two parrots named Kiwi and Mango."
    )
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)) as adapter:
        adapter.defer_after_s = 0  # the search cannot beat this: the answer is always deferred
        interaction = discord_fake.slash(
            ALICE, "recall", {"keyword": "parrots"}, channel_id=CHANNEL, guild_id=GUILD
        )
        await discord_fake.dispatch("INTERACTION_CREATE", interaction)
        path = f"/webhooks/{discord_fake.app_id}/{interaction['token']}"
        [followup] = await discord_fake.wait_until(lambda: discord_fake.calls("POST", path))
    [deferral] = callbacks(discord_fake)
    assert deferral["type"] == 5
    assert deferral["data"]["flags"] & EPHEMERAL
    assert "Kiwi" in followup.body["content"]
    assert followup.body["flags"] & EPHEMERAL


def test_a_command_option_is_built_from_its_argument_spec(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Any registry entry gets its option from the spec, required or not (no per-command code)."""

    async def note(ctx: CommandContext, args: str) -> str:
        return args

    config = make_config(discord_fake, fake_llm, workspaces_dir)
    adapter = DiscordAdapter(config, Agent(config))
    spec = Command("note", "Keep a note", note, argument=Argument("text", "What to keep", False))
    [option] = adapter._slash_command(spec).parameters
    assert (option.display_name, option.description, option.required) == (
        "text",
        "What to keep",
        False,
    )


async def test_guild_mention_answered_and_unaddressed_messages_ignored(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(completion("Sunny all week."), completion("You're welcome."))
    bot = discord_fake.bot
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        chatter = discord_fake.message(
            ALICE, "just chatting with friends", channel_id=CHANNEL, guild_id=GUILD
        )
        from_a_bot = discord_fake.message(
            user_payload(77, "otherbot", bot=True),
            f"<@{bot['id']}> hello",
            channel_id=CHANNEL,
            guild_id=GUILD,
            mentions=[bot],
        )
        mention = discord_fake.message(
            ALICE,
            f"<@{bot['id']}> what's the weather?",
            channel_id=CHANNEL,
            guild_id=GUILD,
            mentions=[bot],
        )
        for event in (chatter, from_a_bot, mention):
            await discord_fake.dispatch("MESSAGE_CREATE", event)
        [first] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(CHANNEL))
        # A reply to the bot's answer, without pinging it, is addressed to the bot too.
        answer = discord_fake.message(bot, "Sunny all week.", channel_id=CHANNEL, guild_id=GUILD)
        reply = discord_fake.message(
            ALICE, "thanks!", channel_id=CHANNEL, guild_id=GUILD, referenced=answer
        )
        await discord_fake.dispatch("MESSAGE_CREATE", reply)
        await discord_fake.wait_until(lambda: len(discord_fake.sent_messages(CHANNEL)) == 2)
    assert first["content"] == "Sunny all week."
    assert str(first["message_reference"]["message_id"]) == mention["id"]
    assert first["allowed_mentions"]["parse"] == []
    assert len(fake_llm.chat_requests) == 2
    asked = json.dumps(fake_llm.chat_requests[0]["messages"])
    assert "what's the weather?" in asked
    assert "<@900>" not in asked and "just chatting" not in asked
    key = f"discord:guild:{GUILD}:{CHANNEL}:42"
    assert list(session_lines(workspaces_dir, "discord-42")) == [key]


async def test_private_answer_asked_for_in_a_guild_goes_to_dms(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    Workspaces(workspaces_dir).get("discord-42").memory.write(
        "## Important Notes\n- allergic to nuts\n"
    )
    bot = discord_fake.bot
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        mention = discord_fake.message(
            ALICE, f"<@{bot['id']}> /memory", channel_id=CHANNEL, guild_id=GUILD, mentions=[bot]
        )
        await discord_fake.dispatch("MESSAGE_CREATE", mention)
        [notice] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(CHANNEL))
    [opened] = discord_fake.calls("POST", "/users/@me/channels")
    assert opened.body["recipient_id"] in (42, "42")
    in_dm = [m for m in discord_fake.sent_messages() if "allergic to nuts" in m["content"]]
    assert len(in_dm) == 1
    assert notice["content"] == SENT_PRIVATELY  # the guild sees where the answer went, not it


async def test_unknown_user_refused_without_an_llm_call(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(STRANGER, "hello?", channel_id=DM)
        )
        await discord_fake.dispatch(
            "INTERACTION_CREATE", discord_fake.slash(STRANGER, "memory", channel_id=DM)
        )
        [refusal] = await discord_fake.wait_until(lambda: callbacks(discord_fake))
        [dm_refusal] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))
    assert refusal["type"] == 4 and refusal["data"]["flags"] & EPHEMERAL
    assert "allow list" in refusal["data"]["content"]
    assert "allow list" in dm_refusal["content"]
    assert fake_llm.requests == []
    assert not (workspaces_dir / encode_key("discord-7")).exists()


async def test_long_answer_split_under_2000_with_nothing_lost(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    prose = "\n\n".join(f"Paragraph {i}: " + "words " * 60 for i in range(20))
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(150)) + "\n```"
    long_answer = prose + "\n\n" + code + "\n\nThe end."
    fake_llm.queue(completion(long_answer))
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "tell me a lot", channel_id=DM)
        )
        chunks = await discord_fake.wait_until(
            lambda: (m := discord_fake.seen_in(DM)) and "The end." in m[-1] and m
        )
    assert not discord_fake.refused
    assert len(chunks) >= 4
    assert all(len(c) <= 2000 for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks), "a code block was left open"

    def lines(text: str) -> list[str]:
        return [x for x in text.split("\n") if x.strip() and not x.startswith("```")]

    assert lines("\n".join(chunks)) == lines(long_answer)


async def test_model_cannot_ping_anyone(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(completion("@everyone look, <@42> and <@&5> said so"))
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "ping them all", channel_id=DM)
        )
        [sent] = await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))
    assert sent["content"].startswith("@everyone")
    assert sent["allowed_mentions"]["parse"] == []
    assert not sent["allowed_mentions"].get("users") and not sent["allowed_mentions"].get("roles")


async def test_stop_lets_a_running_turn_finish(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(Delay(0.5, completion("worth the wait")))
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)):
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "take your time", channel_id=DM)
        )
        await discord_fake.wait_until(lambda: fake_llm.requests)
    # `running` has set stop and the adapter has returned: the answer went out first.
    assert [m["content"] for m in discord_fake.sent_messages(DM)] == ["worth the wait"]


async def test_bad_token_is_one_clear_start_error(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    config = make_config(discord_fake, fake_llm, workspaces_dir, token="wrong-secret-token")
    error = await run_to_failure(config)
    assert "token" in str(error) and "401" in str(error)
    assert "wrong-secret-token" not in str(error) and "\n" not in str(error)
    assert discord_fake.identify is None


async def test_missing_privileged_intent_is_one_clear_start_error(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    saved = (Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY)
    fake = await FakeDiscord(reject_privileged=True).start()
    try:
        config = make_config(fake, fake_llm, workspaces_dir, message_content_intent=True)
        error = await run_to_failure(config)
    finally:
        await fake.stop()
        Route.BASE, DiscordWebSocket.DEFAULT_GATEWAY = saved
    assert "Message Content" in str(error) and "\n" not in str(error)
