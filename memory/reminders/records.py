"""A person's reminders: one append-only file in their workspace, `reminders.jsonl`.

Three kinds of record, one JSON object a line: `set` (what, when it is first due, how it
repeats, where it was asked), `delivered` (one occurrence sent, with the time it was due) and
`cancelled`. What is pending is what the records add up to, so a crash at any instant leaves a
file that loads: an append is the whole line or nothing (memory.safefs.append_all), and a torn
last line is skipped. Only /forget rewrites the file, whole and atomically (memory.atomic),
without the records of the reminders it removes.

The file knows nothing of time zones or rules: `set` keeps the rule as the bot wrote it
(bot/reminders/ reads it); times are UTC with their offset, like every stamp (memory/clock.py).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_line, read_bytes

log = logging.getLogger(__name__)

REMINDERS_FILE = "reminders.jsonl"
SET, DELIVERED, CANCELLED = "set", "delivered", "cancelled"


@dataclass
class StoredReminder:
    """One reminder as its records add up: the `set` record, the dues delivered, cancelled."""

    id: str
    record: dict[str, Any]  # the `set` record as written
    delivered: list[str] = field(default_factory=list)  # the due stamps sent, oldest first
    cancelled: bool = False
    # The platform ids of the messages that set or cancelled it (a `message` field of those
    # records): one delivered again after a crash is recognised, never acted on twice.
    messages: set[str] = field(default_factory=set)

    @property
    def what(self) -> str:
        return str(self.record.get("what", ""))

    @property
    def repeats(self) -> bool:
        return isinstance(self.record.get("repeat"), dict)

    @property
    def pending(self) -> bool:
        """Still to be sent: not cancelled, and repeating or not delivered yet."""
        return not self.cancelled and (self.repeats or not self.delivered)


class ReminderFile:
    """The reminders of one workspace. The caller is the file's only writer (the bot holds the
    person's reminder lock; an operator command holds the folder lock)."""

    def __init__(self, workspace_root: Path) -> None:
        self.path = Path(workspace_root) / REMINDERS_FILE

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> list[StoredReminder]:
        """Every reminder ever set and still on file, in the order set."""
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            return []
        found: dict[str, StoredReminder] = {}
        for number, line in enumerate(data.split(b"\n"), 1):
            record = _record(line)
            if record is None:
                if line.strip():
                    log.warning("%s: line %d is not a reminder record; skipped", self.path, number)
                continue
            ident, kind = record["id"], record["type"]
            if kind == SET and ident not in found:
                found[ident] = StoredReminder(ident, record)
            elif ident in found and kind == DELIVERED and isinstance(record.get("due"), str):
                found[ident].delivered.append(record["due"])
            elif ident in found and kind == CANCELLED:
                found[ident].cancelled = True
            if (
                ident in found
                and kind in (SET, CANCELLED)
                and isinstance(record.get("message"), str)
            ):
                found[ident].messages.add(record["message"])
        return list(found.values())

    def append(self, record: dict[str, Any]) -> None:
        """One record, as one whole line (after a torn line, on a line of its own)."""
        if record.get("type") not in (SET, DELIVERED, CANCELLED) or not record.get("id"):
            raise ValueError("a reminder record needs a type and an id")
        append_line(self.path, _line(record), PRIVATE_FILE_MODE)

    def matching(self, pattern: re.Pattern[str]) -> list[StoredReminder]:
        """The reminders whose text holds `pattern` (pending or not: /forget removes all)."""
        return [r for r in self.load() if pattern.search(r.what)]

    def remove(self, ids: set[str]) -> int:
        """Rewrite the file without any record of these reminders (atomic); lines removed."""
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            return 0
        kept: list[bytes] = []
        removed = 0
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            record = _record(line)
            if record is not None and record["id"] in ids:
                removed += 1
            else:
                kept.append(line)
        if removed:
            atomic_write_text(self.path, b"".join(line + b"\n" for line in kept))
        return removed


def _record(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        return None
    if record.get("type") not in (SET, DELIVERED, CANCELLED):
        return None
    return record


def _line(record: dict[str, Any]) -> bytes:
    try:
        return json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the line still loads
        return json.dumps(record).encode("ascii") + b"\n"
