"""Reading `when`: "in 10 minutes", "tomorrow at 9", "friday 18:30", "2026-12-24 18:00",
"every day at 8:00", "every monday at 9" and their kin, in the person's time zone.

`/remind <when> <what>` reads the longest `when` its text begins with and keeps the rest as
what to remind of (`split`); the model's `remind` tool gives `when` alone (`parse`). What cannot
be read, or lies in the past, is a WhenError whose message names the forms that work, so nothing
is ever set from a guess; one beyond what a datetime holds ("in 99999999999999999999 days",
"0001-01-01T00:00+23:59") is too far ahead, or passed, like any other. A day without a time is
at 9:00; a time without a day is its next coming (today, or tomorrow once it has passed today).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from bot.reminders.repeat import DAILY, INTERVAL, WEEKLY, Repeat, period_words

FORMS = (
    "in 10 minutes, in 2 hours, at 18:30, tomorrow at 9, friday 18:30, "
    "2026-12-24 18:00, every day at 8:00, every monday at 9, every 2 hours"
)
EXAMPLE = "/remind tomorrow at 9 call the dentist"
DEFAULT_TIME = (9, 0)  # a day without a time
LONGEST = timedelta(days=3660)  # about ten years ahead at most
BEYOND_S = int(LONGEST.total_seconds()) + 1  # any longer duration counts as this (never overflows)

WEEKDAYS = {
    "monday": 0, "mon": 0, "tuesday": 1, "tue": 1, "tues": 1, "wednesday": 2, "wed": 2,
    "thursday": 3, "thu": 3, "thur": 3, "thurs": 3, "friday": 4, "fri": 4, "saturday": 5,
    "sat": 5, "sunday": 6, "sun": 6,
}  # fmt: skip
MONTHS = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4,
    "apr": 4, "may": 5, "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8,
    "september": 9, "sep": 9, "sept": 9, "october": 10, "oct": 10, "november": 11, "nov": 11,
    "december": 12, "dec": 12,
}  # fmt: skip
UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400, "w": 604800, "week": 604800, "weeks": 604800,
}  # fmt: skip
COUNTS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50,
}  # fmt: skip
PARTS_OF_DAY = {
    "morning": (9, 0), "noon": (12, 0), "midday": (12, 0), "afternoon": (15, 0),
    "evening": (18, 0), "night": (21, 0), "tonight": (21, 0), "midnight": (0, 0),
}  # fmt: skip
LATER_PARTS = ("afternoon", "evening", "night", "tonight")  # "at 7 in the evening" is 19:00
FILLER = ("to", "that", "about", "of", ":", "-", ",", "—")  # between when and what

_TOKEN = re.compile(
    r"\d{4}-\d{1,2}-\d{1,2}(?:t\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}[:.]\d{2}(?::\d{2})?|\d+|[^\W\d_]+(?:'[^\W\d_]+)?|\S"
)


class WhenError(ValueError):
    """A `when` that cannot be read or lies in the past; the message says what works."""


@dataclass(frozen=True)
class When:
    first: datetime  # UTC
    repeat: Repeat | None = None
    default_time: bool = False  # a day was given without a time: DEFAULT_TIME was taken


def not_understood(text: str) -> str:
    shown = " ".join(text.split())[:60]
    said = f"I couldn't tell when “{shown}” is." if shown else "Tell me when, then what."
    return f"{said} Start with one of: {FORMS}. For example: {EXAMPLE}"


def parse(text: str, now: datetime, zone: ZoneInfo) -> When:
    """The whole of `text` as a `when` (the model's tool); WhenError otherwise."""
    when, rest = split(text, now, zone)
    if rest.strip(" .!"):
        raise WhenError(not_understood(text))
    return when


def split(text: str, now: datetime, zone: ZoneInfo) -> tuple[When, str]:
    """(the `when` that `text` begins with, the rest of the text); WhenError if it begins with
    none, or with one that lies in the past."""
    lowered = text.lower()
    tokens = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(lowered)]
    parser = _Parser([t for t, _, _ in tokens], now, zone)
    if parser.peek() == "me":  # "/remind me in 10 minutes to …"
        parser.i += 1
    start = parser.i
    when = parser.when()
    if when is None or parser.i == start or parser.unread_time():
        raise WhenError(not_understood(text))
    end = tokens[parser.i - 1][2]
    rest = text[end:].strip()
    words = rest.split(maxsplit=1)
    while words and words[0].lower() in FILLER:
        rest = words[1] if len(words) > 1 else ""
        words = rest.split(maxsplit=1)
    return when, rest.strip()


