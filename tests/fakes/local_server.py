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
