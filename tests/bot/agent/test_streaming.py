"""The core streaming an answer through the reply port: the real Agent and openai client against
the fake OpenAI server's server-sent events. What reaches the port is what a person would see
on a platform that shows each piece as it comes."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from bot.agent.turn import LLM_CUT_REPLY, LLM_FAILED_REPLY
from tests.rigs.agent import answer, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    Status,
    Streamed,
    completion,
    pieces_of,
    tool_call,
)

ANSWER = "Tea is a drink made by steeping leaves in hot water."


async def test_the_answer_reaches_the_port_in_pieces_and_is_saved_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    # Written at a model's pace: pieces that arrive together are handed on together.
    fake_llm.queue(Streamed(pieces_of("\n " + ANSWER + " \n"), every_s=0.01))
    out = await answer(agent, dm("1", "what is tea?"))
    await agent.aclose()
    assert len(out.pieces) > 5 and out.reply.text == ANSWER  # white space at the ends held back
    request = fake_llm.chat_requests[0]
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}
    assert session_records(workspaces_dir, "1")[-1]["content"] == ANSWER


async def test_streamed_usage_is_counted_for_the_person(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Streamed(pieces_of(ANSWER), prompt_tokens=321, completion_tokens=12))
    await answer(agent, dm("1", "what is tea?"))
    await agent.aclose()
    today = agent.usage.of("telegram-1").day(date.today())
    assert (today.prompt_tokens, today.completion_tokens) == (321, 12)
    assert (user_home(workspaces_dir, "1") / "usage.jsonl").exists()


async def test_a_server_without_stream_options_is_asked_without_them(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.refuse_stream_options = True
    agent = make_agent(fake_llm, workspaces_dir)
    first = await answer(agent, dm("1", "one"))
    second = await answer(agent, dm("1", "two"))
    await agent.aclose()
    assert first.reply.text == second.reply.text == "ok"
    sent = [("stream_options" in r) for r in fake_llm.chat_requests]
    assert sent == [True, False, False], "refused once, then never sent again"


async def test_a_stream_cut_mid_answer_keeps_the_message_and_nothing_half_written(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Streamed(pieces_of("One two three four five"), cut_after=3))
    out = await answer(agent, dm("1", "count"))
    await agent.aclose()
    assert out.reply.text == "One two three\n\n" + LLM_CUT_REPLY
    records = [r for r in session_records(workspaces_dir, "1") if "role" in r]
    assert [r["role"] for r in records] == ["user"]  # the message, not the broken answer
    assert records[0]["content"].endswith("count")


async def test_an_error_event_mid_stream_is_an_outage_not_an_answer(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Streamed(["Half ", {"error": {"message": "overloaded"}}]))
    out = await answer(agent, dm("1", "hi"))
    await agent.aclose()
    assert out.reply.text.endswith(LLM_CUT_REPLY)


async def test_a_refusal_before_the_stream_is_told_plainly(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Status(503, {"error": {"message": "busy"}}))
    out = await answer(agent, dm("1", "hi"))
    await agent.aclose()
    assert out.pieces == [LLM_FAILED_REPLY]


async def test_tool_calls_assembled_from_pieces_run_and_the_answer_follows(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    note = tool_call("edit_memory", {"old_text": "", "new_text": "Likes tea."}, "call_7")
    fake_llm.queue(
        Streamed([], [note]),  # no text before the call: nothing shown for that round
        Streamed(pieces_of("Noted: you like tea.")),
    )
    out = await answer(agent, dm("1", "I like tea"))
    await agent.aclose()
    assert out.reply.text == "Noted: you like tea."
    tool = fake_llm.chat_requests[1]["messages"][-1]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_7"
    calls = fake_llm.chat_requests[1]["messages"][-2]["tool_calls"]
    assert calls[0]["function"]["arguments"] == note["function"]["arguments"]


async def test_with_stream_false_the_model_is_asked_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = False
    fake_llm.queue(completion(ANSWER))
    out = await answer(agent, dm("1", "what is tea?"))
    await agent.aclose()
    assert out.pieces == [ANSWER] and "stream" not in fake_llm.chat_requests[0]


def sse(*events: str, end: str = "\n") -> str:
    """A raw event-stream body: each event's lines, a blank line after each."""
    return "".join(event.replace("\n", end) + end + end for event in events)


