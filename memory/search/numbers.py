"""Numbers as a history writes them in words: 55 is also "fifty-five", 5 (a day) "fifth".

A consolidating model paraphrases a chat, and people type "1150" for what the entry calls "one
thousand one hundred and fifty euros", or "May 7" for "the seventh of May". The search looks
for a number of the question both ways: its digits and its English words (cardinal, and the
ordinal for a day of the month).
"""

from __future__ import annotations

__all__ = ["MAX_NUMBER", "ORDINAL_DAYS", "cardinal", "ordinal"]

MAX_NUMBER = 9999  # larger numbers are years, codes and prices written in digits anyway

_ONES = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
]  # fmt: skip
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_ORDINAL_OF = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
    "nine": "ninth", "twelve": "twelfth",
}  # fmt: skip


def cardinal(n: int) -> str:
    """0 to 9999 in words: 1150 -> "one thousand one hundred and fifty"."""
    if not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"{n} is out of range")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" and {cardinal(rest)}" if rest else "")
    thousands, rest = divmod(n, 1000)
    if not rest:
        return f"{_ONES[thousands]} thousand"
    return f"{_ONES[thousands]} thousand{' and' if rest < 100 else ''} {cardinal(rest)}"


def ordinal(n: int) -> str:
    """1 to 99 as an ordinal in words: 5 -> "fifth", 21 -> "twenty-first", 30 -> "thirtieth"."""
    words = cardinal(n)
    head, _, last = words.rpartition("-")
    if last in _ORDINAL_OF:
        last = _ORDINAL_OF[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return f"{head}-{last}" if head else last


# "fifth" -> 5, for the days of a month written in words.
ORDINAL_DAYS = {ordinal(day): day for day in range(1, 32)}
