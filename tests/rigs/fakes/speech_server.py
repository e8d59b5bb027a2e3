"""A small OpenAI-compatible speech server on 127.0.0.1 for tests: the far end, never our code.

`POST /v1/audio/speech` takes the JSON the openai SDK sends (`model`, `input`, `voice`,
`response_format`, …), records it in `requests`, and refuses what OpenAI refuses: no input, an
input over 4,096 characters, no voice, a format it does not know (400, OpenAI's error shape).
It answers with audio in the format asked: for "opus" a real OGG/Opus stream (`ogg_opus`: the
OpusHead and OpusTags pages with their checksums, then pages of silent Opus frames, about one
per 20 characters read), for another format a few bytes starting as that format does. Answers can
be scripted with `queue(...)`: a `Status(code, body)`, a `Delay(seconds, item)`, raw bytes (a
server that ignores response_format), or `DOWN` (the connection closed before any answer).
"""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

from aiohttp import web

from tests.rigs.fakes.local_server import serve_locally
from tests.rigs.fakes.openai_server import Delay, Status

FORMATS = {"mp3", "opus", "aac", "flac", "wav", "pcm"}
MAX_INPUT = 4096
DOWN = "down"  # queue it: the connection is closed without an answer
_MAGIC = {"mp3": b"ID3\x04", "aac": b"\xff\xf1", "flac": b"fLaC", "wav": b"RIFF", "pcm": b"\0\0"}


class FakeSpeech:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []
        self.script: deque[Any] = deque()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._arrived = asyncio.Condition()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def inputs(self) -> list[str]:
        """The texts asked to be read aloud, in order."""
        return [str(r.get("input")) for r in self.requests]

    def queue(self, *items: Any) -> None:
        self.script.extend(items)

    async def wait_requests(self, count: int, within: float = 15.0) -> None:
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    async def start(self) -> FakeSpeech:
        app = web.Application()
        app.router.add_post("/v1/audio/speech", self._speech)
        self._runner, self.port = await serve_locally(app)
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _speech(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return _refusal(400, "We could not parse the JSON body of your request.")
        self.requests.append(body)
        self.authorizations.append(request.headers.get("Authorization"))
        async with self._arrived:
            self._arrived.notify_all()
        item: Any = self.script.popleft() if self.script else None
        while isinstance(item, Delay):
            await asyncio.sleep(item.seconds)
            item = item.item
        if item == DOWN:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        if isinstance(item, Status):
            return web.json_response(item.body or {}, status=item.code)
        if isinstance(item, bytes):
            return web.Response(body=item, content_type="application/octet-stream")
        text = body.get("input")
        if not isinstance(text, str) or not text:
            return _refusal(400, "Missing required parameter: 'input'.")
        if len(text) > MAX_INPUT:
            return _refusal(400, f"String should have at most {MAX_INPUT} characters")
        if not body.get("voice"):
            return _refusal(400, "Missing required parameter: 'voice'.")
        form = body.get("response_format", "mp3")
        if form not in FORMATS:
            return _refusal(400, f"Invalid value for 'response_format': {form!r}.")
        audio = ogg_opus(len(text) // 20 + 1) if form == "opus" else _MAGIC.get(form, b"") + b"0"
        return web.Response(body=audio, content_type=f"audio/{'ogg' if form == 'opus' else form}")


def _refusal(status: int, message: str) -> web.Response:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return web.json_response({"error": error}, status=status)


# ---- OGG/Opus -------------------------------------------------------------------------------


def ogg_opus(frames: int) -> bytes:
    """An OGG/Opus stream of `frames` 20 ms frames of silence (RFC 7845): what a player plays."""
    head = b"OpusHead" + struct.pack("<BBHIhB", 1, 1, 312, 48000, 0, 0)
    tags = b"OpusTags" + struct.pack("<I", 4) + b"fake" + struct.pack("<I", 0)
    silence = b"\xf8\xff\xfe"  # a CELT 20 ms frame of silence
    pages = [_page(0, 0, 0x02, [head]), _page(1, 0, 0x00, [tags])]
    granule, sequence = 0, 2
    for start in range(0, frames, 50):
        count = min(50, frames - start)
        granule += 960 * count
        last = start + count >= frames
        pages.append(_page(sequence, granule, 0x04 if last else 0x00, [silence] * count))
        sequence += 1
    return b"".join(pages)


def is_ogg_opus(data: bytes) -> bool:
    """Whether `data` begins an OGG stream whose first packet is an OpusHead, checksum right."""
    if len(data) < 27 or not data.startswith(b"OggS"):
        return False
    segments = data[26]
    size = 27 + segments + sum(data[27 : 27 + segments])
    page = data[:size]
    unchecked = page[:22] + b"\0\0\0\0" + page[26:]
    return (
        struct.unpack("<I", page[22:26])[0] == _crc(unchecked)
        and page[27 + segments :].startswith(b"OpusHead")
    )


def _page(sequence: int, granule: int, flags: int, packets: list[bytes]) -> bytes:
    lacing = b"".join(bytes([255] * (len(p) // 255) + [len(p) % 255]) for p in packets)
    header = struct.pack("<4sBBqIII", b"OggS", 0, flags, granule, 1, sequence, 0)
    page = header + bytes([len(lacing)]) + lacing + b"".join(packets)
    return page[:22] + struct.pack("<I", _crc(page)) + page[26:]


def _crc(data: bytes) -> int:
    """OGG's CRC-32 (polynomial 0x04C11DB7, not reflected, no final xor)."""
    crc = 0
    for byte in data:
        crc ^= byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ 0x04C11DB7) if crc & 0x80000000 else crc << 1
            crc &= 0xFFFFFFFF
    return crc
