"""Consolidation end to end: the real LLMClient (openai SDK) against a fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.llm.client import LLMClient
from memory.consolidation.asking import SAVE_MEMORY_TOOL, format_messages, parse_save_memory
from memory.consolidation.consolidator import MemoryConsolidator
from memory.llm import ChatResult, ToolCall
from memory.session import Session
from memory.store import MEMORY_TEMPLATE
from memory.tokens import TokenEstimator
from memory.workspace import Workspace, Workspaces
from tests.rigs.fakes.openai_server import (
    Delay,
    Status,
    completion,
    save_memory_call,
    tool_call,
)

# As long as a real bot's system prompt with its tool schemas: a consolidation request (its own
# instructions, MEMORY.md, the chunk) then fits in the window the turn's prompt overflows.
SYSTEM = "You are a helpful assistant. " + "Be kind, be brief, say what you know. " * 50
FORCED = {"type": "function", "function": {"name": "save_memory"}}
RAW_HEADER = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] \[RAW\] (\d+) messages$", re.M)
# A MEMORY.md as a good model writes it back: every section kept.
ALPHA_MEMORY = MEMORY_TEMPLATE.replace("Information\n", "Information\n- likes alpha\n")
GOOD = save_memory_call("[2024-05-01 10:00] Talked about alpha and beta.", ALPHA_MEMORY)


@pytest.fixture
def workspace(workspaces_dir: Path) -> Workspace:
    """A user whose MEMORY.md already holds what GOOD writes back, so that a consolidation
    does not grow the prompt (the rounds each test expects stay exact)."""
    ws = Workspaces(workspaces_dir).get("telegram-42")
    ws.memory.write(ALPHA_MEMORY)
    return ws


def add_turns(ws: Workspace, session: Session, n: int, first: str = "", words: int = 40) -> None:
    """n user/assistant turns of about 2 × `words` tokens; `first` opens the first user message."""
    for i in range(n):
        lead = first if i == 0 and first else f"turn {i}:"
        ws.sessions.append(session, {"role": "user", "content": f"{lead} " + "alpha " * words})
        reply = f"answer {i}: " + "beta " * words
        ws.sessions.append(session, {"role": "assistant", "content": reply})


def prompt_of(ws: Workspace) -> Callable[[], str]:
    return lambda: f"{SYSTEM}\n\n{ws.memory.prompt_section()}"


def consolidator_for(
    llm: LLMClient, ws: Workspace, session: Session, over_by: int = 1, **kwargs: Any
) -> tuple[MemoryConsolidator, TokenEstimator]:
    """A consolidator whose window the session's prompt exceeds by `over_by` tokens."""
    estimator = TokenEstimator()
    window = estimator.prompt_tokens(prompt_of(ws)(), session) - over_by
    return MemoryConsolidator(llm, estimator, window, **kwargs), estimator


def history(ws: Workspace) -> str:
    return ws.history_path.read_text() if ws.history_path.exists() else ""


# -- the loop -------------------------------------------------------------------------------------


async def test_below_the_window_nothing_happens(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 5)
    consolidator, _ = consolidator_for(llm, workspace, session, over_by=0)  # exactly at the window
    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 0
    assert fake_llm.requests == []
    assert session.last_consolidated == 0
    assert not workspace.history_path.exists()


