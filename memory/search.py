"""Ranked search over HISTORY.md (/recall and the agent's search tool), streamed in chunks.

An entry begins at a ``[YYYY-MM-DD HH:MM]`` line that starts the file or follows a blank line; a
``[RAW]`` archive holds many timestamped lines separated by single newlines, so it stays one entry.

Keywords match case-insensitively as substrings (as ``grep -i`` would), but an entry need not hold
every word: entries are ranked BM25-style (rare words weigh more), an entry holding every word comes
before one holding some, and ties go to the newest. ``"quoted phrases"`` match exactly. Filler
words of a natural question ("what did Dr. Lindqvist say about my migraines") are not searched:
stopwords (``STOPWORDS``: "what", "did", "my", titles like "Dr") and one-letter words are dropped
when the query holds any other keyword, because as substrings they match nearly every entry and
say nothing about which one is meant; a query made only of them is searched as typed, and quoted
phrases are always kept. With ``regex=True`` the query is one case-insensitive regular expression
(``^``/``$`` match at lines), taken as is.

Speed: keyword search works on bytes. Each chunk is lowered once in C and searched with
``bytes.find``; only matching entries cost Python work (a few C calls each, their timestamps
checked in bulk), and per pattern of term counts only the few entries that can still reach the
requested page are kept, so memory stays small however many entries match.
"""

from __future__ import annotations

import heapq
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

from memory.safefs import open_binary
from memory.store import ENTRY_STAMP

try:  # private, but the only way to inspect a pattern before running it; the check is best effort
    from re import _constants as _sre_c
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - other Python versions
    _sre_c = _sre_parse = None  # type: ignore[assignment]

__all__ = ["HistoryHit", "SearchError", "SearchResult", "search_history"]

