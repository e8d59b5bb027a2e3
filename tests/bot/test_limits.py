"""[limits]: what one person may cost a public bot, counted from the provider's reported tokens
and kept on disk, through the real Agent and openai client against the fake provider.

A refused message is not saved and the answer says so and when to send it again; /usage shows a
person their own figures; consolidation calls are charged to the user whose memory they fold;
a restart forgets nothing; admins are exempt.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config import ConfigError, LimitsConfig, load_config
from bot.limits import Limits
from bot.usage import UsageBook
from memory.usage import USAGE_FILE, UsageLog
from memory.workspace import Workspaces
from tests.rigs.agent import ask, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import (
    FakeOpenAI,
    Streamed,
    completion,
    is_consolidation,
    pieces_of,
    save_memory_call,
    tool_call,
)


def costly(prompt: int, written: int) -> Any:
    return lambda request: completion("Here you are.", prompt_tokens=prompt,
                                      completion_tokens=written)


def user_texts(workspaces: Path, user: str) -> list[str]:
    records = session_records(workspaces, user)
    return [r["content"] for r in records if r.get("role") == "user"]


async def test_messages_per_minute_refuses_without_saving(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(messages_per_minute=2))
    with caplog.at_level(logging.INFO):
        replies = [await ask(agent, dm("42", f"message {i}")) for i in range(4)]
    other = await ask(agent, dm("7", "I'm someone else"))
    await agent.aclose()
    assert [r.text for r in replies[:2]] == ["ok", "ok"]
    for refused in replies[2:]:
        assert "at most 2 a minute" in refused.text and "didn't save" in refused.text
        assert "send it again in" in refused.text and "UTC" in refused.text
    assert other.text == "ok"  # one person's limit is theirs alone
    assert user_texts(workspaces_dir, "42") == ["message 0", "message 1"]
    assert len(fake_llm.requests) == 3  # no model call for a refused message
    assert "limit messages_per_minute refused a message of telegram-42" in caplog.text


async def test_tokens_per_day_is_counted_from_the_provider_and_survives_a_restart(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    limits = LimitsConfig(tokens_per_day=1500)
    fake_llm.default = costly(600, 400)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits)
    first = await ask(agent, dm("42", "one"))
    second = await ask(agent, dm("42", "two"))  # 1000 used: still under, answered
    third = await ask(agent, dm("42", "three"))
    await agent.aclose()
    assert first.text == second.text == "Here you are."
    assert "1,500 tokens for today" in third.text and "didn't save" in third.text
    assert "midnight UTC" in third.text and " min)" in third.text

    restarted = make_agent(fake_llm, workspaces_dir, limits=limits)
    again = await ask(restarted, dm("42", "four"))
    usage = await ask(restarted, dm("42", "/usage"))
    someone = await ask(restarted, dm("7", "hello"))
    await restarted.aclose()
    assert "tokens for today" in again.text  # the restart did not reset it
    assert someone.text == "Here you are."
    assert user_texts(workspaces_dir, "42") == ["one", "two"]
    assert usage.private
    assert "2,000 tokens (1,200 read, 800 written) in 2 model calls" in usage.text
    assert "1,500 tokens a day (0 left" in usage.text


async def test_consolidation_is_charged_to_the_user_whose_memory_it_folds(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if is_consolidation(request):
            body = save_memory_call("[2026-11-29 10:00] Ada talked about Miso.", "- Cat: Miso\n")
            body["usage"] = {"prompt_tokens": 7000, "completion_tokens": 300,
                             "total_tokens": 7300}
            return body
        return completion("Tell me more! " + "blah " * 40, prompt_tokens=100,
                          completion_tokens=50)

    fake_llm.default = answer
    agent = make_agent(fake_llm, workspaces_dir, window=1200)
    # (12 turns: with the lean fixed part of a small window, 8 did not fill it.)
    for i in range(12):
        await ask(agent, dm("42", f"My cat Miso did thing number {i}. " + "meow " * 30))
    await agent.aclose()
    consolidations = len(fake_llm.consolidation_requests)
    turns = len(fake_llm.requests) - consolidations
    assert consolidations, "consolidation never ran"
    log = UsageLog(user_home(workspaces_dir, "42") / USAGE_FILE)
    today = datetime.now(UTC).date()
    assert log.day(today).prompt_tokens == 7000 * consolidations + 100 * turns
    assert log.day(today).calls == consolidations + turns


async def test_the_global_budget_stops_everyone_but_admins(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    limits = LimitsConfig(global_tokens_per_day=1000, messages_per_minute=1,
                          admins=["telegram-9"])
    fake_llm.default = costly(900, 200)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits)
    spent = await ask(agent, dm("42", "spend it all"))
    refused = await ask(agent, dm("7", "my turn"))
    admin = [await ask(agent, dm("9", f"admin {i}")) for i in range(3)]
    usage = await ask(agent, dm("9", "/usage"))
    await agent.aclose()
    assert spent.text == "Here you are."
    assert "for everyone" in refused.text and "didn't save" in refused.text
    assert [r.text for r in admin] == ["Here you are."] * 3  # no budget, no minute limit
    assert "admin" in usage.text and "no limits apply" in usage.text
    assert not (user_home(workspaces_dir, "7") / "sessions").exists() or not list(
        (user_home(workspaces_dir, "7") / "sessions").iterdir()
    )


async def test_usage_with_no_limits_and_no_calls(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    # The heavy commands have a budget by default (issue 22); 0 turns it off like the others.
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(heavy_commands_per_hour=0))
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert usage.private
    assert "Today (" in usage.text and "0 tokens" in usage.text
    assert "No limits are set." in usage.text
    agent = make_agent(fake_llm, workspaces_dir)
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert "Your limits: 10 of /export, /forget, /wipe and /memory history or undo an hour." in (
        usage.text
    )


# ---- the usage file ---------------------------------------------------------------------------


def test_a_torn_last_line_is_skipped_and_the_next_one_starts_fresh(tmp_path: Path) -> None:
    path = tmp_path / USAGE_FILE
    when = datetime.now(UTC)
    UsageLog(path).record(100, 20, when)
    with path.open("ab") as file:
        file.write(b'{"at": "2026-')  # a crash mid-write
    log = UsageLog(path)
    assert log.day(when.date()).tokens == 120
    log.record(5, 5, when)
    assert UsageLog(path).day(when.date()).tokens == 130
    assert all(json.loads(line) for line in path.read_text().splitlines()[-1:])


def test_old_lines_are_folded_into_days_and_the_oldest_dropped(tmp_path: Path) -> None:
    path = tmp_path / USAGE_FILE
    now = datetime.now(UTC)
    ancient = now.replace(year=now.year - 2)
    log = UsageLog(path)
    log.record(1000, 0, ancient)
    log.record(10, 1, now)
    log.record(10, 1, now)
    reloaded = UsageLog(path)
    reloaded.record(10, 1, now)  # the first write after loading folds the file
    assert reloaded.day(now.date()).tokens == 33  # the call that folded it counts, in RAM too
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"day": now.date().isoformat(), "prompt_tokens": 20,
                        "completion_tokens": 2, "calls": 2}
    assert len(lines) == 2 and "at" in lines[1]
    assert UsageLog(path).day(now.date()).tokens == 33
    assert UsageLog(path).day(ancient.date()).tokens == 0
    assert UsageLog(path).month(now.year, now.month).calls == 3


def test_limits_are_checked_when_the_config_is_loaded(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[limits]\ntokens_per_day = -5\n")
    with pytest.raises(ConfigError, match=r"\[limits\] tokens_per_day must be an integer of 0"):
        load_config(config, env={})
    config.write_text('[limits]\nmessages_per_minute = 10\nadmins = ["telegram-42"]\n')
    loaded = load_config(config, env={"LIGHTGREP_LIMITS_TOKENS_PER_DAY": "200000"})
    assert loaded.limits.admins == ["telegram-42"] and loaded.limits.tokens_per_day == 200_000


async def test_messages_waiting_for_a_turn_are_checked_again_when_it_starts(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Ten messages arriving at once all pass the arrival check; the tokens are spent by the
    first turns, so the later ones are refused when their turn comes."""
    fake_llm.default = costly(800, 200)
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=2500))
    replies = await asyncio.gather(*(ask(agent, dm("42", f"m{i}")) for i in range(10)))
    await agent.aclose()
    answered = [r for r in replies if r.text == "Here you are."]
    assert len(answered) == 3  # 0, 1000, 2000 spent before each: the fourth finds 3000
    assert all("didn't save" in r.text for r in replies if r not in answered)
    assert len(user_texts(workspaces_dir, "42")) == 3


