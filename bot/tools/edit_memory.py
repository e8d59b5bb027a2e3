"""`edit_memory`: the model changes the person's MEMORY.md (add, replace, remove a passage).

What an edit adds meets consolidation's checks (memory.consolidation.checks: no echoed
instructions, HTML entities, code, or oddly named section) and may not take MEMORY.md over its
budget, which would leave consolidation no room: refused, the model is told why (issue 33).

In a group turn whose answer is public it may only add, and its answer tells nothing of what
the memory holds, not even whether the line was there already. In the compact form (a small
window) it only adds, under the default section; a stale fact is corrected by consolidation.
"""

from __future__ import annotations

import logging
from functools import partial

from bot.tools.held import Edit
from bot.tools.tool import MEMORY, Arguments, MemoryRoom, Offer, Tool, ToolTurn, string_schema
from memory.consolidation.checks import check_additions, echo_fragments, over_budget
from memory.safefs import LinkRefusedError
from memory.store import (
    DEFAULT_SECTION,
    SECTIONS,
    MemoryEditError,
    added_to_section,
    passage_removed,
    passage_replaced,
    refused,
)
from memory.threads import in_thread

log = logging.getLogger(__name__)

PUBLIC_NOTED = "Noted in their memory."
NOT_WRITTEN = "Error: MEMORY.md could not be written (disk refused); nothing was saved."

SECTION = {"type": "string", "description": "For 'add': one of " + ", ".join(SECTIONS)}
TEXT = {"type": "string", "description": "Line to add, or passage to find"}

FULL = Offer(
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
                    "section": SECTION,
                    "text": TEXT,
                    "new_text": {"type": "string", "description": "For 'replace': new passage"},
                },
                "required": ["action", "text"],
            },
        },
    },
    # (It goes on the guide's first line, about MEMORY.md, so it is the first tool listed.)
    "  When you learn something lasting (their name, preferences, projects, important dates), "
    "save it\n  with `edit_memory`. Correct a stale fact with action \"replace\"; delete one "
    'with "remove".',
)
PUBLIC = Offer(
    {
        "type": "function",
        "function": {
            "name": "edit_memory",
            "description": (
                "Note something lasting about this person in their long-term memory "
                "(MEMORY.md): `text` is added as a line to `section`. The memory cannot be "
                "read here."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["add"]},
                    "section": SECTION,
                    "text": TEXT,
                },
                "required": ["action", "text"],
            },
        },
    },
    "When they tell you something lasting, you may note it with `edit_memory` (action\n"
    '"add" only); what you note cannot be read back in the group.',
)
COMPACT = Offer(
    string_schema("edit_memory", "Add a lasting fact about this person to their memory.", "text"),
    "Save lasting facts about this person with `edit_memory`",
)


def _texts(offer: Offer) -> list[str]:
    """The words the model is given of an offer (what a confused model copies back)."""
    function = offer.schema["function"]
    properties = function["parameters"]["properties"].values()
    return [offer.guide, function["description"], *(p.get("description", "") for p in properties)]


# The instructions an edit must not copy back.
ECHOES = echo_fragments(*(text for offer in (FULL, PUBLIC, COMPACT) for text in _texts(offer)))


async def run(turn: ToolTurn, args: Arguments) -> str:
    """The edit; in a public turn only an addition, answered without a word of the memory."""
    if turn.form == "compact":
        args = {**args, "action": args.get("action") or "add"}  # its schema only adds
    if turn.public:
        if args.get("action", "add") != "add":
            return "Error: in a group chat memory can only be added to (action 'add')."
        result = await _written(turn, {**args, "action": "add"})
        return result if result.startswith("Error") else PUBLIC_NOTED
    return await _written(turn, args)


async def _written(turn: ToolTurn, args: Arguments) -> str:
    """The edit as written; a disk that refuses is told to the model, which tells the person."""
    try:
        return await _edit(turn, args)
    except LinkRefusedError:
        raise  # a planted link: the core refuses the workspace
    except OSError as exc:  # disk full, read-only
        log.error("edit_memory could not write MEMORY.md: %s", exc)
        return NOT_WRITTEN


async def _edit(turn: ToolTurn, args: Arguments) -> str:
    """The edit, written in a thread (its fsync would stall every other user's turn)."""
    action, text = args.get("action"), args.get("text")
    if not isinstance(text, str) or not text.strip():
        return "Error: `text` must be a non-empty string."
    edit: Edit
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
    checked = partial(_checked, edit, turn.room)
    async with turn.workspace.memory_lock:
        try:
            return await in_thread(partial(turn.edits.apply, checked))
        except MemoryEditError as exc:
            return f"Error: {exc}"


def _checked(edit: Edit, room: MemoryRoom | None, current: str) -> tuple[str | None, str]:
    """`edit` of `current`, refused (MemoryEditError) when what it adds fails consolidation's
    checks or it grows MEMORY.md past its budget."""
    text, message = edit(current)
    if text is None or text == current:
        return text, message
    why = check_additions(current, text, ECHOES)
    if why is None and room is not None:
        used = room.memory_tokens(text)
        if used > room.memory_tokens(current):  # shrinking an oversized memory is welcome
            why = over_budget(used, room.memory_budget)
    if why is not None:
        raise refused(why)
    return text, message


EDIT_MEMORY = Tool(
    name="edit_memory",
    reaches=(MEMORY,),
    enabled=lambda config: config.tools.edit_memory,
    run=run,
    full=FULL,
    compact=COMPACT,
    public=PUBLIC,
    public_compact=Offer(COMPACT.schema),  # the public compact guide names no tool
)
