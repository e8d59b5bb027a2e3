"""A byte stream that refuses JSON nested deeper than any export is.

ijson builds each element's path as a string per event, so "[[[[…" nested a hundred thousand
deep costs quadratic RAM and time (a 400 KB file filled the machine's RAM in a test). This
reader sits between the file and the parser and counts the nesting of every chunk as it passes
(strings and their escapes skipped), so such a file ends in one line at the 65th level.
"""

from __future__ import annotations

import re
from typing import IO

from memory.importing.sources import ImportRefused

MAX_DEPTH = 64  # an export nests about 10 deep
_MARKS = re.compile(rb'[\[\]{}"\\]')


class DepthGuard:
    """`read` as the wrapped stream's, counting the JSON nesting of what goes through."""

    def __init__(self, stream: IO[bytes], name: str = "the file") -> None:
        self._stream = stream
        self._name = name
        self._depth = 0
        self._in_string = False
        self._skip_at = -1  # the offset (in this chunk) of a character escaped by a backslash
        self.consumed = 0  # bytes read so far, for a progress bar

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.consumed += len(data)
        depth, in_string, skip_at = self._depth, self._in_string, self._skip_at
        for match in _MARKS.finditer(data):
            at = match.start()
            if at == skip_at:
                continue
            mark = data[at]
            if in_string:
                if mark == 0x5C:  # backslash: the next character is escaped
                    skip_at = at + 1
                elif mark == 0x22:
                    in_string = False
            elif mark == 0x22:
                in_string = True
            elif mark in (0x5B, 0x7B):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ImportRefused(f"{self._name} nests deeper than any export does")
            elif mark in (0x5D, 0x7D):
                depth -= 1
        self._depth, self._in_string = depth, in_string
        self._skip_at = skip_at - len(data) if skip_at >= len(data) else -1
        return data
