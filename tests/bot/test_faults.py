"""Faults on the LLM side, through the real Agent and openai client against a fake provider.

Each fault must end in the documented behaviour — the SDK's retry, the fallback to "auto", a raw
archive after three failed consolidations, or a clear message to the user — and every user
message must be in the session JSONL exactly once, whatever happened to the model call.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from bot.agent.agent import Agent
from tests.rigs.agent import ask, dm, session_records, user_home
from tests.rigs.agent import make_agent as shared_make_agent
from tests.rigs.fakes.openai_server import (
    Delay,
    FakeOpenAI,
    Status,
    completion,
    is_consolidation,
    save_memory_call,
    tool_call,
)

OUTAGE = "couldn't reach my language model"
HTML_PAGE = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


class QuickRetryOpenAI(FakeOpenAI):
    """Answers 5xx with `retry-after-ms`, as OpenAI does: the SDK retries after 20 ms instead
    of its 0.5–8 s back-off, so a test can exercise real retries in well under a second."""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        response = await super()._chat(request)
        if response.status >= 500 or response.status == 429:
            response.headers["retry-after-ms"] = "20"
        return response


@pytest.fixture
async def fake() -> AsyncIterator[QuickRetryOpenAI]:
    server = await QuickRetryOpenAI().start()
    try:
        yield server
    finally:
        await server.stop()


def make_agent(fake: FakeOpenAI, workspaces: Path, *, window: int = 50_000, **llm: Any) -> Agent:
    """With the SDK's own retries on: they are part of what these tests exercise."""
    return shared_make_agent(fake, workspaces, window=window, **{"max_retries": 2, **llm})


def home(workspaces: Path, user: str) -> Path:
    return user_home(workspaces, user)


def assert_each_once(workspaces: Path, user: str, texts: list[str]) -> list[dict[str, Any]]:
    """Every text the user sent is persisted as exactly one user message, and nothing else is."""
    users = [r for r in session_records(workspaces, user) if r.get("role") == "user"]
    for text in texts:
        hits = [u for u in users if u["content"] == text]  # stored as written, no time line
        assert len(hits) == 1, (text, len(hits))
    assert len(users) == len(texts)
    return users


def last_cursor(workspaces: Path, user: str) -> int:
    metadata = [r for r in session_records(workspaces, user) if r.get("_type") == "metadata"]
    return metadata[-1]["last_consolidated"]


# ---- the agent's own call -------------------------------------------------------------------


async def test_a_5xx_burst_shorter_than_the_retries_is_answered(
    fake: QuickRetryOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=2)
    fake.queue(
        Status(503, {"error": {"message": "overloaded"}}),
        Status(500, {"error": {"message": "boom"}}),
        completion("Answered after two retries."),
    )
    reply = await ask(agent, dm("1", "are you there?"))
    await agent.aclose()
    assert reply.text == "Answered after two retries."
    assert len(fake.requests) == 3  # the SDK retried; we did not re-send on top
    assert_each_once(workspaces_dir, "1", ["are you there?"])
    roles = [r["role"] for r in session_records(workspaces_dir, "1") if "role" in r]
    assert roles == ["user", "assistant"]


async def test_a_5xx_burst_longer_than_the_retries_gives_a_clear_message(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=2)
    fake.queue(*[Status(503, {"error": {"message": "overloaded"}})] * 3)
    reply = await ask(agent, dm("1", "my locker code is 4417"))
    fake.queue(completion("I'm back."))
    second = await ask(agent, dm("1", "hello again"))
    await agent.aclose()
    assert OUTAGE in reply.text and "saved" in reply.text
    assert "HTTP 503" in caplog.text  # the kind of failure is for the operator's log
    assert len(fake.requests) == 4  # 1 + 2 retries, then the next turn
    assert second.text == "I'm back."
    assert_each_once(workspaces_dir, "1", ["my locker code is 4417", "hello again"])
    # The saved message reaches the model on the next turn, once.
    sent = json.dumps(fake.requests[-1]["messages"])
    assert sent.count("my locker code is 4417") == 1


