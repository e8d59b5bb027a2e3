"""Receiving from the Bot API without losing anything, fairly, and calling it within its limits.

`Poller` is our getUpdates loop. PTB's Updater acknowledges a batch as soon as it has queued it,
so a crash lost every queued message. We acknowledge an update only once it has been handled, or
once it is on disk (the spool, adapters/telegram/spool.py): Telegram's acknowledgement is one
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
import contextlib
import logging
from typing import Any

from telegram.error import (
    Conflict,
    InvalidToken,
    RetryAfter,
    TelegramError,
    TimedOut,
)
from telegram.ext import Application

from adapters.telegram.bot_api import describe_error, flood_safe, raw_call, retry_seconds
from adapters.telegram.intake import Intake

log = logging.getLogger(__name__)

POLL_LIMIT = 100  # updates per getUpdates: Telegram's maximum
BUSY_POLL_S = 0.5  # while turns run, look for new updates at least this often…
MIN_POLL_GAP_S = 0.01  # …and, when a turn finishes, no sooner than this after the last poll
MAX_BACKOFF_S = 30.0
GET_UPDATES_READ_S = 10.0  # read timeout of a getUpdates on top of its long-poll timeout


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
            await self._dispatch(updates)
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

    async def _dispatch(self, updates: list[dict[str, Any]]) -> None:
        """Hand each update not yet handed over to the intake, in id order; returns once those
        to be acknowledged are on disk or running (held)."""
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
        await self._intake.take(fresh)
        if self._first:
            self._first = False
            self._intake.release()
        self._full = len(updates) >= POLL_LIMIT
        if self._full:
            await self._intake.spool_held()  # the window is full: let the offset move past them

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
