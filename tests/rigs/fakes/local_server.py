"""Starting a fake far end: an aiohttp app on a free port of 127.0.0.1, quick to shut down."""

from __future__ import annotations

import ssl

from aiohttp import web


async def serve_locally(
    app: web.Application, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Serve `app` on 127.0.0.1 and return its runner and port. No access log: URLs can carry
    a bot token, and a fake must not be the one that leaks it. A short shutdown timeout keeps a
    client's pending long poll from slowing every test's teardown."""
    runner = web.AppRunner(app, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


CHUNK = 64 * 1024


async def stream_file(
    request: web.Request, data: bytes, hidden: int, served: dict[str, int], key: str
) -> web.StreamResponse:
    """`data` then `hidden` zero bytes, written in chunks with no Content-Length (as a server
    that lies about a file's size would), counting in `served[key]` the bytes the client took
    before it hung up: a client that stops reading makes the writes fail."""
    response = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
    await response.prepare(request)
    served[key] = 0
    zeros = bytes(CHUNK)
    left = hidden
    pieces = (data[start : start + CHUNK] for start in range(0, len(data), CHUNK))
    try:
        for piece in pieces:
            await response.write(piece)
            served[key] += len(piece)
        while left > 0:
            piece = zeros[: min(CHUNK, left)]
            await response.write(piece)
            served[key] += len(piece)
            left -= len(piece)
        await response.write_eof()
    except (ConnectionError, RuntimeError):  # the client hung up
        pass
    return response