async def test_rate_limit_429_is_retried(fake: QuickRetryOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=2)
    fake.queue(Status(429, {"error": {"message": "slow down"}}), completion("ok then"))
    reply = await ask(agent, dm("1", "hi"))
    await agent.aclose()
    assert reply.text == "ok then"
    assert_each_once(workspaces_dir, "1", ["hi"])


async def test_one_timeout_is_retried_and_answered(
    fake: QuickRetryOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=1, timeout_s=0.2)
    fake.queue(Delay(1.0, completion("too late")), completion("in time"))
    reply = await ask(agent, dm("1", "quick question"))
    await agent.aclose()
    assert reply.text == "in time"
    assert_each_once(workspaces_dir, "1", ["quick question"])
    roles = [r["role"] for r in session_records(workspaces_dir, "1") if "role" in r]
    assert roles == ["user", "assistant"]  # the late answer was never taken


async def test_timeouts_beyond_the_retries_give_a_clear_message(
    fake: QuickRetryOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=0, timeout_s=0.2)
    fake.queue(Delay(1.0, completion("too late")))
    reply = await ask(agent, dm("1", "slow question"))
    await agent.aclose()
    assert OUTAGE in reply.text and "timed out" in caplog.text
    assert_each_once(workspaces_dir, "1", ["slow question"])


async def test_a_200_with_an_html_error_page_gives_a_clear_message(
    fake: QuickRetryOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake, workspaces_dir)
    fake.queue(Status(200, HTML_PAGE, content_type="text/html"))
    labelled = await ask(agent, dm("1", "first"))
    # A proxy that labels its error page as JSON.
    fake.queue(Status(200, HTML_PAGE, content_type="application/json"))
    mislabelled = await ask(agent, dm("1", "second"))
    fake.queue(Status(200, "", content_type="application/json"))
    empty = await ask(agent, dm("1", "third"))
    fake.queue(completion("All good now."))
    recovered = await ask(agent, dm("1", "fourth"))
    await agent.aclose()
    for reply in (labelled, mislabelled, empty):
        assert OUTAGE in reply.text and "<html>" not in reply.text
    assert caplog.text.count("not a completion") == 3
    assert recovered.text == "All good now."
    assert_each_once(workspaces_dir, "1", ["first", "second", "third", "fourth"])


async def test_an_html_5xx_from_a_proxy_is_retried_then_reported(
    fake: QuickRetryOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=1)
    fake.queue(*[Status(502, HTML_PAGE, content_type="text/html")] * 2)
    reply = await ask(agent, dm("1", "hello"))
    await agent.aclose()
    assert OUTAGE in reply.text and "<html>" not in reply.text and "HTTP 502" in caplog.text
    assert len(fake.requests) == 2
    assert_each_once(workspaces_dir, "1", ["hello"])


async def test_an_empty_choice_list_gives_a_clear_message(
    fake: QuickRetryOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake, workspaces_dir)
    empty = completion("x")
    empty["choices"] = []
    fake.queue(empty)
    reply = await ask(agent, dm("1", "anything?"))
    await agent.aclose()
    assert OUTAGE in reply.text and "without any choice" in caplog.text
    assert_each_once(workspaces_dir, "1", ["anything?"])


