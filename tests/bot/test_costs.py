"""What the model calls cost: [prices] per model, the model and the cached prompt tokens of every
call kept in usage.jsonl (through its daily folding too), the money /usage shows beside the
tokens, and the cost caps of [limits]; through the real Agent and openai client against the fake
provider, which reports cached tokens as OpenAI does (usage.prompt_tokens_details)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from bot.config import ConfigError, LimitsConfig, Price, load_config
from bot.llm.client import LLMClient
from bot.usage import Prices, money
from memory.usage import USAGE_FILE, Totals, UsageLog
from tests.rigs.agent import ask, dm, make_agent, session_records, user_home
from tests.rigs.fakes.openai_server import FakeOpenAI, Streamed, completion, tool_call

# Per million tokens: a prompt token 2.5, one read from the cache 1.25, an answer token 10.
PRICES = {"fake-model": Price(input=2.5, output=10.0, cached_input=1.25)}


def cost_of(prompt: int, cached: int, written: int) -> Decimal:
    """What the fake's reported usage costs at PRICES, worked out by hand."""
    spent = (prompt - cached) * Decimal("2.5") + cached * Decimal("1.25") + written * 10
    return spent / 1_000_000


def costly(prompt: int, cached: int, written: int) -> Any:
    return lambda request: completion(
        "Here you are.", prompt_tokens=prompt, completion_tokens=written, cached_tokens=cached
    )


# ---- what the client reads ------------------------------------------------------------------


async def test_the_client_reads_the_model_and_cached_tokens_whole_and_streamed(
    fake_llm: FakeOpenAI,
) -> None:
    fake_llm.default = costly(prompt=4000, cached=3000, written=500)
    client = LLMClient(
        model="fake-model", base_url=fake_llm.base_url, api_key="test", max_retries=0, timeout_s=5
    )
    asked = [{"role": "user", "content": "hello"}]
    try:
        whole = await client.chat(asked)
        pieces: list[str] = []

        async def keep(text: str) -> None:
            pieces.append(text)

        streamed = await client.stream(asked, on_text=keep)
    finally:
        await client.aclose()
    assert fake_llm.streamed == 1 and "".join(pieces) == "Here you are."
    for result in (whole, streamed):
        assert (result.model, result.prompt_tokens, result.cached_prompt_tokens) == (
            "fake-model", 4000, 3000,
        )  # fmt: skip
        assert result.completion_tokens == 500


# ---- the usage file ----------------------------------------------------------------------------


def test_each_call_keeps_its_model_and_cached_tokens_through_the_folding(tmp_path: Path) -> None:
    path = tmp_path / USAGE_FILE
    now = datetime.now(UTC)
    ancient = now.replace(year=now.year - 2)
    log = UsageLog(path)
    log.record(1000, 0, ancient, model="big")
    log.record(100, 10, now, model="big", cached_prompt_tokens=40)
    log.record(200, 20, now, model="small")
    log.record(300, 30, now, model="big", cached_prompt_tokens=60)
    reloaded = UsageLog(path)
    reloaded.record(5, 5, now, model="small")  # the first write after loading folds the file
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    day = now.date().isoformat()
    assert lines[:2] == [
        {"day": day, "model": "big", "prompt_tokens": 400, "completion_tokens": 40, "calls": 2,
         "cached_prompt_tokens": 100},
        {"day": day, "model": "small", "prompt_tokens": 200, "completion_tokens": 20, "calls": 1},
    ]  # fmt: skip
    assert lines[2]["model"] == "small" and "at" in lines[2]
    for usage in (reloaded, UsageLog(path)):  # in RAM, and read again
        assert usage.day_by_model(now.date()) == {
            "big": Totals(400, 40, 2, 100),
            "small": Totals(205, 25, 2, 0),
        }
        assert usage.month(now.year, now.month) == Totals(605, 65, 4, 100)


def test_a_line_written_before_models_were_kept_counts_as_the_llm_model(tmp_path: Path) -> None:
    """Before this version every call went to [llm] model: its lines name no model."""
    path = tmp_path / USAGE_FILE
    now = datetime.now(UTC)
    path.write_text(
        json.dumps({"at": now.isoformat(), "prompt_tokens": 1000, "completion_tokens": 100}) + "\n"
    )
    log = UsageLog(path)
    log.record(2000, 200, now, model="fake-model", cached_prompt_tokens=1000)
    log.record(50, 5, now, model="unpriced-model")
    prices = Prices(PRICES, "fake-model")
    usage = log.day_by_model(now.date())
    assert prices.by_model(usage) == {
        "fake-model": Totals(3000, 300, 2, 1000),
        "unpriced-model": Totals(50, 5, 1, 0),
    }
    cost = prices.cost(usage)
    assert cost.amount == cost_of(1000, 0, 100) + cost_of(2000, 1000, 200)
    assert cost.unpriced_tokens == 55