def test_the_per_minute_table_forgets_people_who_stopped_writing(tmp_path: Path) -> None:
    """Each person who ever wrote once must not stay in RAM: after a minute of silence they are
    dropped, while the limit still holds for whoever writes within the minute."""
    now = [1000.0]
    limits = Limits(
        LimitsConfig(messages_per_minute=2),
        UsageBook(Workspaces(tmp_path / "workspaces")),
        monotonic=lambda: now[0],
    )
    for minute in range(5):
        for user in range(2000):
            assert limits.check(f"telegram-{minute}-{user}") is None
            now[0] += 0.01  # 2,000 new people a minute, 20 s in all
        now[0] += 40
        assert len(limits._recent) <= 2 * 2000  # the people of the last two minutes at most
    assert limits.check("telegram-busy") is None and limits.check("telegram-busy") is None
    assert limits.check("telegram-busy") is not None  # the limit itself still holds
    now[0] += 61
    assert limits.check("telegram-late") is None
    assert list(limits._recent) == ["telegram-late"]


async def test_tokens_per_day_holds_on_a_server_whose_streams_report_no_usage(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """llama-cpp-python streams without usage: the day's tokens are then the estimate's, not 0,
    so the limit still stops a person (and /usage shows what they spent)."""
    for _ in range(6):
        fake_llm.queue(Streamed(pieces_of("Here you are. " * 20), prompt_tokens=None))
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=1200))
    replies = [await ask(agent, dm("42", "tell me " + "more " * 150)) for _ in range(6)]
    await agent.aclose()
    today = agent.usage.of("telegram-42").day(datetime.now(UTC).date())
    assert today.calls >= 2 and today.prompt_tokens > 150 * today.calls
    assert today.completion_tokens >= 80 * today.calls
    assert "1,200 tokens for today" in replies[-1].text and "didn't save" in replies[-1].text
    assert replies[0].text.startswith("Here you are.")


