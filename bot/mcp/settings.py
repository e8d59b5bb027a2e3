"""`[[mcp.servers]]`: the MCP servers the operator lists, read and checked (bot/config.py calls
`read_servers`, so every key is still checked while the config loads).

A server's `env` and `headers` name environment variables, never values: a secret stays out of
the file, and each value found is handed to the log redactor with the others (bot/logsafe.py).
Tools are offered only when the server's `tools` names them: none by default.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

# The server's name prefixes its tools' names (OpenAI allows [a-zA-Z0-9_-]{1,64}); no "_" in
# it, so "<server>_<tool>" splits one way only.
SERVER_NAME = re.compile(r"[A-Za-z0-9-]{1,20}")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_NAME = 64
MAX_ALLOWED = 64  # tools one server may offer
VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KEYS = (
    "name", "command", "args", "url", "env", "headers", "tools", "timeout_s", "max_output_chars",
)  # fmt: skip


class McpSettingError(ValueError):
    """A problem of one server's entry, worded for the operator (bot/config.py adds where)."""


@dataclass(frozen=True)
class McpServer:
    """One MCP server: started as `command` + `args` (stdio) or reached at `url` (streamable
    HTTP). `env` and `headers` hold the values found in the environment (secrets)."""

    name: str
    tools: tuple[str, ...]
    command: str | None = None
    args: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0
    max_output_chars: int = 12_000

    def secrets(self) -> list[str]:
        return [*self.env.values(), *self.headers.values()]

    def __repr__(self) -> str:  # the values of env and headers are secrets
        where = self.url or " ".join((self.command or "", *self.args))
        return f"McpServer({self.name!r}, {where!r}, tools={list(self.tools)})"


def read_servers(table: Any, env: Mapping[str, str]) -> tuple[McpServer, ...]:
    """The servers of the `[mcp]` table (`[[mcp.servers]]` entries), or McpSettingError."""
    if not isinstance(table, dict):
        raise McpSettingError("[mcp] must be a section holding [[mcp.servers]] entries")
    unknown = [key for key in table if key != "servers"]
    if unknown:
        raise McpSettingError(f"[mcp] unknown key {unknown[0]!r} (servers are [[mcp.servers]])")
    entries = table.get("servers", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise McpSettingError("[mcp] servers must be [[mcp.servers]] tables")
    servers = tuple(_server(number, entry, env) for number, entry in enumerate(entries, 1))
    if servers and importlib.util.find_spec("mcp") is None:
        raise McpSettingError(
            "[[mcp.servers]] needs the MCP SDK: pip install 'lightgrep[mcp]' (docs/mcp.md)"
        )
    names = [server.name for server in servers]
    for name in names:
        if names.count(name) > 1:
            raise McpSettingError(f"[[mcp.servers]] name {name!r} is given twice")
    return servers


def _server(number: int, entry: dict[str, Any], env: Mapping[str, str]) -> McpServer:
    name = entry.get("name")
    where = f"[[mcp.servers]] {name!r}" if isinstance(name, str) else f"[[mcp.servers]] #{number}"
    for key in entry:
        if key not in KEYS:
            raise McpSettingError(f"{where}: unknown key {key!r} (keys: {', '.join(KEYS)})")
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        raise McpSettingError(
            f"{where}: name must be 1-20 letters, digits or '-' (it prefixes the tools' names)"
        )
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise McpSettingError(f"{where}: give either command (stdio) or url (streamable HTTP)")
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise McpSettingError(f"{where}: command must be a program to run, got {command!r}")
    if url is not None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise McpSettingError(f"{where}: url must start with http:// or https://, got {url!r}")
        if parts.username or parts.password:
            raise McpSettingError(f"{where}: url must hold no credentials (use headers)")
    args = _strings(where, "args", entry.get("args", []))
    tools = _strings(where, "tools", entry.get("tools", []))
    for tool in tools:
        if not TOOL_NAME.fullmatch(tool) or len(name) + 1 + len(tool) > MAX_NAME:
            raise McpSettingError(
                f"{where}: tools: {tool!r} must be letters, digits, '_' or '-', and "
                f"{name}_{tool} at most {MAX_NAME} characters"
            )
    if len(tools) > MAX_ALLOWED:
        raise McpSettingError(f"{where}: tools may name at most {MAX_ALLOWED} tools")
    timeout = entry.get("timeout_s", 30.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise McpSettingError(f"{where}: timeout_s must be a positive number of seconds")
    most = entry.get("max_output_chars", 12_000)
    if isinstance(most, bool) or not isinstance(most, int) or most < 100:
        raise McpSettingError(f"{where}: max_output_chars must be an integer of 100 or more")
    return McpServer(
        name=name,
        tools=tuple(dict.fromkeys(tools)),
        command=command,
        args=tuple(args),
        url=url,
        env=_variables(where, "env", entry.get("env", {}), env),
        headers=_variables(where, "headers", entry.get("headers", {}), env),
        timeout_s=float(timeout),
        max_output_chars=most,
    )


def _strings(where: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise McpSettingError(f"{where}: {key} must be a list of strings")
    return list(value)


def _variables(where: str, key: str, value: Any, env: Mapping[str, str]) -> dict[str, str]:
    """`{ NAME = "ENV_VARIABLE" }` → `{ NAME: its value }`: the file names the variable only."""
    if not isinstance(value, dict):
        raise McpSettingError(f'{where}: {key} must be a table such as {{ X = "ENV_VARIABLE" }}')
    found = {}
    for name, variable in value.items():
        if not isinstance(variable, str) or not VARIABLE.fullmatch(variable):
            raise McpSettingError(
                f"{where}: {key} {name!r} must name an environment variable (the value itself "
                f"stays out of the file), got {variable!r}"
            )
        secret = env.get(variable, "").strip()
        if not secret:
            raise McpSettingError(
                f"{where}: {key} {name!r} names {variable}, which is not set (in the "
                f"environment or lightgrep.env)"
            )
        found[str(name)] = secret
    return found