def test_money_is_shown_as_people_read_it() -> None:
    assert money(Decimal("0.5")) == "$0.50"
    assert money(Decimal("0.012345")) == "$0.0123"
    assert money(Decimal("1234.567")) == "$1,234.57"
    assert money(Decimal("0.00001")) == "<$0.0001"
    assert money(Decimal(0)) == "$0.00"


# ---- the config ----------------------------------------------------------------------------------


def test_prices_are_read_in_either_toml_form_and_mistakes_are_one_line(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        '[llm]\nmodel = "gpt-4o-mini"\n[limits]\ncost_per_day = 0.5\n'
        '[prices]\n"gpt-4o-mini" = { input = 0.15, output = 0.6, cached_input = 0.075 }\n'
        '[prices."qwen2.5:7b"]\ninput = 0\noutput = 0\n'
    )
    loaded = load_config(config, env={})
    assert loaded.prices == {
        "gpt-4o-mini": Price(0.15, 0.6, 0.075),
        "qwen2.5:7b": Price(0.0, 0.0, None),
    }
    assert loaded.limits.cost_per_day == 0.5
    for body, problem in (
        ('[prices]\n"m" = { input = 1 }\n', "[prices] 'm' has no output price"),
        ('[prices]\n"m" = { input = -1, output = 1 }\n', "input must be a number of 0 or more"),
        ('[prices]\n"m" = { input = 1, output = 1, cached = 1 }\n', "did you mean 'cached_input'"),
        ('[prices]\n"m" = 0.15\n', "[prices] 'm' must be a table such as"),
        ("[limits]\ncost_per_month = -1\n", "[limits] cost_per_month must be a number of 0"),
        # A cap with no price for the bot's model would never be reached: refused, not ignored.
        ("[limits]\nglobal_cost_per_day = 5\n", "needs a price for [llm] model 'gpt-4o-mini'"),
        ("[price]\n", "unknown section [price] (did you mean [prices]?)"),
    ):
        config.write_text(body)
        with pytest.raises(ConfigError) as info:
            load_config(config, env={})
        assert problem in str(info.value) and "\n" not in str(info.value), str(info.value)


# ---- /usage and the caps, through the bot --------------------------------------------------------