async def test_wipe_erases_the_usage_the_running_bot_keeps(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """/usage after /wipe starts from nothing (the totals were kept in RAM), and the old totals
    never come back into the new usage file."""
    fake_llm.default = costly(600, 400)
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=5000))
    await ask(agent, dm("42", "one"))
    before = await ask(agent, dm("42", "/usage"))
    assert "1,000 tokens" in before.text and "in 1 model calls" in before.text
    await ask(agent, dm("42", "/wipe"))
    await ask(agent, dm("42", "/wipe confirm"))
    after = await ask(agent, dm("42", "/usage"))
    assert ": 0 tokens (0 read, 0 written) in 0 model calls" in after.text
    assert "5,000 tokens a day (5,000 left" in after.text
    await ask(agent, dm("42", "two"))
    again = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert "1,000 tokens (600 read, 400 written) in 1 model calls" in again.text


# ---- commands and the limits (issue 22, 8) -----------------------------------------------------


async def test_commands_count_towards_the_minute(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Before: with messages_per_minute = 3, 90 commands in 2.4 s were all answered, 30 of them
    /export."""
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(messages_per_minute=3))
    await ask(agent, dm("42", "hello"))  # something to export
    flood = ["/export", "/help", "/memory", "/status", "/export", "/usage"] * 5
    replies = await asyncio.gather(*(ask(agent, dm("42", text)) for text in flood))
    other = await ask(agent, dm("7", "/help"))
    await agent.aclose()
    answered = [r for r in replies if "faster than I take them" not in r.text]
    assert len(answered) == 2  # "hello" was the first of the minute's three
    assert sum(len(r.files) for r in replies) <= 2
    refused = [(text, r) for text, r in zip(flood, replies, strict=True) if r not in answered]
    assert all(r.private == (text in ("/export", "/memory", "/usage")) for text, r in refused)
    assert "I'm" in other.text  # another person's commands are theirs alone


async def test_heavy_commands_have_a_small_budget_of_their_own(
    fake_llm: FakeOpenAI, workspaces_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No other limit set: the default budget of heavy commands (10 an hour) still holds."""
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(admins=["telegram-9"]))
    await ask(agent, dm("42", "hello"))
    await ask(agent, dm("9", "hello"))
    with caplog.at_level(logging.INFO):
        exports = [await ask(agent, dm("42", "/export")) for _ in range(12)]
    light = await ask(agent, dm("42", "/help"))
    cancel = await ask(agent, dm("42", "/forget cancel"))
    admin = [await ask(agent, dm("9", "/export")) for _ in range(12)]
    await agent.aclose()
    assert [len(r.files) for r in exports] == [1] * 10 + [0] * 2
    refused = exports[-1]
    assert refused.private and "at most 10 of them an hour" in refused.text
    assert "ask again in" in refused.text and "UTC" in refused.text
    assert "I'm" in light.text and "nothing to cancel" in cancel.text  # not heavy
    assert all(len(r.files) == 1 for r in admin)
    assert "limit heavy_commands_per_hour refused a message of telegram-42" in caplog.text


