"""Dates in a question ("last week", "in March", "yesterday", "on 12 May", "2023") as spans of days.

A history entry's stamp says when it was filed, and its text may name other dates ("the check-up
is on 12 May"), so a span is looked for both ways: as ``needles``, lowered texts that a stamp or a
mention of a day in the span contains ("2026-05-" followed by a day of the span, "may" next to
one, "march", "2023"). Finding them is the same ``bytes.find`` scan as for keywords, at most two
per month of the span, so no date parsing of the whole file is needed. "Now" is given (UTC, as
the stamps are), so tests fix it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from memory.search.numbers import ORDINAL_DAYS

__all__ = ["DateNeedle", "DateSpan", "extract_dates"]

MONTHS = [
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
]  # fmt: skip
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
MAX_NAMED_DAYS = 14  # a longer span is looked for by its months' stamps and names only

_MONTH = (
    r"(?P<month>jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_COUNT = r"(?P<count>\d{1,3}|an?|one|two|three|four|five|six)"
# Longest forms first: "on 12 May 2024" before "May 2024" before "2024".
_PATTERNS = [
    ("iso", r"\b(?P<y>(?:19|20)\d\d)-(?P<m>[01]\d)-(?P<d>[0-3]\d)\b"),
    ("day_month", rf"\b(?:on\s+)?(?:the\s+)?{_DAY}(?:\s+of)?\s+{_MONTH}(?:,?\s+{_YEAR})?\b"),
    ("month_day", rf"\b(?:on\s+)?{_MONTH}\s+{_DAY}(?:,?\s+{_YEAR})?\b(?!:)"),
    ("month_year", rf"\b(?:in\s+|during\s+)?{_MONTH}\s+{_YEAR}\b"),
    ("month", rf"\b(?:in|during|last|this|of|early|late|mid|since)\s+{_MONTH}\b"),
    ("relative", r"\b(?P<which>last|this|past|previous)\s+(?P<unit>week|month|year)\b"),
    ("ago", rf"\b{_COUNT}\s+(?P<unit>day|week|month|year)s?\s+ago\b"),
    ("past_n", rf"\b(?:in\s+)?the\s+(?:past|last)\s+{_COUNT}\s+(?P<unit>day|week|month)s\b"),
    ("today", r"\b(?P<word>today|yesterday|tonight|this\s+morning)\b"),
    ("weekday", r"\b(?:on\s+|last\s+)?(?P<weekday>" + "|".join(WEEKDAYS) + r")\b"),
    ("year", rf"\b(?:in\s+|during\s+|since\s+)?{_YEAR}\b"),
]
_COMPILED = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in _PATTERNS]


# A day next to a month's name: "12", "12th" or, as a consolidated entry may write it, "twelfth"
# (longest words first, so "twenty-first" is not read as "first").
_DAY_WORDS = b"|".join(w.encode("ascii") for w in sorted(ORDINAL_DAYS, key=len, reverse=True))
_DAY_WRITTEN = rb"(?:([0-3]?\d)(?:st|nd|rd|th)?|(" + _DAY_WORDS + rb"))"
_DAY_AFTER = re.compile(rb" (?:the )?" + _DAY_WRITTEN + rb"(?![0-9a-z])")
_DAY_BEFORE = re.compile(rb"(?<![0-9a-z-])" + _DAY_WRITTEN + rb" (?:of )?$")
DAY_WORDS = True  # days written in words count (bench/recall_table.py turns it off: "before")
_DIGITS_AFTER = re.compile(rb" ()([0-3]?\d)(?:st|nd|rd|th)?(?![0-9a-z])")  # the old reading
_DIGITS_BEFORE = re.compile(rb"(?<![0-9])()([0-3]?\d)(?:st|nd|rd|th)? (?:of )?$")
_DAY_REACH = 24  # bytes before a month's name that "the twenty-seventh of " may take


def _day_of(m: re.Match[bytes]) -> int:
    digits, word = m.group(1), m.group(2)
    if not DAY_WORDS:
        return int(word)
    return int(digits) if digits else ORDINAL_DAYS[word.decode("ascii")]


@dataclass(frozen=True)
class DateNeedle:
    """A lowered text naming a date: "2026-05-" (ISO), "may" (a month's name) or "2023".

    ``days``, when set, are the days of the month it must name: the two digits after an ISO
    prefix, or a day just before or after a month's name ("12 may", "may 12th", "the twelfth of
    may").
    """

    text: str
    days: frozenset[int] | None = None

    def span_at(self, low: bytes, at: int) -> tuple[int, int] | None:
        """(start, end) of the date written at ``at`` in the lowered ``low``, if it is one."""
        raw, n = self.text.encode("ascii"), len(self.text)
        if at and low[at - 1 : at].isalnum():
            return None
        if raw.endswith(b"-"):  # ISO: a day must follow
            day = low[at + n : at + n + 2]
            if not day.isdigit() or low[at + n + 2 : at + n + 3].isdigit():
                return None
            return (at, at + n + 2) if self.days is None or int(day) in self.days else None
        if low[at + n : at + n + 1].isalnum():
            return None
        if self.days is None:
            return at, at + n
        after = (_DAY_AFTER if DAY_WORDS else _DIGITS_AFTER).match(low, at + n)
        if after and _day_of(after) in self.days:
            return at, after.end()
        before = (_DAY_BEFORE if DAY_WORDS else _DIGITS_BEFORE).search(
            low, max(0, at - (_DAY_REACH if DAY_WORDS else 10)), at
        )
        if before and _day_of(before) in self.days:
            return before.start(), at + n
        return None

    def find(self, low: bytes, start: int, end: int) -> int:
        """Position of the first date it names in ``low[start:end]``, or -1."""
        raw = self.text.encode("ascii")
        at = low.find(raw, start, end)
        while at >= 0 and self.span_at(low, at) is None:
            at = low.find(raw, at + 1, end)
        return at


@dataclass(frozen=True)
class DateSpan:
    """Days ``start`` up to (not including) ``end``, as the user named them (``label``)."""

    label: str
    start: date
    end: date

    @property
    def needles(self) -> tuple[DateNeedle, ...]:
        """What a stamp or a written date of a day in the span holds."""
        return _needles(self.start, self.end)

    def holds(self, stamp: str) -> bool:
        """Whether a ``YYYY-MM-DD…`` stamp falls in the span."""
        return self.start.isoformat() <= stamp[:10] < self.end.isoformat()


def extract_dates(text: str, now: datetime) -> tuple[str, list[DateSpan]]:
    """The text with its date expressions cut out, and the spans they name."""
    today = now.date()
    spans: list[DateSpan] = []
    for kind, pattern in _COMPILED:

        def cut(m: re.Match[str], kind: str = kind) -> str:
            span = _span(kind, m, today)
            if span is None:
                return m.group()
            spans.append(span)
            return " "

        text = pattern.sub(cut, text)
    return text, spans


def _month_number(name: str) -> int:
    return next(i for i, full in enumerate(MONTHS, start=1) if full.startswith(name[:3].lower()))


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word.lower()]


def _month_span(label: str, year: int, month: int) -> DateSpan:
    start = date(year, month, 1)
    end = date(year + month // 12, month % 12 + 1, 1)
    return DateSpan(label, start, end)


def _last_past(year: int | None, month: int, day: int | None, today: date) -> tuple[int, int]:
    """The year of the latest ``month``/``day`` not after today, unless a year was given."""
    if year is not None:
        return year, month
    if (month, day or 1) <= (today.month, today.day):
        return today.year, month
    return today.year - 1, month


def _span(kind: str, m: re.Match[str], today: date) -> DateSpan | None:
    label = " ".join(m.group().split())
    g = m.groupdict()
    try:
        if kind == "iso":
            day = date(int(g["y"]), int(g["m"]), int(g["d"]))
            return DateSpan(label, day, day + timedelta(days=1))
        if kind in ("day_month", "month_day"):
            month, number = _month_number(g["month"]), int(g["day"])
            year_given = int(g["year"]) if g.get("year") else None
            year, month = _last_past(year_given, month, number, today)
            day = date(year, month, number)
            return DateSpan(label, day, day + timedelta(days=1))
        if kind in ("month_year", "month"):
            month = _month_number(g["month"])
            year_given = int(g["year"]) if g.get("year") else None
            year, month = _last_past(year_given, month, None, today)
            return _month_span(label, year, month)
        if kind == "year":
            year = int(g["year"])
            return DateSpan(label, date(year, 1, 1), date(year + 1, 1, 1))
        if kind == "today":
            back = 1 if g["word"].lower() == "yesterday" else 0
            day = today - timedelta(days=back)
            return DateSpan(label, day, day + timedelta(days=1))
        if kind == "weekday":
            back = (today.weekday() - WEEKDAYS.index(g["weekday"].lower())) % 7 or 7
            day = today - timedelta(days=back)
            return DateSpan(label, day, day + timedelta(days=1))
        if kind == "relative":
            return _relative(label, g["which"].lower(), g["unit"].lower(), today)
        if kind == "ago":
            return _ago(label, _count(g["count"]), g["unit"].lower(), today)
        if kind == "past_n":
            n, unit = _count(g["count"]), g["unit"].lower()
            days = n * {"day": 1, "week": 7, "month": 30}[unit]
            return DateSpan(label, today - timedelta(days=days), today + timedelta(days=1))
    except ValueError:  # "31 February", "99 days ago" beyond the calendar: not a date
        return None
    return None


def _relative(label: str, which: str, unit: str, today: date) -> DateSpan:
    back = 0 if which == "this" else 1
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * back)
        return DateSpan(label, monday, monday + timedelta(days=7))
    if unit == "month":
        year, month = today.year, today.month - back
        if month == 0:
            year, month = year - 1, 12
        return _month_span(label, year, month)
    year = today.year - back
    return DateSpan(label, date(year, 1, 1), date(year + 1, 1, 1))


def _ago(label: str, n: int, unit: str, today: date) -> DateSpan:
    """The span of "N days/weeks/months/years ago": a day give or take one, else the whole unit."""
    if unit == "day":
        day = today - timedelta(days=n)
        return DateSpan(label, day - timedelta(days=1), day + timedelta(days=2))
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * n)
        return DateSpan(label, monday, monday + timedelta(days=7))
    if unit == "month":
        months = today.year * 12 + today.month - 1 - n
        return _month_span(label, months // 12, months % 12 + 1)
    year = today.year - n
    return DateSpan(label, date(year, 1, 1), date(year + 1, 1, 1))


def _needles(start: date, end: date) -> tuple[DateNeedle, ...]:
    days = (end - start).days
    if start.month == 1 and start.day == 1 and days >= 365:
        return tuple(DateNeedle(str(y)) for y in range(start.year, end.year))
    months: dict[tuple[int, int], set[int]] = {}
    for i in range(days):
        day = start + timedelta(days=i)
        months.setdefault((day.year, day.month), set()).add(day.day)
    whole = start.day == 1 and days >= 28  # whole months: their stamps, and the month's name
    out: list[DateNeedle] = []
    for (y, m), in_month in months.items():
        chosen = None if whole else frozenset(in_month)
        out.append(DateNeedle(f"{y:04d}-{m:02d}-", chosen))
        if whole or days <= MAX_NAMED_DAYS:
            out.append(DateNeedle(MONTHS[m - 1], chosen))
    return tuple(dict.fromkeys(out))
