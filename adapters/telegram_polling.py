"""Receiving from the Bot API without losing anything, and calling it within its flood limits.

`Poller` is our getUpdates loop. PTB's Updater acknowledges a batch as soon as it has queued it,
so a crash lost every queued message; we acknowledge an update only once it has been handled.
`PerUserOrder` runs different users' updates at once and one user's in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from telegram import Update
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

log = logging.getLogger(__name__)

FLOOD_RETRIES = 5
POLL_LIMIT = 100  # updates per getUpdates: Telegram's maximum
BUSY_POLL_S = 0.5  # while turns run, look for new updates at least this often…
MIN_POLL_GAP_S = 0.01  # …and, when a turn finishes, no sooner than this after the last poll
MAX_BACKOFF_S = 30.0
GET_UPDATES_READ_S = 10.0  # read timeout of a getUpdates on top of its long-poll timeout

T = TypeVar("T")


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
        user = update.effective_user if isinstance(update, Update) else None
        if user is None:
            await coroutine
            return
        lock = self._locks.setdefault(user.id, asyncio.Lock())
        self._users[user.id] = self._users.get(user.id, 0) + 1
        try:
            async with lock:
                await coroutine
        finally:
            self._users[user.id] -= 1
            if not self._users[user.id]:
                del self._users[user.id]
                del self._locks[user.id]

    async def initialize(self) -> None:
        """Nothing to allocate."""

    async def shutdown(self) -> None:
        """Nothing to free."""


class Poller:
    """Long polling that acknowledges an update only once it has been handled.

    Telegram forgets every update below the `offset` of a getUpdates call. We send the lowest
    update id still being handled, or one past the highest handled when none is; so a crash (or a
    stop that could not finish) leaves every unfinished update with Telegram, to be redelivered.
    Until then getUpdates keeps returning the updates in flight: each is dispatched once per
    process, and while any runs we poll without waiting, as soon as one finishes or every
    BUSY_POLL_S, never closer together than MIN_POLL_GAP_S.
    """

    def __init__(self, app: Application, allowed: list[str], timeout_s: int) -> None:
        self._app = app
        self._allowed = allowed
        self._timeout_s = timeout_s
        self._in_flight: set[int] = set()  # update ids being handled
        self._dispatched: set[int] = set()  # ids handed to the application, not yet forgotten
        self._highest: int | None = None  # highest id dispatched
        self._acknowledged = 0  # the offset of the last getUpdates Telegram answered
        self._finished = asyncio.Event()  # an update finished since the last poll
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_poll = float("-inf")
        self._got_new = True  # the last poll brought a new update
        # do_api_request warns that Bot.get_updates exists; we call the raw method on purpose.
        warnings.filterwarnings(
            "ignore", message=r"Please use 'Bot\.getUpdates'", category=PTBUserWarning
        )

    def offset(self) -> int | None:
        """What to acknowledge: every update below this id has been handled."""
        if self._in_flight:
            return min(self._in_flight)
        return None if self._highest is None else self._highest + 1

    async def start(self) -> None:
        """Drop a webhook left from webhook mode (keeping its pending updates): getUpdates
        answers 409 while one is set."""
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
        log.info("telegram: stopping; finishing %d running turn(s)", len(self._in_flight))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._acknowledge_handled()

    # ---- one poll ---------------------------------------------------------------------------

    async def _pause(self, stop: asyncio.Event) -> None:
        """Don't spin: getUpdates answers at once while updates are in flight (still pending)."""
        loop = asyncio.get_running_loop()
        if self._in_flight:
            deadline = self._last_poll + BUSY_POLL_S
            await _wait_any([self._finished, stop], deadline - loop.time())
            gap = self._last_poll + MIN_POLL_GAP_S - loop.time()
            if gap > 0:
                await _sleep_unless(stop, gap)
        elif self._timeout_s <= 0 and not self._got_new:
            await _sleep_unless(stop, self._last_poll + BUSY_POLL_S - loop.time())

    async def _poll(self, stop: asyncio.Event) -> list[dict[str, Any]] | None:
        """One getUpdates (raw updates), or None if `stop` came first (the call is abandoned)."""
        offset = self.offset()
        timeout = 0 if self._in_flight else self._timeout_s
        self._finished.clear()
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
        try:
            result = await self._app.bot.do_api_request(
                "getUpdates", data, read_timeout=GET_UPDATES_READ_S + wait_s
            )
        except EndPointNotFound as exc:
            # do_api_request reports a rejected token (401) as an unknown method; getUpdates
            # always exists, so it is the token.
            if isinstance(exc.__cause__, InvalidToken):
                raise exc.__cause__ from None
            raise
        if not isinstance(result, list):
            raise TelegramError(f"getUpdates returned {type(result).__name__}, not a list")
        return [u for u in result if isinstance(u, dict) and isinstance(u.get("update_id"), int)]

    def _dispatch(self, updates: list[dict[str, Any]]) -> None:
        """Hand each update not yet handed over to the application, in id order."""
        self._got_new = False
        for raw in sorted(updates, key=lambda u: u["update_id"]):
            uid = raw["update_id"]
            if uid in self._dispatched or uid < self._acknowledged:
                continue  # still running, or handled and awaiting acknowledgement
            self._got_new = True
            self._dispatched.add(uid)
            self._highest = uid if self._highest is None else max(self._highest, uid)
            try:
                update = Update.de_json(raw, self._app.bot)
            except Exception as exc:  # never retried: it would fail the same way forever
                log.error("telegram: skipping update %s that does not parse (%r)", uid, exc)
                continue
            self._in_flight.add(uid)
            task = asyncio.create_task(self._handle(update), name=f"telegram update {uid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _handle(self, update: Update) -> None:
        """Process like PTB would (its processor: concurrency, one user's updates in order); the
        update counts as handled once its turn is over, answered or not."""
        app = self._app
        try:
            await app.update_processor.process_update(update, app.process_update(update))
        except Exception:
            log.exception("telegram: update %s could not be processed", update.update_id)
        finally:
            self._in_flight.discard(update.update_id)
            self._finished.set()

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


