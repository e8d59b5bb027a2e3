"""Who has set reminders in which group, so that a group's cap can be counted and its admins can
list and cancel its reminders without reading every workspace.

`<workspaces_dir>/.reminders-groups.jsonl`: one `{"chat": chat key, "user": user key}` a line.
Reminders live in each person's own file (memory/reminders/records.py); this only says whose
files to read for a group. Like the due index (index.py) it may only ever say too much, never
too little: a person's line is written before their first reminder in that group is, and stays
after their reminders there are sent or cancelled (reading their file then finds none); it is
rewritten whole (atomically) without a person who is wiped, so that their key leaves the disk.
Read once, at the first group reminder command after a start.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from memory.atomic import PRIVATE_FILE_MODE, atomic_write_text
from memory.safefs import append_all, json_records, open_fd, read_bytes

GROUPS_FILE = ".reminders-groups.jsonl"


class GroupIndex:
    """The group index of one workspaces folder; its process is the folder's only writer."""

    def __init__(self, base_dir: Path) -> None:
        self.path = Path(base_dir) / GROUPS_FILE
        self._members: dict[str, set[str]] | None = None  # chat → people; None: not read yet

    def members(self, chat: str) -> list[str]:
        """The people who may have reminders waiting in the chat, in a stable order."""
        return sorted(self._loaded().get(chat, ()))

    def add(self, chat: str, user_key: str) -> None:
        """Before the person's reminder in the chat is written."""
        members = self._loaded()
        if user_key in members.get(chat, ()):
            return
        data = _line(chat, user_key)
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # after a torn line, on a line of its own
            append_all(fd, data)
        finally:
            os.close(fd)
        members[chat].add(user_key)

    def drop(self, user_key: str) -> None:
        """The person is wiped: no line names them any more."""
        members = self._loaded()
        if not any(user_key in people for people in members.values()):
            return
        for people in members.values():
            people.discard(user_key)
        lines = [_line(chat, user) for chat, people in members.items() for user in sorted(people)]
        atomic_write_text(self.path, b"".join(lines))

    def _loaded(self) -> dict[str, set[str]]:
        if self._members is None:
            self._members = defaultdict(set)
            try:
                data = read_bytes(self.path)
            except FileNotFoundError:
                data = b""
            for _, record in json_records(data.split(b"\n")):
                chat, user = record.get("chat"), record.get("user")
                if isinstance(chat, str) and isinstance(user, str):
                    self._members[chat].add(user)
        return self._members


def _line(chat: str, user_key: str) -> bytes:
    record = {"chat": chat, "user": user_key}
    return json.dumps(record, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
