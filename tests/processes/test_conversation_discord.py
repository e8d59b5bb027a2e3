"""Conversations as people hold them on Discord, with `lightgrep run` as a real process against
the fake Discord and the fake model: when to speak in a channel (set by a member who may manage
the server, refused for one who may not), a persona of the channel only, a reply to the bot's
answer read from the transcript after it was consolidated, and a thread answered in the thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.rigs.cli import STEP_TIMEOUT, read_until, start_run, stopped, write_config
from tests.rigs.conversation import conversation, last_said
from tests.rigs.fakes.discord_server import FakeDiscord, user_payload
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)

GUILD, CHANNEL, THREAD, DM = 500, 501, 502, 600
MOD, MEMBER = user_payload(77, "mod"), user_payload(78, "member")


def model(request: dict[str, Any]) -> Any:
    if is_consolidation(request):
        return save_memory_call("[2026-12-01 10:00] Chatted.", "## User Information\n- Chats.\n")
    return completion(f"(answer to: {last_said(request).rsplit(chr(10), 1)[-1]})")


def interaction_answer(fake: FakeDiscord, interaction: dict[str, Any]) -> str:
    """What the person reads as a slash command's answer (its callback, or its follow-up)."""
    for call in fake.calls("POST", f"/interactions/{interaction['id']}/"):
        content = (call.body.get("data") or {}).get("content")
        if content:
            return str(content)
    path = f"/webhooks/{fake.app_id}/{interaction['token']}"
    return "".join(str(call.body.get("content") or "") for call in fake.calls("POST", path))


async def test_discord_conversations_as_a_process(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.default = model
    fake = await FakeDiscord().start()
    fake.add_guild(GUILD, CHANNEL, threads={THREAD: CHANNEL}, managers={77})
    config = write_config(
        tmp_path,
        fake_llm,
        f'[discord]\nenabled = true\ntoken = "{fake.token}"\nallow_from = ["*"]\n'
        f'api_base = "{fake.api_base}"\ngateway_url = "{fake.gateway_url}"\n'
        "message_content_intent = true\n",
    )
    proc = await start_run(config, child_env)

    async def slash(user: dict[str, Any], name: str, value: str, channel: int) -> str:
        option = {"setting": value} if name == "group" else {"instructions": value}
        interaction = fake.slash(user, name, option, channel_id=channel, guild_id=GUILD)
        await fake.dispatch("INTERACTION_CREATE", interaction)
        return str(
            await fake.wait_until(lambda: interaction_answer(fake, interaction), STEP_TIMEOUT)
        )

    async def say(user: dict[str, Any], text: str, channel: int, **extra: Any) -> None:
        guild = None if channel == DM else GUILD
        await fake.dispatch(
            "MESSAGE_CREATE", fake.message(user, text, channel_id=channel, guild_id=guild, **extra)
        )

    async def answered(channel: int, count: int) -> str:
        await fake.wait_until(lambda: len(fake.seen_in(channel)) >= count, STEP_TIMEOUT)
        return fake.seen_in(channel)[count - 1]

    try:
        assert proc.stderr is not None
        await read_until(proc.stderr, "discord is ready")
        # A member who may not manage the server cannot change when the bot speaks.
        refused = await slash(MEMBER, "group", "trigger always", CHANNEL)
        assert "Only this group's admins" in refused
        await say(MEMBER, "first words", CHANNEL)  # no mention: not for the bot yet
        assert "every message" in await slash(MOD, "group", "trigger always", CHANNEL)
        await say(MEMBER, "hello there", CHANNEL)
        assert await answered(CHANNEL, 1) == "(answer to: hello there)"
        assert not [r for r in fake_llm.chat_requests if "first words" in conversation(r)]
        # The channel's persona, set by a manager, is the channel's only.
        assert "Be brief." in await slash(MOD, "persona", "Be brief.", CHANNEL)
        await say(MEMBER, "and the persona?", CHANNEL)
        await answered(CHANNEL, 2)
        assert "Be brief." in fake_llm.chat_requests[-1]["messages"][0]["content"]
        await say(MEMBER, "a direct message", DM)
        await answered(DM, 1)
        assert "Be brief." not in fake_llm.chat_requests[-1]["messages"][0]["content"]

        # A reply to the bot's answer once it was consolidated (/new files the conversation);
        # Discord names the message only, and the transcript gives its text.
        answer_id = next(
            i for i, m in fake.posted.items() if m["content"] == "(answer to: hello there)"
        )
        new = fake.slash(MEMBER, "new", channel_id=CHANNEL, guild_id=GUILD)
        await fake.dispatch("INTERACTION_CREATE", new)
        await fake.wait_until(lambda: fake_llm.consolidation_requests, STEP_TIMEOUT)
        await say(MEMBER, "why?", CHANNEL, reference_only=answer_id)
        await answered(CHANNEL, 3)
        said = last_said(fake_llm.chat_requests[-1])
        assert "In reply to your message:]\n> (answer to: hello there)" in said

        # A thread is a conversation of its own, answered in the thread (it speaks as its
        # channel does: every message).
        await say(MEMBER, "in the thread", THREAD)
        assert await answered(THREAD, 1) == "(answer to: in the thread)"
        assert "hello there" not in conversation(fake_llm.chat_requests[-1])
        assert len(fake.seen_in(CHANNEL)) == 3
        thread_sessions = (tmp_path / "workspaces" / "discord-78" / "sessions").glob("*502*")
        assert list(thread_sessions)
    finally:
        await stopped(proc)
        await fake.stop()
    assert proc.returncode == 0
