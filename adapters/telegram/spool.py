"""Telegram updates accepted but not yet handled, kept on disk so that they can be acknowledged;
and the ids of the updates handled lately, so that one sent again is not answered again.

Telegram forgets an update once it is acknowledged (polling: a higher `offset`; webhook: a 200).
Until then it holds the acknowledgement of every later update back (polling) or redelivers it
(webhook). The spool lets us acknowledge an update before its turn has run: its raw JSON is
appended here and fsynced first, and after a crash or a stop the updates not marked done are
handled at the next start.

The spool file is JSON lines, `{"update": {...}}` or `{"done": <update_id>}`, append-only; it
is emptied whenever nothing in it is pending, and while something is, it is rewritten
atomically with only the pending updates once the done part is most of it (and the file over
COMPACT_MIN_BYTES): it stays about the size of the backlog. A torn last line (a crash
mid-append) is skipped on load, which rewrites the file without it: that append never returned,
so its updates were never acknowledged and Telegram still has them.

An update whose turn is over is remembered in a second file, one id a line (`HandledIds`: the
last KEEP_HANDLED, across restarts too; ids only, never words): the same update again (a webhook
POST whose 200 did not reach Telegram, a replay, a poll whose acknowledgement was lost) is
acknowledged without a second turn or answer. Marks are not fsynced: one lost in a power cut
means that update may be handled once more, and then the core recognises a message it has
already persisted by `Inbound.message_id` (it sends the stored answer again, as any
at-least-once delivery).

The disk work runs in one thread of the spool's own (`Spool._submit`), never on the event loop
(an fsync, or a compaction's atomic rewrite, took up to 200 ms: a flood of one person paused
everybody's turns). One thread keeps the writes in the order they were asked for, and a
compaction reads the file in that thread, so no append falls between its read and its rewrite.
`add` is awaited until its fsync is done; `done` only queues its mark; `flush` (at a stop) waits
for everything queued. What is pending is counted on the loop when it is asked for, so a
"nothing pending: empty the file" queued behind an append never drops that append's update.

Both live in the workspaces folder (`.telegram-<bot id>.spool`, `….handled`): the folder lock
that makes one process the only writer of the workspaces makes it the only reader and writer of
these files too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memory.atomic import atomic_write_text, fsync_dir

log = logging.getLogger(__name__)

KEEP_HANDLED = 4096  # handled update ids remembered (Telegram resends an update within minutes)
COMPACT_MIN_BYTES = 64 * 1024  # a spool file below this is never rewritten


class Spool:
    """The on-disk queue of one bot's accepted, unhandled updates, and its handled ids."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handled = HandledIds(path.with_name(path.name + ".handled"), self._submit)
        self._pending: dict[int, int] = {}  # update id → bytes of its line in the file
        self._size = 0  # bytes of the file, as this object read and wrote it (its thread's)
        self._io: ThreadPoolExecutor | None = None  # the one thread of its disk work, if started

    def load(self) -> list[dict[str, Any]]:
        """The updates a previous run accepted and did not finish, in update_id order; from
        now on this object keeps their account (and remembers the ids it had handled)."""
        _sweep_temp_files(self.path)
        self.handled.load()
        updates, torn, self._size = self._scan(quiet=False)
        self._pending = {uid: len(_line({"update": u})) for uid, u in updates.items()}
        if updates:
            log.info("telegram: %d accepted update(s) from the last run to handle", len(updates))
        if not updates:
            self._empty()
        elif torn or self._size > sum(self._pending.values()):
            self._compact(updates)
        return [updates[uid] for uid in sorted(updates)]

    def read(self) -> list[dict[str, Any]]:
        """The pending updates in the file, in update_id order, changing nothing: what the next
        start will handle (a crash test reads it while no bot runs)."""
        updates = self._scan(quiet=True)[0]
        return [updates[uid] for uid in sorted(updates)]

    async def add(self, updates: list[dict[str, Any]]) -> None:
        """Append and fsync (in the spool's thread); once this returns, the updates may be
        acknowledged. Raises OSError (nothing of this call is left in the file then)."""
        if not updates:
            return
        lines = [_line({"update": u}) for u in updates]
        fresh = {}  # counted as pending now (see the module docstring), uncounted if it fails
        for update, line in zip(updates, lines, strict=True):
            if update["update_id"] not in self._pending:
                fresh[update["update_id"]] = len(line)
        self._pending.update(fresh)
        written = self._submit(functools.partial(self._append, b"".join(lines), sync=True))
        try:
            await asyncio.shield(asyncio.wrap_future(written))  # cancelled or not, it is written
        except OSError:
            for uid in fresh:
                self._pending.pop(uid, None)
            raise

    def done(self, update_id: int, *, remember: bool = True) -> None:
        """The update's turn is over: no longer pending; `remember`: kept as handled (see
        HandledIds). Its mark is queued for the spool's thread, not fsynced (see the module
        docstring)."""
        if remember:
            self.handled.add(update_id)
        if self._pending.pop(update_id, None) is None:
            return
        if not self._pending:
            self._submit(self._empty)
            return
        self._submit(functools.partial(self._mark, update_id, sum(self._pending.values())))

    async def flush(self) -> None:
        """Wait until the disk work asked for so far is done (at a stop); the spool's thread
        ends, and starts again if more comes."""
        io, self._io = self._io, None
        if io is None:
            return
        await asyncio.wrap_future(io.submit(lambda: None))  # after all queued before it
        io.shutdown(wait=True)  # idle now: at once

    def __contains__(self, update_id: int) -> bool:
        return update_id in self._pending

    def _scan(self, *, quiet: bool) -> tuple[dict[int, dict[str, Any]], int, int]:
        """(the pending updates by id, torn lines, bytes) of the file; `quiet`: torn lines are
        not logged (a look from outside)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        updates: dict[int, dict[str, Any]] = {}
        done: set[int] = set()
        torn = 0
        for number, line in enumerate(data.splitlines(), 1):
            try:
                record = json.loads(line)
                if "done" in record:
                    done.add(int(record["done"]))
                else:
                    update = record["update"]
                    updates[int(update["update_id"])] = update
            except (ValueError, KeyError, TypeError, RecursionError):
                torn += 1
                if not quiet:
                    log.warning("telegram: spool %s line %d is torn; skipped", self.path, number)
        pending = {uid: update for uid, update in updates.items() if uid not in done}
        return pending, torn, len(data)

    def _submit(self, work: Callable[[], Any]) -> Future[Any]:
        """Queue `work` for the spool's thread (started on first use), after all queued before."""
        if self._io is None:
            self._io = ThreadPoolExecutor(1, thread_name_prefix="telegram-spool")
        return self._io.submit(work)

    def _mark(self, update_id: int, pending_bytes: int) -> None:
        """(In the spool's thread.) Note the update done; compact once the done part is most of
        the file. `pending_bytes`: of the pending lines, when it was asked for."""
        try:
            self._append(_line({"done": update_id}), sync=False)
        except OSError as exc:
            log.warning("telegram: could not mark update %s done in the spool (%s)", update_id, exc)
            return
        if self._size >= COMPACT_MIN_BYTES and self._size > 2 * pending_bytes:
            self._compact(self._scan(quiet=False)[0])

    def _compact(self, updates: dict[int, dict[str, Any]]) -> None:
        """Rewrite the file with the pending updates only (atomically: a crash leaves the old
        file or the new one). `updates`: the pending ones in the file as it is now."""
        data = b"".join(_line({"update": updates[uid]}) for uid in sorted(updates))
        try:
            atomic_write_text(self.path, data)
        except OSError as exc:  # the appended file says the same, only longer
            log.warning("telegram: could not compact the spool (%s)", exc)
            return
        self._size = len(data)

    def _append(self, data: bytes, *, sync: bool) -> None:
        self._size = _append(self.path, data, sync=sync)

    def _empty(self) -> None:
        try:
            os.truncate(self.path, 0)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("telegram: could not empty the spool (%s)", exc)
            return
        self._size = 0


