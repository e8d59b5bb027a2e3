"""How the scan cuts HISTORY.md into regions, and the entry count it estimates from them.

BM25's idf needs the number of entries; the scan estimates it per region on a sample (counting
every entry of 100 MB would cost more than the search). An index that answers without reading
the file must give the very same figure, so the cutting lives here, used by both: the scan
reads ``chunk`` bytes at a time after what the last region left over, and a region ends at the
last entry start of what it holds. A region cut from a full read depends only on the bytes
before it, so after an append the walk resumes from the last such region (``Cursor``) instead
of the file's start.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from memory.search.terms import BYTES_LAYOUT

__all__ = ["SAMPLE_BYTES", "Cursor", "CutRegion", "cut_regions", "estimate_entries", "walk"]

SAMPLE_BYTES = 128 * 1024  # per region, to estimate the number of entries


def estimate_entries(buf: bytes, cut: int) -> int:
    """Entries in ``buf[:cut]``, counted on a sample: only BM25's idf and mean length use it."""
    if cut <= 2 * SAMPLE_BYTES:
        return buf.count(b"\n\n[", 0, cut)
    return round(buf.count(b"\n\n[", 0, SAMPLE_BYTES) * cut / SAMPLE_BYTES)


@dataclass(frozen=True)
class Cursor:
    """Where a walk stands after a region cut from a full read: it holds after any append.

    ``base``: the next region's start; ``read``: how far the file was read (the bytes between
    are carried into the next region); ``entries``: the estimate of the regions before.
    """

    base: int = 0
    read: int = 0
    entries: int = 0


class CutRegion(NamedTuple):
    """One region as the scan cuts it: ``buf[:cut]`` is whole entries from file offset ``base``
    (what follows ``cut`` is carried into the next region); ``read``: how far the file was read;
    ``full``: its last read filled the chunk (a region cut from a full read depends only on the
    bytes before it)."""

    buf: bytes
    base: int
    cut: int
    eof: bool
    read: int
    full: bool


def cut_regions(f: BinaryIO, chunk: int, cursor: Cursor | None = None) -> Iterator[CutRegion]:
    """The regions of ``f`` from ``cursor`` on (the file's start if None), read ``chunk`` bytes
    at a time after what the last region left over; a region ends at the last entry start of
    what it holds (an entry larger than the chunk: read on, twice as much)."""
    if cursor is None:
        base, read, carry = 0, 0, b""
    else:
        f.seek(cursor.base)
        carry = f.read(cursor.read - cursor.base)
        base, read = cursor.base, cursor.read
    want = chunk
    while True:
        data = f.read(want)
        full = len(data) == want
        read += len(data)
        eof = not data
        buf = carry + data if carry else data
        del carry, data
        if not buf:
            return
        if eof:
            cut = len(buf)
        else:
            cut = BYTES_LAYOUT.last_start(buf)
            if cut == 0:  # one entry larger than the chunk: read on
                carry, want = buf, want * 2
                continue
        yield CutRegion(buf, base, cut, eof, read, full)
        if eof:
            return
        carry, base, want = buf[cut:], base + cut, chunk
        del buf


def walk(f: BinaryIO, cursor: Cursor, chunk: int) -> tuple[int, Cursor]:
    """The estimated entries of the whole file (regions as the scan cuts them), and the last
    cursor that an append leaves valid. Reads from ``cursor`` on only."""
    entries, stable = cursor.entries, cursor
    for region in cut_regions(f, chunk, cursor):
        entries += estimate_entries(region.buf, region.cut) + 1
        if region.full and not region.eof:
            stable = Cursor(region.base + region.cut, region.read, entries)
    return entries, stable