CHUNK_BYTES = 1024 * 1024  # fits in cache: lower() and find() then run several times faster
SAMPLE_BYTES = 128 * 1024  # per chunk, to estimate the number of entries
MAX_TERMS = 32
MAX_QUERY_CHARS = 1000
MAX_REGEX_CHARS = 500
REGEX_TIME_BUDGET_S = 30.0
BM25_K1 = 1.2
BM25_B = 0.75
# Sentence punctuation a user or a model glues to a keyword ("python?"); stripped from word edges.
_EDGE_PUNCT = "?!,.;:()[]{}<>'\"`"
# Words of a natural question that name nothing: as substrings they match almost every entry
# ("my" in "mysql", "did" in "didn't"), which costs time and ranks nothing. Bare words only.
_STOPWORD_TEXT = """
    a about above after again all also am an and any are as at be been before being below between
    both but by can can't could couldn't did didn't do does doesn't doing don't down during each
    ever few for from further had hadn't has hasn't have haven't having he he's her here here's
    hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
    itself just let's me more most much my myself no nor not of off on once only or other our ours
    ourselves out over own same she she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they're this those through to too under
    until up very was wasn't we we're we've were weren't what what's when when's where where's which
    while who who's whom why why's will with won't would wouldn't you you'd you'll you're you've
    your yours yourself yourselves
    dr mr mrs ms
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


class SearchError(ValueError):
    """A query that cannot be run (empty, bad or risky regex); the message is for the user."""


@dataclass
class HistoryHit:
    """One whole HISTORY.md entry; ``spans`` are (start, end) offsets of the matches in ``text``."""

    timestamp: str
    text: str
    score: float
    spans: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class SearchResult:
    """A page of hits, best first; ``total`` counts every matching entry."""

    hits: list[HistoryHit]
    total: int


# --- entry boundaries (the same rules on bytes and on str) -------------------------------------


@dataclass(frozen=True)
class _Layout:
    """Markers of entry starts for one buffer type (bytes for keywords, str for regexes)."""

    marker: Any  # b"\n\n[" / "\n\n["
    stamp: re.Pattern[Any]

    def is_start(self, buf: Any, pos: int) -> bool:
        return self.stamp.match(buf, pos) is not None

    def start_of(self, buf: Any, pos: int) -> int:
        """Start of the entry holding ``pos`` (0 when it is the buffer's first entry)."""
        end = pos + 1
        while True:
            q = buf.rfind(self.marker, 0, end)
            if q < 0:
                return 0
            if self.is_start(buf, q + 2):
                return q + 2
            end = q + 2

    def end_of(self, buf: Any, pos: int, limit: int) -> int:
        """End (exclusive, before the blank line) of the entry holding ``pos``."""
        while True:
            q = buf.find(self.marker, pos, limit)
            if q < 0:
                return limit
            if self.is_start(buf, q + 2):
                return q
            pos = q + 1

    def last_start(self, buf: Any) -> int:
        """Start of the last entry in ``buf``, or 0 when no entry starts after position 0."""
        return self.start_of(buf, len(buf) - 1) if buf else 0


_BYTES = _Layout(b"\n\n[", re.compile(ENTRY_STAMP.encode("ascii")))
_TEXT = _Layout("\n\n[", re.compile(ENTRY_STAMP))


# --- terms --------------------------------------------------------------------------------------


@dataclass
class _Term:
    """One thing to look for: how to find it in a scanned buffer, and how to mark it in a hit."""

    label: str
    needle: bytes | None  # plain lowered ASCII: searched with bytes.find, the fast path
    find: Callable[[Any, int, int], int]  # (buf, start, end) -> position or -1
    count: Callable[[Any, int, int], int]  # (buf, start, end) -> occurrences
    marker: re.Pattern[str]  # finds the matches in a decoded entry, for spans


def _char_variants(ch: str) -> list[str]:
    """Every spelling of ``ch`` under case mapping (ü/Ü, ß/ss/ẞ, σ/ς/Σ), longest first."""
    out = {ch, ch.lower(), ch.upper(), ch.casefold(), ch.title()}
    for v in list(out):
        out |= {v.lower(), v.upper(), v.casefold()}
    return sorted(out, key=lambda v: (-len(v), v))


def _keyword_term(word: str) -> _Term:
    """A case-insensitive literal; ASCII uses bytes.find on the lowered chunk, else a byte regex."""
    pieces_b: list[bytes] = []
    pieces_s: list[str] = []
    for ch in word:
        if ch.isascii():
            pieces_b.append(re.escape(ch.lower().encode("ascii")))
            pieces_s.append(re.escape(ch))
            continue
        variants = _char_variants(ch)
        enc = sorted(
            {v.encode("utf-8", "surrogatepass").lower() for v in variants},
            key=lambda b: (-len(b), b),
        )
        pieces_b.append(b"(?:" + b"|".join(re.escape(b) for b in enc) + b")")
        pieces_s.append("(?:" + "|".join(re.escape(v) for v in variants) + ")")
    marker = re.compile("".join(pieces_s), re.IGNORECASE)
    if word.isascii():
        needle = word.lower().encode("ascii")
        return _Term(
            word,
            needle,
            lambda buf, s, e: buf.find(needle, s, e),
            lambda buf, s, e: buf.count(needle, s, e),
            marker,
        )
    pattern = re.compile(b"".join(pieces_b))
    return _Term(word, None, _regex_find(pattern), _regex_count(pattern), marker)


def _regex_find(pattern: re.Pattern[Any]) -> Callable[[Any, int, int], int]:
    def find(buf: Any, s: int, e: int) -> int:
        m = pattern.search(buf, s, e)
        return m.start() if m else -1

    return find


def _regex_count(pattern: re.Pattern[Any]) -> Callable[[Any, int, int], int]:
    def count(buf: Any, s: int, e: int) -> int:
        return sum(1 for _ in pattern.finditer(buf, s, e))

    return count


def _parse_keywords(query: str) -> list[tuple[str, bool]]:
    """(keyword, quoted) for each quoted phrase and bare word, case-insensitively de-duplicated."""
    words: list[tuple[str, bool]] = []
    for i, part in enumerate(query.split('"')):
        if i % 2:  # inside quotes: one exact phrase (an unclosed quote runs to the end)
            if part.strip():
                words.append((part.strip(), True))
            continue
        for raw in part.split():
            word = raw.strip(_EDGE_PUNCT) or raw
            words.append((word, False))
    seen: set[str] = set()
    unique = []
    for word, quoted in words:
        key = word.casefold()
        if key not in seen:
            seen.add(key)
            unique.append((word, quoted))
    return unique


def _is_filler(word: str) -> bool:
    """A bare word that says nothing about which entry is meant ("what", "did", "my", "I")."""
    return len(word) == 1 or word.casefold().replace("\u2019", "'") in STOPWORDS


def _keyword_terms(query: str) -> list[_Term]:
    """The query's keywords; filler words only count when the query holds nothing else."""
    words = _parse_keywords(query)
    if not words:
        raise SearchError("Nothing to search for: give one or more keywords.")
    kept = [w for w, quoted in words if quoted or not _is_filler(w)]
    if not kept:
        kept = [w for w, _ in words]
    if len(kept) > MAX_TERMS:
        raise SearchError(f"Too many keywords ({len(kept)}); use at most {MAX_TERMS}.")
    return [_keyword_term(w) for w in kept]


# --- regular expressions --------------------------------------------------------------------


def _regex_term(query: str) -> _Term:
    if len(query) > MAX_REGEX_CHARS:
        raise SearchError(f"Regular expression too long (at most {MAX_REGEX_CHARS} characters).")
    flags = re.IGNORECASE | re.MULTILINE
    try:
        with warnings.catch_warnings():  # "possible set union" and the like: not the user's concern
            warnings.simplefilter("ignore")
            pattern = re.compile(query, flags)
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise SearchError(f"Invalid regular expression: {exc}") from None
    if pattern.search("") is not None:
        raise SearchError(
            "That regular expression matches empty text, so it would match every entry."
        )
    _check_regex_risk(query, flags)
    return _Term(query, None, _regex_find(pattern), _regex_count(pattern), pattern)


def _check_regex_risk(query: str, flags: int) -> None:
    """Refuse the classic catastrophic-backtracking shapes: ``(a+)+``, ``(a?){30}``, ``(a|aa)*``."""
    if _sre_parse is None:  # pragma: no cover
        return
    try:
        tree = _sre_parse.parse(query, flags)
    except Exception:  # compiled fine above; a parser quirk must not block the search
        return
    reason = _risky(tree, inside_repeat=False)
    if reason:
        raise SearchError(f"That regular expression could take too long to run ({reason}).")


def _items(tree: Any) -> list[tuple[Any, Any]]:
    return list(tree) if tree is not None else []


def _risky(tree: Any, inside_repeat: bool) -> str | None:
    c = _sre_c
    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT))
    for op, av in _items(tree):
        if op in repeats:
            low, high, body = av
            if inside_repeat and high != low:
                return "a repeated group holds another repeat"
            reason = _risky(body, inside_repeat or high > 1)
            if reason:
                return reason
        elif op is c.BRANCH:
            if inside_repeat and not _unambiguous_literals(av[1]):
                return "a repeated group holds overlapping alternatives"
            for branch in av[1]:
                reason = _risky(branch, inside_repeat)
                if reason:
                    return reason
        elif op is c.SUBPATTERN:
            reason = _risky(av[3], inside_repeat)
            if reason:
                return reason
        elif op in (c.ASSERT, c.ASSERT_NOT):
            reason = _risky(av[1], inside_repeat)
            if reason:
                return reason
        elif op is getattr(c, "ATOMIC_GROUP", None):
            reason = _risky(av, inside_repeat)
            if reason:
                return reason
        elif op is c.GROUPREF_EXISTS:
            for sub in av[1:]:
                reason = _risky(sub, inside_repeat)
                if reason:
                    return reason
    return None


