"""Bounded RAM: beyond [memory] max_loaded_sessions the idle sessions leave RAM, and a session
in use (a turn running or waiting, a consolidation pending) never does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.rigs.agent import ask, dm, make_agent
from tests.rigs.fakes.openai_server import Delay, FakeOpenAI, completion


def last_user(request: dict[str, Any]) -> str:
    return next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")


def echo(request: dict[str, Any]) -> Any:
    """Answers "re: <the newest user message>"; the one saying "slow" only after 0.5 s."""
    text = str(last_user(request))
    answer = completion(f"re: {text.split(']')[-1].strip()}")
    return Delay(0.5, answer) if "slow" in text else answer


def sent_texts(request: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in request["messages"] if m["role"] != "system"]


async def test_idle_sessions_leave_ram_and_come_back_whole_from_disk(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = echo
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_loaded_sessions": 2})
    users = [str(n) for n in range(5)]
    for round_ in (1, 2):
        for user in users:
            reply = await ask(agent, dm(user, f"hello {round_} from {user}"))
            assert reply.text == f"re: hello {round_} from {user}"
            assert len(agent.workspaces.loaded()) <= 2
    await agent.aclose()
    # Every second turn still saw the first one (read back from disk after its eviction).
    seconds = [r for r in fake_llm.requests if "hello 2" in str(last_user(r))]
    for user, request in zip(users, seconds, strict=True):
        texts = sent_texts(request)
        assert any(f"hello 1 from {user}" in t for t in texts)
        assert f"re: hello 1 from {user}" in texts


async def test_a_session_whose_turn_is_running_keeps_its_lock_and_its_order(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = echo
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_loaded_sessions": 1})
    await ask(agent, dm("42", "hello"))  # loaded, and the oldest from here on
    first = asyncio.create_task(ask(agent, dm("42", "slow first")))
    await fake_llm.wait_requests(2)
    for user in ("1", "2", "3"):  # each would push the oldest session out
        await ask(agent, dm(user, f"hi from {user}"))
    second = await ask(agent, dm("42", "then second"))
    assert (await first).text == "re: slow first"
    await agent.aclose()
    assert second.text == "re: then second"
    # The second message waited for the first turn: the model saw its answer.
    [request] = [r for r in fake_llm.requests if "then second" in str(last_user(r))]
    assert "re: slow first" in sent_texts(request)