def delta_event(delta: dict[str, object], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


async def test_an_event_stream_in_crlf_with_comments_and_split_data_is_read_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """What servers other than OpenAI send: CRLF line ends, keep-alive comments, event and id
    fields, one event's JSON over two data lines."""
    usage = {"prompt_tokens": 77, "completion_tokens": 3, "total_tokens": 80}
    body = sse(
        ": keep-alive",
        "event: message\nid: 1\n" + delta_event({"role": "assistant", "content": "Tea "}),
        'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "is good."}}]}',
        ": still here",
        delta_event({}, "stop"),
        "data: " + json.dumps({"choices": [], "usage": usage}),
        "data: [DONE]",
        end="\r\n",
    )
    fake_llm.queue(Status(200, body, content_type="text/event-stream"))
    agent = make_agent(fake_llm, workspaces_dir)
    out = await answer(agent, dm("1", "tea?"))
    await agent.aclose()
    assert "".join(out.pieces) == out.reply.text == "Tea is good."
    today = agent.usage.of("telegram-1").day(date.today())
    assert (today.prompt_tokens, today.completion_tokens) == (77, 3)


async def test_streamed_tool_calls_without_an_index_are_told_apart_by_their_ids(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    def call(call_id: str | None, name: str | None, arguments: str) -> str:
        piece: dict[str, object] = {"type": "function", "function": {"arguments": arguments}}
        if call_id:
            piece["id"] = call_id
            piece["function"] = {"name": name, "arguments": arguments}
        return delta_event({"tool_calls": [piece]})

    tea = json.dumps({"action": "add", "section": "Preferences", "text": "Likes tea."})
    rain = json.dumps({"action": "add", "section": "Preferences", "text": "Likes rain."})
    body = sse(
        call("call_a", "edit_memory", tea[:10]),
        call(None, None, tea[10:]),
        call("call_b", "edit_memory", ""),
        call("call_b", None, rain),  # a server that repeats the id in every piece
        delta_event({}, "tool_calls"),
        "data: [DONE]",
    )
    fake_llm.queue(
        Status(200, body, content_type="text/event-stream"), Streamed(pieces_of("Noted both."))
    )
    agent = make_agent(fake_llm, workspaces_dir)
    out = await answer(agent, dm("1", "I like tea and rain"))
    await agent.aclose()
    assert out.reply.text == "Noted both."
    results = [m for m in fake_llm.chat_requests[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == ["call_a", "call_b"]
    memory = (user_home(workspaces_dir, "1") / "MEMORY.md").read_text("utf-8")
    assert "Likes tea." in memory and "Likes rain." in memory


async def test_an_error_event_reaches_the_log_with_the_providers_reason(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = sse(delta_event({"content": "Half"}), 'data: {"error": {"message": "overloaded"}}')
    fake_llm.queue(Status(200, body, content_type="text/event-stream"))
    agent = make_agent(fake_llm, workspaces_dir)
    out = await answer(agent, dm("1", "hi"))
    await agent.aclose()
    assert out.reply.text == "Half\n\n" + LLM_CUT_REPLY
    assert "broke off its answer: overloaded" in caplog.text


async def test_chunks_of_the_wrong_shape_are_not_a_completion(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = [
        'data: {"choices": {"index": 0}}',
        'data: {"choices": [{"index": 0, "delta": "text"}]}',
        'data: {"choices": [{"index": 0, "delta": {"tool_calls": [7]}}]}',
        "data: [1, 2]",
        "data: not json",
    ]
    agent = make_agent(fake_llm, workspaces_dir)
    replies = []
    for event in broken:
        fake_llm.queue(Status(200, sse(event, "data: [DONE]"), content_type="text/event-stream"))
        replies.append((await answer(agent, dm("1", "hi"))).reply.text)
    await agent.aclose()
    assert replies == [LLM_FAILED_REPLY] * len(broken)
    assert caplog.text.count("not a completion") == len(broken)