async def test_a_turn_stops_its_tool_rounds_when_the_budget_is_spent(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Before: one message spent 24,080 tokens in 8 tool rounds, tokens_per_day 5,000."""
    fake_llm.default = lambda request: completion(
        None, [tool_call("search_history", {"query": "x"})], prompt_tokens=2800,
        completion_tokens=200,
    )  # fmt: skip
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=5000))
    reply = await ask(agent, dm("42", "look everything up"))
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert len(fake_llm.requests) == 2  # 3,000 then 6,000: the third round is not asked
    assert "I had to stop before finishing" in reply.text and "5,000 tokens" in reply.text
    assert "6,000 tokens" in usage.text
    records = [r for r in session_records(workspaces_dir, "42") if "role" in r]
    assert records[-1] == {**records[-1], "role": "assistant", "content": reply.text}


async def test_new_past_the_limit_waits_to_file_the_conversation(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Before: /new past the limit ran the consolidation at once. Now it waits, across a
    restart, for the first turn the person may have again (here: the operator raised the
    limit), which files the old conversation before it answers."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if is_consolidation(request):
            update = "## User Information\n- Has a cat named Miso\n"
            return save_memory_call("[2026-11-29 10:00] Ada talked about Miso.", update)
        return completion("Here you are.", prompt_tokens=900, completion_tokens=200)

    fake_llm.default = answer
    agent = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=1000))
    await ask(agent, dm("42", "my cat is called Miso"))  # 1,100 tokens: the day's are spent
    new = await ask(agent, dm("42", "/new"))
    await agent.aclose()
    assert "fresh conversation" in new.text and "I'll file it" in new.text
    assert fake_llm.consolidation_requests == []

    restarted = make_agent(fake_llm, workspaces_dir, limits=LimitsConfig(tokens_per_day=10_000))
    reply = await ask(restarted, dm("42", "hello again"))
    await restarted.aclose()
    assert reply.text == "Here you are."
    assert len(fake_llm.consolidation_requests) == 1
    assert "Miso" in (user_home(workspaces_dir, "42") / "HISTORY.md").read_text()
    sent = fake_llm.chat_requests[-1]["messages"]
    assert "Miso" not in json.dumps(sent[1:])  # the new conversation holds only the new message


async def test_consolidation_past_the_limit_waits_for_the_next_turn_allowed(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """Before: the turn that spent the day's tokens started a consolidation (more model calls)
    at once. Now the first turn allowed again makes room before it answers."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        if is_consolidation(request):
            update = "## User Information\n- Has a cat named Miso\n"
            return save_memory_call("[2026-11-29 10:00] Miso did many things.", update)
        long = len(fake_llm.chat_requests) == 2  # the second answer fills the window
        return completion("Tell me more! " + "blah " * (900 if long else 20))  # 15 tokens

    fake_llm.default = answer
    agent = make_agent(fake_llm, workspaces_dir, window=2000,
                       limits=LimitsConfig(tokens_per_day=20))  # fmt: skip
    await ask(agent, dm("42", "My cat Miso did a thing. " + "meow " * 300))
    second = await ask(agent, dm("42", "And then. " + "purr " * 50))  # 30 tokens: spent
    status = (await ask(agent, dm("42", "/status"))).text
    await agent.aclose()
    assert second.text.startswith("Tell me more!")
    assert "of 2,000 tokens (1" in status  # over 100 % of the window: consolidation is due…
    assert fake_llm.consolidation_requests == []  # …and waits

    restarted = make_agent(fake_llm, workspaces_dir, window=2000,
                           limits=LimitsConfig(tokens_per_day=100_000))  # fmt: skip
    later = await ask(restarted, dm("42", "and now?"))
    await restarted.aclose()
    assert later.text.startswith("Tell me more!")
    kinds = [is_consolidation(r) for r in fake_llm.requests]
    assert kinds[:2] == [False, False] and kinds[-1] is False  # made room first, then answered
    assert kinds[2:-1] and all(kinds[2:-1])
