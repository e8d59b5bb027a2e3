"""The agent's only tools: narrow, and bound to one user's workspace.

No parameter can name a file, a path or another user: the workspace is fixed when the tools are
built for a turn, so nothing the model writes can reach anybody else's memory.

A turn's edits of MEMORY.md pass the guard a consolidation passes (memory.consolidation.checks):
once they would drop more than a quarter of the facts MEMORY.md held when the turn began (text
in an uploaded file can tell a model to wipe its memory), that edit and the rest of the turn's
are not written but kept as a held version, which the person is told about and may apply with
/memory undo. A turn makes at most MAX_CALLS_PER_TURN tool calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bot.agent.prompt import PromptForm
from bot.reminders.desk import PersonReminders
from memory import clock
from memory.consolidation.checks import held_because, kept_fact_lines
from memory.safefs import LinkRefusedError
from memory.search.engine import HistoryHit, SearchError, search_history
from memory.store import (
    DEFAULT_SECTION,
    SECTIONS,
    MemoryEditError,
    added_to_section,
    passage_removed,
    passage_replaced,
)
from memory.text import valid_text
from memory.threads import in_thread
from memory.workspace import Workspace

log = logging.getLogger(__name__)

MAX_SEARCH_RESULTS = 5
MAX_RESULT_CHARS = 4000
MAX_CALLS_PER_TURN = 16  # tool calls of one turn, all rounds together
HELD_EDIT = (
    "Not applied: {why} MEMORY.md held when this turn began. The edit is kept aside for the "
    "person, who is told and may apply it; MEMORY.md is unchanged. Do not try it again."
)
HELD_WITH = "Kept aside with the held edit of this turn, not applied: {message}"


@dataclass(frozen=True)
class HeldEdit:
    """The turn's edits were held: they would drop `dropped` of the `facts` fact lines."""

    dropped: int
    facts: int

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
                "Search this person's log of past conversations for what your memory does "
                "not answer: a few words the entry holds (names, numbers, dates, rare words), "
                'not the question; best first. "quotes": a phrase.'
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Keywords, or a regex if regex",
                    },
                    "regex": {"type": "boolean", "description": "Treat query as a regex"},
                },
                "required": ["query"],
            },
        },
    },
]


def _public_schemas() -> list[dict[str, Any]]:
    """The tools of a turn whose answer is public (a group chat without the person's memory):
    edit_memory may only add, and no tool reads anything back, not even whether a line was
    there already; search_history is not offered."""
    edit = json.loads(json.dumps(TOOL_SCHEMAS[0]))
    function = edit["function"]
    function["description"] = (
        "Note something lasting about this person in their long-term memory (MEMORY.md): "
        "`text` is added as a line to `section`. The memory cannot be read here."
    )
    properties = function["parameters"]["properties"]
    properties["action"]["enum"] = ["add"]
    del properties["new_text"]
    return [edit]


PUBLIC_TOOL_SCHEMAS: list[dict[str, Any]] = _public_schemas()
PUBLIC_NOTED = "Noted in their memory."

REMIND_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "remind",
        "description": (
            "Set (`what`, sent here at `when`: 'in 10 minutes', 'tomorrow at 9', 'every monday "
            "at 9'), list or cancel (`number` from list, or 'all') this person's reminders."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["set", "list", "cancel"]},
                "when": {"type": "string"},
                "what": {"type": "string"},
                "number": {"type": "string"},
            },
            "required": ["action"],
        },
    },
}


def _public_remind() -> dict[str, Any]:
    """In a group whose answer is public: setting only (the list could show private ones)."""
    schema = json.loads(json.dumps(REMIND_SCHEMA))
    function = schema["function"]
    function["description"] = (
        "Set a reminder for this person: `what`, sent here at `when` ('in 10 minutes', "
        "'tomorrow at 9', 'every monday at 9')."
    )
    function["parameters"]["properties"]["action"]["enum"] = ["set"]
    del function["parameters"]["properties"]["number"]
    return schema


PUBLIC_REMIND_SCHEMA = _public_remind()


def _schema(name: str, description: str, parameter: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {parameter: {"type": "string"}},
                "required": [parameter],
            },
        },
    }


