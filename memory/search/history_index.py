"""A word index of HISTORY.md kept beside it: derived, checked, never needed for a right answer.

Why: a first search for common words ("paid euros late") of a 100 MB history reads and matches
every byte, several times what ``grep`` needs; the index answers from the words' lists of
entries instead. HISTORY.md stays the only truth: the index (``.HISTORY.md.index`` in the same
folder, so per workspace) is rebuilt from it whenever they disagree, and a search it cannot
answer (a regex, a phrase, a non-ASCII word) or a missing or stale index scans the file as
before, with the same result to the last bit (tests/memory/search/test_search_index.py
compares them).

What it holds, per *segment* (a run of whole entries): where each entry starts and its stamp's
day and time as numbers, the words of its text past the stamp as the scan's word view cuts them
(memory/search/word_scan.py), and per word the entries holding it (with how often, where more
than once), packed (memory/search/postings.py): about a quarter of HISTORY.md's size, a third
for a text of very many different words (four-byte lists made it 67-82 %). A keyword's hits are
the words of the vocabulary that hold its root, weighed as the scan weighs them
(memory/search/stems.py); the rare entry holding two words that weigh differently is read from
HISTORY.md and weighed there, so the sum is taken in the scan's order. A date ("last week",
memory/search/dates.py) finds the entries stamped then by a binary search over the days (a pass
where stamps are out of order), and the dates written in entries from the words they are made
of, the few entries where a day must be next to a month's name read and checked as the scan
checks them.

Kept current without a rebuild: HISTORY.md only grows between rewrites, so the entries after
the last segment (at least the file's last entry, whose end an append may move) are indexed in
memory at each search, and once they are many they are appended to the index as a new segment.
The file is append-only too: a segment is written, synced, then sealed by a trailer holding
the checksum of its description, so a crash at any instant leaves sealed segments that load and
a torn tail that is ignored (and cut off before the next append). Checked at each load against
HISTORY.md: the same file (device and inode: /forget and the link merge replace it atomically,
which gives a new inode, and drop the index as well), at least as long as what was indexed, and
the same bytes at the end of each segment; an index of an older layout (another MAGIC) is
not one. A missing or stale index is built in a background
thread, one file at a time for the whole process (RAM: one segment's lists at a time), saying
what it does in the log; searches scan until it is there.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import json
import logging
import mmap
import os
import re
import struct
import threading
import time
import zlib
from array import array
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from itertools import compress, repeat
from pathlib import Path
from typing import Any, BinaryIO

from memory.atomic import PRIVATE_FILE_MODE, fsync_dir
from memory.safefs import open_binary, open_fd
from memory.search import postings
from memory.search.numbers import ORDINAL_DAYS
from memory.search.regions import Cursor, walk
from memory.search.terms import BYTES_LAYOUT, Term
from memory.search.word_scan import WORD_VIEW, region_end
from memory.store import ENTRY_STAMP

__all__ = [
    "MIN_BYTES",
    "Index",
    "build",
    "drop",
    "hits",
    "index_path",
    "is_index",
    "lookup",
    "monotone",
    "numbering",
    "rows_of",
    "unload",
]

log = logging.getLogger(__name__)

MIN_BYTES = 4 * 2**20  # a smaller history scans in a few milliseconds: no index
# Of HISTORY.md per segment while building: bounds the build's RAM and its longest C calls
# (a copy of a segment's lists holds the GIL: the event loop waited 68 ms at 16 MB).
SEGMENT_BYTES = 4 * 2**20
LIVE_BYTES = 64 * 1024  # entries past the last segment indexed per search, before persisting
INLINE_BYTES = 8 * 2**20  # more unindexed bytes than this: indexed in the background
MAX_SEGMENTS = 256  # more (many small appends): rebuilt whole, in the background
OPEN_INDEXES = 32  # loaded indexes kept (memory-mapped: the page cache holds them, not RAM)
CHECK_BYTES = 4096  # of HISTORY.md before each segment's end, hashed
MAGIC = b"LGHIDX02"  # 01: lists of four-byte numbers (read as not an index: rebuilt)
SEAL = b"SEALED!\n"
STAMP_BYTES = 18  # "[YYYY-MM-DD HH:MM]"
_STAMP_AT = re.compile(ENTRY_STAMP.encode("ascii"))
_ENTRY_EDGE = re.compile(rb"\n\n(?=" + ENTRY_STAMP.encode("ascii") + rb")")
_HEAD = struct.Struct("<8sQQ")  # magic, st_dev, st_ino
_LEN = struct.Struct("<Q")
_TRAILER = struct.Struct("<8sII")  # seal, crc32 of the description, its length


def index_path(history: Path) -> Path:
    """Where the index of ``history`` lives: beside it, hidden (per workspace)."""
    return history.with_name(f".{history.name}.index")


# --- one segment ----------------------------------------------------------------------------


class _Words:
    """The vocabulary of a segment: a blob of words, each followed by b"\\n", and where each
    starts (shared by segments in memory and segments read from disk)."""

    blob: Any
    blob_start: int
    blob_end: int
    word_at: Any  # per word: where it starts in blob, and one more: the end
    size: int

    def words_with(self, needle: bytes) -> list[int]:
        """Numbers of the words holding ``needle`` (one C find per word found)."""
        out: list[int] = []
        blob, start, end, word_at = self.blob, self.blob_start, self.blob_end, self.word_at
        at = blob.find(needle, start, end)
        while at >= 0:
            w = bisect.bisect_right(word_at, at - start) - 1
            out.append(w)
            at = blob.find(needle, start + word_at[w + 1], end)
        return out

    def word(self, w: int) -> bytes:
        start = self.blob_start
        return bytes(self.blob[start + self.word_at[w] : start + self.word_at[w + 1] - 1])

    def words(self) -> bytes:
        """The vocabulary: b"\\n" + each word followed by b"\\n"."""
        return bytes(self.blob[self.blob_start : self.blob_end])

    def stamp(self, i: int) -> bytes:
        """Entry ``i``'s stamp past its "[": ``YYYY-MM-DD HH:MM]``."""
        raise NotImplementedError

    def days(self) -> Any:
        """Per entry, the day of its stamp as the number ``YYYYMMDD``."""
        raise NotImplementedError

    @property
    def first_stamp(self) -> bytes:
        return self.stamp(0)

    @property
    def last_stamp(self) -> bytes:
        return self.stamp(self.size - 1)

    def dated(self, first: int, last: int) -> Iterable[int]:
        """Numbers of the entries whose stamp's day (``YYYYMMDD``) is in ``[first, last]``."""
        days = self.days()
        if self.monotone:  # type: ignore[attr-defined]
            return range(bisect.bisect_left(days, first), bisect.bisect_right(days, last))
        return [i for i, d in enumerate(days) if first <= d <= last]