async def test_above_the_window_a_chunk_up_to_a_user_turn_is_consolidated(
    llm, fake_llm, workspace
) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 10)
    consolidator, estimator = consolidator_for(llm, workspace, session)
    fake_llm.queue(GOOD)

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 1

    cursor = session.last_consolidated
    everything = workspace.sessions.read_all(session)
    assert 0 < cursor < len(everything) == session.total
    assert everything[cursor]["role"] == "user"
    assert session.messages == everything[cursor:]  # the consolidated ones left RAM
    target = consolidator.target_tokens(prompt_of(workspace)())
    assert estimator.prompt_tokens(prompt_of(workspace)(), session) <= target
    (request,) = fake_llm.requests
    assert request["tool_choice"] == FORCED
    assert request["tools"] == [SAVE_MEMORY_TOOL]
    assert request["messages"][0]["content"].startswith("You are a memory consolidation agent")
    sent = request["messages"][1]["content"]
    assert format_messages(everything[:cursor]) in sent
    assert everything[cursor]["content"] not in sent  # the rest stays in the prompt
    assert "Talked about alpha and beta." in history(workspace)
    assert workspace.memory.read() == ALPHA_MEMORY
    # The cursor is persisted: a fresh load of the workspace sees it.
    reloaded = Workspaces(workspace.root.parent).get("telegram-42").sessions.get("telegram:dm:42")
    assert reloaded.last_consolidated == cursor
    assert consolidator.last_consolidated_at("telegram-42", "telegram:dm:42") is not None


async def test_several_rounds_until_under_the_target(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 12)
    # (A budget the growing memory stays within: condensing it is not this test's subject.)
    consolidator, estimator = consolidator_for(llm, workspace, session, memory_budget_tokens=10_000)
    # The new memory is bigger than a turn, so after round one the prompt is still above target.
    big_memory = ALPHA_MEMORY + "- gamma fact\n" * 60
    fake_llm.default = lambda req: save_memory_call("[2024-05-01 10:00] Summary.", big_memory)

    rounds = await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace))

    assert rounds == 2 == len(fake_llm.requests)
    target = consolidator.target_tokens(prompt_of(workspace)())
    assert estimator.prompt_tokens(prompt_of(workspace)(), session) <= target
    assert session.unconsolidated()[0]["role"] == "user"


async def test_at_most_five_rounds(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 40)
    consolidator, _ = consolidator_for(llm, workspace, session, memory_budget_tokens=10_000)
    grown: list[int] = []

    def growing_memory(req: dict[str, Any]) -> dict[str, Any]:
        grown.append(1)
        memory = ALPHA_MEMORY + "- delta\n" * (60 * len(grown))
        # (the numbers said, "turn 12:": an entry keeping none is refused, checks.keeps_said)
        turns = ", ".join(re.findall(r"turn (\d+):", req["messages"][1]["content"]))
        return save_memory_call(f"[2024-05-01 10:00] More: turns {turns}.", memory)

    fake_llm.default = growing_memory
    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 5
    assert len(fake_llm.requests) == 5


async def test_the_newest_user_turn_is_never_consolidated(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 3)
    workspace.sessions.append(session, {"role": "user", "content": "newest " * 2000})
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.default = lambda req: GOOD

    await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace))

    assert session.last_consolidated == 6  # everything before the newest turn, nothing after
    assert all("newest" not in r["messages"][1]["content"] for r in fake_llm.requests)


async def test_tool_exchanges_stay_whole_and_show_tool_names(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    append = workspace.sessions.append
    append(session, {"role": "user", "content": "what did I say about Lisbon? " + "x " * 300})
    call = tool_call("search_history", {"query": "Lisbon"}, call_id="call_9")
    append(session, {"role": "assistant", "content": None, "tool_calls": [call]})
    append(session, {"role": "user", "content": "(typed while the tool ran)"})
    append(
        session,
        {
            "role": "tool",
            "tool_call_id": "call_9",
            "name": "search_history",
            "content": "[2024-04-01 09:00] Trip to Lisbon booked.",
        },
    )
    append(session, {"role": "assistant", "content": "You booked a trip to Lisbon."})
    add_turns(workspace, session, 3)
    consolidator, _ = consolidator_for(llm, workspace, session)
    # (an entry keeping nothing said, "Lisbon", is refused: checks.keeps_said)
    fake_llm.queue(save_memory_call("[2024-05-01 10:00] Asked about Lisbon.", ALPHA_MEMORY))

    await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace))

    assert session.last_consolidated == 5  # not 2: the tool result belongs to the chunk
    assert "ASSISTANT [tools: search_history]: " in fake_llm.requests[0]["messages"][1]["content"]


