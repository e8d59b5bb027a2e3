"""What a person told the bot in private never reaches a group answer unless they chose it.

In a group turn the answer is public. By default the model gets neither MEMORY.md nor the
history search there, and is told that its answer is public; it may still note a new fact, but
nothing reads the memory back. `[agent] memory_in_groups` and the person's own /privacy choice
may allow it. Everything is checked on what the fake provider receives.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.agent.agent import Agent
from tests.rigs.agent import ask, dm, group, make_agent, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, is_consolidation, tool_call

CHAT = "-1001"
SECRET = "platypus-7731"  # told in a private chat
HISTORY_SECRET = "the-blue-door-5519"  # in the history log from an earlier private talk


def group_requests(fake: FakeOpenAI, since: int) -> list[dict[str, Any]]:
    return [r for r in fake.requests[since:] if not is_consolidation(r)]


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def told_in_private(agent: Agent, fake: FakeOpenAI) -> None:
    fake.queue(
        completion(None, [tool_call("edit_memory", {
            "action": "add", "section": "Important Notes", "text": f"Door code: {SECRET}"})]),
        completion("I'll keep that to myself."),
    )
    await ask(agent, dm("42", f"my door code is {SECRET}, keep it secret"))
    agent.workspaces.get("telegram-42").memory.append_history(
        f"[2026-01-02 09:00] Talked in private about {HISTORY_SECRET}."
    )


async def test_a_private_fact_never_reaches_a_group_turn(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await told_in_private(agent, fake_llm)
    since = len(fake_llm.requests)
    # The model tries every way to the memory: a search, a replace, a duplicate add, the list
    # of reminders (which may hold private ones).
    fake_llm.queue(
        completion(None, [
            tool_call("search_history", {"query": "door"}, "c1"),
            tool_call("edit_memory", {"action": "replace", "text": "Door code: ",
                                      "new_text": "Door code: none"}, "c2"),
            tool_call("edit_memory", {"action": "add", "text": f"Door code: {SECRET[:4]}"}, "c3"),
            tool_call("edit_memory", {"action": "add", "text": f"Door code: {SECRET[:4]}"}, "c4"),
            tool_call("remind", {"action": "list"}, "c5"),
        ]),
        completion("Sorry, I can't help with that here."),
    )
    reply = await ask(agent, group(CHAT, "42", "what is my door code? search your memory"))
    await agent.aclose()
    requests = group_requests(fake_llm, since)
    assert len(requests) == 2
    for request in requests:
        sent = json.dumps(request)
        assert SECRET not in sent and "7731" not in sent and HISTORY_SECRET not in sent
        # No search_history; remind may only set (a list could show private reminders).
        assert tool_names(request) == ["edit_memory", "remind"]
        remind = request["tools"][1]["function"]["parameters"]["properties"]
        assert remind["action"]["enum"] == ["set"] and "number" not in remind
        assert "public" in request["messages"][0]["content"]
    assert reply.text == "Sorry, I can't help with that here."
    memory = (user_home(workspaces_dir, "42") / "MEMORY.md").read_text()
    assert f"Door code: {SECRET}" in memory and "none" not in memory  # no replace
    results = [m["content"] for m in requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 5 and results[0].startswith("Error") and results[1].startswith("Error")
    assert results[2] == results[3] == "Noted in their memory."  # the same, new line or not
    assert results[4].startswith("Error: in a group chat reminders can only be set")
    assert "Door code: plat" in memory  # a new note from the group is kept


async def test_the_operator_may_allow_memory_in_groups(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.memory_in_groups = True
    await told_in_private(agent, fake_llm)
    since = len(fake_llm.requests)
    await ask(agent, group(CHAT, "42", "what's my door code?"))
    await agent.aclose()
    (request,) = group_requests(fake_llm, since)
    assert SECRET in request["messages"][0]["content"]
    assert "search_history" in tool_names(request)
    assert "everyone in it reads your answer" in request["messages"][0]["content"]


async def test_a_person_opts_in_and_out_and_it_applies_at_once(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await told_in_private(agent, fake_llm)
    status = await ask(agent, dm("42", "/privacy"))
    assert status.private and "don't use your memory" in status.text
    on = await ask(agent, group(CHAT, "42", "/privacy groups on"))
    assert on.private and "I use your memory" in on.text and "your choice" in on.text

    since = len(fake_llm.requests)
    await ask(agent, group(CHAT, "42", "what's my door code?"))
    assert SECRET in json.dumps(group_requests(fake_llm, since))

    off = await ask(agent, dm("42", "/privacy groups off"))
    assert "don't use your memory" in off.text
    since = len(fake_llm.requests)
    await ask(agent, group(CHAT, "42", "and now?"))  # same group session, no consolidation
    sent = json.dumps(group_requests(fake_llm, since))
    assert SECRET not in sent and "7731" not in sent

    other = await ask(agent, group(CHAT, "7", "what's 42's door code?"))
    assert other.text
    assert SECRET not in json.dumps(fake_llm.requests[-1])
    bad = await ask(agent, dm("42", "/privacy everyone"))
    assert "didn't understand" in bad.text
    await agent.aclose()


async def test_the_choice_survives_a_restart(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await told_in_private(agent, fake_llm)
    await ask(agent, dm("42", "/privacy groups on"))
    await agent.aclose()
    restarted = make_agent(fake_llm, workspaces_dir)
    since = len(fake_llm.requests)
    await ask(restarted, group(CHAT, "42", "what's my door code?"))
    await restarted.aclose()
    assert SECRET in json.dumps(group_requests(fake_llm, since))
