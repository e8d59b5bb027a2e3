"""Consolidation a small model can answer (issue 23): the save_memory answer refused by the
checks, or no tool calling at all, asked once more in plain text; its facts merged into
MEMORY.md by code. The fake model's answers are what SmolLM2-135M-Instruct on llama-cpp-python
0.3.36 (`../shared/REAL_MODEL.md`) wrote, taken from bench/real_model.py and direct requests."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bot.llm.client import LLMClient
from memory.consolidation.consolidator import MemoryConsolidator
from memory.store import MEMORY_TEMPLATE
from memory.tokens import TokenEstimator
from memory.workspace import Workspace, Workspaces
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    Status,
    completion,
    is_plain_consolidation,
    save_memory_call,
    schema_echo,
)

MISO = MEMORY_TEMPLATE.replace("Information\n", "Information\n- Has a cat named Miso\n")
RAW = re.compile(r"\[RAW\]")

# What the person said (each chunk closes with a question, so it ends at a user turn).
MARISOL = [
    ("user", "Hi! My name is Marisol."),
    ("assistant", "Hello Marisol! How can I help you today?"),
    ("user", "I work as a marine biologist at the aquarium."),
    ("assistant", "That sounds fascinating! What do you study?"),
    ("user", "I have a tortoise called Pebble."),
    ("assistant", "Pebble is a lovely name for a tortoise!"),
    ("user", "I prefer green tea to coffee, always."),
    ("assistant", "Green tea is a great choice."),
]
TOMAS = [
    ("user", "I'm Tomas and I live in Lyon."),
    ("assistant", "Nice to meet you, Tomas! Lyon is a beautiful city."),
    ("user", "I am allergic to peanuts, by the way."),
    ("assistant", "Thanks for telling me, I will keep that in mind."),
    ("user", "My daughter Ines turns 7 next week."),
    ("assistant", "How exciting! Are you planning a party?"),
]

# The real model's plain-text answers.
FIRST_PERSON = (
    "Hi, I'm Marisol. I work as a marine biologist at the aquarium and prefer green tea to "
    "coffee. I have a tortoise named Pebble. I like green tea to coffee."
)
WITH_A_LIST = (
    "Marisol, a marine biologist at the aquarium.\n- I work as a marine biologist at the "
    "aquarium.\n- I have a tortoise named Pebble.\n- I prefer green tea to coffee, always."
)
MADE_UP = (
    "The user is a food blogger, and their job involves cooking. They are allergic to peanuts, "
    "which is a common allergy in Lyon. They live in Lyon, France, and they have a daughter "
    "Ines who turns 7 next week."
)
DIALOGUE = (
    "Marisol: Hello, I'm Marisol. How can I help you today?\nUser: I work as a marine "
    "biologist at the aquarium.\nAssistant: That sounds fascinating! What do you study?\nUser: "
    "I have a tortoise called Pebble.\nAssistant: Green tea to coffee is a great choice."
)
UNRELATED = "The user is a food blogger who loves to share his culinary adventures with the world."


def timestamps_save(request: dict[str, Any]) -> dict[str, Any]:
    """The model's own template: a forced save_memory call with timestamps as both fields."""
    return save_memory_call("[2026-12-01 21:40]", "[2026-12-01 21:40]")


@pytest.fixture
def workspace(workspaces_dir: Path) -> Workspace:
    ws = Workspaces(workspaces_dir).get("telegram-42")
    ws.memory.write(MISO)
    return ws


def talk(ws: Workspace, turns: list[tuple[str, str]], key: str = "telegram:dm:42") -> Any:
    session = ws.sessions.get(key)
    for role, text in [*turns, ("user", "What was that again?")]:
        ws.sessions.append(session, {"role": role, "content": text})
    return session


# As long as a real bot's system prompt with its tools: a consolidation request then fits in
# the window the turn's prompt is just over.
SYSTEM = "You are a helpful assistant. " + "Be kind, be brief, say what you know. " * 50


def prompt_of(ws: Workspace) -> Callable[[], str]:
    return lambda: f"{SYSTEM}\n\n{ws.memory.prompt_section()}"


def over(ws: Workspace, session: Any, estimator: TokenEstimator) -> int:
    """A window the session's prompt is just over: one chunk to consolidate."""
    return estimator.prompt_tokens(prompt_of(ws)(), session) - 1


def model(tool: Callable[[dict[str, Any]], Any], plain: str) -> Callable[[dict[str, Any]], Any]:
    """A small model: `tool` answers the save_memory requests, `plain` the plain-text one."""
    return lambda request: completion(plain) if is_plain_consolidation(request) else tool(request)


