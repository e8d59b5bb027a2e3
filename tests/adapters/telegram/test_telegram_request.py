"""The Bot API transport on aiohttp, driven through the real python-telegram-bot `Bot`.

What a user of the bot would notice: a file sent arrives whole with its name and caption; a full
connection pool or a silent server makes a call fail with TimedOut within its timeout instead of
hanging; an unreachable server is a NetworkError that does not carry the bot token.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from telegram import Bot
from telegram.error import NetworkError, TimedOut

from adapters.telegram.request import AiohttpRequest
from tests.rigs.fakes.local_server import serve_locally
from tests.rigs.fakes.telegram_server import BOT, TOKEN
from tests.rigs.fakes.tls import self_signed

NAME = 'résumé ✓ "x"; name="chat_id.txt'
CHAT = {"id": 42, "type": "private", "first_name": "User42"}


class FarEnd:
    """A Bot API endpoint that records what arrives and can hold calls back."""

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []
        self.arrived = 0
        self.hold = asyncio.Event()
        self.hold.set()
        self.waiting = asyncio.Event()  # a call is held back

    async def handle(self, request: web.Request) -> web.Response:
        self.arrived += 1
        method = request.match_info["method"]
        if method == "getMe":
            return web.json_response({"ok": True, "result": BOT})
        self.waiting.set()
        await self.hold.wait()
        parts: dict[str, Any] = {}
        reader = await request.multipart()
        async for part in reader:
            data = await part.read()  # type: ignore[union-attr]
            parts[part.name] = (part.filename, part.headers.get("Content-Type"), bytes(data))  # type: ignore[union-attr]
        self.parts.append(parts)
        message = {"message_id": 7, "date": int(time.time()), "chat": CHAT}
        return web.json_response({"ok": True, "result": message})


@pytest.fixture
async def far_end() -> AsyncIterator[tuple[FarEnd, str]]:
    end = FarEnd()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/bot{token}/{method}", end.handle)
    runner, port = await serve_locally(app)
    try:
        yield end, f"http://127.0.0.1:{port}/bot"
    finally:
        end.hold.set()
        await runner.cleanup()


async def test_an_uploaded_file_arrives_whole_with_its_name_and_fields(
    far_end: tuple[FarEnd, str],
) -> None:
    end, base = far_end
    content = bytes(range(256)) * 1000  # binary, larger than one chunk of the upload
    async with Bot(TOKEN, base_url=base, request=AiohttpRequest()) as bot:
        await bot.send_document(42, document=content, filename=NAME, caption="here ✓")
    [parts] = end.parts
    filename, mime, data = parts["document"]
    assert data == content
    assert filename == "résumé ✓ %22x%22; name=%22chat_id.txt"  # a quote cannot end the name
    assert mime == "text/plain"  # as PTB guessed it from the name
    assert parts["chat_id"][2] == b"42"
    assert parts["caption"][2].decode() == "here ✓"


async def test_a_full_pool_fails_the_next_call_within_the_pool_timeout_unsent(
    far_end: tuple[FarEnd, str],
) -> None:
    end, base = far_end
    async with Bot(TOKEN, base_url=base, request=AiohttpRequest(1, pool_timeout=0.2)) as bot:
        end.hold.clear()
        first = asyncio.create_task(bot.send_document(42, document=b"a", filename="a.txt"))
        await end.waiting.wait()
        started = time.monotonic()
        with pytest.raises(TimedOut, match="Pool timeout"):
            await bot.send_document(42, document=b"b", filename="b.txt")
        assert time.monotonic() - started < 2
        assert end.arrived == 2  # the second call was never sent
        end.hold.set()
        await first  # and the held one still completes
    assert len(end.parts) == 1


async def test_a_silent_server_times_out_within_the_read_timeout(
    far_end: tuple[FarEnd, str],
) -> None:
    end, base = far_end
    async with Bot(TOKEN, base_url=base, request=AiohttpRequest(read_timeout=0.2)) as bot:
        end.hold.clear()
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await bot.send_document(42, document=b"x", filename="x.txt")
        assert time.monotonic() - started < 2


async def test_an_upload_the_server_stops_reading_times_out_on_the_write_timeout() -> None:
    """A peer that accepts and never reads: the socket buffers fill and the write stalls."""
    accepted: list[asyncio.StreamWriter] = []

    async def never_read(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(never_read, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    request = AiohttpRequest(media_write_timeout=0.3, read_timeout=30)
    bot = Bot(TOKEN, base_url=f"http://127.0.0.1:{port}/bot", request=request)
    try:
        await request.initialize()  # not the Bot's: its getMe would never be answered
        started = time.monotonic()
        with pytest.raises(TimedOut):
            await bot.send_document(42, document=b"z" * (64 * 1024 * 1024), filename="z")
        assert time.monotonic() - started < 10
    finally:
        await request.shutdown()
        for writer in accepted:
            writer.close()
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


async def test_an_unreachable_server_is_a_network_error_without_the_token() -> None:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        request = AiohttpRequest(connect_timeout=2)
        bot = Bot(TOKEN, base_url=f"http://127.0.0.1:{port}/bot", request=request)
        with pytest.raises(NetworkError) as raised:
            await bot.initialize()  # getMe
    await request.shutdown()
    assert not isinstance(raised.value, TimedOut)
    assert TOKEN not in str(raised.value)
    assert "aiohttp.ClientConnectorError" in str(raised.value)


async def test_the_environments_proxy_is_used(
    far_end: tuple[FarEnd, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a proxy (HTTP_PROXY), as with PTB's default httpx: the far end acts as the proxy
    for a Bot API host that does not resolve."""
    end, base = far_end
    monkeypatch.setenv("HTTP_PROXY", base.removesuffix("/bot"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with Bot(TOKEN, base_url="http://api.telegram.invalid/bot", request=AiohttpRequest()):
        pass  # getMe answered
    assert end.arrived == 1


async def test_https_trusts_the_certificates_the_environment_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSL_CERT_FILE is honoured as by PTB's httpx; a certificate not in it is refused."""
    cert, server_context = self_signed(tmp_path)
    end = FarEnd()
    app = web.Application()
    app.router.add_post("/bot{token}/{method}", end.handle)
    runner, port = await serve_locally(app, server_context)
    base = f"https://127.0.0.1:{port}/bot"
    try:
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        async with Bot(TOKEN, base_url=base, request=AiohttpRequest()):
            pass  # getMe answered over TLS
        (tmp_path / "other").mkdir()
        other, _ = self_signed(tmp_path / "other")  # a certificate of someone else
        monkeypatch.setenv("SSL_CERT_FILE", str(other))
        request = AiohttpRequest()
        with pytest.raises(NetworkError, match="certificate"):
            await Bot(TOKEN, base_url=base, request=request).initialize()
        await request.shutdown()
    finally:
        await runner.cleanup()
    assert end.arrived == 1


async def test_a_request_initialized_but_never_used_leaves_nothing_open() -> None:
    """PTB initializes its getUpdates request with the other; when getMe then fails, only the
    other is shut down, and an open session would be reported on stderr at exit."""
    request = AiohttpRequest()
    await request.initialize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del request
        gc.collect()
    assert not [w for w in caught if "Unclosed" in str(w.message)]
