"""What a real llama-cpp-python server (0.3.x, SmolLM2-135M) answered, pinned in the fake.

About one turn in 25 failed with "not a completion": the prompt had grown past the server's
window, and a *streamed* request over its window gets HTTP 200 and an event stream that ends
without a single event (the stream has begun before the server reads the prompt). It grew
past the window because that server reports no usage in streams, so the estimate never
learned that its tokenizer counts more than cl100k, and consolidation never started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.rigs.agent import ask, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import (
    BrokenStream,
    ContextLimited,
    FakeOpenAI,
    Status,
    completion,
    is_consolidation,
    save_memory_call,
)
from tests.rigs.window import MIRO, message

OUTAGE = "couldn't reach my language model"


def chat_or_save(request: dict[str, Any]) -> dict[str, Any]:
    if is_consolidation(request):
        return save_memory_call("[2026-11-29 10:00] Ada talked about her cat Miso.", MIRO)
    return completion("Tell me more! " + "blah " * 30)


async def test_a_stream_that_ends_before_its_first_event_is_asked_again_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(Status(200, "", content_type="text/event-stream"), completion("Here I am."))
    reply = await ask(agent, dm("42", "hello?"))
    await agent.aclose()
    assert reply.text == "Here I am."
    assert [r.get("stream") is True for r in fake_llm.requests] == [True, False]


async def test_a_stream_broken_off_before_its_first_event_is_asked_again_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The other answer llama-cpp-python 0.3.36 gave a streamed prompt over its window (seen
    with bench/real_model.py): the stream's head, then the connection closed mid-body. It was
    taken for an outage ("couldn't reach"); it is the same refusal, asked whole for its reason."""
    agent = make_agent(fake_llm, workspaces_dir)
    fake_llm.queue(BrokenStream(), completion("Here I am."))
    reply = await ask(agent, dm("42", "hello?"))
    await agent.aclose()
    assert reply.text == "Here I am."
    assert [r.get("stream") is True for r in fake_llm.requests] == [True, False]


async def test_a_server_that_breaks_its_over_long_streams_is_sized_from_its_refusal(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    limited = ContextLimited(2048, chat_or_save, broken_streams=True)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=None, max_output_tokens=None)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(6)]
    await agent.aclose()
    assert limited.rejected and agent.window.tokens == 2048
    assert all(text.startswith("Tell me more") for text in replies), replies


async def test_a_streamed_request_over_the_window_is_consolidated_and_answered(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The configured window is larger than the server's: only the server knows. Streamed,
    it says so with an empty stream; asked whole, with its 400, which the bot recovers from."""
    limited = ContextLimited(1500, chat_or_save)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=8000, max_output_tokens=200)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(10)]
    await agent.aclose()

    assert limited.rejected, "the server never rejected: the test proves nothing"
    assert all(text.startswith("Tell me more") for text in replies), replies
    assert fake_llm.consolidation_requests


async def test_a_server_that_streams_no_usage_is_consolidated_before_it_overflows(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Streams without usage and a tokenizer counting 1.35× ours (SmolLM2's): the estimate
    used to stay at our own count, so consolidation never started and the server refused the
    prompt once it had grown past its window."""
    # (The fake's tokenizer counts the tools' JSON at ~1.8x ours, not 1.35x: the estimate is
    # short by about a fifth of the tools' share, and at some windows a prompt lands within
    # that of the limit. 2,025 is not one, with the remind tool or without it.)
    limited = ContextLimited(2025, chat_or_save, scale=1.35)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=2025, max_output_tokens=256)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(14)]
    await agent.aclose()

    streamed = [r for r in fake_llm.chat_requests if r.get("stream")]
    assert len(streamed) == len(fake_llm.chat_requests) >= 14  # every turn streamed
    assert fake_llm.consolidation_requests, "consolidation never started"
    assert limited.rejected == []  # never over the window
    assert all(text.startswith("Tell me more") for text in replies), replies
    users = [m for m in session_records(workspaces_dir, "42") if m.get("role") == "user"]
    assert len(users) == 14


