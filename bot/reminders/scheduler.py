"""Sending each reminder at its time: a heap of each person's next due time, slept on until the
soonest, never a poll of the workspaces.

At start the due times come from the index beside the workspaces (index.py), one line per
person; a person's own file is read only when their time comes. Then each of their reminders
that is due is sent through the sender of its platform (`bot.platform.Resender`: the adapter's
`send_to`, or in a worker the ingress's, bot/cluster/push.py) to the chat it was asked in, and a
`delivered` record is appended to their file; the text is appended to the session it was asked
in too, so the model knows it reminded them. A person whose reminders belong to a platform this
process does not serve, or who belongs to another worker (`owns`), is left for the process
that does.

Nothing lost, nothing twice: a reminder is recorded as delivered only once its platform took
it; one due while the bot was down is sent once at the next start and says it is late, and a
repeating one missed several times is sent once, for its latest time. A clean stop waits for
the sends under way and their records. Only a crash between a send and its record (an instant)
sends that reminder again after the restart, once. A send that fails is tried again later
(RETRY_FIRST_S, doubling to RETRY_MAX_S), and given up, recorded and logged, GIVE_UP after
its time.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot.formatting import literal
from bot.outbound import Reply
from bot.reminders.desk import Pending, ReminderBook, earliest, pending_of
from bot.reminders.zones import label, show
from memory import clock
from memory.reminders.records import DELIVERED, ReminderFile
from memory.threads import in_thread

if TYPE_CHECKING:
    from bot.platform import Resender

log = logging.getLogger(__name__)

LATE_AFTER_S = 60.0  # sent this long after its time (or due before this start): marked late
MAX_SLEEP_S = 60.0  # the clock is read again at least this often (it may be set meanwhile)
RETRY_FIRST_S = 30.0
RETRY_MAX_S = 3600.0
GIVE_UP = timedelta(days=3)
AT_ONCE = 64  # people whose reminders are being sent at the same time

NoteInSession = Callable[[str, str, str], Awaitable[None]]  # (user, session, text)


def reminder_text(
    reminder: Pending, due: datetime, late: bool, zone: ZoneInfo, now: datetime
) -> str:
    """ "⏰ Reminder: call the dentist"; in a group "⏰ Reminder for Ana: …"; a late one says
    when it was due, a repeating one how it repeats. The person's words (and name) are shown
    as they are, never as markup (bot.formatting.literal): no disguised link in a group."""
    head = "⏰ Reminder"
    if not reminder.private and reminder.name:
        head += f" for {literal(reminder.name)}"
    notes = []
    if reminder.repeat is not None:
        notes.append(reminder.repeat.describe())
    if late:
        notes.append(f"late: it was due {show(due, zone, now)}, {label(zone)}")
    if notes:
        head += f" ({'; '.join(notes)})"
    return f"{head}: {literal(reminder.what)}"


class Scheduler:
    """See the module docstring. `note_in_session` appends a sent reminder to its session."""

    def __init__(self, book: ReminderBook, note_in_session: NoteInSession) -> None:
        self.book = book
        self.senders: dict[str, Resender] = {}
        self.sent = 0
        self._note_in_session = note_in_session
        self._owns: Callable[[str], bool] = lambda user: True
        self._due: dict[str, datetime] = {}  # person → the next time to look at their file
        self._heap: list[tuple[float, str]] = []  # (due, person), stale entries skipped
        self._retry: dict[tuple[str, str], tuple[int, datetime]] = {}  # failed sends
        self._firing: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._sleep_until = 0.0
        self._started_at: datetime | None = None  # while running
        self._slots = asyncio.Semaphore(AT_ONCE)
        book.on_due = self.note
        book.on_wiped = self.forget_person

    def send_with(self, platform: str, sender: Resender) -> None:
        """Reminders asked on `platform` are sent through `sender` (before run())."""
        self.senders[platform] = sender

    @property
    def people(self) -> int:
        """People with a time to wake up for (for the bench and the log)."""
        return len(self._due)

    def note(self, user_key: str, due: datetime | None) -> None:
        """The person's next time changed (a reminder set or cancelled)."""
        if self._started_at is None or not self._owns(user_key):
            return  # not running: the index has it for run()
        if due is None:
            self._due.pop(user_key, None)
            return
        self._schedule(user_key, due)

    def forget_person(self, user_key: str) -> None:
        """After a /wipe: nothing of the person is kept."""
        self._due.pop(user_key, None)
        for key in [k for k in self._retry if k[0] == user_key]:
            del self._retry[key]

    async def run(self, stop: asyncio.Event, owns: Callable[[str], bool] | None = None) -> None:
        """Send reminders at their time until `stop`; then let the sends under way finish.
        `owns(user key)`: whether this process sends that person's (a worker's partitions)."""
        self._owns = owns or (lambda user: True)
        started = time.monotonic()
        entries = self._read_index()
        self._started_at = clock.now()
        for user, due in entries.items():
            if self._owns(user):
                self._schedule(user, due)
        soonest = min(self._due.values(), default=None)
        log.info(
            "reminders: next times of %d people read in %.0f ms%s; sending for %s",
            len(self._due),
            (time.monotonic() - started) * 1000,
            f", the first at {clock.iso(soonest)}" if soonest else "",
            ", ".join(sorted(self.senders)) or "no platform",
        )
        try:
            while not stop.is_set():
                self._start_due()
                delay = self._heap[0][0] - time.time() if self._heap else MAX_SLEEP_S
                delay = min(MAX_SLEEP_S, max(0.0, delay))
                self._sleep_until = time.time() + delay
                self._wake.clear()
                await _first_of(stop.wait(), self._wake.wait(), within=delay)
        finally:
            if self._firing:
                log.info("reminders: finishing %d send(s) under way", len(self._firing))
            while self._firing:
                await asyncio.gather(*list(self._firing.values()), return_exceptions=True)
            self._started_at = None

    # ---- the heap ------------------------------------------------------------------------

    def _schedule(self, user_key: str, due: datetime) -> None:
        self._due[user_key] = due
        heapq.heappush(self._heap, (due.timestamp(), user_key))
        if due.timestamp() < self._sleep_until:
            self._wake.set()

    def _start_due(self) -> None:
        now = time.time()
        while self._heap and self._heap[0][0] <= now:
            stamp, user = heapq.heappop(self._heap)
            due = self._due.get(user)
            if due is None or due.timestamp() != stamp or user in self._firing:
                continue  # replaced by a later entry, or being sent (it reschedules itself)
            del self._due[user]
            self._firing[user] = asyncio.create_task(self._fire(user))
        if len(self._heap) > 4 * len(self._due) + 1024:  # many stale entries: rebuild
            self._heap = [(due.timestamp(), user) for user, due in self._due.items()]
            heapq.heapify(self._heap)

    def _read_index(self) -> dict[str, datetime]:
        index = self.book.index
        if index.exists():
            return index.load()
        workspaces = self.book.workspaces
        people = list(workspaces.user_keys())
        if people:
            log.info(
                "reminders: no index of due times yet; reading the reminders of %d "
                "workspaces once", len(people),
            )  # fmt: skip
        found: dict[str, datetime] = {}
        for user in people:
            with contextlib.suppress(ValueError, OSError):
                reminders = ReminderFile(workspaces.root_of(user))
                if reminders.exists():
                    due = earliest(pending_of(reminders.load()))
                    if due is not None:
                        found[user] = due
        index.rebuild(found.items())
        return found

    # ---- sending ---------------------------------------------------------------------------

    async def _fire(self, user_key: str) -> None:
        sent: list[tuple[Pending, str]] = []
        try:
            async with self._slots, self.book.lock(user_key):
                sent = await self._send_due(user_key)
        except Exception:  # a bug or a disk problem: try the person again later
            log.exception("reminders: could not send the reminders of %s", user_key)
            self._schedule(user_key, clock.now() + timedelta(seconds=RETRY_FIRST_S))
        finally:
            self._firing.pop(user_key, None)
            due = self._due.get(user_key)
            if due is not None and due <= clock.now():  # more due: next turn (_send_due)
                self._schedule(user_key, due)
        for reminder, text in sent:
            try:
                await self._note_in_session(user_key, reminder.session_key, text)
            except Exception as exc:  # the reminder was sent; only the transcript lacks it
                log.warning("reminders: could not add a reminder to its session (%s)", exc)

    async def _send_due(self, user_key: str) -> list[tuple[Pending, str]]:
        """Under the person's lock: send what is due, record it, reschedule the person."""
        book = self.book
        if not book.workspaces.exists(user_key):  # wiped while the bot was down
            book.index.drop(user_key)
            return []
        reminders = book.file_of(user_key)
        now = clock.now()
        zone = book.zone_of(user_key)
        sent = []
        for reminder in pending_of(await in_thread(reminders.load)):
            sender = self.senders.get(reminder.platform)
            retry = self._retry.get((user_key, reminder.id))
            if reminder.due > now or sender is None or (retry and retry[1] > now):
                continue
            due = reminder.due
            if reminder.repeat is not None:
                due = reminder.repeat.latest_not_after(now, reminder.due, reminder.first)
            assert self._started_at is not None
            late = due < self._started_at or (now - due).total_seconds() > LATE_AFTER_S
            text = reminder_text(reminder, due, late, zone, now)
            try:
                await sender.send_to(reminder.place or {}, Reply(text))
            except Exception as exc:  # not taken: tried again later, never recorded as sent
                await self._failed(user_key, reminder, due, exc, reminders)
                continue
            self._retry.pop((user_key, reminder.id), None)
            record = {"type": DELIVERED, "id": reminder.id, "due": clock.iso(due),
                      "at": clock.iso(), "late": late}  # fmt: skip
            await in_thread(partial(reminders.append, record))
            self.sent += 1
            sent.append((reminder, text))
            if not reminder.private:
                # One at a time into a group, which the platform paces (its sender waits
                # for the group's rate): the person's lock is let go between them, so an
                # admin's cancel or their own command is not held up by a flood of them.
                break
        pending = pending_of(await in_thread(reminders.load))  # (held in RAM: no reading)
        book.index.set(user_key, earliest(pending))
        self._reschedule(user_key, pending)
        return sent

    def _reschedule(self, user_key: str, pending: list[Pending]) -> None:
        times = []
        for reminder in pending:
            if reminder.platform not in self.senders:
                continue
            retry = self._retry.get((user_key, reminder.id))
            times.append(max(reminder.due, retry[1]) if retry else reminder.due)
        if times:
            self._schedule(user_key, min(times))
        else:
            self._due.pop(user_key, None)

    async def _failed(
        self, user_key: str, reminder: Pending, due: datetime, exc: Exception, file: ReminderFile
    ) -> None:
        now = clock.now()
        if now - due > GIVE_UP:
            log.error(
                "reminders: gave up sending a reminder of %s due %s (%s)",
                user_key, clock.iso(due), exc,
            )  # fmt: skip
            record = {
                "type": DELIVERED,
                "id": reminder.id,
                "due": clock.iso(due),
                "at": clock.iso(now),
                "failed": str(exc)[:200] or type(exc).__name__,
            }
            await in_thread(partial(file.append, record))
            self._retry.pop((user_key, reminder.id), None)
            return
        attempts = self._retry.get((user_key, reminder.id), (0, now))[0] + 1
        delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (attempts - 1))
        self._retry[(user_key, reminder.id)] = (attempts, now + timedelta(seconds=delay))
        log.warning(
            "reminders: could not send a reminder of %s on %s (%s: %s); trying again in %.0f s",
            user_key, reminder.platform, type(exc).__name__, exc, delay,
        )  # fmt: skip


async def _first_of(*waits: Awaitable[object], within: float) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
