"""Fair intake of updates, for polling and the webhook alike (see adapters/telegram/polling.py).

At most PER_USER_IN_FLIGHT updates of one user are handed to the application at a time; the
others wait in that user's backlog, which is on disk first (the spool), so a person sending 250
messages cannot make everyone else wait for their turns. `PerUserOrder` runs different users'
updates at once and one user's in arrival order.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from telegram import Update
from telegram.ext import Application, BaseUpdateProcessor

from adapters.telegram.spool import Spool

log = logging.getLogger(__name__)


PER_USER_IN_FLIGHT = 2  # one user's updates handed to the application at once (see Intake)


# The adapter's turn for a raw update it handles without PTB's Update, or None (see Intake).
Direct = Callable[[dict[str, Any]], Callable[[], Awaitable[None]] | None]


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
        self._writing: dict[int, asyncio.Future[None]] = {}  # webhook: id → its spool write
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

    async def take(self, updates: list[dict[str, Any]]) -> None:
        """Polling: run each update now if its user is under the cap, else spool it (returns
        once they are on disk: then the offset may move past them)."""
        spill = []
        for raw in updates:
            if self._seen(raw["update_id"]):
                continue
            user = _sender(raw)
            cheap = self._cheap(raw)
            if user is None or cheap or self._may_run(user):
                self._start(raw, durable=False, remember=not cheap)
            else:
                spill.append(raw)
        if not spill:
            return
        try:
            await self._spool.add(spill)
        except OSError as exc:  # keep them in memory, holding the offset: nothing is lost
            log.warning("telegram: cannot spool %d update(s) (%s); running them", len(spill), exc)
            for raw in spill:
                self._start(raw, durable=False, remember=True)
            return
        for raw in spill:
            self._queue(raw)
        self._pump_all()

    async def accept(self, raw: dict[str, Any]) -> None:
        """Webhook: on disk first (raises OSError, and then it must not be acknowledged)."""
        uid = raw["update_id"]
        writing = self._writing.get(uid)
        if writing is not None:  # the same POST again while the first is being written
            await asyncio.shield(writing)  # acknowledged only once it is on disk
            return
        if self._seen(uid):
            return  # Telegram sent it again (our 200 did not reach it), or a replay
        user = _sender(raw)
        cheap = self._cheap(raw)
        if user is None or cheap:  # nothing worth keeping: a refusal at most
            self._start(raw, durable=False, remember=not cheap)
            return
        writing = self._writing[uid] = asyncio.ensure_future(self._spool.add([raw]))
        try:
            await asyncio.shield(writing)
        finally:
            del self._writing[uid]
        self._queue(raw)
        self._pump(user)

    async def spool_held(self) -> None:
        """Put every held update on disk, so that polling may acknowledge past them."""
        raws = [raw for uid, raw in self.held.items() if _sender(raw) is not None]
        if not raws:
            return
        try:
            await self._spool.add(raws)
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
        """Let running updates finish; what waits in the backlogs stays spooled for next time.
        The spool's queued writes are done when this returns."""
        self._stopping = True
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.flush()

    async def flush(self) -> None:
        """Wait for the spool's queued writes (a run that failed flushes too: the next run's
        spool must be the file's only writer)."""
        await self._spool.flush()

    def _seen(self, uid: int) -> bool:
        """Running, waiting, or handled lately: the same update again gets no second turn."""
        if uid in self._known:
            return True
        if uid in self._spool.handled:
            log.info("telegram: update %s was handled already; acknowledged, not answered", uid)
            return True
        return False

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
            self._start(backlog.pop(0), durable=True, remember=True)
        if not backlog:
            self._backlog.pop(user, None)

    def _start(self, raw: dict[str, Any], *, durable: bool, remember: bool) -> None:
        """Run it; `remember`: once handled its id is kept (see Spool), not for a stranger's
        refusal, which costs nothing to repeat and whose flood would only churn the file."""
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
            self._handle(uid, update, turn, user, remember), name=f"telegram update {uid}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(
        self,
        uid: int,
        update: Update | dict[str, Any],
        turn: Callable[[], Awaitable[None]] | None,
        user: int | None,
        remember: bool,
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
                self._spool.done(uid, remember=remember)
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
