"""The entries of one region of HISTORY.md that hold ASCII keywords, found in bulk.

Why a module of its own: a query of common words ("paid euros late") hits hundreds of thousands
of entries of a 100 MB history, and a Python loop per hit costs microseconds each, several times
what ``grep`` needs for the whole file. Here each keyword's occurrences come from one memmem
pass (``ahocorasick_rs`` with a single pattern: SIMD in Rust), and what every hit needs (the
entry around it, whether it is the keyword as a whole word) is a C call mapped over the list of
hits, with the work per entry done once however many keywords it holds. Only hits that are not
the keyword itself (another form, a longer word) take a Python step.

The text searched is the region's *word view*: ASCII letters lowered, every byte that cannot be
part of a word made a space, so " paid " there is "paid" as a whole word; entry edges and stamps
are read from the bytes as written. The weights are those of ``WordForms`` (memory/search/stems.py),
summed in the same order as a per-hit loop would, so the figures are the same to the last bit.
"""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import itemgetter, not_
from typing import Any

from ahocorasick_rs import BytesAhoCorasick

from memory.search.stems import WORD_BYTES, WordForms, word_end

__all__ = [
    "WORD_VIEW",
    "Row",
    "TermHits",
    "WordScan",
    "all_stamps",
    "region_end",
    "scan_words",
]

# One matching entry as kept for ranking: (-length, stamp, file offset).
Row = tuple[int, Any, int]
# One term's matches in a region: entries and its weighted occurrences in each, aligned. A
# weight may be 0: the rows of one bulk scan are shared by its keywords, each with its column.
TermHits = tuple[list[Row], list[float]]

MARKER = b"\n\n["  # an entry edge, when a stamp follows
# The word view's translation table (see the module docstring).
WORD_VIEW = bytes(b if b in WORD_BYTES else 32 for b in range(256)).lower()
_SPACE = 32
_STAMP_SHAPE = b"0000-00-00 00:00]"  # a stamp past its "[" with every digit made "0"
_DIGITS_TO_0 = bytes.maketrans(b"0123456789", b"0" * 10)
_START = itemgetter(1)


def all_stamps(bodies: list[bytes]) -> bool:
    """True when each item is ``YYYY-MM-DD HH:MM]`` (a stamp after its ``[``); one C pass."""
    return b"".join(bodies).translate(_DIGITS_TO_0) == _STAMP_SHAPE * len(bodies)


def region_end(buf: bytes, s: int, end: int) -> int:
    """End of the file's last entry: before the trailing blank line(s)."""
    e = end
    while e > s + 1 and buf[e - 1 : e].isspace():
        e -= 1
    return e


