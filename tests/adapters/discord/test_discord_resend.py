"""An answer sent by its destination alone (adapters/discord/resend.py), as the ingress that
restarts sends what the one before had not: in its channel as a reply, a slash command's as the
interaction's follow-up; a private one only ever in the person's DMs; a failed turn's apology."""

from __future__ import annotations

from pathlib import Path

from adapters.intake.texts import FAILED
from bot.outbound import Reply
from tests.rigs.discord import CHANNEL, DM, GUILD, make_config, running
from tests.rigs.fakes.discord_server import FakeDiscord
from tests.rigs.fakes.openai_server import FakeOpenAI


async def test_answers_go_where_their_destination_says(
    discord_fake: FakeDiscord, fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    in_guild = {"channel": str(CHANNEL), "user": "42", "guild": str(GUILD), "reply_to": "777"}
    async with running(make_config(discord_fake, fake_llm, workspaces_dir)) as adapter:
        await adapter.send_to(in_guild, Reply("Everyone may read this."))
        await adapter.send_to(in_guild, Reply("Only for you.", private=True))
        slash = {"interaction": "tok-1", "application": "900", "user": "42"}
        await adapter.send_to(slash, Reply("The command's answer."))
        await adapter.send_to({**slash, "interaction": "tok-2"}, Reply("Yours.", private=True))
        await adapter.send_to({"channel": str(DM), "user": "42"}, None)
    [public] = discord_fake.sent_messages(CHANNEL)
    assert public["content"] == "Everyone may read this."
    assert str(public["message_reference"]["message_id"]) == "777"
    [followup] = [r.body for r in discord_fake.calls("POST", "/webhooks/900/tok-1")]
    assert followup["content"] == "The command's answer."
    assert not discord_fake.calls("POST", "/webhooks/900/tok-2")  # private: not a follow-up
    opened = discord_fake.calls("POST", "/users/@me/channels")
    assert opened and {str(r.body["recipient_id"]) for r in opened} == {"42"}
    private = [
        m["content"]
        for m in discord_fake.sent_messages()
        if m not in (public,) and m["content"] != FAILED
    ]
    assert private == ["Only for you.", "Yours."]
    assert [m["content"] for m in discord_fake.sent_messages(DM)] == [FAILED]
