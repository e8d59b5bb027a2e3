"""A chat request's JSON body, with its pictures spliced in rather than encoded.

WHY: a picture rides along as a base64 data URL of megabytes, in every request of every round
of a turn. json.dumps scans each string for characters to escape (~90 MB/s here), holding the
event loop (and the GIL, so a thread would not help): 0.27 s for a request with 25 MB of
pictures, each round, while nobody else's turn could run. A data URL the bot built itself
(`Spliced`: base64, nothing to escape) goes into the body as its bytes, copied, not scanned.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any


class Spliced(str):
    """A string that needs no JSON escaping (its maker vouches: a base64 data URL it encoded),
    put into a request body as it is. Anywhere else it is a plain str."""

    __slots__ = ()


def encode_body(kwargs: dict[str, Any]) -> bytes:
    """`kwargs` as compact UTF-8 JSON (as the SDK encodes a body: no NaN), with every image URL
    that is `Spliced` copied in as its bytes. A lone surrogate raises UnicodeEncodeError, as
    json.dumps(...).encode() does."""
    marker = f"lgsplice{secrets.token_hex(8)}"  # a string no one's text can hold by chance
    spliced: list[str] = []
    messages = kwargs.get("messages")
    if isinstance(messages, list):
        kwargs = {**kwargs, "messages": [_stand_ins(m, marker, spliced) for m in messages]}
    text = json.dumps(kwargs, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not spliced:
        return text.encode()
    pieces = re.split(f'"{marker}(\\d+)"', text)
    out: list[bytes] = []
    for index, piece in enumerate(pieces):
        if index % 2:
            out += (b'"', spliced[int(piece)].encode("ascii"), b'"')
        else:
            out.append(piece.encode())
    return b"".join(out)


def _stand_ins(message: Any, marker: str, spliced: list[str]) -> Any:
    """The message with each spliced image URL replaced by a numbered stand-in (copied where
    changed: the caller's message stays as it was)."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts = []
    for part in content:
        image = part.get("image_url") if isinstance(part, dict) else None
        if isinstance(image, dict) and isinstance(image.get("url"), Spliced):
            spliced.append(image["url"])
            parts.append({**part, "image_url": {**image, "url": f"{marker}{len(spliced) - 1}"}})
        else:
            parts.append(part)
    return {**message, "content": parts}
