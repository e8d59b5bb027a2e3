"""``--regex`` patterns, run by RE2: time linear in the text, whatever the pattern.

Python's ``re`` backtracks, so a pattern like ``(a+)+$`` or ``.*.*.*.*z`` can take exponential
time on one line and freeze every user of the bot. RE2 has no backtracking, and so no
backreferences or lookaround either: those are refused with a message that says so.
"""

from __future__ import annotations

import re
from typing import Any

import re2

__all__ = ["RegexError", "compile_bytes", "compile_regex", "re2_escape"]

MAX_REGEX_CHARS = 500

# RE2's parse errors for Python syntax it leaves out on purpose, and what to tell the user.
_UNSUPPORTED = [
    (re.compile(r"invalid escape sequence: \\[1-9]"), "backreferences (\\1)"),
    (re.compile(r"invalid perl operator: \(\?P$"), "backreferences ((?P=name))"),
    (re.compile(r"\(\?<?[=!]"), "lookahead and lookbehind ((?=…), (?!…), (?<=…), (?<!…))"),
    (re.compile(r"\(\?>"), "atomic groups ((?>…))"),
    (re.compile(r"\(\?\("), "conditional groups ((?(1)…))"),
    (re.compile(r"repetition operator: [*+?}]\+"), "possessive repeats (a*+, a++)"),
    (re.compile(r"invalid escape sequence: \\Z"), "\\Z (write \\z for the end of the text)"),
]


class RegexError(ValueError):
    """A pattern that cannot be run; the message is one line for the user."""


def _options() -> Any:
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # the reason goes to the user, not to stderr
    return options


def compile_regex(query: str) -> Any:
    """The case-insensitive RE2 pattern for ``query`` (``^``/``$`` match at lines)."""
    if len(query) > MAX_REGEX_CHARS:
        raise RegexError(f"Regular expression too long (at most {MAX_REGEX_CHARS} characters).")
    try:
        pattern = re2.compile("(?m)" + query, _options())
    except re2.error as exc:
        raise RegexError(_explain(exc)) from None
    except UnicodeError:
        message = "Invalid regular expression: it holds a character that is not text."
        raise RegexError(message) from None
    if pattern.search(b"") is not None:
        raise RegexError(
            "That regular expression matches empty text, so it would match every entry."
        )
    return pattern


def _explain(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else ""
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    message = message.replace("(?m)", "", 1)  # our prefix, not the user's text
    for shape, feature in _UNSUPPORTED:
        if shape.search(message):
            return (
                f"Unsupported regular expression: {feature} cannot be used, because patterns "
                "run on a linear-time engine (RE2) so that none can hang the search."
            )
    return f"Invalid regular expression: {message.strip() or 'not understood'}."


def re2_escape(raw: bytes) -> bytes:
    """``raw`` as a literal in an RE2 pattern (every byte that is not a letter or digit escaped)."""
    return b"".join(bytes([b]) if chr(b).isalnum() and b < 128 else b"\\x%02x" % b for b in raw)


def compile_bytes(pattern: bytes) -> Any:
    """A case-sensitive RE2 pattern over bytes as they are (Latin-1: one character a byte), for
    patterns the search builds itself over lowered text."""
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.log_errors = False
    return re2.compile(pattern, options)