class HandledIds:
    """The last KEEP_HANDLED handled update ids, in memory and in a file of one id a line
    (appended, rewritten with the last KEEP_HANDLED once it holds twice as many). Its writes go
    through `submit` (the spool's thread); its memory is the loop's."""

    def __init__(self, path: Path, submit: Callable[[Callable[[], Any]], Future[Any]]) -> None:
        self.path = path
        self._submit = submit
        self._order: deque[int] = deque()  # oldest first
        self._ids: set[int] = set()
        self._lines = 0  # in the file

    def load(self) -> None:
        _sweep_temp_files(self.path)
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        lines = data.splitlines()
        for line in lines:
            with contextlib.suppress(ValueError):
                self._keep(int(line))  # a torn last line is only a mark lost
        self._lines = len(lines)
        if self._lines > len(self._order) or not data.endswith(b"\n"):
            self._compact(list(self._order))
            self._lines = len(self._order)

    def add(self, update_id: int) -> None:
        if update_id in self._ids:
            return
        self._keep(update_id)
        self._lines += 1
        if self._lines > 2 * KEEP_HANDLED:
            kept = list(self._order)  # the loop's memory, copied for the thread
            self._lines = len(kept)
            self._submit(functools.partial(self._compact, kept))
        else:
            self._submit(functools.partial(self._note, update_id))

    def _note(self, update_id: int) -> None:
        try:
            _append(self.path, b"%d\n" % update_id, sync=False)
        except OSError as exc:
            log.warning("telegram: could not note update %s as handled (%s)", update_id, exc)

    def __contains__(self, update_id: int) -> bool:
        return update_id in self._ids

    def __len__(self) -> int:
        return len(self._order)

    def _keep(self, update_id: int) -> None:
        if update_id in self._ids:
            return
        self._order.append(update_id)
        self._ids.add(update_id)
        if len(self._order) > KEEP_HANDLED:
            self._ids.discard(self._order.popleft())

    def _compact(self, kept: list[int]) -> None:
        data = b"".join(b"%d\n" % uid for uid in kept)
        try:
            atomic_write_text(self.path, data)
        except OSError as exc:  # the appended file says the same, only longer
            log.warning("telegram: could not compact %s (%s)", self.path.name, exc)


def _append(path: Path, data: bytes, *, sync: bool) -> int:
    """Append all of `data` (fsynced if `sync`) or nothing (OSError); the file's new size."""
    created = not path.exists()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
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
        fsync_dir(path.parent)
    return start + len(data)


def _sweep_temp_files(path: Path) -> None:
    """A rewrite that a crash cut short leaves its temp file (memory/atomic.py)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _line(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
