"""Lists of entry numbers packed small, and read back by C calls (no numpy).

Why: a word index holding each posting as four bytes is most of the size of the history it
indexes (82 MiB for 100 MiB). Here a word's entries are written as the gaps between them, one
byte each; a gap of 256 or more is written as a 0 byte, its value following the list as a
varint (rare: common words have small gaps, rare words have few entries). A common word, whose
gaps are mostly below 16, takes half a byte per gap instead (0 again for a larger one).

Reading stays in C however long the list: ``list(bytes)`` and ``itertools.accumulate`` turn the
gaps back into numbers, a table of two bytes per byte value unfolds half-byte gaps, and only the
escaped gaps take a Python step each. (A bitmap would be smaller still for the commonest words,
but unfolding one costs a step per entry of the segment: 4-10 times slower to read.)
"""

from __future__ import annotations

from itertools import accumulate
from operator import sub
from typing import Any

__all__ = ["pack_ids", "pack_ints", "read_varint", "unpack_ids", "unpack_ints", "varint"]

# Byte value -> its two half-byte gaps as two bytes, the low half first.
_HALVES = [bytes((b & 15, b >> 4)) for b in range(256)]


HALF_ESCAPES = 32  # half bytes when at most one gap in this many needs escaping


def varint(n: int) -> bytes:
    """``n`` (>= 0) in seven bits a byte, lowest first; the high bit says more follows."""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: Any, pos: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` and where it ends."""
    n = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def pack_ints(values: list[int]) -> bytes:
    """Positive integers as a byte each, those of 256 or more as 0 plus a varint after all."""
    if not values or max(values) < 256:
        return bytes(values)
    head = bytes(v if v < 256 else 0 for v in values)
    return head + b"".join(varint(v) for v in values if v >= 256)


def unpack_ints(buf: Any, pos: int, n: int) -> tuple[Any, int]:
    """``n`` integers packed by ``pack_ints`` at ``buf[pos]`` (bytes, or a list when some were
    escaped), and where they end."""
    return _escaped(bytes(buf[pos : pos + n]), buf, pos + n)


def _escaped(raw: bytes, buf: Any, pos: int) -> tuple[Any, int]:
    """``raw`` with each 0 replaced by the next varint at ``buf[pos]``; where they end."""
    at = raw.find(0)
    if at < 0:
        return raw, pos
    values = list(raw)
    while at >= 0:
        values[at], pos = read_varint(buf, pos)
        at = raw.find(0, at + 1)
    return values, pos


def pack_ids(ids: list[int]) -> tuple[bool, bytes]:
    """Ascending entry numbers: (whether as half-byte gaps, the bytes). Half bytes only for a
    list with few gaps of 16 or more: each escaped gap takes a Python step to read."""
    gaps = list(map(sub, ids, [-1, *ids[:-1]]))
    whole = pack_ints(gaps)
    large = [g for g in gaps if g >= 16]
    if len(gaps) < 16 or len(large) * HALF_ESCAPES > len(gaps):
        return False, whole
    small = [g if g < 16 else 0 for g in gaps]
    if len(small) % 2:
        small.append(0)
    halves = bytes(map(int.__or__, small[0::2], map((4).__rlshift__, small[1::2])))
    return True, halves + b"".join(map(varint, large))


def unpack_ids(buf: Any, pos: int, n: int, halves: bool) -> tuple[list[int], int]:
    """``n`` entry numbers packed by ``pack_ids`` at ``buf[pos]``, and where they end."""
    if halves:
        end = pos + (n + 1) // 2
        raw = b"".join(map(_HALVES.__getitem__, bytes(buf[pos:end])))[:n]
        gaps, pos = _escaped(raw, buf, end)
    else:
        gaps, pos = unpack_ints(buf, pos, n)
    ids = list(accumulate(gaps, initial=-1))
    del ids[0]
    return ids, pos
