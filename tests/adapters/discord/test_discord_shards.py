"""`[discord] shard_ids` / `shard_count`: a process connects only its shards (one IDENTIFY per
shard, saying which), answers the guilds Discord routes to them, and only the process with
shard 0, where Discord sends every DM, answers DMs and registers the slash commands."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.rigs.discord import ALICE, DM, GUILD, make_config, running
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

assert (GUILD >> 22) % 2 == 0  # the test guild is on shard 0 of 2
SHARD_1_GUILD, SHARD_1_CHANNEL = 3 << 22, 7001  # (guild id >> 22) % 2 == 1


async def test_a_process_without_shard_0_answers_its_guilds_and_leaves_dms(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    discord_fake.add_guild(SHARD_1_GUILD, SHARD_1_CHANNEL)
    fake_llm.queue(completion("Answered on shard 1."))
    config = make_config(discord_fake, fake_llm, workspaces_dir, shard_count=2, shard_ids=["1"])
    bot = discord_fake.bot
    async with running(config):
        assert discord_fake.identify is not None and discord_fake.identify["shard"] == [1, 2]
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "hello in private", channel_id=DM)
        )
        mention = discord_fake.message(
            ALICE, f"<@{bot['id']}> hi", channel_id=SHARD_1_CHANNEL, guild_id=SHARD_1_GUILD,
            mentions=[bot],
        )  # fmt: skip
        await discord_fake.dispatch("MESSAGE_CREATE", mention)
        await discord_fake.wait_until(lambda: discord_fake.sent_messages(SHARD_1_CHANNEL))
        await asyncio.sleep(0.3)  # the DM had its chance
    assert [m["content"] for m in discord_fake.sent_messages()] == ["Answered on shard 1."]
    assert len(fake_llm.chat_requests) == 1
    assert not discord_fake.calls("PUT", "/applications/")  # shard 0's process registers them


async def test_the_process_with_shard_0_answers_dms_and_registers_the_commands(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(completion("Answered in private."))
    config = make_config(discord_fake, fake_llm, workspaces_dir, shard_count=2, shard_ids=["0"])
    async with running(config):
        assert discord_fake.identify is not None and discord_fake.identify["shard"] == [0, 2]
        await discord_fake.dispatch(
            "MESSAGE_CREATE", discord_fake.message(ALICE, "hello in private", channel_id=DM)
        )
        await discord_fake.wait_until(lambda: discord_fake.sent_messages(DM))
    assert discord_fake.sent_messages(DM)[0]["content"] == "Answered in private."
    assert discord_fake.calls("PUT", "/applications/")