async def test_one_consolidation_at_a_time_per_session(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 10)
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.default = lambda req: Delay(0.2, GOOD)
    prompt = prompt_of(workspace)

    results = await asyncio.gather(
        consolidator.maybe_consolidate(workspace, session, prompt),
        consolidator.maybe_consolidate(workspace, session, prompt),
    )

    assert sorted(results) == [0, 1]  # the second found the work done
    assert len(fake_llm.requests) == 1
    assert history(workspace).count("Talked about alpha and beta.") == 1


# -- provider quirks and failures -----------------------------------------------------------------


async def test_forced_tool_choice_rejected_is_retried_with_auto(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 6)
    consolidator, _ = consolidator_for(llm, workspace, session)
    rejection = {
        "error": {
            "message": "tool_choice 'function' is not supported in thinking mode",
            "type": "invalid_request_error",
        }
    }
    fake_llm.queue(Status(400, rejection), GOOD)

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 1

    assert [r["tool_choice"] for r in fake_llm.requests] == [FORCED, "auto"]
    assert workspace.memory.read() == ALPHA_MEMORY
    assert session.last_consolidated > 0


async def test_plain_text_answer_is_retried_with_auto(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 6)
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.queue(completion("Sure! The user likes alpha."), GOOD)  # Ollama ignores tool_choice

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 1
    assert [r["tool_choice"] for r in fake_llm.requests] == [FORCED, "auto"]
    assert "likes alpha" in workspace.memory.read()


async def test_no_tool_call_is_a_failure(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 6)
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.default = lambda req: completion("I would rather chat.")

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 0

    # forced, then auto, then once in plain text (chatter, not a summary); then give up
    assert len(fake_llm.requests) == 3
    assert session.last_consolidated == 0
    assert consolidator.failures(workspace, session) == 1
    assert history(workspace) == ""
    assert workspace.memory.read() == ALPHA_MEMORY  # untouched


@pytest.mark.parametrize(
    "arguments",
    [
        {"history_entry": "[2024-05-01 10:00] Chat.", "memory_update": ""},
        {"history_entry": "   ", "memory_update": "- fact"},
        {"memory_update": "- fact"},
        "not json at all",
        [],
    ],
)
async def test_empty_or_missing_fields_are_a_failure(llm, fake_llm, workspace, arguments) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 6)
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.default = lambda req: completion(None, [tool_call("save_memory", arguments)])

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 0
    assert session.last_consolidated == 0
    assert consolidator.failures(workspace, session) == 1
    assert workspace.memory.read() == ALPHA_MEMORY  # untouched


ALPHA_ARGS = {"history_entry": "Chat about alpha.", "memory_update": ALPHA_MEMORY}


@pytest.mark.parametrize(
    "arguments",
    [
        json.dumps([ALPHA_ARGS]),
        json.dumps(json.dumps(ALPHA_ARGS)),
    ],
    ids=["list-holding-an-object", "json-string-twice-encoded"],
)
async def test_tolerant_argument_parsing(llm, fake_llm, workspace, arguments: str) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 6)
    consolidator, _ = consolidator_for(llm, workspace, session)
    fake_llm.queue(completion(None, [tool_call("save_memory", arguments)]))

    assert await consolidator.maybe_consolidate(workspace, session, prompt_of(workspace)) == 1
    assert workspace.memory.read() == ALPHA_MEMORY
    # No timestamp from the model: the entry gets the chunk's own time.
    entry = re.compile(r"^\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] Chat about alpha\.$", re.M)
    assert entry.search(history(workspace))


