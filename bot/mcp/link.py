"""One MCP server's connection, in the servers' own process (bot/mcp/child.py): connected with
the official SDK's `Client` (a command over stdio, or a URL over streamable HTTP), its tools listed
once and bounded, watched with a ping, and restarted with back-off when it ends; its tools are
absent until it is back. A call is timed out; a huge result is cut before it leaves this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bot.mcp.records import Listed, McpCallError, Refused, listed, result_text
from bot.mcp.settings import McpServer
from bot.tools.tool import Arguments

log = logging.getLogger(__name__)

FIRST_DELAY_S = 1.0  # the first restart's wait, doubled after each failure…
MAX_DELAY_S = 300.0  # …up to this
STABLE_S = 60.0  # a connection that lasted this long starts the waits again from the first
PING_S = 15.0  # how often an idle connection is checked
MAX_PAGES = 20  # pages of a tool listing read at most…
MAX_LISTED = 5000  # …and tools listed at most (those beyond are not read)

# Offered tools of a server, as the bot hears of them: (server name, its allowed tools now).
OnTools = Callable[[str, tuple[Listed, ...]], None]


class ServerLink:
    """The life of one server's connection; `run` until stopped."""

    def __init__(self, server: McpServer, on_tools: OnTools) -> None:
        self.server = server
        self._on_tools = on_tools
        self._client: Client | None = None
        self._broken = asyncio.Event()
        self.restarts = 0
        # A stdio server's own stderr goes nowhere: it may print what it was given.
        self._errlog = open(os.devnull, "w")  # noqa: SIM115 - open for the link's life

    async def run(self, stop: asyncio.Event) -> None:
        """Connect, and again after each end, waiting longer each time it fails soon."""
        loop = asyncio.get_running_loop()
        delay = FIRST_DELAY_S
        while not stop.is_set():
            began = loop.time()
            try:
                await self._connected(stop)
            except Exception as exc:  # whatever the server did: logged, and it is restarted
                log.warning("MCP server %s: %s", self.server.name, _why(exc))
            finally:
                self._client = None
                self._on_tools(self.server.name, ())
            if stop.is_set():
                return
            if loop.time() - began >= STABLE_S:
                delay = FIRST_DELAY_S
            name = self.server.name
            log.info("MCP server %s: its tools are absent; restart in %g s", name, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, MAX_DELAY_S)
            self.restarts += 1

    async def _connected(self, stop: asyncio.Event) -> None:
        server = self.server
        # The handshake and every request wait at most timeout_s (read_timeout_seconds).
        client = Client(self._transport(), read_timeout_seconds=server.timeout_s, cache=None)
        async with client:
            try:
                with anyio.fail_after(server.timeout_s):
                    found = await self._listed(client)
                tools = self._allowed(found)
                self._client, self._broken = client, asyncio.Event()
                self._on_tools(server.name, tools)
                names = ", ".join(f"{server.name}_{tool.name}" for tool in tools) or "none"
                log.info("MCP server %s: connected; tools offered: %s", server.name, names)
                await self._watch(client, stop)
            finally:
                self._client = None
                self._on_tools(server.name, ())

    def _transport(self) -> Any:
        server = self.server
        if server.command is not None:
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=dict(server.env) or None
            )
            return stdio_client(params, errlog=self._errlog)
        assert server.url is not None
        timeout = httpx2.Timeout(server.timeout_s, read=max(server.timeout_s, 300.0))
        http = httpx2.AsyncClient(headers=server.headers, timeout=timeout)
        return streamable_http_client(server.url, http_client=http)

    async def _listed(self, client: Client) -> list[Any]:
        """The server's tools, page by page, at most MAX_LISTED over MAX_PAGES pages."""
        found: list[Any] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None or len(found) >= MAX_LISTED:
                break
        if cursor is not None or len(found) > MAX_LISTED:
            log.warning(
                "MCP server %s lists more than %d tools: only the first %d were read",
                self.server.name, MAX_LISTED, min(len(found), MAX_LISTED),
            )  # fmt: skip
        return found[:MAX_LISTED]

    def _allowed(self, found: list[Any]) -> tuple[Listed, ...]:
        """The allowed tools the server lists, checked; each one refused is logged."""
        server = self.server
        by_name = {tool.name: tool for tool in found if tool.name in server.tools}
        records = []
        for name in server.tools:
            tool = by_name.get(name)
            if tool is None:
                log.warning("MCP server %s does not list the allowed tool %r", server.name, name)
                continue
            try:
                records.append(listed(tool))
            except Refused as exc:
                log.warning("MCP server %s: tool %r not offered: %s", server.name, name, exc)
        if len(found) > len(by_name):
            log.info(
                "MCP server %s lists %d tools; %d not in its allow list are not offered",
                server.name, len(found), len(found) - len(by_name),
            )  # fmt: skip
        return tuple(records)

    async def _watch(self, client: Client, stop: asyncio.Event) -> None:
        """Until stopped, or the connection is found broken (a ping, or a call that broke)."""
        while not stop.is_set():
            stopping = asyncio.ensure_future(stop.wait())
            broken = asyncio.ensure_future(self._broken.wait())
            done, _ = await asyncio.wait(
                {stopping, broken}, timeout=PING_S, return_when="FIRST_COMPLETED"
            )
            stopping.cancel()
            broken.cancel()
            if self._broken.is_set():
                raise ConnectionError("the connection broke during a call")
            if not done:
                with anyio.fail_after(self.server.timeout_s):
                    await _alive(client)

    async def call(self, tool: str, args: Arguments, budget: int) -> str:
        """The tool's result as text for the model, cut at `budget`; McpCallError else."""
        server = self.server
        client = self._client
        if client is None:
            raise McpCallError(f"the {server.name} MCP server is not running now; try later")
        try:
            with anyio.fail_after(server.timeout_s):
                result = await client.call_tool(tool, args)
        except TimeoutError:
            log.warning("MCP server %s: %s timed out (%g s)", server.name, tool, server.timeout_s)
            raise McpCallError(
                f"the {server.name} MCP server did not answer within {server.timeout_s:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                log.warning("MCP server %s: the %s call broke: %s", server.name, tool, _why(exc))
                self._broken.set()
                raise McpCallError(
                    f"the {server.name} MCP server stopped during the call"
                ) from None
            log.info("MCP server %s refused a %s call: %s", server.name, tool, _why(exc))
            raise McpCallError(f"the {server.name} MCP server refused the call") from None
        except ValidationError:
            log.warning("MCP server %s: %s answered with no tool result", server.name, tool)
            raise McpCallError(f"the {server.name} MCP server answered with no result") from None
        except Exception as exc:
            log.warning("MCP server %s: the %s call broke: %s", server.name, tool, _why(exc))
            self._broken.set()
            raise McpCallError(f"the {server.name} MCP server stopped during the call") from None
        return result_text(result, budget)


async def _alive(client: Client) -> None:
    """A small request the server must answer: a ping, which the 2026-07-28 protocol
    dropped for server/discover."""
    version = client.protocol_version
    if version in MODERN_PROTOCOL_VERSIONS:
        await client.session.send_discover(version)
    else:
        await client.send_ping()


def _why(exc: BaseException) -> str:
    """An exception in one short line (a group: its first member)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