async def test_malformed_completion_bodies_never_escape_as_exceptions(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    bodies: list[Any] = [
        {"choices": [{"message": None}]},
        {"choices": [{}]},
        {"choices": ["not an object"]},
        ["a", "list"],
    ]
    agent = make_agent(fake, workspaces_dir)
    replies = []
    for i, body in enumerate(bodies):
        fake.queue(body)
        replies.append(await ask(agent, dm("1", f"message {i}")))
    await agent.aclose()
    assert all(OUTAGE in r.text for r in replies), [r.text for r in replies]
    assert_each_once(workspaces_dir, "1", [f"message {i}" for i in range(len(bodies))])


async def test_a_400_on_the_turn_is_reported_not_retried(
    fake: QuickRetryOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=2)
    fake.queue(Status(400, {"error": {"message": "Unsupported parameter: temperature"}}))
    reply = await ask(agent, dm("1", "hello"))
    await agent.aclose()
    assert "couldn't reach" not in reply.text  # a refusal is not an outage
    assert "Unsupported parameter: temperature" in caplog.text  # logged, never shown
    assert "Unsupported parameter" not in reply.text
    assert len(fake.requests) == 1
    assert_each_once(workspaces_dir, "1", ["hello"])


async def test_truncated_tool_arguments_are_fed_back_and_the_turn_continues(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    agent = make_agent(fake, workspaces_dir)
    truncated = '{"action": "add", "section": "Preferences", "text": "Likes gre'
    fake.queue(
        completion(None, [tool_call("edit_memory", truncated)]),
        completion(None, [tool_call("edit_memory", {"action": "add", "text": "Likes tea"})]),
        completion("Noted."),
    )
    reply = await ask(agent, dm("1", "I like green tea"))
    await agent.aclose()
    assert reply.text == "Noted."
    tool_results = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_results) == 1
    assert tool_results[0]["content"].startswith("Error:") and "JSON" in tool_results[0]["content"]
    memory = (home(workspaces_dir, "1") / "MEMORY.md").read_text("utf-8")
    assert "Likes tea" in memory and "Likes gre" not in memory
    assert_each_once(workspaces_dir, "1", ["I like green tea"])
    roles = [r["role"] for r in session_records(workspaces_dir, "1") if "role" in r]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


async def test_a_failure_in_the_middle_of_the_tool_loop_leaves_a_valid_history(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    agent = make_agent(fake, workspaces_dir, max_retries=0)
    fake.queue(
        completion(None, [tool_call("search_history", {"query": "trip"})]),
        Status(500, {"error": {"message": "boom"}}),
    )
    failed = await ask(agent, dm("1", "where did I travel?"))
    fake.queue(completion("Let's try again."))
    again = await ask(agent, dm("1", "try again"))
    await agent.aclose()
    assert OUTAGE in failed.text and again.text == "Let's try again."
    # The provider is sent a well-formed conversation: the tool call with its result.
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert_each_once(workspaces_dir, "1", ["where did I travel?", "try again"])


# ---- consolidation --------------------------------------------------------------------------


def chat_or(consolidation: Any) -> Any:
    """A provider whose chat answers are plain and whose consolidation answers are scripted."""

    def answer(request: dict[str, Any]) -> Any:
        if is_consolidation(request):
            return consolidation(request)
        return completion("Tell me more! " + "blah " * 40)

    return answer


def long_text(i: int) -> str:
    return f"Fact number {i}: my cat Miso likes box {i}. " + "meow " * 30


async def test_a_400_on_forced_tool_choice_falls_back_to_auto_and_is_applied(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    def consolidation(request: dict[str, Any]) -> Any:
        if isinstance(request.get("tool_choice"), dict):
            return Status(400, {"error": {"message": "tool_choice must be auto in thinking mode"}})
        return save_memory_call(
            "[2026-11-29 10:00] Ada talked about her cat Miso and its boxes.",
            "## User Information\n- Has a cat named Miso who likes boxes\n",
        )

    texts = [long_text(i) for i in range(8)]
    agent = make_agent(fake, workspaces_dir, window=1200)
    fake.default = chat_or(consolidation)
    for text in texts:
        reply = await ask(agent, dm("1", text))
        assert reply.text.startswith("Tell me more")
    await agent.aclose()
    choices = [r.get("tool_choice") for r in fake.consolidation_requests]
    assert choices and choices[::2] == [choices[0]] * len(choices[::2])
    assert isinstance(choices[0], dict) and set(choices[1::2]) == {"auto"}
    ws = home(workspaces_dir, "1")
    history = (ws / "HISTORY.md").read_text("utf-8")
    assert "cat Miso and its boxes" in history and "[RAW]" not in history
    assert "Miso who likes boxes" in (ws / "MEMORY.md").read_text("utf-8")
    assert last_cursor(workspaces_dir, "1") > 0
    assert_each_once(workspaces_dir, "1", texts)


async def test_forced_choice_ignored_with_prose_then_auto_saves(
    fake: QuickRetryOpenAI, workspaces_dir: Path
) -> None:
    """Ollama's way: the forced choice is ignored and the model answers in prose."""

    def consolidation(request: dict[str, Any]) -> Any:
        if isinstance(request.get("tool_choice"), dict):
            return completion("Here is a summary: Ada has a cat.")
        return save_memory_call(
            "[2026-11-29 10:00] Ada's trip to Kyoto.", "## Project Context\n- Kyoto\n"
        )

    agent = make_agent(fake, workspaces_dir)
    fake.default = chat_or(consolidation)
    await ask(agent, dm("1", "I'm going to Kyoto"))
    reply = await ask(agent, dm("1", "/new"))
    await agent.aclose()
    assert "fresh" in reply.text.lower()
    ws = home(workspaces_dir, "1")
    assert "trip to Kyoto" in (ws / "HISTORY.md").read_text("utf-8")
    assert "Kyoto" in (ws / "MEMORY.md").read_text("utf-8")
    assert [r["tool_choice"] == "auto" for r in fake.consolidation_requests] == [False, True]
    assert last_cursor(workspaces_dir, "1") == 2


async def test_a_model_that_never_saves_leads_to_a_raw_archive_on_new(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    texts = ["I have a parrot called Kiwi", "Kiwi says 'hello' at 6am"]
    agent = make_agent(fake, workspaces_dir)
    fake.default = chat_or(lambda request: completion("I'd rather chat than call tools."))
    for text in texts:
        await ask(agent, dm("1", text))
    await ask(agent, dm("1", "/new"))
    await agent.aclose()
    # Three attempts, each forced, then auto, then in plain text; then the chunk is kept
    # verbatim.
    assert len(fake.consolidation_requests) == 9
    history = (home(workspaces_dir, "1") / "HISTORY.md").read_text("utf-8")
    assert history.count("[RAW] 4 messages") == 1
    for text in texts:
        assert text in history
    assert not (home(workspaces_dir, "1") / "MEMORY.md").exists()
    assert last_cursor(workspaces_dir, "1") == 4
    assert_each_once(workspaces_dir, "1", texts)


async def test_a_model_that_never_saves_is_raw_archived_after_three_failures(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    # (12 turns: with the lean fixed part of a small window, 8 overflowed only twice.)
    texts = [long_text(i) for i in range(12)]
    agent = make_agent(fake, workspaces_dir, window=1200)
    fake.default = chat_or(lambda request: completion("No tools for me, thanks."))
    for text in texts:
        await ask(agent, dm("1", text))
    await agent.aclose()
    history = (home(workspaces_dir, "1") / "HISTORY.md").read_text("utf-8")
    assert "[RAW]" in history
    # The first chunk is tried exactly three times (forced, then auto, then in plain text,
    # each) before it is archived raw; later requests are about later chunks.
    first_chunk = [
        r for r in fake.consolidation_requests if "Fact number 0:" in r["messages"][1]["content"]
    ]
    assert len(first_chunk) == 9
    # Nothing is lost: every message is in the JSONL once, and every consolidated one is also
    # verbatim in HISTORY.md; the rest is still in the live conversation.
    users = assert_each_once(workspaces_dir, "1", texts)
    records = [r for r in session_records(workspaces_dir, "1") if "role" in r]
    cursor = last_cursor(workspaces_dir, "1")
    assert cursor > 0
    archived = {r["content"] for r in records[:cursor] if r["role"] == "user"}
    assert archived
    for text in archived:
        assert text.strip() in history
    assert len(users) == len(texts)


async def test_consolidation_5xx_counts_as_a_failure_and_nothing_is_lost(
    fake: QuickRetryOpenAI,
    workspaces_dir: Path,
) -> None:
    texts = ["note one", "note two"]
    agent = make_agent(fake, workspaces_dir, max_retries=0)
    fake.default = chat_or(lambda request: Status(503, {"error": {"message": "down"}}))
    for text in texts:
        await ask(agent, dm("1", text))
    await ask(agent, dm("1", "/new"))
    fake.default = chat_or(lambda request: completion("ok"))
    after = await ask(agent, dm("1", "after the outage"))
    await agent.aclose()
    assert after.text.startswith("Tell me more")
    history = (home(workspaces_dir, "1") / "HISTORY.md").read_text("utf-8")
    assert "[RAW] 4 messages" in history and "note one" in history and "note two" in history
    assert_each_once(workspaces_dir, "1", [*texts, "after the outage"])