def history(ws: Workspace) -> str:
    return ws.history_path.read_text() if ws.history_path.exists() else ""


@pytest.mark.parametrize("tool", [schema_echo, timestamps_save], ids=["schema-echo", "stamps"])
@pytest.mark.parametrize("plain", [FIRST_PERSON, WITH_A_LIST], ids=["sentences", "list"])
async def test_a_refused_tool_answer_is_asked_in_plain_text_and_its_facts_are_added(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace, tool: Any, plain: str
) -> None:
    session = talk(workspace, MARISOL)
    fake_llm.default = model(tool, plain)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)

    kinds = ["plain" if is_plain_consolidation(r) else r["tool_choice"] for r in fake_llm.requests]
    assert kinds == [{"type": "function", "function": {"name": "save_memory"}}, "plain"]
    memory = workspace.memory.read()
    assert "- Has a cat named Miso" in memory  # nothing removed
    for fact in ("The user works as a marine biologist", "The user has a tortoise named Pebble"):
        assert fact in memory
    assert "green tea" in memory.split("## Preferences")[1].split("##")[0]  # by section
    assert "I work" not in memory and "Hi," not in memory  # the third person
    entry = history(workspace)
    assert "marine biologist" in entry and not RAW.search(entry)
    assert session.last_consolidated == session.total


async def test_what_the_model_made_up_is_kept_out_of_memory_and_history(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    session = talk(workspace, TOMAS)
    fake_llm.default = model(schema_echo, MADE_UP)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)

    memory, entry = workspace.memory.read(), history(workspace)
    assert "allergic to peanuts" in memory.split("## Important Notes")[1]
    assert "daughter Ines who turns 7" in memory and "live in Lyon" in memory
    for invented in ("food blogger", "common allergy", "France"):
        assert invented not in memory and invented not in entry
    assert "allergic to peanuts" in entry


@pytest.mark.parametrize("plain", [DIALOGUE, UNRELATED], ids=["dialogue", "unrelated"])
async def test_a_plain_answer_that_copies_the_dialogue_or_is_not_about_it_is_refused(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace, plain: str
) -> None:
    """Refused as the tool's garbage is: three failed attempts, then the chunk archived raw;
    MEMORY.md untouched."""
    session = talk(workspace, MARISOL)
    fake_llm.default = model(schema_echo, plain)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # three attempts, then raw

    assert workspace.memory.read() == MISO
    assert len(RAW.findall(history(workspace))) == 1
    assert "food blogger" not in history(workspace).split("[RAW]")[0]


async def test_after_two_refusals_the_plain_text_way_is_asked_first(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    """A server whose model never manages the tool is not asked for it on every chunk; one that
    does is never asked in plain text (the seed's way first)."""
    estimator = TokenEstimator()
    fake_llm.default = model(schema_echo, FIRST_PERSON)
    consolidator = MemoryConsolidator(llm, estimator, 1)
    firsts = []
    for _ in range(4):
        session = talk(workspace, MARISOL)
        consolidator.window = over(workspace, session, estimator)
        asked = len(fake_llm.requests)
        await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)
        firsts.append("plain" if is_plain_consolidation(fake_llm.requests[asked]) else "tool")
    assert firsts == ["tool", "tool", "plain", "plain"]
    assert consolidator.writer.ways[0] == "plain text"

    good = MemoryConsolidator(llm, estimator, 1)
    other = Workspaces(workspace.root.parent).get("telegram-43")
    other.memory.write(MISO)
    entry = "[2026-12-01 10:00] Marisol likes green tea."  # a name said kept: checks.keeps_said
    fake_llm.default = lambda request: save_memory_call(entry, MISO)
    for _ in range(3):
        session = talk(other, MARISOL, key="telegram:dm:43")
        good.window = over(other, session, estimator)
        asked = len(fake_llm.requests)
        await good.archive_all(other, session)
        assert not any(is_plain_consolidation(r) for r in fake_llm.requests[asked:])


async def test_a_server_without_tool_calling_consolidates_in_plain_text(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    """A server that refuses any request with tools (HTTP 400, as vLLM without a tool parser
    does): the plain-text request still files the chunk and teaches MEMORY.md."""
    session = talk(workspace, MARISOL)
    no_tools = Status(400, {"error": {"message": '"auto" tool choice requires --enable-auto'}})
    fake_llm.default = model(lambda request: no_tools, FIRST_PERSON)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)
    assert "The user has a tortoise named Pebble" in workspace.memory.read()


