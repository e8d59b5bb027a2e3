"""Text from outside made safe to store: every later file write and request must accept it."""

from __future__ import annotations

import re
import unicodedata
from typing import Any


def valid_text(value: Any) -> Any:
    """A string with each lone UTF-16 surrogate replaced by U+FFFD; anything else unchanged.

    UTF-8 cannot hold a lone surrogate, yet JSON can carry one ("\\ud83d" from a model, a
    platform, or a terminal in a broken locale): left in, it fails every later file write and
    request. Call it where text enters from outside.
    """
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


# Unicode categories that are not visible text: controls (newline, ESC, BEL), format characters
# (U+202E and the other direction overrides, zero-width ones), separators of lines and paragraphs.
_INVISIBLE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}
_BRACKETS = str.maketrans({"[": "(", "]": ")"})


def plain_name(name: str, limit: int = 200) -> str:
    """A name from outside (a file's name) as one line of visible text, fit to stand inside the
    prompt's `[file: …]` markers and in an answer: every control or format character (newline,
    ESC, BEL, U+202E…) becomes a space, runs of spaces one, brackets parentheses, so that a name
    can neither end its marker nor fake another, nor turn the text around it; at most `limit`
    characters. Empty: "file"."""
    chars = [" " if unicodedata.category(ch) in _INVISIBLE else ch for ch in valid_text(name)]
    text = re.sub(r"\s+", " ", "".join(chars)).strip().translate(_BRACKETS)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or "file"
