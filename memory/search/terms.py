"""What a history query looks for: keywords, phrases, one regex, named dates, as scan terms.

Each ``Term`` knows how to find itself in a scanned buffer (bytes, lowered for all but regexes),
how much an entry's occurrences weigh, and where it matches in a decoded entry (for marking).
Filler words of a natural question name nothing: stopwords ("what", "did", "my", titles like
"Dr") and one-letter words are dropped when the query holds any other keyword or a date,
because as substrings they match nearly every entry; a query made only of them is searched as
typed, and quoted phrases are always kept.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memory.search import stems
from memory.search.dates import DateNeedle, DateSpan, extract_dates
from memory.search.numbers import MAX_NUMBER, cardinal, ordinal
from memory.search.regex import compile_bytes, compile_regex, re2_escape
from memory.search.stems import WordForms
from memory.store import ENTRY_STAMP

__all__ = [
    "BYTES_LAYOUT",
    "STOPWORDS",
    "Query",
    "SearchError",
    "Term",
    "one_edit",
    "parse_query",
    "typo_eligible",
    "typo_term",
]

MAX_TERMS = 32
NUMBERS_IN_WORDS = True  # a number of the question also finds itself written in words
# Sentence punctuation a user or a model glues to a keyword ("python?"); stripped from word edges.
_EDGE_PUNCT = "?!,.;:()[]{}<>'\"`"
_POSSESSIVE = ("'s", "\u2019s")
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
    """A query that cannot be run (empty, bad or unsupported regex); the message is for the user."""


@dataclass(frozen=True)
class _Layout:
    """Where entries start in a bytes buffer: a stamp at 0 or after a blank line."""

    marker: bytes
    stamp: re.Pattern[bytes]

    def is_start(self, buf: bytes, pos: int) -> bool:
        return self.stamp.match(buf, pos) is not None

    def last_start(self, buf: bytes) -> int:
        """Start of the last entry in ``buf``, or 0 when no entry starts after position 0."""
        end = len(buf)
        while True:
            q = buf.rfind(self.marker, 0, end)
            if q < 0:
                return 0
            if self.is_start(buf, q + 2):
                return q + 2
            end = q + 2


BYTES_LAYOUT = _Layout(b"\n\n[", re.compile(ENTRY_STAMP.encode("ascii")))

Spans = list[tuple[int, int, str]]


@dataclass
class Term:
    """One thing to look for. ``needle`` (lowered ASCII) enables the fast scan loop."""

    label: str
    kind: str  # "word", "phrase", "pattern" or "date"
    find: Callable[[bytes, int, int], int]  # (buf, start, end) -> first position or -1
    weight_in: Callable[[bytes, int, int], float]  # weighted occurrences in buf[start:end]
    spans: Callable[[str], Spans]  # matches in a decoded entry, for marking
    needle: bytes | None = None
    forms: WordForms | None = None
    alternatives: list[Term] = field(default_factory=list)  # a date, a number: any of these
    typo: bool = False  # found one edit away (typo_term)
    past_stamp: bool = False  # what an entry's stamp holds does not count (_past_stamp)
    date: DateNeedle | None = None  # a way of writing a date (one of a date term's alternatives)


@dataclass
class Query:
    words: list[Term]  # keywords, phrases or the one regex, ranked by BM25
    dates: list[DateSpan]
    date_term: Term | None
    regex: bool

    @property
    def scanned(self) -> list[Term]:
        return self.words + ([self.date_term] if self.date_term else [])


# --- keywords ---------------------------------------------------------------------------------


def _char_variants(ch: str) -> list[str]:
    """Every spelling of ``ch`` under case mapping (ü/Ü, ß/ss/ẞ, σ/ς/Σ), longest first."""
    out = {ch, ch.lower(), ch.upper(), ch.casefold(), ch.title()}
    for v in list(out):
        out |= {v.lower(), v.upper(), v.casefold()}
    return sorted(out, key=lambda v: (-len(v), v))


def _literal_marker(text: str) -> re.Pattern[str]:
    pieces = []
    for ch in text:
        variants = [ch] if ch.isascii() else _char_variants(ch)
        pieces.append("(?:" + "|".join(re.escape(v) for v in variants) + ")")
    return re.compile("".join(pieces), re.IGNORECASE)


def _literal_term(text: str, kind: str) -> Term:
    """A case-insensitive literal; ASCII uses bytes.find on the lowered chunk, else a byte regex."""
    marker = _literal_marker(text)

    def spans(entry: str) -> Spans:
        return [(m.start(), m.end(), kind) for m in marker.finditer(entry) if m.end() > m.start()]

    if text.isascii():
        needle = text.lower().encode("ascii")
        return Term(
            text,
            kind,
            lambda buf, s, e: buf.find(needle, s, e),
            lambda buf, s, e: float(buf.count(needle, s, e)),
            spans,
            needle=needle,
        )
    pieces = []
    for ch in text:
        if ch.isascii():
            pieces.append(re.escape(ch.lower().encode("ascii")))
            continue
        enc = sorted(
            {v.encode("utf-8", "surrogatepass").lower() for v in _char_variants(ch)},
            key=lambda b: (-len(b), b),
        )
        pieces.append(b"(?:" + b"|".join(re.escape(b) for b in enc) + b")")
    pattern = re.compile(b"".join(pieces))  # alternatives of literals: no backtracking risk
    return Term(text, kind, _pattern_find(pattern), _pattern_count(pattern), spans)


def _pattern_find(pattern: Any) -> Callable[[bytes, int, int], int]:
    def find(buf: bytes, s: int, e: int) -> int:
        m = pattern.search(buf, s, e)
        return m.start() if m else -1

    return find


def _pattern_count(pattern: Any) -> Callable[[bytes, int, int], float]:
    def count(buf: bytes, s: int, e: int) -> float:
        return float(sum(1 for _ in pattern.finditer(buf, s, e)))

    return count


def _forms_term(word: str) -> Term:
    """A bare ASCII word: itself, its stem's other forms and itself inside longer words."""
    forms = WordForms(word.lower())
    root = forms.root.encode("ascii")

    def weight_in(buf: bytes, s: int, e: int) -> float:
        return forms.weight_in(buf, s, e)

    return Term(
        word,
        "word",
        lambda buf, s, e: buf.find(root, s, e),
        weight_in,
        forms.spans,
        needle=root,
        forms=forms,
    )


