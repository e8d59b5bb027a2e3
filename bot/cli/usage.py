"""`lightgrep usage`: what each person, and the whole bot, spent in a month or a day, per model:
tokens and, at [prices], money; a table to read, or CSV (`--csv`) for a spreadsheet.

It reads the usage files (memory/usage.py) one workspace after the other and prints a person's
rows as soon as their file is read, so thousands of people cost one file's memory at a time. It
imports neither the bot nor a client library and writes nothing, so it runs beside a live bot
and on a read-only folder. The money is worked out here, from the tokens kept and today's
[prices] (bot.usage.Prices), exactly as /usage works it out.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from bot.cli import common

if TYPE_CHECKING:  # imported when the command runs: `lightgrep --help` and the rest need none
    from bot.usage import Prices
    from memory.usage import Totals, UsageLog

WHOLE_BOT = "(whole bot)"  # no user key starts with "(": keys start with their platform's name
CSV_HEADER = (
    "person",
    "model",
    "calls",
    "prompt_tokens",
    "cached_prompt_tokens",
    "completion_tokens",
    "cost",
)
TABLE = "{:<28} {:<24} {:>7} {:>13} {:>11} {:>11} {:>10}"


def add_command(sub: Any, parent: argparse.ArgumentParser) -> None:
    """Add `usage` to `lightgrep`'s parser (`sub`: its add_subparsers())."""
    usage = sub.add_parser(
        "usage", parents=[parent], help="what each person spent, per model: tokens and cost"
    )
    when = usage.add_mutually_exclusive_group()
    when.add_argument(
        "--month", type=_month, metavar="YYYY-MM", help="that month (default: this one, UTC)"
    )
    when.add_argument("--day", type=_day, metavar="YYYY-MM-DD", help="that UTC day")
    usage.add_argument("--csv", action="store_true", help="CSV rows instead of a table")
    usage.set_defaults(func=cmd_usage)


@dataclass(frozen=True)
class Period:
    """A UTC day, or a month (`day` None)."""

    year: int
    month: int
    day: date | None = None

    def of(self, log: UsageLog) -> dict[str, Totals]:
        if self.day is not None:
            return log.day_by_model(self.day)
        return log.month_by_model(self.year, self.month)

    def forgotten(self) -> bool:
        """Before the previous month: what memory.usage drops when it folds a file."""
        from memory import clock

        today = clock.now().date()
        previous = (today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)
        return (self.year, self.month) < previous

    def __str__(self) -> str:
        if self.day is not None:
            return f"on {self.day.isoformat()}"
        return f"in {date(self.year, self.month, 1):%B %Y}"


def cmd_usage(args: argparse.Namespace) -> int:
    from bot.usage import GLOBAL_USAGE_FILE, Prices
    from memory.usage import UsageLog

    config = common.load(args.config, writer=False)
    base = common.workspaces_dir(config)
    prices = Prices.of(config)
    period = _period(args)
    if period.forgotten():
        print(
            f"lightgrep: the bot drops usage older than the previous month as it writes: the "
            f"figures {period} may be partial or missing",
            file=sys.stderr,
        )
    out = Rows(sys.stdout, prices, as_csv=args.csv)
    out.title(period, base)
    failed = False
    for key, path in _usage_files(base):
        try:
            usage = period.of(UsageLog(path))
        except OSError as exc:  # a folder this user may not read: say so, go on
            print(f"lightgrep: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
            failed = True
            continue
        out.person(key, usage)
    try:
        everyone = period.of(UsageLog(base / GLOBAL_USAGE_FILE))
    except OSError as exc:
        print(f"lightgrep: cannot read {base / GLOBAL_USAGE_FILE}: {exc}", file=sys.stderr)
        return common.EXIT_FAILURE
    out.whole_bot(everyone)
    return common.EXIT_FAILURE if failed else 0


class Rows:
    """The rows, written as they come: a table (with a title and the whole bot's total at the
    end), or CSV."""

    def __init__(self, stream: TextIO, prices: Prices, *, as_csv: bool) -> None:
        self.stream = stream
        self.prices = prices
        self.csv = csv.writer(stream) if as_csv else None
        self.people = 0
        from bot.usage import money

        self.money = money

    def title(self, period: Period, base: Path) -> None:
        if self.csv is not None:
            self.csv.writerow(CSV_HEADER)
            return
        print(f"Usage {period} (UTC), {base}", file=self.stream)
        if not self.prices.set:
            print("No [prices] are set: the cost column stays empty.", file=self.stream)
        heads = ("PERSON", "MODEL", "CALLS", "PROMPT", "CACHED", "ANSWER", "COST")
        print(TABLE.format(*heads), file=self.stream)

    def person(self, key: str, usage: dict[str, Totals]) -> None:
        if not usage:
            return
        self.people += 1
        for model, totals in sorted(self.prices.by_model(usage).items()):
            self._row(key, model, totals)

    def whole_bot(self, usage: dict[str, Totals]) -> None:
        """The bot's own file: every call, also of people wiped since (it names no one)."""
        if self.csv is None:
            people = "1 person" if self.people == 1 else f"{self.people:,} people"
            print(f"{people}. The whole bot (with people wiped since):", file=self.stream)
        merged = self.prices.by_model(usage)
        for model, totals in sorted(merged.items()):
            self._row(WHOLE_BOT, model, totals)
        if self.csv is None and self.prices.set:
            cost = self.prices.cost(merged)
            left = cost.unpriced_tokens
            unpriced = f" ({left:,} tokens of models with no price)" if left else ""
            print(f"The whole bot: {self.money(cost.amount)}{unpriced}.", file=self.stream)

    def _row(self, key: str, model: str, totals: Totals) -> None:
        cost = self.prices.of_model(model, totals)
        figures = (totals.calls, totals.prompt_tokens, totals.cached_prompt_tokens)
        if self.csv is not None:
            exact = "" if cost is None else _exact(cost)
            self.csv.writerow((key, model, *figures, totals.completion_tokens, exact))
            return
        numbers = (f"{n:,}" for n in (*figures, totals.completion_tokens))
        shown = "-" if cost is None else self.money(cost)
        print(TABLE.format(_printable(key), _printable(model), *numbers, shown), file=self.stream)


def _usage_files(base: Path) -> Iterator[tuple[str, Path]]:
    """Each workspace's key and usage file, in the folder's order, read lazily."""
    from memory.usage import USAGE_FILE
    from memory.workspace import Workspaces

    workspaces = Workspaces(base, writer=False)
    for key in workspaces.user_keys():
        yield key, workspaces.root_of(key) / USAGE_FILE


def _period(args: argparse.Namespace) -> Period:
    if args.day is not None:
        return Period(args.day.year, args.day.month, args.day)
    if args.month is not None:
        return Period(*args.month)
    from memory import clock

    today = clock.now().date()
    return Period(today.year, today.month)


def _month(text: str) -> tuple[int, int]:
    try:
        first = date.fromisoformat(f"{text}-01")
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a month as YYYY-MM, not {text!r}") from None
    return first.year, first.month


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a day as YYYY-MM-DD, not {text!r}") from None


def _exact(amount: Decimal) -> str:
    """The whole decimal, without an exponent: "0.000123", "12"."""
    return format(amount.normalize(), "f")


def _printable(text: str) -> str:
    """A user key as the operator's terminal may show it: platform ids are untrusted, and a
    control character in one must not move the cursor or recolour the table."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
