"""Tool calls a local model writes as text (its server parsed none): run as calls, never shown.

With its own chat template Qwen2.5 answered `{"name": "edit_memory", "arguments": {…}}` as
plain text, and SmolLM2 `functions.NAME: {…}`: the bot sent the JSON to the person and never
made the edit (issue 33). The real Agent and openai client against the fake provider, whole
and streamed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.rigs.agent import answer, dm, group, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed, completion, pieces_of

ADD = {"action": "add", "section": "Preferences", "text": "Likes green tea"}
FIND = {"query": "Lisbon"}


def hermes(name: str, arguments: dict[str, str]) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def tagged(name: str, arguments: dict[str, str]) -> str:
    return f"<tool_call>\n{hermes(name, arguments)}\n</tool_call>"


def marked(name: str, arguments: dict[str, str]) -> str:
    return f"functions.{name}: {json.dumps(arguments)}"


SHAPES = {"json": hermes, "tags": tagged, "functions": marked}


def written(text: str, streamed: bool) -> object:
    """The model's answer as the fake sends it: in word-sized pieces when streamed."""
    return Streamed(pieces_of(text), every_s=0.002) if streamed else completion(text)


@pytest.fixture(params=[False, True], ids=["whole", "streamed"])
def streamed(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.mark.parametrize("shape", SHAPES)
async def test_an_edit_written_as_text_is_made_and_never_shown(
    fake_llm: FakeOpenAI, workspaces_dir: Path, shape: str, streamed: bool
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    call = SHAPES[shape]("edit_memory", ADD)
    fake_llm.queue(written(call, streamed), written("Noted: green tea.", streamed))
    out = await answer(agent, dm("42", "I love green tea"))
    await agent.aclose()

    assert out.reply.text == "Noted: green tea."
    assert "".join(out.pieces) == "Noted: green tea."  # nothing of the call shown, ever
    memory = (user_home(workspaces_dir, "42") / "MEMORY.md").read_text("utf-8")
    assert "## Preferences" in memory and "Likes green tea" in memory
    records = [m for m in session_records(workspaces_dir, "42") if "role" in m]
    assert [m["role"] for m in records] == ["user", "assistant", "tool", "assistant"]
    assert "edit_memory" not in json.dumps([m.get("content") for m in records])
    # The model is told of its call as a call, and of the tool's result.
    follow_up = fake_llm.chat_requests[1]["messages"]
    made = next(m for m in follow_up if m.get("tool_calls"))["tool_calls"][0]
    assert made["function"]["name"] == "edit_memory"
    assert json.loads(made["function"]["arguments"]) == ADD
    result = next(m for m in follow_up if m["role"] == "tool")
    assert result["tool_call_id"] == made["id"] and "Error" not in result["content"]


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_search_written_as_text_is_run(
    fake_llm: FakeOpenAI, workspaces_dir: Path, shape: str, streamed: bool
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    agent.workspaces.get("telegram-1").memory.append_history("Ada's ferry to Lisbon is at nine.")
    call = f"```json\n{SHAPES[shape]('search_history', FIND)}\n```"
    fake_llm.queue(written(call, streamed), written("At nine.", streamed))
    out = await answer(agent, dm("1", "when is my ferry?"))
    await agent.aclose()

    assert out.reply.text == "At nine." and "".join(out.pieces) == "At nine."
    result = next(m for m in fake_llm.chat_requests[1]["messages"] if m["role"] == "tool")
    assert "ferry to Lisbon is at nine" in result["content"]


async def test_several_calls_written_as_text_are_all_made(
    fake_llm: FakeOpenAI, workspaces_dir: Path, streamed: bool
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    agent.workspaces.get("telegram-1").memory.append_history("Ada's ferry to Lisbon is at nine.")
    calls = f"{tagged('edit_memory', ADD)}\n{tagged('search_history', FIND)}"
    fake_llm.queue(written(calls, streamed), written("Noted, and: at nine.", streamed))
    out = await answer(agent, dm("1", "I love green tea. When is my ferry?"))
    await agent.aclose()

    assert "".join(out.pieces) == out.reply.text == "Noted, and: at nine."
    memory = (user_home(workspaces_dir, "1") / "MEMORY.md").read_text("utf-8")
    assert "Likes green tea" in memory
    results = [m for m in fake_llm.chat_requests[1]["messages"] if m["role"] == "tool"]
    assert len(results) == 2 and "ferry to Lisbon" in results[1]["content"]


async def test_prose_that_holds_a_call_is_an_answer_shown_as_written(
    fake_llm: FakeOpenAI, workspaces_dir: Path, streamed: bool
) -> None:
    """A person asked what such a call looks like: the answer quotes one, and is shown whole;
    nothing is run."""
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    text = f"It would look like this:\n{hermes('edit_memory', ADD)}"
    json_only = json.dumps({"name": "Ada", "arguments": {"city": "Lisbon"}})
    fake_llm.queue(written(text, streamed), written(json_only, streamed))
    first = await answer(agent, dm("42", "show me a tool call"))
    second = await answer(agent, dm("42", "give me a JSON with name and arguments"))
    await agent.aclose()

    assert first.reply.text == text and "".join(first.pieces) == text
    assert second.reply.text == json_only and "".join(second.pieces) == json_only
    assert len(fake_llm.chat_requests) == 2  # no tool round
    memory = user_home(workspaces_dir, "42") / "MEMORY.md"
    assert not memory.exists() or "green tea" not in memory.read_text("utf-8")


async def test_a_call_written_as_text_of_a_tool_the_turn_does_not_offer_is_refused(
    fake_llm: FakeOpenAI, workspaces_dir: Path, streamed: bool
) -> None:
    """In a group, where search_history is not offered (everyone would read what it finds),
    a search written as text is not run: the model is told so, the person gets its answer."""
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    agent.workspaces.get("telegram-1").memory.append_history("Ada's ferry to Lisbon is at nine.")
    fake_llm.queue(
        written(tagged("search_history", FIND), streamed),
        written("I can't look that up here.", streamed),
    )
    out = await answer(agent, group("-100", "1", "when is my ferry?"))
    await agent.aclose()

    assert "".join(out.pieces) == out.reply.text == "I can't look that up here."
    result = next(m for m in fake_llm.chat_requests[1]["messages"] if m["role"] == "tool")
    assert result["content"].startswith("Error:") and "Lisbon" not in result["content"]


async def test_a_streamed_call_marker_alone_is_never_shown(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """llama-cpp-python's "functions.<name>:" with nothing after it is asked again without
    tools (tests/bot/llm/test_llama_cpp_python.py); streamed, it must not have been shown."""
    fake_llm.default = lambda req: (
        Streamed(pieces_of("functions.search_history:"))
        if req.get("tool_choice") == "auto"
        else Streamed(pieces_of("Hello Ada!"))
    )
    agent = make_agent(fake_llm, workspaces_dir)
    out = await answer(agent, dm("42", "Hi, I'm Ada."))
    await agent.aclose()
    assert [r["tool_choice"] for r in fake_llm.chat_requests] == ["auto", "none"]
    assert "".join(out.pieces) == out.reply.text == "Hello Ada!"


# What Qwen2.5-Coder-0.5B wrote with its own template on llama-cpp-python (the real-model run
# of issue 33): call objects line after line, one broken by a stray backtick, so the text as a
# whole is no sequence of calls; it reached the person as it was.
BROKEN_CALLS = "\n".join(
    [
        hermes("search_history", {"query": "Tomasz"}),
        '{"name": "remind", "arguments": {"action": "set", "when": "tomorrow at 9"}`}',
        hermes("edit_memory", ADD),
    ]
    * 3
)


async def test_call_objects_with_a_broken_one_are_never_shown(
    fake_llm: FakeOpenAI, workspaces_dir: Path, streamed: bool
) -> None:
    """Text opening with an object that names an offered tool is a call, not an answer,
    whatever follows: asked again without tools, the person gets words."""
    fake_llm.default = lambda req: written(
        BROKEN_CALLS if req.get("tools") else "Hello Tomasz!", streamed
    )
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = streamed
    out = await answer(agent, dm("42", "Hello there! My name is Tomasz."))
    await agent.aclose()

    assert "".join(out.pieces) == out.reply.text == "Hello Tomasz!"
    offered = [bool(r.get("tools")) for r in fake_llm.chat_requests]
    assert len(offered) <= 3 and offered[0] and not offered[-1]  # bounded, then without tools
    memory = user_home(workspaces_dir, "42") / "MEMORY.md"
    assert not memory.exists() or "green tea" not in memory.read_text("utf-8")
