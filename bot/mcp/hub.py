"""The MCP servers of [[mcp.servers]], run in a thread with its own event loop, and the tools
they offer now.

WHY a thread of their own: what a server sends is read and parsed by the SDK where its client
runs, and a server may list 10,000 tools or answer with megabytes; in the bot's loop that would
pause every person's answer. Only bounded text and small records cross to the bot's loop. A
call from a turn waits in the bot's loop (asyncio) for the other loop's answer, with its own
time limit, so even a stuck server thread cannot hold a turn for longer than the timeout.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from bot.mcp.records import Call, McpCallError
from bot.mcp.settings import McpServer
from bot.tools.tool import Arguments, Tool

if TYPE_CHECKING:
    from bot.mcp.link import ServerLink

log = logging.getLogger(__name__)

GRACE_S = 2.0  # the bot's own wait for a call: the server's timeout and this
CLOSE_S = 10.0  # the longest wait for the servers to stop at the end


class McpHub:
    """The servers, started in the background by `start`, and `tools()` they offer now."""

    def __init__(self, servers: Sequence[McpServer]) -> None:
        self._servers = tuple(server for server in servers if server.tools)
        self._links: dict[str, ServerLink] = {}
        if self._servers:
            from bot.mcp.link import ServerLink  # (the SDK: the mcp extra's, only when used)

            self._links = {
                s.name: ServerLink(s, self._offered, self._caller) for s in self._servers
            }
        self._by_server: dict[str, tuple[Tool, ...]] = {}
        self._tools: tuple[Tool, ...] = ()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        for server in servers:
            if not server.tools:
                log.warning(
                    "MCP server %s offers no tool: name those it may offer in its tools list "
                    "(none by default); not started",
                    server.name,
                )

    def tools(self) -> tuple[Tool, ...]:
        """The records of the allowed tools of the servers running now, in the config's order."""
        return self._tools

    def start(self) -> None:
        """Start the servers in the background (once; nothing to do without servers)."""
        if self._thread is not None or not self._servers:
            return
        names = ", ".join(server.name for server in self._servers)
        log.info("MCP: starting %d server(s) in the background: %s", len(self._servers), names)
        self._thread = threading.Thread(target=self._main, name="mcp-servers", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    async def aclose(self) -> None:
        """Stop the servers (a stdio server's process ends) and the thread."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        await asyncio.to_thread(thread.join, CLOSE_S)
        if thread.is_alive():
            log.warning("MCP: the servers did not stop within %g s", CLOSE_S)

    async def call(self, server: str, tool: str, args: Arguments, budget: int) -> str:
        """A call of `tool` on `server`, from the bot's loop: its result as text, or
        McpCallError (not running, timed out, broke)."""
        link, loop = self._links[server], self._loop
        if loop is None or not loop.is_running():
            raise McpCallError(f"the {server} MCP server is not running now")
        future: Future[str] = asyncio.run_coroutine_threadsafe(link.call(tool, args, budget), loop)
        try:
            waited = asyncio.wrap_future(future)
            return await asyncio.wait_for(waited, link.server.timeout_s + GRACE_S)
        except TimeoutError:
            future.cancel()
            raise McpCallError(
                f"the {server} MCP server did not answer within {link.server.timeout_s:g} s"
            ) from None

    def _caller(self, server: str) -> Call:
        async def call(tool: str, args: Arguments, budget: int) -> str:
            return await self.call(server, tool, args, budget)

        return call

    def _offered(self, server: str, tools: tuple[Tool, ...]) -> None:
        """A server's tools now (in the hub's thread): the tuple the bot reads is replaced
        whole, never changed in place."""
        self._by_server[server] = tools
        order = [s.name for s in self._servers]
        self._tools = tuple(t for name in order for t in self._by_server.get(name, ()))

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = stop = asyncio.Event()
        self._ready.set()
        tasks = [asyncio.ensure_future(link.run(stop)) for link in self._links.values()]
        await stop.wait()
        await asyncio.wait(tasks, timeout=CLOSE_S / 2)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