async def test_facts_already_known_are_not_added_again_and_none_is_removed(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    known = MISO.replace("Miso\n", "Miso\n- The user has a tortoise called Pebble\n")
    workspace.memory.write(known)
    session = talk(workspace, MARISOL)
    fake_llm.default = model(schema_echo, FIRST_PERSON)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)

    memory = workspace.memory.read()
    assert memory.count("tortoise") == 1  # "named" or "called", the same fact
    for line in known.splitlines():
        assert line in memory
    assert memory.count("green tea") == 1  # "prefer" and "like" green tea: one fact


# What a 2,048 window's small model put into MEMORY.md (issue 33, 3), as a save_memory answer.
JUNK_UPDATES = {
    "entities": MISO + "- Marisol&#39;s tea &#39;&#39;\n",
    "code": MISO.replace("Context\n", "Context\n- def remember(name):\n- return name\n"),
    "json": MISO + '- {"new_text": "Marisol"}\n',
    "section": MISO + "\n## ,\n- Marisol\n",
}


@pytest.mark.parametrize("junk", list(JUNK_UPDATES))
async def test_a_tool_answer_adding_garbage_is_refused_and_asked_in_plain_text(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace, junk: str
) -> None:
    """Before: HTML entities, code, JSON fragments and a section named "," were written."""
    session = talk(workspace, MARISOL)
    entry = "[2026-12-01 21:40] Marisol, a marine biologist, has a tortoise named Pebble."
    fake_llm.default = model(lambda r: save_memory_call(entry, JUNK_UPDATES[junk]), FIRST_PERSON)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # (one request: the whole conversation)

    assert any(is_plain_consolidation(r) for r in fake_llm.requests)
    memory = workspace.memory.read()
    assert "The user has a tortoise named Pebble" in memory
    for garbage in ("&#39;", "def ", "new_text", "## ,"):
        assert garbage not in memory


# Issue 33, item 4: one-line entries small models wrote that keep none of the names said.
KEEPS_NOTHING = "[2026-12-01 10:00] The user chatted with the assistant about their life."
ROTTERDAM = [
    ("user", "My sister Ingrid moved to Rotterdam in 2019."),
    ("assistant", "How nice! Do you visit her often?"),
    ("user", "Every spring, we cycle along the Maas together."),
    ("assistant", "That sounds lovely."),
]
ROTTERDAM_PLAIN = (
    "The user's sister Ingrid moved to Rotterdam in 2019.\n- The user's sister Ingrid lives in "
    "Rotterdam"
)


def keeps_nothing(request: dict[str, Any]) -> dict[str, Any]:
    """A save_memory call whose MEMORY.md is fine but whose history entry keeps no name said."""
    return save_memory_call(KEEPS_NOTHING, MISO)


async def test_an_entry_keeping_none_of_the_names_said_is_asked_again_in_plain_text(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    session = talk(workspace, ROTTERDAM)
    fake_llm.default = model(keeps_nothing, ROTTERDAM_PLAIN)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)

    kinds = ["plain" if is_plain_consolidation(r) else "tool" for r in fake_llm.requests]
    assert kinds == ["tool", "plain"]
    entry = history(workspace)
    assert "chatted with the assistant" not in entry
    assert "Rotterdam" in entry and "Ingrid" in entry and not RAW.search(entry)
    assert session.last_consolidated == session.total


async def test_a_plain_summary_keeping_none_of_them_is_refused_too_and_in_the_end_archived_raw(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    session = talk(workspace, ROTTERDAM)
    fake_llm.default = model(keeps_nothing, "The user talked about their sister and cycling.")
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)  # three attempts, then raw

    entry = history(workspace)
    assert "talked about their sister" not in entry and "chatted" not in entry
    assert len(RAW.findall(entry)) == 1 and "Rotterdam in 2019" in entry  # nothing lost
    assert workspace.memory.read() == MISO


async def test_without_names_or_numbers_said_a_short_entry_is_written(
    llm: LLMClient, fake_llm: FakeOpenAI, workspace: Workspace
) -> None:
    """Only a chunk that has such words asks for one: "hello" and "how are you" have none."""
    session = talk(workspace, [("user", "hello there, how are you?"), ("assistant", "Fine!")])
    fake_llm.default = model(keeps_nothing, FIRST_PERSON)
    estimator = TokenEstimator()
    consolidator = MemoryConsolidator(llm, estimator, over(workspace, session, estimator))

    await consolidator.archive_all(workspace, session)

    assert [is_plain_consolidation(r) for r in fake_llm.requests] == [False]
    assert "chatted with the assistant" in history(workspace)