_STAMP_CHARS = 18  # "[YYYY-MM-DD HH:MM]": an entry's stamp, whose digits are no number said


def _whole_words(text: str, kind: str) -> Term:
    """A lowered ASCII text as whole words ("five" not in "twenty-five" or "fivefold")."""
    edge_b, edge_s = rb"[a-z0-9-]", r"[^\W_]|-"
    pattern = re.compile(rb"(?<!" + edge_b + rb")" + re.escape(text.encode("ascii")) + rb"(?!"
                         + edge_b + rb")")  # fmt: skip
    marker = re.compile(rf"(?<!{edge_s}){re.escape(text)}(?!{edge_s})", re.IGNORECASE)

    def spans(entry: str) -> Spans:
        return [(m.start(), m.end(), kind) for m in marker.finditer(entry)]

    # The literal found with bytes.find, the edges checked by the pattern there: the pattern
    # alone would try every byte of a megabyte in one call that holds the GIL (the event loop
    # waited 56 ms), many times slower.
    raw, match = text.encode("ascii"), pattern.match

    def find(buf: bytes, s: int, e: int) -> int:
        at = buf.find(raw, s, e)
        while at >= 0 and match(buf, at, e) is None:
            at = buf.find(raw, at + 1, e)
        return at

    def count(buf: bytes, s: int, e: int) -> float:  # as finditer counts: no overlaps
        n, at = 0, find(buf, s, e)
        while at >= 0:
            n += 1
            at = find(buf, at + len(raw), e)
        return float(n)

    return Term(text, kind, find, count, spans)


def _past_stamp(term: Term) -> Term:
    """The term, not counting what it finds in an entry's stamp."""

    def weight_in(buf: bytes, s: int, e: int) -> float:
        return term.weight_in(buf, s + _STAMP_CHARS if buf[s : s + 1] == b"[" else s, e)

    def spans(entry: str) -> Spans:
        skip = _STAMP_CHARS if entry.startswith("[") else 0
        return [span for span in term.spans(entry) if span[0] >= skip]

    return Term(
        term.label, term.kind, term.find, weight_in, spans, term.needle, term.forms,
        past_stamp=True,
    )  # fmt: skip


