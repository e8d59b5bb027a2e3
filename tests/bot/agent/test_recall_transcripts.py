"""/recall and search_history reach the person's own consolidated messages (issue 33, item 4).

A real Agent, its real openai client, the fake provider on 127.0.0.1 and real files: a message
is said, consolidated by /new with a history entry that keeps other words of it but not the one
asked for later, and then searched.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, save_memory_call, tool_call

SAID = "My sister Ingrid moved to Rotterdam in 2019, she teaches piano there."
ENTRY = "[2026-01-01 10:00] Talked about the user's sister Ingrid and her teaching."
MEMORY = "## User Information\n- Has a sister, Ingrid\n"


async def _filed(fake_llm: FakeOpenAI, agent, user: str = "42") -> None:  # type: ignore[no-untyped-def]
    fake_llm.queue(completion("How lovely!"))
    await ask(agent, dm(user, SAID))
    fake_llm.queue(save_memory_call(ENTRY, MEMORY))
    await ask(agent, dm(user, "/new"))
    await agent.background.wait_all()


async def test_recall_finds_a_word_the_history_entry_dropped_in_the_transcript(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await _filed(fake_llm, agent)
    history = (user_home(workspaces_dir, "42") / "HISTORY.md").read_text()
    assert "Ingrid" in history and "Rotterdam" not in history  # the summary dropped it

    found = await ask(agent, dm("42", "/recall Rotterdam"))
    both = await ask(agent, dm("42", "/recall Ingrid"))
    stranger = await ask(agent, dm("43", "/recall Rotterdam"))
    await agent.aclose()

    assert found.private and "No match" not in found.text
    assert "**Rotterdam**" in found.text and "teaches piano" in found.text
    day = ENTRY[1:11]  # the message's own date is today's, not the entry's stamp
    assert "From the conversation of " in found.text and "in your own words" in found.text
    # Only the person's words matched: the header does not call them history entries.
    assert found.text.startswith("Your own messages matching “Rotterdam”"), found.text
    assert day not in found.text
    # The history entry first, then the person's own message.
    assert both.text.index("Talked about") < both.text.index("From the conversation of")
    assert "(1–2 of 2)" in both.text
    assert both.text.startswith("Your history matching “Ingrid”"), both.text
    assert "Rotterdam" not in stranger.text and "Ingrid" not in stranger.text


async def test_the_search_tool_finds_it_too_marked_as_the_persons_words(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await _filed(fake_llm, agent)
    fake_llm.queue(
        completion(None, [tool_call("search_history", {"query": "Rotterdam"})]),
        completion("Your sister Ingrid lives in Rotterdam."),
    )
    reply = await ask(agent, dm("42", "Where does my sister live?"))
    await agent.aclose()

    tool_answer = [m for m in fake_llm.chat_requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "Rotterdam in 2019" in tool_answer["content"]
    assert "From the conversation of" in tool_answer["content"]
    assert "the person's own message" in tool_answer["content"]
    assert "Rotterdam" in reply.text


async def test_another_persons_transcript_is_never_found(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await _filed(fake_llm, agent, user="42")
    fake_llm.queue(completion("Hi."))
    await ask(agent, dm("43", "hello there"))
    fake_llm.queue(save_memory_call("[2026-01-01 10:00] Said hello.", "## User Information\n"))
    await ask(agent, dm("43", "/new"))
    await agent.background.wait_all()
    fake_llm.queue(
        completion(None, [tool_call("search_history", {"query": "Rotterdam Ingrid piano"})]),
        completion("I don't know."),
    )
    await ask(agent, dm("43", "Where does Ingrid live?"))
    mine = await ask(agent, dm("43", "/recall hello"))
    theirs = await ask(agent, dm("43", "/recall Rotterdam"))
    regex = await ask(agent, dm("43", "/recall --regex ."))
    await agent.aclose()

    tool_answer = [m for m in fake_llm.chat_requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "Rotterdam" not in tool_answer["content"] and "Ingrid" not in tool_answer["content"]
    assert "**hello**" in mine.text  # 43's own message is found
    assert "No match" in theirs.text
    assert "Rotterdam" not in regex.text and "Ingrid" not in regex.text


async def test_forget_removes_it_from_the_results_and_from_every_file(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await _filed(fake_llm, agent)
    before = await ask(agent, dm("42", "/recall Rotterdam"))
    await ask(agent, dm("42", "/forget Rotterdam"))
    await ask(agent, dm("42", "/forget confirm"))
    after = await ask(agent, dm("42", "/recall Rotterdam"))
    piano = await ask(agent, dm("42", "/recall piano"))
    await agent.aclose()

    assert "**Rotterdam**" in before.text
    assert "No match" in after.text and "No match" in piano.text  # the message went whole
    home = user_home(workspaces_dir, "42")
    holding = [p.name for p in home.rglob("*") if p.is_file() and b"Rotterdam" in p.read_bytes()]
    assert holding == []  # no derived copy, no index of it left behind


async def test_a_withdrawn_message_is_not_found(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(completion("Hello!"), completion("Noted."))
    await ask(agent, dm("42", "hello, I am Ada from Lisbon"))
    await ask(agent, dm("42", "my bank PIN is Zanzibar"))
    await ask(agent, dm("42", "/undo"))
    fake_llm.queue(save_memory_call("[2026-01-01 10:00] Ada from Lisbon said hello.", MEMORY))
    await ask(agent, dm("42", "/new"))
    await agent.background.wait_all()
    undone = await ask(agent, dm("42", "/recall Zanzibar"))
    kept = await ask(agent, dm("42", "/recall hello"))
    await agent.aclose()
    assert "No match" in undone.text
    assert "From the conversation of" in kept.text
    state = json.loads((user_home(workspaces_dir, "42") / ".transcripts.state.index").read_text())
    assert list(state["read"])  # one transcript, read up to its cursor


async def test_later_consolidations_are_added_once(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The derived text grows by what each consolidation files: nothing twice, nothing missed."""
    agent = make_agent(fake_llm, workspaces_dir)
    await _filed(fake_llm, agent)
    first = await ask(agent, dm("42", "/recall Rotterdam"))
    fake_llm.queue(completion("Sounds fun."))
    await ask(agent, dm("42", "We will visit Rotterdam again with Jonas in 2027."))
    fake_llm.queue(save_memory_call("[2026-01-02 10:00] Plans with Jonas.", MEMORY))
    await ask(agent, dm("42", "/new"))
    await agent.background.wait_all()
    second = await ask(agent, dm("42", "/recall Rotterdam"))
    await agent.aclose()

    assert "(1–1 of 1)" in first.text
    assert "(1–2 of 2)" in second.text and "again with Jonas" in second.text
    assert second.text.count("teaches piano") == 1
