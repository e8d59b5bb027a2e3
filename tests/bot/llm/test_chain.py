"""The chain of model endpoints ([[llm.fallback]], [[consolidation.endpoints]]) through the
real Agent and openai client, against two fake OpenAI-compatible servers on 127.0.0.1: what a
person notices is that every message is answered once, by whichever endpoint can."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bot.agent.sizing import plan
from bot.agent.turn import LLM_CUT_REPLY, LLM_FAILED_REPLY
from bot.cli.core import build_core
from bot.config import Endpoint
from bot.inbound import Inbound
from bot.llm import habits
from bot.observe.metrics import REGISTRY
from bot.outbound import BufferedOutbound
from memory.control.link import merge
from memory.links import LinkTable
from memory.preferences import MODEL
from memory.tokens import TokenEstimator
from memory.workspace import Workspaces
from tests.rigs.agent import answer, ask, dm, group, make_agent, session_records
from tests.rigs.cli import closed_port_url
from tests.rigs.fakes.openai_server import (
    ContextLimited,
    FakeOpenAI,
    Held,
    Reset,
    Status,
    Streamed,
    completion,
    pieces_of,
    save_memory_call,
)

FALLBACK = "From the fallback."


@pytest.fixture
async def backup() -> AsyncIterator[FakeOpenAI]:
    """The second endpoint, answering FALLBACK unless told otherwise."""
    server = await FakeOpenAI().start()
    server.default = lambda request: completion(FALLBACK)
    try:
        yield server
    finally:
        await server.stop()
        habits.forget_all()


def endpoint(server: FakeOpenAI, model: str = "backup-model", **keys: Any) -> Endpoint:
    return Endpoint(model=model, base_url=server.base_url, max_retries=0, timeout_s=5, **keys)


def messages_of(workspaces: Path, user: str) -> list[tuple[str, str]]:
    records = session_records(workspaces, user)
    return [(r["role"], r["content"].rpartition("\n")[2]) for r in records if "role" in r]


async def test_a_refused_connection_is_answered_by_the_next_endpoint(
    backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(closed_port_url(), workspaces_dir, fallbacks=[endpoint(backup)])
    reply = await ask(agent, dm("1", "hello"))
    await agent.aclose()
    assert reply.text == FALLBACK
    assert messages_of(workspaces_dir, "1") == [("user", "hello"), ("assistant", FALLBACK)]


async def test_reset_500_429_and_a_hang_are_each_answered_once_by_the_next(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The first endpoint resets the connection, answers 500, then 429 with Retry-After (it is
    then passed over without being asked until that time is up), then hangs past its timeout.
    Every message is answered by the second, once, and kept once."""
    hang = asyncio.Event()
    fake_llm.queue(
        Reset(),
        Status(500, {"error": {"message": "internal error"}}),
        Status(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"}),
        Held(hang, completion("Too late.")),
    )
    agent = make_agent(
        fake_llm,
        workspaces_dir,
        fallbacks=[endpoint(backup)],
        timeout_s=1,
        breaker_failures=10,
        breaker_cooldown_s=0.1,
    )
    replies = [(await ask(agent, dm("1", f"message {n}"))).text for n in range(1, 5)]
    assert len(fake_llm.chat_requests) == 3, "after the 429 the first is not asked at once"
    await asyncio.sleep(1.1)  # Retry-After passed: the first is probed, and hangs
    replies.append((await ask(agent, dm("1", "message 5"))).text)
    hang.set()
    await agent.aclose()
    assert replies == [FALLBACK] * 5
    assert len(fake_llm.chat_requests) == 4 and len(backup.chat_requests) == 5
    expected = [(role, f"message {n}" if role == "user" else FALLBACK) for n in range(1, 6)
                for role in ("user", "assistant")]  # fmt: skip
    assert messages_of(workspaces_dir, "1") == expected


async def test_the_breaker_opens_then_closes_by_itself(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(Status(500), Status(500))
    fake_llm.default = lambda request: completion("The first is back.")
    agent = make_agent(
        fake_llm,
        workspaces_dir,
        fallbacks=[endpoint(backup)],
        breaker_failures=2,
        breaker_cooldown_s=0.3,
    )
    assert (await ask(agent, dm("1", "one"))).text == FALLBACK
    assert (await ask(agent, dm("1", "two"))).text == FALLBACK
    assert (await ask(agent, dm("1", "three"))).text == FALLBACK
    assert len(fake_llm.chat_requests) == 2, "open: the failing endpoint is not asked"
    status = (await ask(agent, dm("1", "/status"))).text
    assert "Model: backup-model (a fallback: fake-model is not answering)" in status
    await asyncio.sleep(0.35)
    assert (await ask(agent, dm("1", "four"))).text == "The first is back."  # the probe
    assert (await ask(agent, dm("1", "five"))).text == "The first is back."
    status = (await ask(agent, dm("1", "/status"))).text
    assert "Model: fake-model\n" in status
    await agent.aclose()
    assert len(backup.chat_requests) == 3


async def test_an_answer_cut_mid_stream_is_told_not_begun_again_elsewhere(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.queue(Streamed(pieces_of("One two three four five"), cut_after=3))
    agent = make_agent(fake_llm, workspaces_dir, fallbacks=[endpoint(backup)])
    out = await answer(agent, dm("1", "count"))
    assert out.reply.text == "One two three\n\n" + LLM_CUT_REPLY
    assert backup.requests == [], "what was shown is not restarted on another model"
    fake_llm.queue(Status(503))
    retried = await ask(agent, dm("1", "/retry"))  # now the first fails before any text
    await agent.aclose()
    assert retried.text == FALLBACK
    assert messages_of(workspaces_dir, "1") == [("user", "count"), ("assistant", FALLBACK)]


async def test_a_small_window_behind_a_large_one_never_gets_an_over_window_request(
    backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    """[llm] (32,000 tokens) is down; the fallback holds 2,048. A short conversation fits it
    (its answer's limit lowered to what is left); a message the large window would take and
    the small one cannot is not sent to it."""
    small = endpoint(backup, context_window_tokens=2048)
    agent = make_agent(closed_port_url(), workspaces_dir, window=32_000, fallbacks=[small])
    short = await ask(agent, dm("1", "hi"))
    long = await ask(agent, dm("1", "tell me about this: " + "word " * 3000))
    await agent.aclose()
    assert short.text == FALLBACK
    assert long.text == LLM_FAILED_REPLY
    assert len(backup.chat_requests) == 1
    count = TokenEstimator()
    for request in backup.requests:
        prompt = count.raw_request_tokens(request["messages"], json.dumps(request.get("tools")))
        assert prompt + request["max_tokens"] <= 2048


async def test_a_fallback_without_a_window_learns_it_from_its_first_refusal(
    backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    """[llm] is down; the fallback's window is not configured, and its server holds 2,048
    tokens. It refuses the first long message, naming its window; the next long message is not
    sent to it at all (before, each was sent and refused), and a short one is answered with an
    answer's limit that fits."""
    limited = ContextLimited(2048, lambda request: completion(FALLBACK), server="openai")
    backup.default = limited
    fallbacks = [endpoint(backup)]
    agent = make_agent(closed_port_url(), workspaces_dir, window=32_000, fallbacks=fallbacks)
    first = await ask(agent, dm("1", "tell me about this: " + "word " * 3000))
    refused = len(limited.rejected)
    second = await ask(agent, dm("2", "and about this: " + "word " * 3000))
    short = await ask(agent, dm("3", "hi"))
    await agent.aclose()
    assert first.text.startswith("Sorry, this conversation has grown too long"), first.text
    assert second.text == LLM_FAILED_REPLY  # as when its window is configured
    assert refused >= 1
    assert len(limited.rejected) == refused  # the second long one was passed over
    assert short.text == FALLBACK
    answered = [r for r in backup.chat_requests if r not in limited.rejected]
    assert answered and all(limited.prompt_tokens(r) + r["max_tokens"] <= 2048 for r in answered)


async def test_consolidation_goes_to_its_own_endpoint(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    memory_model = endpoint(backup, model="memory-model")
    agent = make_agent(fake_llm, workspaces_dir, consolidation=[memory_model])
    await ask(agent, dm("1", "I like green tea"))
    backup.queue(save_memory_call("[2026-01-01 10:00] Tea.", "## User Information\n- Green tea\n"))
    await ask(agent, dm("1", "/new"))
    await agent.background.wait_all()
    await agent.aclose()
    assert fake_llm.consolidation_requests == []
    [filing] = backup.consolidation_requests
    assert filing["model"] == "memory-model" and "green tea" in json.dumps(filing)
    assert backup.chat_requests == [] and len(fake_llm.chat_requests) == 1


async def test_each_endpoint_is_counted_in_the_metrics(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The core as `lightgrep run` builds it: calls by endpoint and outcome, the breakers."""
    made = make_agent(fake_llm, workspaces_dir, fallbacks=[endpoint(backup)], breaker_failures=1)
    config = made.config
    await made.aclose()
    built = build_core(config, plan(config, estimator=TokenEstimator()), "run")
    first = f"fake-model@127.0.0.1:{fake_llm.port}"
    second = f"backup-model@127.0.0.1:{backup.port}"

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    before = sample("lightgrep_llm_endpoint_calls_total", endpoint=first, outcome="http_502")
    fake_llm.queue(Status(502))
    out = BufferedOutbound()
    await built.core.handle(dm("1", "hi"), out)
    await built.agent.aclose()
    assert out.reply.text == FALLBACK
    after = sample("lightgrep_llm_endpoint_calls_total", endpoint=first, outcome="http_502")
    assert after == before + 1
    assert sample("lightgrep_llm_endpoint_calls_total", endpoint=second, outcome="ok") >= 1
    assert sample("lightgrep_llm_endpoint_breaker", endpoint=first) == 1.0  # open
    assert sample("lightgrep_llm_endpoint_breaker", endpoint=second) == 0.0


async def test_a_model_picked_with_slash_model_answers_and_survives_a_restart(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, fallbacks=[endpoint(backup)])
    listed = (await ask(agent, dm("1", "/model"))).text
    assert "Models: fake-model, backup-model" in listed and "Yours: fake-model." in listed
    assert "not one of" in (await ask(agent, dm("1", "/model gpt-9"))).text
    assert (
        "Yours: backup-model (your choice)"
        in (await ask(agent, dm("1", "/model backup-model"))).text
    )
    assert (await ask(agent, dm("1", "hello"))).text == FALLBACK
    assert (await ask(agent, dm("2", "hello"))).text == "ok"  # another person: the default
    assert "Model: backup-model\n" in (await ask(agent, dm("1", "/status"))).text
    await agent.aclose()
    again = make_agent(fake_llm, workspaces_dir, fallbacks=[endpoint(backup)])  # a restart
    assert (await ask(again, dm("1", "still you?"))).text == FALLBACK
    await ask(again, dm("1", "/model default"))
    assert (await ask(again, dm("1", "and now?"))).text == "ok"
    await again.aclose()
    assert [r["model"] for r in backup.chat_requests] == ["backup-model"] * 2
    assert len(fake_llm.chat_requests) == 2


async def test_a_chat_admin_restricts_the_model_for_everyone_there(
    fake_llm: FakeOpenAI, backup: FakeOpenAI, workspaces_dir: Path
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, fallbacks=[endpoint(backup)])

    def in_group(user: str, text: str, admin: bool = False) -> Inbound:
        return replace(group("g1", user, text), chat_key="telegram:g1", chat_admin=admin)

    member = in_group("2", "/model only backup-model")
    assert "Only this chat's admins" in (await ask(agent, member)).text
    admin = in_group("3", "/model only backup-model", admin=True)
    assert "everyone is answered by backup-model" in (await ask(agent, admin)).text
    assert (await ask(agent, in_group("2", "hi all"))).text == FALLBACK
    assert (await ask(agent, dm("2", "hi in private"))).text == "ok"  # elsewhere: their own
    await ask(agent, in_group("3", "/model any", admin=True))
    assert (await ask(agent, in_group("2", "hi again"))).text == "ok"
    await agent.aclose()


def test_the_model_chosen_follows_a_link(tmp_path: Path) -> None:
    """/link: the joining account's /model choice is kept where the other made none."""
    workspaces = Workspaces(tmp_path)
    workspaces.get("discord-7").preferences.set(MODEL, "backup-model")
    merge(workspaces, LinkTable(tmp_path), "discord-7", "telegram-1")
    assert Workspaces(tmp_path).get("telegram-1").preferences.get(MODEL) == "backup-model"
