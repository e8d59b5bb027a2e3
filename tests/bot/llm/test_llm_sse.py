"""The event-stream reader (bot/llm/sse.py) on bodies cut anywhere: TCP may hand a streamed
answer over in pieces that end mid-line, mid-CRLF or mid-character of UTF-8."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.llm.sse import ErrorEvent, events

BODY = (
    b": keep-alive\r\n\r\n"
    b'data: {"n": 1, "text": "th\xc3\xa9"}\r\n\r\n'
    b'event: message\ndata: {"n": 2,\ndata: "text": "two lines"}\n\n'
    b'data:{"n": 3}\r\r'
    b"data: [DONE]\n\n"
    b'data: {"n": 4}\n\n'  # after [DONE]: read, not taken
)
WANTED = [{"n": 1, "text": "thé"}, {"n": 2, "text": "two lines"}, {"n": 3}]
# Line ends all LF (how OpenAI and llama.cpp write): the reader's quick path, and its way back to
# the line-by-line one when a CR turns up part way
LF_BODY = (
    b'data: {"n": 1, "text": "th\xc3\xa9"}\n\n\n\n'
    b": keep-alive\n\n"
    b'data:{"n": 2}\n\n'
    b'event: message\ndata: {"n": 3,\ndata: "text": "two lines"}\n\n'
    b'data:  {"n": 4} \n\n'
    b'data: {"n": 5}\r\n\r\n'
    b'data: {"n": 6}\n\n'
    b"data: [DONE]\n\n"
    b'data: {"n": 7}\n\n'
)
LF_WANTED = [
    {"n": 1, "text": "thé"},
    {"n": 2},
    {"n": 3, "text": "two lines"},
    {"n": 4},
    {"n": 5},
    {"n": 6},
]


async def pieces(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read(*parts: bytes) -> list[Any]:
    return [event async for batch in events(pieces(*parts)) for event in batch]


async def test_a_body_cut_at_any_byte_gives_the_same_events() -> None:
    assert await read(BODY) == WANTED
    for cut in range(1, len(BODY)):
        assert await read(BODY[:cut], BODY[cut:]) == WANTED, cut
    assert await read(*(BODY[i : i + 1] for i in range(len(BODY)))) == WANTED


async def test_a_body_of_lf_line_ends_cut_at_any_byte_gives_the_same_events() -> None:
    assert await read(LF_BODY) == LF_WANTED
    for cut in range(1, len(LF_BODY)):
        assert await read(LF_BODY[:cut], LF_BODY[cut:]) == LF_WANTED, cut
    assert await read(*(LF_BODY[i : i + 1] for i in range(len(LF_BODY)))) == LF_WANTED


async def test_an_event_that_is_not_json_fails_as_json_does() -> None:
    for data in (b"{", b'{"n": 1} x', b"\xff", b"", b'{"n": 1}{"n": 2}'):
        with pytest.raises(ValueError):
            await read(b"data: " + data + b"\n\n")


async def test_the_body_is_read_to_its_end_after_done() -> None:
    read_parts: list[bytes] = []

    async def recorded() -> AsyncIterator[bytes]:
        for part in (b"data: [DONE]\n\n", b"trailing", b"bytes"):
            read_parts.append(part)
            yield part

    assert [batch async for batch in events(recorded())] == []
    assert len(read_parts) == 3  # the connection can go back to the pool


async def test_events_that_arrive_together_are_handed_on_together() -> None:
    together = b'data: {"n": 1}\n\ndata: {"n": 2}\n\ndata: {"n": 3}'
    batches = [batch async for batch in events(pieces(together, b"\n\n"))]
    assert batches == [[{"n": 1}, {"n": 2}], [{"n": 3}]]


async def test_an_unfinished_last_event_is_dropped_and_an_error_event_raises() -> None:
    assert await read(b'data: {"n": 1}\n\ndata: {"n": 2}\n') == [{"n": 1}]
    got: list[Any] = []
    with pytest.raises(ErrorEvent, match="overloaded"):
        body = b'data: {"n": 1}\n\ndata: {"error": {"message": "overloaded"}}\n\n'
        async for batch in events(pieces(body)):
            got.extend(batch)
    assert got == [{"n": 1}]  # what came before the error, in the same piece, is handed on
