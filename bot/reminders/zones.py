"""Time zones: a person's own (/timezone, kept in preferences.json), the bot's default
(`[agent] default_timezone`), and showing an instant the way that person reads it.

Zones are IANA names read by `zoneinfo` (the system's database, or the `tzdata` package where a
system has none). Everything stored stays UTC (memory/clock.py); a zone only shapes what a
person types and what they are shown.
"""

from __future__ import annotations

import difflib
from datetime import datetime
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from memory.preferences import TIMEZONE, Preferences

EXAMPLES = "Europe/Lisbon, America/New_York or Asia/Tokyo"


class ZoneError(ValueError):
    """A zone name that is not one; the message is meant for the person."""


def is_zone(name: str) -> bool:
    """For the config check: whether `name` is an IANA zone this machine knows."""
    try:
        zone_named(name)
    except ZoneError:
        return False
    return True


@lru_cache(maxsize=256)
def zone_named(name: str) -> ZoneInfo:
    """The zone called `name` (any case: "europe/lisbon" is found too); ZoneError otherwise."""
    text = name.strip()
    if text.upper() in ("UTC", "Z", "GMT"):
        text = "UTC"
    try:
        if text and not text.startswith(("/", ".")) and ".." not in text:
            return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        pass
    known = _known()
    by_case = {zone.lower(): zone for zone in known}
    if text.lower() in by_case:
        return ZoneInfo(by_case[text.lower()])
    close = difflib.get_close_matches(text, known, n=2, cutoff=0.6)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise ZoneError(
        f"I don't know the time zone “{text}”.{hint} Use a name from the IANA time zone "
        f"database, such as {EXAMPLES}."
    )


@lru_cache(maxsize=1)
def _known() -> list[str]:
    return sorted(available_timezones())  # reads the database: only when a name is not found


def person_zone(preferences: Preferences, default: str) -> tuple[ZoneInfo, bool]:
    """The person's zone and whether they chose it (else the bot's default)."""
    chosen = preferences.get(TIMEZONE)
    if isinstance(chosen, str):
        try:
            return zone_named(chosen), True
        except ZoneError:
            pass  # a zone this machine no longer knows: the default, until they choose again
    return zone_named(default), False


def show(moment: datetime, zone: ZoneInfo, now: datetime) -> str:
    """e.g. "today at 18:30", "tomorrow at 09:00", "Fri 12 Dec at 09:00", "Mon 4 Jan 2027 at
    08:00", in `zone`; seconds only when there are some ("today at 14:05:30")."""
    local = moment.astimezone(zone)
    today = now.astimezone(zone).date()
    clock = local.strftime("%H:%M:%S" if local.second else "%H:%M")
    days = (local.date() - today).days
    if days == 0:
        day = "today"
    elif days == 1:
        day = "tomorrow"
    elif days == -1:
        day = "yesterday"
    elif local.year == today.year:
        day = f"{local:%a} {local.day} {local:%b}"
    else:
        day = f"{local:%a} {local.day} {local:%b} {local.year}"
    return f"{day} at {clock}"


def label(zone: ZoneInfo) -> str:
    return str(zone.key)
