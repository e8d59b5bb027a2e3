"""A group's reminders, for its admins: every reminder waiting in the group, whoever set it, listed
with who set it and cancelled by its number, as a person's own (/reminders, desk.py).

Each reminder stays in the file of the person who set it; the group index (groups.py) says whose
files to read. A cancel takes the group's lock, then each person's (the order desk.py keeps), so
it never races the person's own commands or a send; a message delivered again after a crash
cancels nothing more. Who may: bot.commands decides (the chat's admins as the platform says, or
the bot's), as for the group's other settings.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from functools import partial
from typing import Any

from bot.formatting import literal
from bot.inbound import Inbound
from bot.reminders.desk import ReminderBook, pending_of
from bot.reminders.repeat import INTERVAL
from bot.reminders.zones import label, show
from memory import clock
from memory.reminders.records import CANCELLED
from memory.threads import in_thread

USAGE = "/reminders group cancel N removes one; /reminders group cancel all removes them all."


class GroupReminders:
    """The reminders of the group `inbound` was written in (see the module docstring)."""

    def __init__(self, book: ReminderBook, inbound: Inbound, chat: str) -> None:
        self._book = book
        self._inbound = inbound
        self._chat = chat

    async def listing(self) -> str:
        """Numbered, soonest first, each with who set it; times in the asker's zone."""
        waiting = await self._book.in_group(self._chat)
        if not waiting:
            return "No reminders are waiting in this group."
        zone = self._book.zone_of(self._inbound.user_key)
        now = clock.now()
        lines = [f"Reminders waiting in this group (times in {label(zone)}):"]
        for number, (_, reminder) in enumerate(waiting, 1):
            how = ""
            if reminder.repeat is not None:
                rule = reminder.repeat
                other = rule.kind != INTERVAL and rule.zone != zone.key
                how = f" ({rule.describe()}{f' {rule.zone}' if other else ''})"
            who = literal(reminder.name or "someone")
            when = show(reminder.due, zone, now)
            lines.append(f"{number}. {when}{how}, set by {who}: {literal(reminder.what)}")
        lines.append(USAGE)
        return "\n".join(lines)

    async def cancel(self, which: str) -> str:
        """`which`: a number of the listing, or "all"."""
        message = self._inbound.message_id
        async with self._book.group_lock(self._chat):
            done = await self._cancelled_by(message)
            if done:  # the same message delivered again after a crash: done already
                return _cancelled_text(done)
            waiting = await self._book.in_group(self._chat)
            if not waiting:
                return "No reminders are waiting in this group; nothing to cancel."
            if which.strip().lower() == "all":
                chosen = waiting
            else:
                try:
                    number = int(which.strip().lstrip("#"))
                except ValueError:
                    number = 0
                if not 1 <= number <= len(waiting):
                    return (
                        f"There is no reminder {which.strip() or '(none given)'}: /reminders "
                        f"group lists them, numbered 1 to {len(waiting)}. Nothing was cancelled."
                    )
                chosen = [waiting[number - 1]]
            by_person: dict[str, set[str]] = defaultdict(set)
            for user, reminder in chosen:
                by_person[user].add(reminder.id)
            cancelled: list[tuple[str | None, str]] = []
            for user, ids in by_person.items():
                cancelled += await self._cancel_of(user, ids, message)
        return _cancelled_text(cancelled)

    async def _cancel_of(
        self, user: str, ids: set[str], message: str | None
    ) -> list[tuple[str | None, str]]:
        """Under the person's lock (a send of theirs under way finishes first): those of `ids`
        still waiting cancelled; (who set it, what) of each."""
        book = self._book
        async with book.lock(user):
            if not book.workspaces.exists(user):  # wiped meanwhile
                return []
            file = book.file_of(user)
            pending = [r for r in pending_of(await in_thread(file.load)) if r.id in ids]
            now = clock.iso()
            records: list[dict[str, Any]] = []
            for reminder in pending:
                record: dict[str, Any] = {"type": CANCELLED, "id": reminder.id, "at": now}
                if message is not None:
                    record["message"] = message
                records.append(record)
            if pending:
                await in_thread(partial(file.extend, records))
                book.settle(user, pending_of(await in_thread(file.load)))
        return [(reminder.name, reminder.what) for reminder in pending]

    async def _cancelled_by(self, message: str | None) -> list[tuple[str | None, str]]:
        """The group's reminders this very message cancelled already (none without an id)."""
        if message is None:
            return []
        chat = self._chat
        files = [
            self._book.file_of(user)
            for user in self._book.groups.members(chat)
            if self._book.workspaces.exists(user)
        ]

        def read() -> list[tuple[str | None, str]]:
            return [
                (_name(reminder.record), reminder.what)
                for file in files
                for reminder in file.load()
                if reminder.cancelled
                and message in reminder.messages
                and reminder.record.get("chat") == chat
            ]

        return await asyncio.to_thread(read) if files else []


def _name(record: dict[str, Any]) -> str | None:
    name = record.get("name")
    return name if isinstance(name, str) else None


def _cancelled_text(cancelled: list[tuple[str | None, str]]) -> str:
    if not cancelled:
        return "Those reminders were sent or cancelled meanwhile; nothing more was cancelled."
    if len(cancelled) == 1:
        name, what = cancelled[0]
        return f"Cancelled the reminder set by {literal(name or 'someone')}: {literal(what)}"
    return f"Cancelled {len(cancelled)} reminders of this group."
