"""Ranked search over HISTORY.md, streamed so a huge file never has to fit in memory twice.

An entry begins at a ``[YYYY-MM-DD HH:MM]`` line that starts the file or follows a blank line; a
``[RAW]`` archive holds many timestamped lines separated by single newlines, so it stays one entry.

Keywords match case-insensitively as substrings (as ``grep -i`` would), but an entry need not hold
every word: entries are ranked BM25-style (rare words weigh more), an entry holding every word comes
before one holding some, and ties go to the newest. ``"quoted phrases"`` match exactly. With
``regex=True`` the query is one case-insensitive regular expression (``^``/``$`` match at lines).

Speed: keyword search works on bytes. Each chunk is lowercased once in C and searched with
``bytes.find``; only hit positions are mapped to entry boundaries, so the Python-level work grows
with the number of matching entries, not with the size of the file.
"""

from __future__ import annotations

import heapq
import math
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


_STAMP = r"\[\d{4}-\d\d-\d\d \d\d:\d\d\]"
_BYTES = _Layout(b"\n\n[", re.compile(_STAMP.encode("ascii")))
_TEXT = _Layout("\n\n[", re.compile(_STAMP))


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


def _parse_keywords(query: str) -> list[str]:
    """Quoted phrases and bare words, case-insensitively de-duplicated, in query order."""
    words: list[str] = []
    for i, part in enumerate(query.split('"')):
        if i % 2:  # inside quotes: one exact phrase (an unclosed quote runs to the end)
            if part.strip():
                words.append(part.strip())
            continue
        for raw in part.split():
            word = raw.strip(_EDGE_PUNCT) or raw
            words.append(word)
    seen: set[str] = set()
    unique = []
    for word in words:
        key = word.casefold()
        if key not in seen:
            seen.add(key)
            unique.append(word)
    return unique


def _keyword_terms(query: str) -> list[_Term]:
    words = _parse_keywords(query)
    if not words:
        raise SearchError("Nothing to search for: give one or more keywords.")
    if len(words) > MAX_TERMS:
        raise SearchError(f"Too many keywords ({len(words)}); use at most {MAX_TERMS}.")
    return [_keyword_term(w) for w in words]


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


class _Tally:
    """Per matching entry: byte length, timestamp and occurrences of each term."""

    def __init__(self, n_terms: int) -> None:
        self.n_terms = n_terms
        self.entries: dict[int, list[Any]] = {}  # byte offset -> [length, stamp, tf0, tf1, ...]
        self.n_entries = 0
        self.n_bytes = 0

    def add_rows(self, base: int, rows: list[tuple[int, int, Any, int, int]]) -> None:
        """Record (start, end, stamp, term, occurrences) rows found ``base`` bytes into the file."""
        entries, zeros = self.entries, [0] * self.n_terms
        for s, e, stamp, t, tf in rows:
            row = entries.get(base + s)
            if row is None:
                row = entries[base + s] = [e - s, stamp, *zeros]
            row[2 + t] = tf


def _scan_region(
    buf: Any, end: int, layout: _Layout, terms: list[_Term], deadline: float | None
) -> list[tuple[int, int, Any, int, int]]:
    """Every (entry start, end, stamp, term index, occurrences) for the terms in ``buf[:end]``.

    The hot loop of the search: one C-level find per matching entry and term, then the entry's
    edges around the hit. Kept flat on purpose (no helper calls), as it runs once per hit.
    """
    out: list[tuple[int, int, Any, int, int]] = []
    marker, stamp_at = layout.marker, layout.stamp.match
    find, rfind, no_stamp = buf.find, buf.rfind, buf[:0]
    for t, term in enumerate(terms):
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
                stamp = buf[s + 1 : s + 17]
            else:
                s = 0
                stamp = buf[1:17] if stamp_at(buf, 0) else no_stamp
            q = find(marker, hit if hit > s else s + 1, end)  # its end: the next real marker
            while q >= 0 and stamp_at(buf, q + 2) is None:
                q = find(marker, q + 1, end)
            if q >= 0:
                e = q
            else:  # the region's last entry: drop the blank line so lengths stay comparable
                e = end
                while e > s + 1 and buf[e - 1 : e].isspace():
                    e -= 1
            tf = buf.count(needle, s, e) if needle is not None else term_count(buf, s, e)
            out.append((s, e, stamp, t, tf or 1))
            pos = e + 1
    return out


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


