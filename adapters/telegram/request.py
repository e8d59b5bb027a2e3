"""python-telegram-bot's HTTP on aiohttp instead of httpx.

PTB's default HTTPXRequest spends more CPU per Bot API call (httpx, httpcore) than the rest of a
turn; aiohttp is already here (discord.py runs on it) and costs a fraction of that. This is a
`telegram.request.BaseRequest`: PTB still builds the requests and turns statuses and bodies into
its errors; we only move bytes, with the same pool and timeouts as HTTPXRequest:

- pool: at most `connection_pool_size` requests at once; one more waits up to `pool_timeout`,
  then fails with TimedOut ("Pool timeout", like PTB), never sent;
- connect and read timeouts per socket operation (aiohttp's sock_connect / sock_read);
- write timeout: aiohttp has none, so uploads (the only bodies large enough to stall) are sent
  in chunks and fail with TimedOut when one chunk takes longer than the write timeout; form
  posts of plain fields fit in the socket buffer at once.

Network failures become TimedOut or NetworkError, as with HTTPXRequest; their text never holds
the URL (it holds the bot token).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import urllib.request
from collections.abc import AsyncIterator
from typing import IO
from urllib.parse import urlsplit

import aiohttp
import httpx
from telegram._utils.defaultvalue import DefaultValue
from telegram._utils.types import ODVInput
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

from bot.media.rules import read_within

FORM = "application/x-www-form-urlencoded"
CHUNK = 64 * 1024  # bytes of an upload written (and timed) at a time
POOL_TIMEOUT_MESSAGE = (
    "Pool timeout: All connections in the connection pool are occupied. Request was *not* sent "
    "to Telegram. Consider adjusting the connection pool size or the pool timeout."
)


class AiohttpRequest(BaseRequest):
    """A BaseRequest on one aiohttp session (made by the first request, in the running loop)."""

    def __init__(
        self,
        connection_pool_size: int = 256,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = 1.0,
        media_write_timeout: float | None = 20.0,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read = read_timeout
        self._write = write_timeout
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._media_write = media_write_timeout
        self._slots = asyncio.Semaphore(connection_pool_size)
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[float | None, float | None], aiohttp.ClientTimeout] = {}
        self._proxies: dict[str, str | None] = {}  # scheme://host:port → proxy URL or None

    @property
    def read_timeout(self) -> float | None:
        return self._read

    async def initialize(self) -> None:
        """The session is made by the first request: one initialized and never used (PTB's
        getUpdates request when getMe fails) then holds nothing that needs closing."""
        if self._session is not None and self._session.closed:
            self._session = None

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    def _new_session(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._pool_size,
            limit_per_host=0,
            ssl=httpx.create_ssl_context(),  # the CA store PTB's httpx would trust (certifi)
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers={"User-Agent": self.USER_AGENT},
            cookie_jar=aiohttp.DummyCookieJar(),  # the Bot API sets no cookies
        )

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
        pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        session = self._session
        if session is None:
            session = self._session = self._new_session()
        elif session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        uploads = request_data is not None and request_data.contains_files
        read = self._read if isinstance(read_timeout, DefaultValue) else read_timeout
        connect = self._connect if isinstance(connect_timeout, DefaultValue) else connect_timeout
        pool = self._pool if isinstance(pool_timeout, DefaultValue) else pool_timeout
        if isinstance(write_timeout, DefaultValue):
            write = self._media_write if uploads else self._write
        else:
            write = write_timeout
        limits = self._timeout(connect, read)
        await self._acquire(pool)
        try:
            if uploads:
                assert request_data is not None
                return await self._upload(session, url, method, request_data, write, limits)
            if request_data is None or not request_data.parameters:
                return await self._send(session, url, method, None, None, limits)
            body = request_data.url_encoded_parameters().encode()
            return await self._send(session, url, method, body, {"Content-Type": FORM}, limits)
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError is one too
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {_without(url, exc)}") from exc
        finally:
            self._slots.release()

    async def retrieve_within(self, url: str, limit: int) -> bytes:
        """A file of the Bot API (GET `url`), streamed and stopped once it brings more than
        `limit` bytes (bot.media.rules.TooLarge): what PTB's `retrieve` would read whole.
        TimedOut or NetworkError as for any call, never with the URL (it holds the token)."""
        session = self._session
        if session is None:
            session = self._session = self._new_session()
        elif session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        await self._acquire(self._pool)
        try:
            async with session.get(
                url,
                timeout=self._timeout(self._connect, self._read),
                allow_redirects=False,
                proxy=self._proxy(url),
            ) as response:
                if response.status != 200:
                    raise NetworkError(f"file download answered HTTP {response.status}")
                chunks = response.content.iter_chunked(CHUNK)
                return await read_within(chunks, limit, response.content_length)
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {_without(url, exc)}") from exc
        finally:
            self._slots.release()

    async def _acquire(self, pool_timeout: float | None) -> None:
        """A place in the pool, waiting at most `pool_timeout`; TimedOut if none came free."""
        if not self._slots.locked():
            await self._slots.acquire()  # free: returns at once
            return
        try:
            async with asyncio.timeout(pool_timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise TimedOut(POOL_TIMEOUT_MESSAGE) from None

    def _timeout(self, connect: float | None, read: float | None) -> aiohttp.ClientTimeout:
        key = (connect, read)
        found = self._timeouts.get(key)
        if found is None:  # a handful of combinations: one per kind of call
            found = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
            self._timeouts[key] = found
        return found

    def _proxy(self, url: str) -> str | None:
        """The proxy the environment sets for `url` (HTTPS_PROXY, NO_PROXY…), as httpx would
        use; looked up once per server. (aiohttp's trust_env would look it up, and .netrc,
        in a thread on every request: that cost more than the request.)"""
        origin = url[: url.find("/", url.find("//") + 2)] if "//" in url else url
        if origin not in self._proxies:
            self._proxies[origin] = env_proxy(origin)
        return self._proxies[origin]

    async def _send(
        self,
        session: aiohttp.ClientSession,
        url: str,
        method: str,
        body: bytes | AsyncIterator[bytes] | None,
        headers: dict[str, str] | None,
        limits: aiohttp.ClientTimeout,
    ) -> tuple[int, bytes]:
        async with session.request(
            method,
            url,
            data=body,
            headers=headers,
            timeout=limits,
            allow_redirects=False,
            proxy=self._proxy(url),
        ) as response:
            return response.status, await response.read()

    async def _upload(
        self,
        session: aiohttp.ClientSession,
        url: str,
        method: str,
        request_data: RequestData,
        write_timeout: float | None,
        limits: aiohttp.ClientTimeout,
    ) -> tuple[int, bytes]:
        """multipart/form-data: the fields, then the files, each chunk's write timed."""
        boundary = secrets.token_hex(16)
        body = multipart_body(boundary, request_data.json_parameters, request_data.multipart_data)
        headers = {
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(len(body)),  # else aiohttp would send it chunked
        }
        async with asyncio.timeout(None) as deadline:
            chunks = _timed_chunks(body, write_timeout, deadline)
            return await self._send(session, url, method, chunks, headers, limits)


