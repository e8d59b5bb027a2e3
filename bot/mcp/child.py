"""The MCP servers' own process (`python -m bot.mcp.child`, started by bot/mcp/hub.py): every
server's connection (bot/mcp/link.py) runs here, so what a server sends is read and parsed
here, never in the bot's process.

Its stdin and stdout carry JSON lines. In: the servers (the first line), then calls
`{"id", "server", "tool", "args", "budget"}`; the end of stdin stops it. Out: a server's
allowed tools now `{"tools": server, "list": [...]}`, each call's `{"id", "text"}` or
`{"id", "error"}`, and log lines `{"log": level, "text"}` the bot logs (and redacts) as its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from dataclasses import asdict
from typing import Any

from bot.mcp.link import ServerLink
from bot.mcp.records import Listed, McpCallError
from bot.mcp.settings import McpServer

MAX_LINE = 4_000_000  # a call's arguments, from the bot


class _Out:
    """Lines to the bot, one whole line at a time."""

    def __init__(self) -> None:
        self._stream = sys.stdout

    def send(self, message: dict[str, Any]) -> None:
        self._stream.write(json.dumps(message, ensure_ascii=False) + "\n")
        self._stream.flush()


class _ToBot(logging.Handler):
    def __init__(self, out: _Out) -> None:
        super().__init__(logging.INFO)
        self._out = out

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self._out.send({"log": record.levelno, "text": record.getMessage()})


async def serve(out: _Out) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    first = json.loads(await reader.readline())
    servers = [McpServer(**_server(entry)) for entry in first["servers"]]

    def on_tools(name: str, tools: tuple[Listed, ...]) -> None:
        out.send({"tools": name, "list": [asdict(tool) for tool in tools]})

    links = {server.name: ServerLink(server, on_tools) for server in servers}
    stop = asyncio.Event()
    running = [asyncio.ensure_future(link.run(stop)) for link in links.values()]
    calls: set[asyncio.Task[None]] = set()

    async def call(request: dict[str, Any]) -> None:
        link = links[request["server"]]
        try:
            text = await link.call(request["tool"], request["args"], request["budget"])
            out.send({"id": request["id"], "text": text})
        except McpCallError as exc:
            out.send({"id": request["id"], "error": str(exc)})

    while line := await reader.readline():
        task = asyncio.ensure_future(call(json.loads(line)))
        calls.add(task)
        task.add_done_callback(calls.discard)
    stop.set()
    for task in calls:
        task.cancel()
    await asyncio.wait(running, timeout=5)
    for task in running:
        task.cancel()
    await asyncio.gather(*running, *calls, return_exceptions=True)


def _server(entry: dict[str, Any]) -> dict[str, Any]:
    return {**entry, "tools": tuple(entry["tools"]), "args": tuple(entry["args"])}


def main() -> None:
    out = _Out()
    root = logging.getLogger()
    root.addHandler(_ToBot(out))
    root.setLevel(logging.INFO)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # each request: not the bot's news
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(out))


if __name__ == "__main__":
    main()
