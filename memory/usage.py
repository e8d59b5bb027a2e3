"""Tokens spent, as the provider reported them, kept on disk so a restart does not forget them.

One append-only JSONL file: a line per model call (`at`, `model`, `prompt_tokens`,
`completion_tokens`, and `cached_prompt_tokens` when the server read some of the prompt from its
cache), written whole or not at all, so a crash can tear at most the last line, which loading
skips. Lines older than the previous month are folded, on the first write after loading, into
one line per day and model (`day`, `model`, the sums, `calls`), so the file stays small and
still says what each model was asked, which prices need; that rewrite is atomic. A line without
`model` (written before models were recorded) is the unnamed model, `UNNAMED` ("").
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, append_line, open_fd, read_bytes

log = logging.getLogger(__name__)

USAGE_FILE = "usage.jsonl"
COMPACT_AFTER_LINES = 5000  # per-call lines before they are folded into days
UNNAMED = ""  # the model of a line that names none (see the module's docstring)


@dataclass(frozen=True)
class Totals:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    # Of prompt_tokens, those the server read from its cache (priced lower by some providers).
    cached_prompt_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Totals) -> Totals:
        return Totals(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
        )


ByModel = dict[str, Totals]  # model name (UNNAMED for none) → its totals


def total(by_model: Mapping[str, Totals]) -> Totals:
    """All models together."""
    summed = Totals()
    for totals in by_model.values():
        summed = summed + totals
    return summed


class UsageLog:
    """The usage file of one workspace (or of the whole bot), summed per UTC day and model.

    Reading it never writes: the operator's `lightgrep usage` reads a live bot's files."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._days: dict[date, ByModel] | None = None
        self._lines = 0  # lines in the file, to know when to fold them
        self._has_old_lines = False
        # The file ends with a whole line: known after loading it and after each append of
        # ours (the only writer), so an append need not read the last byte back first.
        self._ends_whole = False

    def record(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        when: datetime | None = None,
        *,
        model: str = UNNAMED,
        cached_prompt_tokens: int = 0,
    ) -> None:
        """Add one model call. Raises OSError when it cannot be written (nothing is torn)."""
        moment = clock.as_utc(when or clock.now())
        self._load()
        if self._lines >= COMPACT_AFTER_LINES or self._has_old_lines:
            self._compact(moment.date())
        days = self._load()  # after a compaction, the dict it made
        cached = min(cached_prompt_tokens, prompt_tokens)
        line: dict[str, Any] = {"at": clock.iso(moment)}
        if model:
            line["model"] = model
        line |= {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        if cached:
            line["cached_prompt_tokens"] = cached
        self._append(json.dumps(line).encode("ascii") + b"\n")
        models = days.setdefault(moment.date(), {})
        models[model] = models.get(model, Totals()) + Totals(
            prompt_tokens, completion_tokens, 1, cached
        )
        self._lines += 1

    def day(self, when: date) -> Totals:
        return total(self.day_by_model(when))

    def month(self, year: int, month: int) -> Totals:
        return total(self.month_by_model(year, month))

    def day_by_model(self, when: date) -> ByModel:
        return dict(self._load().get(when, {}))

    def month_by_model(self, year: int, month: int) -> ByModel:
        summed: ByModel = {}
        for day, models in self._load().items():
            if (day.year, day.month) == (year, month):
                for model, totals in models.items():
                    summed[model] = summed.get(model, Totals()) + totals
        return summed

    # ---- the file -----------------------------------------------------------------------

    def _load(self) -> dict[date, ByModel]:
        if self._days is not None:
            return self._days
        days: dict[date, ByModel] = {}
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
            day, model, totals = parsed
            models = days.setdefault(day, {})
            models[model] = models.get(model, Totals()) + totals
        self._days, self._lines = days, len(lines)
        self._ends_whole = raw.endswith(b"\n") or not raw
        first = _month_start(clock.now().date(), months_back=1)
        self._has_old_lines = any(day < first for day in days)
        return days

    def _compact(self, today: date) -> None:
        """Fold everything into one line per day and model, dropping days before the previous
        month."""
        first = _month_start(today, months_back=1)
        days = {day: models for day, models in self._load().items() if day >= first}
        lines = []
        for day, models in sorted(days.items()):
            for model, totals in sorted(models.items()):
                line: dict[str, Any] = {"day": day.isoformat()}
                if model:
                    line["model"] = model
                line |= {
                    "prompt_tokens": totals.prompt_tokens,
                    "completion_tokens": totals.completion_tokens,
                    "calls": totals.calls,
                }
                if totals.cached_prompt_tokens:
                    line["cached_prompt_tokens"] = totals.cached_prompt_tokens
                lines.append(json.dumps(line) + "\n")
        atomic_write_text(self.path, "".join(lines))
        self._days, self._lines, self._has_old_lines = days, len(lines), False
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


def _parse(line: bytes) -> tuple[date, str, Totals] | None:
    try:
        record: Any = json.loads(line)
        day = _day_of(record)
        if day is None:
            return None
        model = record.get("model", UNNAMED)
        if not isinstance(model, str):
            return None
        prompt = _count(record.get("prompt_tokens"))
        totals = Totals(
            prompt,
            _count(record.get("completion_tokens")),
            _count(record.get("calls", 1)),
            min(prompt, _count(record.get("cached_prompt_tokens", 0))),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return day, model, totals


def _day_of(record: Any) -> date | None:
    """The UTC day of a record: a folded line's "day", or the day of a call's "at" (None: a time
    that does not parse). Raises on a record of another shape, as the callers expect."""
    if "day" in record:
        return date.fromisoformat(record["day"])
    moment = clock.parse(record["at"])
    return None if moment is None else clock.as_utc(moment).date()


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def _month_start(today: date, months_back: int = 0) -> date:
    month = today.month - months_back
    year = today.year + (month - 1) // 12
    return date(year, (month - 1) % 12 + 1, 1)


SPEECH_FILE = "speech.jsonl"  # characters read aloud (voice replies): not tokens, a file apart


class SpeechLog:
    """Characters a person had read aloud ([voice]), summed per UTC day, kept beside usage.jsonl
    but apart from it (the speech server counts characters, the model tokens). One appended line
    per answer spoken, `{"at", "chars"}`; a torn last line is skipped when read. As in usage.jsonl,
    from COMPACT_AFTER_LINES lines on, or once days before the previous month are held, the next
    record first folds the file into a line per day (`{"day", "chars"}`) from the previous
    month on, atomically: the file stays small however long the person talks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._days: dict[date, int] | None = None
        self._lines = 0

    def record(self, chars: int, when: datetime | None = None) -> None:
        """Add one spoken answer. Raises OSError when it cannot be written (nothing is torn)."""
        moment = clock.as_utc(when or clock.now())
        days = self._load()
        first = _month_start(moment.date(), months_back=1)
        if self._lines >= COMPACT_AFTER_LINES or any(day < first for day in days):
            days = self._compact(first)
        line = {"at": clock.iso(moment), "chars": chars}
        append_line(self.path, json.dumps(line).encode("ascii") + b"\n", PRIVATE_FILE_MODE)
        days[moment.date()] = days.get(moment.date(), 0) + chars
        self._lines += 1

    def day(self, when: date) -> int:
        return self._load().get(when, 0)

    def _compact(self, first: date) -> dict[date, int]:
        days = {day: chars for day, chars in self._load().items() if day >= first}
        text = "".join(
            json.dumps({"day": day.isoformat(), "chars": chars}) + "\n"
            for day, chars in sorted(days.items())
        )
        atomic_write_text(self.path, text)
        self._days, self._lines = days, len(days)
        return days

    def _load(self) -> dict[date, int]:
        if self._days is None:
            days: dict[date, int] = {}
            try:
                raw = read_bytes(self.path)
            except FileNotFoundError:
                raw = b""
            lines = raw.splitlines()
            for line in lines:
                try:
                    record: Any = json.loads(line)
                    day = _day_of(record)
                    chars = _count(record["chars"])
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue  # a torn or foreign line
                if day is not None:
                    days[day] = days.get(day, 0) + chars
            self._days, self._lines = days, len(lines)
        return self._days
