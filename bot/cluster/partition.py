"""Which partition a user is in, and the partition ranges a worker is given.

One user's messages must always go to the same partition (one worker at a time handles a
partition, so the user's order and the single writer of their workspace hold across machines).
Python's hash() is salted per process, so the hash is hashlib's: every process on every machine
computes the same partition for a key, today and after an upgrade.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable


def partition_of(user_key: str, partitions: int) -> int:
    """The partition (0 … partitions-1) of a user key."""
    digest = hashlib.blake2b(user_key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


def serves(partitions: list[int], count: int) -> Callable[[str], bool]:
    """Whether a worker of these partitions (of `count`) serves a user key."""
    chosen = frozenset(partitions)
    return lambda user_key: partition_of(user_key, count) in chosen


class RangeError(ValueError):
    """A --partitions argument that does not name partitions of this cluster."""


def parse_ranges(text: str, partitions: int) -> list[int]:
    """"0-7", "3", "0-3,8-11" → the sorted partition numbers; each must be below `partitions`."""
    chosen: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise RangeError(f"{part!r} is not a partition number or a range like 0-7") from None
        if first < 0 or last < first:
            raise RangeError(f"{part!r} is not a range from a lower to a higher number")
        if last >= partitions:
            raise RangeError(
                f"{part!r} goes past the last partition, {partitions - 1} "
                f"([cluster] partitions = {partitions})"
            )
        chosen.update(range(first, last + 1))
    return sorted(chosen)


def describe_ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] → "0-2,5", for the log."""
    spans: list[str] = []
    start = prev = None
    for n in sorted(numbers):
        if start is None:
            start = prev = n
        elif prev is not None and n == prev + 1:
            prev = n
        else:
            spans.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = n
    if start is not None:
        spans.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(spans)
