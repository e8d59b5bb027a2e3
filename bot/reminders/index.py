"""When each person's next reminder is due, in one small file beside the workspaces, so a start
reads one line per person with reminders instead of every workspace.

`<workspaces_dir>/.reminders-due.jsonl`: one `{"user": key, "next": iso | null}` a line, the
last line of a person winning (null: none pending). It is derived data, kept so that it may
only ever be *early*: the bot writes a person's earlier time here before it writes the reminder
into their workspace, and their later one only after, so a crash between the two leaves an
entry that wakes the scheduler too soon (it reads the workspace, finds nothing due and writes
the right time), never one that sleeps past a reminder. Appended as it changes; rewritten
whole (atomically) once it holds many more lines than people, and when a person is wiped, so
that their key does not stay on disk. A missing index (a first start, an older folder) is
rebuilt by reading every workspace's reminders once, saying so.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from memory import clock
from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, json_records, open_fd, read_bytes

log = logging.getLogger(__name__)

INDEX_FILE = ".reminders-due.jsonl"
SLACK_LINES = 1024  # rewritten once it holds this many lines more than twice the people


class DueIndex:
    """The index of one workspaces folder; its process is the folder's only writer."""

    def __init__(self, base_dir: Path) -> None:
        self.path = Path(base_dir) / INDEX_FILE
        self._next: dict[str, datetime] = {}
        self._line: dict[str, bytes] = {}  # each person's line as on disk: a rewrite joins them
        self._lines = 0
        self._named: set[str] = set()  # the people some line of the file names

    def exists(self) -> bool:
        return self.path.is_file()

    def load(self) -> dict[str, datetime]:
        """Each person's next due time, as the file says (a bad line is skipped)."""
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            data = b""
        found: dict[str, datetime] = {}
        kept: dict[str, bytes] = {}
        whole = [line for line in data.split(b"\n") if line.strip()]
        for line, record in json_records(whole):
            user, due = record.get("user"), record.get("next")
            if not isinstance(user, str) or "next" not in record:
                continue
            self._named.add(user)
            moment = clock.parse(due)
            if moment is None:
                found.pop(user, None)
                kept.pop(user, None)
            else:
                found[user] = moment
                kept[user] = line.strip() + b"\n"
        self._next, self._line, self._lines = dict(found), kept, len(whole)
        return found

    def rebuild(self, entries: Iterable[tuple[str, datetime]]) -> None:
        """Write the index whole, from what the workspaces hold."""
        self._next = dict(entries)
        self._line = {user: _line(user, due) for user, due in self._next.items()}
        self._rewrite()

    def get(self, user_key: str) -> datetime | None:
        return self._next.get(user_key)

    def set(self, user_key: str, due: datetime | None) -> None:
        """Record the person's next due time (None: nothing pending)."""
        if self._next.get(user_key) == due:
            return
        data = _line(user_key, due)
        if due is None:
            self._next.pop(user_key, None)
            self._line.pop(user_key, None)
        else:
            self._next[user_key] = due
            self._line[user_key] = data
        self._append(user_key, data)
        if self._lines > 2 * len(self._next) + SLACK_LINES:
            self._rewrite()

    def drop(self, user_key: str) -> None:
        """The person is wiped: no line of the file names them any more."""
        self._next.pop(user_key, None)
        self._line.pop(user_key, None)
        if user_key in self._named:
            self._rewrite()

    def people(self) -> int:
        return len(self._next)

    def _append(self, user_key: str, data: bytes) -> None:
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            append_all(fd, data)
        finally:
            os.close(fd)
        self._lines += 1
        self._named.add(user_key)

    def _rewrite(self) -> None:
        """The live lines, joined (each kept as written: a rewrite formats nothing)."""
        atomic_write_text(self.path, b"".join(self._line.values()))
        self._lines = len(self._line)
        self._named = set(self._line)


def _line(user_key: str, due: datetime | None) -> bytes:
    record = {"user": user_key, "next": clock.iso(due) if due else None}
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
