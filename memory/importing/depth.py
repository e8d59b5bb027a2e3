"""A byte stream that refuses JSON nested deeper than any export is.

ijson builds each element's path as a string per event, so "[[[[…" nested a hundred thousand
deep costs quadratic RAM and time (a 400 KB file filled the machine's RAM in a test). This
reader sits between the file and the parser and follows the nesting of every chunk as it
passes, so such a file ends in one line at the 65th level. Strings are taken out by one regex
substitution (C speed), so what is counted in Python is the brackets alone; a string still open
at a chunk's end (and a backslash escaping the next chunk's first byte) is carried over.
"""

from __future__ import annotations

import re
from typing import IO

from memory.importing.sources import ImportRefused

MAX_DEPTH = 64  # an export nests about 10 deep
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STRING_END = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # a string's rest, from inside
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in _BRACKETS)
_OPEN = frozenset(b"[{")


class DepthGuard:
    """`read` as the wrapped stream's, following the JSON nesting of what goes through."""

    def __init__(self, stream: IO[bytes], name: str = "the file") -> None:
        self._stream = stream
        self._name = name
        self._depth = 0
        self._in_string = False
        self._escaped = False  # inside a string, the chunk ended on an escaping backslash
        self.consumed = 0  # bytes read so far, for a progress bar

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.consumed += len(data)
        if data:
            self._follow(data)
        return data

    def _follow(self, data: bytes) -> None:
        start = 0
        if self._in_string:
            start = 1 if self._escaped else 0
            end = _STRING_END.match(data, start)
            if end is None:  # the whole chunk is inside the string
                self._escaped = _ends_escaping(data, start)
                return
            start, self._in_string, self._escaped = end.end(), False, False
        outside = _STRING.sub(b"", data[start:] if start else data)
        opened = outside.find(b'"')  # a string that goes on in the next chunk
        if opened >= 0:
            tail = len(outside) - opened - 1
            self._in_string = True
            self._escaped = _ends_escaping(data, len(data) - tail)
            outside = outside[:opened]
        brackets = outside.translate(None, _NOT_BRACKETS)
        depth = self._depth
        if depth + len(brackets) > MAX_DEPTH:
            for byte in brackets:
                depth += 1 if byte in _OPEN else -1
                if depth > MAX_DEPTH:
                    raise ImportRefused(f"{self._name} nests deeper than any export does")
        else:
            depth += 2 * (brackets.count(b"[") + brackets.count(b"{")) - len(brackets)
        self._depth = depth


def _ends_escaping(data: bytes, start: int) -> bool:
    """Whether the string text data[start:] ends on a backslash that escapes the next byte
    (an odd run of them: pairs are escaped backslashes)."""
    run = min(len(data) - len(data.rstrip(b"\\")), len(data) - start)
    return run % 2 == 1
