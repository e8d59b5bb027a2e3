"""HISTORY.md of a joining account merged into its person's, by time, a piece at a time.

A /link merge of a 60 MB HISTORY.md held both texts, their entries and the joined result in
RAM at once (RSS 163 → 412 MB). Here neither file is ever whole in RAM: each is read a line at a
time and cut into entries as memory.control.forget.history_entries cuts them; what the person
has already is recognised by a 16-byte digest of each of their entries (not the entry; only of
the minutes the joining file has entries in, when it is the smaller), and a repeat within the
joining file among the entries of its minute; the two are merged
by stamp (each file's own order kept, the person's first for the same minute) into a temp file
written a MiB at a time and renamed over HISTORY.md (memory.atomic.atomic_write_chunks), so a
crash leaves the old file or the new one, and a merge run again adds nothing twice.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import re
from collections.abc import Iterator
from pathlib import Path

from memory.atomic import atomic_write_chunks
from memory.safefs import open_binary
from memory.store import ENTRY_STAMP

_STAMPED = re.compile(ENTRY_STAMP)
_CHUNK = 1 << 20  # bytes written at a time


def merge_into(source: Path, target: Path) -> int:
    """Add the entries of `source` that `target` lacks to `target`, by time; how many. Nothing
    is written when there are none."""
    present = _present(source, target)

    def new() -> Iterator[str]:
        minute, seen = "", set[bytes]()  # a repeat within `source`: added once (its minute's)
        for entry in entries(source):
            digest = _digest(entry)
            if _stamp(entry) != minute:
                minute, seen = _stamp(entry), set()
            if digest not in present and digest not in seen:
                seen.add(digest)
                yield entry

    theirs = new()
    first = next(theirs, None)
    if first is None:
        return 0
    added = [0]

    def counted() -> Iterator[str]:
        for entry in itertools.chain((first,), theirs):
            added[0] += 1
            yield entry

    merged = heapq.merge(entries(target), counted(), key=_stamp)
    atomic_write_chunks(target, _joined(merged))
    return added[0]


def _present(source: Path, target: Path) -> set[bytes]:
    """Digests of the entries of `target` that an entry of `source` could repeat: all of them,
    or, when `source` is the smaller file, those of the minutes `source` has entries in (a
    repeat has its stamp), so what is held grows with the smaller file only."""
    if _size(target) <= _size(source):
        return {_digest(entry) for entry in entries(target)}
    minutes = {_stamp(entry) for entry in entries(source)}
    return {_digest(entry) for entry in entries(target) if _stamp(entry) in minutes}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def entries(path: Path) -> Iterator[str]:
    """The entries of a HISTORY.md (none when it is absent), each without the blank lines
    around it: a new entry starts at a stamped line after a blank line (spaces or tabs)."""
    try:
        file = open_binary(path)
    except FileNotFoundError:
        return
    with file:
        lines: list[str] = []
        blank = False
        for raw in file:
            line = raw.decode("utf-8", "replace")
            if blank and lines and _STAMPED.match(line):
                entry = "".join(lines[:-1]).strip("\n")  # the blank line is no one's
                if entry.strip():
                    yield entry
                lines = []
            lines.append(line)
            blank = line.endswith("\n") and not line[:-1].strip(" \t")
        entry = "".join(lines).strip("\n")
        if entry.strip():
            yield entry


def _joined(merged: Iterator[str]) -> Iterator[bytes]:
    """Entries one blank line apart, a newline at the end, in chunks of about _CHUNK bytes."""
    parts: list[str] = []
    size = 0
    for number, entry in enumerate(merged):
        parts.append(entry if number == 0 else "\n\n" + entry)
        size += len(entry) + 2
        if size >= _CHUNK:
            yield "".join(parts).encode("utf-8")
            parts, size = [], 0
    parts.append("\n")
    yield "".join(parts).encode("utf-8")


def _stamp(entry: str) -> str:
    # Every entry starts with its "[YYYY-MM-DD HH:MM]" stamp (UTC), which sorts as text.
    return entry[:18] if entry.startswith("[") else ""


def _digest(entry: str) -> bytes:
    return hashlib.blake2b(entry.strip().encode("utf-8", "replace"), digest_size=16).digest()
