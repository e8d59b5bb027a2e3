"""The reminders of each person: setting, listing and cancelling them, for /remind, /reminders,
/timezone and the model's `remind` tool alike.

`ReminderBook` holds what is shared: the settings, a lock per person (one writer of their
reminders file at a time; the agent's exclusive() takes it too, so /forget and /wipe never race
a send), the due-time index (index.py) and the scheduler to wake. `PersonReminders` is one
person's desk, bound to the message they wrote: it can only ever reach their own reminders, and
a reminder set through it goes back to the chat it was asked in. What is pending comes from
the person's ReminderFile (memory/reminders/records.py), which holds it in RAM, bounded; its file
is read or written only in a thread: a command never parses it on the event loop, and a big file
is read once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from bot.formatting import literal
from bot.inbound import Inbound
from bot.reminders.groups import GroupIndex
from bot.reminders.index import DueIndex
from bot.reminders.repeat import INTERVAL, Repeat
from bot.reminders.when import WhenError, split, too_often
from bot.reminders.when import parse as parse_when
from bot.reminders.zones import TIMEZONE, label, person_zone, show, zone_named
from memory import clock
from memory.preferences import Preferences
from memory.reminders.records import CANCELLED, SET, ReminderFile, StoredReminder
from memory.threads import in_thread
from memory.workspace import Workspace, Workspaces

if TYPE_CHECKING:
    from bot.config import Config

LONGEST_WHAT = 2000  # characters of what to remind of that are kept (and echoed)
SET_OK = "OK, I'll remind you"  # how a confirmation of a reminder set begins


@dataclass(frozen=True)
class Pending:
    """A reminder still to be sent, with its next time."""

    id: str
    what: str
    due: datetime  # UTC
    first: datetime
    repeat: Repeat | None
    platform: str
    place: dict[str, str] | None
    session_key: str
    private: bool
    name: str | None
    chat: str | None = None  # the group it was set in (bot.keys.chat_key); None: private


def pending_of(stored: list[StoredReminder]) -> list[Pending]:
    """What the records add up to, soonest first. A rule this version cannot read makes the
    reminder a single one (sent once, not lost)."""
    found = []
    for reminder in stored:
        record = reminder.record
        first = clock.parse(record.get("due"))
        if first is None or reminder.cancelled:
            continue
        repeat = Repeat.from_record(record.get("repeat"))
        if repeat is None and reminder.delivered:
            continue
        due = first
        if repeat is not None and reminder.delivered:
            last = clock.parse(reminder.delivered[-1]) or first
            due = repeat.next_after(last, first)
        place = record.get("place")
        found.append(
            Pending(
                id=reminder.id,
                what=reminder.what,
                due=due,
                first=first,
                repeat=repeat,
                platform=str(record.get("platform", "")),
                place=place if isinstance(place, dict) else None,
                session_key=str(record.get("session", "")),
                private=bool(record.get("private", True)),
                name=record.get("name") if isinstance(record.get("name"), str) else None,
                chat=record.get("chat") if isinstance(record.get("chat"), str) else None,
            )
        )
    found.sort(key=lambda p: (p.due, p.id))
    return found


def earliest(pending: list[Pending]) -> datetime | None:
    return min((p.due for p in pending), default=None)


class ReminderBook:
    """Shared by every person's desk and the scheduler (see the module docstring)."""

    def __init__(self, config: Config, workspaces: Workspaces, is_admin: Callable[[str], bool]):
        self.default_zone = config.agent.default_timezone
        self.per_person = config.limits.reminders_per_person
        self.shortest_repeat_s = config.limits.reminder_min_repeat_s
        self.per_group = config.limits.reminders_per_group
        self.workspaces = workspaces
        self.index = DueIndex(workspaces.base_dir)
        self.groups = GroupIndex(workspaces.base_dir)  # whose files hold a group's reminders
        self.is_admin = is_admin
        self._locks: dict[str, asyncio.Lock] = {}
        self._group_locks: dict[str, asyncio.Lock] = {}
        # Each person's reminders waiting in groups, as last read, by their file's mark.
        self._group_reminders: dict[str, tuple[tuple[int, int, int] | None, list[Pending]]] = {}
        # The scheduler's: told of a person's new earliest time (bot/reminders/scheduler.py).
        self.on_due: Callable[[str, datetime | None], None] = lambda user, due: None
        self.on_wiped: Callable[[str], None] = lambda user: None

    def lock(self, user_key: str) -> asyncio.Lock:
        return self._locks.setdefault(user_key, asyncio.Lock())

    def group_lock(self, chat: str | None) -> contextlib.AbstractAsyncContextManager[object]:
        """Held while a group's reminders are counted and one is set, or its admins cancel
        some (taken before any person's lock): its cap is never passed by two at once."""
        if chat is None:
            return contextlib.nullcontext()
        return self._group_locks.setdefault(chat, asyncio.Lock())

    async def in_group(self, chat: str) -> list[tuple[str, Pending]]:
        """The reminders waiting in a group, whoever set them: (their person, the reminder),
        soonest first. Only the files of the people the group index names are read, in a
        thread (they may be large), and only those changed since they were last read here (a
        flood of /remind in a group rereads the setter's file, not every member's)."""
        people = [user for user in self.groups.members(chat) if self.workspaces.exists(user)]
        files = [(user, self.file_of(user)) for user in people]
        seen = self._group_reminders

        def read() -> list[tuple[str, Pending]]:
            found = []
            for user, file in files:
                mark = _mark(file.path)
                known = seen.get(user)
                if known is None or known[0] != mark or mark is None:
                    known = (mark, [r for r in pending_of(file.load()) if r.chat is not None])
                    seen[user] = known
                found += [(user, reminder) for reminder in known[1] if reminder.chat == chat]
            return found

        found = await asyncio.to_thread(read) if files else []
        found.sort(key=lambda item: (item[1].due, item[1].id))
        return found

    def file_of(self, user_key: str) -> ReminderFile:
        """The person's reminders file, without loading (or creating) their workspace."""
        workspace = self.workspaces.cached(user_key)
        if workspace is not None:
            return workspace.reminders
        return ReminderFile(self.workspaces.root_of(user_key))

    def zone_of(self, user_key: str) -> ZoneInfo:
        workspace = self.workspaces.cached(user_key)
        preferences = (
            workspace.preferences
            if workspace is not None
            else Preferences(self.workspaces.root_of(user_key))
        )
        return person_zone(preferences, self.default_zone)[0]

    def forget_user(self, user_key: str) -> None:
        """RAM and idle eviction: the lock goes (unless held). After a /wipe (the folder is
        gone by then) the index and the scheduler forget the person too."""
        lock = self._locks.get(user_key)
        if lock is not None and not lock.locked():
            del self._locks[user_key]
        self._group_reminders.pop(user_key, None)
        if not self.workspaces.exists(user_key):
            self.index.drop(user_key)
            self.groups.drop(user_key)
            self.on_wiped(user_key)

    def settle(self, user_key: str, pending: list[Pending]) -> None:
        """After a change of the person's file: the index and the scheduler learn their next
        time (index.py: a later time is written only once the file has it)."""
        due = earliest(pending)
        self.index.set(user_key, due)
        self.on_due(user_key, due)

    def earliest(self, user_key: str) -> datetime | None:
        """The person's next due time, read from their file (None: nothing, or no workspace)."""
        if not self.workspaces.exists(user_key):
            return None
        return earliest(pending_of(self.file_of(user_key).load()))

    def refresh(self, user_key: str) -> None:
        """After their files moved (/link, /unlink): the index and the scheduler read the
        person's next time from their file again (none: the key holds no workspace now)."""
        if self.workspaces.exists(user_key):
            pending = pending_of(self.file_of(user_key).load())
            for chat in {reminder.chat for reminder in pending if reminder.chat is not None}:
                self.groups.add(chat, user_key)  # joined: their group reminders came along
            self.settle(user_key, pending)
        else:
            self.index.drop(user_key)
            self.on_wiped(user_key)

    def announce(self, user_key: str, due: datetime) -> None:
        """Before a reminder is written: an earlier time goes into the index first."""
        known = self.index.get(user_key)
        if known is None or due < known:
            self.index.set(user_key, due)


