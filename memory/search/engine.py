"""Ranked search over HISTORY.md (/recall and the agent's search tool), streamed in chunks.

An entry begins at a ``[YYYY-MM-DD HH:MM]`` line that starts the file or follows a blank line; a
``[RAW]`` archive holds many timestamped lines separated by single newlines, so it stays one entry.

What matches (see memory/search/terms.py): a keyword finds itself as a word, the other forms of its
stem ("hiking" finds "hiked", memory/search/stems.py) and, as ``grep -i`` would, itself inside
longer
words ("postgres" in "PostgreSQL"), weighted in that order. ``"quoted phrases"`` match exactly.
Filler words of a natural question ("what did Dr. Lindqvist say about my migraines") are not
searched when the query holds anything else. Dates in the question ("last week", "in March",
memory/search/dates.py) pick out the entries filed then or naming such a day: those come first.

Ranking: BM25 over the weighted occurrences (rare words weigh more, so one rare word outweighs
several common ones however many keywords an entry holds), ties to the newest; the best 60 are
then read and two keywords in one sentence add to the score (memory/search/rerank.py). A number
is found in words too ("55", "fifty-five"), and a keyword of six letters or more that no entry
holds is looked for one typo away (a second scan). Every choice was measured on
bench/recall_table.py's four sets, decided on their tuning halves. With ``regex=True`` the
query is one case-insensitive RE2 expression (memory/search/regex.py; ``^``/``$`` match at
lines).

Speed: from 4 MB on, a word index beside the file answers bare keywords, numbers, typos and dates
without reading it (memory/search/history_index.py; the same tally to the last bit, else None and a
scan). The scan works on bytes, a chunk at a time. Bare ASCII keywords, the common case, are found
in bulk (memory/search/word_scan.py): one memmem pass per keyword, C calls mapped over the hits, no
Python step per hit or entry unless a hit is another form of the word. Phrases, non-ASCII words and
dates (without an index) search the lowered chunk with ``bytes.find``, a few C calls per matching
entry; regexes run RE2 on the bytes as written. Timestamps are checked in bulk; per pattern of term
counts only the few entries that can still reach the requested page are kept, so memory stays small
however many entries match. Ranking without a length norm (b = 0) needs no entry's end: the few
entries shown are read up to the next one. What a scan found per keyword is remembered until the
file changes (memory/search/scan_cache.py, bounded), and so is a whole query's tally, so the next
page, or a keyword asked again, reads nothing.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import time
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, BinaryIO

from memory.safefs import open_binary
from memory.search import history_index, rerank, stems, terms
from memory.search.dates import DateSpan
from memory.search.meaning import DEPTH, Meaning, fuse, read_entry
from memory.search.regex import RegexError
from memory.search.regions import SAMPLE_BYTES, cut_regions, walk
from memory.search.regions import estimate_entries as _estimate_entries
from memory.search.scan_cache import Region, ScanCache, Version, file_version
from memory.search.stems import WORD_BYTES, word_end
from memory.search.terms import (
    BYTES_LAYOUT,
    STOPWORDS,
    Query,
    SearchError,
    Term,
    parse_query,
    typo_eligible,
    typo_term,
)
from memory.search.word_scan import (
    WORD_VIEW,
    Row,
    TermHits,
    WordScan,
    all_stamps,
    region_end,
    scan_words,
)

__all__ = [
    "STOPWORDS",
    "HistoryHit",
    "SearchError",
    "SearchResult",
    "prepare",
    "search_history",
]

log = logging.getLogger(__name__)

CHUNK_BYTES = 1024 * 1024  # fits in cache: lower() and find() then run several times faster
MAX_QUERY_CHARS = 1000
REGEX_TIME_BUDGET_S = 30.0
# Chosen on bench/recall_life.py's tuning half by bench/tune_bm25.py. b = 0: no discount for
# long entries, so among entries that hold the same words the newest wins, which is the one a
# person means ("where did I buy the kettle" asks about the latest kettle).
BM25_K1 = 1.2
BM25_B = 0.0
# Before BM25: "count" ranks an entry by how many of the keywords it holds, "all" only puts
# those holding every keyword first, "none" leaves it to BM25. "none": a rare word and a name
# ("Jonas Lofoten") outweigh three common words of a chat ("Jonas trip photos"); "count" had
# been chosen on the life set alone, where it ties with "none", and it lost on the friends'
# set's tuning half (R@1 78.8 against 74.8 %, R@5 97.6 against 96.4 %; talk R@5 89.8 / 89.4).
WORDS_TIER = "none"
# A keyword of six letters or more that no entry holds is looked for one edit away
# (memory/search/terms.py typo_term): a second scan, only for such queries.
TYPOS = True


@dataclass
class HistoryHit:
    """One whole HISTORY.md entry; ``spans`` are (start, end) offsets of the matches in ``text``.

    ``why`` says what made it match, in order: ("word", "hiking"), ("form", "hiked"),
    ("part", "postgres"), ("phrase", …), ("pattern", …), ("date", "last week"). A hit of the
    consolidated transcripts (``conversation``) is one message, as the person said it.
    """

    timestamp: str
    text: str
    score: float
    spans: list[tuple[int, int]] = field(default_factory=list)
    why: list[tuple[str, str]] = field(default_factory=list)
    conversation: bool = False  # one of the person's own messages (memory/search/transcripts.py)


@dataclass
class SearchResult:
    """A page of hits, best first; ``total`` counts every matching entry."""

    hits: list[HistoryHit]
    total: int


# --- scanning ---------------------------------------------------------------------------------

# A Row (memory/search/word_scan.py) is one matching entry as kept for ranking: (-length, stamp,
# file
# offset). Shorter entries score higher and ties go to the newest, so the largest ranks first.
_STAMP_OF, _OFFSET = itemgetter(1), itemgetter(2)


class _Tally:
    """What ranking needs: totals, document frequencies, and the few candidates that can win.

    BM25 with a fixed vector of term occurrences only falls as an entry grows (or, with b = 0,
    does not depend on its length), so per vector the ``keep`` shortest then newest (or newest)
    entries hold every possible winner; the rest are counted and dropped, which keeps memory
    small however many entries match. The date flag, when the query names dates, is the
    vector's last element.
    """

    def __init__(self, n_terms: int, keep: int) -> None:
        self.n_terms = n_terms
        self.keep = keep
        self.best = None if BM25_B > 0 else itemgetter(1, 2)  # the order rows win in
        self.total = 0  # matching entries
        self.df = [0] * n_terms  # matching entries per term
        self.groups: dict[tuple[float, ...], list[Row]] = {}  # occurrences per term -> rows
        self.n_entries = 0
        self.n_bytes = 0

    def add_region(self, found: list[TermHits]) -> None:
        """Record one region's matches (an entry never spans two regions).

        A weight of 0 is an entry another keyword of the same scan holds: not a match here.
        """
        for t, (_, tfs) in enumerate(found):
            self.df[t] += len(tfs) - tfs.count(0.0)
        if self.n_terms == 1:  # grouped by weight in C, without a loop over the rows
            rows, tfs = found[0]
            self.total += len(tfs) - tfs.count(0.0)
            weights = set(tfs)
            for tf in weights - {0.0}:
                self._keep(
                    (tf,), rows if len(weights) == 1 else compress(rows, map(tf.__eq__, tfs))
                )
            return
        shared = found[0][0]
        if all(rows is shared for rows, _ in found):  # one bulk scan's: the vectors are ready
            self.total += self._group(shared, zip(*(tfs for _, tfs in found), strict=True))
            return
        # Else each entry's vector of occurrences, matched up by offset column by column in C.
        by_offset: dict[int, Row] = {}
        held = []
        for rows, tfs in found:
            if 0.0 in tfs:
                rows, tfs = list(compress(rows, tfs)), list(compress(tfs, tfs))
            held.append((rows, tfs))
            by_offset.update(zip(map(_OFFSET, rows), rows, strict=True))
        offsets = list(by_offset)
        columns = []
        for rows, tfs in held:
            tf_at = dict(zip(map(_OFFSET, rows), tfs, strict=True))
            columns.append(list(map(tf_at.get, offsets, repeat(0.0))))
        self.total += self._group(list(by_offset.values()), zip(*columns, strict=True))

    def _group(self, rows: list[Row], keys: Iterable[tuple[float, ...]]) -> int:
        """Add each row to the group of its vector; returns how many hold any keyword."""
        grouped: dict[tuple[float, ...], list[Row]] = {}
        for key, row in zip(keys, rows, strict=True):
            group = grouped.get(key)
            if group is None:
                grouped[key] = [row]
            else:
                group.append(row)
        none = grouped.pop((0.0,) * self.n_terms, [])  # from a scan with other keywords
        for key, members in grouped.items():
            self._keep(key, members)
        return len(rows) - len(none)

    def _keep(self, key: tuple[float, ...], members: Iterable[Row]) -> None:
        """Add rows of one vector (copied: the input may be remembered), keeping the best."""
        kept = self.groups.get(key)
        if kept is None:
            kept = self.groups[key] = []
        kept.extend(members)
        if len(kept) > self.keep:  # a sort in C: rows come nearly in order, so it is cheap
            kept.sort(key=self.best, reverse=True)
            del kept[self.keep :]


def _scan_fast(buf: bytes, end: int, eof: bool, term: Term, base: int) -> TermHits | None:
    """Entries of ``buf[:end]`` holding an ASCII keyword: a few C calls per matching entry.

    The hot loop, kept flat on purpose. It takes every ``\\n\\n[`` as an entry edge and checks
    afterwards, in bulk and in C, that each edge it used starts a timestamp; None means one did
    not (the caller then rescans the region with the careful loop). ``buf[end - 2:end]`` is the
    blank line before the next region's first entry unless ``eof``. A word keyword weighs each
    word found at its root (memory/search/stems.py); a phrase counts its occurrences.
    """
    find, rfind, count, startswith = buf.find, buf.rfind, buf.count, buf.startswith
    needle = term.needle
    assert needle is not None
    marker, n, limit = b"\n\n[", len(needle), end + 1  # limit: finds the marker at end - 2
    forms = term.forms
    if forms is not None:
        word, part, exact = forms.word.encode("ascii"), forms.part_weight, forms.exact_weight
        wn, cached, weigh, inside = len(word), forms.weights.get, forms.weigh, WORD_BYTES
    rows: list[Row] = []
    tfs: list[float] = []
    nexts: list[bytes] = []  # the stamp after each entry end used
    add, add_tf, after = rows.append, tfs.append, nexts.append
    hit = find(needle, 0, end)
    while hit >= 0:
        s = rfind(marker, 0, hit + 1) + 2
        if s == 1:  # no marker before: the region's first entry
            s = 0
            if not BYTES_LAYOUT.is_start(buf, 0):
                return None
        e = find(marker, hit, limit)
        if e < 0:
            e = region_end(buf, s, end) if eof else end - 2
        else:
            after(buf[e + 3 : e + 20])
        if forms is None:
            tf: float = count(needle, s, e) or 1
            hit = find(needle, e + 1, end)
        else:
            tf = 0.0
            while 0 <= hit < e:
                # buf[hit - 1] exists (buf[0] is "["), buf[hit + wn] too (a newline ends the file)
                if (
                    startswith(word, hit)
                    and buf[hit + wn] not in inside
                    and buf[hit - 1] not in inside
                ):
                    tf += exact  # the word itself, the common case: no token to cut
                elif buf[hit - 1] in inside:  # inside a longer word: grep's match only
                    if startswith(word, hit):
                        tf += part
                else:
                    token = buf[hit : word_end(buf, hit + n)]
                    w = cached(token)
                    tf += weigh(token) if w is None else w
                hit = find(needle, hit + n, end)
        if tf:
            add((s - e, buf[s + 1 : s + 18], base + s))
            add_tf(tf)
    starts = list(map(_STAMP_OF, rows))
    return (rows, tfs) if all_stamps(starts) and all_stamps(nexts) else None


def _scan_careful(
    buf: bytes, end: int, eof: bool, term: Term, base: int, deadline: float | None
) -> TermHits:
    """Every entry of ``buf[:end]`` holding ``term``, with its weighted occurrences.

    For regexes, non-ASCII keywords, dates and regions with a ``\\n\\n[`` that starts no entry:
    every entry edge is checked for a real timestamp as it is found.
    """
    rows: list[Row] = []
    tfs: list[float] = []
    layout = BYTES_LAYOUT
    marker, stamp_at = layout.marker, layout.stamp.match
    find, rfind = buf.find, buf.rfind
    pos = 0
    while pos < end:
        if deadline is not None and time.monotonic() > deadline:
            raise SearchError("The search took too long; try a simpler pattern.")
        hit = term.find(buf, pos, end)
        if hit < 0:
            break
        q = rfind(marker, 0, hit + 1)  # the entry's start: the last real marker before
        while q >= 0 and stamp_at(buf, q + 2) is None:
            q = rfind(marker, 0, q + 2)
        if q >= 0:
            s = q + 2
            stamp = buf[s + 1 : s + 18]
        else:
            s = 0
            stamp = buf[1:18] if stamp_at(buf, 0) else b""
        q = find(marker, hit if hit > s else s + 1, end)  # its end: the next real marker
        while q >= 0 and stamp_at(buf, q + 2) is None:
            q = find(marker, q + 1, end)
        if q < 0:  # the region's last entry ends at the blank line before the next region
            q = region_end(buf, s, end) if eof else end - 2
        e = q
        tf = term.weight_in(buf, s, e)
        if tf:
            rows.append((s - e, stamp, base + s))
            tfs.append(tf)
        pos = e + 1
    return rows, tfs


SCANS = ScanCache()  # per file and keyword, what the last scan found (memory/search/scan_cache.py)


def _cache_key(term: Term) -> Hashable | None:
    """What a keyword's hits depend on (weights too), or None for terms not worth keeping."""
    if term.needle is None or term.alternatives:
        return None
    forms = term.forms
    weights = (forms.word, forms.exact_weight, stems.FORM, forms.part_weight) if forms else None
    return term.kind, term.needle, weights, BM25_B > 0  # without a length norm: no lengths


def _said_key(term: Term, regex: bool) -> Hashable | None:
    if regex:
        return "pattern", term.label
    if term.kind == "word" and term.needle is None:  # a number, a typo, a non-ASCII word
        return "said", term.label, bool(term.alternatives), term.typo, terms.TYPO_WEIGHT
    return None


def _scan_file(path: Path, query: Query, keep: int) -> _Tally:
    """The query's tally: remembered whole, or merged from what SCANS holds, or scanned."""
    version = file_version(path)
    keys = [None if query.regex else _cache_key(t) for t in query.scanned]
    # A regex, a number or a typo means the same on any day (a date term does not: "last
    # week"), so their tallies are remembered by what they say, though their hits are not.
    said = [key or _said_key(t, query.regex) for key, t in zip(keys, query.scanned, strict=True)]
    whole = None if None in said else (tuple(said), keep, CHUNK_BYTES)
    if whole is not None:
        known = SCANS.queries.get(path, version, whole)
        if known is not None:
            return known
    tally = _from_index(path, query, keep)  # memory/search/history_index.py, when it can
    if tally is None:
        tally = _scan_regions(path, query, keep, version, keys)
    if whole is not None and file_version(path) == version:
        SCANS.queries.put(path, version, whole, tally)
    return tally


def _scan_regions(
    path: Path, query: Query, keep: int, version: Version, keys: list[Hashable | None]
) -> _Tally:
    terms = query.scanned
    tally = _Tally(len(terms), keep)
    chunk = CHUNK_BYTES
    regions, known = SCANS.lookup(path, version, chunk, keys)
    if regions is not None and all(hits is not None for hits in known):
        for r, (_, size, entries) in enumerate(regions):  # nothing to read
            tally.n_entries += entries
            tally.n_bytes += size
            tally.add_region([hits[r] for hits in known if hits is not None])
        return tally
    seen_regions: list[Region] = []
    # Hits to remember: only for keywords worth it and not remembered already.
    fresh: list[list[TermHits] | None] = [
        [] if key is not None and hits is None else None
        for key, hits in zip(keys, known, strict=True)
    ]
    deadline = time.monotonic() + REGEX_TIME_BUDGET_S if query.regex else None
    words = [WordScan(t.forms) if t.forms is not None and not query.regex else None for t in terms]
    with open_binary(path) as f:
        for piece in cut_regions(f, chunk):  # memory/search/regions.py: as the index cuts them
            buf, base, cut, eof = piece.buf, piece.base, piece.cut, piece.eof
            del piece
            # + 1: the region's first entry, whose marker (if any) ends the previous region
            region = (base, cut, _estimate_entries(buf, cut) + 1)
            r = len(seen_regions)
            seen_regions.append(region)
            tally.n_entries += region[2]
            tally.n_bytes += cut
            same = regions is not None and r < len(regions) and regions[r] == region
            found: list[TermHits | None] = [
                hits[r] if same and hits is not None else None for hits in known
            ]
            todo = [t for t, got in enumerate(found) if got is None and words[t] is not None]
            bulk = None
            if todo:  # bare ASCII keywords: in bulk, on the word view (memory/search/word_scan.py)
                scans = [w for t in todo if (w := words[t]) is not None]
                view = buf.translate(WORD_VIEW)
                bulk = scan_words(buf, view, cut, eof, scans, base, BM25_B > 0)
                del view
                for t, hits_t in zip(todo, bulk or [], strict=False):
                    found[t] = hits_t
            # Regexes see the text as written (RE2 folds case itself, in UTF-8); the rest the
            # lowered bytes, with a newline after the file's end (the fast loop may look one
            # byte past a word), lowered only when a term needs them.
            seen: bytes | None = None
            for t, got in enumerate(found):
                if got is None:
                    if seen is None:
                        low = b"" if query.regex else buf.lower()
                        seen = buf if query.regex else low + b"\n" if eof else low
                        del low
                    got = found[t] = _scan_term(seen, cut, eof, base, terms[t], deadline)
                kept = fresh[t]
                if kept is not None:
                    kept.append(got)
            tally.add_region([got for got in found if got is not None])
            del seen, found, buf
    if file_version(path) == version:  # not changed while it was read
        for key, hits in zip(keys, fresh, strict=True):
            if key is None or hits is None:
                continue
            rows = sum(len(tfs) - tfs.count(0.0) for _, tfs in hits)
            if rows <= SCANS.max_rows:  # each keyword keeps its own entries only: bounded
                SCANS.store(path, version, chunk, seen_regions, key, list(map(_own, hits)), rows)
    return tally


def _from_index(path: Path, query: Query, keep: int) -> _Tally | None:
    """The query's tally from the index beside the file, the same as a scan's; None when there
    is no current index or a term it cannot answer (then the file is scanned)."""
    if query.regex:
        return None
    index = history_index.lookup(path, CHUNK_BYTES)
    if index is None:
        return None
    with open_binary(path) as f:

        def read(start: int, length: int) -> bytes:
            return _read_entry(f, start, length)

        found = []
        try:
            for term in query.scanned:
                hits = history_index.hits(index, term, read)
                if hits is None:
                    return None
                found.append(hits)
        except (IndexError, ValueError):  # a damaged index: never needed, so dropped
            log.warning("search index of %s is damaged; dropped, the file is scanned", path)
            history_index.drop(path)
            return None
        size = os.fstat(f.fileno()).st_size
        if size != index.live_size:  # appended meanwhile: the scan sees it all
            return None
        n_entries, _ = walk(f, index.cursor, CHUNK_BYTES)
    tally = _Tally(len(found), keep)
    tally.n_entries, tally.n_bytes = n_entries, size
    tally.df = [sum(map(len, cells.values())) for cells in found]
    _, _, count = history_index.numbering(index)
    radices = [len(cells) + 1 for cells in found]  # per term: absent, or one of its weights
    if math.prod(radices) > 256:
        return None  # too many vectors for one byte each: the scan groups them
    # Each entry's vector of occurrences as one byte: per term the number of its weight (0:
    # absent) set in a byte per entry, the terms combined in mixed radix by adding the byte
    # strings as integers (no byte carries over: every sum stays below 256). All in C.
    combined, scale = 0, 1
    for cells, radix in zip(found, radices, strict=True):
        codes = bytearray(count)
        for code, members in enumerate(cells.values(), 1):
            deque(map(codes.__setitem__, members, repeat(code)), 0)
        combined += int.from_bytes(codes, "little") * scale
        scale *= radix
    vectors = combined.to_bytes(count, "little")
    del combined
    tally.total = count - vectors.count(0)
    newest_last = BM25_B == 0 and history_index.monotone(index)
    weights = [[0.0, *cells] for cells in found]
    for code in range(1, scale):
        mark = bytes([code])
        n = vectors.count(mark)
        if not n:
            continue
        key, rest = [], code
        for radix, column in zip(radices, weights, strict=True):
            rest, digit = divmod(rest, radix)
            key.append(column[digit])
        # The rows ranking can still pick of this vector (as _Tally._keep keeps them).
        numbers: list[int] = []
        if newest_last:  # the newest are the last: read from the end
            at = count
            while len(numbers) < min(n, keep):
                at = vectors.rfind(mark, 0, at)
                numbers.append(at)
        else:
            at = vectors.find(mark)
            while at >= 0:
                numbers.append(at)
                at = vectors.find(mark, at + 1)
        rows: list[Row] = [
            (-length if BM25_B > 0 else 0, stamp, offset)
            for length, stamp, offset in history_index.rows_of(index, numbers)
        ]
        if not newest_last:
            rows = heapq.nlargest(keep, rows, key=tally.best)
        tally.groups[tuple(key)] = rows
    return tally


def _own(hits: TermHits) -> TermHits:
    """A keyword's hits without the entries only other keywords of its scan hold."""
    rows, tfs = hits
    return (list(compress(rows, tfs)), list(compress(tfs, tfs))) if 0.0 in tfs else hits


def _scan_term(
    buf: bytes, cut: int, eof: bool, base: int, term: Term, deadline: float | None
) -> TermHits:
    """One term in one region: the fast loop when it can, else the careful one."""
    if term.alternatives:  # a date or a number: entries holding any of its texts, each once
        union: dict[int, Row] = {}
        for alt in term.alternatives:
            fast = _scan_fast(buf, cut, eof, alt, base) if alt.needle is not None else None
            if fast is None:
                rows, _ = _scan_careful(buf, cut, eof, alt, base, deadline)
            else:  # a number's digits: the fast loop, then what only an entry's stamp held out
                weigh = alt.weight_in
                rows = [r for r in fast[0] if weigh(buf, r[2] - base, r[2] - base - r[0])]
            union.update(zip(map(_OFFSET, rows), rows, strict=True))
        return list(union.values()), [1.0] * len(union)
    if term.needle is not None:
        found = _scan_fast(buf, cut, eof, term, base)
        if found is not None:
            return found
    return _scan_careful(buf, cut, eof, term, base, deadline)


# --- ranking ----------------------------------------------------------------------------------


Ranked = tuple[bool, int, float, Any, int, int]  # (dated, tier, score, stamp, offset, length)


def _idf(tally: _Tally) -> list[float]:
    n = max(tally.n_entries, tally.total, 1)
    return [math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for d in tally.df]


def _rank(tally: _Tally, want: int, n_words: int) -> list[Ranked]:
    """Top ``want`` entries as (dated, tier, score, stamp, offset, length).

    Order: the named dates first (when the query has them), then (if ``WORDS_TIER`` says so)
    the number of keywords held, then BM25, then the newest. The first ``n_words`` terms are
    keywords; a last one is the date.
    """
    n = max(tally.n_entries, tally.total, 1)
    avg_len = max(tally.n_bytes / n, 1.0)
    idf = _idf(tally)
    k1, b = BM25_K1, BM25_B
    base_norm, len_norm = k1 * (1.0 - b), k1 * b / avg_len
    keys = []
    for tfs, rows in tally.groups.items():
        words = tfs[:n_words]
        dated = len(tfs) > n_words and tfs[n_words] > 0
        held = sum(1 for tf in words if tf)
        tier = held if WORDS_TIER == "count" else held == n_words if WORDS_TIER == "all" else 0
        weights = [(idf[t] * tf * (k1 + 1.0), tf) for t, tf in enumerate(words) if tf]
        for neg_len, stamp, offset in rows:
            norm = base_norm - len_norm * neg_len
            score = sum(w / (tf + norm) for w, tf in weights)
            keys.append((dated, tier, score, stamp, offset, -neg_len))
    return heapq.nlargest(want, keys)


def _marks(text: str, query: Query) -> tuple[list[tuple[int, int]], list[tuple[str, str]]]:
    """Merged, sorted (start, end) offsets of every match in ``text``, and why it matched."""
    raw: list[tuple[int, int]] = []
    why: dict[tuple[str, str], None] = {}
    for term in query.words:
        for s, e, kind in term.spans(text):
            raw.append((s, e))
            shown = term.label if kind in ("phrase", "pattern", "part") else text[s:e].lower()
            why[(kind, shown)] = None
    for span in query.dates:
        for s, e in _date_spans(text, span):
            raw.append((s, e))
        if _dated(text, span):
            why[("date", span.label)] = None
    raw.sort()
    merged: list[tuple[int, int]] = []
    for s, e in raw:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged, list(why)


def _date_spans(text: str, span: DateSpan) -> list[tuple[int, int]]:
    """Where the entry's text (past its stamp) names a day of ``span``, in characters."""
    low = text.lower().encode("utf-8", "surrogatepass")
    out = []
    for needle in span.needles:
        raw = needle.text.encode("ascii")
        at = low.find(raw, 18)
        while at >= 0:
            found = needle.span_at(low, at)
            if found:
                s, e = found
                chars = len(low[:s].decode("utf-8", "ignore"))
                out.append((chars, chars + len(low[s:e].decode("utf-8", "ignore"))))
            at = low.find(raw, at + 1)
    return out


def _dated(text: str, span: DateSpan) -> bool:
    return span.holds(text[1:11]) or bool(_date_spans(text, span))


def _read_entry(f: BinaryIO, start: int, length: int, first: int = SAMPLE_BYTES) -> bytes:
    """The entry at ``start``: ``length`` bytes, or up to the next entry when unknown (0)."""
    f.seek(start)
    if length:
        return f.read(length)
    layout = BYTES_LAYOUT
    data, pos = b"", 1  # pos: where the next entry's marker may start
    while True:
        block = f.read(max(first, len(data)))  # doubling: a long entry reads in few steps
        data += block
        last = len(data) if not block else len(data) - 20  # a marker and its stamp, whole
        q = data.find(layout.marker, pos, last + 3)
        while q >= 0 and not layout.is_start(data, q + 2):
            q = data.find(layout.marker, q + 1, last + 3)
        if q >= 0:
            return data[:q]
        if not block:
            return data
        pos = max(pos, last + 1)


def prepare(path: Path) -> None:
    """Have the index of a big HISTORY.md ready before its first search: a missing or stale one
    starts building in the background (nothing for a small file). Blocking (a few reads): call it
    off the loop. Without it, the first search of a history the bot has not indexed yet scans
    the whole file (several times `grep`'s time on 100 MB) and only then starts the build."""
    try:
        history_index.lookup(path, CHUNK_BYTES)
    except (OSError, ValueError, IndexError) as exc:  # never needed: the search scans
        log.warning("search index of %s not prepared: %s", path, exc)


def search_history(
    path: Path,
    query: str,
    *,
    limit: int = 5,
    offset: int = 0,
    regex: bool = False,
    now: datetime | None = None,
    meaning: Meaning | None = None,
) -> SearchResult:
    """Search HISTORY.md: whole entries, most relevant first, paged by limit and offset.

    ``now`` (UTC) anchors relative dates in the query ("last week"); ``total`` counts every
    entry matching a searched keyword or a named date. With ``meaning`` (memory/search/
    meaning.py), bare keywords and questions are also ranked by meaning and the two rankings
    fused; a regex, a phrase or a date stays exact, and without vectors or an endpoint the
    keyword ranking is the answer.
    """
    if meaning is not None:
        return _fused(path, query, limit, offset, regex, now, meaning)
    if limit < 1 or offset < 0:
        raise SearchError("limit must be at least 1 and offset at least 0.")
    if not query or not query.strip():
        raise SearchError("Nothing to search for: give one or more keywords.")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"Query too long (at most {MAX_QUERY_CHARS} characters).")
    try:
        parsed = parse_query(query, regex, now or datetime.now(UTC))
    except RegexError as exc:
        raise SearchError(str(exc)) from None
    path = Path(path)
    want = offset + limit
    pool = want if parsed.regex else max(want, rerank.POOL)
    try:
        tally = _scan_file(path, parsed, pool)
        absent = [
            i
            for i, t in enumerate(parsed.words)
            if TYPOS and not parsed.regex and tally.df[i] == 0 and typo_eligible(t)
        ]
        if absent:  # found nowhere: a slip of the keyboard? The others come from SCANS.
            words = [typo_term(t.label) if i in absent else t for i, t in enumerate(parsed.words)]
            parsed = Query(words, parsed.dates, parsed.date_term, False)
            tally = _scan_file(path, parsed, pool)
    except FileNotFoundError:
        return SearchResult([], 0)
    top = _rank(tally, pool, len(parsed.words))
    if not top:
        return SearchResult([], tally.total)
    cands = []
    with open_binary(path) as f:
        for dated, tier, score, stamp, start, length in top:
            raw = _read_entry(f, start, length, first=4096)
            text = raw.decode("utf-8", "replace").rstrip()
            # a keyword inside a longer word ("go" in "gone") is no word of the text: not near
            per_term = [[(s, e) for s, e, k in t.spans(text) if k != "part"] for t in parsed.words]
            sentences = rerank.sentence_of(text, per_term)
            cands.append(rerank.Candidate(dated, tier, score, stamp, start, text, sentences))
    ordered = cands if parsed.regex else rerank.order(cands, _idf(tally))
    hits: list[HistoryHit] = []
    for c in ordered[offset:want]:
        spans, why = _marks(c.text, parsed)
        hits.append(HistoryHit(c.stamp[:16].decode("ascii"), c.text, c.score, spans, why))
    return SearchResult(hits, tally.total)


def _fused(
    path: Path,
    query: str,
    limit: int,
    offset: int,
    regex: bool,
    now: datetime | None,
    meaning: Meaning,
) -> SearchResult:
    """The keyword ranking and the meaning ranking fused by reciprocal rank (a page of it)."""
    want = offset + limit
    keyword = search_history(path, query, limit=max(want, DEPTH), regex=regex, now=now)
    parsed = parse_query(query, regex, now or datetime.now(UTC))  # it parsed above
    exact = parsed.regex or parsed.dates or any(t.kind != "word" for t in parsed.words)
    near = None if exact else meaning.rank(Path(path), query, max(want, DEPTH))
    if not near:
        return SearchResult(keyword.hits[offset:want], keyword.total)
    hits = {hit.text: hit for hit in keyword.hits}
    found: list[str] = []
    for start, length, sha in near:
        text = read_entry(Path(path), start, length, sha)
        if text is None:
            continue  # HISTORY.md rewritten since: its vectors are being brought up to date
        found.append(text)
        if text not in hits:
            stamp = text[1:17] if text.startswith("[") else ""
            hits[text] = HistoryHit(stamp, text, 0.0, [], [("meaning", "")])
    order = fuse([hit.text for hit in keyword.hits], found)
    extra = sum(1 for text in found if text not in {hit.text for hit in keyword.hits})
    return SearchResult([hits[text] for text in order[offset:want]], keyword.total + extra)