def _unambiguous_literals(branches: list[Any]) -> bool:
    """True when every alternative is plain text and none is a prefix of another (foo|bar)."""
    texts = []
    for branch in branches:
        chars = []
        for op, av in _items(branch):
            if op is not _sre_c.LITERAL:
                return False
            chars.append(chr(av).casefold())
        texts.append("".join(chars))
    for i, a in enumerate(texts):
        for j, b in enumerate(texts):
            if i != j and b.startswith(a):
                return False
    return True


# --- scanning ---------------------------------------------------------------------------------

# One matching entry as kept for ranking: (-length, stamp, file offset). Shorter entries score
# higher and ties go to the newest, so the largest of these tuples ranks first.
_Row = tuple[int, Any, int]
# One term's matches in a region: entries holding it once, and (row, occurrences) for the others.
_TermHits = tuple[list[_Row], list[tuple[_Row, int]]]

# A stamp without its opening "[" with every digit made "0": _all_stamps checks many at once.
_STAMP_SHAPE = b"0000-00-00 00:00]"
_DIGITS_TO_0 = bytes.maketrans(b"0123456789", b"0" * 10)


class _Tally:
    """What ranking needs: totals, document frequencies, and the few candidates that can win.

    BM25 with a fixed vector of term occurrences only falls as an entry grows, so per vector the
    ``keep`` shortest (then newest) entries hold every possible winner; the rest are counted and
    dropped, which keeps memory small however many entries match.
    """

    def __init__(self, n_terms: int, keep: int) -> None:
        self.n_terms = n_terms
        self.keep = keep
        self.total = 0  # matching entries
        self.df = [0] * n_terms  # matching entries per term
        self.groups: dict[tuple[int, ...], list[_Row]] = {}  # occurrences per term -> candidates
        self.n_entries = 0
        self.n_bytes = 0

    def add_region(self, found: list[_TermHits]) -> None:
        """Record one region's matches (an entry never spans two regions)."""
        for t, (ones, more) in enumerate(found):
            self.df[t] += len(ones) + len(more)
        if self.n_terms == 1:
            ones, more = found[0]
            self.total += len(ones) + len(more)
            self._add((1,), ones)
            by_tf: dict[tuple[int, ...], list[_Row]] = {}
            for row, tf in more:
                by_tf.setdefault((tf,), []).append(row)
            for key, rows in by_tf.items():
                self._add(key, rows)
            return
        merged: dict[int, list[Any]] = {}  # offset -> [-length, stamp, tf per term]
        zeros = [0] * self.n_terms
        for t, (ones, more) in enumerate(found):
            for row, tf in [(row, 1) for row in ones] + more:
                entry = merged.get(row[2])
                if entry is None:
                    entry = merged[row[2]] = [row[0], row[1], *zeros]
                entry[2 + t] = tf
        self.total += len(merged)
        grouped: dict[tuple[int, ...], list[_Row]] = {}
        for offset, (neg_len, stamp, *tfs) in merged.items():
            grouped.setdefault(tuple(tfs), []).append((neg_len, stamp, offset))
        for key, rows in grouped.items():
            self._add(key, rows)

    def _add(self, key: tuple[int, ...], rows: list[_Row]) -> None:
        if not rows:
            return
        kept = self.groups.setdefault(key, [])
        kept.extend(rows)
        if len(kept) > self.keep:
            self.groups[key] = heapq.nlargest(self.keep, kept)