@dataclass
class Segment(_Words):
    """Whole entries of HISTORY.md ``[start, end)`` and their words, in memory (as built)."""

    start: int
    end: int
    offsets: Any  # per entry: file offset of its "["
    lengths: Any  # per entry: its length as the scan measures it
    stamps: Any  # 17 bytes per entry: "YYYY-MM-DD HH:MM]"
    blob: Any  # b"\n" + the words, each followed by b"\n"
    blob_start: int
    blob_end: int
    word_at: Any  # per word: where it starts in blob, and one more: the end
    post_at: Any  # per word: where its entries start in ``posts``, and one more
    posts: Any  # entry numbers (in this segment), ascending per word
    many_at: Any  # positions in ``posts`` of entries holding the word more than once
    many: Any  # and how often, aligned
    monotone: bool  # stamps never decrease from one entry to the next
    check: str = ""  # hash of HISTORY.md's bytes before ``end``
    _days: Any = None

    def stamp(self, i: int) -> bytes:
        return bytes(self.stamps[17 * i : 17 * i + 17])

    def days(self) -> Any:
        if self._days is None:
            self._days = _days_of(bytes(self.stamps))[0]
        return self._days

    def find_entry(self, offset: int) -> int:
        """The number of the entry starting at ``offset`` (it must be one of this segment)."""
        return bisect.bisect_left(self.offsets, offset)

    def count_of(self, w: int) -> int:
        """How many entries hold word ``w``."""
        return int(self.post_at[w + 1] - self.post_at[w])

    def entries_of(self, w: int) -> tuple[list[int], dict[int, int]]:
        """Numbers (in this segment) of the entries holding word ``w``, ascending, and how often
        each holds it where more than once."""
        a, b = self.post_at[w], self.post_at[w + 1]
        ids = self.posts[a:b].tolist()
        times: dict[int, int] = {}
        i = bisect.bisect_left(self.many_at, a)
        j = bisect.bisect_left(self.many_at, b)
        if i < j:
            for pos, n in zip(self.many_at[i:j].tolist(), self.many[i:j].tolist(), strict=True):
                times[self.posts[pos]] = n
        return ids, times

    @property
    def size(self) -> int:  # type: ignore[override]
        return len(self.offsets)

    def span(self, i: int) -> tuple[int, int]:
        """Entry ``i``'s file offset and length."""
        return self.offsets[i], self.lengths[i]

    def row_of(self, i: int) -> tuple[int, bytes, int]:
        return self.lengths[i], bytes(self.stamps[17 * i : 17 * i + 17]), self.offsets[i]


@dataclass
class Packed(_Words):
    """A segment as the index file holds it (memory-mapped views), its lists packed small
    (memory/search/postings.py): per entry where it starts (from the segment's start; its
    length is up to the next one), its stamp's day and time as numbers; per word one record:
    a varint (how many entries, whether their gaps are half bytes, whether some hold it more
    than once), then how many those are, the entries, the positions of those among them and how
    often each holds it."""

    start: int
    end: int
    starts: Any  # per entry: offset of its "[" from ``start``
    day_of: Any  # per entry: YYYYMMDD of its stamp
    time_of: Any  # per entry: HHMM of its stamp
    blob: Any
    blob_start: int
    blob_end: int
    word_at: Any
    post_at: Any  # per word: where its record starts in ``records``, and one more
    records: Any
    monotone: bool
    check: str = ""

    @property
    def size(self) -> int:  # type: ignore[override]
        return len(self.starts)

    def stamp(self, i: int) -> bytes:
        d, t = self.day_of[i], self.time_of[i]
        return b"%04d-%02d-%02d %02d:%02d]" % (d // 10000, d // 100 % 100, d % 100, t // 100,
                                                t % 100)  # fmt: skip

    def days(self) -> Any:
        return self.day_of

    def span(self, i: int) -> tuple[int, int]:
        at = self.starts[i]
        nxt = self.starts[i + 1] if i + 1 < len(self.starts) else self.end - self.start
        return self.start + at, nxt - at - 2

    def row_of(self, i: int) -> tuple[int, bytes, int]:
        offset, length = self.span(i)
        return length, self.stamp(i), offset

    def count_of(self, w: int) -> int:
        return postings.read_varint(self.records, self.post_at[w])[0] >> 2

    def entries_of(self, w: int) -> tuple[list[int], dict[int, int]]:
        rec = self.records
        head, pos = postings.read_varint(rec, self.post_at[w])
        k, pos = postings.read_varint(rec, pos) if head & 1 else (0, pos)
        ids, pos = postings.unpack_ids(rec, pos, head >> 2, bool(head & 2))
        if not k:
            return ids, {}
        gaps, pos = postings.unpack_ints(rec, pos, k)
        counts, _ = postings.unpack_ints(rec, pos, k)
        at = itertools.accumulate(gaps, initial=-1)
        next(at)
        return ids, dict(zip(map(ids.__getitem__, at), counts, strict=True))


