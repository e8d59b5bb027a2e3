"""Telegram updates accepted but not yet handled, kept on disk so that they can be acknowledged.

Telegram forgets an update once it is acknowledged (polling: a higher `offset`; webhook: a 200).
Until then it holds the acknowledgement of every later update back (polling) or redelivers it
(webhook). The spool lets us acknowledge an update before its turn has run: its raw JSON is
appended here and fsynced first, and after a crash or a stop the updates not marked done are
handled at the next start. The core recognises a message it has already persisted by
`Inbound.message_id`, so an update handled twice (done mark lost in a crash) is never persisted
twice; it may be answered twice, as any at-least-once delivery.

The file is JSON lines, `{"update": {...}}` or `{"done": <update_id>}`, append-only; it is
emptied (truncated) whenever nothing in it is pending, so it stays as small as the backlog. A
torn last line (a crash mid-append) is skipped on load: that append never returned, so its
updates were never acknowledged and Telegram still has them.

It lives in the workspaces folder (`.telegram-<bot id>.spool`): the folder lock that makes one
process the only writer of the workspaces makes it the only reader and writer of this file too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from memory.atomic import fsync_dir

log = logging.getLogger(__name__)


class Spool:
    """The on-disk queue of one bot's accepted, unhandled updates."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pending: set[int] = set()

    def load(self) -> list[dict[str, Any]]:
        """The updates a previous run accepted and did not finish, in update_id order; from
        now on this object keeps their account (the file is emptied if none is pending)."""
        pending = self.read()
        self._pending = {u["update_id"] for u in pending}
        if pending:
            log.info("telegram: %d accepted update(s) from the last run to handle", len(pending))
        else:
            self._empty()
        return pending

    def read(self) -> list[dict[str, Any]]:
        """The pending updates in the file, in update_id order, changing nothing: what the next
        start will handle (a crash test reads it while no bot runs)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        updates: dict[int, dict[str, Any]] = {}
        done: set[int] = set()
        for number, line in enumerate(data.splitlines(), 1):
            try:
                record = json.loads(line)
                if "done" in record:
                    done.add(int(record["done"]))
                else:
                    update = record["update"]
                    updates[int(update["update_id"])] = update
            except (ValueError, KeyError, TypeError):
                log.warning("telegram: spool %s line %d is torn; skipped", self.path.name, number)
        return [updates[uid] for uid in sorted(updates) if uid not in done]

    def add(self, updates: list[dict[str, Any]]) -> None:
        """Append and fsync; once this returns, the updates may be acknowledged. Raises OSError
        (nothing of this call is left in the file then)."""
        if not updates:
            return
        data = b"".join(_line({"update": u}) for u in updates)
        self._append(data, sync=True)
        self._pending.update(u["update_id"] for u in updates)

    def done(self, update_id: int) -> None:
        """The update's turn is over. Not fsynced: a mark lost in a crash means the update is
        handled once more, which the core recognises."""
        if update_id not in self._pending:
            return
        self._pending.discard(update_id)
        if not self._pending:
            self._empty()
            return
        try:
            self._append(_line({"done": update_id}), sync=False)
        except OSError as exc:
            log.warning("telegram: could not mark update %s done in the spool (%s)", update_id, exc)

    def __contains__(self, update_id: int) -> bool:
        return update_id in self._pending

    def _append(self, data: bytes, *, sync: bool) -> None:
        created = not self.path.exists()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o600)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:  # os.write may write part of it (a full disk) without an error
                    written = os.write(fd, view)
                    if written <= 0:
                        raise OSError("the spool accepted no more bytes")
                    view = view[written:]
                if sync:
                    os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)  # no torn record for the next append to follow
                raise
        finally:
            os.close(fd)
        if created and sync:
            fsync_dir(self.path.parent)

    def _empty(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            try:
                os.truncate(self.path, 0)
            except OSError as exc:
                log.warning("telegram: could not empty the spool (%s)", exc)


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
