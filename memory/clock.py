"""The one clock of everything stored or shown: UTC, written with its offset.

The model is told the time in UTC, so message timestamps, HISTORY.md stamps, MEMORY.md version
names and /status use UTC too: one instant reads the same everywhere, whatever the machine's
time zone (a server's, a laptop's that travels). Timestamps are ISO 8601 with the offset
("2026-12-01T09:30:00+00:00"). Files written before this carry naive local times; they still
load, and a naive time is read as UTC.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

HISTORY_STAMP = "%Y-%m-%d %H:%M"  # how a HISTORY.md entry is dated: "[2026-12-01 09:30]"
# How the model is told when a person wrote: "[Current time: 2026-12-01 09:30 UTC]\n" before
# the message's text. Built from the message's own timestamp each time the prompt is built
# (memory.session), never stored: files written before this kept it in the text.
_TOLD = re.compile(r"\[Current time: \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\]\n")


def now() -> datetime:
    """The current instant, in UTC."""
    return datetime.now(UTC)


def as_utc(moment: datetime) -> datetime:
    """`moment` in UTC; a naive one (from an older file) is taken to be UTC already."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def iso(moment: datetime | None = None) -> str:
    """ISO 8601 to the second, with the offset: "2026-12-01T09:30:00+00:00"."""
    return as_utc(moment or now()).isoformat(timespec="seconds")


def history_stamp(moment: datetime | None = None) -> str:
    """The stamp of a HISTORY.md entry, in UTC: "2026-12-01 09:30"."""
    return as_utc(moment or now()).strftime(HISTORY_STAMP)


def parse(value: Any) -> datetime | None:
    """A stored ISO timestamp as a UTC instant (naive read as UTC); None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None


def told(value: Any) -> str:
    """What goes before a user message stored at `value` (its ISO timestamp) when the model
    reads it; "" without a valid timestamp."""
    moment = parse(value)
    return "" if moment is None else f"[Current time: {moment.strftime(HISTORY_STAMP)} UTC]\n"


def without_told(text: str) -> str:
    """`text` without the time line that files written before the time was added when the
    prompt is built began each user message with."""
    match = _TOLD.match(text)
    return text[match.end() :] if match else text