Part = Segment | Packed  # a segment in memory (the last entries) or from the index file


def _days_of(stamps: bytes) -> tuple[array[int], array[int]]:
    """Per stamp (17 bytes each, past the "["), its day YYYYMMDD and time HHMM as numbers."""
    digits = stamps.translate(None, b"-: ]")  # 12 digits per stamp
    ends = range(12, len(digits) + 1, 12)
    days = array(
        "I",
        map(
            int,
            map(
                digits.__getitem__, map(slice, range(0, len(digits), 12), range(8, len(digits), 12))
            ),
        ),
    )
    times = array(
        "H", map(int, map(digits.__getitem__, map(slice, range(8, len(digits), 12), ends)))
    )
    return days, times


def _entries(buf: bytes, base: int, at_eof: bool) -> list[tuple[int, int]]:
    """(start, end) in ``buf`` of its entries; ``buf`` starts with one. The last ends at the
    buffer's end (before the blank line) or, at the file's end, before the trailing spaces."""
    starts = [0] + [m.end() for m in _ENTRY_EDGE.finditer(buf)]
    ends = [s - 2 for s in starts[1:]]
    last = starts[-1]
    ends.append(region_end(buf, last, len(buf)) if at_eof else len(buf) - 2)
    return list(zip(starts, ends, strict=True))


def index_bytes(buf: bytes, base: int, at_eof: bool) -> Segment:
    """The segment of ``buf`` (whole entries from file offset ``base``), in memory.

    ``at_eof``: ``buf`` ends the file (its last entry's end is the file's, spaces cut off);
    else it ends where the next entry starts, after the blank line before it.
    """
    step = 1 << 20  # translated a megabyte at a time: no long call holds the GIL
    view = b"".join(buf[i : i + step].translate(WORD_VIEW) for i in range(0, len(buf), step))
    spans = _entries(buf, base, at_eof)
    posts: dict[bytes, array[int]] = {}
    many: dict[bytes, list[tuple[int, int]]] = {}
    offsets = array("Q")
    lengths = array("I")
    stamps = bytearray()
    for i, (s, e) in enumerate(spans):
        offsets.append(base + s)
        lengths.append(e - s)
        stamps += buf[s + 1 : s + STAMP_BYTES]
        words = view[s + STAMP_BYTES : e].split()
        once = dict.fromkeys(words)
        if len(once) < len(words):
            for word, n in Counter(words).items():
                if n > 1:
                    many.setdefault(word, []).append((i, n))
        for word in once:
            held = posts.get(word)
            if held is None:
                held = posts[word] = array("I")
            held.append(i)
    return _assemble(base, base + len(buf), offsets, lengths, stamps, posts, many)


def _assemble(
    start: int,
    end: int,
    offsets: array[int],
    lengths: array[int],
    stamps: bytearray,
    posts: dict[bytes, array[int]],
    many: dict[bytes, list[tuple[int, int]]],
) -> Segment:
    words = list(posts)
    blob = b"\n" + b"".join(w + b"\n" for w in words)
    word_at = array("I", [1])
    post_at = array("I", [0])
    flat = array("I")
    many_at = array("I")
    many_n = array("I")
    for w in words:
        word_at.append(word_at[-1] + len(w) + 1)
        held = posts[w]
        extra = many.get(w)
        if extra:
            first = len(flat)
            for i, n in extra:
                many_at.append(first + bisect.bisect_left(held, i))
                many_n.append(n)
        flat.extend(held)
        post_at.append(len(flat))
    st = bytes(stamps)
    monotone = all(st[k : k + 17] <= st[k + 17 : k + 34] for k in range(0, len(st) - 17, 17))
    return Segment(start, end, offsets, lengths, st, blob, 0, len(blob), word_at, post_at, flat,
                   many_at, many_n, monotone)  # fmt: skip


# --- on disk --------------------------------------------------------------------------------

_SECTIONS = (
    ("starts", "I"),
    ("day_of", "I"),
    ("time_of", "H"),
    ("blob", "B"),
    ("word_at", "I"),
    ("post_at", "I"),
    ("records", "B"),
)


def pack(seg: Segment) -> dict[str, Any]:
    """The sections of a built segment as the index file holds them (see ``Packed``)."""
    size = seg.size
    assert size and seg.offsets[-1] + seg.lengths[-1] + 2 == seg.end, "not a whole segment"
    starts = array("I", map((-seg.start).__add__, seg.offsets))
    day_of, time_of = _days_of(bytes(seg.stamps))
    records = bytearray()
    post_at = array("I", [0])
    posts, many_at, many = seg.posts, seg.many_at, seg.many
    m = 0  # the next of ``many_at``
    for w in range(len(seg.post_at) - 1):
        a, b = seg.post_at[w], seg.post_at[w + 1]
        ids = posts[a:b].tolist()
        k = m
        while k < len(many_at) and many_at[k] < b:
            k += 1
        halves, body = postings.pack_ids(ids)
        # how many, whether as half bytes, whether some entries hold it more than once
        records += postings.varint(len(ids) << 2 | halves << 1 | (k > m))
        if k > m:
            records += postings.varint(k - m)
        records += body
        if k > m:
            at = [p - a for p in many_at[m:k]]
            records += postings.pack_ints(list(map(int.__sub__, at, [-1, *at[:-1]])))
            records += postings.pack_ints(many[m:k].tolist())
        m = k
        post_at.append(len(records))
    return {
        "starts": starts,
        "day_of": day_of,
        "time_of": time_of,
        "blob": seg.words(),
        "word_at": seg.word_at,
        "post_at": post_at,
        "records": bytes(records),
    }


