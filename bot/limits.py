"""Per-user limits of a public bot: messages a minute, heavy commands an hour, tokens a day, money
a day and a month (at [prices]), and the bot's own daily token and money budgets.

Checked when a message arrives and, for tokens and money, again when its turn starts (it may
have waited for earlier turns of the session) and before each tool round of it (`mid_turn`): a
turn that spends the last tokens stops there, so a token or cost limit is passed by at most one
round's worth.
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
from decimal import Decimal

from bot.config import LimitsConfig
from bot.usage import Cost, Prices, UsageBook, money
from memory import clock
from memory.usage import Totals, UsageLog

MINUTE_S = 60.0
HOUR_S = 3600.0


@dataclass(frozen=True)
class Refusal:
    """Why a message is not answered; `kind` names the limit (for logs and metrics)."""

    # "messages_per_minute", "heavy_commands_per_hour", "reminder_commands_per_minute",
    # "outside_calls_per_hour", "tokens_per_day", "global_tokens_per_day", or one of the cost
    # caps: "cost_per_day", "cost_per_month", "global_cost_per_day", "global_cost_per_month"
    kind: str
    text: str


@dataclass(frozen=True)
class _Spent:
    """A spending limit reached: which, what was used up (in words), and until when."""

    kind: str
    what: str  # "your 1,500 tokens for today"; for the bot's: "all the tokens my operator …"
    until: str  # "after midnight UTC (in 5 h 12 min)"
    everyone: bool = False


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
    # At [prices]; None when no price is set (then no money is shown).
    today_cost: Cost | None = None
    month_cost: Cost | None = None
    cost_per_day: float = 0.0
    cost_per_month: float = 0.0
    month_resets: str = ""  # "on 1 January UTC, in 12 days"


class Limits:
    def __init__(
        self,
        config: LimitsConfig,
        book: UsageBook,
        monotonic: Callable[[], float] = time.monotonic,
        prices: Prices | None = None,
    ) -> None:
        self.config = config
        self.book = book
        self.prices = prices or Prices({}, "")
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
        """The token and cost limits inside a turn, before its next tool round: why it stops
        there."""
        if self.is_admin(user_key):
            return None
        spent = self._spent(user_key) or self._spent_by_all()
        if spent is None:
            return None
        if spent.everyone:
            text = f"I've used {spent.what}, for everyone. Ask me again {spent.until}."
        else:
            text = f"this used up {spent.what}. Ask me again {spent.until}; /usage shows your "
            text += "usage."
        return Refusal(spent.kind, f"I had to stop before finishing: {text}")

    def reminder_call(self, user_key: str) -> Refusal | None:
        """Refuse this call of the model's `remind` tool, or count it: the model's reminder
        changes share the person's /remind budget, or a message could set hundreds."""
        if self.is_admin(user_key):
            return None
        refusal = self._reminders_per_minute(user_key)
        if refusal is None and self.config.reminder_commands_per_minute:
            self._reminding.setdefault(user_key, deque()).append(self._monotonic())
        return refusal

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
        """The token and cost limits again, when a message's turn starts: messages that waited
        for the turns before them must not all pass on what was spent when they arrived."""
        if self.is_admin(user_key):
            return None
        return self._per_day(user_key) or self._budget()

    def used_up(self, user_key: str) -> str | None:
        """Which token or cost limit of this person, or of the bot, is used up, in words
        ("a limit is reached (your 1,500 tokens for today); it can go on after midnight UTC (in
        5 h)"), or None: for work that is not a message (learning from imported conversations)."""
        if self.is_admin(user_key):
            return None
        spent = self._spent(user_key) or self._spent_by_all()
        return (
            None
            if spent is None
            else f"a limit is reached ({spent.what}); it can go on {spent.until}"
        )

    def report(self, user_key: str) -> UsageReport:
        now = clock.now()
        usage = self.book.of(user_key)
        today = usage.day_by_model(now.date())
        month = usage.month_by_model(now.year, now.month)
        priced = self.prices.set
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
            today_cost=self.prices.cost(today) if priced else None,
            month_cost=self.prices.cost(month) if priced else None,
            cost_per_day=self.config.cost_per_day,
            cost_per_month=self.config.cost_per_month,
            month_resets=_month_resets(now),
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
        """The person's own token and cost limits, as a refusal of their message."""
        spent = self._spent(user_key)
        if spent is None:
            return None
        return Refusal(
            spent.kind,
            f"You've used {spent.what}. I didn't save this message: please send it again "
            f"{spent.until}. /usage shows your usage.",
        )

    def _budget(self) -> Refusal | None:
        """The bot's own token and cost limits, as a refusal of anyone's message."""
        spent = self._spent_by_all()
        if spent is None:
            return None
        return Refusal(
            spent.kind,
            f"I've used {spent.what}, for everyone. I didn't save this message: please send it "
            f"again {spent.until}.",
        )

    def _spent(self, user_key: str) -> _Spent | None:
        """Which of the person's spending limits is used up, if any."""
        config = self.config
        if not (config.tokens_per_day or config.cost_per_day or config.cost_per_month):
            return None
        now = clock.now()
        usage = self.book.of(user_key)
        tokens = config.tokens_per_day
        if tokens and usage.day(now.date()).tokens >= tokens:
            return _Spent("tokens_per_day", f"your {tokens:,} tokens for today", _tomorrow(now))
        cap = config.cost_per_day
        if cap and self._cost(usage, now, month=False) >= _exact(cap):
            what = f"what I may spend on you today ({money(cap)})"
            return _Spent("cost_per_day", what, _tomorrow(now))
        cap = config.cost_per_month
        if cap and self._cost(usage, now, month=True) >= _exact(cap):
            what = f"what I may spend on you this month ({money(cap)})"
            return _Spent("cost_per_month", what, _next_month(now))
        return None

    def _spent_by_all(self) -> _Spent | None:
        """Which of the bot's own spending limits is used up, if any."""
        config = self.config
        everyone = self.book.everyone
        now = clock.now()
        tokens = config.global_tokens_per_day
        if tokens and everyone.day(now.date()).tokens >= tokens:
            what = "all the tokens my operator allows me for today"
            return _Spent("global_tokens_per_day", what, _tomorrow(now), everyone=True)
        cap = config.global_cost_per_day
        if cap and self._cost(everyone, now, month=False) >= _exact(cap):
            what = "all my operator allows me to spend today"
            return _Spent("global_cost_per_day", what, _tomorrow(now), everyone=True)
        cap = config.global_cost_per_month
        if cap and self._cost(everyone, now, month=True) >= _exact(cap):
            what = "all my operator allows me to spend this month"
            return _Spent("global_cost_per_month", what, _next_month(now), everyone=True)
        return None

    def _cost(self, usage: UsageLog, now: datetime, *, month: bool) -> Decimal:
        if month:
            spent = usage.month_by_model(now.year, now.month)
        else:
            spent = usage.day_by_model(now.date())
        return self.prices.cost(spent).amount


def _exact(amount: float) -> Decimal:
    """A cap as the config file wrote it (0.1, not 0.1000000000000000055…)."""
    return Decimal(repr(amount))


def _next_midnight(now: datetime) -> datetime:
    return datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), now.tzinfo)


def _month_start_after(now: datetime) -> datetime:
    year, month = (now.year + 1, 1) if now.month == 12 else (now.year, now.month + 1)
    return now.replace(year=year, month=month, day=1, hour=0, minute=0, second=0, microsecond=0)


def _tomorrow(now: datetime) -> str:
    return f"after midnight UTC (in {_duration(_next_midnight(now) - now)})"


def _month_resets(now: datetime) -> str:
    """When the month's limits start again: "on 1 January UTC, in 12 days"."""
    start = _month_start_after(now)
    left = start - now
    days = left.days + (1 if left.seconds else 0)
    wait = f"{days} days" if days > 1 else _duration(left)
    return f"on {start.day} {start:%B} UTC, in {wait}"


def _next_month(now: datetime) -> str:
    return f"when the month is over ({_month_resets(now)})"


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