class _Parser:
    """A small recursive descent over the lowered words; each rule returns None (and leaves
    `i` where it was) when the words there are not one of its forms."""

    def __init__(self, tokens: list[str], now: datetime, zone: ZoneInfo) -> None:
        self.tokens = tokens
        self.i = 0
        self.now = now.astimezone(UTC)
        self.zone = zone
        self.local_now = now.astimezone(zone)

    def peek(self, ahead: int = 0) -> str:
        index = self.i + ahead
        return self.tokens[index] if index < len(self.tokens) else ""

    def unread_time(self) -> bool:
        """Whether what follows the `when` read looks like a time it could not read ("at
        25:00"): then nothing is set, rather than a guess at 9:00."""
        word = self.peek()
        return word in ("at", "@") or bool(re.fullmatch(r"\d{1,2}[:.]\d{2}(?::\d{2})?", word))

    def take(self, *words: str) -> bool:
        if self.peek() in words:
            self.i += 1
            return True
        return False

    def when(self) -> When | None:
        word = self.peek()
        if word in ("every", "each", "daily", "weekly", "hourly"):
            return self.repeat()
        if word == "in":
            return self.after()
        return self.moment()

    # ---- in 10 minutes ---------------------------------------------------------------

    def after(self) -> When | None:
        saved = self.i
        self.take("in")
        seconds = self.duration()
        if seconds is None:
            self.i = saved
            return None
        return When(self._checked(self.now + timedelta(seconds=seconds)))

    def duration(self) -> int | None:
        """ "10 minutes", "2h 30m", "an hour and 15 minutes", "half an hour": seconds."""
        total, found = 0, False
        while True:
            saved = self.i
            if found:
                self.take("and", ",")
            part = self._duration_part()
            if part is None:
                self.i = saved
                break
            total, found = min(total + part, BEYOND_S), True
        return total if found and total > 0 else None

    def _duration_part(self) -> int | None:
        saved = self.i
        if self.take("half"):
            if self.take("an", "a") and self.take("hour"):
                return 1800
            self.i = saved
            return None
        count = self.count()
        if count is not None and self.peek() in UNITS:
            self.i += 1
            seconds = count * UNITS[self.tokens[self.i - 1]]
            return round(seconds) if seconds < BEYOND_S else BEYOND_S  # inf too
        self.i = saved
        return None

    def count(self) -> float | None:
        word = self.peek()
        if word.isdigit():
            self.i += 1
            return float(word)
        if word in COUNTS:
            self.i += 1
            return float(COUNTS[word])
        return None

    # ---- every day at 8:00 -----------------------------------------------------------

    def repeat(self) -> When | None:
        saved = self.i
        word = self.peek()
        self.i += 1
        rule: Repeat | None = None
        if word == "hourly":
            rule = Repeat(INTERVAL, seconds=3600)
        elif word == "daily":
            rule = self._daily(self.time_of_day())
        elif word == "weekly":
            self.take("on")
            weekday = WEEKDAYS.get(self.peek())
            if weekday is None:
                self.i = saved
                return None
            self.i += 1
            rule = self._weekly(weekday, self.time_of_day())
        else:
            rule = self._every()
        if rule is None:
            self.i = saved
            return None
        if rule.kind == INTERVAL:
            first = self.now + timedelta(seconds=rule.seconds)
        else:
            first = rule.next_after(self.now, self.now)
        return When(self._checked(first), rule)

    def _every(self) -> Repeat | None:
        word = self.peek()
        if word in WEEKDAYS:
            self.i += 1
            return self._weekly(WEEKDAYS[word], self.time_of_day())
        if word in ("day", "morning", "evening", "night", "afternoon"):
            self.i += 1
            part = PARTS_OF_DAY.get(word)
            time = self.time_of_day(later=word in LATER_PARTS)
            return self._daily(time or part)
        if word in ("hour", "minute", "second", "week"):
            self.i += 1
            if word == "week":
                return None
            return Repeat(INTERVAL, seconds=UNITS[word])
        seconds = self.duration()
        if seconds is None:
            return None
        return Repeat(INTERVAL, seconds=seconds)

    def _daily(self, time: tuple[int, int] | None) -> Repeat:
        hour, minute = time or DEFAULT_TIME
        return Repeat(DAILY, hour=hour, minute=minute, zone=self.zone.key)

    def _weekly(self, weekday: int, time: tuple[int, int] | None) -> Repeat:
        hour, minute = time or DEFAULT_TIME
        return Repeat(WEEKLY, hour=hour, minute=minute, weekday=weekday, zone=self.zone.key)

    # ---- tomorrow at 9, friday 18:30, 2026-12-24 18:00, at 18:30 ----------------------

    def moment(self) -> When | None:
        saved = self.i
        stamp = self.iso_stamp()
        if stamp is not None:
            return When(self._checked(stamp))
        day, part = self.day()
        time = self.time_of_day(later=part in LATER_PARTS)
        if day is None and time is None:
            self.i = saved
            return None
        if day is None:
            day, part = self.day()
            if part and time is None:
                time = PARTS_OF_DAY[part]
        if time is None and part:
            time = PARTS_OF_DAY[part]
        default = time is None
        hour, minute = time or DEFAULT_TIME
        if day is None:  # a time alone: its next coming
            today = self.local_now.date()
            moment = self._local(today, hour, minute)
            if moment <= self.now:
                moment = self._local(today + timedelta(days=1), hour, minute)
            return When(self._checked(moment))
        moment = self._local(day, hour, minute)
        return When(self._checked(moment), default_time=default)

    def iso_stamp(self) -> datetime | None:
        """ "2026-12-24T18:00", with an offset or without (then in the person's zone)."""
        word = self.peek()
        if "t" not in word or not word[:4].isdigit():
            return None
        try:
            moment = datetime.fromisoformat(word.upper())
        except ValueError:
            return None
        self.i += 1
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=self.zone)
        return self._utc(moment)

    def day(self) -> tuple[date | None, str | None]:
        """A day, and a part of it named with it ("tomorrow morning", "tonight")."""
        saved = self.i
        today = self.local_now.date()
        self.take("on")
        word = self.peek()
        found: date | None = None
        if word == "today":
            self.i += 1
            found = today
        elif word == "tonight":
            self.i += 1
            return today, "tonight"
        elif word == "tomorrow":
            self.i += 1
            found = today + timedelta(days=1)
        elif word == "day" and self.peek(1) == "after" and self.peek(2) == "tomorrow":
            self.i += 3
            found = today + timedelta(days=2)
        elif word in ("next", "this") and self.peek(1) in WEEKDAYS:
            self.i += 2
            ahead = (WEEKDAYS[self.tokens[self.i - 1]] - today.weekday()) % 7
            found = today + timedelta(days=ahead or (7 if word == "next" else 0))
        elif word in WEEKDAYS:
            self.i += 1
            ahead = (WEEKDAYS[word] - today.weekday()) % 7
            if not ahead and not self._still_today():
                ahead = 7  # today's weekday, its time gone: next week's
            found = today + timedelta(days=ahead)
        else:
            found = self.calendar_date()
        if found is None:
            self.i = saved
            return None, None
        part = None
        if self.peek() in PARTS_OF_DAY and self.peek() not in ("noon", "midnight"):
            part = self.peek()
            self.i += 1
        return found, part

    def _still_today(self) -> bool:
        """After today's weekday: whether the time that follows (or 9:00) is still to come."""
        saved = self.i
        time = self.time_of_day()
        self.i = saved
        hour, minute = time or DEFAULT_TIME
        return self._local(self.local_now.date(), hour, minute) > self.now

    def calendar_date(self) -> date | None:
        """ "2026-12-24", "24 december [2026]", "24th dec", "december 24[th][,] [2026]"."""
        word = self.peek()
        match = re.fullmatch(r"(\d{4})-(\d{1,2})-(\d{1,2})", word)
        if match:
            self.i += 1
            return _date(*(int(g) for g in match.groups()))
        saved = self.i
        if word.isdigit() and len(word) <= 2:
            self.i += 1
            self.take("st", "nd", "rd", "th")
            self.take("of")
            month = MONTHS.get(self.peek())
            day_number = int(word)
        else:
            month = MONTHS.get(word)
            self.i += 1
            day_text = self.peek()
            day_number = int(day_text) if day_text.isdigit() and len(day_text) <= 2 else 0
        if month is None or not day_number:
            self.i = saved
            return None
        self.i += 1
        self.take("st", "nd", "rd", "th")
        saved_year = self.i
        self.take(",")
        year: int | None = None
        if self.peek().isdigit() and len(self.peek()) == 4:
            year = int(self.peek())
            self.i += 1
        else:
            self.i = saved_year
        today = self.local_now.date()
        found = _date(year or today.year, month, day_number)
        if found is not None and year is None and found < today:
            found = _date(today.year + 1, month, day_number)  # "24 december" in January
        if found is None:
            self.i = saved
        return found

    def time_of_day(self, later: bool = False) -> tuple[int, int] | None:
        """ "at 9", "18:30", "6:30 pm", "9am", "noon", "at 7 in the evening": (hour, minute)."""
        saved = self.i
        had_at = self.take("at", "@")
        word = self.peek()
        hour: int | None = None
        minute = 0
        match = re.fullmatch(r"(\d{1,2})[:.](\d{2})(?::\d{2})?", word)
        if match:
            hour, minute = int(match.group(1)), int(match.group(2))
            self.i += 1
        elif word.isdigit() and len(word) <= 2 and (had_at or self.peek(1) in ("am", "pm")):
            hour = int(word)
            self.i += 1
        elif word in ("noon", "midday", "midnight") or (had_at and word in PARTS_OF_DAY):
            self.i += 1
            return PARTS_OF_DAY[word]
        if hour is None:
            self.i = saved
            return None
        meridiem = self.peek()
        if meridiem in ("am", "pm"):
            self.i += 1
            if not 1 <= hour <= 12:
                self.i = saved
                return None
            hour = hour % 12 + (12 if meridiem == "pm" else 0)
        else:
            self.take("o'clock", "h")
            if self.peek() == "in" and self.peek(1) == "the" and self.peek(2) in PARTS_OF_DAY:
                later = later or self.peek(2) in LATER_PARTS
                self.i += 3
            elif self.peek() in LATER_PARTS:
                later = True
                self.i += 1
            if later and hour < 12:
                hour += 12
        if not (0 <= hour < 24 and 0 <= minute < 60):
            self.i = saved
            return None
        return hour, minute

    # ---- checks --------------------------------------------------------------------------

    def _local(self, day: date, hour: int, minute: int) -> datetime:
        return self._utc(datetime(day.year, day.month, day.day, hour, minute, tzinfo=self.zone))

    def _utc(self, moment: datetime) -> datetime:
        """`moment` in UTC; one a day from the calendar's ends that has no UTC time (0001-01-01
        east of Greenwich, 9999-12-31 west of it) is passed or too far ahead, as it lies."""
        try:
            return moment.astimezone(UTC)
        except OverflowError:
            if moment.year < self.now.year:
                raise WhenError(self._passed(moment)) from None
            raise WhenError(_TOO_FAR) from None

    def _checked(self, moment: datetime) -> datetime:
        if moment <= self.now:
            raise WhenError(self._passed(moment))
        if moment - self.now > LONGEST:
            raise WhenError(_TOO_FAR)
        return (moment + timedelta(microseconds=500_000)).replace(microsecond=0)  # to the second

    def _passed(self, moment: datetime) -> str:
        """Shown in the person's zone; at the calendar's start, as it was given."""
        try:
            shown = f"{moment.astimezone(self.zone):%a %d %b %Y %H:%M}, {self.zone.key}"
        except OverflowError:
            shown = f"{moment:%a %d %b %Y %H:%M UTC%z}"
        return (
            f"That time has passed already ({shown}); nothing was set. A time that works: {FORMS}."
        )


_TOO_FAR = (
    f"That is too far ahead (I keep reminders for up to {LONGEST.days // 365} years); "
    "nothing was set."
)


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def too_often(repeat: Repeat, shortest_s: int) -> str | None:
    """The answer to a repeat shorter than `[limits]` allows, else None."""
    if repeat.period_s >= shortest_s:
        return None
    return (
        f"That repeats too often: the shortest repeat here is every "
        f"{period_words(shortest_s)}. Nothing was set."
    )