def test_parse_save_memory_accepts_a_dict_and_rejects_other_tools() -> None:
    args = {"history_entry": "[2024-05-01 10:00] A.\n\nB.", "memory_update": "- m"}
    assert parse_save_memory(ChatResult(None, [ToolCall("1", "save_memory", args)])) == (
        "[2024-05-01 10:00] A.\nB.",  # a blank line would end the HISTORY.md entry early
        "- m\n",
    )
    assert parse_save_memory(ChatResult(None, [ToolCall("1", "other", args)])) is None
    assert parse_save_memory(ChatResult(None, [ToolCall("1", "save_memory", [args])])) is not None
    assert parse_save_memory(ChatResult(None, [ToolCall("1", "save_memory", None)])) is None


async def test_three_failures_archive_the_chunk_raw(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 8)
    consolidator, _ = consolidator_for(llm, workspace, session)
    prompt = prompt_of(workspace)
    no_tool = completion("no")
    fake_llm.queue(
        Status(500, {"error": {"message": "overloaded"}}),  # attempt 1: provider outage,
        Status(500, {"error": {"message": "overloaded"}}),  # also in plain text
        no_tool,
        no_tool,  # attempt 2: no tool call, forced nor auto,
        no_tool,  # and "no" is not a summary
        Status(400, {"error": {"message": "bad"}}),
        Status(400, {"error": {"message": "bad"}}),  # attempt 3: then GOOD, which has no text
    )

    assert await consolidator.maybe_consolidate(workspace, session, prompt) == 0
    assert await consolidator.maybe_consolidate(workspace, session, prompt) == 0
    assert consolidator.failures(workspace, session) == 2
    assert history(workspace) == ""
    fake_llm.default = lambda req: GOOD  # later rounds of the same call may succeed
    await consolidator.maybe_consolidate(workspace, session, prompt)

    text = history(workspace)
    headers = RAW_HEADER.findall(text)
    assert len(headers) == 1
    chunk_length = int(headers[0])
    everything = workspace.sessions.read_all(session)
    chunk = everything[:chunk_length]
    assert chunk_length >= 2 and everything[chunk_length]["role"] == "user"
    assert session.last_consolidated >= chunk_length
    for message in chunk:
        assert message["content"].strip() in text
    assert format_messages(chunk) in text
    assert consolidator.failures(workspace, session) == 0
    assert workspace.memory.read() in ("", ALPHA_MEMORY)


async def test_a_success_resets_the_failure_counter(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 30)
    estimator = TokenEstimator()
    prompt = prompt_of(workspace)
    fail = completion("no")

    async def one_call() -> int:
        # Just over the window each time, so each call needs exactly one chunk.
        consolidator.window = estimator.prompt_tokens(prompt(), session) - 1
        return await consolidator.maybe_consolidate(workspace, session, prompt)

    consolidator = MemoryConsolidator(llm, estimator, 1)
    # A failed attempt asks three times: forced, auto, plain text.
    fake_llm.queue(*[fail] * 6, GOOD, *[fail] * 6)
    results = [await one_call() for _ in range(5)]

    assert results == [0, 0, 1, 0, 0]
    assert consolidator.failures(workspace, session) == 2
    assert "[RAW]" not in history(workspace)  # 2 + 2 failures, never 3 in a row


