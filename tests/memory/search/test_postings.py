"""The packed lists of the word index (memory/search/postings.py) read back exactly what was
written, whatever the gaps: dense lists in half bytes, sparse ones with escaped gaps."""

from __future__ import annotations

import random

import pytest

from memory.search import postings


@pytest.mark.parametrize("seed", range(40))
def test_entry_numbers_read_back_as_written(seed: int) -> None:
    r = random.Random(seed)
    size = r.choice([10, 300, 40_000, 200_000])
    share = r.choice([0.001, 0.01, 0.1, 0.5, 0.95])
    ids = sorted(r.sample(range(size), max(1, int(size * share))))
    halves, body = postings.pack_ids(ids)
    tail = b"\x05\x81\x01"  # what follows in the record must not be read
    got, end = postings.unpack_ids(b"\x07" + body + tail, 1, len(ids), halves)
    assert got == ids
    assert end == 1 + len(body)


def test_large_values_are_escaped_and_read_back() -> None:
    values = [1, 255, 256, 2, 70_000, 3, 2**31, 9]
    packed = postings.pack_ints(values)
    got, end = postings.unpack_ints(packed + b"\x00", 0, len(values))
    assert list(got) == values and end == len(packed)
    assert postings.read_varint(postings.varint(2**40 + 5), 0) == (2**40 + 5, 6)
