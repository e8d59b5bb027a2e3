"""A person's reminders: one append-only file in their workspace, `reminders.jsonl`, compacted.

Three kinds of record, one JSON object a line: `set` (what, when it is first due, how it
repeats, where it was asked), `delivered` (one occurrence sent, with the time it was due) and
`cancelled`. What is pending is what the records add up to, so a crash at any instant leaves a
file that loads: an append is the whole line or nothing (memory.safefs.append_line), a torn
last line is skipped, and every rewrite is atomic (memory.atomic).

WHY compacted: every send adds a line, so 100 hourly reminders add 2,400 a day, and a file that
was read whole at every command grew without end (56 MB after 180 days, seconds to parse). The
file is rewritten, once it holds SLACK_LINES more than twice what it needs, with only what it
needs: the `set` record of each pending reminder and the last `delivered` of each repeating one
(its next time follows from it), then the last TAIL_RECORDS `delivered` and `cancelled` records
with the `set` records they belong to. That tail keeps the crash-replay guarantee bounded: the
platform ids of the messages that set or cancelled a reminder (`messages`) stay known while its
records are in the tail, and a message is delivered again only just after a crash.

WHY held in RAM: the state those records add up to, bounded the same way, is kept by the one
ReminderFile of a workspace and brought up to date by its own appends, so a command reads no
file. A file changed by anyone else (a /link merge appends to it; /forget rewrites it) has
another size or inode, and is read again. Reading and writing block: the bot calls them in a
thread (memory.threads.in_thread), and a lock here keeps two threads from mixing the state.

The file knows nothing of time zones or rules: `set` keeps the rule as the bot wrote it
(bot/reminders/ reads it); times are UTC with their offset, like every stamp (memory/clock.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_line, open_binary, read_bytes
from memory.threads import polite

log = logging.getLogger(__name__)

REMINDERS_FILE = "reminders.jsonl"
SET, DELIVERED, CANCELLED = "set", "delivered", "cancelled"
TAIL_RECORDS = 256  # the latest `delivered` and `cancelled` records a compaction keeps
SLACK_LINES = 1024  # compacted once the file holds this many lines more than twice what it keeps
DUES_KEPT = 16  # due stamps of one reminder held in RAM (only the last is ever needed)
# A `delivered` line exactly as the bot writes it (json.dumps of the scheduler's record): most
# lines of a long file, read without json; any other line is parsed whole.
_SENT = re.compile(
    rb'\{"type": "delivered", "id": "(?P<id>[0-9A-Za-z_-]+)", "due": "(?P<due>[0-9T:.+-]+)", '
    rb'"at": "[0-9T:.+-]+", "late": (?:true|false)\}\n'
)


@dataclass
class StoredReminder:
    """One reminder as its records add up: the `set` record, the dues delivered, cancelled."""

    id: str
    record: dict[str, Any]  # the `set` record as written
    delivered: list[str] = field(default_factory=list)  # the latest due stamps sent, oldest first
    cancelled: bool = False
    # The platform ids of the messages that set or cancelled it (a `message` field of those
    # records): one delivered again after a crash is recognised, never acted on twice.
    messages: set[str] = field(default_factory=set)
    # Its latest `delivered` line, and how many of its lines the tail holds (compaction).
    last: bytes | None = field(default=None, repr=False, compare=False)
    in_tail: int = field(default=0, repr=False, compare=False)

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


class _State:
    """What a file's records add up to, bounded: the reminders that are pending or have a
    record in the tail, the tail itself, and how many lines the file holds."""

    def __init__(self) -> None:
        self.reminders: dict[str, StoredReminder] = {}  # in the order set
        self.tail: deque[tuple[str, bytes]] = deque()  # (id, line as on file)
        self.lines = 0

    def apply(self, record: dict[str, Any], line: bytes) -> None:
        """One record, and its line as on file (kept as written: a compaction formats none)."""
        ident, kind = record["id"], record["type"]
        if kind == DELIVERED:
            if isinstance(record.get("due"), str):
                self.delivered(ident, record["due"], line)
            return
        found = self.reminders.get(ident)
        if kind == SET:
            if found is None:
                found = self.reminders[ident] = StoredReminder(ident, record)
                _note_message(found, record)
            return
        if found is None:
            return  # a record of a reminder no longer on file (a /forget)
        found.cancelled = True
        _note_message(found, record)
        self._to_tail(found, line)

    def delivered(self, ident: str, due: str, line: bytes) -> None:
        found = self.reminders.get(ident)
        if found is None:
            return
        found.delivered.append(due)
        if len(found.delivered) > DUES_KEPT:
            del found.delivered[: -DUES_KEPT // 2]
        found.last = line
        self._to_tail(found, line)

    def _to_tail(self, found: StoredReminder, line: bytes) -> None:
        self.tail.append((found.id, line))
        found.in_tail += 1
        if len(self.tail) > TAIL_RECORDS:
            self._leave_tail()

    def _leave_tail(self) -> None:
        ident, _ = self.tail.popleft()
        found = self.reminders.get(ident)
        if found is None:
            return
        found.in_tail -= 1
        if found.in_tail <= 0 and not found.pending:
            del self.reminders[ident]  # done, and nothing of it left in the tail

    def kept(self) -> list[bytes]:
        """The lines a compacted file holds, in an order that loads to this state: every
        `set` first, then the last send of each pending repeating one, then the tail."""
        in_tail = {id(line) for _, line in self.tail}
        lasts = [
            r.last
            for r in self.reminders.values()
            if r.pending and r.last is not None and id(r.last) not in in_tail
        ]
        sets = [_line(r.record) for r in self.reminders.values()]
        return [*sets, *lasts, *(line for _, line in self.tail)]

    def wants_compaction(self) -> bool:
        # (an upper bound of kept(), without building it: the sets, a last each, the tail)
        return self.lines > 2 * (2 * len(self.reminders) + len(self.tail)) + SLACK_LINES


class ReminderFile:
    """The reminders of one workspace. The caller is the file's only writer (the bot holds the
    person's reminder lock; an operator command holds the folder lock)."""

    def __init__(self, workspace_root: Path) -> None:
        self.path = Path(workspace_root) / REMINDERS_FILE
        self._lock = threading.Lock()
        self._state: _State | None = None
        self._seen: tuple[int, int, int] | None = None  # the file as the state knows it

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> list[StoredReminder]:
        """Every reminder pending, and those done whose records are in the tail, in the order
        set. Read from the file only when it changed since this object last saw it."""
        with self._lock:
            return list(self._current().reminders.values())

    def append(self, record: dict[str, Any]) -> None:
        """One record, as one whole line (after a torn line, on a line of its own)."""
        self.extend([record])

    def extend(self, records: Iterable[dict[str, Any]]) -> None:
        """Several records, appended whole or not at all (one write)."""
        records = list(records)
        for record in records:
            if record.get("type") not in (SET, DELIVERED, CANCELLED) or not record.get("id"):
                raise ValueError("a reminder record needs a type and an id")
        if not records:
            return
        lines = [_line(r) for r in records]
        with self._lock:
            state = self._current()
            append_line(self.path, b"".join(lines), PRIVATE_FILE_MODE)
            for record, line in zip(records, lines, strict=True):
                state.apply(record, line)
            state.lines += len(records)
            if state.wants_compaction():
                self._compact(state)
            self._seen = _signature(self.path)

    def matching(self, pattern: re.Pattern[str]) -> list[StoredReminder]:
        """The reminders whose text holds `pattern` (pending or not: /forget removes all)."""
        return [r for r in self.load() if pattern.search(r.what)]

    def remove(self, ids: set[str]) -> int:
        """Rewrite the file without any record of these reminders (atomic); lines removed."""
        with self._lock:
            self._state = None  # read again next time, whatever happens here
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

    def _current(self) -> _State:
        """The state, read again if the file is not the one it was read from (under the lock)."""
        seen = _signature(self.path)
        if self._state is not None and seen == self._seen:
            return self._state
        state = self._read()
        if state.wants_compaction():
            self._compact(state)
            seen = _signature(self.path)
        self._state, self._seen = state, seen
        return state

    def _read(self) -> _State:
        """The whole file, line by line (its size bounds no RAM: the state is bounded)."""
        state = _State()
        try:
            file = open_binary(self.path)
        except FileNotFoundError:
            return state
        with file:
            for number, line in enumerate(polite(file), 1):
                if not line.strip():
                    continue
                state.lines += 1
                if not line.endswith(b"\n"):
                    line += b"\n"
                sent = _SENT.fullmatch(line)
                if sent is not None:  # most lines: a send as the bot writes it, read without json
                    state.delivered(sent["id"].decode(), sent["due"].decode(), line)
                    continue
                record = _record(line)
                if record is None:
                    log.warning("%s: line %d is not a reminder record; skipped", self.path, number)
                    continue
                state.apply(record, line)
        return state

    def _compact(self, state: _State) -> None:
        """Rewrite the file with what it needs. A failure (a full disk) leaves the file as it
        was, whole, and the record that was appended appended: tried again at a later write."""
        lines = state.kept()
        before = state.lines
        try:
            atomic_write_text(self.path, b"".join(lines))
        except OSError as exc:
            log.warning("%s: not compacted (%s); tried again later", self.path, exc)
            return
        state.lines = len(lines)
        log.info("%s: compacted from %d lines to %d", self.path, before, state.lines)


def _note_message(reminder: StoredReminder, record: dict[str, Any]) -> None:
    if isinstance(record.get("message"), str):
        reminder.messages.add(record["message"])


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


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
