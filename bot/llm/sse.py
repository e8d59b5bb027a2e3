"""Server-sent events of a streamed chat completion, read straight from the response body.

The openai SDK's stream builds a pydantic model per chunk (about a word of the answer), which
cost more CPU than the rest of a turn; the events here are plain JSON. What is read is what the
SDK read: `data:` lines joined per event (an event ends at a blank line; CR, LF and CRLF all end
a line; comments and other fields ignored), `data: [DONE]` ends the answer, an event whose JSON
has an "error" is the provider failing mid-answer, and an event left unfinished when the body
ends is dropped. The body is read to its end even after [DONE], so the connection can be
reused.

Reading is most of a streamed turn's CPU after the request itself, so the common case is cut
short: a piece of the body without a CR is split at its blank lines at once, and an event that
is one `data: ` line is taken without looking at its lines; anything else goes line by line.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable, Iterator
from typing import Any

DONE = b"[DONE]"
_FIELD = b"data: "
# The C scanner json.loads ends in, without its wrappers (an instance attribute of a decoder).
_scan: Callable[[str, int], tuple[Any, int]] = vars(json.JSONDecoder())["scan_once"]


class ErrorEvent(Exception):
    """The provider sent an error instead of the next piece of the answer."""

    def __init__(self, error: Any) -> None:
        message = error.get("message") if isinstance(error, dict) else None
        super().__init__(message if isinstance(message, str) and message else "an error event")
        self.error = error


async def events(body: AsyncIterable[bytes]) -> AsyncGenerator[list[Any], None]:
    """The events' JSON data, in order, until [DONE] or the end of the body: a list per piece
    of the body received (the events that arrived together, handed on together). An error
    event is raised after the events before it are handed on."""
    decoder = _Decoder()
    buffer = b""  # the start of a line not ended yet (or, on the fast path, of an event)
    async for received in body:
        if decoder.done:
            continue  # read on: the rest of the body, so the connection goes back to the pool
        buffer += received
        if not decoder.data and b"\r" not in buffer:
            # Only LF ends a line here, so "\n\n" is a blank line; the buffer starts a line.
            end = buffer.rfind(b"\n\n")
            if end < 0:
                continue
            payloads = decoder.blocks(buffer[:end].split(b"\n\n"))
            buffer = buffer[end + 2 :]
        else:
            lines = buffer.splitlines(keepends=True)
            # An unfinished line waits for the rest, and so does a CR: its LF may come next.
            buffer = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
            payloads = decoder.feed(lines)
        for batch in _batches(payloads):
            yield batch
    if buffer.endswith(b"\r") and not decoder.done:
        for batch in _batches(decoder.feed([buffer])):
            yield batch


def _batches(payloads: Iterator[bytes]) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for payload in payloads:
        chunk = _json(payload)
        if isinstance(chunk, dict) and chunk.get("error"):
            if batch:
                yield batch
            raise ErrorEvent(chunk["error"])
        batch.append(chunk)
    if batch:
        yield batch


def _json(payload: bytes) -> Any:
    """json.loads(payload), the usual case (UTF-8, no white space around) without its wrappers;
    anything else, and every failure, is left to json.loads itself."""
    try:
        text = payload.decode()
        value, end = _scan(text, 0)
    except (UnicodeDecodeError, StopIteration, ValueError):
        return json.loads(payload)
    if end != len(text):
        return json.loads(payload)  # white space after it, or something that is not JSON
    return value


class _Decoder:
    """Lines in, each finished event's data out."""

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.done = False

    def blocks(self, blocks: list[bytes]) -> Iterator[bytes]:
        """Events split at their blank lines (each without its line ends, LF only)."""
        for block in blocks:
            if self.done:
                return
            if block.startswith(_FIELD) and b"\n" not in block:
                if block.startswith(DONE, 6):
                    self.done = True
                    return
                yield block[6:]
            else:
                yield from self.feed(block.split(b"\n"))
                yield from self.feed((b"",))

    def feed(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        for line in lines:
            line = line.rstrip(b"\r\n")
            if line:
                field, _, value = line.partition(b":")
                if field == b"data":
                    self.data.append(value[1:] if value.startswith(b" ") else value)
                continue  # comments (":…") and other fields carry nothing we read
            if not self.data:
                continue
            payload = b"\n".join(self.data)
            self.data = []
            if payload.startswith(DONE):
                self.done = True
                return
            yield payload