def _write_record(
    write: Callable[[Any], object],
    seg: Segment,
    cursor: Cursor,
    chunk: int,
    before_seal: Callable[[], None] | None = None,
) -> None:
    """Append a segment to the index: its sections, its description, then the trailer that
    seals it (``before_seal``: syncs the data first when appending to a live index)."""
    raws = []
    where: dict[str, list[int]] = {}
    pos = 0
    sections = pack(seg)
    for name, _ in _SECTIONS:
        value = sections[name]
        raw = memoryview(value).cast("B") if isinstance(value, array) else value
        where[name] = [pos, len(raw)]
        raws.append(raw)
        pos += len(raw) + (-len(raw) % 8)
    meta = json.dumps(
        {
            "start": seg.start,
            "end": seg.end,
            "check": seg.check,
            "monotone": seg.monotone,
            "cursor": [cursor.base, cursor.read, cursor.entries],
            "chunk": chunk,  # the scan's chunk the cursor was walked with
            "sections": where,
        }
    ).encode("ascii")
    body_len = pos + len(meta)
    write(_LEN.pack(body_len))
    for raw in raws:  # each written as it is: no copy of the whole segment
        write(raw)
        write(b"\0" * (-len(raw) % 8))
    write(meta)
    if before_seal is not None:
        before_seal()
    write(_TRAILER.pack(SEAL, zlib.crc32(meta + _LEN.pack(body_len)), len(meta)))


def _check_of(f: BinaryIO, end: int) -> str:
    f.seek(max(0, end - CHECK_BYTES))
    return hashlib.blake2b(f.read(min(end, CHECK_BYTES)), digest_size=16).hexdigest()


@dataclass
class Index:
    """A loaded index: its sealed segments, the file it describes, where the walk stands."""

    dev: int
    ino: int
    segments: list[Packed]
    cursor: Cursor
    sealed_end: int  # bytes of the index file that are sealed segments
    keep: Any = None  # the mapping, kept alive with the views into it
    live: Segment | None = None  # the entries past the last segment, for one file size
    live_size: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    file: tuple[int, int] = (0, 0)  # the index file's inode and size when loaded
    chunk: int = 0  # the scan's chunk size its cursor was walked with

    @property
    def end(self) -> int:
        return self.segments[-1].end if self.segments else 0


def _load(path: Path) -> Index | None:
    """The index file's sealed segments; None when it is missing or not an index."""
    try:
        with open_binary(path) as f:
            st = os.fstat(f.fileno())
            size = st.st_size
            if size < _HEAD.size:
                return None
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (FileNotFoundError, OSError, ValueError):
        return None
    magic, dev, ino = _HEAD.unpack_from(mm, 0)
    if magic != MAGIC:
        return None
    view = memoryview(mm)
    segments: list[Packed] = []
    cursor = Cursor()
    chunk = 0
    pos = _HEAD.size
    while pos + _LEN.size + _TRAILER.size <= size:
        try:
            found = _segment_at(mm, view, pos, size)
        except (ValueError, KeyError, TypeError, IndexError, struct.error):  # not ours
            break
        if found is None:
            break  # torn: written, not sealed (a crash while appending)
        segment, cursor, chunk, pos = found
        segments.append(segment)
    return Index(
        dev, ino, segments, cursor, pos, keep=(mm, view), file=(st.st_ino, size), chunk=chunk
    )


def _segment_at(
    mm: mmap.mmap, view: memoryview, pos: int, size: int
) -> tuple[Packed, Cursor, int, int] | None:
    """The sealed segment at ``pos`` of the index file, its cursor, chunk and end; None when
    it is not sealed."""
    (body_len,) = _LEN.unpack_from(mm, pos)
    tail = pos + _LEN.size + body_len
    if tail + _TRAILER.size > size:
        return None
    seal, crc, meta_len = _TRAILER.unpack_from(mm, tail)
    meta_raw = bytes(mm[tail - meta_len : tail])
    if seal != SEAL or meta_len > body_len or zlib.crc32(meta_raw + _LEN.pack(body_len)) != crc:
        return None
    meta = json.loads(meta_raw)
    body = pos + _LEN.size
    got: dict[str, Any] = {}
    for name, kind in _SECTIONS:
        at, n = meta["sections"][name]
        if not 0 <= at <= at + n <= body_len:
            raise ValueError("a section outside its segment")
        section = view[body + at : body + at + n]
        got[name] = section if kind == "B" else section.cast("H" if kind == "H" else "I")
    if not len(got["starts"]) == len(got["day_of"]) == len(got["time_of"]) > 0:
        raise ValueError("entries' lists of different lengths")
    at = body + meta["sections"]["blob"][0]
    segment = Packed(meta["start"], meta["end"], got["starts"], got["day_of"], got["time_of"],
                     mm, at, at + meta["sections"]["blob"][1], got["word_at"], got["post_at"],
                     got["records"], meta["monotone"], meta["check"])  # fmt: skip
    return segment, Cursor(*meta["cursor"]), meta.get("chunk", 0), tail + _TRAILER.size


