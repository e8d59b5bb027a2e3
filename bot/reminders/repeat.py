"""How a reminder repeats, and its next time computed from the rule, never from the last send.

Three rules: every N seconds (counted from the first time: the k-th time is first + k·N, so a
late send never shifts the ones after it), every day at a local time, every week on a weekday
at a local time. Local times are in the zone the reminder was set in, computed afresh for each
day, so a daylight-saving change never moves "every day at 8:00": it is 8:00 on the clock on
both sides of it. A local time the clock skips that night (02:30 when it jumps from 02:00 to
03:00) is sent at the wall time it becomes once the clock has jumped (03:30); one it passes twice
is sent the first time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from bot.reminders.zones import zone_named

WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
DAY_S = 86400
WEEK_S = 7 * DAY_S
INTERVAL, DAILY, WEEKLY = "interval", "daily", "weekly"


@dataclass(frozen=True)
class Repeat:
    kind: str  # INTERVAL, DAILY or WEEKLY
    seconds: int = 0  # INTERVAL: the period
    hour: int = 9  # DAILY, WEEKLY: the local time…
    minute: int = 0
    weekday: int = 0  # …WEEKLY: 0 is Monday
    zone: str = "UTC"  # …in this zone

    @property
    def period_s(self) -> int:
        """The time between two sends, for the shortest repeat allowed ([limits])."""
        return {INTERVAL: self.seconds, DAILY: DAY_S, WEEKLY: WEEK_S}[self.kind]

    def next_after(self, after: datetime, first: datetime) -> datetime:
        """The first time of the rule strictly after `after` (`first`: the reminder's first)."""
        if after < first:
            return first
        if self.kind == INTERVAL:
            steps = math.floor((after - first).total_seconds() / self.seconds) + 1
            return first + timedelta(seconds=steps * self.seconds)
        zone = zone_named(self.zone)
        day = after.astimezone(zone).date()
        if self.kind == WEEKLY:
            day += timedelta(days=(self.weekday - day.weekday()) % 7)
        step = timedelta(days=7 if self.kind == WEEKLY else 1)
        while (moment := self._on(day)) <= after:
            day += step
        return moment

    def latest_not_after(self, moment: datetime, since: datetime, first: datetime) -> datetime:
        """The last time of the rule at or before `moment`, given one at `since` (≤ moment):
        what a bot that was down sends once, instead of every time it missed."""
        if self.kind == INTERVAL:
            steps = math.floor((moment - first).total_seconds() / self.seconds)
            return max(since, first + timedelta(seconds=steps * self.seconds))
        # At most a few steps: start a little over one period before `moment`.
        latest = max(since, moment - timedelta(seconds=self.period_s + DAY_S))
        if latest != since:
            latest = self.next_after(latest, first)
            if latest > moment:
                return since
        while (following := self.next_after(latest, first)) <= moment:
            latest = following
        return latest

    def _on(self, day: date) -> datetime:
        """This rule's local time on `day`, as a UTC instant (see the module docstring)."""
        zone = zone_named(self.zone)
        local = datetime(day.year, day.month, day.day, self.hour, self.minute, tzinfo=zone)
        return local.astimezone(UTC)

    def describe(self) -> str:
        """e.g. "every day at 08:00", "every Monday at 09:00", "every 2 hours"."""
        clock = f"{self.hour:02d}:{self.minute:02d}"
        if self.kind == DAILY:
            return f"every day at {clock}"
        if self.kind == WEEKLY:
            return f"every {WEEKDAY_NAMES[self.weekday]} at {clock}"
        return "every " + period_words(self.seconds)

    def to_record(self) -> dict[str, Any]:
        if self.kind == INTERVAL:
            return {"kind": INTERVAL, "seconds": self.seconds}
        record: dict[str, Any] = {"kind": self.kind, "at": f"{self.hour:02d}:{self.minute:02d}"}
        if self.kind == WEEKLY:
            record["weekday"] = self.weekday
        record["zone"] = self.zone
        return record

    @classmethod
    def from_record(cls, record: Any) -> Repeat | None:
        """The rule a `set` record holds; None if it holds none or one this version cannot read
        (then the reminder is sent once, not lost)."""
        if not isinstance(record, dict):
            return None
        try:
            kind = record["kind"]
            if kind == INTERVAL:
                seconds = int(record["seconds"])
                return cls(INTERVAL, seconds=seconds) if seconds > 0 else None
            if kind not in (DAILY, WEEKLY):
                return None
            hour, minute = (int(part) for part in str(record["at"]).split(":"))
            weekday = int(record.get("weekday", 0))
            zone = str(record["zone"])
            zone_named(zone)
            if not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= weekday < 7):
                return None
            return cls(kind, hour=hour, minute=minute, weekday=weekday, zone=zone)
        except (KeyError, ValueError, TypeError):
            return None


def period_words(seconds: int) -> str:
    """What follows "every": "2 hours", "30 minutes", "hour", "90 seconds" (the largest unit
    that divides it)."""
    for unit, size in (("week", WEEK_S), ("day", DAY_S), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return unit if count == 1 else f"{count} {unit}s"
    return "second" if seconds == 1 else f"{seconds} seconds"
