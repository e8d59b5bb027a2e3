"""An MCP server's listed tool made a `Tool` record (bot/tools/tool.py), and its result made
bounded text.

What a server lists is outside data: a schema that is not one, or too large to send on every
turn, is refused (logged by the hub); a description is cut. The record reaches "the <name> MCP
server", not the person's own things, so the toolbox counts its calls as outside calls, marks
what it returns as data and holds the turn's memory edits (bot/tools/toolbox.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.mcp.settings import McpServer
from bot.tools.tool import Arguments, Offer, Reach, Tool, ToolTurn

if TYPE_CHECKING:  # (the SDK is the mcp extra's: imported only where servers are set)
    import mcp_types

MAX_DESCRIPTION = 600  # characters of a tool's description sent in the full form…
COMPACT_DESCRIPTION = 100  # …and in the compact form (a small window)
MAX_SCHEMA_CHARS = 3000  # an input schema rides on every request: a bigger one is refused
RESULT_SHARE = 8  # a result takes at most this fraction of the prompt's tokens…
CHARS_PER_TOKEN = 3  # …at this many characters a token (as read_page counts)

# The hub's call: (tool as the server names it, arguments, most characters) → text.
Call = Callable[[str, Arguments, int], Awaitable[str]]


class Refused(ValueError):
    """A listed tool that is not offered, and why (for the log)."""


class McpCallError(Exception):
    """A call that gave no result (not running, timed out, broke): the model gets "Error: …"."""


def reach(server: McpServer) -> Reach:
    return Reach(f"the {server.name} MCP server", own=False)


@dataclass(frozen=True)
class Listed:
    """A tool as its server lists it, checked (`listed`): what crosses from the servers'
    process to the bot's."""

    name: str
    description: str
    schema: dict[str, Any]


def listed(tool: mcp_types.Tool) -> Listed:
    """The SDK's tool, its schema checked (Refused) and its description cut."""
    description = " ".join((tool.description or tool.title or "").split())
    return Listed(tool.name, _cut(description, MAX_DESCRIPTION), input_schema(tool.input_schema))


def record(server: McpServer, listed: Listed, call: Call) -> Tool:
    """The `Tool` offering `listed` as `<server>_<tool>`."""
    schema, description = listed.schema, listed.description
    name = f"{server.name}_{listed.name}"
    full_text = f"{_cut(description, MAX_DESCRIPTION)} (from the {server.name} MCP server)"
    full = Offer(_schema(name, full_text.strip(), schema))
    compact = Offer(_schema(name, _cut(description, COMPACT_DESCRIPTION) or name, schema))

    async def run(turn: ToolTurn, args: Arguments) -> str:
        try:
            return await call(listed.name, args, max_chars(turn, server))
        except McpCallError as exc:
            return f"Error: {exc}."

    return Tool(
        name=name,
        reaches=(reach(server),),
        enabled=lambda config: True,  # listed in [[mcp.servers]] tools: on
        run=run,
        full=full,
        compact=compact,
        public=full,  # in a group only when [tools] mcp_in_groups says so (in_groups)
        public_compact=compact,
        in_groups=lambda config: config.tools.mcp_in_groups,
    )


def input_schema(value: Any) -> dict[str, Any]:
    """The tool's input schema if it is a JSON Schema object small enough to send, or Refused."""
    if not isinstance(value, dict) or value.get("type") != "object":
        raise Refused('its input schema is not an object schema ({"type": "object", …})')
    import jsonschema  # type: ignore[import-untyped]  # (the mcp extra's)

    size = len(json.dumps(value))
    if size > MAX_SCHEMA_CHARS:
        raise Refused(f"its input schema is {size:,} characters (at most {MAX_SCHEMA_CHARS:,})")
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        why = _cut(exc.message, 120)
        raise Refused(f"its input schema is not valid JSON Schema ({why})") from None
    return value


def max_chars(turn: ToolTurn, server: McpServer) -> int:
    """The most of a result the model gets: the server's max_output_chars, and no more than a
    result's share of the prompt (a small window gets a short one)."""
    share = turn.outside.prompt_tokens // RESULT_SHARE * CHARS_PER_TOKEN if turn.outside else 0
    return max(100, min(server.max_output_chars, share or server.max_output_chars))


def result_text(result: mcp_types.CallToolResult, budget: int) -> str:
    """What the model reads of a result: its text parts (what is not text named, not shown),
    else its structured content as JSON, cut at `budget` characters, an error said as one."""
    parts, total = [], 0
    for part in _parts(result):
        parts.append(part[: budget - total + 1])
        total += len(parts[-1])
        if total > budget:
            break
    text = "\n".join(parts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)[: budget + 1]
    note = ""
    if len(text) > budget:
        note = f" (cut: the first {budget:,} characters)"
        text = text[:budget]
    said = "reported an error" if result.is_error else "answered"
    return f"The tool {said}{note}:\n{text or '(nothing)'}"


def _parts(result: mcp_types.CallToolResult) -> Iterable[str]:
    import mcp_types  # (the mcp extra's)

    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            yield block.text
        elif isinstance(block, mcp_types.EmbeddedResource) and isinstance(
            block.resource, mcp_types.TextResourceContents
        ):
            yield block.resource.text
        elif isinstance(block, mcp_types.ResourceLink):
            yield f"[a link: {block.uri}]"
        else:
            yield f"[{getattr(block, 'type', 'something')} content, not shown]"


def _schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _cut(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"
