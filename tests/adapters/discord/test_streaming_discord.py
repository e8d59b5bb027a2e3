"""Answers shown on Discord as they are written: real discord.py against the fake gateway and
REST API, the real Agent streaming from the fake OpenAI server.

What a person notices: the answer appears early and grows by edits, never faster than about
once a second per channel, and ends as the model's whole answer, exactly once, within 2000
characters per message."""

from __future__ import annotations

import itertools
from pathlib import Path

from tests.rigs.discord import ALICE, CHANNEL, DM, GUILD, make_config, running
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed, pieces_of, tool_call

ANSWER = "Here is what I found: **three** things.\n\n" + " ".join(
    f"Item {n} is worth mentioning." for n in range(1, 25)
)


async def test_a_dm_answer_is_sent_early_then_edited_at_most_once_a_second(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake = discord_fake
    fake_llm.queue(Streamed(pieces_of(ANSWER), every_s=0.05))
    async with running(make_config(fake, fake_llm, workspaces_dir)):
        await fake.dispatch("MESSAGE_CREATE", fake.message(ALICE, "tell me", channel_id=DM))
        await fake.wait_until(lambda: fake.seen_in(DM) == [ANSWER], within=15)
    assert fake_llm.streamed == 1
    posts = fake.calls("POST", f"/channels/{DM}/messages")
    assert len(posts) == 1, "one message, grown by edits"
    assert len(posts[0].body["content"]) < len(ANSWER) / 2, "the first words came first"
    assert len(fake.edits) >= 2
    assert not fake.too_fast, f"edits came faster than once a second: {fake.too_fast}"
    times = [at for *_, at in fake.edits]
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(times))
    assert posts[0].body["allowed_mentions"] == {"parse": []}
    assert not fake.refused


async def test_a_guild_answer_replies_and_ten_thousand_characters_go_on_in_new_messages(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake = discord_fake
    text = "\n\n".join(f"Paragraph {n}: " + "word " * 90 for n in range(1, 24)).replace(" \n", "\n")
    text = text.strip()
    assert len(text) > 10_000
    fake_llm.queue(Streamed(pieces_of(text), every_s=0.0005))
    bot = fake.bot
    async with running(make_config(fake, fake_llm, workspaces_dir)):
        asked = fake.message(
            ALICE, f"<@{bot['id']}> a long one", channel_id=CHANNEL, guild_id=GUILD, mentions=[bot]
        )
        await fake.dispatch("MESSAGE_CREATE", asked)
        await fake.wait_until(lambda: "".join(fake.seen_in(CHANNEL)) == text, within=30)
    seen = fake.seen_in(CHANNEL)
    assert len(seen) == 6 and all(len(m) <= 2000 for m in seen)
    posts = fake.calls("POST", f"/channels/{CHANNEL}/messages")
    assert str(posts[0].body["message_reference"]["message_id"]) == asked["id"]
    assert all("message_reference" not in p.body for p in posts[1:])
    assert not fake.too_fast and not fake.refused


async def test_text_before_a_tool_call_stays_and_the_answer_follows(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake = discord_fake
    fake_llm.queue(
        Streamed(pieces_of("Let me check."), [tool_call("read_memory", {})], every_s=0.02),
        Streamed(pieces_of("Nothing about that yet."), every_s=0.02),
    )
    async with running(make_config(fake, fake_llm, workspaces_dir)):
        await fake.dispatch("MESSAGE_CREATE", fake.message(ALICE, "what?", channel_id=DM))
        await fake.wait_until(
            lambda: fake.seen_in(DM) == ["Let me check.\n\nNothing about that yet."], within=10
        )
    assert fake_llm.chat_requests[1]["messages"][-1]["role"] == "tool"
