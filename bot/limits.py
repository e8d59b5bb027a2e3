"""Per-user limits of a public bot: messages a minute, tokens a day, and the bot's daily budget.

Checked when a message arrives and, for tokens, again when its turn starts (it may have waited
for earlier turns of the session), never inside a turn: a turn that has begun finishes, so a
token limit may be passed by one turn's worth. A refused message is not saved (the answer says
so, and when to send it again), so a flood costs neither model calls nor disk. Admins are exempt
from all of it. Days are UTC days, like every time the bot stores or shows.
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


@dataclass(frozen=True)
class Refusal:
    """Why a message is not answered; `kind` names the limit (for logs and metrics)."""

    kind: str  # "messages_per_minute", "tokens_per_day" or "global_tokens_per_day"
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
        # user key → monotonic times of their messages in the last minute. Someone who never
        # writes again would stay in it forever: once a minute, those idle for a minute go.
        self._recent: dict[str, deque[float]] = {}
        self._swept = monotonic()

    def is_admin(self, user_key: str) -> bool:
        return user_key in self._admins

    def check(self, user_key: str) -> Refusal | None:
        """Refuse this message, or count it towards the minute and let it through."""
        if self.is_admin(user_key):
            return None
        refusal = self._per_minute(user_key) or self._per_day(user_key) or self._budget()
        if refusal is None and self.config.messages_per_minute:
            now = self._monotonic()
            self._recent.setdefault(user_key, deque()).append(now)
            if now - self._swept >= MINUTE_S:
                self._sweep(now)
        return refusal

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
            tokens_per_day=self.config.tokens_per_day,
            resets_in=_duration(_next_midnight(now) - now),
        )

    # ---- the three limits ---------------------------------------------------------------

    def _per_minute(self, user_key: str) -> Refusal | None:
        limit = self.config.messages_per_minute
        recent = self._recent.get(user_key)
        if not limit or recent is None:
            return None
        now = self._monotonic()
        while recent and recent[0] <= now - MINUTE_S:
            recent.popleft()
        if not recent:
            del self._recent[user_key]  # the table holds only people active this minute
            return None
        if len(recent) < limit:
            return None
        wait = max(1, round(recent[0] + MINUTE_S - now))
        at = clock.now() + timedelta(seconds=wait)
        return Refusal(
            "messages_per_minute",
            f"You're sending messages faster than I take them (at most {limit} a minute). "
            f"I didn't save this one: please send it again in {wait} s "
            f"(after {at:%H:%M:%S} UTC).",
        )

    def forget_user(self, user_key: str) -> None:
        """After /wipe (or when they leave RAM): their messages of the last minute are no longer
        counted. What they spent today is counted from their usage, which /wipe erases with
        the rest; the bot's daily budget ([limits] global_tokens_per_day) still counts it."""
        self._recent.pop(user_key, None)

    def _sweep(self, now: float) -> None:
        """Forget everyone whose last message is a minute old: the table holds the people of
        the last two minutes at most, however many ever wrote."""
        self._recent = {
            key: times for key, times in self._recent.items() if times[-1] > now - MINUTE_S
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