def _is_number(word: str) -> bool:
    return word.isascii() and word.isdigit() and word[0] != "0" and int(word) <= MAX_NUMBER


def _number_term(word: str) -> Term:
    """A number of the question: its digits or its words ("55" or "fifty-five"; a day of the
    month as an ordinal too, "fifth"), anywhere but in the entry's stamp."""
    n = int(word)
    alternatives = [_past_stamp(_forms_term(word))]
    if n >= 2:
        alternatives.append(_past_stamp(_whole_words(cardinal(n), "number")))
    if 1 <= n <= 31:
        alternatives.append(_past_stamp(_whole_words(ordinal(n), "number")))

    def spans(entry: str) -> Spans:
        return sorted(span for alt in alternatives for span in alt.spans(entry))

    def never(buf: bytes, s: int, e: int) -> int:  # scanned through its alternatives
        return -1

    return Term(word, "word", never, lambda b, s, e: 0.0, spans, alternatives=alternatives)


MIN_TYPO_CHARS = 6  # shorter words are one edit from too many others ("stars" / "start")
TYPO_WEIGHT = 0.5  # an occurrence one edit away counts as a keyword inside a longer word
_ANY_CHAR = rb"(?:[a-z0-9]|[\xc0-\xf7][\x80-\xbf]{1,3})"  # one lowered letter, in UTF-8
_WORD_CHARS = rb"[a-z0-9\x80-\xff]"
_STR_WORD = re.compile(r"[^\W_]+")


def one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter dropped, added, changed, or two swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) > len(b):
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    if len(a) < len(b):
        return a[i:] == b[i + 1 :]
    return a[i + 1 :] == b[i + 1 :] or (a[i + 1 : i + 2] == b[i : i + 1] and a[i] == b[i + 1]
                                         and a[i + 2 :] == b[i + 2 :])  # fmt: skip


def typo_eligible(term: Term) -> bool:
    """A bare keyword long enough that one slip of the keyboard may be forgiven."""
    word = term.label
    return term.kind == "word" and not term.alternatives and len(word) >= MIN_TYPO_CHARS and (
        word.isalpha()
    )


def typo_term(word: str) -> Term:
    """A keyword that no entry holds, as a slip of the keyboard: the words of the history one
    edit away from it (a letter dropped, added, changed, or two swapped), or whose stem is one
    edit from its stem ("recomeend" finds "recommended"). Scanned with RE2 (an alternation of
    every edit, linear in the text), and only when the word itself is found nowhere."""
    low = word.lower()
    raw = low.encode("utf-8")
    target_stem = stems.stem(low) if low.isascii() else low
    chars = [c.encode("utf-8") for c in low]
    variants: set[bytes] = set()
    for i in range(len(chars) + 1):
        head, tail = b"".join(chars[:i]), chars[i:]
        variants.add(re2_escape(head) + _ANY_CHAR + re2_escape(b"".join(tail)))  # one added
        if tail:
            rest = b"".join(tail[1:])
            variants.add(re2_escape(head + rest))  # one dropped
            variants.add(re2_escape(head) + _ANY_CHAR + re2_escape(rest))  # one changed
            if len(tail) > 1:
                swapped = head + tail[1] + tail[0] + b"".join(tail[2:])
                variants.add(re2_escape(swapped))  # two swapped
    alternation = b"|".join(sorted(variants))
    pattern = compile_bytes(
        rb"(?:^|[^a-z0-9\x80-\xff])((?:" + alternation + rb")" + _WORD_CHARS + rb"*)"
    )

    def near(token: str) -> bool:
        if one_edit(low, token):
            return True
        return token.isascii() and one_edit(target_stem, stems.stem(token))

    accepted: dict[bytes, bool] = {}

    def tokens(buf: bytes, s: int, e: int, first: bool) -> list[int]:
        """Where the words one edit away start in ``buf[s:e]`` (with ``first``: the first)."""
        out: list[int] = []
        pos = s
        while True:
            m = pattern.search(buf, pos, e)
            if m is None:
                return out
            token = m.group(1)
            ok = accepted.get(token)
            if ok is None:
                if len(accepted) > 4096:
                    accepted.clear()
                ok = accepted[token] = token != raw and near(token.decode("utf-8", "replace"))
            if ok:
                out.append(m.start(1))
                if first:
                    return out
            pos = m.end(1)

    def find(buf: bytes, s: int, e: int) -> int:
        found = tokens(buf, s, e, True)
        return found[0] if found else -1

    def weight_in(buf: bytes, s: int, e: int) -> float:
        return TYPO_WEIGHT * len(tokens(buf, s, e, False))

    def spans(entry: str) -> Spans:
        return [
            (m.start(), m.end(), "typo")
            for m in _STR_WORD.finditer(entry)
            if len(m.group()) >= MIN_TYPO_CHARS - 1 and near(m.group().lower())
        ]

    return Term(word, "word", find, weight_in, spans, typo=True)


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