async def test_usage_shows_the_cost_beside_the_tokens(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = costly(prompt=4000, cached=3000, written=500)
    limits = LimitsConfig(cost_per_day=1.0, cost_per_month=20.0)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    for text in ("one", "two"):
        assert (await ask(agent, dm("42", text))).text == "Here you are."
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert fake_llm.streamed == 2  # the cached tokens came in the stream's usage chunk
    spent = cost_of(8000, 6000, 1000)  # $0.005 + $0.0075 + $0.01
    assert money(spent) == "$0.0225"
    shown = (
        "9,000 tokens (8,000 read, 6,000 of them from the server's cache, 1,000 written) in 2 "
        "model calls, costing $0.0225."
    )
    assert usage.text.count(shown) == 2  # today, and this month
    assert "$1.00 a day ($0.9775 left; it resets at midnight UTC" in usage.text
    assert "$20.00 a month ($19.98 left; it resets on 1 " in usage.text
    lines = (user_home(workspaces_dir, "42") / USAGE_FILE).read_text().splitlines()
    assert [json.loads(line)["model"] for line in lines] == ["fake-model", "fake-model"]
    assert [json.loads(line)["cached_prompt_tokens"] for line in lines] == [3000, 3000]


async def test_usage_says_which_tokens_have_no_price(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = costly(prompt=1000, cached=0, written=100)
    prices = {"another-model": Price(1.0, 1.0)}
    agent = make_agent(fake_llm, workspaces_dir, prices=prices)
    await ask(agent, dm("42", "hello"))
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert "costing $0.00 (and 1,100 tokens of a model with no price set)." in usage.text


async def test_no_prices_no_money(fake_llm: FakeOpenAI, workspaces_dir: Path) -> None:
    agent = make_agent(fake_llm, workspaces_dir)
    await ask(agent, dm("42", "hello"))
    usage = await ask(agent, dm("42", "/usage"))
    await agent.aclose()
    assert "costing" not in usage.text and "$" not in usage.text
    assert "15 tokens (10 read, 5 written) in 1 model calls." in usage.text


async def test_cost_per_day_refuses_without_saving_and_survives_a_restart(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = costly(prompt=4000, cached=0, written=0)  # $0.01 a call
    limits = LimitsConfig(cost_per_day=0.02)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    replies = [await ask(agent, dm("42", f"message {i}")) for i in range(3)]
    other = await ask(agent, dm("7", "someone else"))
    await agent.aclose()
    assert [r.text for r in replies[:2]] == ["Here you are.", "Here you are."]
    refused = replies[2].text
    assert "You've used what I may spend on you today ($0.02)" in refused
    assert "didn't save this message" in refused and "after midnight UTC (in " in refused
    assert other.text == "Here you are."  # one person's cap is theirs alone
    texts = [r["content"] for r in session_records(workspaces_dir, "42") if r.get("role") == "user"]
    assert [t.rsplit("\n", 1)[-1] for t in texts] == ["message 0", "message 1"]
    assert len(fake_llm.requests) == 3

    again = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    still = await ask(again, dm("42", "after a restart"))
    await again.aclose()
    assert "what I may spend on you today" in still.text
    assert len(fake_llm.requests) == 3


async def test_cost_per_month_counts_the_earlier_days_of_the_month(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    now = datetime.now(UTC)
    earlier = now - timedelta(days=1) if now.day > 1 else now  # this month, maybe today
    home = user_home(workspaces_dir, "42")
    home.mkdir(mode=0o700)
    UsageLog(home / USAGE_FILE).record(40_000, 0, earlier, model="fake-model")  # $0.10
    limits = LimitsConfig(cost_per_month=0.1)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    reply = await ask(agent, dm("42", "hello"))
    await agent.aclose()
    assert "You've used what I may spend on you this month ($0.10)" in reply.text
    assert "when the month is over (on 1 " in reply.text and "UTC, in " in reply.text
    assert not fake_llm.requests


async def test_global_cost_per_day_stops_everyone_but_admins(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    fake_llm.default = costly(prompt=4000, cached=0, written=0)  # $0.01 a call
    limits = LimitsConfig(global_cost_per_day=0.02, admins=["telegram-1"])
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    first = await ask(agent, dm("42", "one"))
    second = await ask(agent, dm("7", "two"))
    third = await ask(agent, dm("8", "three"))
    admin = await ask(agent, dm("1", "I run this bot"))
    await agent.aclose()
    assert first.text == second.text == "Here you are."
    assert "I've used all my operator allows me to spend today, for everyone" in third.text
    assert admin.text == "Here you are."


async def test_global_cost_per_month_counts_the_whole_bots_month(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The bot's own file holds the spending of people wiped since: it still counts."""
    UsageLog(workspaces_dir / ".usage.jsonl").record(39_000, 100, model="fake-model")  # $0.0985
    limits = LimitsConfig(global_cost_per_month=0.1)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    fake_llm.default = costly(prompt=1000, cached=0, written=0)  # $0.0025
    first = await ask(agent, dm("42", "one"))  # $0.0985 spent: under the cap
    second = await ask(agent, dm("7", "two"))  # $0.101 spent
    await agent.aclose()
    assert first.text == "Here you are."
    assert "I've used all my operator allows me to spend this month, for everyone" in second.text
    assert "when the month is over (on 1 " in second.text
    assert len(fake_llm.requests) == 1


async def test_a_turn_stops_its_tool_rounds_when_the_cost_cap_is_spent(
    fake_llm: FakeOpenAI, workspaces_dir: Path
) -> None:
    """The streamed tool round costs the cap: the turn stops before the next round, and says so."""
    search = tool_call("search_history", {"query": "tea"})
    fake_llm.queue(
        Streamed([], tool_calls=[search], prompt_tokens=4000, completion_tokens=0),
        Streamed(["never"], prompt_tokens=10),
    )
    limits = LimitsConfig(cost_per_day=0.01)
    agent = make_agent(fake_llm, workspaces_dir, limits=limits, prices=PRICES)
    reply = await ask(agent, dm("42", "what did I say about tea?"))
    await agent.aclose()
    assert "I had to stop before finishing: this used up what I may spend on you today" in (
        reply.text
    )
    assert len(fake_llm.requests) == 1


def test_the_operators_table_shows_a_hostile_key_without_its_control_characters() -> None:
    """Platform ids are untrusted: a key must not recolour or rewrite the operator's terminal."""
    from bot.cli.usage import Rows

    out = io.StringIO()
    rows = Rows(out, Prices(PRICES, "fake-model"), as_csv=False)
    rows.person("cli-\x1b[2J\x1b[31mroot\r", {"fake-model": Totals(4000, 0, 1, 0)})
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()
    assert out.getvalue().startswith("cli-\\x1b[2J\\x1b[31mroot\\r ")
    assert out.getvalue().split()[-1] == "$0.01"
