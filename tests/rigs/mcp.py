"""The fake MCP server (tests/rigs/fakes/mcp_server.py) as a config names it, served over HTTP
as a process, and an Agent built from a config file with [[mcp.servers]], as an operator
writes it. Shared by tests/bot/tools/test_mcp.py and bench/mcp_bench.py."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from bot.agent.agent import Agent
from bot.config import load_config
from tests.rigs import REPO

SERVER = REPO / "tests" / "rigs" / "fakes" / "mcp_server.py"


def stdio_entry(name: str, tools: list[str], *, hostile: bool = False, extra: str = "") -> str:
    """A [[mcp.servers]] entry running the fake server over stdio."""
    args = [str(SERVER), "stdio", *(["hostile"] if hostile else [])]
    return (
        f'[[mcp.servers]]\nname = "{name}"\ncommand = {json.dumps(sys.executable)}\n'
        f"args = {json.dumps(args)}\ntools = {json.dumps(tools)}\n{extra}"
    )


def http_entry(name: str, url: str, tools: list[str], extra: str = "") -> str:
    return f'[[mcp.servers]]\nname = "{name}"\nurl = "{url}"\ntools = {json.dumps(tools)}\n{extra}'


def mcp_agent(
    folder: Path, fake_base_url: str, servers: str, *, tools: str = "", limits: str = "",
    env: dict[str, str] | None = None,
) -> Agent:  # fmt: skip
    """An Agent from a config file with these [[mcp.servers]] entries."""
    folder.mkdir(exist_ok=True)
    path = folder / "config.toml"
    path.write_text(
        f'[llm]\nbase_url = "{fake_base_url}"\napi_key = "sk-test"\nmodel = "fake-model"\n'
        "max_retries = 0\ncontext_window_tokens = 50000\nmax_output_tokens = 2048\n"
        f"[memory]\nworkspaces_dir = {json.dumps(str(folder / 'workspaces'))}\n"
        f"[tools]\n{tools}[limits]\n{limits}{servers}"
    )
    return Agent(load_config(path, env=env or {}))


async def offered(agent: Agent, count: int, within: float = 60.0) -> list[str]:
    """The MCP tools' names once `count` of them are offered (the servers start in the
    background), or AssertionError after `within` seconds."""
    agent.start()
    deadline = time.monotonic() + within
    while len(agent.mcp.tools()) != count:
        assert time.monotonic() < deadline, [t.name for t in agent.mcp.tools()]
        await asyncio.sleep(0.05)
    return [tool.name for tool in agent.mcp.tools()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def http_server(*options: str) -> AsyncIterator[str]:
    """The fake MCP server over streamable HTTP as a process on 127.0.0.1; yields its URL."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), "http", str(port), *options,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP server did not start"
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        await process.wait()
