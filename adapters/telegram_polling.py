"""Receiving from the Bot API without losing anything, fairly, and calling it within its limits.

`Poller` is our getUpdates loop. PTB's Updater acknowledges a batch as soon as it has queued it,
so a crash lost every queued message. We acknowledge an update only once it has been handled, or
once it is on disk (the spool, adapters/telegram_spool.py): Telegram's acknowledgement is one
offset, "every update below this one", so an update still running holds back the acknowledgement
of every later one, and getUpdates returns at most 100 updates from that offset on.

Fairness comes from `Intake`, which both polling and the webhook hand updates to:
- At most PER_USER_IN_FLIGHT updates of one user are handed to the application at a time (one
  user's turns run one after the other anyway). The others wait in that user's backlog, which is
  on disk first: they no longer hold the offset back, so a person sending 250 messages cannot
  fill the window of 100 and make everyone else wait for their turns.
- When a getUpdates answer is full (there may be more behind it), the updates still running are
  written to the spool too and the offset moves past them at once.
- Updates the adapter refuses without a turn (senders not on the allow list) are never capped or
  spooled: they take no time, and their refusals never wait on a flood limit (telegram.py).

After a crash: what was spooled and not marked done is handled at the next start; what was only
running is still with Telegram and redelivered. A message whose turn had persisted it but not
answered it is recognised by the core (`Inbound.message_id`): it is answered then, or left to the
turn of a later message of the same session, which answers both.
`PerUserOrder` runs different users' updates at once and one user's in arrival order.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from telegram import Bot, Update
from telegram.error import (
    Conflict,
    EndPointNotFound,
    InvalidToken,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import Application, BaseUpdateProcessor
from telegram.warnings import PTBDeprecationWarning, PTBUserWarning

from adapters.telegram_spool import Spool

log = logging.getLogger(__name__)

FLOOD_RETRIES = 5
POLL_LIMIT = 100  # updates per getUpdates: Telegram's maximum
BUSY_POLL_S = 0.5  # while turns run, look for new updates at least this often…
MIN_POLL_GAP_S = 0.01  # …and, when a turn finishes, no sooner than this after the last poll
MAX_BACKOFF_S = 30.0
GET_UPDATES_READ_S = 10.0  # read timeout of a getUpdates on top of its long-poll timeout
PER_USER_IN_FLIGHT = 2  # one user's updates handed to the application at once (see Intake)

T = TypeVar("T")
# The adapter's turn for a raw update it handles without PTB's Update, or None (see Intake).
Direct = Callable[[dict[str, Any]], Callable[[], Awaitable[None]] | None]


async def flood_safe(call: Callable[[], Awaitable[T]]) -> T:
    """Run a Bot API call, waiting out 429 flood limits as Telegram asks."""
    for _ in range(FLOOD_RETRIES):
        try:
            return await call()
        except RetryAfter as exc:
            wait = retry_seconds(exc)
            log.warning("telegram: flood limit, retrying in %.0f s", wait)
            await asyncio.sleep(wait)
    return await call()


def allow_raw_calls() -> None:
    """do_api_request warns that Bot has a method for what raw_call asks; it is on purpose.
    (Installed when the application is built, not at import: a test framework's warning
    capture drops filters set during collection.)"""
    warnings.filterwarnings(
        "ignore", message=r"Please use 'Bot\.(getUpdates|sendMessage)'", category=PTBUserWarning
    )


async def raw_call(
    bot: Bot, method: str, data: dict[str, Any], read_timeout: float | None = None
) -> Any:
    """A Bot API call through PTB's public raw call, its JSON result not made into objects
    (Update, Message: parsing them cost more CPU than the rest of a turn's Bot API work).
    Errors are raised as the named method raises them. No read_timeout: PTB's default."""
    try:
        if read_timeout is None:
            return await bot.do_api_request(method, data)
        return await bot.do_api_request(method, data, read_timeout=read_timeout)
    except EndPointNotFound as exc:
        # do_api_request reports a rejected token (401) as an unknown method; the methods we
        # call always exist, so it is the token.
        if isinstance(exc.__cause__, InvalidToken):
            raise exc.__cause__ from None
        raise


def retry_seconds(exc: RetryAfter) -> float:
    with warnings.catch_warnings():  # PTB 22 warns that the type will become timedelta
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class PerUserOrder(BaseUpdateProcessor):
    """Different users' updates run concurrently; one user's updates run in arrival order."""

    def __init__(self, max_concurrent_updates: int) -> None:
        super().__init__(max_concurrent_updates)
        self._locks: dict[int, asyncio.Lock] = {}
        self._users: dict[int, int] = {}  # user id → updates holding or awaiting the lock

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        """`update`: PTB's Update, or the raw one of a turn run without it (Intake)."""
        if isinstance(update, Update):
            user = update.effective_user.id if update.effective_user is not None else None
        else:
            user = _sender(update) if isinstance(update, dict) else None
        if user is None:
            await coroutine
            return
        lock = self._locks.setdefault(user, asyncio.Lock())
        self._users[user] = self._users.get(user, 0) + 1
        try:
            async with lock:
                await coroutine
        finally:
            self._users[user] -= 1
            if not self._users[user]:
                del self._users[user]
                del self._locks[user]

    async def initialize(self) -> None:
        """Nothing to allocate."""

    async def shutdown(self) -> None:
        """Nothing to free."""


class Intake:
    """Hands raw updates to the application, at most PER_USER_IN_FLIGHT per user at a time.

    An update is *held* (running, only in memory: polling must not acknowledge it) or *durable*
    (in the spool: running or waiting in its user's backlog; it may be acknowledged). See the
    module docstring for why.
    """

    def __init__(
        self,
        app: Application,
        spool: Spool,
        cheap: Callable[[dict[str, Any]], bool],
        direct: Direct | None = None,
    ) -> None:
        """`cheap`: refused without a turn (never capped or spooled); `direct`: the turn of a
        raw update the adapter runs without PTB's Update, or None (then PTB's handlers)."""
        self._app = app
        self._spool = spool
        self._cheap = cheap
        self._direct = direct
        self.held: dict[int, dict[str, Any]] = {}  # update id → raw update, running, not on disk
        self._running: dict[int, int] = {}  # user id → its updates handed to the application
        self._backlog: dict[int, list[dict[str, Any]]] = {}  # user id → durable, waiting
        self._known: set[int] = set()  # ids running or waiting (a redelivery is skipped)
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._holding = False  # restored updates wait for release()
        self.finished = asyncio.Event()  # an update finished (polling may poll again)

    def restore(self) -> list[int]:
        """Queue what the last run accepted and did not finish; their ids. They wait for
        `release`: polling first takes back what Telegram still holds (the updates that were
        running), so that each user's updates run in id order across both."""
        self._holding = True
        pending = self._spool.load()
        for raw in pending:
            self._queue(raw)
        return [raw["update_id"] for raw in pending]

    def release(self) -> None:
        """Start running the restored updates."""
        self._holding = False
        self._pump_all()

    def take(self, updates: list[dict[str, Any]]) -> None:
        """Polling: run each update now if its user is under the cap, else spool it."""
        spill = []
        for raw in updates:
            if raw["update_id"] in self._known:
                continue
            user = _sender(raw)
            if user is None or self._cheap(raw) or self._may_run(user):
                self._start(raw, durable=False)
            else:
                spill.append(raw)
        if not spill:
            return
        try:
            self._spool.add(spill)
        except OSError as exc:  # keep them in memory, holding the offset: nothing is lost
            log.warning("telegram: cannot spool %d update(s) (%s); running them", len(spill), exc)
            for raw in spill:
                self._start(raw, durable=False)
            return
        for raw in spill:
            self._queue(raw)
        self._pump_all()

    def accept(self, raw: dict[str, Any]) -> None:
        """Webhook: on disk first (raises OSError, and then it must not be acknowledged)."""
        if raw["update_id"] in self._known:
            return  # Telegram sent it again: our 200 did not reach it
        user = _sender(raw)
        if user is None or self._cheap(raw):
            self._start(raw, durable=False)  # nothing worth keeping: a refusal at most
            return
        self._spool.add([raw])
        self._queue(raw)
        self._pump(user)

    def spool_held(self) -> None:
        """Put every held update on disk, so that polling may acknowledge past them."""
        raws = [raw for uid, raw in self.held.items() if _sender(raw) is not None]
        if not raws:
            return
        try:
            self._spool.add(raws)
        except OSError as exc:
            log.warning("telegram: cannot spool the running updates (%s)", exc)
            return
        for raw in raws:
            self.held.pop(raw["update_id"], None)

    @property
    def busy(self) -> bool:
        return bool(self._tasks)

    def in_flight(self) -> int:
        """Updates accepted and not yet handled (running or waiting), for the metrics."""
        return len(self._known)

    async def drain(self) -> None:
        """Let running updates finish; what waits in the backlogs stays spooled for next time."""
        self._stopping = True
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _may_run(self, user: int) -> bool:
        return self._running.get(user, 0) < PER_USER_IN_FLIGHT and not self._backlog.get(user)

    def _queue(self, raw: dict[str, Any]) -> None:
        user = _sender(raw)
        assert user is not None
        self._known.add(raw["update_id"])
        bisect.insort(self._backlog.setdefault(user, []), raw, key=lambda u: u["update_id"])

    def _pump_all(self) -> None:
        for user in list(self._backlog):
            self._pump(user)

    def _pump(self, user: int) -> None:
        backlog = self._backlog.get(user)
        while (
            backlog
            and not (self._stopping or self._holding)
            and self._running.get(user, 0) < PER_USER_IN_FLIGHT
        ):
            self._start(backlog.pop(0), durable=True)
        if not backlog:
            self._backlog.pop(user, None)

    def _start(self, raw: dict[str, Any], *, durable: bool) -> None:
        uid = raw["update_id"]
        turn = self._direct(raw) if self._direct is not None else None
        update: Update | dict[str, Any] = raw
        if turn is None:
            try:
                update = Update.de_json(raw, self._app.bot)
            except Exception as exc:  # never retried: it would fail the same way forever
                log.error("telegram: skipping update %s that does not parse (%r)", uid, exc)
                self._spool.done(uid)
                return
        user = _sender(raw)
        if not durable:
            self.held[uid] = raw
        self._known.add(uid)
        if user is not None:
            self._running[user] = self._running.get(user, 0) + 1
        task = asyncio.create_task(
            self._handle(uid, update, turn, user), name=f"telegram update {uid}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(
        self,
        uid: int,
        update: Update | dict[str, Any],
        turn: Callable[[], Awaitable[None]] | None,
        user: int | None,
    ) -> None:
        """Process like PTB would (its processor: concurrency, one user's updates in order); the
        update counts as handled once its turn is over, answered or not. A cancelled one (the
        process is going down hard) is not: it stays spooled, or with Telegram. `turn`: the
        adapter's own for a raw update (`direct`), else `update` goes to PTB's handlers."""
        app = self._app
        over = False
        try:
            if turn is not None:
                await app.update_processor.process_update(update, turn())
            else:
                assert isinstance(update, Update)
                await app.update_processor.process_update(update, app.process_update(update))
            over = True
        except Exception:
            over = True  # an error of our own would happen again: not retried
            log.exception("telegram: update %s could not be processed", uid)
        finally:
            self.held.pop(uid, None)
            self._known.discard(uid)
            if over:
                self._spool.done(uid)
            if user is not None:
                self._running[user] -= 1
                if not self._running[user]:
                    del self._running[user]
                if over:
                    self._pump(user)
            self.finished.set()


def _sender(raw: dict[str, Any]) -> int | None:
    """The sending user's id of a raw update, if it has a well-formed one."""
    for value in raw.values():
        if isinstance(value, dict):
            sender = value.get("from")
            if isinstance(sender, dict) and type(sender.get("id")) is int:
                return sender["id"]
    return None


class PerChatInterval:
    """At most one event per chat per interval (a refusal to a stranger): the first passes."""

    def __init__(self, interval_s: float, max_chats: int = 10_000) -> None:
        self.interval_s = interval_s
        self._max = max_chats
        self._last: dict[int, float] = {}

    def allow(self, chat_id: int) -> bool:
        now = time.monotonic()
        last = self._last.get(chat_id)
        if last is not None and now - last < self.interval_s:
            return False
        if len(self._last) >= self._max:  # bounded: forget the chats whose interval is over
            self._last = {c: t for c, t in self._last.items() if now - t < self.interval_s}
            if len(self._last) >= self._max:
                return False  # a swarm of strangers: refuse silently until it passes
        self._last[chat_id] = now
        return True


class Poller:
    """Long polling that acknowledges an update only once it has been handled or spooled.

    Telegram forgets every update below the `offset` of a getUpdates call. We send the lowest
    update id still held (running, not on disk), or one past the highest seen when none is; so a
    crash (or a stop that could not finish) leaves every unfinished update either with Telegram,
    to be redelivered, or in the spool. Until then getUpdates keeps returning the held updates:
    each is dispatched once per process, and while any runs we poll without waiting, as soon as
    one finishes or every BUSY_POLL_S, never closer together than MIN_POLL_GAP_S; right away
    after a full answer (more may be waiting behind it).
    """

    def __init__(
        self, app: Application, allowed: list[str], timeout_s: int, intake: Intake
    ) -> None:
        self._app = app
        self._allowed = allowed
        self._timeout_s = timeout_s
        self._intake = intake
        self._dispatched: set[int] = set()  # ids handed to the intake, not yet forgotten
        self._highest: int | None = None  # highest id a getUpdates returned
        self._acknowledged = 0  # the offset of the last getUpdates Telegram answered
        self._last_poll = float("-inf")
        self._got_new = True  # the last poll brought a new update
        self._full = False  # the last poll brought as many updates as it asked for
        self._first = True  # no getUpdates answered yet (the spooled updates wait for one)

    def offset(self) -> int | None:
        """What to acknowledge: every update below this id has been handled or spooled."""
        if self._intake.held:
            return min(self._intake.held)
        return None if self._highest is None else self._highest + 1

    async def start(self) -> None:
        """Queue what the last run spooled; drop a webhook left from webhook mode (keeping its
        pending updates): getUpdates answers 409 while one is set."""
        self._dispatched.update(self._intake.restore())
        try:
            await flood_safe(lambda: self._app.bot.delete_webhook(drop_pending_updates=False))
        except TelegramError as exc:
            log.warning("telegram: deleteWebhook failed (%s); polling anyway", describe_error(exc))

    async def run(self, stop: asyncio.Event) -> None:
        """Poll and dispatch until `stop`; then let running turns finish and acknowledge them."""
        failures = 0
        while not stop.is_set():
            await self._pause(stop)
            if stop.is_set():
                break
            try:
                updates = await self._poll(stop)
            except Exception as exc:  # the loop must outlive any error of one call
                failures += 1
                await _sleep_unless(stop, self._backoff(exc, failures))
                continue
            if updates is None:
                break  # stopped while polling; what that poll brought is redelivered later
            if failures:
                log.info("telegram: getUpdates works again")
            failures = 0
            self._dispatch(updates)
        log.info("telegram: stopping; finishing %d running turn(s)", len(self._intake.held))
        await self._intake.drain()
        await self._acknowledge_handled()

    # ---- one poll ---------------------------------------------------------------------------

    async def _pause(self, stop: asyncio.Event) -> None:
        """Don't spin: getUpdates answers at once while updates are held (still pending)."""
        loop = asyncio.get_running_loop()
        if self._intake.held and not self._full:
            deadline = self._last_poll + BUSY_POLL_S
            await _wait_any([self._intake.finished, stop], deadline - loop.time())
        if self._intake.held or self._full:
            gap = self._last_poll + MIN_POLL_GAP_S - loop.time()
            if gap > 0 and self._intake.held:  # (none held: that poll cannot return at once)
                await _sleep_unless(stop, gap)
        elif self._timeout_s <= 0 and not self._got_new:
            await _sleep_unless(stop, self._last_poll + BUSY_POLL_S - loop.time())

    async def _poll(self, stop: asyncio.Event) -> list[dict[str, Any]] | None:
        """One getUpdates (raw updates), or None if `stop` came first (the call is abandoned)."""
        offset = self.offset()
        timeout = 0 if self._intake.held or self._first else self._timeout_s
        self._intake.finished.clear()
        self._last_poll = asyncio.get_running_loop().time()
        call = asyncio.ensure_future(self._get_updates(offset, timeout))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({call, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            return None
        updates = call.result()
        if offset is not None:
            self._acknowledged = max(self._acknowledged, offset)
            self._dispatched = {u for u in self._dispatched if u >= offset}  # forgotten
        return updates

    async def _get_updates(
        self, offset: int | None, wait_s: int, limit: int = POLL_LIMIT
    ) -> list[dict[str, Any]]:
        """getUpdates through the public raw call, without building Update objects: a busy poll
        returns every update still in flight again (up to 100), and parsing them all each time
        cost more CPU than the turns. Errors are raised as Bot.get_updates raises them."""
        data: dict[str, Any] = {"offset": offset, "limit": limit, "timeout": wait_s}
        if self._allowed:
            data["allowed_updates"] = self._allowed
        result = await raw_call(
            self._app.bot, "getUpdates", data, read_timeout=GET_UPDATES_READ_S + wait_s
        )
        if not isinstance(result, list):
            raise TelegramError(f"getUpdates returned {type(result).__name__}, not a list")
        return [u for u in result if isinstance(u, dict) and isinstance(u.get("update_id"), int)]

    def _dispatch(self, updates: list[dict[str, Any]]) -> None:
        """Hand each update not yet handed over to the intake, in id order."""
        fresh = []
        for raw in sorted(updates, key=lambda u: u["update_id"]):
            uid = raw["update_id"]
            # Every id seen is running, spooled or handled: the next offset may pass it.
            self._highest = uid if self._highest is None else max(self._highest, uid)
            if uid in self._dispatched or uid < self._acknowledged:
                continue  # still running, or handled and awaiting acknowledgement
            self._dispatched.add(uid)
            fresh.append(raw)
        self._got_new = bool(fresh)
        self._intake.take(fresh)
        if self._first:
            self._first = False
            self._intake.release()
        self._full = len(updates) >= POLL_LIMIT
        if self._full:
            self._intake.spool_held()  # the window is full: let the offset move past them

    async def _acknowledge_handled(self) -> None:
        """The last getUpdates: tell Telegram what was handled since the last poll."""
        offset = self.offset()
        if offset is None or offset <= self._acknowledged:
            return
        try:
            await self._get_updates(offset, 0, limit=1)
        except TelegramError as exc:
            log.warning(
                "telegram: could not acknowledge the last handled updates (%s); Telegram will "
                "deliver them again and they will not be answered twice",
                describe_error(exc),
            )
            return
        self._acknowledged = offset

    def _backoff(self, exc: Exception, failures: int) -> float:
        """Seconds to wait after a failed getUpdates, with one clear log line."""
        wait = min(MAX_BACKOFF_S, 0.5 * 2 ** (failures - 1))
        if isinstance(exc, RetryAfter):
            wait = max(wait, retry_seconds(exc))
            log.warning("telegram: getUpdates flood limit; retrying in %.1f s", wait)
        elif isinstance(exc, Conflict):
            log.error(
                "telegram: getUpdates conflict (%s): another process is polling with this bot "
                "token, or a webhook is set; retrying in %.1f s",
                describe_error(exc),
                wait,
            )
        elif isinstance(exc, InvalidToken):
            wait = MAX_BACKOFF_S
            log.error("telegram: getUpdates unauthorized (token revoked?); retry in %.0f s", wait)
        elif isinstance(exc, TimedOut) and failures == 1:
            wait = 0.0  # a long poll that outlived its read timeout: just ask again
            log.debug("telegram: getUpdates timed out; polling again")
        elif isinstance(exc, TelegramError):
            reason = describe_error(exc)
            log.warning("telegram: getUpdates failed (%s); retry in %.1f s", reason, wait)
        else:
            name = type(exc).__name__
            log.error("telegram: getUpdates failed (%s); retry in %.1f s", name, wait, exc_info=exc)
        return wait


def describe_error(exc: TelegramError) -> str:
    """A short account of a Bot API error, never InvalidToken's text (it can hold the token)."""
    if isinstance(exc, InvalidToken):
        return "unauthorized"
    return f"{type(exc).__name__}: {exc.message}"


async def _wait_any(events: list[asyncio.Event], timeout_s: float) -> None:
    """Until one of `events` is set, or `timeout_s` has passed."""
    if timeout_s <= 0 or any(event.is_set() for event in events):
        return
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    await _wait_any([stop], seconds)
