"""The best candidates of the scan, ordered again with what only their text tells.

Why a second stage: the scan (memory/search/engine.py) sees each entry as a vector of weighted
keyword occurrences, which is all that can be had at grep's speed, and ranks by BM25 over it.
That cannot tell a consolidated chat about six things, where "Dawit" is in one sentence and
"birthday" in another, from the entry that says "Dawit's birthday is on …". So the first
``POOL`` entries of the scan's order are read and scored again:

- ``PROXIMITY``: two keywords of the query in one sentence of the entry add to the score, by
  how rare the rarer of the two is. Measured on bench/recall_table.py's tuning halves, counting
  words apart instead (within 4, 6 or 8 words, by 1 / distance or flat, more in the query's
  order) cost the short-entry sets: a name one word longer ("Sol y Sombra") moved an entry out
  of the window and broke the tie that the newest should win;
- no length norm: discounting entries longer than 1.5 or 2.5 times the mean (by a quarter up
  to all of the excess) lost on every set's tuning half or gained nothing, so among entries
  holding the same words the newest still wins, as BM25 with b = 0 does.

The scan's other keys stay as they were: entries naming the asked dates first, then (per
``engine.WORDS_TIER``) those holding more of the keywords, and ties to the newest.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

__all__ = ["Candidate", "order", "sentence_of"]

POOL = 60  # candidates read and scored again
PROXIMITY = 4.0  # weight of the closeness bonus (0: off)

# A sentence ends at . ! ? before a capital (not after a title: "Dr. Vos"), or at a line's end.
_SENTENCE_END = re.compile(r"(?<!\bDr)(?<!\bMr)(?<!\bMrs)(?<!\bMs)(?<!\bSt)[.!?]+\s+(?=[A-Z])|\n")


@dataclass
class Candidate:
    """One entry as the scan ranked it, with its text read."""

    dated: bool
    tier: float
    score: float  # BM25 of the scan
    stamp: bytes
    offset: int
    text: str
    sentences: list[set[int]]  # per keyword: the sentences it is in


def sentence_of(text: str, spans: list[list[tuple[int, int]]]) -> list[set[int]]:
    """Each keyword's matches in ``text`` as the indices of the sentences they are in."""
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
    return [{bisect_right(starts, s) - 1 for s, _ in term} for term in spans]


def closeness(sentences: list[set[int]], idf: list[float]) -> float:
    """Bonus for pairs of keywords in one sentence: the sum of the rarer one's idf per pair."""
    total = 0.0
    for i, si in enumerate(sentences):
        for j in range(i + 1, len(sentences)):
            if si & sentences[j]:
                total += min(idf[i], idf[j])
    return total


def order(cands: list[Candidate], idf: list[float]) -> list[Candidate]:
    """The candidates best first: dates, tier, then BM25 with closeness, then the newest."""
    for c in cands:
        if PROXIMITY > 0:
            c.score += PROXIMITY * closeness(c.sentences, idf)
    return sorted(cands, key=_key, reverse=True)


def _key(c: Candidate) -> tuple[bool, float, float, bytes, int]:
    return c.dated, c.tier, c.score, c.stamp, c.offset