def _valid(index: Index, f: BinaryIO) -> bool:
    """Whether the index describes this file: same file, not shorter, same bytes at each end."""
    st = os.fstat(f.fileno())
    if (st.st_dev, st.st_ino) != (index.dev, index.ino) or st.st_size < index.end:
        return False
    start = 0
    for seg in index.segments:
        if seg.start != start or _check_of(f, seg.end) != seg.check:
            return False
        start = seg.end
    return True


# --- building and keeping current -------------------------------------------------------------

_OPEN: OrderedDict[str, Index] = OrderedDict()  # loaded indexes, least recently used first
_OPEN_LOCK = threading.Lock()
_PATH_LOCKS: dict[str, threading.Lock] = {}
_BUILDS = threading.Semaphore(1)  # one background build at a time in the whole process
_PENDING: set[str] = set()


def _path_lock(name: str) -> threading.Lock:
    with _OPEN_LOCK:
        lock = _PATH_LOCKS.get(name)
        if lock is None:
            lock = _PATH_LOCKS[name] = threading.Lock()
        return lock


def _forget_open(name: str) -> None:
    with _OPEN_LOCK:
        _OPEN.pop(name, None)


def _segments_of(f: BinaryIO, start: int, stop: int) -> Iterable[Segment]:
    """Segments of whole entries covering ``[start, stop)`` (``stop``: an entry start)."""
    pos = start
    while pos < stop:
        f.seek(pos)
        buf = f.read(min(SEGMENT_BYTES, stop - pos))
        if pos + len(buf) < stop:
            cut = BYTES_LAYOUT.last_start(buf)
            if cut == 0:  # one entry larger than a segment: read it whole
                f.seek(pos)
                nxt = _next_start(f, pos + len(buf), stop)
                buf = f.read(nxt - pos)
            else:
                buf = buf[:cut]
        seg = index_bytes(buf, pos, False)
        seg.check = _check_of(f, seg.end)
        yield seg
        pos = seg.end


def _next_start(f: BinaryIO, pos: int, stop: int) -> int:
    """The first entry start at or after ``pos`` (``stop`` when none is before it)."""
    while pos < stop:
        f.seek(pos - 2)
        buf = f.read(min(SEGMENT_BYTES, stop - pos + 2))
        m = _ENTRY_EDGE.search(buf)
        if m:
            return pos - 2 + m.end()
        pos += max(1, len(buf) - 24)
    return stop


def _last_start(f: BinaryIO, size: int) -> int:
    """Where the file's last entry starts (0 when it has one entry)."""
    back = 64 * 1024
    while True:
        lo = max(0, size - back)
        f.seek(lo)
        buf = f.read(size - lo)
        cut = BYTES_LAYOUT.last_start(buf)
        if cut or lo == 0:
            return lo + cut if cut else 0
        back *= 4


def _starts_with_entry(f: BinaryIO) -> bool:
    f.seek(0)
    return _STAMP_AT.match(f.read(STAMP_BYTES)) is not None


