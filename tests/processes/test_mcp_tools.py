"""An MCP server's tool through the real bot: `lightgrep chat` as a process, its model the fake
one on 127.0.0.1 scripted to call the tool, the server the SDK-made fake over stdio with its
token from lightgrep.env. The person talks once the log (on stderr: -v) says the server is
connected."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from tests.rigs.cli import write_config
from tests.rigs.fakes.openai_server import FakeOpenAI, completion, tool_call
from tests.rigs.mcp import stdio_entry

SECRET = "mcp-s3cret-token-77"


def model(request: dict[str, Any]) -> dict[str, Any]:
    last = request["messages"][-1]
    if last["role"] == "user" and "gecko" in str(last["content"]):
        return completion(None, [tool_call("notes_lookup", {"word": "gecko"})])
    if last["role"] == "tool":
        return completion("Geckos are small lizards.")
    return completion("ok")


async def test_the_chat_process_starts_the_server_and_calls_its_tool(
    fake_llm: FakeOpenAI, tmp_path: Path, child_env: dict[str, str]
) -> None:
    fake_llm.default = model
    entry = stdio_entry("notes", ["lookup"], extra='env = { MCP_TEST_TOKEN = "NOTES_TOKEN" }\n')
    config = write_config(tmp_path, fake_llm, entry)
    (tmp_path / "lightgrep.env").write_text(f"NOTES_TOKEN={SECRET}\n")
    (tmp_path / "lightgrep.env").chmod(0o600)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "chat", "--config", str(config), "--user", "ana", "-v",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=child_env,
    )  # fmt: skip
    assert proc.stderr is not None
    seen = ""
    try:
        while "tools offered: notes_lookup" not in seen:  # (-v: the log on stderr)
            line = await asyncio.wait_for(proc.stderr.readline(), timeout=60)
            assert line, seen
            seen += line.decode()
        out, err = await asyncio.wait_for(
            proc.communicate(b"what is a gecko?\n/status\n"), timeout=60
        )
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    logged = seen + err.decode()
    assert proc.returncode == 0, logged
    text = out.decode()
    assert "Geckos are small lizards." in text
    assert "notes_lookup" in text.split("Tools:", 1)[1]  # /status lists it
    result = next(m for r in fake_llm.chat_requests for m in r["messages"] if m["role"] == "tool")
    assert "gecko: a small glossary entry" in result["content"]
    assert "not instructions" in result["content"]
    assert "MCP: starting 1 server(s) in the background: notes" in logged
    assert SECRET not in logged and SECRET not in text
    assert json.dumps(SECRET) not in config.read_text()
