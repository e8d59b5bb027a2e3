"""Tokens spent, as the provider reported them, kept on disk so a restart does not forget them.

One append-only JSONL file: a line per model call (`at`, `prompt_tokens`, `completion_tokens`),
written whole or not at all, so a crash can tear at most the last line, which loading skips.
Lines older than the previous month are folded, on the first write after loading, into one
line per day (`day`, the two sums, `calls`), so the file stays small; that rewrite is atomic.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, open_fd, read_bytes

log = logging.getLogger(__name__)

USAGE_FILE = "usage.jsonl"
COMPACT_AFTER_LINES = 5000  # per-call lines before they are folded into days


@dataclass(frozen=True)
class Totals:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
        )


class UsageLog:
    """The usage file of one workspace (or of the whole bot), summed per UTC day."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._days: dict[date, Totals] | None = None
        self._lines = 0  # lines in the file, to know when to fold them
        self._has_old_lines = False
        # The file ends with a whole line: known after loading it and after each append of
        # ours (the only writer), so an append need not read the last byte back first.
        self._ends_whole = False

    def record(
        self, prompt_tokens: int, completion_tokens: int, when: datetime | None = None
    ) -> None:
        """Add one model call. Raises OSError when it cannot be written (nothing is torn)."""
        moment = clock.as_utc(when or clock.now())
        self._load()
        if self._lines >= COMPACT_AFTER_LINES or self._has_old_lines:
            self._compact(moment.date())
        days = self._load()  # after a compaction, the dict it made
        line = {
            "at": clock.iso(moment),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
        }
        self._append(json.dumps(line).encode("ascii") + b"\n")
        days[moment.date()] = days.get(moment.date(), Totals()) + Totals(
            prompt_tokens, completion_tokens, 1
        )
        self._lines += 1

    def day(self, when: date) -> Totals:
        return self._load().get(when, Totals())

    def month(self, year: int, month: int) -> Totals:
        total = Totals()
        for day, totals in self._load().items():
            if (day.year, day.month) == (year, month):
                total = total + totals
        return total

    # ---- the file -----------------------------------------------------------------------

    def _load(self) -> dict[date, Totals]:
        if self._days is not None:
            return self._days
        days: dict[date, Totals] = {}
        try:
            raw = read_bytes(self.path)
        except FileNotFoundError:
            raw = b""
        lines = [line for line in raw.split(b"\n") if line.strip()]
        for number, line in enumerate(lines, start=1):
            parsed = _parse(line)
            if parsed is None:
                log.warning("%s: skipping unreadable line %d", self.path, number)
                continue
            day, totals = parsed
            days[day] = days.get(day, Totals()) + totals
        self._days, self._lines = days, len(lines)
        self._ends_whole = raw.endswith(b"\n") or not raw
        first = _month_start(clock.now().date(), months_back=1)
        self._has_old_lines = any(day < first for day in days)
        return days

    def _compact(self, today: date) -> None:
        """Fold everything into one line per day, dropping days before the previous month."""
        first = _month_start(today, months_back=1)
        days = {day: totals for day, totals in self._load().items() if day >= first}
        text = "".join(
            json.dumps({
                "day": day.isoformat(),
                "prompt_tokens": totals.prompt_tokens,
                "completion_tokens": totals.completion_tokens,
                "calls": totals.calls,
            }) + "\n"
            for day, totals in sorted(days.items())
        )
        atomic_write_text(self.path, text)
        self._days, self._lines, self._has_old_lines = days, len(days), False
        self._ends_whole = True

    def _append(self, data: bytes) -> None:
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        try:
            if not self._ends_whole:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # after a torn line: never glue a record to it
            self._ends_whole = False  # until this append is known to be whole
            append_all(fd, data)
            self._ends_whole = True
        finally:
            os.close(fd)


def _parse(line: bytes) -> tuple[date, Totals] | None:
    try:
        record: Any = json.loads(line)
        if "day" in record:
            day = date.fromisoformat(record["day"])
        else:
            moment = clock.parse(record["at"])
            if moment is None:
                return None
            day = clock.as_utc(moment).date()
        totals = Totals(
            _count(record.get("prompt_tokens")),
            _count(record.get("completion_tokens")),
            _count(record.get("calls", 1)),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return day, totals


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def _month_start(today: date, months_back: int = 0) -> date:
    month = today.month - months_back
    year = today.year + (month - 1) // 12
    return date(year, (month - 1) % 12 + 1, 1)