async def test_two_sessions_of_one_user_keep_both_facts(llm, fake_llm, workspaces_dir) -> None:
    workspaces = Workspaces(workspaces_dir)
    workspace = workspaces.get("telegram-42")
    dm = workspace.sessions.get("telegram:dm:42")
    group = workspace.sessions.get("telegram:group:-100:42")
    add_turns(workspace, dm, 6, first="my cat is called Tom.")
    add_turns(workspace, group, 6, first="my dog is called Rex.")

    def careful_model(req: dict[str, Any]) -> Delay:
        """Keeps the memory it is shown and adds the facts of its chunk (slowly)."""
        text = req["messages"][1]["content"]
        current, chunk = text.split("## Current MEMORY.md\n", 1)[1].split(
            "\n\n## Conversation to process\n", 1
        )
        facts = [f"- {f}" for f in ("cat is called Tom", "dog is called Rex") if f in chunk]
        memory = "\n".join([current.strip(), *facts])
        entry = "[2024-05-01 10:00] Pets: the cat Tom, the dog Rex."  # the names said, kept
        return Delay(0.2, save_memory_call(entry, memory))

    fake_llm.default = careful_model
    prompt = prompt_of(workspace)
    first, _ = consolidator_for(llm, workspace, dm, over_by=20)
    second = MemoryConsolidator(llm, first.estimator, first.window)  # e.g. another bot task

    await asyncio.gather(
        first.maybe_consolidate(workspace, dm, prompt),
        second.maybe_consolidate(workspaces.get("telegram-42"), group, prompt),
    )

    memory = workspace.memory.read()
    assert "cat is called Tom" in memory
    assert "dog is called Rex" in memory
    assert len(fake_llm.requests) == 2
    assert dm.last_consolidated > 0 and group.last_consolidated > 0


# -- /new ----------------------------------------------------------------------------------------


async def test_archive_all_takes_everything_in_one_chunk(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 3)
    workspace.sessions.append(session, {"role": "user", "content": "the very last question"})
    consolidator = MemoryConsolidator(llm, TokenEstimator(), 100_000)
    fake_llm.queue(GOOD)

    await consolidator.archive_all(workspace, session)

    (request,) = fake_llm.requests
    everything = workspace.sessions.read_all(session)
    assert format_messages(everything) in request["messages"][1]["content"]
    assert session.last_consolidated == session.total == len(everything) == 7
    assert "likes alpha" in workspace.memory.read()

    await consolidator.archive_all(workspace, session)  # nothing left: no request
    assert len(fake_llm.requests) == 1


async def test_archive_all_falls_back_to_raw(llm, fake_llm, workspace) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    add_turns(workspace, session, 2)
    consolidator = MemoryConsolidator(llm, TokenEstimator(), 100_000)
    fake_llm.default = lambda req: Status(503, {"error": {"message": "down"}})

    await consolidator.archive_all(workspace, session)

    assert len(fake_llm.requests) == 6  # three attempts, each with the tool and in plain text
    assert RAW_HEADER.findall(history(workspace)) == ["4"]
    assert session.last_consolidated == 4
    assert consolidator.failures(workspace, session) == 0


def test_format_messages_one_line_each() -> None:
    messages = [
        {"role": "user", "content": "hello\n\nthere", "timestamp": "2024-05-01T10:30:59"},
        {
            "role": "assistant",
            "content": None,
            "timestamp": "2024-05-01T10:31:00",
            "tool_calls": [tool_call("search_history", {}), tool_call("edit_memory", {}, "c2")],
        },
        {"role": "user", "content": [{"type": "text", "text": "a part"}]},
    ]
    assert format_messages(messages) == (
        "[2024-05-01T10:30] USER: hello there\n"
        "[2024-05-01T10:31] ASSISTANT [tools: search_history, edit_memory]: \n"
        "[?] USER: a part"
    )


async def test_an_undated_history_entry_is_dated_by_its_conversation(
    llm, fake_llm, workspace
) -> None:
    session = workspace.sessions.get("telegram:dm:42")
    for role, text in (("user", "I switched to green tea"), ("assistant", "Noted.")):
        message = {"role": role, "content": text, "timestamp": "2024-05-01T10:30:59"}
        workspace.sessions.append(session, message)
    fake_llm.queue(save_memory_call("Ada switched to green tea.", ALPHA_MEMORY + "- tea\n"))
    consolidator = MemoryConsolidator(llm, TokenEstimator(), 10_000)
    await consolidator.archive_all(workspace, session)
    assert history(workspace) == "[2024-05-01 10:30] Ada switched to green tea.\n"