def build(history: Path, chunk: int) -> bool:
    """Index ``history`` whole, replacing its index atomically; False when it cannot be
    indexed (missing, too small, not starting with an entry, or replaced meanwhile).

    The work is done without a lock; only the final check that HISTORY.md is still the file
    that was read, and the rename, hold the file's lock, which ``drop`` takes too: an index of
    a text /forget has just replaced is never installed after the forget dropped the old one.
    """
    name = str(history)
    target = index_path(history)
    tmp = target.with_name(f".{target.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        with open_binary(history) as f:
            st = os.fstat(f.fileno())
            if st.st_size < MIN_BYTES or not _starts_with_entry(f):
                drop(history)
                return False
            stop = _last_start(f, st.st_size)
            _, cursor = walk(f, Cursor(), chunk)
            fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                out.write(_HEAD.pack(MAGIC, st.st_dev, st.st_ino))
                for seg in _segments_of(f, 0, stop):
                    _write_record(out.write, seg, cursor, chunk)
                out.flush()
                os.fsync(out.fileno())
        with _path_lock(name):
            now = os.stat(history, follow_symlinks=False)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                return False  # replaced while it was read (/forget): never install
            os.replace(tmp, target)
            _forget_open(name)
        fsync_dir(target.parent)
        return True
    except FileNotFoundError:  # HISTORY.md gone, or the temp file swept by /forget
        return False
    finally:
        _unlink(tmp)


def _append(history: Path, index: Index, f: BinaryIO, chunk: int) -> bool:
    """Index the entries added since the last segment, appended to the index file (which is cut
    back to its sealed part first: a torn tail from a crash goes)."""
    size = os.fstat(f.fileno()).st_size
    stop = _last_start(f, size)
    if stop <= index.end:
        return True
    _, cursor = walk(f, index.cursor, chunk)
    target = index_path(history)
    try:
        fd = open_fd(target, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        os.ftruncate(fd, index.sealed_end)
        os.lseek(fd, 0, os.SEEK_END)
        for seg in _segments_of(f, index.end, stop):
            # the data synced first, then the seal that says it is whole
            _write_record(partial(_write_all, fd), seg, cursor, chunk, partial(os.fsync, fd))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _schedule(history: Path, chunk: int) -> None:
    """Build the index in a background thread (once per file at a time)."""
    name = str(history)
    with _OPEN_LOCK:
        if name in _PENDING:
            return
        _PENDING.add(name)

    def run() -> None:
        try:
            with _BUILDS:
                started = time.monotonic()
                try:
                    size = history.stat().st_size
                except OSError:
                    return
                log.info("search index: indexing %s (%.0f MB) in the background", history,
                         size / 2**20)  # fmt: skip
                try:
                    done = build(history, chunk)
                except OSError as exc:
                    log.warning("search index: could not index %s: %s", history, exc)
                    return
                if done:
                    log.info("search index: %s indexed in %.1f s", history,
                             time.monotonic() - started)  # fmt: skip
        finally:
            with _OPEN_LOCK:
                _PENDING.discard(name)

    threading.Thread(target=run, name="history-index", daemon=True).start()


AUTO_BUILD = True  # build missing indexes in the background (bench/ turns it off to time scans)


def lookup(history: Path, chunk: int) -> Index | None:
    """The current index of ``history`` with its entries up to the file's end, or None (then
    scan; a build is started when the file is worth one)."""
    name = str(history)
    try:
        f = open_binary(history)
    except (FileNotFoundError, OSError):
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < MIN_BYTES:
            return None
        with _OPEN_LOCK:
            index = _OPEN.get(name)
            if index is not None:
                _OPEN.move_to_end(name)
        if index is not None and _file_of(index_path(history)) != index.file:
            index = None  # rebuilt, grown or removed since it was loaded (another process)
        fresh = index is None
        if index is None:
            index = _load(index_path(history))
        if index is None or index.chunk != chunk or not _valid(index, f):
            _forget_open(name)
            if AUTO_BUILD and _starts_with_entry(f):
                _schedule(history, chunk)
            return None
        if fresh:
            with _OPEN_LOCK:
                _OPEN[name] = index
                while len(_OPEN) > OPEN_INDEXES:
                    _OPEN.popitem(last=False)
        if size - index.end > INLINE_BYTES or len(index.segments) > MAX_SEGMENTS:
            if AUTO_BUILD:
                _schedule(history, chunk)
            return None
        if size - index.end > LIVE_BYTES and _last_start(f, size) - index.end > LIVE_BYTES:
            with _path_lock(name):  # appended to the index as it is on disk now
                current = _load(index_path(history))
                if current is None or current.chunk != chunk or not _valid(current, f):
                    return None
                _append(history, current, f, chunk)
                index = _load(index_path(history))
                if index is None or not _valid(index, f):
                    return None
            with _OPEN_LOCK:
                _OPEN[name] = index
        with index.lock:
            if index.live_size != size:
                f.seek(index.end)
                tail = f.read(size - index.end)
                index.live = index_bytes(tail, index.end, True) if tail.strip() else None
                index.live_size = size
        return index


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _file_of(path: Path) -> tuple[int, int]:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return (0, 0)
    return st.st_ino, st.st_size


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def unload() -> None:
    """Forget every loaded index (as a fresh process starts: bench/ times first searches)."""
    with _OPEN_LOCK:
        _OPEN.clear()


def is_index(name: str) -> bool:
    """Whether a workspace file name is an index (derived: /export leaves it out)."""
    return name.startswith(".") and name.endswith(".index")


def drop(history: Path) -> None:
    """Delete the index of ``history`` (its text was rewritten: /forget, a link merge); waits
    for a build of it under way, so no index of the old text is installed after."""
    name = str(history)
    with _path_lock(name):
        _forget_open(name)
        _unlink(index_path(history))


def parts(index: Index) -> list[Part]:
    """Every segment of the index, the in-memory one of the last entries included."""
    segs: list[Part] = list(index.segments)
    return segs + ([index.live] if index.live is not None else [])


# --- answering a term -----------------------------------------------------------------------

Read = Callable[[int, int], bytes]  # (file offset, length) -> the entry's bytes as written
# A term's matching entries by weight: its weighted occurrences -> the entries' numbers (in
# file order over the whole index, see ``numbering``).
Hits = dict[float, list[int]]


def numbering(index: Index) -> tuple[list[Part], list[int], int]:
    """Every segment (the in-memory one of the last entries too), the number of each one's
    first entry, and how many entries there are."""
    segs = parts(index)
    bases = list(itertools.accumulate((seg.size for seg in segs), initial=0))
    return segs, bases[:-1], bases[-1]


def monotone(index: Index) -> bool:
    """Whether entries come in the order of their stamps (then the newest is the last)."""
    segs = parts(index)
    if not all(seg.monotone for seg in segs):
        return False
    return all(a.last_stamp <= b.first_stamp for a, b in itertools.pairwise(segs) if a.size)


def rows_of(index: Index, numbers: Iterable[int]) -> list[tuple[int, bytes, int]]:
    """(length, stamp, file offset) of the entries numbered ``numbers``."""
    segs, bases, _ = numbering(index)
    out = []
    for n in numbers:
        k = bisect.bisect_right(bases, n) - 1
        out.append(segs[k].row_of(n - bases[k]))
    return out


def hits(index: Index, term: Term, read: Read) -> Hits | None:
    """The entries holding ``term`` by its weight in each, as the scan finds them; None for a
    term the index cannot answer (a phrase, a regex, a non-ASCII word)."""
    if term.typo:
        return _typo_hits(index, term)
    if term.kind == "date" and term.alternatives:
        return _date_hits(index, term, read)
    if term.alternatives:  # a number: its digits or its words, each entry weighs 1
        if term.kind != "word":
            return None
        union: set[int] = set()
        for alt in term.alternatives:
            if alt.forms is not None and alt.past_stamp and not alt.alternatives:
                for cell in _forms_hits(index, alt, read, exact=False).values():
                    union.update(cell)
            elif alt.kind == "number" and alt.label.isascii():
                union.update(_words_hits(index, alt, read))
            else:
                return None
        return {1.0: sorted(union)} if union else {}
    if term.kind != "word" or term.forms is None or term.needle is None:
        return None
    if not term.past_stamp and term.needle.isdigit():
        return None  # a word of digits in a stamp counts: the index holds what follows stamps
    return _forms_hits(index, term, read, exact=True)


def _sum(weight: float, n: int) -> float:
    """``n`` occurrences of ``weight`` added one by one, as the scan adds them."""
    total = 0.0
    for _ in range(n):
        total += weight
    return total


def _token_weights(term: Term, token: bytes) -> list[float]:
    """The weights the scan gives the occurrences of ``term``'s root in one word, in order."""
    forms = term.forms
    assert forms is not None and term.needle is not None
    root, word, n = term.needle, forms.word.encode("ascii"), len(term.needle)
    out = []
    at = token.find(root)
    while at >= 0:
        # inside the word: grep's match only; at its start: the word weighed whole
        part = forms.part_weight if token.startswith(word, at) else 0.0
        w = part if at else forms.weigh(token)
        if w:
            out.append(w)
        at = token.find(root, at + n)
    return out


def _entry_bytes(seg: Part, i: int, read: Read) -> bytes:
    return read(*seg.span(i))


def _forms_hits(index: Index, term: Term, read: Read, exact: bool) -> Hits:
    """A bare keyword's entries by weight: the words holding its root, weighed; an entry
    holding words of different weights is weighed on its text (the scan's order of addition).
    Without ``exact`` only which entries match counts (every weight is positive)."""
    forms = term.forms
    assert forms is not None and term.needle is not None
    cells: Hits = {}
    segs, bases, _ = numbering(index)
    for seg, base in zip(segs, bases, strict=True):
        lists = []
        for w in seg.words_with(term.needle):
            weights = _token_weights(term, seg.word(w))
            if weights:
                uniform = weights[0] if len(set(weights)) == 1 else None
                lists.append((seg.entries_of(w), uniform, len(weights)))
        lists.sort(key=lambda item: -len(item[0][0]))
        # Per entry, the code of the weight of the word that first held it (0: none yet).
        seen = bytearray(seg.size)
        code_of: dict[float | None, int] = {}
        weight_of: list[float | None] = [None]
        plain: dict[float, list[int]] = {}  # entries holding one word of the root once
        counted: dict[int, tuple[float | None, int]] = {}  # the others: weight, occurrences
        moved: set[int] = set()  # in ``plain`` first, then counted
        for li, ((ids, times), weight, k) in enumerate(lists):
            clash: list[tuple[int, int]] = []
            if li:
                got = bytes(map(seen.__getitem__, ids))
                if got.count(0) != len(got):
                    clash = list(zip(compress(ids, got), compress(got, got), strict=True))
            code = code_of.get(weight)
            if code is None:
                code = code_of[weight] = min(len(weight_of), 255)
                weight_of.append(weight)
            deque(map(seen.__setitem__, ids, repeat(code)), 0)
            if not exact:
                cells.setdefault(1.0, []).extend(map(base.__add__, ids))
                continue
            for i, first in clash:  # in an earlier word's entries too
                old = counted.get(i)
                if old is None:
                    old = (weight_of[first] if first < 255 else None, 1)
                    moved.add(i)
                n = times.get(i, 1) * k
                same = weight is not None and old[0] == weight
                counted[i] = (weight, old[1] + n) if same else (None, 0)
            special = set(times) | {i for i, _ in clash}
            if weight is None or k > 1:
                for i in ids:
                    if i not in counted:
                        counted[i] = (weight, times.get(i, 1) * k)
                continue
            for i in times:
                if i not in counted:
                    counted[i] = (weight, times[i])
            fresh = list(itertools.filterfalse(special.__contains__, ids)) if special else ids
            plain.setdefault(weight, []).extend(fresh)
        for weight, cell in plain.items():
            if moved:
                cell = list(itertools.filterfalse(moved.__contains__, cell))
            if cell:
                cells.setdefault(weight, []).extend(map(base.__add__, cell))
        for i, (weight, n) in counted.items():
            if weight is not None:
                tf = _sum(weight, n)
            else:
                low = _entry_bytes(seg, i, read).lower()
                tf = term.weight_in(low, 0, len(low))
            if tf:
                cells.setdefault(tf, []).append(base + i)
    return cells


def _words_hits(index: Index, term: Term, read: Read) -> set[int]:
    """Entries holding a number in words ("twenty-five"): those holding each of its words as
    a word of their own (or beside a non-ASCII letter), checked on their text."""
    pieces = re.findall(rb"[a-z0-9]+", term.label.encode("ascii"))
    out: set[int] = set()
    segs, bases, _ = numbering(index)
    for seg, base in zip(segs, bases, strict=True):
        candidates: set[int] | None = None
        for piece in sorted(set(pieces), key=len, reverse=True):
            holding: set[int] = set()
            for w in seg.words_with(piece):
                if _stands_alone(seg.word(w), piece):
                    holding.update(seg.entries_of(w)[0])
            candidates = holding if candidates is None else candidates & holding
            if not candidates:
                break
        for i in candidates or ():
            low = _entry_bytes(seg, i, read).lower()
            if term.weight_in(low, 0, len(low)):
                out.add(base + i)
    return out


def _stands_alone(token: bytes, piece: bytes) -> bool:
    """Whether ``piece`` occurs in ``token`` with no ASCII letter or digit beside it."""
    at = token.find(piece)
    while at >= 0:
        end = at + len(piece)
        if (at == 0 or token[at - 1] >= 128) and (end == len(token) or token[end] >= 128):
            return True
        at = token.find(piece, at + 1)
    return False


def _typo_hits(index: Index, term: Term) -> Hits:
    """A keyword found nowhere, one edit away: the words of the vocabulary the typo term
    accepts, counted per entry and weighed as the scan weighs them."""
    from memory.search import terms  # its weight, read when used (it is tuned there)

    counts: Counter[int] = Counter()
    segs, bases, _ = numbering(index)
    for seg, base in zip(segs, bases, strict=True):
        blob = seg.words()
        pos, end = 0, len(blob)
        while True:
            at = term.find(blob, pos, end)
            if at < 0:
                break
            w = bisect.bisect_right(seg.word_at, at) - 1
            ids, times = seg.entries_of(w)
            counts.update(map(base.__add__, ids))
            for i, n in times.items():
                counts[base + i] += n - 1
            pos = blob.index(b"\n", at)
    cells: Hits = {}
    for number, n in counts.items():
        cells.setdefault(terms.TYPO_WEIGHT * n, []).append(number)
    return cells


def _date_hits(index: Index, term: Term, read: Read) -> Hits | None:
    """Entries filed on a day of the span or naming one, as the scan finds them (each weighs
    1): stamps from the entries' days (a binary search when they come in order), dates in the
    text from the words a written date is made of (the year, the month, a day), read and
    checked where a day must be next to a month's name or an ISO date's digits must follow."""
    found: set[int] = set()
    segs, bases, _ = numbering(index)
    for alt in term.alternatives:
        needle = alt.date
        if needle is None:
            return None
        text = needle.text.encode("ascii")
        iso = text.endswith(b"-")
        for seg, base in zip(segs, bases, strict=True):
            if text[:4].isdigit():  # "2026-05-" or "2026": the stamps of that month or year
                found.update(map(base.__add__, _stamped(seg, text, needle.days)))
            candidates = _holding(seg, [text[:4], text[5:7]] if iso else [text], _stands_alone)
            if candidates and needle.days is not None:
                days = _holding_any(seg, _day_pieces(needle.days, iso), iso)
                candidates = _among(seg, candidates, days)
            if not candidates:
                continue
            if needle.days is None and not iso:  # a year, a month's name: the word says it
                found.update(map(base.__add__, candidates))
                continue
            for i in candidates:
                if base + i in found:
                    continue
                # what follows an entry is a line break, as in the file
                low = _entry_bytes(seg, i, read).lower() + b"\n"
                if needle.find(low, 0, len(low) - 1) >= 0:
                    found.add(base + i)
    return {1.0: sorted(found)} if found else {}


def _stamped(seg: Part, text: bytes, days: frozenset[int] | None) -> Iterable[int]:
    """The entries of ``seg`` stamped in the month ("2026-05-", on ``days`` if given) or
    the year ("2026") ``text`` names."""
    if not text.endswith(b"-"):
        first = int(text) * 10000
        return seg.dated(first, first + 9999)
    first = int(text[:4] + text[5:7]) * 100
    if days is None:
        return seg.dated(first, first + 99)
    return itertools.chain.from_iterable(seg.dated(first + d, first + d) for d in sorted(days))


def _holding(seg: Part, pieces: list[bytes], fits: Callable[[bytes, bytes], bool]) -> set[int]:
    """Entries of ``seg`` holding, for each of ``pieces``, a word that ``fits`` it: the
    entries of the rarest, then those of them the others' lists hold."""
    groups = [[w for w in seg.words_with(piece) if fits(seg.word(w), piece)] for piece in pieces]
    groups.sort(key=lambda words: sum(map(seg.count_of, words)))
    out: set[int] = set()
    for w in groups[0]:
        out.update(seg.entries_of(w)[0])
    for words in groups[1:]:
        out = _among(seg, out, words)
    return out


def _among(seg: Part, numbers: set[int], words: list[int]) -> set[int]:
    """Those of ``numbers`` that one of ``words`` is held by."""
    kept: set[int] = set()
    for w in words:
        if len(kept) == len(numbers):
            break
        kept |= numbers.intersection(seg.entries_of(w)[0])
    return kept


def _holding_any(seg: Part, pieces: list[bytes], iso: bool) -> list[int]:
    """Words of ``seg`` that may write one of the days ``pieces`` are."""
    fits = _leads if iso else _stands_alone
    words = (w for piece in pieces for w in seg.words_with(piece) if fits(seg.word(w), piece))
    return list(dict.fromkeys(words))


def _day_pieces(days: frozenset[int], iso: bool) -> list[bytes]:
    """What a word writing one of ``days`` holds: after an ISO month its two digits; beside a
    month's name its digits, with or without a suffix or a leading 0, or the last word of it
    written out ("twenty-first": "first")."""
    if iso:
        return [b"%02d" % d for d in sorted(days)]
    out: list[bytes] = []
    for d in sorted(days):
        out += [b"%d" % d, b"%02d" % d]
        out += [b"%d" % d + suffix for suffix in (b"st", b"nd", b"rd", b"th")]
    out += [
        re.split(rb"[^a-z]", w.encode("ascii"))[-1] for w, d in ORDINAL_DAYS.items() if d in days
    ]
    return list(dict.fromkeys(out))


def _leads(token: bytes, piece: bytes) -> bool:
    """Whether ``token`` starts with ``piece`` and no digit follows it (an ISO date's day)."""
    return token.startswith(piece) and not token[len(piece) : len(piece) + 1].isdigit()
