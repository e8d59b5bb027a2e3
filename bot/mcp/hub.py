"""The MCP servers of [[mcp.servers]], run by a process of their own (bot/mcp/child.py), and the
tools they offer now, as records the toolbox takes like any other.

WHY a process of its own: what a server sends is read and parsed by the SDK where its client
runs, and a server may list 10,000 tools or answer with megabytes. In the bot's process, even
in another thread, that parsing holds the interpreter for up to a second (measured:
bench/mcp_bench.py) and every person's answer with it. Only checked, bounded lines cross to
the bot: the allowed tools, and each result already cut to its share. A call from a turn waits
for its line with its own time limit; a child that dies is started again, its tools absent
meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from bot.mcp.records import Call, Listed, McpCallError, record
from bot.mcp.settings import McpServer
from bot.tools.tool import Arguments, Tool

log = logging.getLogger(__name__)

GRACE_S = 2.0  # the bot's own wait for a call: the server's timeout and this
CLOSE_S = 10.0  # the longest wait for the servers to stop at the end
RESTART_S = 5.0  # a child process that ended is started again after this
MAX_LINE = 8_000_000  # a line from the child: results are cut there, far below this


class McpHub:
    """The servers, started in the background by `start`, and `tools()` they offer now."""

    def __init__(self, servers: Sequence[McpServer]) -> None:
        self._servers = {server.name: server for server in servers if server.tools}
        self._by_server: dict[str, tuple[Tool, ...]] = {}
        self._tools: tuple[Tool, ...] = ()
        self._task: asyncio.Task[None] | None = None
        self._child: asyncio.subprocess.Process | None = None
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._closing = False
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

    def offered(self, server: str) -> tuple[str, ...]:
        """The names of the tools `server` offers now (none while it is not connected)."""
        return tuple(tool.name for tool in self._by_server.get(server, ()))

    @property
    def started(self) -> tuple[str, ...]:
        """The servers it starts: those with an allow list."""
        return tuple(self._servers)

    def start(self) -> None:
        """Start the servers in the background (once; nothing to do without servers). Called
        in the bot's running loop."""
        if self._task is not None or not self._servers:
            return
        names = ", ".join(self._servers)
        log.info("MCP: starting %d server(s) in the background: %s", len(self._servers), names)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="mcp-servers")

    async def aclose(self) -> None:
        """Stop the servers (the child ends at the end of its stdin) and wait for it."""
        self._closing = True
        child, task = self._child, self._task
        if child is not None and child.stdin is not None:
            child.stdin.close()
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), CLOSE_S)
            except TimeoutError:
                log.warning("MCP: the servers did not stop within %g s", CLOSE_S)
                if child is not None and child.returncode is None:
                    child.kill()
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def call(self, server: str, tool: str, args: Arguments, budget: int) -> str:
        """A call of `tool` on `server`: its result as text, or McpCallError (not running,
        timed out, broke)."""
        child = self._child
        timeout = self._servers[server].timeout_s
        if child is None or child.stdin is None or child.returncode is not None:
            raise McpCallError(f"the {server} MCP server is not running now; try later")
        number = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        request = {"id": number, "server": server, "tool": tool, "args": args, "budget": budget}
        try:
            child.stdin.write(json.dumps(request).encode() + b"\n")
            got = await asyncio.wait_for(answer, timeout + GRACE_S)
        except TimeoutError:
            raise McpCallError(
                f"the {server} MCP server did not answer within {timeout:g} s"
            ) from None
        except (ConnectionError, RuntimeError):
            raise McpCallError(f"the {server} MCP server stopped during the call") from None
        finally:
            self._waiting.pop(number, None)
        if "error" in got:
            raise McpCallError(str(got["error"]))
        return str(got["text"])

    def _caller(self, server: str) -> Call:
        async def call(tool: str, args: Arguments, budget: int) -> str:
            return await self.call(server, tool, args, budget)

        return call

    def _offer(self, server: str, listed: list[dict[str, Any]]) -> None:
        """A server's tools now: the tuple the turns read is replaced whole."""
        config = self._servers.get(server)
        if config is None:
            return
        made = tuple(record(config, Listed(**tool), self._caller(server)) for tool in listed)
        self._by_server[server] = made
        self._tools = tuple(t for name in self._servers for t in self._by_server.get(name, ()))

    async def _run(self) -> None:
        """The child, started again whenever it ends, until closing."""
        while not self._closing:
            try:
                await self._one_child()
            except Exception:  # logged; the servers are started again
                log.exception("MCP: the servers' process failed")
            self._by_server.clear()
            self._tools = ()
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(ConnectionError("the servers' process ended"))
            if self._closing:
                return
            log.warning("MCP: the servers' process ended; started again in %g s", RESTART_S)
            await asyncio.sleep(RESTART_S)

    async def _one_child(self) -> None:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot.mcp.child",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, limit=MAX_LINE,
        )  # fmt: skip
        self._child = child
        assert child.stdin is not None and child.stdout is not None
        servers = [asdict(server) for server in self._servers.values()]
        child.stdin.write(json.dumps({"servers": servers}).encode() + b"\n")
        try:
            while line := await child.stdout.readline():
                self._heard(json.loads(line))
        finally:
            if child.returncode is None and not self._closing:
                child.kill()
            await child.wait()
            self._child = None

    def _heard(self, message: dict[str, Any]) -> None:
        if "log" in message:
            log.log(int(message["log"]), "%s", message["text"])
        elif "tools" in message:
            self._offer(str(message["tools"]), message["list"])
        else:
            waiting = self._waiting.get(int(message["id"]))
            if waiting is not None and not waiting.done():
                waiting.set_result(message)
