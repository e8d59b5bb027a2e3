"""What the model cost, through the real bot (`lightgrep chat`) and the operator's `lightgrep
usage`, against the fake provider reporting its usage with cached prompt tokens as OpenAI does:
the money /usage and the table and CSV show is the fake's reported tokens at [prices], exactly;
a cost cap refuses the message that finds it spent."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from tests.rigs.cli import run_chat, run_cli, write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion

PROMPT, CACHED, WRITTEN = 4000, 3000, 500  # what the fake reports for every call
SETTINGS = """
[limits]
cost_per_day = 0.02
[prices]
"fake-model" = { input = 2.5, output = 10, cached_input = 1.25 }
"""


def cost(calls: int) -> Decimal:
    """`calls` of the fake's at the prices above, by hand: $0.01125 each."""
    each = (PROMPT - CACHED) * Decimal("2.5") + CACHED * Decimal("1.25") + WRITTEN * 10
    return calls * each / 1_000_000


async def test_usage_and_lightgrep_usage_show_what_the_fake_reported_at_the_prices(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.default = lambda request: completion(
        "Noted.", prompt_tokens=PROMPT, completion_tokens=WRITTEN, cached_tokens=CACHED
    )
    config = write_config(tmp_path, fake_llm, SETTINGS)
    said = b"one\ntwo\nthree\n/usage\n"
    code, out, err = await run_chat(config, child_env, said, "--user", "ada")
    assert code == 0, err
    ada_calls = len(fake_llm.requests)
    assert ada_calls == 2  # the third message found today's $0.02 spent: no model call
    assert fake_llm.streamed == 2  # the usage, cached tokens too, came as the stream's last chunk
    assert out.count("Noted.") == 2
    assert "You've used what I may spend on you today ($0.02). I didn't save this message" in out
    shown = (
        "9,000 tokens (8,000 read, 6,000 of them from the server's cache, 1,000 written) in 2 "
        "model calls, costing $0.0225."
    )
    assert out.count(shown) == 2, out  # today and this month
    assert "$0.02 a day ($0.00 left; it resets at midnight UTC" in out

    code, out, err = await run_chat(config, child_env, b"hello\n", "--user", "bob")
    assert code == 0 and "Noted." in out, err
    bob_calls = len(fake_llm.requests) - ada_calls
    everyone = ada_calls + bob_calls

    code, out, err = run_cli(child_env, "usage", "--config", str(config), "--csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))

    def row(person: str, calls: int) -> list[str]:
        tokens = [PROMPT * calls, CACHED * calls, WRITTEN * calls]
        return [person, "fake-model", str(calls), *map(str, tokens), str(cost(calls))]

    assert rows == [
        ["person", "model", "calls", "prompt_tokens", "cached_prompt_tokens",
         "completion_tokens", "cost"],
        row("cli-ada", ada_calls),
        row("cli-bob", bob_calls),
        row("(whole bot)", everyone),
    ]  # fmt: skip
    assert Decimal(rows[1][-1]) == Decimal("0.0225")

    today = datetime.now(UTC).date()
    code, table, err = run_cli(child_env, "usage", "--config", str(config))
    assert code == 0, err
    assert f"Usage in {today:%B %Y} (UTC)" in table
    [ada] = [line for line in table.splitlines() if line.startswith("cli-ada")]
    assert ada.split() == ["cli-ada", "fake-model", "2", "8,000", "6,000", "1,000", "$0.0225"]
    assert "2 people. The whole bot" in table
    assert "The whole bot: $0.0338." in table  # $0.03375, to four places

    code, by_day, err = run_cli(child_env, "usage", "--config", str(config), "--day", str(today))
    assert code == 0 and by_day.replace(f"on {today}", f"in {today:%B %Y}") == table, err
    code, old, err = run_cli(child_env, "usage", "--config", str(config), "--month", "2001-01")
    assert code == 0 and old.startswith("Usage in January 2001 (UTC)")
    assert "drops usage older than the previous month" in err and "January 2001" in err
    code, _, err = run_cli(child_env, "usage", "--config", str(config), "--month", "2026-13")
    assert code == 2 and "must be a month as YYYY-MM, not '2026-13'" in err

    # It only reads: on a folder nobody may write to, the same rows.
    workspaces = tmp_path / "workspaces"
    folders = [workspaces, *(p for p in workspaces.rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(0o500)
    try:
        code, again, err = run_cli(
            child_env, "usage", "--config", str(config), "--csv", read_only=True
        )
    finally:
        for folder in folders:
            folder.chmod(0o700)
    assert code == 0 and again == out, err

    # A usage file that is a link (planted to read some other file) is never followed: one line
    # says so, the other people are still shown, and the exit code says not all was read.
    elsewhere = tmp_path / "secret.jsonl"
    elsewhere.write_text(
        '{"at": "2026-12-01T00:00:00+00:00", "prompt_tokens": 1, "completion_tokens": 1}\n'
    )
    bob = workspaces / "cli-bob" / "usage.jsonl"
    bob.unlink()
    bob.symlink_to(elsewhere)
    code, partial, err = run_cli(child_env, "usage", "--config", str(config), "--csv")
    assert code == 1 and err.startswith("lightgrep: cannot read ") and err.count("\n") == 1, err
    assert "cli-bob" in err
    assert [r[0] for r in csv.reader(io.StringIO(partial))][1:] == ["cli-ada", "(whole bot)"]
