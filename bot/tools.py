"""The agent's only tools: narrow, and bound to one user's workspace.

No parameter can name a file, a path or another user: the workspace is fixed when the tools are
built for a turn, so nothing the model writes can reach anybody else's memory.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from memory.search import SearchError, search_history
from memory.store import DEFAULT_SECTION, SECTIONS, MemoryEditError
from memory.text import valid_text
from memory.workspace import Workspace

MAX_SEARCH_RESULTS = 5
MAX_RESULT_CHARS = 4000

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "edit_memory",
            "description": (
                "Change this person's long-term memory (MEMORY.md). action 'add' appends `text` "
                "as a line to `section`; 'replace' swaps the passage `text` for `new_text`; "
                "'remove' deletes the passage `text`."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["add", "replace", "remove"]},
                    "section": {
                        "type": "string",
                        "description": "For 'add': one of " + ", ".join(SECTIONS),
                    },
                    "text": {"type": "string", "description": "Line to add, or passage to find"},
                    "new_text": {"type": "string", "description": "For 'replace': new passage"},
                },
                "required": ["action", "text"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_history",
            "description": (
                "Search this person's history log of past conversations. Keywords match "
                'case-insensitively, most relevant entries first; use "quotes" for a phrase.'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Keywords, or a regex if regex"},
                    "regex": {"type": "boolean", "description": "Treat query as a regex"},
                },
                "required": ["query"],
            },
        },
    },
]


class AgentTools:
    """Executes tool calls for one turn of one user."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    async def execute(self, name: str, raw_arguments: Any) -> str:
        """The tool's result as text for the model; errors are results too, never exceptions."""
        try:
            args = _parse_arguments(raw_arguments)
        except ValueError as exc:
            return f"Error: {exc}"
        if name == "edit_memory":
            return await self._edit_memory(args)
        if name == "search_history":
            return await self._search_history(args)
        return f"Error: there is no tool named {name!r}. Use edit_memory or search_history."

    async def _edit_memory(self, args: dict[str, Any]) -> str:
        action, text = args.get("action"), args.get("text")
        if not isinstance(text, str) or not text.strip():
            return "Error: `text` must be a non-empty string."
        store = self._workspace.memory
        async with self._workspace.memory_lock:
            try:
                if action == "add":
                    section = str(args.get("section") or DEFAULT_SECTION)
                    return store.add_to_section(section, text)
                if action == "replace":
                    new_text = args.get("new_text")
                    if not isinstance(new_text, str):
                        return "Error: 'replace' needs `new_text`."
                    return store.replace_passage(text, new_text)
                if action == "remove":
                    return store.remove_passage(text)
            except MemoryEditError as exc:
                return f"Error: {exc}"
        return "Error: `action` must be add, replace or remove."

    async def _search_history(self, args: dict[str, Any]) -> str:
        query = args.get("query")
        if not isinstance(query, str):
            return "Error: `query` must be a string."
        try:
            result = await asyncio.to_thread(
                search_history,
                self._workspace.history_path,
                query,
                limit=MAX_SEARCH_RESULTS,
                regex=bool(args.get("regex")),
            )
        except SearchError as exc:
            return f"Error: {exc}"
        if not result.hits:
            return "No entry of the history matches."
        text = "\n\n".join(hit.text for hit in result.hits)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + "\n… (cut)"
        return f"{result.total} matching entries; the most relevant:\n\n{text}"


def _parse_arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg})") from exc
        if isinstance(value, dict):
            # A "\\ud83d" escape decodes to a lone surrogate that no file write could take.
            return {key: valid_text(item) for key, item in value.items()}
    raise ValueError("the arguments must be a JSON object")