def env_proxy(origin: str) -> str | None:
    """The proxy URL the environment gives for `origin` ("https://host:port"), or None."""
    parts = urlsplit(origin)
    host = parts.hostname or ""
    if not host or urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(parts.scheme) or proxies.get("all")


def multipart_body(
    boundary: str, fields: dict[str, str], files: dict[str, tuple[str, bytes | IO[bytes], str]]
) -> bytes:
    """RFC 7578 form data: one part per field, then one per file (name, filename, MIME type)."""
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(_part_head(boundary, name, None, None) + value.encode())
    for name, (filename, content, mime) in files.items():
        data = content if isinstance(content, bytes) else content.read()
        parts.append(_part_head(boundary, name, filename, mime) + data)
    return b"\r\n".join(parts) + f"\r\n--{boundary}--\r\n".encode()


def _part_head(boundary: str, name: str, filename: str | None, mime: str | None) -> bytes:
    disposition = f'form-data; name="{_quoted(name)}"'
    if filename is not None:
        disposition += f'; filename="{_quoted(filename)}"'
    head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
    if mime:
        head += f"Content-Type: {mime}\r\n"
    return (head + "\r\n").encode()


def _quoted(value: str) -> str:
    """A name or filename inside its quotes, escaped as HTML5 forms (and httpx) do: UTF-8 as is,
    a quote or line break percent-encoded, so none can end the header early."""
    return value.translate(_FORM_ESCAPES)


_FORM_ESCAPES = str.maketrans({'"': "%22", "\r": "%0D", "\n": "%0A"})


async def _timed_chunks(
    body: bytes, write_timeout: float | None, deadline: asyncio.Timeout
) -> AsyncIterator[bytes]:
    """The body in CHUNK pieces; aiohttp asks for the next once it has written (drained) the
    last, so each piece must be asked for within `write_timeout` of being handed over."""
    loop = asyncio.get_running_loop()
    view = memoryview(body)
    for start in range(0, len(body), CHUNK):
        if write_timeout is not None:
            _move(deadline, loop.time() + write_timeout)
        yield bytes(view[start : start + CHUNK])
    _move(deadline, None)  # written: from here the read timeout applies


def _move(deadline: asyncio.Timeout, when: float | None) -> None:
    """Reschedule, unless the request is already over (an early answer ends it while aiohttp
    may still be writing the body)."""
    with contextlib.suppress(RuntimeError):
        deadline.reschedule(when)


def _without(url: str, exc: BaseException) -> str:
    """An error's text without the URL or its path (they hold the bot token)."""
    text = str(exc)
    path = url.split("://", 1)[-1].partition("/")[2]
    for secret in (url, path):
        if secret:
            text = text.replace(secret, "…")
    return text