def _region_end(buf: Any, s: int, end: int) -> int:
    """End of the file's last entry: before the trailing blank line(s)."""
    e = end
    while e > s + 1 and buf[e - 1 : e].isspace():
        e -= 1
    return e


def _scan_fast(buf: bytes, end: int, eof: bool, needle: bytes, base: int) -> _TermHits | None:
    """Entries of ``buf[:end]`` holding ``needle``: one ``bytes.find`` per matching entry.

    The hot loop for ASCII keywords, kept flat on purpose. It takes every ``\\n\\n[`` as an entry
    edge and checks afterwards, in bulk and in C, that each edge it used starts a timestamp;
    None means one did not (the caller then rescans the region with the careful loop).
    ``buf[end - 2:end]`` is the blank line before the next region's first entry unless ``eof``.
    """
    find, rfind, count = buf.find, buf.rfind, buf.count
    marker, n, limit = b"\n\n[", len(needle), end + 1  # limit: finds the marker at end - 2
    ones: list[_Row] = []
    more: list[tuple[_Row, int]] = []
    nexts: list[bytes] = []  # the stamp after each entry end used
    one, other, after = ones.append, more.append, nexts.append
    hit = find(needle, 0, end)
    while hit >= 0:
        s = rfind(marker, 0, hit + 1) + 2
        if s == 1:  # no marker before: the region's first entry
            s = 0
            if not _BYTES.is_start(buf, 0):
                return None
        e = find(marker, hit, limit)
        if e < 0:
            e = _region_end(buf, s, end) if eof else end - 2
        else:
            after(buf[e + 3 : e + 20])
        nxt = find(needle, hit + n, end)
        if nxt < 0 or nxt > e:
            one((s - e, buf[s + 1 : s + 18], base + s))
        else:
            other(((s - e, buf[s + 1 : s + 18], base + s), count(needle, s, e) or 1))
            nxt = find(needle, e + 1, end)
        hit = nxt
    starts = [*map(itemgetter(1), ones), *(row[1] for row, _ in more)]
    return (ones, more) if _all_stamps(starts) and _all_stamps(nexts) else None


