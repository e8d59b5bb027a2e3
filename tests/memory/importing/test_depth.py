"""The nesting cap before the JSON parser: refused exactly when a file nests deeper than
MAX_DEPTH, whatever its strings hold (brackets, quotes, backslashes) and wherever the chunks
it is read in are cut."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from memory.importing.depth import MAX_DEPTH, DepthGuard
from memory.importing.sources import ImportRefused

PIECES = ["[", "]", "{", "}", '"', "\\", "a", " ", "\\\\", '\\"', "é", "\n"]


class Chunked(io.BytesIO):
    """A file read back in chunks of 1 to 7 bytes, as a slow stream might hand them over."""

    def __init__(self, data: bytes, rnd: random.Random) -> None:
        super().__init__(data)
        self.rnd = rnd

    def read(self, size: int | None = -1) -> bytes:
        return super().read(self.rnd.randint(1, 7))


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    return 0


@pytest.mark.parametrize("seed", range(4))
def test_refused_exactly_past_the_cap_wherever_chunks_are_cut(seed: int) -> None:
    rnd = random.Random(seed)

    def text() -> str:
        return "".join(rnd.choice(PIECES) for _ in range(rnd.randint(0, 12)))

    for _ in range(200):
        value: Any = text()
        for _ in range(rnd.choice([3, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 80])):
            value = [value, text()] if rnd.random() < 0.5 else {text(): value}
        data = json.dumps(value, ensure_ascii=rnd.random() < 0.5).encode()
        guard = DepthGuard(Chunked(data, rnd))
        try:
            while guard.read(65536):
                pass
            refused = False
        except ImportRefused:
            refused = True
        assert refused == (_depth(value) > MAX_DEPTH), data[:200]