# The tools for a small window (bot/agent/sizing.py): one string parameter each, less than
# half the tokens of the full schemas. edit_memory only adds there (a line under the default
# section); a stale fact is corrected by consolidation.
COMPACT_TOOL_SCHEMAS: list[dict[str, Any]] = [
    _schema("edit_memory", "Add a lasting fact about this person to their memory.", "text"),
    _schema("search_history", "Search earlier conversations for keywords.", "query"),
]
COMPACT_PUBLIC_SCHEMAS: list[dict[str, Any]] = COMPACT_TOOL_SCHEMAS[:1]


def tool_schemas(
    form: PromptForm, *, public: bool = False, remind: bool = True
) -> list[dict[str, Any]]:
    """The schemas a turn offers in this prompt form ("none": no tools; `remind` only in the
    full form, so the fixed part sizing counts holds it)."""
    if form == "none":
        return []
    if form == "compact":
        return COMPACT_PUBLIC_SCHEMAS if public else COMPACT_TOOL_SCHEMAS
    schemas = PUBLIC_TOOL_SCHEMAS if public else TOOL_SCHEMAS
    if remind:
        schemas = [*schemas, PUBLIC_REMIND_SCHEMA if public else REMIND_SCHEMA]
    return schemas


class AgentTools:
    """Executes tool calls for one turn of one user.

    public=True (a group turn that must not see the person's memory): only adding to MEMORY.md,
    with an answer that tells nothing about what the memory holds."""

    def __init__(
        self,
        workspace: Workspace,
        *,
        public: bool = False,
        form: PromptForm = "full",
        reminders: PersonReminders | None = None,
    ) -> None:
        """`reminders`: the person's desk (bot/reminders/desk.py), bound to this chat; offered
        to the model in the full form only (a small window keeps /remind)."""
        self._workspace = workspace
        self._public = public
        self._form = form
        self._reminders = reminders if form == "full" else None
        self.schemas = tool_schemas(form, public=public, remind=self._reminders is not None)
        self._calls = 0
        self._before: str | None = None  # MEMORY.md at the turn's first edit
        self._held: tuple[Path, str] | None = None  # the held version and its text
        self.held: HeldEdit | None = None

    def room(self) -> int:
        """Tool calls this turn may still make."""
        return max(0, MAX_CALLS_PER_TURN - self._calls)

    async def execute(self, name: str, raw_arguments: Any) -> str:
        """The tool's result as text for the model; errors are results too, never exceptions."""
        self._calls += 1
        try:
            args = _parse_arguments(raw_arguments)
        except ValueError as exc:
            return f"Error: {exc}"
        if name == "remind" and self._reminders is not None:
            return await self._remind(self._reminders, args)
        if self._form == "compact" and name == "edit_memory":
            args = {**args, "action": args.get("action") or "add"}  # its schema only adds
        if self._public:
            return await self._public_call(name, args)
        if name == "edit_memory":
            try:
                return await self._edit_memory(args)
            except LinkRefusedError:
                raise  # a planted link: the core refuses the workspace
            except OSError as exc:  # disk full, read-only: the model tells the person
                log.error("edit_memory could not write MEMORY.md: %s", exc)
                return "Error: MEMORY.md could not be written (disk refused); nothing was saved."
        if name == "search_history":
            return await self._search_history(args)
        return f"Error: there is no tool named {name!r}. Use edit_memory or search_history."

    async def _remind(self, desk: PersonReminders, args: dict[str, Any]) -> str:
        """Set, list or cancel this person's reminders; the answer says what happened, in the
        words the person is told (times in their zone)."""
        action = args.get("action")
        if action == "set":
            when, what = args.get("when"), args.get("what")
            if not isinstance(when, str) or not isinstance(what, str):
                return "Error: 'set' needs `when` and `what` as strings."
            return await desk.set(when, what)
        if self._public:
            return "Error: in a group chat reminders can only be set (action 'set')."
        if action == "list":
            return desk.listing()
        if action == "cancel":
            return await desk.cancel(str(args.get("number", "")), once=False)
        return "Error: `action` must be set, list or cancel."

    async def _edit_memory(self, args: dict[str, Any]) -> str:
        """The edit, written in a thread (its fsync would stall every other user's turn)."""
        action, text = args.get("action"), args.get("text")
        if not isinstance(text, str) or not text.strip():
            return "Error: `text` must be a non-empty string."
        edit: Callable[[str], tuple[str | None, str]]
        if action == "add":
            section = str(args.get("section") or DEFAULT_SECTION)
            edit = partial(added_to_section, section=section, line=text)
        elif action == "replace":
            new_text = args.get("new_text")
            if not isinstance(new_text, str):
                return "Error: 'replace' needs `new_text`."
            edit = partial(passage_replaced, old=text, new=new_text)
        elif action == "remove":
            edit = partial(passage_removed, passage=text)
        else:
            return "Error: `action` must be add, replace or remove."
        async with self._workspace.memory_lock:
            try:
                return await in_thread(partial(self._guarded, edit))
            except MemoryEditError as exc:
                return f"Error: {exc}"

    def _guarded(self, edit: Callable[[str], tuple[str | None, str]]) -> str:
        """Apply `edit` to MEMORY.md, or to the turn's held text once an edit was held (in a
        thread, under the memory lock)."""
        store = self._workspace.memory
        current = store.read()
        if self._before is None:
            self._before = current
        if self._held is not None:
            path, held_text = self._held
            text, message = edit(held_text)
            if text is not None and text != held_text:
                store.replace_held(path, text)
                self._held = (path, text)
                self._count_held(text)
            return HELD_WITH.format(message=message)
        text, message = edit(current)
        if text is None or text == current:
            return message
        why = held_because(self._before, text)
        if why is None:
            store.write(text)
            return message
        self._held = (store.keep_held(text), text)
        self._count_held(text)
        log.warning("memory edit of %s held: %s", self._workspace.user_key, why)
        return HELD_EDIT.format(why=why)

    def _count_held(self, text: str) -> None:
        kept, facts = kept_fact_lines(self._before or "", text)
        self.held = HeldEdit(facts - kept, facts)

    async def _public_call(self, name: str, args: dict[str, Any]) -> str:
        if name != "edit_memory":
            return "Error: in a group chat the only tools are edit_memory (to add) and remind."
        if args.get("action", "add") != "add":
            return "Error: in a group chat memory can only be added to (action 'add')."
        result = await self._edit_memory({**args, "action": "add"})
        return result if result.startswith("Error") else PUBLIC_NOTED

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
                now=clock.now(),  # "last week" as the model was told the time: the one clock
            )
        except SearchError as exc:
            return f"Error: {exc}"
        if not result.hits:
            return "No entry of the history matches."
        text = "\n\n".join(shown_hits(result.hits, MAX_RESULT_CHARS))
        return f"{result.total} matching entries; the most relevant:\n\n{text}"