def _scan_file(path: Path, terms: list[_Term], regex: bool) -> _Tally:
    tally = _Tally(len(terms))
    deadline = time.monotonic() + REGEX_TIME_BUDGET_S if regex else None
    with path.open("rb") as f:
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
            tally.n_entries += _estimate_entries(buf, cut) + (1 if base == 0 else 0)
            tally.n_bytes += cut
            if regex:
                _scan_text_region(buf, cut, base, terms, tally, deadline)
            else:
                low = buf.lower()  # the tail past ``cut`` is lowered again next time; cheap
                tally.add_rows(base, _scan_region(low, cut, _BYTES, terms, None))
                del low
            carry, base, want = buf[cut:], base + cut, CHUNK_BYTES
            del buf
            if eof:
                break
    return tally


def _scan_text_region(
    buf: bytes, cut: int, base: int, terms: list[_Term], tally: _Tally, deadline: float | None
) -> None:
    """Regex mode: decode whole entries (``.`` is a character), map offsets back to bytes."""
    text = buf[:cut].decode("utf-8", "surrogateescape")
    found = _scan_region(text, len(text), _TEXT, terms, deadline)
    if not found:
        return
    if len(text) == cut:  # pure ASCII: characters are bytes
        offsets = {c: c for row in found for c in row[:2]}
    else:
        offsets = _byte_offsets(text, [c for row in found for c in row[:2]])
    tally.add_rows(base, [(offsets[s], offsets[e], st, t, tf) for s, e, st, t, tf in found])


# --- ranking ----------------------------------------------------------------------------------


def _rank(tally: _Tally, want: int) -> list[tuple[float, int, int, str]]:
    """Top ``want`` entries as (score, offset, length, stamp): all terms first, BM25, newest."""
    n_terms = tally.n_terms
    n = max(tally.n_entries, len(tally.entries), 1)
    avg_len = max(tally.n_bytes / n, 1.0)
    df = [0] * n_terms
    for row in tally.entries.values():
        for t in range(n_terms):
            if row[2 + t]:
                df[t] += 1
    idf = [math.log(1.0 + (n - d + 0.5) / (d + 0.5)) for d in df]

    k1, b = BM25_K1, BM25_B
    base_norm, len_norm = k1 * (1.0 - b), k1 * b / avg_len
    rows = tally.entries.items()
    if n_terms == 1:  # the common case, kept to one cheap expression per entry
        w = idf[0] * (k1 + 1.0)
        keys = [
            (True, w * tf / (tf + base_norm + len_norm * length), stamp, offset, length)
            for offset, (length, stamp, tf) in rows
        ]
    else:
        keys = []
        for offset, (length, stamp, *tfs) in rows:
            norm = base_norm + len_norm * length
            score = sum(idf[t] * tf * (k1 + 1.0) / (tf + norm) for t, tf in enumerate(tfs) if tf)
            keys.append((all(tfs), score, stamp, offset, length))
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
    """Search HISTORY.md: whole entries, most relevant first, paged by limit and offset."""
    if limit < 1 or offset < 0:
        raise SearchError("limit must be at least 1 and offset at least 0.")
    if not query or not query.strip():
        raise SearchError("Nothing to search for: give one or more keywords.")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchError(f"Query too long (at most {MAX_QUERY_CHARS} characters).")
    terms = [_regex_term(query)] if regex else _keyword_terms(query)
    path = Path(path)
    try:
        tally = _scan_file(path, terms, regex)
    except FileNotFoundError:
        return SearchResult([], 0)
    top = _rank(tally, offset + limit)[offset:]
    hits: list[HistoryHit] = []
    if top:
        with path.open("rb") as f:
            for score, start, length, stamp in top:
                f.seek(start)
                text = f.read(length).decode("utf-8", "replace").rstrip()
                when = stamp.decode("ascii") if isinstance(stamp, bytes) else stamp
                hits.append(HistoryHit(when, text, score, _spans(text, terms)))
    return SearchResult(hits, len(tally.entries))