def _all_stamps(bodies: list[bytes]) -> bool:
    """True when each item is ``YYYY-MM-DD HH:MM]`` (a stamp after its ``[``); one C pass."""
    return b"".join(bodies).translate(_DIGITS_TO_0) == _STAMP_SHAPE * len(bodies)


def _scan_careful(
    buf: Any, end: int, eof: bool, layout: _Layout, term: _Term, deadline: float | None
) -> list[tuple[int, int, Any, int]]:
    """Every (entry start, end, stamp, occurrences) for ``term`` in ``buf[:end]``.

    For regexes, non-ASCII keywords and regions with a ``\\n\\n[`` that starts no entry: every
    entry edge is checked for a real timestamp as it is found.
    """
    out: list[tuple[int, int, Any, int]] = []
    marker, stamp_at = layout.marker, layout.stamp.match
    find, rfind, no_stamp = buf.find, buf.rfind, buf[:0]
    needle, term_find, term_count = term.needle, term.find, term.count
    pos = 0
    while pos < end:
        if deadline is not None and time.monotonic() > deadline:
            raise SearchError("The search took too long; try a simpler pattern.")
        hit = find(needle, pos, end) if needle is not None else term_find(buf, pos, end)
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
            stamp = buf[1:18] if stamp_at(buf, 0) else no_stamp
        q = find(marker, hit if hit > s else s + 1, end)  # its end: the next real marker
        while q >= 0 and stamp_at(buf, q + 2) is None:
            q = find(marker, q + 1, end)
        if q < 0:  # the region's last entry ends at the blank line before the next region
            q = _region_end(buf, s, end) if eof else end - 2
        e = q
        tf = buf.count(needle, s, e) if needle is not None else term_count(buf, s, e)
        out.append((s, e, stamp, tf or 1))
        pos = e + 1
    return out


def _as_hits(rows: list[tuple[int, int, Any, int]], base: int) -> _TermHits:
    ones = [(s - e, stamp, base + s) for s, e, stamp, tf in rows if tf == 1]
    more = [((s - e, stamp, base + s), tf) for s, e, stamp, tf in rows if tf != 1]
    return ones, more


def _byte_offsets(text: str, chars: list[int]) -> dict[int, int]:
    """Map ascending character offsets in ``text`` to UTF-8 byte offsets, in one pass."""
    out: dict[int, int] = {}
    prev_c = prev_b = 0
    for c in sorted(set(chars)):
        prev_b += len(text[prev_c:c].encode("utf-8", "surrogateescape"))
        prev_c = c
        out[c] = prev_b
    return out


def _estimate_entries(buf: bytes, cut: int) -> int:
    """Entries in ``buf[:cut]``, counted on a sample: only BM25's idf and mean length use it."""
    if cut <= 2 * SAMPLE_BYTES:
        return buf.count(b"\n\n[", 0, cut)
    return round(buf.count(b"\n\n[", 0, SAMPLE_BYTES) * cut / SAMPLE_BYTES)


def _scan_file(path: Path, terms: list[_Term], regex: bool, keep: int) -> _Tally:
    tally = _Tally(len(terms), keep)
    deadline = time.monotonic() + REGEX_TIME_BUDGET_S if regex else None
    with open_binary(path) as f:
        carry = b""
        base = 0  # file offset of carry[0]
        want = CHUNK_BYTES
        while True:
            data = f.read(want)
            eof = not data
            buf = carry + data if carry else data
            del carry, data
            if not buf:
                break
            if eof:
                cut = len(buf)
            else:
                cut = _BYTES.last_start(buf)
                if cut == 0:  # one entry larger than the chunk: read on
                    carry, want = buf, want * 2
                    continue
            # + 1: the region's first entry, whose marker (if any) ends the previous region
            tally.n_entries += _estimate_entries(buf, cut) + 1
            tally.n_bytes += cut
            if regex:
                tally.add_region(_scan_text_region(buf, cut, eof, base, terms, deadline))
            else:
                low = buf.lower()  # the tail past ``cut`` is lowered again next time; cheap
                tally.add_region([_scan_bytes(low, cut, eof, base, term) for term in terms])
                del low
            carry, base, want = buf[cut:], base + cut, CHUNK_BYTES
            del buf
            if eof:
                break
    return tally


