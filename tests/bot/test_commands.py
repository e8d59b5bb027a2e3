"""Commands as a person types them: /recall's arguments split as a shell would, clear errors for
a bad page, an empty history said as such, /status after /new, /help for each platform."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from adapters.terminal.adapter import HELP_NOTES
from bot.commands.recall import RecallArgsError, RecallQuery, parse_recall_args
from tests.rigs.agent import ask, dm, make_agent, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

ENTRIES = (
    "[2026-01-01 10:00] ENTRY one: tea in Kyoto.",
    "[2026-01-02 10:00] ENTRY two: green tea and a bike trip.",
    "[2026-01-03 10:00] Something else entirely, a what's-on list.",
)


@pytest.fixture
def with_history(fake_llm: FakeOpenAI, workspaces_dir: Path):  # type: ignore[no-untyped-def]
    agent = make_agent(fake_llm, workspaces_dir)
    memory = agent.workspaces.get("telegram-42").memory
    for entry in ENTRIES:
        memory.append_history(entry)
    return agent


@pytest.mark.parametrize(
    ("args", "query"),
    [
        ('--regex "ENTRY.*2"', RecallQuery("ENTRY.*2", regex=True)),
        ("-r 'tea|bike'", RecallQuery("tea|bike", regex=True)),
        (r"--regex \d{4}-01-0[12]", RecallQuery(r"\d{4}-01-0[12]", regex=True)),  # \ as typed
        ('"green tea" kyoto', RecallQuery('"green tea" kyoto')),  # a phrase stays a phrase
        ("“green tea”", RecallQuery('"green tea"')),  # a phone's curly quotes
        ("what's on", RecallQuery("what's on")),  # an apostrophe is a letter
        ("--page 2 tea", RecallQuery("tea", page=2)),
        ("tea --page=3", RecallQuery("tea", page=3)),
        ('"unclosed phrase', RecallQuery('"unclosed phrase')),  # left to the search to read
    ],
)
def test_recall_arguments_are_split_as_a_shell_would(args: str, query: RecallQuery) -> None:
    assert parse_recall_args(args) == query


@pytest.mark.parametrize("page", ["abc", "-1", "0", "2.5", "٣"])
def test_a_bad_page_is_a_clear_error(page: str) -> None:
    with pytest.raises(RecallArgsError, match=f"whole number from 1 up, not “{page}”"):
        parse_recall_args(f"--page {page} tea")
    with pytest.raises(RecallArgsError, match="needs a number"):
        parse_recall_args("tea --page")


async def test_recall_with_quotes_and_a_bad_page_as_the_user_sees_it(with_history) -> None:
    agent = with_history
    regex = await ask(agent, dm("42", "/recall --regex \"ENTRY.*bike\""))
    assert "ENTRY two" in regex.text and "ENTRY one" not in regex.text
    assert "“ENTRY.*bike”" in regex.text  # the pattern searched, without the quotes typed
    bad = await ask(agent, dm("42", "/recall --page abc tea"))
    assert bad.text.startswith("`--page` needs a whole number from 1 up, not “abc”.")
    assert "abc" not in bad.text.split("not “abc”")[1]  # not searched for either
    await agent.aclose()


async def test_recall_without_any_history_says_so(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    reply = await ask(agent, dm("7", "/recall tea"))
    assert reply.text.startswith("There is no history to search yet")
    (user_home(workspaces_dir, "7") / "HISTORY.md").write_text("")
    assert (await ask(agent, dm("7", "/recall tea"))).text.startswith("There is no history")
    await agent.aclose()


async def test_status_right_after_new_counts_the_new_conversation(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = lambda request: completion("ok")
    agent = make_agent(fake_llm, workspaces_dir)
    for text in ("one", "two"):
        await ask(agent, dm("42", text))
    assert "Messages in this conversation: 4 " in (await ask(agent, dm("42", "/status"))).text
    await ask(agent, dm("42", "/new"))
    status = (await ask(agent, dm("42", "/status"))).text
    assert "Messages in this conversation: 0 (0 not yet filed)" in status
    await ask(agent, dm("42", "three"))
    assert "Messages in this conversation: 2 " in (await ask(agent, dm("42", "/status"))).text
    await agent.aclose()
    # After a restart the new conversation is still the one counted.
    again = make_agent(fake_llm, workspaces_dir)
    assert "Messages in this conversation: 2 " in (await ask(again, dm("42", "/status"))).text
    await again.aclose()


async def test_help_lists_the_recall_options_and_quit_only_in_the_terminal(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    on_telegram = (await ask(agent, dm("42", "/help"))).text
    assert "--regex PATTERN" in on_telegram and "--page N" in on_telegram
    assert "/quit" not in on_telegram
    assert "/group — " in on_telegram and "/reminders group" in on_telegram  # groups exist there
    # The terminal adds notes of its own keys to the Inbound; the core only shows them.
    terminal = replace(dm("42", "/help"), platform="cli", help_notes=HELP_NOTES, has_groups=False)
    in_terminal = (await ask(agent, terminal)).text
    assert "/quit" in in_terminal and "Esc then Enter" in in_terminal
    assert "/group — " not in in_terminal and "/reminders group" not in in_terminal
    await agent.aclose()


async def test_an_unknown_command_gets_the_closest_names(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    typo = (await ask(agent, dm("42", "/recal tea"))).text
    assert "don't know the command /recal" in typo and "Did you mean /recall?" in typo
    far = (await ask(agent, dm("42", "/frobnicate"))).text
    assert "Did you mean" not in far and "/recall" in far
    assert not fake_llm.requests  # no command reaches the model
    await agent.aclose()
