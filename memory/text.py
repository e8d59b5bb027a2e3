"""Text from outside made safe to store: every later file write and request must accept it."""

from __future__ import annotations

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
