"""The tools as records (bot/tools/): the schemas the model is sent, the system prompt's guide
to them, the fixed part sizing counts and the dispatch of a call all come from the one list, so
a tool switched off in [tools] is gone from all four; what the prompt promises the tools reach
is made of what each may touch; the fixed part's size in each prompt form, which
docs/local-models.md quotes, is computed here (FIXED_TOKENS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.agent.agent import Agent
from bot.agent.prompt import ContextBuilder
from bot.agent.sizing import fixed_tokens
from bot.config import Config, ToolsConfig, load_config
from bot.reminders.desk import PersonReminders, ReminderBook
from bot.tools.tool import FORMS, Offer, PromptForm, Reach, Tool, ToolTurn, string_schema
from bot.tools.toolbox import TOOLS, Toolbox, enabled_tools, tools_text
from memory.tokens import TokenEstimator
from memory.workspace import Workspaces
from tests.rigs.agent import ask, dm, user_home
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    completion,
    is_consolidation,
    save_memory_call,
    tool_call,
)

# The fixed part of every prompt (system prompt with an empty MEMORY.md, and the tool schemas)
# in each form, with the default config, as sizing counts it before any server has corrected
# the estimate: what docs/local-models.md quotes for "full", "compact" and "none".
FIXED_TOKENS = {"full": 740, "compact": 244, "none": 102}
MEMORY = "## Long-term memory\n(empty)"


def test_the_fixed_part_of_each_prompt_form_is_the_figure_the_docs_quote() -> None:
    config = Config()
    figures = {form: fixed_tokens(config, form, TokenEstimator()) for form in FORMS}
    assert figures == FIXED_TOKENS


def agent_with(folder: Path, fake: FakeOpenAI, tools: str = "") -> Agent:
    """An Agent built from a config file as a person writes it; `tools`: its [tools] lines."""
    path = folder / "config.toml"
    folder.mkdir()
    path.write_text(
        f'[llm]\nbase_url = "{fake.base_url}"\napi_key = "sk-test"\nmodel = "fake-model"\n'
        "max_retries = 0\ncontext_window_tokens = 50000\nmax_output_tokens = 2048\n"
        f"[memory]\nworkspaces_dir = {json.dumps(str(folder / 'workspaces'))}\n"
        f"[tools]\n{tools}"
    )
    return Agent(load_config(path, env={}))


def sent_tools(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_tool_switched_off_is_neither_sent_nor_described_nor_counted(
    fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    on = agent_with(tmp_path / "on", fake_llm)
    off = agent_with(tmp_path / "off", fake_llm, "remind = false\n")
    fake_llm.queue(completion("Hello."))
    await ask(on, dm("42", "hello"))
    # The model calls it all the same (a weak model copies a call from the conversation).
    set_it = {"action": "set", "when": "in 10 minutes", "what": "tea"}
    fake_llm.queue(completion(None, [tool_call("remind", set_it)]), completion("Hello."))
    await ask(off, dm("42", "remind me of tea in 10 minutes"))
    await on.aclose()
    await off.aclose()
    with_remind, without, answered = [r for r in fake_llm.requests if not is_consolidation(r)]

    assert sent_tools(with_remind) == ["edit_memory", "search_history", "remind"]
    assert sent_tools(without) == sent_tools(answered) == ["edit_memory", "search_history"]
    assert "`remind`" in with_remind["messages"][0]["content"]
    assert "remind" not in without["messages"][0]["content"]  # nor "reminders" in the promise
    # Not counted: the fixed part is smaller by about the tool's schema and guide.
    remind = next(t for t in TOOLS if t.name == "remind")
    assert remind.full is not None
    schema = TokenEstimator().count_text(json.dumps(remind.full.schema))
    assert on.window.sizing.fixed - off.window.sizing.fixed >= schema
    # Not run: the call is answered with the tools there are, and nothing was set.
    assert tool_results(answered) == [
        "Error: there is no tool named 'remind'. Use edit_memory or search_history."
    ]
    assert not (user_home(tmp_path / "off" / "workspaces", "42") / "reminders.jsonl").exists()


async def test_a_call_of_a_tool_there_is_not_is_told_every_tool_there_is(
    fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Before, the error named edit_memory and search_history only: the model never learnt of
    remind from it."""
    agent = agent_with(tmp_path / "bot", fake_llm)
    fake_llm.queue(
        completion(None, [tool_call("web_search", {"query": "weather"})]), completion("Sunny.")
    )
    await ask(agent, dm("42", "what is the weather?"))
    await agent.aclose()
    answered = [r for r in fake_llm.requests if not is_consolidation(r)][-1]
    assert tool_results(answered) == [
        "Error: there is no tool named 'web_search'. Use edit_memory, search_history or remind."
    ]


