"""A server whose tools cannot stream and whose "auto" always calls one (issue 33, item 2).

llama-cpp-python with `--chat_format chatml-function-calling` refuses a streamed request with
tool_choice "auto" (its stream ends without an event), and asked whole its model picks a tool
every time; its template shows the model no tool result. Turns went round in circles for
minutes and ended in "I went round in circles with my tools" or `functions.search_history:
{…}` shown to the person. The bot learns what the server does and asks in the shape that gets
an answer: the real Agent and openai client against the fake server (ForcedToolCalls).
"""

from __future__ import annotations

import logging
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from bot.agent.turn import STUCK_REPLY
from tests.rigs.agent import answer, dm, make_agent, session_records
from tests.rigs.fakes.openai_server import FakeOpenAI, ForcedToolCalls

ANSWER = "Rotterdam, you said."
QUESTIONS = ["Where did I say I live?", "And my sister?", "What about the cat?", "Thanks!"]


def requests_per_turn(fake: FakeOpenAI, before: list[int]) -> list[int]:
    """How many chat requests each turn made, from the counts taken before each."""
    counts = [*before, len(fake.chat_requests)]
    return [after - start for start, after in pairwise(counts)]


async def turns(fake: FakeOpenAI, workspaces: Path, streamed: bool) -> tuple[list[Any], list[int]]:
    """QUESTIONS asked one after the other: each answer (its pieces) and requests per turn."""
    agent = make_agent(fake, workspaces)
    agent.config.agent.stream = streamed
    outs, before = [], []
    for question in QUESTIONS:
        before.append(len(fake.chat_requests))
        outs.append(await answer(agent, dm("42", question)))
    await agent.aclose()
    return outs, requests_per_turn(fake, before)


@pytest.mark.parametrize("refusal", ["reset", "empty", "broken", "error"])
async def test_every_turn_is_answered_in_few_requests_and_no_call_is_shown(
    fake_llm: FakeOpenAI, workspaces_dir: Path, refusal: str
) -> None:
    server = ForcedToolCalls(ANSWER, refusal=refusal)
    fake_llm.default = server
    outs, per_turn = await turns(fake_llm, workspaces_dir, streamed=True)

    assert [out.reply.text for out in outs] == [ANSWER] * len(QUESTIONS)
    for out in outs:
        assert "functions." not in "".join(out.pieces) and STUCK_REPLY not in out.reply.text
    # The refusal is learnt at once: one streamed "auto" request in all, the others whole.
    assert server.refused == 1
    # A turn runs its call, sees it repeated, and answers; two such turns and the server is
    # known to call every time: one tool round, then the answer, two requests a turn.
    assert per_turn[0] <= 4 and per_turn[1] <= 3, per_turn
    assert per_turn[2:] == [2, 2], per_turn
    last = fake_llm.chat_requests[-2:]
    assert last[0]["tool_choice"] == "auto" and last[0].get("stream") is not True
    assert "tools" not in last[1] and last[1].get("stream") is True  # the answer is streamed
    saved = [m for m in session_records(workspaces_dir, "42") if m.get("role") == "assistant"]
    assert not any("functions." in str(m.get("content")) for m in saved)


