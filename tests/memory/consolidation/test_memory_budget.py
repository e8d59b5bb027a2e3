"""MEMORY.md's budget and the 25 % guard, end to end: a real Agent and its real openai client
against the fake provider; a conversation filed by /new is the consolidation under test."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bot.agent.agent import Agent
from memory.consolidation.checks import check_memory_update, held_because, kept_fact_lines
from memory.workspace import Workspaces
from tests.rigs.agent import ask, dm, group, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_condense,
    is_consolidation,
    save_memory_call,
)

FACTS = {
    "User Information": ["Name: Ada", "Lives in Lyon", "Has a cat named Miso", "Is a carpenter"],
    "Preferences": ["Prefers short answers", "Drinks green tea"],
    "Project Context": ["Building a wooden boat"],
    "Important Notes": ["Allergic to peanuts"],
}
ENTRY = "[2026-11-30 09:00] Ada talked about her boat and her cat Miso."


def memory_text(facts: dict[str, list[str]]) -> str:
    return "\n".join(
        f"## {section}\n" + "".join(f"- {fact}\n" for fact in items)
        for section, items in facts.items()
    )


def without(*dropped: str, adding: tuple[str, str] | None = None) -> str:
    facts = {s: [f for f in items if f not in dropped] for s, items in FACTS.items()}
    if adding:
        facts[adding[0]] = [*facts[adding[0]], adding[1]]
    return memory_text(facts)


MEMORY = memory_text(FACTS)
# Drops 3 of the 8 facts: passes memory.consolidation.checks (keeps more than half), but is held.
DROPS_THREE = without("Lives in Lyon", "Is a carpenter", "Drinks green tea")
# A correction: one fact changed, one added.
CORRECTED = without("Lives in Lyon", adding=("User Information", "Lives in Paris")).replace(
    "- Name: Ada\n", "- Name: Ada\n- Lives in Paris since May\n"
)


def answers(save: str, condensed: str | None = None) -> Callable[[dict[str, Any]], Any]:
    """The provider: save_memory with `save`, the condense request answered with `condensed`,
    every other request a short chat answer."""

    def answer(request: dict[str, Any]) -> Any:
        if is_consolidation(request):
            return save_memory_call(ENTRY, save)
        if is_condense(request):
            assert condensed is not None, "asked to condense an update within its budget"
            return completion(condensed)
        return completion("Noted.")

    return answer


def seed(workspaces: Path, memory: str) -> None:
    Workspaces(workspaces).get("telegram-42").memory.write(memory)


async def file_a_conversation(agent: Agent) -> str:
    """One exchange, /new (its consolidation runs in the background), then the next message,
    which waits for the filing: its answer is what the person sees next."""
    await ask(agent, dm("42", "I am building a boat"))
    assert "fresh" in (await ask(agent, dm("42", "/new"))).text.lower()
    return (await ask(agent, dm("42", "I'm back"))).text


def versions_of(workspaces: Path) -> list[Path]:
    return sorted((user_home(workspaces, "42") / ".memory_versions").iterdir())


# ---- the thresholds, in their order ----------------------------------------------------------


def test_refused_held_and_written_thresholds_follow_each_other() -> None:
    drops_five = without("Lives in Lyon", "Is a carpenter", "Drinks green tea", "Name: Ada",
                         "Has a cat named Miso")  # fmt: skip
    drops_two = without("Lives in Lyon", "Is a carpenter")
    problem, _ = check_memory_update(MEMORY, drops_five, [])
    assert problem == "it keeps only 3 of the 8 existing lines"  # a failed attempt
    assert check_memory_update(MEMORY, DROPS_THREE, [])[0] is None
    assert held_because(MEMORY, DROPS_THREE) == "it would drop 3 of the 8 facts"
    assert held_because(MEMORY, drops_two) is None  # exactly a quarter: written
    assert held_because(MEMORY, CORRECTED) is None


# ---- the budget -------------------------------------------------------------------------------


async def test_the_consolidation_request_states_the_budget_and_the_current_size(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    seed(workspaces_dir, MEMORY)
    agent = make_agent(fake_llm, workspaces_dir, window=40_000)  # budget: a tenth, capped: 1,500
    fake_llm.default = answers(MEMORY)
    await file_a_conversation(agent)
    size = agent.consolidator.memory_tokens(MEMORY)
    await agent.aclose()

    (request,) = fake_llm.consolidation_requests
    sent = request["messages"][1]["content"]
    assert f"MEMORY.md may take about 1,500 tokens; it takes about {size:,} now" in sent
    assert 20 < size < 200
    assert fake_llm.condense_requests == []


async def test_status_shows_memory_used_of_its_budget(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    seed(workspaces_dir, MEMORY)
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_memory_tokens": 3000})
    status = (await ask(agent, dm("42", "/status"))).text
    size = agent.consolidator.memory_tokens(MEMORY)
    await agent.aclose()

    assert f"Memory: ~{size:,} of 3,000 tokens ({size * 100 // 3000}%)" in status
    assert "over its budget" not in status


async def test_an_update_over_budget_is_condensed_by_one_request(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    seed(workspaces_dir, MEMORY)
    story = "- The boat: " + ", ".join(["a long story about planks and varnish"] * 12) + "\n"
    update = MEMORY + story
    condensed = MEMORY + "- The boat: planks, varnish, rain\n"
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_memory_tokens": 120})
    assert agent.consolidator.memory_tokens(update) > 120 > agent.consolidator.memory_tokens(
        condensed
    )
    fake_llm.default = answers(update, condensed)
    after = await file_a_conversation(agent)
    await agent.aclose()

    (request,) = fake_llm.condense_requests
    sent = request["messages"][1]["content"]
    assert "its budget is 120" in sent and "a long story about planks" in sent
    assert (user_home(workspaces_dir, "42") / "MEMORY.md").read_text() == condensed
    assert "budget" not in after


async def test_still_over_budget_after_condensing_is_kept_and_the_person_is_told(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog
) -> None:
    seed(workspaces_dir, MEMORY)
    story = "- The boat: " + ", ".join(["a long story about planks and varnish"] * 12) + "\n"
    shorter = MEMORY + "- The boat: " + ("planks and varnish and rain, " * 12).rstrip() + "\n"
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_memory_tokens": 60})
    fake_llm.default = answers(MEMORY + story, shorter)
    with caplog.at_level(logging.WARNING, logger="memory.consolidation.consolidator"):
        after = await file_a_conversation(agent)
    later = (await ask(agent, dm("42", "and another thing"))).text
    status = (await ask(agent, dm("42", "/status"))).text
    used = agent.consolidator.memory_tokens(shorter)
    await agent.aclose()

    assert len(fake_llm.condense_requests) == 1  # one request to condense, never a second
    assert (user_home(workspaces_dir, "42") / "MEMORY.md").read_text() == shorter  # kept
    assert f"Your memory is over its budget: about {used:,} of 60 tokens" in after
    assert "budget" not in later  # told once
    assert f"Memory: ~{used:,} of 60 tokens" in status and "over its budget" in status
    assert "kept over its budget" in caplog.text


async def test_a_condensed_text_that_drops_sections_is_not_used(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    seed(workspaces_dir, MEMORY)
    update = MEMORY + "- The boat: " + ("planks and varnish and rain, " * 12).rstrip() + "\n"
    agent = make_agent(fake_llm, workspaces_dir, memory={"max_memory_tokens": 60})
    fake_llm.default = answers(update, "Ada, boat.")
    after = await file_a_conversation(agent)
    await agent.aclose()

    assert (user_home(workspaces_dir, "42") / "MEMORY.md").read_text() == update
    assert "over its budget" in after


# ---- the 25 % guard ---------------------------------------------------------------------------


async def test_an_update_dropping_over_a_quarter_of_the_facts_is_held(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog
) -> None:
    seed(workspaces_dir, MEMORY)
    memory_file = user_home(workspaces_dir, "42") / "MEMORY.md"
    before = memory_file.read_bytes()
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.default = answers(DROPS_THREE)
    with caplog.at_level(logging.WARNING, logger="memory.consolidation.consolidator"):
        after = await file_a_conversation(agent)
    later = (await ask(agent, dm("42", "and another thing"))).text
    status = (await ask(agent, dm("42", "/status"))).text
    history = (await ask(agent, dm("42", "/memory history"))).text

    assert memory_file.read_bytes() == before  # the old MEMORY.md stays, byte for byte
    newest = versions_of(workspaces_dir)[-1]
    assert newest.name.endswith(".held.md") and newest.read_text() == DROPS_THREE
    # The conversation is filed: the entry written, the cursor moved, nothing retried.
    assert ENTRY in (user_home(workspaces_dir, "42") / "HISTORY.md").read_text()
    metadata = [r for r in session_records(workspaces_dir, "42") if r.get("_type") == "metadata"]
    assert metadata[-1]["last_consolidated"] == 2
    assert len(fake_llm.consolidation_requests) == 1
    assert "would have dropped 3 of your 8 facts" in after and "dropped" not in later
    assert "A memory update is held" in status and "drop 3 of your 8 facts" in status
    assert "1. held" in history and "never applied" in history
    assert "held: it would drop 3 of the 8 facts" in caplog.text

    # /memory undo 1 applies it; the memory it replaced is kept in turn.
    undone = (await ask(agent, dm("42", "/memory undo 1"))).text
    status = (await ask(agent, dm("42", "/status"))).text
    await agent.aclose()
    assert "Brought back version 1" in undone
    assert memory_file.read_text() == DROPS_THREE
    assert versions_of(workspaces_dir)[-1].read_bytes() == before
    assert "held" not in status


NEGATED = (  # every fact still there, word for word, under one "it is false"
    "## User Information\n- FALSE, forget: "
    + "; ".join(fact for items in FACTS.values() for fact in items)
    + "\n## Preferences\n## Project Context\n## Important Notes\n"
)
IN_A_COMMENT = (  # the name changed, every other fact only inside a comment nobody sees
    "## User Information\n- Name: Mallory\n<!--\n"
    + MEMORY.replace("- Name: Ada\n", "")
    + "-->\n## Preferences\n## Project Context\n## Important Notes\n"
)
STRUCK = MEMORY.replace("- Lives in Lyon", "- ~~Lives in Lyon~~").replace(
    "- Is a carpenter", "- Is a carpenter (no longer true)"
)


async def test_an_update_that_negates_or_hides_the_facts_is_not_written(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog
) -> None:
    """Issue 22, 11: the guard looked for each fact as a substring of the whole update, so an
    update saying every fact is false, or keeping them only inside an HTML comment, passed
    as keeping them all, and was written."""
    seed(workspaces_dir, MEMORY)
    memory_file = user_home(workspaces_dir, "42") / "MEMORY.md"
    agent = make_agent(fake_llm, workspaces_dir)
    with caplog.at_level(logging.WARNING, logger="memory.consolidation.consolidator"):
        for update in (NEGATED, IN_A_COMMENT):
            fake_llm.default = answers(update)
            await file_a_conversation(agent)
            assert memory_file.read_text() == MEMORY
        fake_llm.default = answers(STRUCK)  # two facts struck out: refused as well
        await file_a_conversation(agent)
    await agent.aclose()

    assert memory_file.read_text() == MEMORY
    assert not (user_home(workspaces_dir, "42") / ".memory_versions").exists()  # nor held
    assert "not written: it marks 8 existing facts as no longer true" in caplog.text
    assert "not written: it keeps only 0 of the 8 existing lines" in caplog.text
    assert "not written: it marks 2 existing facts as no longer true" in caplog.text


def test_a_fact_kept_with_more_words_is_kept_and_one_word_inside_another_is_not() -> None:
    longer = MEMORY.replace("- Lives in Lyon", "- Lives in Lyon, near the river")
    assert check_memory_update(MEMORY, longer, [])[0] is None
    assert held_because(MEMORY, longer) is None
    # "Name: Ada" is not kept by "Name: Adam", nor "Is a carpenter" by "Is a carpenters' aide".
    renamed = MEMORY.replace("Name: Ada", "Name: Adam").replace(
        "Is a carpenter", "Is a carpenters' aide"
    )
    assert kept_fact_lines(MEMORY, renamed) == (6, 8)


async def test_a_small_change_is_written(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    seed(workspaces_dir, MEMORY)
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.default = answers(CORRECTED)
    after = await file_a_conversation(agent)
    status = (await ask(agent, dm("42", "/status"))).text
    await agent.aclose()

    assert (user_home(workspaces_dir, "42") / "MEMORY.md").read_text() == CORRECTED
    assert not any(p.name.endswith(".held.md") for p in versions_of(workspaces_dir))
    assert "held" not in after and "held" not in status


async def test_the_notice_waits_for_a_private_chat(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    seed(workspaces_dir, MEMORY)
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.default = answers(DROPS_THREE)
    await ask(agent, group("-100", "42", "I am building a boat"))
    await ask(agent, group("-100", "42", "/new"))
    in_group = (await ask(agent, group("-100", "42", "I'm back")))  # waits for the filing
    status = (await ask(agent, group("-100", "42", "/status"))).text
    private = (await ask(agent, dm("42", "hello"))).text
    await agent.aclose()

    assert versions_of(workspaces_dir)[-1].name.endswith(".held.md")
    assert in_group.text == "Noted." and not in_group.private
    assert "Memory: shown by /status in a private chat" in status and "held" not in status
    assert "would have dropped 3 of your 8 facts" in private