EXCERPT_CONTEXT = 160  # characters kept on each side of a match when an entry is cut


def shown_hits(hits: list[HistoryHit], budget: int) -> list[str]:
    """The hits as the model reads them, within ``budget`` characters together: each whole if
    it fits its share, else its stamp and the passages around its matches. Long entries (a
    session of a chat is often 2-4 KB) would otherwise fill the answer with the first one or
    two, and the entry meant, ranked third, or its matching lines, would be cut away."""
    shares = [0] * len(hits)
    left, todo = budget, sorted(range(len(hits)), key=lambda i: len(hits[i].text))
    for n, i in enumerate(todo):  # shortest first: what a short entry leaves, the rest share
        shares[i] = min(len(hits[i].text), left // (len(todo) - n))
        left -= shares[i]
    return [_excerpt(hit, share) for hit, share in zip(hits, shares, strict=True)]


def _excerpt(hit: HistoryHit, share: int) -> str:
    text = hit.text
    if len(text) <= share:
        return text
    windows: list[tuple[int, int]] = []
    for s, e in hit.spans:
        lo, hi = max(0, s - EXCERPT_CONTEXT), min(len(text), e + EXCERPT_CONTEXT)
        if windows and lo <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], hi))
        else:
            windows.append((lo, hi))
    stamp = text[: text.find("]") + 1] if text.startswith("[") else ""
    out, used = [stamp] if windows and windows[0][0] > 0 else [], len(stamp)
    for lo, hi in windows or [(0, share)]:
        piece = text[lo : min(hi, lo + max(share - used, 0))]
        if not piece:
            break
        out.append(("… " if lo > 0 else "") + piece + (" …" if lo + len(piece) < len(text) else ""))
        used += len(piece)
    return " ".join(out)


def _parse_arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):  # given already parsed: cleaned the same way
        return {key: valid_text(item) for key, item in raw.items()}
    if isinstance(raw, str):
        try:
            value = json.loads(raw or "{}", strict=False)  # raw newlines from some grammars
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg})") from exc
        if isinstance(value, dict):
            # A "\\ud83d" escape decodes to a lone surrogate that no file write could take.
            return {key: valid_text(item) for key, item in value.items()}
    raise ValueError("the arguments must be a JSON object")
