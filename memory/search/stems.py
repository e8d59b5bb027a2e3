"""Word forms for history search: one English Snowball stemmer for entries and queries alike.

A keyword should find the other forms of its word ("hiking" finds "hiked", "dogs" finds "dog"),
but an entry that uses the very word still counts more, and grep's substring match ("postgres" in
"PostgreSQL") still counts, least. ``WordForms`` says which of the three an entry's word is.

Search stays a scan of bytes: ``root`` is a prefix shared by the keyword and every word of its stem
that the scan looks for with ``bytes.find``; each word found there is then stemmed (once per
distinct word, cached) and compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import Stemmer

__all__ = ["EXACT", "FORM", "PART", "WORD_BYTES", "WordForms", "stem", "word_end"]

# How much one occurrence counts towards a term's frequency (tuned by bench/tune_bm25.py).
EXACT = 1.0  # the keyword itself, as a whole word
FORM = 0.8  # another word with the keyword's stem
PART = 0.5  # the keyword inside a longer word, as grep -i finds it

MIN_ROOT = 3  # a shorter shared prefix would make every entry a candidate; keep the word itself

_STEMMER = Stemmer.Stemmer("english")
_WORD_STR = re.compile(r"[^\W_]+")  # letters and digits, for str entries
# Bytes that belong to a word in lowered UTF-8: ASCII letters and digits, and every byte of a
# multi-byte character (a non-ASCII letter must not end an ASCII word).
WORD_BYTES = frozenset(b for b in range(256) if b >= 128 or chr(b).isalnum())
_WORD_TAIL = re.compile(rb"[a-z0-9\x80-\xff]*")


def word_end(buf: bytes, pos: int) -> int:
    """Where the lowered word going on at ``pos`` ends."""
    m = _WORD_TAIL.match(buf, pos)
    return m.end() if m else pos


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of a lowered word."""
    return _STEMMER.stemWord(word)


def _root(word: str, word_stem: str) -> str:
    """The longest prefix of ``word`` that every word of its stem starts with (near enough).

    Snowball may end a stem in "e" or "i" that other forms lack ("hike"/"hiking",
    "happi"/"happy"), so those are dropped; too short a root falls back to the word itself.
    """
    n = 0
    while n < min(len(word), len(word_stem)) and word[n] == word_stem[n]:
        n += 1
    root = word[:n].rstrip("eiy") if n > MIN_ROOT else word[:n]
    return root if len(root) >= MIN_ROOT else word


@dataclass
class WordForms:
    """One bare ASCII keyword: its stem, the root the scan looks for, and how to weigh a word."""

    word: str  # lowered
    stem: str = field(init=False)
    root: str = field(init=False)
    exact_weight: float = field(init=False)
    part_weight: float = field(init=False)
    weights: dict[bytes, float] = field(init=False, default_factory=dict)  # token -> weight

    def __post_init__(self) -> None:
        self.stem = stem(self.word)
        self.root = _root(self.word, self.stem)
        self.exact_weight, self.part_weight = EXACT, PART

    def weigh(self, token: bytes) -> float:
        """Weight of a whole lowered word that starts with ``root`` (0 when it does not match)."""
        weight = self.weights.get(token)
        if weight is None:
            if len(self.weights) > 65536:  # bounded: one search, one keyword
                self.weights.clear()
            weight = self.weights[token] = self._classify(token.decode("utf-8", "replace"))
        return weight

    def weight_in(self, low: bytes, s: int, e: int) -> float:
        """Weighted occurrences in the lowered ``low[s:e]``: each word at ``root`` weighed."""
        root, word = self.root.encode("ascii"), self.word.encode("ascii")
        n, total = len(root), 0.0
        at = low.find(root, s, e)
        while at >= 0:
            if at and low[at - 1] in WORD_BYTES:
                total += self.part_weight if low.startswith(word, at) else 0.0
            else:
                total += self.weigh(low[at : word_end(low, at + n)])
            at = low.find(root, at + n, e)
        return total

    def _classify(self, token: str) -> float:
        if token == self.word:
            return self.exact_weight
        if token.isascii() and stem(token) == self.stem:
            return FORM
        return self.part_weight if self.word in token else 0.0

    def kind(self, token: str) -> str | None:
        """How a word of an entry (any case) matches: "word", "form", "part", or None."""
        low = token.lower()
        if low == self.word:
            return "word"
        if low.isascii() and stem(low) == self.stem:
            return "form"
        return "part" if self.word in low else None

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every match in ``text``; a part marks only the keyword."""
        out: list[tuple[int, int, str]] = []
        for m in _WORD_STR.finditer(text):
            token = m.group()
            if self.root not in token.lower():
                continue
            kind = self.kind(token)
            if kind in ("word", "form"):
                out.append((m.start(), m.end(), kind))
            elif kind == "part":
                low = token.lower()
                at = low.find(self.word)
                while at >= 0:
                    out.append((m.start() + at, m.start() + at + len(self.word), "part"))
                    at = low.find(self.word, at + len(self.word))
        return out