class WordScan:
    """One bare ASCII keyword as the bulk scan needs it: a searcher for its root, and weights."""

    def __init__(self, forms: WordForms) -> None:
        self.forms = forms
        self.root = forms.root.encode("ascii")
        self.word = forms.word.encode("ascii")
        self.whole = b" " + self.word + b" "  # the keyword itself, in the word view
        self.searcher = BytesAhoCorasick([self.root])

    def entries(self, buf: bytes, view: bytes, end: int) -> dict[int, float]:
        """Weighted occurrences per entry of ``buf[:end]``, keyed by the entry's marker offset.

        The key is -1 for the region's first entry (no marker before it). Occurrences do not
        overlap, as ``bytes.find`` from the end of the last one would find them.
        """
        found = self.searcher.find_matches_as_indexes(memoryview(view)[:end])
        hits = list(map(_START, found))
        del found
        if not hits:
            return {}
        # rfind up to the hit, not past it: a root is a word, so no marker ends on the hit.
        marks = list(map(buf.rfind, repeat(MARKER), repeat(0), hits))
        forms = self.forms
        # The common case: every hit is the keyword itself, a whole word (checked lazily).
        if all(map(view.startswith, repeat(self.whole), map((-1).__add__, hits))):
            tf_of = dict.fromkeys(marks, forms.exact_weight)
            if len(tf_of) == len(marks):  # and no entry holds it twice
                return tf_of
            weights = [forms.exact_weight] * len(hits)
        else:
            whole = list(map(view.startswith, repeat(self.whole), map((-1).__add__, hits)))
            weights = self._weights(view, hits, whole)
            tf_of = dict(zip(marks, weights, strict=True))
        if len(tf_of) < len(marks):  # an entry holds it more than once
            tf_of = {}
            get = tf_of.get
            for q, w in zip(marks, weights, strict=True):  # summed in order, as a loop per hit
                tf_of[q] = get(q, 0.0) + w
        if 0.0 in tf_of.values():  # only longer words that are no form of it: no match
            tf_of = {q: tf for q, tf in tf_of.items() if tf}
        return tf_of

    def _weights(self, view: bytes, hits: list[int], whole: list[bool]) -> list[float]:
        """Each hit's weight: the keyword itself, another form, part of a longer word, or 0."""
        forms = self.forms
        weights = list(map((0.0, forms.exact_weight).__getitem__, whole))
        part, weigh, cached = forms.part_weight, forms.weigh, forms.weights.get
        word, n = self.word, len(self.root)
        for i in compress(range(len(hits)), map(not_, whole)):
            hit = hits[i]
            if view[hit - 1] != _SPACE:  # inside a longer word: grep's match only
                weights[i] = part if view.startswith(word, hit) else 0.0
            else:  # a longer word starting at the root: another form, or none
                token = view[hit : word_end(view, hit + n)]
                w = cached(token)
                weights[i] = weigh(token) if w is None else w
        return weights


def scan_words(
    buf: bytes,
    view: bytes,
    end: int,
    eof: bool,
    scans: list[WordScan],
    base: int,
    lengths: bool,
) -> list[TermHits] | None:
    """Each keyword's entries in ``buf[:end]`` (``view``: its word view), or None.

    The keywords share one list of rows, the entries holding any of them, in file order; each
    has its column of weights over it (0 where it is not held), the vectors ranking groups
    entries by, without matching entries up again.

    Every ``\\n\\n[`` is taken as an entry edge and the stamps of the entries used are checked
    afterwards, in bulk; None means one was no stamp (the caller then scans the region the
    careful way). Without ``lengths`` a row's length is 0: ranking without a length norm needs
    none, and the few entries shown find their end when read; else ``buf[end - 2:end]`` is the
    blank line before the next region unless ``eof``, and the entry after each is checked too.
    """
    per_term = [scan.entries(buf, view, end) for scan in scans]
    # One keyword's entries come in file order, as its hits did; several are merged (sorted
    # runs, one after the other: a cheap sort).
    if len(per_term) == 1:
        marks = list(per_term[0])
    else:
        marks = sorted(dict.fromkeys(chain.from_iterable(per_term)))
    if not marks:
        return [([], []) for _ in scans]
    stamps = [buf[q + 3 : q + 20] for q in marks]  # an entry starts 2 past its marker
    starts = list(map((2).__add__, marks))
    if marks[0] < 0:  # the region's first entry
        starts[0], stamps[0] = 0, buf[1:18]
        if buf[:1] != b"[":
            return None
    if not all_stamps(stamps):
        return None
    if lengths:
        ends = list(map(buf.find, repeat(MARKER), starts, repeat(end + 1)))
        nexts = ends
        if ends[-1] < 0:  # the region's last entry ends at its blank line (or the file's end)
            nexts = ends[:-1]
            ends[-1] = region_end(buf, starts[-1], end) if eof else end - 2
        if not all_stamps([buf[e + 3 : e + 20] for e in nexts]):
            return None
        negs = list(map(int.__sub__, starts, ends))
    else:
        negs = [0] * len(starts)
    rows = list(zip(negs, stamps, map(base.__add__, starts), strict=True))
    if len(per_term) == 1:
        return [(rows, list(per_term[0].values()))]
    return [(rows, list(map(tf_of.get, marks, repeat(0.0)))) for tf_of in per_term]