def _scan_bytes(low: bytes, cut: int, eof: bool, base: int, term: _Term) -> _TermHits:
    """One keyword in one lowered region: the fast loop when it can, else the careful one."""
    if term.needle is not None:
        found = _scan_fast(low, cut, eof, term.needle, base)
        if found is not None:
            return found
    return _as_hits(_scan_careful(low, cut, eof, _BYTES, term, None), base)


def _scan_text_region(
    buf: bytes, cut: int, eof: bool, base: int, terms: list[_Term], deadline: float | None
) -> list[_TermHits]:
    """Regex mode: decode whole entries (``.`` is a character), map offsets back to bytes."""
    text = buf[:cut].decode("utf-8", "surrogateescape")
    found = [_scan_careful(text, len(text), eof, _TEXT, term, deadline) for term in terms]
    if len(text) == cut:  # pure ASCII: characters are bytes
        return [_as_hits(rows, base) for rows in found]
    offsets = _byte_offsets(text, [c for rows in found for row in rows for c in row[:2]])
    return [
        _as_hits([(offsets[s], offsets[e], st, tf) for s, e, st, tf in rows], base)
        for rows in found
    ]


# --- ranking ----------------------------------------------------------------------------------


def _rank(tally: _Tally, want: int) -> list[tuple[float, int, int, Any]]:
    """Top ``want`` entries as (score, offset, length, stamp): all terms first, BM25, newest."""
    n = max(tally.n_entries, tally.total, 1)
    avg_len = max(tally.n_bytes / n, 1.0)
    idf = [math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for d in tally.df]
    k1, b = BM25_K1, BM25_B
    base_norm, len_norm = k1 * (1.0 - b), k1 * b / avg_len
    keys = []
    for tfs, rows in tally.groups.items():
        has_all = all(tfs)
        weights = [(idf[t] * tf * (k1 + 1.0), tf) for t, tf in enumerate(tfs) if tf]
        for neg_len, stamp, offset in rows:
            norm = base_norm - len_norm * neg_len
            score = sum(w / (tf + norm) for w, tf in weights)
            keys.append((has_all, score, stamp, offset, -neg_len))
    best = heapq.nlargest(want, keys)
    return [(score, offset, length, stamp) for _, score, stamp, offset, length in best]


def _spans(text: str, terms: list[_Term]) -> list[tuple[int, int]]:
    """Merged, sorted (start, end) offsets of every match in ``text``."""
    raw = sorted(
        (m.start(), m.end())
        for term in terms
        for m in term.marker.finditer(text)
        if m.end() > m.start()
    )
    merged: list[tuple[int, int]] = []
    for s, e in raw:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def search_history(
    path: Path, query: str, *, limit: int = 5, offset: int = 0, regex: bool = False
) -> SearchResult:
    """Search HISTORY.md: whole entries, most relevant first, paged by limit and offset.

    Filler words ("what", "did", "my") are ignored unless the query has nothing else; see the
    module docstring. ``total`` counts every entry matching at least one searched keyword.
    """
    if limit < 1 or offset < 0:
        raise SearchError("limit must be at least 1 and offset at least 0.")
    if not query or not query.strip():
        raise SearchError("Nothing to search for: give one or more keywords.")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"Query too long (at most {MAX_QUERY_CHARS} characters).")
    terms = [_regex_term(query)] if regex else _keyword_terms(query)
    path = Path(path)
    try:
        tally = _scan_file(path, terms, regex, offset + limit)
    except FileNotFoundError:
        return SearchResult([], 0)
    top = _rank(tally, offset + limit)[offset:]
    hits: list[HistoryHit] = []
    if top:
        with open_binary(path) as f:
            for score, start, length, stamp in top:
                f.seek(start)
                text = f.read(length).decode("utf-8", "replace").rstrip()
                when = stamp[:16].decode("ascii") if isinstance(stamp, bytes) else stamp[:16]
                hits.append(HistoryHit(when, text, score, _spans(text, terms)))
    return SearchResult(hits, tally.total)