class PersonReminders:
    """One person's desk, bound to the message they wrote (see the module docstring)."""

    def __init__(self, book: ReminderBook, workspace: Workspace, inbound: Inbound) -> None:
        self._book = book
        self._workspace = workspace
        self._inbound = inbound

    @property
    def user_key(self) -> str:
        return self._inbound.user_key

    def zone(self) -> tuple[ZoneInfo, bool]:
        """The person's zone and whether they chose it."""
        return person_zone(self._workspace.preferences, self._book.default_zone)

    def set_zone(self, name: str) -> ZoneInfo:
        """ZoneError for a name that is not a zone."""
        zone = zone_named(name)
        self._workspace.preferences.set(TIMEZONE, zone.key)
        return zone

    async def pending(self) -> list[Pending]:
        """Under the person's lock: a reading that waits does so on the loop, not in one of
        the threads everyone's file work shares."""
        async with self._book.lock(self.user_key):
            return pending_of(await in_thread(self._workspace.reminders.load))

    async def set_from_text(self, text: str) -> str:
        """/remind <when> <what>: the answer (what was set, or why nothing was)."""
        zone, _ = self.zone()
        now = clock.now()
        try:
            when, what = split(text, now, zone)
        except WhenError as exc:
            return str(exc)
        return await self._set(when.first, when.repeat, what, when.default_time, now, zone)

    async def set(self, when_text: str, what: str) -> str:
        """The tool's set: `when_text` alone is the when."""
        zone, _ = self.zone()
        now = clock.now()
        try:
            when = parse_when(when_text, now, zone)
        except WhenError as exc:
            return str(exc)
        return await self._set(when.first, when.repeat, what, when.default_time, now, zone)

    async def _set(
        self,
        first: datetime,
        repeat: Repeat | None,
        what: str,
        default_time: bool,
        now: datetime,
        zone: ZoneInfo,
    ) -> str:
        what = " ".join(what.split())
        shortened = len(what) > LONGEST_WHAT
        what = what[:LONGEST_WHAT]  # the confirmation echoes what is kept, never more
        if not what:
            return (
                "What should I remind you of? Put it after the time, e.g. "
                "/remind in 10 minutes take the bread out. Nothing was set."
            )
        if self._inbound.place is None:  # its platform cannot send here later
            return "I can't send a message to this chat later, so I can't set reminders here."
        if repeat is not None and not self._admin():
            refused = too_often(repeat, self._book.shortest_repeat_s)
            if refused:
                return refused
        inbound = self._inbound
        record: dict[str, Any] = {
            "type": SET,
            "id": secrets.token_hex(6),
            "at": clock.iso(now),
            "due": clock.iso(first),
            "what": what,
            "repeat": repeat.to_record() if repeat is not None else None,
            "platform": inbound.platform,
            "place": inbound.place,
            "session": inbound.session_key,
            "private": inbound.is_private,
            "name": inbound.sender_name,
            "zone": zone.key,
        }
        if inbound.message_id is not None:
            record["message"] = inbound.message_id
        chat = None if inbound.is_private else inbound.chat_key
        if chat is not None:
            record["chat"] = chat
        async with self._book.group_lock(chat):
            if chat is not None:
                refused = await self._group_full(chat, message_id=inbound.message_id, what=what)
                if refused:
                    return refused
                self._book.groups.add(chat, self.user_key)  # before the reminder is written
            return await self._append_set(
                record, first, repeat, what, default_time, now, zone, shortened
            )

    async def _group_full(self, chat: str, *, message_id: str | None, what: str) -> str | None:
        """Why the group takes no more reminders ([limits] reminders_per_group), else None."""
        limit = self._book.per_group
        if not limit or self._admin():
            return None
        waiting = await self._book.in_group(chat)
        if len(waiting) < limit:
            return None
        if _set_by(await in_thread(self._workspace.reminders.load), message_id, what) is not None:
            return None  # this very message, delivered again: answered as before
        return (
            f"This group has {len(waiting)} reminders waiting, the most I keep for one group. "
            "Its admins can list and cancel them with /reminders group. Nothing was set."
        )

    async def _append_set(
        self,
        record: dict[str, Any],
        first: datetime,
        repeat: Repeat | None,
        what: str,
        default_time: bool,
        now: datetime,
        zone: ZoneInfo,
        shortened: bool,
    ) -> str:
        inbound = self._inbound
        file = self._workspace.reminders
        async with self._book.lock(self.user_key):
            stored = await in_thread(file.load)
            again = _set_by(stored, inbound.message_id, what)
            if again is not None:  # the same message delivered again after a crash
                first, repeat = clock.parse(again.record.get("due")) or first, _rule_of(again)
                return self._set_text(first, repeat, again.what, default_time, now, zone, shortened)
            pending = pending_of(stored)
            limit = self._book.per_person
            if limit and len(pending) >= limit and not self._admin():
                return (
                    f"You have {len(pending)} reminders waiting, the most I keep for one "
                    "person. /reminders lists them; /reminders cancel N removes one. "
                    "Nothing was set."
                )
            self._book.announce(self.user_key, first)
            await in_thread(partial(file.append, record))
            self._book.settle(self.user_key, pending_of(await in_thread(file.load)))
        return self._set_text(first, repeat, what, default_time, now, zone, shortened)

    def _set_text(
        self,
        first: datetime,
        repeat: Repeat | None,
        what: str,
        default_time: bool,
        now: datetime,
        zone: ZoneInfo,
        shortened: bool,
    ) -> str:
        when = show(first, zone, now)
        how = f", then {repeat.describe()}" if repeat is not None else ""
        where = "" if self._inbound.is_private else " here in this chat"
        guessed = " (no time given, so at 9:00)" if default_time else ""
        cut = f" (shortened to its first {LONGEST_WHAT:,} characters)" if shortened else ""
        shown = literal(what)  # never markup, in a group above all (bot.formatting)
        return f"{SET_OK}{where} {when}{guessed}{how} ({label(zone)}){cut}: {shown}"

    async def cancel(self, which: str, *, once: bool = True) -> str:
        """`which`: a number of the list (/reminders), or "all". `once`: a message delivered
        again (after a crash) cancels nothing more; the model's tool, which may cancel twice
        in one turn, says False (a turn already answered is never run again)."""
        message = self._inbound.message_id if once else None
        file = self._workspace.reminders
        async with self._book.lock(self.user_key):
            stored = await in_thread(file.load)
            done = [
                r for r in stored if r.cancelled and message is not None and message in r.messages
            ]
            if done:  # the same message delivered again after a crash: done already
                return (
                    f"Cancelled: {done[0].what}"
                    if len(done) == 1
                    else (f"Cancelled all {len(done)} of your reminders.")
                )
            pending = pending_of(stored)
            if not pending:
                return "You have no reminders waiting; nothing to cancel."
            if which.strip().lower() == "all":
                chosen = pending
            else:
                try:
                    number = int(which.strip().lstrip("#"))
                except ValueError:
                    number = 0
                if not 1 <= number <= len(pending):
                    return (
                        f"There is no reminder {which.strip() or '(none given)'}: /reminders "
                        f"lists them, numbered 1 to {len(pending)}. Nothing was cancelled."
                    )
                chosen = [pending[number - 1]]
            now = clock.iso()
            cancels: list[dict[str, Any]] = []
            for reminder in chosen:
                cancel: dict[str, Any] = {"type": CANCELLED, "id": reminder.id, "at": now}
                if message is not None:
                    cancel["message"] = message
                cancels.append(cancel)
            await in_thread(partial(file.extend, cancels))
            self._book.settle(self.user_key, pending_of(await in_thread(file.load)))
        if len(chosen) == 1:
            return f"Cancelled: {chosen[0].what}"
        return f"Cancelled all {len(chosen)} of your reminders."

    async def listing(self) -> str:
        """/reminders: the pending ones, numbered, with their next time."""
        pending = await self.pending()
        zone, chosen = self.zone()
        now = clock.now()
        if not pending:
            return (
                "You have no reminders waiting. Set one with /remind, e.g. "
                "/remind tomorrow at 9 call the dentist."
            )
        lines = [f"Your reminders (times in {label(zone)}):"]
        for number, reminder in enumerate(pending, 1):
            how = ""
            if reminder.repeat is not None:
                rule = reminder.repeat
                other = rule.kind != INTERVAL and rule.zone != zone.key
                how = f" ({rule.describe()}{f' {rule.zone}' if other else ''})"
            where = "" if reminder.private else " [in a group]"
            shown = literal(reminder.what)
            lines.append(f"{number}. {show(reminder.due, zone, now)}{how}{where}: {shown}")
        lines.append("/reminders cancel N removes one; /reminders cancel all removes them all.")
        if not chosen:
            lines.append("Set your time zone with /timezone, e.g. /timezone Europe/Lisbon.")
        return "\n".join(lines)

    def _admin(self) -> bool:
        return self._book.is_admin(self.user_key)


def _mark(path: Path) -> tuple[int, int, int] | None:
    """What changes whenever the file does: an append its size, an atomic rewrite its inode."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _set_by(
    stored: list[StoredReminder], message_id: str | None, what: str
) -> StoredReminder | None:
    """The reminder this very message set already (a platform delivers a message again when a
    crash kept it from being acknowledged); by the model, the one of the same text."""
    if message_id is None:
        return None
    for reminder in stored:
        if message_id in reminder.messages and reminder.what == what:
            return reminder
    return None


def _rule_of(reminder: StoredReminder) -> Repeat | None:
    return Repeat.from_record(reminder.record.get("repeat"))
