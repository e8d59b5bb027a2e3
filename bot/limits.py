"""Per-user limits of a public bot: messages a minute, heavy commands an hour, tokens a day, and
the bot's daily budget.

Checked when a message arrives and, for tokens, again when its turn starts (it may have waited
for earlier turns of the session) and before each tool round of it (`mid_turn`): a turn that
spends the last tokens stops there, so a token limit is passed by at most one round's worth.
A command counts towards the messages of the minute; a heavy one (a whole workspace read,
rewritten or zipped) also towards a small budget of its own, and so does a reminder command
(/remind, /reminders: each writes the person's reminders file) towards its minute's. A call of a
tool that reaches outside the bot (web_search, read_page) counts towards the hour's
(`outside_call`): refused, the model is told and answers without it. A refused
message is not saved (the answer says so, and when to send it again), so a flood costs neither
model calls nor disk.
Admins are exempt from all of it. Days are UTC days, like every time the bot stores or shows.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.config import LimitsConfig
from bot.usage import UsageBook
from memory import clock
from memory.usage import Totals

MINUTE_S = 60.0
HOUR_S = 3600.0


@dataclass(frozen=True)
class Refusal:
    """Why a message is not answered; `kind` names the limit (for logs and metrics)."""

    # "messages_per_minute", "heavy_commands_per_hour", "reminder_commands_per_minute",
    # "outside_calls_per_hour", "tokens_per_day" or "global_tokens_per_day"
    kind: str
    text: str


@dataclass(frozen=True)
class UsageReport:
    """What /usage shows a person: their own figures and the limits that apply to them."""

    day: str
    today: Totals
    month_name: str
    month: Totals
    admin: bool
    messages_per_minute: int
    heavy_commands_per_hour: int
    tokens_per_day: int
    resets_in: str  # until the next UTC midnight, e.g. "5 h 12 min"


class Limits:
    def __init__(
        self,
        config: LimitsConfig,
        book: UsageBook,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.book = book
        self._admins = {key.strip() for key in config.admins if key.strip()}
        self._monotonic = monotonic
        # user key → monotonic times of their messages in the last minute, and of their heavy
        # commands in the last hour. Someone who never writes again would stay in them
        # forever: once a minute, those idle for the table's window go.
        self._recent: dict[str, deque[float]] = {}
        self._heavy: dict[str, deque[float]] = {}
        self._reminding: dict[str, deque[float]] = {}  # reminder commands, the last minute
        self._outside: dict[str, deque[float]] = {}  # calls of outside tools, the last hour
        self._swept = monotonic()

    def is_admin(self, user_key: str) -> bool:
        return user_key in self._admins

    def check(self, user_key: str) -> Refusal | None:
        """Refuse this message, or count it towards the minute and let it through."""
        if self.is_admin(user_key):
            return None
        refusal = self._per_minute(user_key) or self._per_day(user_key) or self._budget()
        if refusal is None:
            self._count(user_key, heavy=False)
        return refusal

    def check_command(
        self, user_key: str, *, heavy: bool, reminders: bool = False
    ) -> Refusal | None:
        """Refuse this command, or count it and let it through. Commands spend no tokens (the
        filing of /new waits for them itself), so only the messages of the minute and, for a
        heavy one, the heavy commands of the hour apply; for a reminder command, the reminder
        commands of the minute."""
        if self.is_admin(user_key):
            return None
        refusal = (
            self._per_minute(user_key)
            or (self._per_hour(user_key) if heavy else None)
            or (self._reminders_per_minute(user_key) if reminders else None)
        )
        if refusal is None:
            self._count(user_key, heavy=heavy, reminders=reminders)
        return refusal

    def mid_turn(self, user_key: str) -> Refusal | None:
        """The token limits inside a turn, before its next tool round: why it stops there."""
        if self.is_admin(user_key):
            return None
        now = clock.now()
        until = f"after midnight UTC (in {_duration(_next_midnight(now) - now)})"
        if self._per_day(user_key) is not None:
            return Refusal(
                "tokens_per_day",
                f"I had to stop before finishing: this used up your "
                f"{self.config.tokens_per_day:,} tokens for today. Ask me again {until}; "
                "/usage shows your usage.",
            )
        if self._budget() is not None:
            return Refusal(
                "global_tokens_per_day",
                "I had to stop before finishing: I've used all the tokens my operator allows "
                f"me for today, for everyone. Ask me again {until}.",
            )
        return None

    def outside_call(self, user_key: str) -> Refusal | None:
        """Refuse this call of a tool that reaches outside the bot, or count it."""
        if self.is_admin(user_key):
            return None
        limit = self.config.outside_calls_per_hour
        now = self._monotonic()
        wait = _wait(self._outside, user_key, limit, HOUR_S, now)
        if wait is not None:
            return Refusal(
                "outside_calls_per_hour",
                f"this person has used the {limit} web look-ups they may make in an hour; the "
                f"next is possible in {_duration(timedelta(seconds=wait))}. Answer without it.",
            )
        if limit:
            self._outside.setdefault(user_key, deque()).append(now)
        return None

    def _count(self, user_key: str, *, heavy: bool, reminders: bool = False) -> None:
        now = self._monotonic()
        if self.config.messages_per_minute:
            self._recent.setdefault(user_key, deque()).append(now)
        if heavy and self.config.heavy_commands_per_hour:
            self._heavy.setdefault(user_key, deque()).append(now)
        if reminders and self.config.reminder_commands_per_minute:
            self._reminding.setdefault(user_key, deque()).append(now)
        if now - self._swept >= MINUTE_S:
            self._sweep(now)

    def check_tokens(self, user_key: str) -> Refusal | None:
        """The token limits again, when a message's turn starts: messages that waited for the
        turns before them must not all pass on what was spent when they arrived."""
        if self.is_admin(user_key):
            return None
        return self._per_day(user_key) or self._budget()

    def report(self, user_key: str) -> UsageReport:
        now = clock.now()
        usage = self.book.of(user_key)
        return UsageReport(
            day=now.date().isoformat(),
            today=usage.day(now.date()),
            month_name=now.strftime("%B %Y"),
            month=usage.month(now.year, now.month),
            admin=self.is_admin(user_key),
            messages_per_minute=self.config.messages_per_minute,
            heavy_commands_per_hour=self.config.heavy_commands_per_hour,
            tokens_per_day=self.config.tokens_per_day,
            resets_in=_duration(_next_midnight(now) - now),
        )

    # ---- the three limits ---------------------------------------------------------------

    def _per_minute(self, user_key: str) -> Refusal | None:
        limit = self.config.messages_per_minute
        wait = _wait(self._recent, user_key, limit, MINUTE_S, self._monotonic())
        if wait is None:
            return None
        at = clock.now() + timedelta(seconds=wait)
        return Refusal(
            "messages_per_minute",
            f"You're sending messages faster than I take them (at most {limit} a minute). "
            f"I didn't save this one: please send it again in {wait} s "
            f"(after {at:%H:%M:%S} UTC).",
        )

    def _per_hour(self, user_key: str) -> Refusal | None:
        limit = self.config.heavy_commands_per_hour
        wait = _wait(self._heavy, user_key, limit, HOUR_S, self._monotonic())
        if wait is None:
            return None
        at = clock.now() + timedelta(seconds=wait)
        return Refusal(
            "heavy_commands_per_hour",
            f"That is one of the commands that work through all your files (/export, /forget, "
            f"/wipe, /memory history and undo), and I take at most {limit} of them an hour. "
            f"Please ask again in {_duration(timedelta(seconds=wait))} "
            f"(after {at:%H:%M} UTC).",
        )

    def _reminders_per_minute(self, user_key: str) -> Refusal | None:
        limit = self.config.reminder_commands_per_minute
        wait = _wait(self._reminding, user_key, limit, MINUTE_S, self._monotonic())
        if wait is None:
            return None
        at = clock.now() + timedelta(seconds=wait)
        return Refusal(
            "reminder_commands_per_minute",
            f"You're changing reminders faster than I take them (at most {limit} /remind and "
            f"/reminders a minute). I didn't do this one: please send it again in {wait} s "
            f"(after {at:%H:%M:%S} UTC).",
        )

    def forget_user(self, user_key: str) -> None:
        """After /wipe (or when they leave RAM): their messages of the last minute and heavy
        commands of the last hour are no longer counted. What they spent today is counted from
        their usage, which /wipe erases with the rest; the bot's daily budget ([limits]
        global_tokens_per_day) still counts it."""
        self._recent.pop(user_key, None)
        self._heavy.pop(user_key, None)
        self._reminding.pop(user_key, None)
        self._outside.pop(user_key, None)

    def _sweep(self, now: float) -> None:
        """Forget everyone whose last message is a minute old (heavy command: an hour): the
        tables hold the people of the last two windows at most, however many ever wrote."""
        self._recent = {
            key: times for key, times in self._recent.items() if times[-1] > now - MINUTE_S
        }
        self._heavy = {key: times for key, times in self._heavy.items() if times[-1] > now - HOUR_S}
        self._reminding = {
            key: times for key, times in self._reminding.items() if times[-1] > now - MINUTE_S
        }
        self._outside = {
            key: times for key, times in self._outside.items() if times[-1] > now - HOUR_S
        }
        self._swept = now

    def _per_day(self, user_key: str) -> Refusal | None:
        limit = self.config.tokens_per_day
        if not limit:
            return None
        now = clock.now()
        if self.book.of(user_key).day(now.date()).tokens < limit:
            return None
        return Refusal(
            "tokens_per_day",
            f"You've used your {limit:,} tokens for today. I didn't save this message: please "
            f"send it again after midnight UTC (in {_duration(_next_midnight(now) - now)}). "
            "/usage shows your usage.",
        )

    def _budget(self) -> Refusal | None:
        limit = self.config.global_tokens_per_day
        if not limit:
            return None
        now = clock.now()
        if self.book.everyone.day(now.date()).tokens < limit:
            return None
        return Refusal(
            "global_tokens_per_day",
            "I've used all the tokens my operator allows me for today, for everyone. I didn't "
            "save this message: please send it again after midnight UTC "
            f"(in {_duration(_next_midnight(now) - now)}).",
        )


def _next_midnight(now: datetime) -> datetime:
    return datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), now.tzinfo)


def _duration(delta: timedelta) -> str:
    minutes = max(1, int(delta.total_seconds() + 59) // 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _wait(
    table: dict[str, deque[float]], user_key: str, limit: int, window: float, now: float
) -> int | None:
    """Seconds until `user_key` may again, if their `limit` of the last `window` is used up;
    their times older than the window leave the table (and they with them)."""
    times = table.get(user_key)
    if not limit or times is None:
        return None
    while times and times[0] <= now - window:
        times.popleft()
    if not times:
        del table[user_key]  # the table holds only people active in the window
        return None
    if len(times) < limit:
        return None
    return max(1, round(times[0] + window - now))
