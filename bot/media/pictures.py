"""The pictures a request carries: chosen and made into data URLs once per turn, off the loop,
within a count and a byte cap.

WHY: four 9.5 MB pictures made every request of that person 50.7 MB, and the data URLs were
rebuilt on the event loop for each round of the tool loop (three concurrent turns: RSS 619 MB).
Now the turn's newest pictures are read and encoded once, in a media thread, and every round's
request refers to the same strings, spliced into its body without being scanned again
(bot/llm/body.py); older pictures, those past the caps and those that cannot be read go to the
model as "[image: caption]" text (bot/agent/prompt.py).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from bot.llm.body import Spliced
from bot.media.rules import IMAGE_TYPES
from bot.media.threads import off_loop
from memory.media import IMAGE_REF, is_ref


class Pictures:
    """A turn's chosen picture references with their data URLs."""

    def __init__(self, chosen: list[tuple[dict[str, Any], str]] | None = None) -> None:
        # Keyed by the reference part itself (its id; the parts are held here, so no other
        # object can take their ids while this lives): the same file sent twice is two parts.
        self._parts = chosen or []
        self._urls = {id(part): url for part, url in self._parts}

    def url(self, part: dict[str, Any]) -> str | None:
        """The data URL for this reference part of the history, or None: send it as text."""
        return self._urls.get(id(part))

    def __bool__(self) -> bool:
        return bool(self._parts)

    @property
    def size(self) -> int:
        """Characters of data URL the request carries."""
        return sum(len(url) for _, url in self._parts)


async def load_pictures(
    history: list[dict[str, Any]],
    read: Callable[[dict[str, Any]], bytes | None],
    *,
    max_images: int,
    max_bytes: int,
) -> Pictures:
    """The newest pictures of `history`, at most `max_images` of them and `max_bytes` of
    pictures together (0 images: none, the model has no vision), read by `read` (from the
    workspace) and encoded in a media thread."""
    if max_images <= 0:
        return Pictures()
    candidates = [
        part
        for message in reversed(history)
        if isinstance(content := message.get("content"), list)
        for part in reversed(content)
        if is_ref(part) and part.get("type") == IMAGE_REF and part.get("mime") in IMAGE_TYPES
    ]
    if not candidates:
        return Pictures()
    return await off_loop(lambda: _choose(candidates, read, max_images, max_bytes))


def _choose(
    candidates: list[dict[str, Any]],
    read: Callable[[dict[str, Any]], bytes | None],
    max_images: int,
    max_bytes: int,
) -> Pictures:
    """Newest first: each readable picture that still fits both caps (an older, smaller one
    may fit where a newer one did not). A file sent twice is read and encoded once."""
    chosen: list[tuple[dict[str, Any], str]] = []
    files: dict[tuple[str, str], tuple[str, int] | None] = {}  # → (data URL, bytes)
    total = 0
    for part in candidates:
        if len(chosen) >= max_images:
            break
        key = (str(part.get("sha256")), str(part.get("ext")))
        if key not in files:
            data = read(part)
            fits = data is not None and total + len(data) <= max_bytes
            files[key] = (_data_url(str(part["mime"]), data), len(data)) if fits and data else None
        found = files[key]
        if found is None or total + found[1] > max_bytes:
            continue
        chosen.append((part, found[0]))
        total += found[1]
    return Pictures(chosen)


def _data_url(mime: str, data: bytes) -> Spliced:
    """Spliced into the request body as it is (base64: nothing to escape; bot/llm/body.py)."""
    return Spliced(f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}")
