"""The openai SDK's HTTP on aiohttp: an httpx2 transport, so the SDK is unchanged above it.

The SDK's default transport (httpcore) cost more CPU per chat completion than the rest of a
turn. The SDK's own aiohttp client (`DefaultAioHttpClient`) reports a refused connection as a
connect *timeout*, so "the model provider could not be reached" would read "timed out"; this
transport maps aiohttp's errors to the httpx2 errors httpcore raises for the same failure, which
the SDK turns into APITimeoutError (timeouts) or APIConnectionError (everything else).

Timeouts come per request from the SDK (httpx2's connect / read / pool; aiohttp has no write
timeout, and a JSON body fits the socket buffer); redirects, retries and headers stay the
SDK's and httpx2's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import httpx2

MAX_CONNECTIONS = 1000  # the SDK's own default pool size


class AiohttpTransport(httpx2.AsyncBaseTransport):
    """One aiohttp session (created on first use, in the running loop) for every request."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._timeouts: dict[tuple[Any, Any, Any], aiohttp.ClientTimeout] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self._max_connections,
                limit_per_host=0,
                ssl=httpx2.create_ssl_context(),  # the CA store the SDK would trust (certifi)
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),  # httpx2 keeps the cookies, if any
                auto_decompress=False,  # httpx2 decodes Content-Encoding itself
            )
        try:
            body: bytes | httpx2.AsyncByteStream | None = request.content or None
        except httpx2.RequestNotRead:  # a streamed body (file uploads)
            body = request.stream if isinstance(request.stream, httpx2.AsyncByteStream) else None
        try:
            response = await self._session.request(
                request.method,
                str(request.url),
                headers=request.headers.multi_items(),
                data=body,
                allow_redirects=False,
                timeout=self._timeout(request.extensions.get("timeout") or {}),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _mapped(exc)(str(exc), request=request) from exc
        return httpx2.Response(
            response.status,
            headers=response.raw_headers,
            stream=_Body(response, request),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": _reason(response)},
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _timeout(self, timeout: dict[str, float | None]) -> aiohttp.ClientTimeout:
        connect, read, pool = timeout.get("connect"), timeout.get("read"), timeout.get("pool")
        key = (connect, read, pool)
        found = self._timeouts.get(key)
        if found is None:  # the SDK sends the same few timeouts every time
            acquire = None if connect is None or pool is None else connect + pool
            found = aiohttp.ClientTimeout(
                total=None, connect=acquire, sock_connect=connect, sock_read=read
            )
            self._timeouts[key] = found
        return found


class _Body(httpx2.AsyncByteStream):
    """The response body as aiohttp receives it; closing gives the connection back."""

    def __init__(self, response: aiohttp.ClientResponse, request: httpx2.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _mapped(exc)(str(exc), request=self._request) from exc

    async def aclose(self) -> None:
        self._response.release()


def _reason(response: aiohttp.ClientResponse) -> bytes:
    return (response.reason or "").encode("latin-1", "replace")


def _mapped(exc: BaseException) -> type[httpx2.TransportError]:
    """The httpx2 error httpcore would have raised for the same failure."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx2.ConnectTimeout
    if isinstance(exc, TimeoutError):  # aiohttp's read timeouts are TimeoutErrors too
        return httpx2.ReadTimeout
    if isinstance(exc, aiohttp.ClientConnectorError):  # refused, unreachable, name not found
        return httpx2.ConnectError
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientResponseError):
        return httpx2.RemoteProtocolError
    return httpx2.ReadError
