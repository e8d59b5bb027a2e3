"""A reminder the bot sent is part of the conversation the model reads next, even when it is the
first thing in the session (a new chat, a group where the person only used /remind, just after
/new): the person says "done!" and the model knows to what. The reminder goes out through the
scheduler as it does in `lightgrep run`; the model is the fake on 127.0.0.1."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.agent.agent import Agent
from bot.inbound import Inbound
from bot.outbound import Reply
from tests.rigs.agent import ask, make_agent, session_records, user_home
from tests.rigs.agent import dm as private_message
from tests.rigs.agent import group as group_message
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, save_memory_call

WAIT_S = 10.0


def dm(user: str, text: str) -> Inbound:
    """A Telegram private message, with its chat as the adapter gives it (Inbound.place)."""
    return replace(private_message(user, text), place={"chat": user, "user": user})


def group(chat: str, user: str, text: str) -> Inbound:
    return replace(group_message(chat, user, text), place={"chat": chat, "user": user})


class Platform:
    """A platform's send_to: takes every reminder it is given."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send_to(self, destination: dict[str, str], reply: Reply | None) -> None:
        assert reply is not None
        self.sent.append(reply.text)


async def remind_and_wait(agent: Agent, workspaces: Path, asked: Inbound) -> str:
    """/remind in 1 second, the scheduler running as in `lightgrep run`, until the reminder was
    sent and noted in the session it was asked in; the text the person received."""
    platform = Platform()
    agent.send_with("telegram", platform)
    stop = asyncio.Event()
    running = asyncio.create_task(agent.reminders.run(stop))
    try:
        answer = await ask(agent, replace(asked, text="/remind in 1 second water the fern"))
        assert answer.text.startswith("OK, I'll remind you"), answer.text
        async with asyncio.timeout(WAIT_S):
            while not platform.sent or not _noted(workspaces, platform.sent[0]):  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        await running
    [sent] = platform.sent
    assert "water the fern" in sent
    return sent


def _noted(workspaces: Path, text: str) -> bool:
    """(False while the session has no file yet: the note may come a moment after the send.)"""
    if not list((user_home(workspaces, "42") / "sessions").glob("*.jsonl")):
        return False
    return any(r.get("content") == text for r in session_records(workspaces, "42"))


def conversation(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of a chat request after the system prompt."""
    return [m for m in request["messages"] if m["role"] != "system"]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def assert_model_knows(request: dict[str, Any], reminder: str, said: str) -> None:
    """The request carries the reminder as sent, and opens (after the system prompt) with the
    person's turn, never the bot's."""
    messages = conversation(request)
    assert messages, request["messages"]
    assert messages[0]["role"] == "user", messages
    assert any(reminder in text_of(m) for m in messages), messages
    assert said in text_of(messages[-1]) and messages[-1]["role"] == "user", messages


@pytest.mark.parametrize("where", ["dm", "group"])
async def test_a_reminder_in_a_new_chat_is_seen_by_the_model(
    fake_llm: FakeOpenAI, workspaces_dir: Path, where: str
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    place = dm("42", "") if where == "dm" else group("-100", "42", "")
    reminder = await remind_and_wait(agent, workspaces_dir, place)
    assert not fake_llm.chat_requests  # /remind asked no model
    await ask(agent, replace(place, text="done, it has water now"))
    [request] = fake_llm.chat_requests
    assert_model_knows(request, reminder, "done, it has water now")
    # The next turn still sees it, and the conversation still opens with the person.
    await ask(agent, replace(place, text="and tomorrow?"))
    assert_model_knows(fake_llm.chat_requests[-1], reminder, "and tomorrow?")
    await agent.aclose()


async def test_a_reminder_just_after_new_is_seen_by_the_model(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(
        completion("Hi!"),
        save_memory_call("[2026-12-02 10:00] Said hello.", "## Plants\n- A fern.\n"),
    )
    await ask(agent, dm("42", "hello there"))
    new = await ask(agent, dm("42", "/new"))
    assert new.text.startswith("Started a fresh conversation"), new.text
    reminder = await remind_and_wait(agent, workspaces_dir, dm("42", ""))
    await agent.background.wait_all()  # the old conversation filed
    assert "Said hello." in (user_home(workspaces_dir, "42") / "HISTORY.md").read_text()
    await ask(agent, dm("42", "done, it has water now"))
    request = fake_llm.chat_requests[-1]
    assert_model_knows(request, reminder, "done, it has water now")
    assert not any("hello there" in text_of(m) for m in conversation(request))  # filed by /new
    await agent.aclose()