async def test_a_public_turn_is_told_only_the_tools_it_has(tmp_path: Path) -> None:
    """A group turn whose answer is public, in the compact form: only edit_memory is offered
    (before, the error named remind too, which that form does not offer)."""
    workspaces = Workspaces(tmp_path / "ws")
    workspace = workspaces.get("telegram-42")
    book = ReminderBook(Config(), workspaces, lambda key: False)
    desk = PersonReminders(book, workspace, dm("42", "hi"))
    results = {}
    form: PromptForm
    for form in ("full", "compact"):
        turn = ToolTurn(workspace, desk, Config(), public=True, form=form)
        results[form] = await Toolbox(TOOLS, turn).execute("search_history", {"query": "door"})
    assert results == {
        "full": "Error: in a group chat the only tools are edit_memory and remind.",
        "compact": "Error: in a group chat the only tools are edit_memory.",
    }


async def _nothing(turn: ToolTurn, args: dict[str, Any]) -> str:
    return "nothing found"


# A tool that reaches beyond the person: what a web search would be.
WEB = Tool(
    name="web_search",
    reaches=(Reach("the web", own=False),),
    enabled=lambda config: True,
    run=_nothing,
    full=Offer(
        string_schema("web_search", "Search the web.", "query"),
        "- For news and facts you do not know, call `web_search`.",
    ),
)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_prompt_promises_no_more_than_the_tools_reach() -> None:
    def prompt(tools: tuple[Tool, ...]) -> str:
        return flat(ContextBuilder(tools=tools).system_prompt(MEMORY, "telegram", True))

    default = enabled_tools(Config())  # (web_search and read_page are off by default)
    no_remind = enabled_tools(Config(tools=ToolsConfig(remind=False)))
    assert "These tools only ever reach this person's own memory and reminders." in prompt(default)
    assert "These tools only ever reach this person's own memory." in prompt(no_remind)
    with_web = prompt((*default, WEB))
    assert "only ever reach this person's own memory and reminders, and the web." in with_web
    assert "call `web_search`" in with_web
    # Sent and counted with the others.
    assert '"name": "web_search"' in tools_text((*default, WEB), "full")
    # The real web tools, switched on, are promised the same way.
    assert "reminders, and the web." in prompt(TOOLS)
    assert "Never claim to know anything about other people" in prompt(())
    assert "only ever reach" not in prompt(())


async def test_consolidation_is_not_given_the_history_a_search_quoted(
    fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A real model that called search_history every turn filled HISTORY.md with archives
    quoting archives: each search's hits were filed again with the turn. Consolidation is told
    only how much the search quoted; the model of the turn still read it all."""
    agent = agent_with(tmp_path / "bot", fake_llm)
    entry = "Tomasz moved to the Kralingen district of Rotterdam."
    agent.workspaces.get("telegram-42").memory.append_history(entry)
    search = tool_call("search_history", {"query": "Rotterdam"})
    fake_llm.queue(completion(None, [search]), completion("You moved to Kralingen."))
    await ask(agent, dm("42", "where did I move to?"))
    fake_llm.queue(save_memory_call("[2026-01-01 10:00] Asked where they moved.", "# Memory\n"))
    await ask(agent, dm("42", "/new"))
    await fake_llm.wait_requests(3)
    await agent.aclose()
    answering = [r for r in fake_llm.requests if not is_consolidation(r)][-1]
    assert any("Kralingen district" in text for text in tool_results(answering))
    filing = [json.dumps(r["messages"]) for r in fake_llm.requests if is_consolidation(r)]
    assert filing and not any("Kralingen district" in text for text in filing)
    assert "search_history quoted" in filing[0] and "You moved to Kralingen." in filing[0]
    history = (user_home(tmp_path / "bot" / "workspaces", "42") / "HISTORY.md").read_text()
    assert history.count("Kralingen district") == 1  # nor filed again by a raw archive