def _keyword_term(word: str, quoted: bool) -> Term:
    if quoted:
        return _literal_term(word, "phrase")
    for ending in _POSSESSIVE:
        if word.lower().endswith(ending) and len(word) > len(ending) + 1:
            word = word[: -len(ending)]
    if NUMBERS_IN_WORDS and _is_number(word):
        return _number_term(word)
    if word.isascii() and word.isalnum():
        return _forms_term(word)
    return _literal_term(word, "word")


def _keyword_terms(query: str, has_dates: bool) -> list[Term]:
    """The query's keywords; filler words only count when the query holds nothing else."""
    words = _parse_keywords(query)
    kept = [(w, quoted) for w, quoted in words if quoted or not _is_filler(w)]
    if not kept and not has_dates:
        kept = words
    if not kept and not has_dates:
        raise SearchError("Nothing to search for: give one or more keywords.")
    if len(kept) > MAX_TERMS:
        raise SearchError(f"Too many keywords ({len(kept)}); use at most {MAX_TERMS}.")
    return [_keyword_term(w, quoted) for w, quoted in kept]


# --- regexes and dates ------------------------------------------------------------------------


def _regex_term(query: str) -> Term:
    pattern = compile_regex(query)  # RegexError: the caller turns it into a SearchError

    def spans(entry: str) -> Spans:
        found = pattern.finditer(entry)
        return [(m.start(), m.end(), "pattern") for m in found if m.end() > m.start()]

    return Term(query, "pattern", _pattern_find(pattern), _pattern_count(pattern), spans)


def _date_needle_term(needle: DateNeedle) -> Term:
    """One way of writing a date of the span; a hit counts only as a whole date."""

    def weight_in(buf: bytes, s: int, e: int) -> float:
        return 1.0 if needle.find(buf, s, e) >= 0 else 0.0

    return Term(needle.text, "date", needle.find, weight_in, lambda entry: [], date=needle)


def _date_term(spans: list[DateSpan]) -> Term | None:
    needles = list(dict.fromkeys(n for span in spans for n in span.needles))
    if not needles:
        return None
    label = ", ".join(span.label for span in spans)

    def never(buf: bytes, s: int, e: int) -> int:  # scanned through its alternatives
        return -1

    return Term(
        label,
        "date",
        never,
        lambda buf, s, e: 0.0,
        lambda entry: [],
        alternatives=[_date_needle_term(n) for n in needles],
    )


def _split_dates(query: str, now: datetime) -> tuple[str, list[DateSpan]]:
    """Date expressions outside quotes, cut from the query."""
    parts = query.split('"')
    spans: list[DateSpan] = []
    for i in range(0, len(parts), 2):
        parts[i], found = extract_dates(parts[i], now)
        spans += found
    return '"'.join(parts), spans


def parse_query(query: str, regex: bool, now: datetime) -> Query:
    """The terms to scan for; raises SearchError or RegexError with a message for the user."""
    if regex:
        return Query([_regex_term(query)], [], None, True)
    rest, dates = _split_dates(query, now)
    words = _keyword_terms(rest, bool(dates))
    return Query(words, dates, _date_term(dates), False)
