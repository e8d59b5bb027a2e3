"""Conversations as people hold them on Telegram, with `lightgrep run` as a real process against
the fake Bot API and the fake model: /retry and /undo, a persona per chat, when to speak in a
group (set by its admins only), replies and quotes, forum topics; restarted once on the same
folder, so what was set survives."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.rigs.cli import STEP_TIMEOUT, read_until, start_run, stopped, write_config
from tests.rigs.conversation import conversation, last_said
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.fakes.telegram_server import TOKEN, FakeTelegram, Sent

GROUP = -100777
ADMIN, MEMBER, BOT_ADMIN = 42, 43, 44


class Model:
    """Answers by the newest user message; the first answer to "capital of France?" is wrong."""

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}

    def __call__(self, request: dict[str, Any]) -> Any:
        if is_consolidation(request):
            return save_memory_call(
                "[2026-12-01 10:00] Talked about France.", "## User Information\n- Likes France.\n"
            )
        said = last_said(request).rsplit("\n", 1)[-1]
        times = self.asked[said] = self.asked.get(said, 0) + 1
        if said == "capital of France?":
            return completion("Rome, I think." if times == 1 else "Paris, of course.")
        return completion(f"(answer to: {said})")


async def started(config: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    proc = await start_run(config, env)
    assert proc.stderr is not None
    await read_until(proc.stderr, "telegram is ready")
    return proc


async def answer_in(tg: FakeTelegram, chat: int, count: int) -> Sent:
    """The `count`-th message the bot has in `chat`, once a person reads it whole."""
    await tg.wait_until(lambda: len(tg.sent_to(chat)) >= count, STEP_TIMEOUT)
    return tg.sent_to(chat)[count - 1]


async def asked(llm: FakeOpenAI, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    async with asyncio.timeout(STEP_TIMEOUT):
        while not (found := [r for r in llm.chat_requests if check(r)]):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return found[-1]


async def test_telegram_conversations_as_a_process(
    fake_llm: FakeOpenAI, fake_telegram: FakeTelegram, tmp_path: Path, child_env: dict[str, str]
) -> None:
    tg, llm = fake_telegram, fake_llm
    llm.default = Model()
    tg.admins[GROUP] = {ADMIN}
    config = write_config(
        tmp_path,
        llm,
        f'[limits]\nadmins = ["telegram-{BOT_ADMIN}"]\n'
        f'[telegram]\nenabled = true\ntoken = "{TOKEN}"\nallow_from = ["*"]\n'
        f'api_base = "{tg.api_base}"\npoll_timeout_s = 1\n',
    )
    proc = await started(config, child_env)
    try:
        # /retry: asked again, the wrong answer leaves the prompt.
        tg.dm(ADMIN, "capital of France?")
        assert (await answer_in(tg, ADMIN, 1)).text == "Rome, I think."
        tg.dm(ADMIN, "/retry")
        assert (await answer_in(tg, ADMIN, 2)).text == "Paris, of course."
        assert "Rome" not in conversation(llm.chat_requests[-1])
        # /undo: the last exchange leaves the conversation, and says the lines stay on disk.
        tg.dm(ADMIN, "I live in Lisbon")
        await answer_in(tg, ADMIN, 3)
        tg.dm(ADMIN, "/undo")
        assert "only /forget removes text" in (await answer_in(tg, ADMIN, 4)).text
        # A persona for this private chat only.
        tg.dm(ADMIN, "/persona Answer like a pirate.")
        assert "pirate" in (await answer_in(tg, ADMIN, 5)).text
        tg.dm(ADMIN, "what next?")
        await answer_in(tg, ADMIN, 6)
        request = llm.chat_requests[-1]
        assert "Answer like a pirate." in request["messages"][0]["content"]
        assert "Paris, of course." in conversation(request)
        assert "Lisbon" not in conversation(request) and "Rome" not in conversation(request)

        # In the group: mention mode (the default); a member may not change it, its admin may.
        tg.group(GROUP, MEMBER, "hello everyone")
        tg.group(GROUP, MEMBER, "/group trigger always")
        refused = await answer_in(tg, GROUP, 1)
        assert "Only this group's admins" in refused.text
        assert not [r for r in llm.chat_requests if "hello everyone" in conversation(r)]
        tg.group(GROUP, ADMIN, "/group trigger always")
        assert "every message" in (await answer_in(tg, GROUP, 2)).text
        tg.group(GROUP, MEMBER, "nice weather")
        assert "(answer to: nice weather)" in (await answer_in(tg, GROUP, 3)).text
        group_request = llm.chat_requests[-1]
        assert "pirate" not in group_request["messages"][0]["content"]  # the DM's persona only
        tg.group(GROUP, ADMIN, "/group trigger keyword pizza")
        await answer_in(tg, GROUP, 4)
        tg.group(GROUP, MEMBER, "I like pasta")
        tg.group(GROUP, MEMBER, "I like Pizza")
        assert "I like Pizza" in (await answer_in(tg, GROUP, 5)).text
        assert not [r for r in llm.chat_requests if "pasta" in last_said(r)]
        # The bot's admin ([limits] admins) may set it too, though not the group's admin.
        tg.group(GROUP, BOT_ADMIN, "/group trigger mention")
        assert "@mentions" in (await answer_in(tg, GROUP, 6)).text
        tg.group(GROUP, MEMBER, "more pizza")
        tg.group(GROUP, MEMBER, "@lightgrep_bot and now?")
        assert "and now?" in (await answer_in(tg, GROUP, 7)).text
        assert not [r for r in llm.chat_requests if "more pizza" in last_said(r)]
        tg.group(GROUP, MEMBER, "/group")
        assert "@mentions" in (await answer_in(tg, GROUP, 8)).text

        # A quote: the part the person picked goes with the message, not the whole answer.
        answer = tg.sent_to(GROUP)[6]
        tg.group(GROUP, MEMBER, "why that?", reply_to=tg.as_replied(answer), quote="and now")
        await answer_in(tg, GROUP, 9)
        said = last_said(llm.chat_requests[-1])
        assert "Quoting your message:]\n> and now" in said and "(answer to:" not in said

        # A forum topic is a conversation of its own, answered in the topic.
        tg.group(GROUP, MEMBER, "@lightgrep_bot in the topic", topic=7)
        in_topic = await answer_in(tg, GROUP, 10)
        assert in_topic.params.get("message_thread_id") == "7"
        topic_request = llm.chat_requests[-1]
        assert "nice weather" not in conversation(topic_request)
    finally:
        await stopped(proc)
    assert proc.returncode == 0

    proc = await started(config, child_env)  # the same folder: what was set survives
    try:
        tg.dm(ADMIN, "after the restart")
        await answer_in(tg, ADMIN, 7)
        request = llm.chat_requests[-1]
        assert "Answer like a pirate." in request["messages"][0]["content"]
        assert "Paris, of course." in conversation(request)
        assert "Lisbon" not in conversation(request) and "Rome" not in conversation(request)
        tg.group(GROUP, MEMBER, "still pizza?")  # mention mode survived too
        # A reply to an answer of the bot that was consolidated (/new files the conversation).
        tg.dm(ADMIN, "/new")
        await answer_in(tg, ADMIN, 8)
        await asyncio.wait_for(_consolidated(llm), STEP_TIMEOUT)
        paris = tg.sent_to(ADMIN)[1]
        tg.dm(ADMIN, "are you sure?", reply_to=tg.as_replied(paris))
        await answer_in(tg, ADMIN, 9)
        said = last_said(llm.chat_requests[-1])
        assert "In reply to your message:]\n> Paris, of course." in said
        assert not [r for r in llm.chat_requests if "still pizza" in last_said(r)]
    finally:
        await stopped(proc)
    assert proc.returncode == 0


async def _consolidated(llm: FakeOpenAI) -> None:
    while not llm.consolidation_requests:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
