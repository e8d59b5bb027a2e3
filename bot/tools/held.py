"""A turn's edits of MEMORY.md, guarded as a consolidation's are (memory.consolidation.checks).

Once they would drop more than a quarter of the facts MEMORY.md held when the turn began (text
in an uploaded file can tell a model to wipe its memory), that edit and the rest of the turn's
are not written but kept as a held version, which the person is told about and may apply with
/memory undo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memory.consolidation.checks import held_because, kept_fact_lines
from memory.workspace import Workspace

log = logging.getLogger(__name__)

HELD_EDIT = (
    "Not applied: {why} MEMORY.md held when this turn began. The edit is kept aside for the "
    "person, who is told and may apply it; MEMORY.md is unchanged. Do not try it again."
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


class TurnEdits:
    """The MEMORY.md edits of one turn of one person."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._before: str | None = None  # MEMORY.md at the turn's first edit
        self._held: tuple[Path, str] | None = None  # the held version and its text
        self.held: HeldEdit | None = None

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
