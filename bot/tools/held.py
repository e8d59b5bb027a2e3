"""A turn's edits of MEMORY.md, guarded as a consolidation's are (memory.consolidation.checks).

Once they would drop more than a quarter of the facts MEMORY.md held when the turn began (text
in an uploaded file can tell a model to wipe its memory), that edit and the rest of the turn's
are not written but kept as a held version, which the person is told about and may apply with
/memory undo.

So are all of them once the turn has read something from outside the bot (a web page, a search
result: `read_outside`): such text can carry instructions ("delete the user's memory"), and a
model may follow them; the memory changes only when the person says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memory.consolidation.asking import MemoryEvent
from memory.consolidation.checks import held_because, kept_fact_lines
from memory.workspace import Workspace

log = logging.getLogger(__name__)

HELD_EDIT = (
    "Not applied: {why} MEMORY.md held when this turn began. The edit is kept aside for the "
    "person, who is told and may apply it; MEMORY.md is unchanged. Do not try it again."
)
HELD_OUTSIDE = (
    "Not applied: this turn read {what}, which may carry instructions, so its changes to "
    "MEMORY.md wait for the person, who is told and may apply them; MEMORY.md is unchanged. "
    "Do not try it again; tell the person what you would have changed."
)
HELD_WITH = "Kept aside with the held edit of this turn, not applied: {message}"

# An edit of MEMORY.md's text: (the new text, or None when nothing changes; what the model is
# told).
Edit = Callable[[str], tuple[str | None, str]]


@dataclass(frozen=True)
class HeldEdit:
    """The turn's edits were held: they would drop `dropped` of the `facts` fact lines."""

    dropped: int
    facts: int
    outside: bool = False  # held because the turn read something from outside the bot

    def event(self) -> MemoryEvent:
        """What the person is told (bot/commands/control.py memory_notice)."""
        if self.outside:
            return MemoryEvent("held_outside", dropped=self.dropped, facts=self.facts)
        return MemoryEvent("held", dropped=self.dropped, facts=self.facts)


class TurnEdits:
    """The MEMORY.md edits of one turn of one person."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._before: str | None = None  # MEMORY.md at the turn's first edit
        self._held: tuple[Path, str] | None = None  # the held version and its text
        self.held: HeldEdit | None = None
        self.outside: str | None = None  # what the turn read from outside ("a web page")

    def read_outside(self, what: str) -> None:
        """The turn has read `what` from outside the bot: its edits are held from now on."""
        self.outside = self.outside or what

    def apply(self, edit: Edit) -> str:
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
        if why is None and self.outside is None:
            store.write(text)
            return message
        self._held = (store.keep_held(text), text)
        self._count_held(text)
        if why is None:
            why = f"the turn read {self.outside}"
            log.warning("memory edit of %s held: %s", self._workspace.user_key, why)
            return HELD_OUTSIDE.format(what=self.outside)
        log.warning("memory edit of %s held: %s", self._workspace.user_key, why)
        return HELD_EDIT.format(why=why)

    def _count_held(self, text: str) -> None:
        kept, facts = kept_fact_lines(self._before or "", text)
        self.held = HeldEdit(facts - kept, facts, outside=self.outside is not None)