async def test_a_server_that_reports_usage_is_not_held_to_the_safety_factor(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """OpenAI, vLLM: usage comes with every stream, so the estimate is the server's count and
    consolidation starts only when the window is really filling (not a third earlier)."""
    limited = ContextLimited(2000, chat_or_save, real_streams=False)
    fake_llm.default = limited
    agent = make_agent(fake_llm, workspaces_dir, window=2000, max_output_tokens=256)
    session_tokens = []
    for i in range(5):
        await ask(agent, dm("42", message(i)))
        session_tokens.append(limited.prompt_tokens(fake_llm.chat_requests[-1]))
    await agent.aclose()

    assert all(r.get("stream") for r in fake_llm.chat_requests)
    # Five turns of about 120 tokens fit a 2,000 window with room to spare: no consolidation.
    # (The fixed part, system prompt and tools, is ~680 tokens of it.)
    assert max(session_tokens) + 256 < 1700
    assert fake_llm.consolidation_requests == []
    assert limited.rejected == []


async def test_every_completion_shape_the_sdk_took_is_taken_whole(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """A whole answer is read from its JSON, not through the SDK's models: what those took
    must be taken too. A tool call without an id, its arguments already parsed (an object, as
    some servers send), null usage counts, content given as a list of parts."""
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = False
    call = {"type": "function", "function": {"name": "edit_memory", "arguments": {
        "action": "add", "section": "Preferences", "text": "Likes green tea"}}}  # fmt: skip
    first = completion(None, [call])
    first["usage"] = {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}
    parts = completion(None)
    parts["choices"][0]["message"]["content"] = [{"type": "text", "text": "Noted: green tea."}]
    del parts["id"], parts["usage"]
    fake_llm.queue(first, parts)
    reply = await ask(agent, dm("42", "I like green tea"))
    fake_llm.queue(completion("Still here."))
    again = await ask(agent, dm("42", "and now?"))
    await agent.aclose()

    assert reply.text == "Noted: green tea." and again.text == "Still here."
    memory = (user_home(workspaces_dir, "42") / "MEMORY.md").read_text("utf-8")
    assert "Likes green tea" in memory
    sent = fake_llm.requests[-1]["messages"]
    sent_call = next(m for m in sent if m.get("tool_calls"))["tool_calls"][0]
    assert isinstance(sent_call["function"]["arguments"], str)  # sent back as JSON
    assert sent_call["id"] == next(m for m in sent if m["role"] == "tool")["tool_call_id"]


async def test_an_answer_that_is_only_the_call_marker_is_asked_again_without_tools(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Its grammar for "auto" lets the function-calling format answer a message with nothing
    but "functions.<name>:" (seen turn after turn once the model had copied it): not an answer
    to show a person. Asked without tools, it answers in prose."""
    fake_llm.default = lambda req: completion(
        "functions.search_history:" if req.get("tool_choice") == "auto" else "Hello Ada!"
    )
    agent = make_agent(fake_llm, workspaces_dir)
    agent.config.agent.stream = False
    reply = await ask(agent, dm("42", "Hi, I'm Ada."))
    await agent.aclose()
    assert reply.text == "Hello Ada!"
    assert [r["tool_choice"] for r in fake_llm.requests] == ["auto", "none"]
    saved = [m["content"] for m in session_records(workspaces_dir, "42") if m.get("role")]
    assert "functions.search_history:" not in saved


async def test_a_2048_server_learnt_at_its_refusal_gets_the_compact_form_with_tools(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """What docs/local-models.md says of a 2,048 llama-cpp-python bot (issue 33: it said "starts
    without tools"): the window is learnt at the first refusal, before any answer showed that
    the server reports no usage, and the form planned then is kept: compact, tools offered."""
    fake_llm.default = ContextLimited(2048, chat_or_save, scale=1.35, tool_template=400)
    agent = make_agent(fake_llm, workspaces_dir, window=None, max_output_tokens=None)
    replies = [(await ask(agent, dm("42", message(i)))).text for i in range(4)]
    await agent.aclose()
    assert agent.window.tokens == 2048 and agent.window.form == "compact"
    assert all(text.startswith("Tell me more") for text in replies), replies
    assert all(r.get("tools") for r in fake_llm.chat_requests)
