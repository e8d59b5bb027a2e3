"""Whether a text mentions a word the way the history search would find it.

For the consolidation's check that a history entry keeps some of the names, places and numbers
the person said (memory/consolidation/checks.py keeps_said): kept means /recall of the word
still finds the entry, so it is judged with the search's own word forms and numbers.
"""

from __future__ import annotations

import re

from memory.search.numbers import MAX_NUMBER, cardinal
from memory.search.stems import stem

__all__ = ["mentions"]

_WORD = re.compile(r"[^\W_]+")


def mentions(text: str, words: list[str]) -> bool:
    """Whether `text` holds one of `words`: itself, another form of it ("Rotterdam's",
    "hiked" for "hiking"), or, for a number, the number in words ("fifty-five" for "55")."""
    low = text.lower()
    held = set(_WORD.findall(low))
    stems = {stem(w) for w in held}
    for word in (w.lower() for w in words):
        if word in held or (not word.isdigit() and stem(word) in stems):
            return True
        in_words = word.isdigit() and int(word) <= MAX_NUMBER
        if in_words and re.search(rf"\b{cardinal(int(word))}\b", low):
            return True
    return False