async def test_asked_whole_too_the_turns_end_in_an_answer(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = ForcedToolCalls(ANSWER)
    outs, per_turn = await turns(fake_llm, workspaces_dir, streamed=False)

    assert [out.reply.text for out in outs] == [ANSWER] * len(QUESTIONS)
    assert per_turn[0] <= 3 and per_turn[2:] == [2, 2], per_turn
    assert not any(r.get("stream") for r in fake_llm.chat_requests)


async def test_the_answer_is_given_the_tool_results_as_text(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Its template shows no tool message: the answer asked without tools carries the turn's
    results with the person's message, where the model sees them, and not its call."""
    fake_llm.default = ForcedToolCalls(ANSWER)
    agent = make_agent(fake_llm, workspaces_dir)
    out = await answer(agent, dm("42", "I live in Rotterdam. Where do I live?"))
    await agent.aclose()

    assert out.reply.text == ANSWER
    final = fake_llm.chat_requests[-1]
    assert "tools" not in final
    assert [m["role"] for m in final["messages"]] == ["system", "user"]
    asked = final["messages"][-1]["content"]
    said, _, results = asked.partition("\n\n(Not written by the person")
    assert said.endswith("I live in Rotterdam. Where do I live?")  # after its time stamp
    assert "search_history (query: Rotterdam) returned:" in results
    # (The history file is new: the search found nothing, and says so.)
    result = next(m for m in session_records(workspaces_dir, "42") if m.get("role") == "tool")
    assert result["content"] in results


async def test_what_was_learnt_is_said_once_in_the_log(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.default = ForcedToolCalls(ANSWER)
    with caplog.at_level(logging.INFO, logger="bot.llm.habits"):
        await turns(fake_llm, workspaces_dir, streamed=True)
    said = [r.getMessage() for r in caplog.records if r.name == "bot.llm.habits"]
    assert len(said) == 2, said
    assert "does not stream an answer when tools are offered" in said[0]
    assert "one tool round, then its answer is asked without tools" in said[1]
    assert fake_llm.base_url in said[0] and "fake-model" in said[0]


async def test_a_server_that_streams_its_tools_and_answers_is_asked_as_before(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """OpenAI's way: a call, its result, then an answer in text, every round streamed with the
    tools; nothing is learnt, however many turns."""

    def good(request: dict[str, Any]) -> Any:
        from tests.rigs.fakes.openai_server import completion, tool_call

        if request["messages"][-1]["role"] == "tool":
            return completion(ANSWER)
        return completion(None, [tool_call("search_history", {"query": "Rotterdam"})])

    fake_llm.default = good
    outs, per_turn = await turns(fake_llm, workspaces_dir, streamed=True)

    assert [out.reply.text for out in outs] == [ANSWER] * len(QUESTIONS)
    assert per_turn == [2] * len(QUESTIONS)
    assert all(r.get("stream") and r.get("tools") for r in fake_llm.chat_requests)


async def test_an_answer_that_is_still_a_call_is_never_shown(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """SmolLM2 answered without tools with a call all the same, its quotes HTML-escaped
    (`functions.search_history:\n{ &#34;query&#34;: …}`), or one of a tool it was never offered
    (`function.get_history:`): text_calls cannot take either as a call. Neither is shown, while
    it is written or after; the turn says it went round in circles, in a bounded time."""
    written = ["functions.search_history:\n{ &#34;query&#34;: &#34;A.B.C&#34; }",
               "function.get_history:\n{&#34;query&#34;: &#34;x&#34;}"]  # fmt: skip
    for number, text in enumerate(written):
        fake_llm.default = ForcedToolCalls(text)
        agent = make_agent(fake_llm, workspaces_dir)
        out = await answer(agent, dm(str(number), "Where do I live?"))
        await agent.aclose()
        assert out.reply.text == STUCK_REPLY
        assert "function" not in "".join(out.pieces) and "&#34;" not in "".join(out.pieces)
    assert len(fake_llm.chat_requests) <= 2 * 4


async def test_a_round_that_writes_a_call_it_cannot_make_is_not_the_answer(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Offered tools, the model wrote a call as text that cannot be run (a tool not offered):
    it was shown as the answer. Asked without tools, the model answers. (Its arguments escaped,
    `{ &#34;query&#34;: …}`, it was such a call too, until quote marks written as entities were
    read as quote marks: bot/llm/entities.py.)"""

    def model(request: dict[str, Any]) -> Any:
        from tests.rigs.fakes.openai_server import completion

        if request.get("tools"):
            return completion('function.get_history:\n{ "query": "x" }')
        return completion(ANSWER)

    fake_llm.default = model
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = False
    reply = await answer(agent, dm("42", "Where do I live?"))
    await agent.aclose()
    assert reply.reply.text == ANSWER
    assert [r.get("tool_choice") for r in fake_llm.chat_requests] == ["auto", "none", None]
